"""`ExtractiveAnswer`, the optional short-answer step of `build_rag_chain`: the prompt it sends, the source span it
answers with, the one retry, the Simplified reading; composition with fake models, and the real local GGUF."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable, RunnableLambda

from ctxrag.chains.rag import build_rag_chain
from ctxrag.chains.short_answer import ExtractiveAnswer
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings

FACTS = {
    "falcon.md": "# Falcon pumps\n\nThe Falcon-7 pump moves 40 litres per minute. It was designed in Oslo.\n",
    "xinghe.md": "# 星河知识库\n\n星河知识库的默认端口是 9321。它支持 Markdown、PDF 和 Word 文件。\n",
    "tea.md": "# Tea\n\nGreen tea should be brewed at 80 degrees Celsius for two minutes.\n",
}


@pytest.fixture
def kb(tmp_path: Path) -> KnowledgeBase:
    d = tmp_path / "docs"
    d.mkdir()
    for name, text in FACTS.items():
        (d / name).write_text(text, encoding="utf-8")
    kb = KnowledgeBase.open("rag", Settings(home=tmp_path / "h"))
    kb.ingest([d], progress=False)
    return kb


def _fake(text: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(text)] * 5))


def short_chain(retriever: Any, llm: Any, **kw: Any) -> Runnable:
    """`build_rag_chain` answering through `ExtractiveAnswer` (gate off: these tests are about the answer step)."""
    return build_rag_chain(retriever, llm, gate=False, answer=ExtractiveAnswer(llm, **kw))


def _spy_messages(kb: KnowledgeBase, question: str, **kw: Any) -> tuple[str, str]:
    seen = {}

    class Spy(GenericFakeChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kw):  # type: ignore[override]
            seen["messages"] = messages
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)

    short_chain(kb.as_retriever(mode="dense", k=1), Spy(messages=iter([AIMessage("9321 [1]")])), **kw).invoke(question)
    return seen["messages"][0].content, seen["messages"][-1].content


@pytest.mark.parametrize(("question", "cue"), [("What is the default port of Xinghe?", "only the answer itself"),
                                               ("星河知识库的默认端口是多少？", "只写答案本身"),
                                               ("星河知識庫的預設連接埠是多少？這個呢", "只寫答案本身")])
def test_short_answer_style_asks_for_the_phrase_alone(kb: KnowledgeBase, question: str, cue: str) -> None:
    system, asked = _spy_messages(kb, question, reading_script="as-written")
    assert cue in asked and "[" not in asked.split("\n")[-1].replace("[1]", "")  # no example to copy
    assert "9321" in system  # the knowledge is the same as for full answers
    assert "[n]" not in asked and "方括號" not in asked and "方括号" not in asked  # no citation asked of the model
    assert "Example" not in asked and "例：" not in asked  # the 0.5B model gave a prompt's example back as its answer


def test_short_answer_is_the_source_span_cited_by_its_chunk(kb: KnowledgeBase) -> None:
    chain = short_chain(kb.as_retriever(mode="hybrid", k=3), _fake("「9321」"))
    out = chain.invoke("星河知识库的默认端口是多少？")
    n = next(i for i, d in enumerate(out["documents"], 1) if "9321" in d.page_content)
    assert out["answer"] == f"9321 [{n}]" and out["model_answer"] == "「9321」"
    assert [s["n"] for s in out["sources"]] == [n] and "inferred" not in out["sources"][0]
    streamed = list(short_chain(kb.as_retriever(mode="hybrid", k=3), _fake("9321")).stream("星河知识库的默认端口是多少？"))
    answers = [p["answer"] for p in streamed if "answer" in p]
    assert answers == [f"9321 [{n}]"]  # held back, then sent once, snapped and cited


async def test_short_answer_streams_the_same_asynchronously(kb: KnowledgeBase) -> None:
    chain = short_chain(kb.as_retriever(mode="hybrid", k=3), _fake("9321"))
    parts = [p async for p in chain.astream("星河知识库的默认端口是多少？")]
    assert [p["answer"] for p in parts if "answer" in p] == [(await chain.ainvoke("星河知识库的默认端口是多少？"))["answer"]]
    assert any("sources" in p for p in parts) and any("documents" in p for p in parts)


def test_short_answer_drops_a_marker_the_model_wrote_anyway(kb: KnowledgeBase) -> None:
    out = short_chain(kb.as_retriever(mode="hybrid", k=3), _fake("9321[[3]]")).invoke(
        "星河知识库的默认端口是多少？")
    n = next(i for i, d in enumerate(out["documents"], 1) if "9321" in d.page_content)
    assert out["answer"] == f"9321 [{n}]" and out["model_answer"] == "9321[[3]]"


def test_short_answer_is_fitted_to_the_question() -> None:
    docs = [Document("風城市有700家工廠。"), Document("風城市有3所大學，人口排全國第7名。")]
    retriever = RunnableLambda(lambda _: docs)
    out = short_chain(retriever, _fake("3")).invoke("風城市有幾所大學？")
    assert out["answer"] == "3所 [2]" and out["model_answer"] == "3"
    out = short_chain(retriever, _fake("7")).invoke("風城市人口排全國第幾名？")
    assert out["answer"] == "第7名 [2]"  # not the 7 of 700 in the first chunk


class _Scripted(GenericFakeChatModel):
    """Answers from a list in turn and keeps the messages of every call."""

    calls: list = []

    def _generate(self, messages, stop=None, run_manager=None, **kw):  # type: ignore[no-untyped-def]
        self.calls.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)


ECHO_DOCS = [Document("童年時的寄養家庭以及性虐待的經驗，都是自殺的風險因素。")]
ECHO_Q = "童年生活的寄養家庭以及哪方面的經驗均是自殺的風險因素？"


def test_a_short_answer_echoing_the_question_is_asked_again_once() -> None:
    llm = _Scripted(messages=iter([AIMessage("寄養家庭"), AIMessage("性虐待")]), calls=[])
    out = short_chain(RunnableLambda(lambda _: ECHO_DOCS), llm,
                          reading_script="as-written").invoke(ECHO_Q)
    assert out["answer"] == "性虐待 [1]" and len(llm.calls) == 2
    assert "「寄養家庭」已經在問題裡" in llm.calls[1][-1].content and llm.calls[1][-2].content == "寄養家庭"
    read_simplified = _Scripted(messages=iter([AIMessage("寄养家庭"), AIMessage("性虐待")]), calls=[])
    out = short_chain(RunnableLambda(lambda _: ECHO_DOCS), read_simplified).invoke(ECHO_Q)
    assert out["answer"] == "性虐待 [1]" and "「寄养家庭」已经在问题里" in read_simplified.calls[1][-1].content
    stubborn = _Scripted(messages=iter([AIMessage("寄養家庭"), AIMessage("寄養家庭")]), calls=[])
    out = short_chain(RunnableLambda(lambda _: ECHO_DOCS), stubborn).invoke(ECHO_Q)
    assert out["answer"] == "寄養家庭 [1]" and len(stubborn.calls) == 2  # asked once more, never twice
    fine = _Scripted(messages=iter([AIMessage("性虐待")]), calls=[])
    short_chain(RunnableLambda(lambda _: ECHO_DOCS), fine).invoke(ECHO_Q)
    assert len(fine.calls) == 1


async def test_the_echo_retry_also_runs_asynchronously() -> None:
    llm = _Scripted(messages=iter([AIMessage("Falcon-7"), AIMessage("Oslo")]), calls=[])
    chain = short_chain(RunnableLambda(lambda _: [Document("The Falcon-7 was designed in Oslo.")]), llm)
    out = await chain.ainvoke("Where was the Falcon-7 designed?")
    assert out["answer"] == "Oslo [1]" and "is already in the question" in llm.calls[1][-1].content


def test_a_short_answer_restating_the_question_as_a_sentence_is_asked_again_once() -> None:
    docs = [Document("Dai Jitao was born in China. China carries about $1.18 trillion of US debt.")]
    question = "What is the debt load for the US carried by the country Dai Jitao is from?"
    llm = _Scripted(messages=iter([AIMessage("Dai Jitao is from China."), AIMessage("about $1.18 trillion")]), calls=[])
    out = short_chain(RunnableLambda(lambda _: docs), llm).invoke(question)
    assert out["answer"] == "about $1.18 trillion [1]" and "That repeats the question" in llm.calls[1][-1].content
    stubborn = _Scripted(messages=iter([AIMessage("Dai Jitao is from China."), AIMessage("Dai Jitao is from China.")]),
                         calls=[])
    out = short_chain(RunnableLambda(lambda _: docs), stubborn).invoke(question)
    assert out["model_answer"] == "Dai Jitao is from China." and len(stubborn.calls) == 2
    zh = _Scripted(messages=iter([AIMessage("中央革命軍事委員會副主席"), AIMessage("副主席")]), calls=[])
    out = short_chain(RunnableLambda(lambda _: [Document("周恩來任中央革命軍事委員會副主席。")]), zh, reading_script="as-written").invoke("周恩來任職中央革命軍事委員會中的哪一個職位?")
    assert out["answer"] == "副主席 [1]" and "這個回答重複了問題" in zh.calls[1][-1].content


GILA_DOCS = [Document("Sergio Tolento Hernández is a member of the National Action Party of Mexico."),
             Document("Gila monsters are found in Sonora, Arizona and parts of New Mexico.")]
GILA_Q = "Where are Gila monsters found, in the country with the political party that Sergio Tolento Hernández is in?"


def test_a_short_answer_naming_a_name_found_on_the_way_is_asked_again_once() -> None:
    """``intermediate`` (a multi-hop chain's searches): a phrase one of them holds is the chain's middle entity; it is
    asked for once more and kept as ``rejected_answer``; a phrase none holds is asked once."""
    x = {"question": GILA_Q, "documents": GILA_DOCS, "history": [],
         "intermediate": ["Mexico political party of Sergio Tolento Hernández"]}
    llm = _Scripted(messages=iter([AIMessage("Mexico"), AIMessage("Sonora")]), calls=[])
    out = ExtractiveAnswer(llm).invoke(x)
    assert out["answer"] == "Sonora [2]" and out["rejected_answer"] == "Mexico" and len(llm.calls) == 2
    assert '"Mexico" is not the answer: it is a step on the way' in llm.calls[1][-1].content
    assert llm.calls[1][-2].content == "Mexico"
    stubborn = _Scripted(messages=iter([AIMessage("Mexico"), AIMessage("Mexico")]), calls=[])
    out = ExtractiveAnswer(stubborn).invoke(x)
    assert out["model_answer"] == "Mexico" and len(stubborn.calls) == 2  # asked once more, never twice
    fine = _Scripted(messages=iter([AIMessage("Sonora")]), calls=[])
    out = ExtractiveAnswer(fine).invoke(x)
    assert out["answer"] == "Sonora [2]" and "rejected_answer" not in out and len(fine.calls) == 1
    alone = _Scripted(messages=iter([AIMessage("Mexico")]), calls=[])
    out = ExtractiveAnswer(alone).invoke({**x, "intermediate": []})  # no names given: the phrase is the answer
    assert out["model_answer"] == "Mexico" and len(alone.calls) == 1


async def test_the_intermediate_name_retry_also_runs_asynchronously() -> None:
    llm = _Scripted(messages=iter([AIMessage("墨西哥"), AIMessage("索诺拉")]), calls=[])
    out = await ExtractiveAnswer(llm).ainvoke({
        "question": "吉拉毒蜥分布在该政党所在国家的哪里？", "history": [], "intermediate": ["墨西哥的政党"],
        "documents": [Document("吉拉毒蜥分布在墨西哥的索诺拉。")]})
    assert out["answer"] == "索诺拉 [1]" and "「墨西哥」不是答案" in llm.calls[1][-1].content


def test_simplified_reading_gives_the_model_simplified_text_and_answers_with_the_traditional_span() -> None:
    docs = [Document("臺灣總督府於1919年設立臺北帝國大學的預備學校。")]
    llm = _Scripted(messages=iter([AIMessage("台北帝国大学")]), calls=[])
    out = short_chain(RunnableLambda(lambda _: docs), llm,
                          reading_script="simplified").invoke("臺灣總督府為哪一所學校設立預備學校？")
    system, asked = llm.calls[0][0].content, llm.calls[0][-1].content
    assert "台湾总督府于1919年设立台北帝国大学" in system and "臺灣" not in system
    assert asked.startswith("问题：台湾总督府为哪一所学校") and "只写答案本身" in asked  # Simplified instructions
    assert out["answer"] == "臺北帝國大學 [1]" and out["model_answer"] == "台北帝国大学"
    by_default = _Scripted(messages=iter([AIMessage("台北帝国大学")]), calls=[])
    short_chain(RunnableLambda(lambda _: docs), by_default).invoke("臺灣總督府為哪一所學校設立預備學校？")
    assert by_default.calls[0] == llm.calls[0]  # "auto": short answers read Simplified
    as_written = _Scripted(messages=iter([AIMessage("臺北帝國大學")]), calls=[])
    short_chain(RunnableLambda(lambda _: docs), as_written, reading_script="as-written").invoke(
        "臺灣總督府為哪一所學校設立預備學校？")
    full = _Scripted(messages=iter([AIMessage("臺北帝國大學 [1]")]), calls=[])  # the chain's own answer: as written
    build_rag_chain(RunnableLambda(lambda _: docs), full, gate=False).invoke("臺灣總督府為哪一所學校設立預備學校？")
    for llm_calls in (as_written.calls, full.calls):
        assert "臺灣總督府於1919年" in llm_calls[0][0].content
        assert llm_calls[0][-1].content.startswith("問題：")


def test_an_unknown_reading_script_or_language_is_rejected() -> None:
    with pytest.raises(ValueError, match="reading_script must be one of .* got 'hant'"):
        ExtractiveAnswer(_fake("x"), reading_script="hant")
    with pytest.raises(ValueError, match="lang must be .* got 'fr'"):
        ExtractiveAnswer(_fake("x"), lang="fr")


def test_the_eval_answer_styles_map_to_the_answer_step() -> None:
    from ctxrag.evaluation.answers import answer_step

    assert answer_step(_fake("x"), "full") is None
    assert isinstance(answer_step(_fake("x"), "short", "as-written"), ExtractiveAnswer)
    with pytest.raises(ValueError, match="answer_style must be one of .* got 'terse'"):
        answer_step(_fake("x"), "terse")
    with pytest.raises(ValueError, match="needs answer_style='short'"):
        answer_step(_fake("x"), "full", "simplified")


def test_short_answer_not_in_any_chunk_gets_no_citation(kb: KnowledgeBase) -> None:
    out = short_chain(kb.as_retriever(mode="dense", k=2), _fake("8080")).invoke(
        "星河知识库的默认端口是多少？")
    assert out["answer"] == "8080" and all(s.get("inferred") for s in out["sources"])


TRADITIONAL_DOCS = [Document("阿里山森林鐵路於1912年通車，全長七十一公里，沿線設有奮起湖車站。"),
                    Document("淡水紅毛城最早由西班牙人於1628年興建，後來由荷蘭人重建。")]


@pytest.mark.llm
def test_real_model_reads_a_traditional_question_in_simplified_and_answers_with_the_traditional_span(
        server_chat_model) -> None:  # noqa: ANN001
    # reading_script="auto": Simplified for short answers
    chain = short_chain(RunnableLambda(lambda _: TRADITIONAL_DOCS), server_chat_model.bind(max_tokens=32))
    out = chain.invoke("紅毛城最早是由哪國人興建的？")
    assert out["answer"] in ("西班牙人 [2]", "西班牙 [2]"), out
    out = chain.invoke("阿里山森林鐵路沿線的哪一個車站在文中被提到？")
    assert out["answer"].startswith("奮起湖") and out["answer"].endswith("[1]"), out  # the source's 奮, not 奋




@pytest.mark.llm
def test_real_model_asked_again_past_a_name_found_on_the_way_answers_what_the_question_asks(
        server_chat_model) -> None:  # noqa: ANN001
    """The local 1.5B (reply recorded in tests/llm_replies) told that its phrase "Mexico" is the multi-hop chain's
    middle entity (`SHORT_INTERMEDIATE`) answers with the state the question asks for. The first phrase is given (the
    1.5B's own wrong final answer on a MuSiQue question of this shape), so the test is about the follow-up alone."""
    model = server_chat_model.bind(max_tokens=32)

    def first_then_model(messages: list[Any]) -> Any:
        return AIMessage("Mexico") if not any(isinstance(m, AIMessage) for m in messages) else model.invoke(messages)

    out = ExtractiveAnswer(RunnableLambda(first_then_model)).invoke({
        "question": GILA_Q, "history": [], "intermediate": ["Mexico political party of Sergio Tolento Hernández"],
        "documents": [
            Document("Sergio Tolento Hernández is a Mexican politician of the National Action Party."),
            Document("The National Action Party is a conservative political party in Mexico."),
            Document("The Gila monster is a venomous lizard native to the Southwestern United States and the "
                     "northwestern Mexican state of Sonora.")]})
    assert out["rejected_answer"] == "Mexico" and "Sonora" in out["answer"], out
