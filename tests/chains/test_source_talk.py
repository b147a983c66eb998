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
from ctxrag.chains.source_talk import may_open_source_talk, no_coverage_claim, source_talk, without_lead_in

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
    # the demo's port answer (`ctxrag demo`, local 1.5B): a kind of document named, the marker inside the phrase
    "This information is provided in the [1] section of the deployment guide.", "As described in the admin guide.",
    "Source: [3]", "来源：[1]", "This is stated in the support policy [1].",
])
def test_source_talk_and_every_start_of_it_is_held(sentence: str) -> None:
    assert source_talk(sentence)
    assert all(may_open_source_talk(sentence[:i]) for i in range(1, len(sentence) + 1))


@pytest.mark.parametrize("sentence", [
    "Source [2] states that the port is 7420.", "The answer is in the context of security.",
    "This is stated in source [2], which says the port is 7420.", "团队版包含 200 GB 存储空间[3]。",
    "资料中的水泵每分钟 40 升。", "",
    "See the installation guide.",  # points the reader at a document: stays
    "The guide says the port is 7420 [1].", "This is covered in the Enterprise plan [1].",
    "It is written in Rust and Go.",
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


# the demo's answers (`ctxrag demo`, local 1.5B, a fresh clone): a line repeating the question, a claim that the
# knowledge base does not cover the question after the answer to it
DEMO_DOCS = [Document("2.0 版于 2022 年 9 月 20 日发布，新增向量检索和智能问答功能；同时新增团队版套餐。"),
             Document("P1 (service down): Team 4 hours, Enterprise 30 minutes.")]
DEMO = [
    ("星河知识库 2.0 版是什么时候发布的？新增了哪些功能？",
     "2022年9月20日发布，新增向量检索和智能问答功能。\n\n新增了哪些功能？\n向量检索、智能问答、团队版套餐[1]",
     "2022年9月20日发布，新增向量检索和智能问答功能。[1]\n向量检索、智能问答、团队版套餐[1]"),
    ("How fast does Yinshan respond to a P1 incident on the Enterprise plan?",
     "Yinshan responds to P1 incidents on the Enterprise plan within 30 minutes. [2]\n\nThe knowledge base does "
     "not cover this specific question, as it only contains information about the support policy. [1]",
     "Yinshan responds to P1 incidents on the Enterprise plan within 30 minutes. [2]"),
    # before any sourced sentence the claim is the answer, and a claim about something named stays
    ("How much does the Enterprise plan cost?", "The knowledge base does not cover this question.",
     "The knowledge base does not cover this question."),
    ("How fast is a P1 answered, and what does it cost?",
     "Enterprise gets 30 minutes [2]. The documents do not cover the price.",
     "Enterprise gets 30 minutes [2]. The documents do not cover the price."),
    # a question the answer asks back, not the user's, stays
    ("星河知识库 2.0 版是什么时候发布的？", "2022年9月20日发布[1]。您想了解升级步骤吗？", "2022年9月20日发布[1]。您想了解升级步骤吗？"),
]


@pytest.mark.parametrize(("question", "reply", "expected"), DEMO)
@pytest.mark.parametrize("step", [0, 1, 4])
def test_a_repeated_question_and_a_contradicted_no_coverage_claim_are_left_out(question: str, reply: str,
                                                                               expected: str, step: int) -> None:
    if not step:
        assert checked_answer(reply, DEMO_DOCS, question) == expected
        return
    cm = CheckedMarkers(DEMO_DOCS, question)
    pieces = [cm.feed(reply[i:i + step]) for i in range(0, len(reply), step)] + [cm.close()]
    assert "".join(pieces) == expected == cm.text


def test_no_coverage_claims_in_both_languages() -> None:
    assert no_coverage_claim("The knowledge base doesn't cover this.")
    assert no_coverage_claim("知识库中没有关于这个问题的信息。")
    assert not no_coverage_claim("The documents do not cover the Enterprise price.")
    assert not no_coverage_claim("The knowledge base does not cover plans older than 2020.")


def test_the_chain_gives_the_question_to_the_marker_check() -> None:
    question, reply, expected = DEMO[0]
    model = GenericFakeChatModel(messages=iter([AIMessage(reply)] * 2))
    chain = build_rag_chain(RunnableLambda(lambda q: DEMO_DOCS), model, gate=False, evidence=False)
    assert chain.invoke(question)["answer"] == expected
    assert "".join(c.get("answer", "") for c in chain.stream(question)) == expected
