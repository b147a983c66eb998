"""Language detection and the token estimate."""
from __future__ import annotations

import pytest

from ctxrag.text import count_cjk, detect_kind, detect_language, estimate_tokens, is_traditional_chinese


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("使用LangChain和FAISS构建检索增强生成系统", "zh"),
        ("公司2023年的营收增长了3%。", "zh"),
        ("The company's revenue grew 3% in 2023.", "en"),
        ("Meeting with 张伟 about the quarterly revenue figures and the budget.", "en"),
        ("fn main() { println!(\"hi\"); }", "en"),
        ("", "en"),
        ("12345 !!!", "en"),
    ],
)
def test_detect_language(text: str, lang: str) -> None:
    assert detect_language(text) == lang


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("What is the purpose of the DiffExecutor struct?", "code"),
        ("How do I create a new `OomObserver`?", "code"),
        ("What happens in the run_target method?", "code"),
        ("What do SIGNALS_PTR and std::mem hold?", "code"),
        ("When is setup() called?", "code"),
        ("How does the harness closure work?", "en"),
        ("Who founded the city where the U.S. Open is held in 2019?", "en"),
        ("", "en"),
        ("DiffExecutor 是做什么的？", "zh"),
    ],
)
def test_detect_kind(text: str, kind: str) -> None:
    assert detect_kind(text) == kind


def test_estimate_tokens() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    assert estimate_tokens("中文abcd") == 3
    assert estimate_tokens("abcdef", chars_per_token=2) == 3
    assert count_cjk("日本語のテキスト and 한국어") == 11


@pytest.mark.parametrize(
    ("text", "traditional"),
    [
        ("臺灣的首都在哪裡？", True),
        ("《戰爭與和平》的作者是誰？", True),
        ("团队版包含多少存储空间？", False),
        ("星河知识库 2.0 版是什么时候发布的？", False),
        ("", False),
        ("Only English here.", False),
    ],
)
def test_traditional_chinese_detection(text: str, traditional: bool) -> None:
    assert is_traditional_chinese(text) is traditional
