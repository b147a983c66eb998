"""`MultiHopAnswer`: iterative retrieval over a real BM25 retriever with fake chat models (what each hop retrieves,
shows and keeps; when the loop stops; the ask chain's output shape), and the real local model on a two-hop question."""
from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult

from ctxrag.chains.ask import RagAnswer
from ctxrag.chains.multihop import BRIDGE_MIN_HOPS, MultiHopAnswer, resolve
from ctxrag.retrievers.bm25 import BM25Retriever
from ctxrag.retrievers.fusion import FusionRetriever

PASSAGES = [
    Document("Hollow Crown\nHollow Crown is a 1998 song by the singer Mara Velt.", id="song"),
    Document("Mara Velt\nMara Velt is a Danish singer. She was born in Aarhus in 1961.", id="singer"),
    Document("Aarhus\nAarhus is the second-largest city of Denmark.", id="city"),
    Document("Tea\nGreen tea is brewed at 80 degrees Celsius.", id="tea"),
]
QUESTION = "In which year was the singer of Hollow Crown born?"


class RecordingChat(GenericFakeChatModel):
    """Replies in order, keeping the messages of every call."""

    seen: list[list[BaseMessage]] = []

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def _chat(*replies: dict[str, str] | str) -> RecordingChat:
    texts = [r if isinstance(r, str) else json.dumps(r) for r in replies]
    return RecordingChat(messages=iter([AIMessage(t) for t in texts]), seen=[])


@pytest.fixture
def retriever() -> BM25Retriever:
    return BM25Retriever.from_documents(PASSAGES, tokenizer="english", k=2)


def test_second_hop_retrieves_for_the_sub_question_and_keeps_the_fact(retriever: BM25Retriever) -> None:
    llm = _chat({"fact": "Hollow Crown is sung by Mara Velt.", "answer": "",
                 "next_question": "When was Mara Velt born?"},
                {"fact": "Mara Velt was born in 1961.", "answer": "1961", "next_question": ""})
    out = MultiHopAnswer(retriever, llm, max_hops=3, passages_per_hop=1).invoke(QUESTION)
    assert [h["query"] for h in out["hops"]] == [QUESTION, "When was Mara Velt born?"]
    assert [h["read"] for h in out["hops"]] == [[1], [2]]
    assert out["answer"] == "1961 [2]" and out["supported"] is True and out["route"] == "rag"
    assert [d.id for d in out["documents"]] == ["song", "singer"]
    assert out["sources"][0]["n"] == 2
    second = llm.seen[1][-1].content
    assert "Hollow Crown is sung by Mara Velt." in second            # the fact kept from hop 1
    assert "1998 song" not in second                  # hop 1's passage, retrieved again, is not shown again
    assert "born in Aarhus in 1961" in second


def test_an_answer_from_memory_does_not_stop_the_loop_and_its_fact_is_not_kept(retriever: BM25Retriever) -> None:
    """The first hop's passages name no singer's birth: the model's "1974" is in no passage, so the loop goes on,
    retrieving for the made-up fact (it names the singer), and the fact is not shown as found."""
    llm = _chat({"fact": "Mara Velt was born in 1974.", "answer": "1974", "next_question": ""},
                {"fact": "Mara Velt was born in 1961.", "answer": "1961", "next_question": ""})
    out = MultiHopAnswer(retriever, llm, max_hops=3, passages_per_hop=1).invoke(QUESTION)
    first, second = out["hops"]
    assert first["kept"] is False and second["query"] == "Mara Velt was born in 1974. 1974" and second["kept"] is True
    assert "1974" not in llm.seen[1][-1].content and out["answer"] == "1961 [2]" and out["supported"] is True


def test_output_has_the_ask_chains_shape_plus_hops(retriever: BM25Retriever) -> None:
    llm = _chat({"fact": "x", "answer": "Mara Velt", "next_question": ""})
    out = MultiHopAnswer(retriever, llm, min_hops=1).invoke({"question": QUESTION})
    typed = RagAnswer.from_output(out)
    assert typed.answer.startswith("Mara Velt") and typed.supported is True and typed.sources
    assert len(out["hops"]) == 1 and out["hops"][0]["answer"] == "Mara Velt" and out["model_answer"] == "Mara Velt"


def test_stops_after_max_hops_with_the_last_hops_answer(retriever: BM25Retriever) -> None:
    llm = _chat({"fact": "a", "answer": "", "next_question": "Who is Mara Velt?"},
                {"fact": "b", "answer": "Aarhus"})
    out = MultiHopAnswer(retriever, llm, max_hops=2).invoke(QUESTION)
    assert len(out["hops"]) == 2 and out["model_answer"] == "Aarhus"
    assert "best answer" in llm.seen[1][-1].content and "next_question" not in llm.seen[1][-1].content


def test_an_answer_before_min_hops_is_not_taken(retriever: BM25Retriever) -> None:
    """The first passage holds "1998" (the song's year, not the singer's birth): not taken at hop 1 of 2."""
    llm = _chat({"fact": "Hollow Crown is a 1998 song by the singer Mara Velt.", "next_question": "", "answer": "1998"},
                {"fact": "She was born in Aarhus in 1961.", "next_question": "", "answer": "1961"})
    out = MultiHopAnswer(retriever, llm, passages_per_hop=1).invoke(QUESTION)
    assert len(out["hops"]) == 2 and out["model_answer"] == "1961" and out["hops"][0]["answer"] == "1998"
    once = MultiHopAnswer(retriever, _chat({"fact": "", "next_question": "", "answer": "1998"}), min_hops=1,
                          passages_per_hop=1).invoke(QUESTION)
    assert len(once["hops"]) == 1 and once["answer"] == "1998 [1]"


def test_a_sub_question_asked_before_ends_the_loop_with_the_best_answer_from_the_facts(
        retriever: BM25Retriever) -> None:
    llm = _chat({"fact": "Mara Velt was born in 1961.", "answer": "", "next_question": QUESTION.upper()},
                {"fact": "", "answer": "1961"})
    out = MultiHopAnswer(retriever, llm, max_hops=3).invoke(QUESTION)
    assert [h["query"] for h in out["hops"]] == [QUESTION, ""] and out["model_answer"] == "1961"
    assert "best answer" in llm.seen[1][-1].content and "- Mara Velt was born in 1961." in llm.seen[1][-1].content
    assert out["answer"] == "1961 [2]" and len(out["documents"]) == 2


def test_no_answer_at_all_is_the_notice(retriever: BM25Retriever) -> None:
    llm = _chat({"fact": "", "answer": "", "next_question": ""}, {"fact": "", "answer": ""})
    out = MultiHopAnswer(retriever, llm, max_hops=3).invoke(QUESTION)
    assert len(out["hops"]) == 2 and out["supported"] is False and out["route"] == "no_knowledge"
    assert out["sources"] == [] and out["model_answer"] == "" and out["answer"].startswith("The knowledge base has")


def test_an_unreadable_reply_ends_the_loop_and_says_why(retriever: BM25Retriever) -> None:
    out = MultiHopAnswer(retriever, _chat("I think it is 1961.")).invoke(QUESTION)
    assert out["supported"] is False and out["hops"][0]["error"]


def test_an_answer_no_passage_states_is_kept_uncited(retriever: BM25Retriever) -> None:
    out = MultiHopAnswer(retriever, _chat({"fact": "", "answer": "Copenhagen"}), max_hops=1).invoke(QUESTION)
    assert out["answer"] == "Copenhagen" and out["supported"] is False and out["sources"] == []


@pytest.mark.parametrize("field", ["max_hops", "min_hops", "passages_per_hop", "max_chars_per_passage", "max_tokens"])
def test_bad_limits_are_refused_by_name(retriever: BM25Retriever, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        MultiHopAnswer(retriever, _chat(), **{field: 0})


def test_an_empty_question_is_refused(retriever: BM25Retriever) -> None:
    with pytest.raises(ValueError, match="needs a question"):
        MultiHopAnswer(retriever, _chat()).invoke({"question": "  "})


async def test_ainvoke_runs_the_same_loop(retriever: BM25Retriever) -> None:
    llm = _chat({"fact": "x", "answer": "1961", "next_question": ""})
    out = await MultiHopAnswer(retriever, llm, min_hops=1).ainvoke(QUESTION)
    assert out["model_answer"] == "1961"


def test_decomposition_answers_each_sub_question_over_its_own_retrieval(retriever: BM25Retriever) -> None:
    llm = _chat({"questions": ["Who is the singer of Hollow Crown?", "In which year was #1 born?"]},
                {"answer": "Mara Velt"}, {"answer": "1961"})
    out = MultiHopAnswer(retriever, llm, passages_per_hop=1, decompose=True).invoke(QUESTION)
    assert [h["query"] for h in out["hops"]] == ["Who is the singer of Hollow Crown?",
                                                 "In which year was Mara Velt born?"]
    assert [h["answer"] for h in out["hops"]] == ["Mara Velt", "1961"]
    assert [d.id for d in out["documents"]] == ["song", "singer"] and out["answer"] == "1961 [2]"
    assert out["supported"] is True and out["hops"][0]["next_question"] == "In which year was #1 born?"
    assert "In which year was Mara Velt born?" in llm.seen[2][-1].content   # the sub-question, #1 resolved
    assert "Mara Velt is a Danish singer" in llm.seen[2][-1].content        # its own passage
    assert QUESTION not in llm.seen[2][-1].content                           # not the whole question


def test_decomposition_reads_a_passage_again_under_its_first_number(retriever: BM25Retriever) -> None:
    llm = _chat({"questions": ["Who sang Hollow Crown?", "Which song did #1 sing?"]},
                {"answer": "Mara Velt"}, {"answer": "Hollow Crown"})
    out = MultiHopAnswer(retriever, llm, passages_per_hop=1, decompose=True).invoke(QUESTION)
    assert [h["read"] for h in out["hops"]] == [[1], [1]] and len(out["documents"]) == 1


def test_decomposition_without_a_sub_answer_ends_with_the_notice(retriever: BM25Retriever) -> None:
    llm = _chat({"questions": ["Who is the singer of Hollow Crown?", "In which year was #1 born?"]}, {"answer": ""})
    out = MultiHopAnswer(retriever, llm, passages_per_hop=1, decompose=True).invoke(QUESTION)
    assert len(out["hops"]) == 1 and out["supported"] is False and out["route"] == "no_knowledge"


def test_decomposition_keeps_at_most_max_hops_sub_questions(retriever: BM25Retriever) -> None:
    llm = _chat({"questions": ["Who sang Hollow Crown?", "Where was #1 born?", "When was #1 born?"]},
                {"answer": "Mara Velt"}, {"answer": "Aarhus"})
    out = MultiHopAnswer(retriever, llm, max_hops=2, passages_per_hop=1, decompose=True).invoke(QUESTION)
    assert [h["answer"] for h in out["hops"]] == ["Mara Velt", "Aarhus"] and out["model_answer"] == "Aarhus"


def test_an_empty_decomposition_falls_back_to_the_loop(retriever: BM25Retriever) -> None:
    llm = _chat({"questions": []}, {"fact": "Hollow Crown is a 1998 song by the singer Mara Velt.", "answer": "",
                                    "next_question": "When was Mara Velt born?"},
                {"fact": "Mara Velt was born in 1961.", "answer": "1961", "next_question": ""})
    out = MultiHopAnswer(retriever, llm, passages_per_hop=1, decompose=True).invoke(QUESTION)
    assert [h["query"] for h in out["hops"]] == [QUESTION, "When was Mara Velt born?"] and out["model_answer"] == "1961"


def test_resolve_names_earlier_answers() -> None:
    assert resolve("Where was #1 born, and when did #2 happen?", ["Ana", "the war"]) == (
        "Where was Ana born, and when did the war happen?")
    assert resolve("When was #3 born?", ["Ana"]) == "When was #3 born?"     # no third answer: left as written
    assert resolve("Who sang Hollow Crown?", []) == "Who sang Hollow Crown?"
    assert resolve("Who led the country?", ["Somalia"]) == "Who led the country? Somalia"


@pytest.mark.llm
def test_real_model_retrieves_for_a_second_hop(llama_server_url: str) -> None:
    """The local 1.5B (grammar-constrained through the run's server, replies recorded in tests/llm_replies): the two
    passages of the question among two others, one passage read per hop; the first retrieval reads the song, and
    the singer's birth year needs a second retrieval for a query naming the singer."""
    from ctxrag.models.chat import chat_openai_compatible
    from ctxrag.testing.llm_server import HANG_GUARD_S, SERVER_MODEL_ALIAS

    llm = chat_openai_compatible(base_url=llama_server_url, api_key="unused", model=SERVER_MODEL_ALIAS,
                                 temperature=0.0, timeout=HANG_GUARD_S, max_retries=0)
    out = MultiHopAnswer(BM25Retriever.from_documents(PASSAGES, tokenizer="english", k=2), llm, max_hops=3,
                         passages_per_hop=1).invoke(QUESTION)
    hops = out["hops"]
    assert len(hops) >= 2 and hops[0]["read"] == [1] and hops[1]["read"] == [2], json.dumps(hops, indent=1)
    assert "Mara Velt" in hops[1]["query"] and not any(h["error"] for h in hops)
    assert "1961" in out["answer"] and out["supported"] is True, out


@pytest.mark.llm
def test_real_model_decomposes_and_answers_each_sub_question(llama_server_url: str) -> None:
    """The local 1.5B (replies recorded in tests/llm_replies) plans the two-hop question as two sub-questions, the
    second naming the first's answer, and answers each from its own passage."""
    from ctxrag.models.chat import chat_openai_compatible
    from ctxrag.testing.llm_server import HANG_GUARD_S, SERVER_MODEL_ALIAS

    llm = chat_openai_compatible(base_url=llama_server_url, api_key="unused", model=SERVER_MODEL_ALIAS,
                                 temperature=0.0, timeout=HANG_GUARD_S, max_retries=0)
    out = MultiHopAnswer(BM25Retriever.from_documents(PASSAGES, tokenizer="english", k=2), llm, max_hops=3,
                         passages_per_hop=1, decompose=True).invoke(QUESTION)
    hops = out["hops"]
    assert len(hops) >= 2 and "Mara Velt" in hops[-1]["query"], json.dumps(hops, indent=1)
    assert [d.id for d in out["documents"]] == ["song", "singer"], json.dumps(hops, indent=1)
    assert out["model_answer"] == "1961" and out["answer"] == "1961 [2]" and out["supported"] is True, out


def test_bridge_retrieves_for_the_missing_name_then_reads_a_short_answer_over_every_passage(
        retriever: BM25Retriever) -> None:
    """``bridge``: hop 1 reads the song, the model names the singer as missing, hop 2 retrieves for that string; the
    last hop asks nothing; the answer is read (`ExtractiveAnswer`, a plain phrase) over the passages of every hop."""
    llm = _chat({"missing": "Mara Velt birth year", "answer": ""}, {"missing": "Aarhus", "answer": "1961"}, "1961")
    out = MultiHopAnswer(retriever, llm, max_hops=3, passages_per_hop=1, bridge=True).invoke(QUESTION)
    assert [h["query"] for h in out["hops"]] == [QUESTION, "Mara Velt birth year", "Aarhus"]
    assert [d.id for d in out["documents"]] == ["song", "singer", "city"]
    assert out["answer"] == "1961 [2]" and out["supported"] is True and out["loop_answer"] == "1961"
    assert len(llm.seen) == 3                              # two hop requests, one answer; the last hop asks nothing
    second = llm.seen[1][-1].content
    assert "Searched so far: Mara Velt birth year" in second and "1998 song" in second  # every passage read so far
    assert "Aarhus is the second-largest city" in " ".join(str(m.content) for m in llm.seen[2])  # reads all three


def test_bridge_stops_on_no_missing_name_from_min_hops_and_on_a_repeated_search(retriever: BM25Retriever) -> None:
    llm = _chat({"missing": "", "answer": "Mara Velt"}, {"missing": "", "answer": "1961"}, "1961")
    out = MultiHopAnswer(retriever, llm, max_hops=3, passages_per_hop=1, bridge=True).invoke(QUESTION)
    # hop 1's "nothing missing" comes before min_hops (2): its answer is searched for; hop 2's ends the loop
    assert [h["query"] for h in out["hops"]] == [QUESTION, "Mara Velt"] and out["answer"] == "1961 [2]"
    llm = _chat({"missing": QUESTION.upper(), "answer": ""}, "Mara Velt")
    out = MultiHopAnswer(retriever, llm, max_hops=3, passages_per_hop=1, bridge=True).invoke(QUESTION)
    assert len(out["hops"]) == 1 and out["model_answer"] == "Mara Velt" and out["loop_answer"] == ""


def test_bridge_searches_the_answer_when_a_search_repeats_before_min_hops(retriever: BM25Retriever) -> None:
    """Before hop ``min_hops`` a missing name searched before does not end the loop: the hop's answer is searched
    instead (the 3-hop chain's middle entity); from ``min_hops`` on, the repeat ends it as before."""
    replies = ({"missing": "Mara Velt birth year", "answer": ""},
               {"missing": "mara velt birth year", "answer": "Mara Velt"}, "1961")
    out = MultiHopAnswer(retriever, _chat(*replies), max_hops=3, min_hops=3, passages_per_hop=1,
                         bridge=True).invoke(QUESTION)
    assert [h["query"] for h in out["hops"]] == [QUESTION, "Mara Velt birth year", "Mara Velt"]
    out = MultiHopAnswer(retriever, _chat(*replies), max_hops=3, passages_per_hop=1, bridge=True).invoke(QUESTION)
    assert [h["query"] for h in out["hops"]] == [QUESTION, "Mara Velt birth year"]


def test_bridge_asks_again_when_the_final_phrase_is_a_name_it_searched_for(retriever: BM25Retriever) -> None:
    """The final read names the chain's middle entity (the singer, which hop 2 searched for): asked once more as a
    step on the way, the year is the answer and the singer is kept as ``rejected_answer``. The question is never an
    intermediate name (hop 1 searched it)."""
    llm = _chat({"missing": "Mara Velt birth year", "answer": ""}, {"missing": "", "answer": "1961"}, "Mara Velt",
                "1961")
    out = MultiHopAnswer(retriever, llm, max_hops=3, passages_per_hop=1, bridge=True).invoke(QUESTION)
    assert [h["query"] for h in out["hops"]] == [QUESTION, "Mara Velt birth year"]
    assert out["answer"] == "1961 [2]" and out["rejected_answer"] == "Mara Velt" and len(llm.seen) == 4
    assert '"Mara Velt" is not the answer' in str(llm.seen[3][-1].content)
    llm = _chat({"missing": "Mara Velt birth year", "answer": ""}, {"missing": "", "answer": "1961"}, "1961")
    out = MultiHopAnswer(retriever, llm, max_hops=3, passages_per_hop=1, bridge=True).invoke(QUESTION)
    assert out["answer"] == "1961 [2]" and "rejected_answer" not in out and len(llm.seen) == 3


@pytest.mark.llm
def test_real_model_bridge_names_the_singer_and_answers_the_year(llama_server_url: str) -> None:
    """The local 1.5B (replies recorded in tests/llm_replies) with ``bridge``: after the song's passage it names the
    singer as the missing search, the second retrieval reads the singer's passage, the short answer is her birth
    year."""
    from ctxrag.models.chat import chat_openai_compatible
    from ctxrag.testing.llm_server import HANG_GUARD_S, SERVER_MODEL_ALIAS

    llm = chat_openai_compatible(base_url=llama_server_url, api_key="unused", model=SERVER_MODEL_ALIAS,
                                 temperature=0.0, timeout=HANG_GUARD_S, max_retries=0)
    out = MultiHopAnswer(BM25Retriever.from_documents(PASSAGES, tokenizer="english", k=2), llm, max_hops=3,
                         passages_per_hop=1, bridge=True).invoke(QUESTION)
    hops = out["hops"]
    assert len(hops) >= 2 and "Mara Velt" in hops[1]["query"], json.dumps(hops, indent=1)
    assert [d.id for d in out["documents"]][:2] == ["song", "singer"], json.dumps(hops, indent=1)
    assert out["answer"] == "1961 [2]" and out["supported"] is True, out


class _TripletScript(GenericFakeChatModel):
    """Answers a triplet-extraction prompt with the hand-written triplets of the passage it holds."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        from langchain_core.outputs import ChatGeneration

        from ctxrag.testing.bernoulli import PASSAGES as WIKI, TRIPLETS

        prompt = "\n".join(str(m.content) for m in messages)
        key = next(k for k, text in WIKI.items() if text.split("\n", 1)[1][:60] in prompt)
        return ChatResult(generations=[ChatGeneration(message=AIMessage(json.dumps({"triplets": TRIPLETS[key]})))])


def test_ask_chain_hops_through_the_graph_when_every_knowledge_base_has_one(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxrag.chains.ask import build_ask_chain
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import Settings
    from ctxrag.testing.bernoulli import PASSAGES as WIKI

    monkeypatch.setattr("ctxrag.models.chat.make_chat_model", lambda *a, **k: _TripletScript(messages=iter([])))
    graph_kb = KnowledgeBase.open("family", Settings(home=tmp_path / "g", graph=True))
    graph_kb.add_texts([{"text": t, "source": f"wiki://{k}", "title": t.split("\n", 1)[0]} for k, t in WIKI.items()])
    plain_kb = KnowledgeBase.open("plain", Settings(home=tmp_path / "p"))
    plain_kb.add_texts([{"text": t, "source": f"wiki://{k}"} for k, t in WIKI.items()])
    llm = _chat()
    chain = build_ask_chain([graph_kb], llm, k=2, multi_hop=2, settings=graph_kb.settings)
    assert isinstance(chain, MultiHopAnswer) and chain.max_hops == 2 and chain.passages_per_hop == 2
    assert chain.bridge is True  # the default strategy (the multihop_answers page); decompose turns it off
    assert build_ask_chain([graph_kb], llm, multi_hop=2, decompose=True).bridge is False
    assert build_ask_chain([graph_kb], llm, multi_hop=2, bridge=False).bridge is False
    # the bridge makes at least BRIDGE_MIN_HOPS retrievals (within max_hops); the loop keeps its own min_hops
    assert chain.min_hops == 2 and build_ask_chain([graph_kb], llm, multi_hop=3).min_hops == BRIDGE_MIN_HOPS == 3
    assert build_ask_chain([graph_kb], llm, multi_hop=3, bridge=False).min_hops == 2
    assert chain.retriever.name == "graph" and chain.retriever.k == 4  # room for k new chunks after the seen ones
    assert build_ask_chain([graph_kb], llm, mode="bm25", multi_hop=2).retriever.name == "bm25"
    assert isinstance(build_ask_chain([plain_kb], llm, multi_hop=2).retriever, FusionRetriever)
    assert not isinstance(build_ask_chain([plain_kb], llm, settings=plain_kb.settings), MultiHopAnswer)
