"""An answer's `[n]` markers are the sources listed with it: the rewrite sentence by sentence (whole and streamed in
any cut), and through the RAG chain (invoke, stream, astream) and the assistant's RAG route."""
from __future__ import annotations

import asyncio

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda

from ctxrag.chains.checked_markers import CheckedMarkers, checked_answer, marker_numbers
from ctxrag.chains.citations import map_citations
from ctxrag.chains.rag import build_rag_chain

DOCS = [Document("The office opens at 9 in the morning.", metadata={"source": "office.md", "chunk_id": "o:0"}),
        Document("The default port is 7420. Change it in xinghe.toml.",
                 metadata={"source": "port.md", "chunk_id": "p:0"}),
        Document("星河知识库的默认端口是 7420。", metadata={"source": "zh.md", "chunk_id": "z:0"})]

CASES = [
    ("", ""),
    ("The default port is 7420 [2].", "The default port is 7420 [2]."),                      # right: unchanged
    ("The default port is 7420 [1].", "The default port is 7420 [2]."),                      # wrong number
    ("The default port is 7420 [1, 2].", "The default port is 7420 [2]."),                   # one of two wrong
    ("The default port is 7420.", "The default port is 7420. [2]"),                          # none: added after it
    ("默认端口是 7420。[1]", "默认端口是 7420。[3]"),
    ("See [here]([2]) for the port 7420.", "See here [2] for the port 7420."),                # Markdown link marker
    ("The port is 7420 [2]. The moon is made of cheese [1].", "The port is 7420 [2]. The moon is made of cheese."),
    ("[1] The default port is 7420. [2] The office opens at 9.",
     "[2] The default port is 7420. [1] The office opens at 9."),                             # markers as labels
    ("The port is 7420 [9]. Read `items[1]` in code.", "The port is 7420 [2]. Read `items[1]` in code."),  # code
    ("Set the port 7420 [2]:\n```\nport = ports[1]\n```\n", "Set the port 7420 [2]:\n```\nport = ports[1]\n```\n"),
    ("The office opens at 9 [2]. The default port is 7420 [1].",
     "The office opens at 9 [1]. The default port is 7420 [2]."),                              # swapped numbers
    # labels: a sentence the label in force covers gets none; a blank line ends a label; a list item's after its bullet
    ("[2] The default port is 7420. Change it in xinghe.toml. [1] The office opens at 9.",
     "[2] The default port is 7420. Change it in xinghe.toml. [1] The office opens at 9."),
    ("[2] The default port is 7420:\n- 7420 by default\n- change it in xinghe.toml",
     "[2] The default port is 7420:\n- 7420 by default\n- change it in xinghe.toml"),
    ("[2] The default port is 7420.\n\nChange it in xinghe.toml.",
     "[2] The default port is 7420.\n\n[2] Change it in xinghe.toml."),
    ("[2] The default port is 7420.\n- The office opens at 9 in the morning.",
     "[2] The default port is 7420.\n- [1] The office opens at 9 in the morning."),
    ("[1] The default port is 7420. Change it in xinghe.toml.", "[2] The default port is 7420. Change it in xinghe.toml."),
]


@pytest.mark.parametrize(("answer", "expected"), CASES)
def test_each_sentence_cites_what_the_check_keeps(answer: str, expected: str) -> None:
    assert checked_answer(answer, DOCS) == expected
    assert marker_numbers(expected) == [s["n"] for s in map_citations(answer, DOCS)["sources"]]


@pytest.mark.parametrize(("answer", "expected"), CASES)
@pytest.mark.parametrize("step", [1, 2, 5])
def test_streamed_in_any_cut_the_text_is_the_same(answer: str, expected: str, step: int) -> None:
    cm = CheckedMarkers(DOCS)
    pieces = [cm.feed(answer[i:i + step]) for i in range(0, len(answer), step)] + [cm.close()]
    assert "".join(pieces) == expected == cm.text and cm.model_text == answer


def test_text_before_a_marker_streams_at_once() -> None:
    cm = CheckedMarkers(DOCS)
    assert cm.feed("The default port is 7420 ") == "The default port is 7420"
    assert cm.feed("[1") == "" and cm.feed("]") == ""  # held until the sentence is complete
    assert cm.feed(". Next") == " [2]. Next"


def _chain(reply: str):  # noqa: ANN202
    model = GenericFakeChatModel(messages=iter([AIMessage(reply)] * 3))
    return build_rag_chain(RunnableLambda(lambda q: DOCS), model, gate=False, evidence=False)


WRONG = "The default port is 7420 [1]. Details are [here]([1])."


def _agrees(out: dict) -> None:  # noqa: ANN001
    assert marker_numbers(out["answer"]) == [s["n"] for s in out["sources"]], (out["answer"], out["sources"])
    assert "](" not in out["answer"]


def test_the_chain_answer_cites_exactly_its_sources() -> None:
    out = _chain(WRONG).invoke("What is the default port?")
    assert out["answer"] == "The default port is 7420 [2]. Details are here." and out["answer_as_written"] == WRONG
    _agrees(out)
    assert out["citations"][0]["status"] == "corrected"  # the model's own citation, as it wrote it, is checked


def test_streamed_and_async_answers_agree_with_their_sources() -> None:
    chunks = list(_chain(WRONG).stream("What is the default port?"))
    streamed = {"answer": "".join(c.get("answer", "") for c in chunks),
                "sources": next(c["sources"] for c in chunks if "sources" in c)}
    _agrees(streamed)

    async def collect() -> dict:
        out: dict = {}
        async for c in _chain(WRONG).astream("What is the default port?"):
            out["answer"] = out.get("answer", "") + c.get("answer", "")
            out.update({k: v for k, v in c.items() if k != "answer"})
        return out

    out = asyncio.run(collect())
    _agrees(out)
    assert out["answer"] == streamed["answer"]


def test_the_assistants_rag_route_answers_with_checked_markers(sample_kb) -> None:  # noqa: ANN001
    from assistant_helpers import ScriptedChat

    from ctxrag.chains.assistant import Assistant
    from ctxrag.chains.router import Route, RouteDecision

    class AlwaysRag:
        def route(self, question, selected=None, history=None):  # noqa: ANN001, ANN201
            return RouteDecision(Route.RAG, 1.0, "fixed", "test")

    model = ScriptedChat.of("部署指南说默认端口是 7420 [4]。", "部署指南说默认端口是 7420 [4]。")
    assistant = Assistant(sample_kb, model, router=AlwaysRag(), rewrite=False, evidence=False,
                          relevance_margin=-1.0, k=4)
    out = assistant.invoke({"question": "星河知识库的默认端口是多少？"})
    assert out["route"] == "rag" and out["answer_as_written"] == "部署指南说默认端口是 7420 [4]。"
    _agrees(out)
    holder = [i for i, d in enumerate(out["documents"], 1) if "7420" in d.page_content]
    assert out["sources"] and all(s["n"] in holder for s in out["sources"])
    chunks = assistant.stream({"question": "星河知识库的默认端口是多少？"})
    assert "".join(c.get("answer", "") for c in chunks) == out["answer"]
