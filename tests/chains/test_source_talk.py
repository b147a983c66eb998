"""Sentences that only talk about the sources are left out of an answer, lead-ins naming them are cut, sentences with
facts stay: on replies the local model wrote (recorded under tests/llm_replies/ and in a DRCD run of
bench/bench_answer_focus.py), whole and streamed in any cut alike, and through the RAG chain with its sources."""
from __future__ import annotations

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda

from ctxrag.chains.checked_markers import CheckedMarkers, checked_answer, marker_numbers
from ctxrag.chains.rag import build_rag_chain
from ctxrag.chains.source_talk import may_open_source_talk, source_talk, without_lead_in

DOCS = [Document("P1 (service down): Team 4 hours, Enterprise 30 minutes.", metadata={"source": "support.html"}),
        Document("The Falcon-7 pump moves 40 litres per minute. It was designed in Oslo.",
                 metadata={"source": "falcon.md"}),
        Document("团队版每月 99 元，包含 200 GB 存储空间，最多 20 个用户。", metadata={"source": "pricing.md"})]

# (the model's reply, the answer given out); the first two are recorded replies of the local 1.5B
# (tests/llm_replies/6913cca10a...json and 732d34e1ed...json)
CASES = [
    ("The Enterprise customer gets an answer to a P1 incident in 30 minutes. This is stated in source [2].",
     "The Enterprise customer gets an answer to a P1 incident in 30 minutes. [1]"),
    ("The Falcon-7 pump moves 40 litres per minute. This information is provided in the source [1].",
     "The Falcon-7 pump moves 40 litres per minute. [2]"),
    ("This is stated in the [2] source, which provides details about the pump. The Falcon-7 moves 40 litres per "
     "minute [2].", "The Falcon-7 moves 40 litres per minute [2]."),
    ("根据资料[3]，团队版包含 200 GB 存储空间。", "团队版包含 200 GB 存储空间。[3]"),
    ("团队版包含 200 GB 存储空间[3]。以上信息来自资料[3]。", "团队版包含 200 GB 存储空间[3]。"),
    ("团队版每月 99 元[3]。这在资料[3]中有说明。", "团队版每月 99 元[3]。"),
    ("According to source [2], the Falcon-7 pump moves 40 litres per minute.",
     "The Falcon-7 pump moves 40 litres per minute. [2]"),
    # facts about a source stay
    ("Source [2] states that the Falcon-7 pump moves 40 litres per minute.",
     "Source [2] states that the Falcon-7 pump moves 40 litres per minute."),
    ("The Falcon-7 pump was designed in Oslo [2].", "The Falcon-7 pump was designed in Oslo [2]."),
    ("这个版本最多 20 个用户[3]。", "这个版本最多 20 个用户[3]。"),  # opens like source talk: held, kept
]


@pytest.mark.parametrize(("reply", "expected"), CASES)
def test_source_talk_is_left_out_and_facts_stay(reply: str, expected: str) -> None:
    assert checked_answer(reply, DOCS) == expected


@pytest.mark.parametrize(("reply", "expected"), CASES)
@pytest.mark.parametrize("step", [1, 3, 7])
def test_streamed_in_any_cut_is_the_whole_answer(reply: str, expected: str, step: int) -> None:
    cm = CheckedMarkers(DOCS)
    pieces = [cm.feed(reply[i:i + step]) for i in range(0, len(reply), step)] + [cm.close()]
    assert "".join(pieces) == expected == cm.text and cm.model_text == reply


@pytest.mark.parametrize("sentence", [
    "This is stated in source [2].", "This information is provided in the source [1].",
    "It is mentioned in the documents.", "See source [2].", "The source provides this information.",
    "以上信息来自资料[1]。", "这在资料[2]中有说明。", "资料[1]提供了相关信息。", "根据资料[1]。", "详见资料[3]。",
])
def test_source_talk_and_every_start_of_it_is_held(sentence: str) -> None:
    assert source_talk(sentence)
    assert all(may_open_source_talk(sentence[:i]) for i in range(1, len(sentence) + 1))


@pytest.mark.parametrize("sentence", [
    "Source [2] states that the port is 7420.", "The answer is in the context of security.",
    "This is stated in source [2], which says the port is 7420.", "团队版包含 200 GB 存储空间[3]。",
    "资料中的水泵每分钟 40 升。", "",
])
def test_sentences_with_facts_are_not_source_talk(sentence: str) -> None:
    assert not source_talk(sentence)


def test_a_lead_in_is_cut_only_before_facts() -> None:
    assert without_lead_in("根据资料[1]，团队版包含 200 GB。") == "团队版包含 200 GB。"
    assert without_lead_in("根据资料[1]，") == "根据资料[1]，"
    assert without_lead_in("According to the sources, the API key is secret.") == "The API key is secret."
    assert without_lead_in("The pump moves 40 litres.") == "The pump moves 40 litres."


def test_a_sentence_opening_otherwise_streams_at_once() -> None:
    cm = CheckedMarkers(DOCS)
    assert cm.feed("The Falcon-7 pump moves ") == "The Falcon-7 pump moves"
    cm = CheckedMarkers(DOCS)
    assert cm.feed("This is stated ") == ""  # may be source talk: held until the sentence is complete


def test_the_chain_lists_only_the_sources_its_answer_cites() -> None:
    reply = CASES[0][0]
    model = GenericFakeChatModel(messages=iter([AIMessage(reply)] * 2))
    chain = build_rag_chain(RunnableLambda(lambda q: DOCS), model, gate=False, evidence=False)
    out = chain.invoke("How fast does an Enterprise customer get an answer to a P1 incident?")
    assert out["answer"] == CASES[0][1] and out["answer_as_written"] == reply
    assert marker_numbers(out["answer"]) == [s["n"] for s in out["sources"]] == [1]
    chunks = list(chain.stream("How fast does an Enterprise customer get an answer to a P1 incident?"))
    assert "".join(c.get("answer", "") for c in chunks) == out["answer"]
