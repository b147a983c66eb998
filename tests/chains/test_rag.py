"""The basic RAG chain: composition with a fake model (citations, streaming, async) and end to end with the real
local GGUF, in-process and through llama_cpp.server reached with ChatOpenAI."""
from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.documents import Document
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda

from ctxrag.chains.citations import cited_numbers, map_citations
from ctxrag.chains.rag import build_rag_chain
from ctxrag.knowledge_base import KnowledgeBase
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


def test_cited_numbers_forms() -> None:
    assert cited_numbers("a [1] b [2, 3] c [3][1] d [12]，e [4，5]") == [1, 2, 3, 12, 4, 5]
    assert cited_numbers("no citations here [x]") == []


def test_invoke_maps_citations_to_sources(kb: KnowledgeBase) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=2), _fake("It moves 40 litres per minute [1]. See [7]."))
    out = chain.invoke("How many litres per minute does the Falcon-7 pump move?")
    assert Path(out["documents"][0].metadata["source"]).name == "falcon.md"
    assert [s["n"] for s in out["sources"]] == [1]
    assert Path(out["sources"][0]["source"]).name == "falcon.md"
    assert out["sources"][0]["chunk_id"] == out["documents"][0].id
    assert out["invalid_citations"] == [7]


def test_a_figure_only_an_uncited_source_holds_adds_that_source() -> None:
    docs = [Document("P1 (service down): Team 4 hours, Enterprise 30 minutes.", metadata={"source": "support.html"}),
            Document("Extra storage: 100 GB for 30 yuan a month.", metadata={"source": "quota.py"})]
    out = map_citations("Enterprise customers get a reply to P1 incidents within 30 minutes [2].", docs)
    assert [(s["n"], s.get("inferred", False)) for s in out["sources"]] == [(2, False), (1, True)]
    ok = map_citations("Extra storage costs 30 yuan a month [2].", docs)  # the cited source holds it: nothing added
    assert [s["n"] for s in ok["sources"]] == [2]
    own = map_citations("It is fast, about 31 minutes [1].", docs)  # a figure no source holds: left alone
    assert [s["n"] for s in own["sources"]] == [1]


def test_create_retrieval_chain_keys(kb: KnowledgeBase) -> None:
    """LangChain's `create_retrieval_chain` contract: ``input`` (+ ``chat_history``) in; ``context`` and ``answer``
    out, beside our own keys."""
    from langchain_core.messages import AIMessage as AI, HumanMessage

    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=2), _fake("It moves 40 litres per minute [1]."))
    out = chain.invoke({"input": "How many litres per minute does the Falcon-7 pump move?",
                        "chat_history": [HumanMessage("hi"), AI("hello")]})
    assert out["input"] == "How many litres per minute does the Falcon-7 pump move?"
    assert out["context"] == out["documents"] and Path(out["context"][0].metadata["source"]).name == "falcon.md"
    assert out["answer"] == "It moves 40 litres per minute [1]." and [s["n"] for s in out["sources"]] == [1]
    assert "context" in chain.invoke("How many litres per minute does the Falcon-7 pump move?")
    with pytest.raises(ValueError, match="'input'"):
        chain.invoke({"input": "  "})


def test_uncited_answer_gets_inferred_sources(kb: KnowledgeBase) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), _fake("The Falcon-7 pump moves 40 litres per minute."))
    out = chain.invoke("How many litres per minute does the Falcon-7 pump move?")
    assert out["sources"] and all(s["inferred"] for s in out["sources"])
    assert Path(out["sources"][0]["source"]).name == "falcon.md"
    unrelated = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), _fake("I cannot say."))
    assert unrelated.invoke("How many litres per minute does the Falcon-7 pump move?")["sources"] == []


def test_stream_yields_answer_then_sources(kb: KnowledgeBase) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="dense", k=2), _fake("端口是 9321 [1]。"))
    chunks = list(chain.stream("星河知识库的默认端口是多少？"))
    answer = "".join(c["answer"] for c in chunks if "answer" in c)
    assert answer == "端口是 9321 [1]。"
    assert sum(1 for c in chunks if "answer" in c) > 1  # streamed in pieces, not one blob
    assert "sources" in chunks[-1] and Path(chunks[-1]["sources"][0]["source"]).name == "xinghe.md"


async def test_async_stream(kb: KnowledgeBase) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="bm25", k=2), _fake("80 degrees [1]"))
    chunks = [c async for c in chain.astream("What temperature for green tea?")]
    assert "".join(c.get("answer", "") for c in chunks) == "80 degrees [1]"
    assert Path(chunks[-1]["sources"][0]["source"]).name == "tea.md"
    out = await chain.ainvoke("What temperature for green tea?")
    assert out["answer"] == "80 degrees [1]"


def test_empty_question_is_rejected(kb: KnowledgeBase) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="dense", k=2), _fake("x"))
    with pytest.raises(ValueError, match="non-empty 'question'"):
        chain.invoke("   ")


def test_prompt_is_chinese_for_chinese_question(kb: KnowledgeBase) -> None:
    seen = {}

    class Spy(GenericFakeChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kw):  # type: ignore[override]
            seen["messages"] = messages
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)

    chain = build_rag_chain(kb.as_retriever(mode="dense", k=1), Spy(messages=iter([AIMessage("好 [1]")])))
    chain.invoke("星河知识库的默认端口是多少？")
    system, question = seen["messages"][0].content, seen["messages"][-1].content
    assert "资料" in system and "9321" in system and question.startswith("问题：")


def _spy_messages(kb: KnowledgeBase, question: str, **chain_kw: object) -> tuple[str, str]:
    seen = {}

    class Spy(GenericFakeChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kw):  # type: ignore[override]
            seen["messages"] = messages
            return super()._generate(messages, stop=stop, run_manager=run_manager, **kw)

    chain = build_rag_chain(kb.as_retriever(mode="dense", k=1), Spy(messages=iter([AIMessage("9321 [1]")])),
                            **chain_kw)
    chain.invoke(question)
    return seen["messages"][0].content, seen["messages"][-1].content


def test_traditional_chinese_question_gets_traditional_instructions(kb: KnowledgeBase) -> None:
    _, question = _spy_messages(kb, "星河知識庫的預設連接埠是多少？這個問題請回答。")
    assert question.startswith("問題：") and "請用繁體中文" in question and "方括號標註" in question
    _, simplified = _spy_messages(kb, "星河知识库的默认端口是多少？")
    assert simplified.startswith("问题：") and "请用中文" in simplified


@pytest.mark.parametrize(("question", "cue"), [("What is the default port of Xinghe?", "only the answer itself"),
                                               ("星河知识库的默认端口是多少？", "只写答案本身"),
                                               ("星河知識庫的預設連接埠是多少？這個呢", "只寫答案本身")])
def test_short_answer_style_asks_for_the_phrase_alone(kb: KnowledgeBase, question: str, cue: str) -> None:
    system, asked = _spy_messages(kb, question, answer_style="short", reading_script="as-written")
    assert cue in asked and "[" not in asked.split("\n")[-1].replace("[1]", "")  # no example to copy
    assert "9321" in system  # the knowledge is the same as for full answers
    assert "[n]" not in asked and "方括號" not in asked and "方括号" not in asked  # no citation asked of the model
    assert "Example" not in asked and "例：" not in asked  # the 0.5B model gave a prompt's example back as its answer


def test_short_answer_is_the_source_span_cited_by_its_chunk(kb: KnowledgeBase) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), _fake("「9321」"), answer_style="short")
    out = chain.invoke("星河知识库的默认端口是多少？")
    n = next(i for i, d in enumerate(out["documents"], 1) if "9321" in d.page_content)
    assert out["answer"] == f"9321 [{n}]" and out["model_answer"] == "「9321」"
    assert [s["n"] for s in out["sources"]] == [n] and "inferred" not in out["sources"][0]
    streamed = list(build_rag_chain(kb.as_retriever(mode="hybrid", k=3), _fake("9321"),
                                    answer_style="short").stream("星河知识库的默认端口是多少？"))
    answers = [p["answer"] for p in streamed if "answer" in p]
    assert answers == [f"9321 [{n}]"]  # held back, then sent once, snapped and cited


async def test_short_answer_streams_the_same_asynchronously(kb: KnowledgeBase) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), _fake("9321"), answer_style="short")
    parts = [p async for p in chain.astream("星河知识库的默认端口是多少？")]
    assert [p["answer"] for p in parts if "answer" in p] == [(await chain.ainvoke("星河知识库的默认端口是多少？"))["answer"]]
    assert any("sources" in p for p in parts) and any("documents" in p for p in parts)


def test_short_answer_drops_a_marker_the_model_wrote_anyway(kb: KnowledgeBase) -> None:
    out = build_rag_chain(kb.as_retriever(mode="hybrid", k=3), _fake("9321[[3]]"), answer_style="short").invoke(
        "星河知识库的默认端口是多少？")
    n = next(i for i, d in enumerate(out["documents"], 1) if "9321" in d.page_content)
    assert out["answer"] == f"9321 [{n}]" and out["model_answer"] == "9321[[3]]"


def test_short_answer_is_fitted_to_the_question() -> None:
    docs = [Document("風城市有700家工廠。"), Document("風城市有3所大學，人口排全國第7名。")]
    retriever = RunnableLambda(lambda _: docs)
    out = build_rag_chain(retriever, _fake("3"), answer_style="short").invoke("風城市有幾所大學？")
    assert out["answer"] == "3所 [2]" and out["model_answer"] == "3"
    out = build_rag_chain(retriever, _fake("7"), answer_style="short").invoke("風城市人口排全國第幾名？")
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
    out = build_rag_chain(RunnableLambda(lambda _: ECHO_DOCS), llm, answer_style="short",
                          reading_script="as-written").invoke(ECHO_Q)
    assert out["answer"] == "性虐待 [1]" and len(llm.calls) == 2
    assert "「寄養家庭」已經在問題裡" in llm.calls[1][-1].content and llm.calls[1][-2].content == "寄養家庭"
    read_simplified = _Scripted(messages=iter([AIMessage("寄养家庭"), AIMessage("性虐待")]), calls=[])
    out = build_rag_chain(RunnableLambda(lambda _: ECHO_DOCS), read_simplified, answer_style="short").invoke(ECHO_Q)
    assert out["answer"] == "性虐待 [1]" and "「寄养家庭」已经在问题里" in read_simplified.calls[1][-1].content
    stubborn = _Scripted(messages=iter([AIMessage("寄養家庭"), AIMessage("寄養家庭")]), calls=[])
    out = build_rag_chain(RunnableLambda(lambda _: ECHO_DOCS), stubborn, answer_style="short").invoke(ECHO_Q)
    assert out["answer"] == "寄養家庭 [1]" and len(stubborn.calls) == 2  # asked once more, never twice
    fine = _Scripted(messages=iter([AIMessage("性虐待")]), calls=[])
    build_rag_chain(RunnableLambda(lambda _: ECHO_DOCS), fine, answer_style="short").invoke(ECHO_Q)
    assert len(fine.calls) == 1


async def test_the_echo_retry_also_runs_asynchronously() -> None:
    llm = _Scripted(messages=iter([AIMessage("Falcon-7"), AIMessage("Oslo")]), calls=[])
    chain = build_rag_chain(RunnableLambda(lambda _: [Document("The Falcon-7 was designed in Oslo.")]), llm,
                            answer_style="short")
    out = await chain.ainvoke("Where was the Falcon-7 designed?")
    assert out["answer"] == "Oslo [1]" and "is already in the question" in llm.calls[1][-1].content


def test_a_short_answer_restating_the_question_as_a_sentence_is_asked_again_once() -> None:
    docs = [Document("Dai Jitao was born in China. China carries about $1.18 trillion of US debt.")]
    question = "What is the debt load for the US carried by the country Dai Jitao is from?"
    llm = _Scripted(messages=iter([AIMessage("Dai Jitao is from China."), AIMessage("about $1.18 trillion")]), calls=[])
    out = build_rag_chain(RunnableLambda(lambda _: docs), llm, answer_style="short").invoke(question)
    assert out["answer"] == "about $1.18 trillion [1]" and "That repeats the question" in llm.calls[1][-1].content
    stubborn = _Scripted(messages=iter([AIMessage("Dai Jitao is from China."), AIMessage("Dai Jitao is from China.")]),
                         calls=[])
    out = build_rag_chain(RunnableLambda(lambda _: docs), stubborn, answer_style="short").invoke(question)
    assert out["model_answer"] == "Dai Jitao is from China." and len(stubborn.calls) == 2
    zh = _Scripted(messages=iter([AIMessage("中央革命軍事委員會副主席"), AIMessage("副主席")]), calls=[])
    out = build_rag_chain(RunnableLambda(lambda _: [Document("周恩來任中央革命軍事委員會副主席。")]), zh,
                          answer_style="short", reading_script="as-written").invoke("周恩來任職中央革命軍事委員會中的哪一個職位?")
    assert out["answer"] == "副主席 [1]" and "這個回答重複了問題" in zh.calls[1][-1].content


def test_simplified_reading_gives_the_model_simplified_text_and_answers_with_the_traditional_span() -> None:
    docs = [Document("臺灣總督府於1919年設立臺北帝國大學的預備學校。")]
    llm = _Scripted(messages=iter([AIMessage("台北帝国大学")]), calls=[])
    out = build_rag_chain(RunnableLambda(lambda _: docs), llm, answer_style="short",
                          reading_script="simplified").invoke("臺灣總督府為哪一所學校設立預備學校？")
    system, asked = llm.calls[0][0].content, llm.calls[0][-1].content
    assert "台湾总督府于1919年设立台北帝国大学" in system and "臺灣" not in system
    assert asked.startswith("问题：台湾总督府为哪一所学校") and "只写答案本身" in asked  # Simplified instructions
    assert out["answer"] == "臺北帝國大學 [1]" and out["model_answer"] == "台北帝国大学"
    by_default = _Scripted(messages=iter([AIMessage("台北帝国大学")]), calls=[])
    build_rag_chain(RunnableLambda(lambda _: docs), by_default, answer_style="short").invoke("臺灣總督府為哪一所學校設立預備學校？")
    assert by_default.calls[0] == llm.calls[0]  # "auto": short answers read Simplified
    for style, script in (("short", "as-written"), ("full", "auto")):  # full answers are read as written
        as_written = _Scripted(messages=iter([AIMessage("臺北帝國大學")]), calls=[])
        build_rag_chain(RunnableLambda(lambda _: docs), as_written, answer_style=style,
                        reading_script=script).invoke("臺灣總督府為哪一所學校設立預備學校？")
        assert "臺灣總督府於1919年" in as_written.calls[0][0].content
        assert as_written.calls[0][-1].content.startswith("問題：")


def test_simplified_reading_needs_short_answers_and_a_known_script() -> None:
    with pytest.raises(ValueError, match="needs answer_style='short'"):
        build_rag_chain(RunnableLambda(lambda _: []), _fake("x"), reading_script="simplified")
    with pytest.raises(ValueError, match="reading_script must be one of .* got 'hant'"):
        build_rag_chain(RunnableLambda(lambda _: []), _fake("x"), answer_style="short", reading_script="hant")


def test_short_answer_not_in_any_chunk_gets_no_citation(kb: KnowledgeBase) -> None:
    out = build_rag_chain(kb.as_retriever(mode="dense", k=2), _fake("8080"), answer_style="short").invoke(
        "星河知识库的默认端口是多少？")
    assert out["answer"] == "8080" and all(s.get("inferred") for s in out["sources"])


def test_unknown_answer_style_is_rejected(kb: KnowledgeBase) -> None:
    with pytest.raises(ValueError, match="answer_style must be one of"):
        build_rag_chain(kb.as_retriever(mode="dense", k=1), _fake("x"), answer_style="terse")


@pytest.mark.llm
def test_real_local_model_in_process(kb: KnowledgeBase, local_chat_model) -> None:
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=2), local_chat_model.bind(max_tokens=48))
    out = chain.invoke("How many litres per minute does the Falcon-7 pump move?")
    assert "40" in out["answer"], out["answer"]
    assert out["invalid_citations"] == [] or all(n > 2 for n in out["invalid_citations"])
    for s in out["sources"]:
        assert s["chunk_id"] in {d.id for d in out["documents"]}


TRADITIONAL_DOCS = [Document("阿里山森林鐵路於1912年通車，全長七十一公里，沿線設有奮起湖車站。"),
                    Document("淡水紅毛城最早由西班牙人於1628年興建，後來由荷蘭人重建。")]


@pytest.mark.llm
def test_real_model_reads_a_traditional_question_in_simplified_and_answers_with_the_traditional_span(
        local_chat_model) -> None:  # noqa: ANN001
    chain = build_rag_chain(RunnableLambda(lambda _: TRADITIONAL_DOCS), local_chat_model.bind(max_tokens=32),
                            answer_style="short")  # reading_script="auto": Simplified for short answers
    out = chain.invoke("紅毛城最早是由哪國人興建的？")
    assert out["answer"] in ("西班牙人 [2]", "西班牙 [2]"), out
    out = chain.invoke("阿里山森林鐵路沿線的哪一個車站在文中被提到？")
    assert out["answer"].startswith("奮起湖") and out["answer"].endswith("[1]"), out  # the source's 奮, not 奋


@pytest.mark.llm
def test_real_local_model_through_openai_compatible_server(kb: KnowledgeBase, llama_server_url: str) -> None:
    from ctxrag.models.chat import chat_openai_compatible

    llm = chat_openai_compatible(base_url=llama_server_url, model="local", api_key="not-needed", temperature=0, max_tokens=48)
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=2), llm)
    pieces = list(chain.stream("星河知识库的默认端口是多少？"))
    answer = "".join(p.get("answer", "") for p in pieces)
    assert "9321" in answer, answer
    assert "sources" in pieces[-1]
