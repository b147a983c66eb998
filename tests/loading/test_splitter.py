"""Tests for ctxrag.loading.splitter: boundaries, heading paths, the exact-offset invariant, overlap, units, code mode."""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.documents import Document

from ctxrag.errors import ConfigError
from ctxrag.loading import (
    ChineseAwareSplitter,
    Chunk,
    ChunkSplitter,
    SplitMode,
    SplitUnit,
    approx_token_count,
    expand_paths,
    load_file,
)
from ctxrag.settings import ChunkingSettings

SAMPLE_CORPUS = Path(__file__).resolve().parents[2] / "examples" / "sample_corpus"

ZH_DOC = """# 星河知识库

星河知识库是一款企业知识管理软件。它由银杉科技开发！第一个版本在2021年发布？是的。产品支持私有化部署；也支持云端托管。

## 安装

安装前请确认服务器至少有8GB内存。运行安装脚本后，服务默认监听7420端口。管理员可以在配置文件中修改端口……修改后需要重启服务。

### 升级

从1.x升级前必须先导出知识库。升级过程大约需要十分钟。

## 价格

基础版每月99元。团队版每月699元。企业版单独报价。

# 常见问题

Q: Is it free? A: No. The basic plan costs 99 yuan per month. It has a 30-day trial. Support replies within one day.
"""


def check_chunks(text: str, chunks: list[Chunk], size: int, length: Callable[[str], int] = len) -> None:
    """The invariants every split must keep."""
    assert [c.index for c in chunks] == list(range(len(chunks)))
    covered = [False] * len(text)
    for chunk in chunks:
        assert text[chunk.start_index:chunk.end_index] == chunk.text
        assert chunk.text == chunk.text.strip() and chunk.text
        assert length(chunk.text) <= size, (length(chunk.text), chunk.text)
        for k in range(chunk.start_index, chunk.end_index):
            covered[k] = True
    assert all(covered[k] for k, ch in enumerate(text) if not ch.isspace()), "text lost between chunks"
    starts = [c.start_index for c in chunks]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)


@pytest.mark.parametrize(("size", "overlap"), [(30, 0), (40, 10), (60, 20), (100, 30), (400, 50), (1000, 0)])
def test_offsets_invariant_on_mixed_document(size: int, overlap: int) -> None:
    chunks = ChunkSplitter(chunk_size=size, chunk_overlap=overlap).split_text(ZH_DOC)
    check_chunks(ZH_DOC, chunks, size)


def test_chinese_sentence_boundaries() -> None:
    text = "第一句话在这里结束。第二句话带感叹号！第三句是问题吗？第四句用分号；第五句用省略号……第六句结束。"
    chunks = ChunkSplitter(chunk_size=20, chunk_overlap=0).split_text(text)
    check_chunks(text, chunks, 20)
    assert [c.text for c in chunks] == [
        "第一句话在这里结束。第二句话带感叹号！", "第三句是问题吗？第四句用分号；", "第五句用省略号……第六句结束。",
    ]


def test_english_sentences_need_following_space() -> None:
    text = "Version 2.4 is out. It costs 3.5 dollars! Really? Yes."
    chunks = ChunkSplitter(chunk_size=25, chunk_overlap=0).split_text(text)
    check_chunks(text, chunks, 25)
    assert [c.text for c in chunks] == ["Version 2.4 is out.", "It costs 3.5 dollars!", "Really? Yes."]


def test_heading_paths_and_top_level_boundaries() -> None:
    chunks = ChunkSplitter(chunk_size=80, chunk_overlap=0).split_text(ZH_DOC)
    check_chunks(ZH_DOC, chunks, 80)
    # a chunk holding several sections gets their common path ("### 升级" + "## 价格" -> "星河知识库")
    assert [c.heading_path for c in chunks] == ["星河知识库", "星河知识库 > 安装", "星河知识库", "常见问题", "常见问题"]
    assert chunks[2].text.startswith("### 升级") and "## 价格" in chunks[2].text
    small = ChunkSplitter(chunk_size=40, chunk_overlap=0).split_text(ZH_DOC)
    assert [c.heading_path for c in small if c.text.startswith("### 升级")] == ["星河知识库 > 安装 > 升级"]
    faq_start = ZH_DOC.index("# 常见问题")
    for chunk in chunks:  # no chunk spans the two top-level sections
        assert chunk.end_index <= faq_start or chunk.start_index >= faq_start
    for chunk in chunks:  # a heading never ends a chunk
        assert not re.search(r"(^|\n)#+ [^\n]*$", chunk.text)


def test_small_subsections_merge_under_common_path() -> None:
    text = "# Guide\n\n## A\n\nalpha.\n\n## B\n\nbeta.\n\n# Other\n\ngamma."
    chunks = ChunkSplitter(chunk_size=200, chunk_overlap=0).split_text(text)
    assert [(c.text, c.heading_path) for c in chunks] == [
        ("# Guide\n\n## A\n\nalpha.\n\n## B\n\nbeta.", "Guide"), ("# Other\n\ngamma.", "Other"),
    ]


def test_preamble_and_fenced_code_headings() -> None:
    text = "Preface text.\n\n# Real\n\n```python\n# not a heading\nx = 1\n```\n\nAfter."
    chunks = ChunkSplitter(chunk_size=30, chunk_overlap=0).split_text(text)
    check_chunks(text, chunks, 30)
    assert chunks[0].text == "Preface text." and chunks[0].heading_path == ""
    assert all(c.heading_path == "Real" for c in chunks[1:])


def test_overlap_is_whole_sentences_within_a_section() -> None:
    text = ("# 手册\n\n" + "".join(f"这是第{i}句，内容略长一些。" for i in range(1, 13))
            + "\n\n## 附录\n\n" + "".join(f"附录第{i}句。" for i in range(1, 6)))
    splitter = ChunkSplitter(chunk_size=60, chunk_overlap=20)
    chunks = splitter.split_text(text)
    check_chunks(text, chunks, 60)
    appendix = text.index("## 附录")
    overlaps = 0
    for prev, nxt in zip(chunks, chunks[1:]):
        if nxt.start_index < prev.end_index:
            overlaps += 1
            shared = text[nxt.start_index:prev.end_index]
            assert len(shared) <= 20
            assert text[nxt.start_index - 1] in "。\n"  # starts at a sentence boundary
            assert shared.endswith("。")
            assert not (prev.start_index < appendix <= nxt.start_index)  # never across a section start
    assert overlaps >= 3
    assert any(c.start_index == appendix for c in chunks)


def test_no_overlap_when_zero() -> None:
    chunks = ChunkSplitter(chunk_size=40, chunk_overlap=0).split_text(ZH_DOC)
    assert all(b.start_index >= a.end_index for a, b in zip(chunks, chunks[1:]))


def test_huge_sentence_without_punctuation_falls_back_to_characters() -> None:
    text = "星" * 250 + "河" * 3
    chunks = ChunkSplitter(chunk_size=100, chunk_overlap=10).split_text(text)
    check_chunks(text, chunks, 100)
    assert [len(c.text) for c in chunks] == [100, 100, 53]


def test_long_english_without_punctuation_cuts_at_spaces() -> None:
    words = [f"word{i:03d}" for i in range(60)]
    text = " ".join(words)
    chunks = ChunkSplitter(chunk_size=50, chunk_overlap=0).split_text(text)
    check_chunks(text, chunks, 50)
    for chunk in chunks:
        assert all(re.fullmatch(r"word\d{3}", w) for w in chunk.text.split(" "))


def test_clause_punctuation_before_characters() -> None:
    text = "这是一个非常长的句子，它没有句号，但是有很多逗号、顿号：还有冒号，所以应该在这些地方切开"
    chunks = ChunkSplitter(chunk_size=20, chunk_overlap=0).split_text(text)
    check_chunks(text, chunks, 20)
    assert all(c.text[-1] in "，、：" for c in chunks[:-1])


def test_tokens_unit_default_counter() -> None:
    assert approx_token_count("星河知识库 supports retrieval!") == 10
    assert approx_token_count("") == 0
    assert approx_token_count("internationalization") == 4  # 20 letters -> one per started 6
    splitter = ChunkSplitter(chunk_size=25, chunk_overlap=5, unit="tokens")
    assert splitter.unit is SplitUnit.TOKENS
    chunks = splitter.split_text(ZH_DOC)
    check_chunks(ZH_DOC, chunks, 25, approx_token_count)
    assert max(len(c.text) for c in chunks) > 25  # tokens, not characters, were limited


def test_tokens_unit_custom_length_function() -> None:
    def utf8_bytes(s: str) -> int:
        return len(s.encode("utf-8"))

    chunks = ChunkSplitter(chunk_size=60, chunk_overlap=0, unit="tokens", length_function=utf8_bytes).split_text(ZH_DOC)
    check_chunks(ZH_DOC, chunks, 60, utf8_bytes)


CODE = '''"""Module docstring."""
import os


def alpha(x):
    """Alpha."""
    y = x + 1

    return y * 2


@decorator
# explains Beta
class Beta:
    def method(self):
        return 1

    def other(self):
        return 2


def gamma():
    pass
'''


def test_code_mode_splits_at_definitions() -> None:
    splitter = ChunkSplitter(chunk_size=80, chunk_overlap=0, mode="code")
    chunks = splitter.split_text(CODE)
    check_chunks(CODE, chunks, 80)
    assert [c.heading_path for c in chunks] == ["", "def alpha", "class Beta", "class Beta", "def gamma"]
    assert chunks[1].text.startswith("def alpha(x):")
    assert chunks[2].text.startswith("@decorator\n# explains Beta\nclass Beta:")  # decorators stay with it
    assert chunks[3].text.startswith("def other(self):")
    assert chunks[4].text == "def gamma():\n    pass"


def test_code_mode_per_call_and_text_mode_difference() -> None:
    splitter = ChunkSplitter(chunk_size=80, chunk_overlap=0)
    as_code = splitter.split_text(CODE, mode=SplitMode.CODE)
    as_text = splitter.split_text(CODE, mode="text")
    check_chunks(CODE, as_text, 80)
    assert [c.text for c in as_code] != [c.text for c in as_text]
    assert any(c.text.startswith("@decorator") for c in as_code)


def test_code_mode_long_line() -> None:
    code = "x = [" + ", ".join(str(i) for i in range(100)) + "]\n"
    chunks = ChunkSplitter(chunk_size=60, chunk_overlap=0, mode="code").split_text(code)
    check_chunks(code, chunks, 60)


def test_split_documents_metadata_and_auto_code() -> None:
    docs = [Document(page_content=ZH_DOC, metadata={"source": "a.md", "file_type": "markdown"}),
            Document(page_content=CODE, metadata={"source": "b.py", "file_type": "code"})]
    splitter = ChunkSplitter(chunk_size=80, chunk_overlap=0)
    out = splitter.split_documents(docs)
    for chunk_doc in out:
        parent = docs[0] if chunk_doc.metadata["source"] == "a.md" else docs[1]
        meta = chunk_doc.metadata
        assert parent.page_content[meta["start_index"]:meta["end_index"]] == chunk_doc.page_content
        assert {"chunk_index", "heading_path", "file_type"} <= set(meta)
    code_paths = [d.metadata["heading_path"] for d in out if d.metadata["source"] == "b.py"]
    assert code_paths == ["", "def alpha", "class Beta", "class Beta", "def gamma"]
    assert [d.metadata["chunk_index"] for d in out if d.metadata["source"] == "a.md"][:3] == [0, 1, 2]
    assert list(splitter.transform_documents(docs)) == out


def test_crlf_text_keeps_paragraphs_and_offsets() -> None:
    text = "# 标题\r\n\r\n第一段。\r\n\r\n第二段。\r\n"
    chunks = ChunkSplitter(chunk_size=12, chunk_overlap=0).split_text(text)
    check_chunks(text, chunks, 12)
    assert [c.text for c in chunks] == ["# 标题\r\n\r\n第一段。", "第二段。"]


def test_empty_and_whitespace_text() -> None:
    splitter = ChunkSplitter(chunk_size=10, chunk_overlap=0)
    assert splitter.split_text("") == []
    assert splitter.split_text(" \n\n\t ") == []
    assert splitter.split_text("\n\n  x  \n") == [Chunk("x", 0, 4, 5, "")]


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"chunk_size": 0}, "chunk_size=0"),
    ({"chunk_size": -5}, "chunk_size=-5"),
    ({"chunk_size": 1.5}, "chunk_size=1.5"),
    ({"chunk_size": True}, "chunk_size=True"),
    ({"chunk_size": 100, "chunk_overlap": -1}, "chunk_overlap=-1"),
    ({"chunk_size": 100, "chunk_overlap": 100}, "chunk_overlap=100"),
    ({"chunk_size": 100, "chunk_overlap": 10, "unit": "bytes"}, "unit='bytes'"),
    ({"chunk_size": 100, "chunk_overlap": 10, "mode": "xml"}, "mode='xml'"),
    ({"chunk_size": 100, "chunk_overlap": 10, "length_function": 3}, "length_function=3"),
])
def test_invalid_options(kwargs: dict, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)) as info:
        ChunkSplitter(**kwargs)
    assert isinstance(info.value, ConfigError)


def test_invalid_mode_per_call() -> None:
    with pytest.raises(ConfigError, match="mode='pdf'"):
        ChunkSplitter(chunk_size=10, chunk_overlap=0).split_text("x", mode="pdf")


def test_from_settings_and_alias() -> None:
    splitter = ChunkSplitter.from_settings(ChunkingSettings(chunk_size=300, chunk_overlap=30, unit="tokens"))
    assert (splitter.chunk_size, splitter.chunk_overlap, splitter.unit) == (300, 30, SplitUnit.TOKENS)
    assert ChineseAwareSplitter is ChunkSplitter
    assert "chunk_size=300" in repr(splitter)


@pytest.mark.parametrize(("size", "overlap"), [(120, 20), (300, 60)])
def test_sample_corpus_invariants(size: int, overlap: int) -> None:
    files, errors = expand_paths([SAMPLE_CORPUS])
    assert files and not errors
    splitter = ChunkSplitter(chunk_size=size, chunk_overlap=overlap)
    for path in files:
        loaded = load_file(path)
        mode = "code" if loaded.metadata["file_type"] == "code" else "text"
        check_chunks(loaded.text, splitter.split_text(loaded.text, mode=mode), size)
