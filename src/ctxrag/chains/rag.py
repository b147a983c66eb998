"""The RAG chain: retriever -> relevance gate -> layered prompt -> LLM -> answer with `[n]` citations mapped to sources.

Input: a question string, or ``{"question": str, "history": [(role, text), ...]}``, or LangChain's
`create_retrieval_chain` keys ``{"input": str, "chat_history": [messages]}``. Output: a dict with ``question``,
``documents`` (retrieved, numbered from 1 in the prompt), ``context`` (the same list, `create_retrieval_chain`'s
name), ``answer``, ``sources`` (the cited documents), ``invalid_citations``, ``supported`` and ``relevance``;
``input`` too when it was given.

``supported`` is decided in two stages: the relevance gate (`ctxrag.chains.relevance.RelevanceGate`, no model call)
says whether the retrieved chunks are about the question at all; then the evidence check
(`ctxrag.chains.evidence.EvidenceCheck`) has the model quote the sentence that states the answer and checks that the
quote is in a chunk and about the question. ``False`` when either says no; the answer is then a fixed "the knowledge
base has nothing on this" in the question's language and script, and ``sources`` is empty. ``None`` when both are
off. ``relevance`` holds the gate's signals and the verdict's reason, with the evidence check's under ``evidence``.
``citations`` checks each sentence's `[n]` against the chunk it names (`ctxrag.chains.citations.check_citations`).

Sync, async and streaming: `stream` yields ``{"answer": delta}`` chunks as the model writes, then one chunk with
``sources``, ``invalid_citations`` and ``citations``. The answer step is replaceable: ``answer=ExtractiveAnswer(llm)``
(`ctxrag.chains.short_answer`) answers with the source span instead of a cited answer.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.chains.rag import build_rag_chain
    from ctxrag.chains.relevance import RelevanceGate
    from ctxrag.models.chat import make_chat_model
    kb = KnowledgeBase.open("demo")
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=4), make_chat_model(), gate=RelevanceGate(kb.embeddings))
    out = chain.invoke("星河知识库支持哪些文件格式？")
    print(out["supported"], out["answer"], [s["source"] for s in out["sources"]])
"""
from __future__ import annotations

from operator import itemgetter
from typing import Any, AsyncIterator, Iterator

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import (Runnable, RunnableBranch, RunnableConfig, RunnableGenerator, RunnableLambda,
                                      RunnablePassthrough)
from langchain_core.runnables.utils import AddableDict

from ctxrag.chains.citations import format_knowledge, map_citations
from ctxrag.chains.evidence import EvidenceCheck
from ctxrag.chains.relevance import RelevanceGate, no_knowledge_notice
from ctxrag.prompts.layers import LayeredPrompt
from ctxrag.text import detect_language, is_traditional_chinese, to_simplified


def _prepare(inp: Any) -> dict[str, Any]:
    if isinstance(inp, str):
        inp = {"question": inp}
    if isinstance(inp, dict) and "question" not in inp and "input" in inp:  # create_retrieval_chain's keys
        out = _prepare({"question": inp["input"], "history": inp.get("chat_history") or inp.get("history")})
        return {**out, "input": inp["input"]}
    if not isinstance(inp, dict) or not isinstance(inp.get("question"), str) or not inp["question"].strip():
        raise ValueError(f"RAG input needs a non-empty 'question' (or 'input') string, got {inp!r:.200}")
    return {"question": inp["question"].strip(), "history": inp.get("history") or []}


def question_language(question: str, lang: str) -> str:
    """The answer language: the question's (``lang="auto"``) or the one forced."""
    return detect_language(question) if lang == "auto" else lang


def answer_messages(x: dict[str, Any], *, lang: str = "auto", prompts: dict[str, LayeredPrompt] | None = None,
                    short: bool = False, simplified: bool = False, max_words: int = 200,
                    max_chars_per_chunk: int | None = 1500) -> list[BaseMessage]:
    """The prompt for the chain state ``x``: Traditional Chinese instructions for a Traditional Chinese question read
    as written; with ``simplified`` a Chinese question and its chunks are given in Simplified script."""
    question, docs = x["question"], x["documents"]
    lng = question_language(question, lang)
    knowledge = format_knowledge(docs, max_chars_per_chunk)
    traditional = lng == "zh" and is_traditional_chinese(question) and not simplified
    if lng == "zh" and simplified:
        question, knowledge = to_simplified(question), to_simplified(knowledge)
    prompt = (prompts or {}).get(lng) or LayeredPrompt.for_question(lng, traditional=traditional, short=short)  # type: ignore[arg-type]
    return prompt.to_messages(route="rag" if docs else "no_knowledge", question=question, knowledge=knowledge,
                              history=x["history"], max_words=max_words)


def _gate_step(gate: RelevanceGate | None) -> Runnable:
    def check(x: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        if gate is None:
            return {**x, "supported": None, "relevance": None}
        verdict = gate.check(x["question"], x["documents"], config)
        return {**x, "supported": verdict.supported, "relevance": verdict.to_dict()}

    return RunnableLambda(check, name="relevance_gate")


def _evidence_step(evidence: EvidenceCheck | None, to_messages: Any) -> Runnable:
    def check(x: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        if evidence is None or x["supported"] is False:
            return x
        verdict = evidence.check(x["question"], x["documents"], to_messages(x), config)
        relevance = dict(x["relevance"] or {})
        relevance["evidence"] = verdict.to_dict()
        if not verdict.judged:  # a reply that could not be read decides nothing
            return {**x, "relevance": relevance}
        if not verdict.supported or not relevance.get("reason"):
            relevance.update(supported=verdict.supported, reason=verdict.reason)
        return {**x, "supported": verdict.supported, "relevance": relevance}

    return RunnableLambda(check, name="evidence_check")


def _abstain(x: dict[str, Any]) -> dict[str, Any]:
    return {**x, "answer": no_knowledge_notice(x["question"]), "sources": [], "invalid_citations": [],
            "citations": []}


def _accumulate(acc: dict[str, Any], chunk: dict[str, Any]) -> None:
    """Merge a streamed chunk: answer deltas are concatenated, other keys replaced."""
    for k, v in chunk.items():
        acc[k] = acc[k] + v if k == "answer" and k in acc else v


def _citations(acc: dict[str, Any]) -> list[AddableDict]:
    if "sources" in acc:  # the gate abstained: nothing to cite
        return []
    return [AddableDict(map_citations(acc.get("answer", ""), acc.get("documents", [])))]


def _finish(chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    acc: dict[str, Any] = {}
    for c in chunks:
        _accumulate(acc, c)
        yield c
    yield from _citations(acc)


async def _afinish(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    acc: dict[str, Any] = {}
    async for c in chunks:
        _accumulate(acc, c)
        yield c
    for part in _citations(acc):
        yield part


def build_rag_chain(
    retriever: RetrieverLike,
    llm: BaseChatModel,
    *,
    gate: RelevanceGate | bool = True,
    evidence: EvidenceCheck | bool = True,
    answer: Runnable | None = None,
    lang: str = "auto",
    prompts: dict[str, LayeredPrompt] | None = None,
    max_words: int = 200,
    max_chars_per_chunk: int | None = 1500,
) -> Runnable:
    """Build the chain described in the module docstring.

    ``gate``: a `RelevanceGate` (give it the knowledge base's embeddings), ``True`` for one over the default
    embeddings, ``False`` for none (the model always answers). ``evidence``: an `EvidenceCheck`, ``True`` for one
    over ``llm`` with its default thresholds, ``False`` for none (a gate-passed question is always answered). ``answer`` replaces the answer step: a runnable from
    the state ``{"question", "documents", "history", ...}`` to the same with ``answer`` (e.g. `ExtractiveAnswer`).
    The default answer follows the question's language (``lang``), cites `[n]`, and streams; ``prompts`` (by
    language, ``"zh"``/``"en"``) replace its built-in prompts.
    """
    if lang not in ("auto", "zh", "en"):
        raise ValueError(f"lang must be 'auto', 'zh' or 'en', got {lang!r}")
    checker = RelevanceGate() if gate is True else (gate or None)
    quoter = EvidenceCheck(llm) if evidence is True else (evidence or None)

    def to_messages(x: dict[str, Any]) -> list[BaseMessage]:
        return answer_messages(x, lang=lang, prompts=prompts, max_words=max_words,
                               max_chars_per_chunk=max_chars_per_chunk)

    answer_step = answer or RunnablePassthrough.assign(answer=RunnableLambda(to_messages) | llm | StrOutputParser())
    return (
        RunnableLambda(_prepare)
        | RunnablePassthrough.assign(documents=itemgetter("question") | retriever)
        | RunnablePassthrough.assign(context=itemgetter("documents"))
        | _gate_step(checker)
        | _evidence_step(quoter, to_messages)
        | RunnableBranch((lambda x: x["supported"] is False, RunnableLambda(_abstain)), answer_step)
        | RunnableGenerator(_finish, _afinish)
    ).with_config(run_name="ctxrag_rag")
