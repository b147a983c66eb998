"""The RAG chain: retriever -> relevance gate -> layered prompt -> LLM -> answer with `[n]` citations mapped to sources.

Input: a question string, or ``{"question": str, "history": [(role, text), ...]}``, or LangChain's
`create_retrieval_chain` keys ``{"input": str, "chat_history": [messages]}``. Output: a dict with ``question``,
``documents`` (retrieved, numbered from 1 in the prompt), ``context`` (the same list, `create_retrieval_chain`'s
name), ``answer``, ``sources`` (the cited documents), ``invalid_citations``, ``citations``, ``supported``,
``relevance`` and ``route`` (``"rag"``, or ``"no_knowledge"`` when it abstained); ``input`` too when it was given.
`ctxrag.chains.ask.RagAnswer` is this shape as a typed model, and `ctxrag.chains.ask.build_ask_chain` the chain
`ctxrag ask`, ``/ask`` and the benchmarks answer with.

``supported`` is decided in two stages: the relevance gate (`ctxrag.chains.relevance.RelevanceGate`, no model call)
says whether the retrieved chunks are about the question at all; then the evidence check
(`ctxrag.chains.evidence.EvidenceCheck`) has the model quote the sentence that states the answer and checks that the
quote is in a chunk and about the question. ``False`` when either says no; the answer is then a fixed "the knowledge
base has nothing on this" in the question's language and script, and ``sources`` is empty. ``None`` when both are
off. ``relevance`` holds the gate's signals and the verdict's reason, with the evidence check's under ``evidence``.
``citations`` checks each sentence's `[n]` against the chunk it names (`ctxrag.chains.citations.check_citations`);
it and ``sources`` come from the answer steps (``steps``, default `cite_sources`), which run on the complete answer.
The default answer's markers are set to the sources that check keeps as it streams
(`ctxrag.chains.checked_markers`): its ``[n]`` are exactly the ``sources`` listed, and ``answer_as_written`` keeps
the model's own text.
``supported`` agrees with them: an answer whose every sentence with facts no chunk holds (all ``unsupported``) is
``supported: False`` (``relevance["reason"]`` says why) even where the gate and the evidence check passed.
``supported`` and ``relevance`` therefore stream with the answer step that brings ``citations``.
An answer that repeats an instruction planted in a retrieved document (``relevance["overruled_by"] ==
"instruction"``, `ctxrag.chains.instructions`) is given as written, flagged, by default; with
``on_instruction="withhold"`` the no-knowledge notice replaces it (``route: "no_knowledge"``, no sources or
citations, ``relevance["withheld"]: True``), and the answer then comes whole, once the citation check has run,
instead of streaming.

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
from typing import Any, AsyncIterator, Callable, Iterator, Literal, Sequence, get_args

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import (Runnable, RunnableBranch, RunnableConfig, RunnableGenerator, RunnableLambda,
                                      RunnablePassthrough)
from langchain_core.runnables.utils import AddableDict

from ctxrag.chains.checked_markers import CheckedMarkers, sources_as_marked
from ctxrag.chains.citations import cited_numbers, format_knowledge, map_citations, nothing_held, planted
from ctxrag.chains.evidence import EvidenceCheck
from ctxrag.chains.focus import SentenceFocus
from ctxrag.chains.relevance import RelevanceGate, no_knowledge_notice
from ctxrag.prompts.layers import LayeredPrompt
from ctxrag.text import count_cjk, detect_language, is_traditional_chinese, to_simplified


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


def support_verdict(gate: RelevanceGate | None, evidence: EvidenceCheck | None, question: str,
                    docs: list[Document], messages: Callable[[], list[BaseMessage]],
                    config: RunnableConfig | None = None) -> tuple[bool | None, dict[str, Any] | None]:
    """Whether the retrieved `docs` support an answer to `question`: the relevance gate first (no model call), then,
    when it passed, the evidence check on the answer prompt ``messages()`` would send. Returns ``(supported,
    relevance)``: ``supported`` is None when both are off; ``relevance`` holds the gate's signals and the verdict's
    reason, the evidence check's under ``"evidence"``. An evidence reply that could not be read decides nothing.

    The one decision `build_rag_chain` and the assistant's RAG route both make (so they abstain alike)."""
    if gate is None and evidence is None:
        return None, None
    supported: bool | None = None
    relevance: dict[str, Any] = {}
    if gate is not None:
        verdict = gate.check(question, docs, config)
        supported, relevance = verdict.supported, verdict.to_dict()
    if evidence is None or supported is False:
        return supported, relevance or None
    found = evidence.check(question, docs, messages(), config)
    relevance["evidence"] = found.to_dict()
    if not found.judged:  # a reply that could not be read decides nothing
        return supported, relevance
    if not found.supported or not relevance.get("reason"):
        relevance.update(supported=found.supported, reason=found.reason)
    return found.supported, relevance


def _support_step(gate: RelevanceGate | None, evidence: EvidenceCheck | None,
                  to_messages: Callable[[dict[str, Any]], list[BaseMessage]]) -> Runnable[Any, Any]:
    def check(x: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        supported, relevance = support_verdict(gate, evidence, x["question"], x["documents"],
                                               lambda: to_messages(x), config)
        return {**x, "supported": supported, "relevance": relevance,
                "route": "no_knowledge" if supported is False else "rag"}

    return RunnableLambda(check, name="support_check")


AnswerStep = Callable[[dict[str, Any]], dict[str, Any]]
"""A post-processing step of a written answer: the chain state (``question``, ``documents``, ``answer``, ...) -> the
fields it adds (e.g. ``sources``). Steps run in order after the answer is complete; each one's fields stream as one
chunk and are in the state the next one sees."""


def cite_sources(x: dict[str, Any]) -> dict[str, Any]:
    """The default `AnswerStep`: the model's ``[n]`` (``answer_as_written`` where the answer's markers were set to
    the checked sources, else ``answer``) mapped to the retrieved chunks and each sentence checked against the chunk
    it cites (`ctxrag.chains.citations.map_citations`): ``sources``, ``invalid_citations``, ``citations``.
    ``sources`` are the ones ``answer``'s markers cite, in order (`ctxrag.chains.checked_markers.sources_as_marked`),
    so the text and the list agree."""
    answer, docs = x.get("answer", ""), x.get("documents", [])
    written = x.get("answer_as_written", answer)
    out = map_citations(written, docs)
    return {**out, "sources": sources_as_marked(answer, docs, out["sources"], cited_numbers(written))}


def _checked_markers() -> Runnable[Any, Any]:
    """The default answer's stream with each sentence's markers set to its checked sources
    (`ctxrag.chains.checked_markers.CheckedMarkers`); the model's own text comes last as ``answer_as_written``."""
    def step(c: dict[str, Any], state: dict[str, Any]) -> dict[str, Any] | None:
        if "documents" in c:  # the state's fields stream before the answer
            state["docs"] = c["documents"]
        if isinstance(c.get("question"), str):
            state["question"] = c["question"]
        if "answer" not in c:
            return c
        rest, delta = {k: v for k, v in c.items() if k != "answer"}, c["answer"]
        cm = state.setdefault("cm", CheckedMarkers(state.get("docs") or [], state.get("question", "")))
        piece = cm.feed(delta)
        return {**rest, "answer": piece} if piece else (rest or None)

    def last(state: dict[str, Any]) -> dict[str, Any]:
        cm = state.setdefault("cm", CheckedMarkers(state.get("docs") or [], state.get("question", "")))
        return {"answer": cm.close(), "answer_as_written": cm.model_text}

    def rewrite(chunks: Iterator[dict[str, Any]]) -> Iterator[AddableDict]:
        state: dict[str, Any] = {}
        for c in chunks:
            out = step(c, state)
            if out:
                yield AddableDict(out)
        yield AddableDict(last(state))

    async def arewrite(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[AddableDict]:
        state: dict[str, Any] = {}
        async for c in chunks:
            out = step(c, state)
            if out:
                yield AddableDict(out)
        yield AddableDict(last(state))

    return RunnableGenerator(rewrite, arewrite, name="checked_markers")


DEFAULT_STEPS: tuple[AnswerStep, ...] = (cite_sources,)
"""The answer steps `build_rag_chain` runs unless given others."""


def _abstain(x: dict[str, Any]) -> dict[str, Any]:
    return {**x, "answer": no_knowledge_notice(x["question"]), "sources": [], "invalid_citations": [],
            "citations": []}


def _accumulate(acc: dict[str, Any], chunk: dict[str, Any]) -> None:
    """Merge a streamed chunk: answer deltas are concatenated, other keys replaced."""
    for k, v in chunk.items():
        acc[k] = acc[k] + v if k == "answer" and k in acc else v


_VERDICT = ("supported", "relevance")
"""Held back until the answer steps ran (`final_verdict`): a merged stream keeps the last value of neither key."""


def _after_answer(acc: dict[str, Any], steps: Sequence[AnswerStep]) -> Iterator[AddableDict]:
    """The steps' chunks; the verdict goes with the chunk that brings ``citations`` (else in one of its own, last)."""
    pending = True
    for step in steps if acc.get("route") != "no_knowledge" else ():  # abstained: nothing to post-process
        added = step(acc)
        acc.update(added)
        if pending and "citations" in added:
            verdict, pending = final_verdict(acc), False
            acc.update(verdict)
            added = {**added, **verdict}
        yield AddableDict(added)
    if pending:
        yield AddableDict(final_verdict(acc))


def _checkable_phrase(phrase: str, documents: Sequence[Document]) -> bool:
    """Whether a short answer can be looked for in ``documents``: a Chinese phrase where a chunk has Chinese, another
    where a chunk is not Chinese (an English phrase over Chinese chunks may be a translation: not judged)."""
    if not phrase.strip():
        return False
    cjk = count_cjk(phrase) > 0
    return any((count_cjk(d.page_content) > 0) if cjk else detect_language(d.page_content[:2000]) != "zh"
               for d in documents)


def final_verdict(acc: dict[str, Any]) -> dict[str, Any]:
    """``supported`` and ``relevance`` of an answered state (with its ``citations``), with ``supported`` False where
    a sentence of the answer is held only by an instruction planted in a chunk (`planted`), where no chunk holds any
    sentence of the answer, or holds the short answer (`ExtractiveAnswer`'s phrase, in the
    chunks' language, that no chunk's span matches: a name the model gave from memory). The assistant's RAG route
    ends with the same verdict."""
    supported, relevance = acc.get("supported"), acc.get("relevance")
    if supported is True and planted(acc.get("citations") or []):
        supported = False
        relevance = {**(relevance or {}), "supported": False, "overruled_by": "instruction",
                     "reason": "the answer repeats an instruction written into a retrieved document"}
    elif supported is True and nothing_held(acc.get("citations") or []):
        supported = False
        relevance = {**(relevance or {}), "supported": False, "overruled_by": "citations",
                     "reason": "no retrieved chunk holds any sentence of the answer (every citation check: unsupported)"}
    elif (supported is True and acc.get("snapped") is False
          and _checkable_phrase(str(acc.get("model_answer") or ""), acc.get("documents") or [])):
        supported = False
        relevance = {**(relevance or {}), "supported": False, "overruled_by": "short_answer",
                     "reason": "no retrieved chunk holds the short answer"}
    return {"supported": supported, "relevance": relevance}


OnInstruction = Literal["flag", "withhold"]
"""What the user gets when the answer repeats an instruction planted in a retrieved document: ``flag`` the answer
as written with ``supported: False``; ``withhold`` the no-knowledge notice instead (`build_rag_chain`)."""
_WITHHELD_KEYS = ("answer", "answer_as_written", "route")
"""Held back until the verdict when answers are withheld: a merged stream would concatenate two answers or routes."""


def _held_back(c: dict[str, Any], keys: Sequence[str] = _VERDICT) -> dict[str, Any]:
    return {k: v for k, v in c.items() if k not in keys} if any(k in c for k in keys) else c


def withheld(acc: dict[str, Any]) -> dict[str, Any]:
    """The fields that replace an answer overruled by a planted instruction (``on_instruction="withhold"``): the
    no-knowledge notice, no sources or citations, the verdict with ``relevance["withheld"]``.

    >>> out = withheld({"question": "How often should I water tomatoes?", "relevance": {"overruled_by": "instruction"}})
    >>> out["answer"][:35], out["route"], out["supported"], out["relevance"]["withheld"]
    ('The knowledge base has no material ', 'no_knowledge', False, True)
    """
    return {"route": "no_knowledge", "answer": no_knowledge_notice(acc["question"]), "answer_as_written": None,
            "sources": [], "invalid_citations": [], "citations": [], "supported": False,
            "relevance": {**(acc.get("relevance") or {}), "withheld": True}}


def _released(acc: dict[str, Any], steps: Sequence[AnswerStep]) -> Iterator[AddableDict]:
    """``withhold``: the answer held back until the steps' verdict, or the notice where an instruction overruled it."""
    answer = {k: acc[k] for k in _WITHHELD_KEYS if k in acc}
    after = list(_after_answer(acc, steps))
    if (acc.get("relevance") or {}).get("overruled_by") == "instruction":
        yield AddableDict(withheld(acc))
        return
    yield AddableDict(answer)
    yield from after


def _finisher(steps: Sequence[AnswerStep], on_instruction: OnInstruction = "flag") -> Runnable[Any, Any]:
    keys = (*_VERDICT, *_WITHHELD_KEYS) if on_instruction == "withhold" else _VERDICT
    last = _released if on_instruction == "withhold" else _after_answer

    def finish(chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        acc: dict[str, Any] = {}
        for c in chunks:
            _accumulate(acc, c)
            out = _held_back(c, keys)
            if out or on_instruction == "flag":
                yield out
        yield from last(acc, steps)

    async def afinish(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        acc: dict[str, Any] = {}
        async for c in chunks:
            _accumulate(acc, c)
            out = _held_back(c, keys)
            if out or on_instruction == "flag":
                yield out
        for part in last(acc, steps):
            yield part

    return RunnableGenerator(finish, afinish, name="answer_steps")


def build_rag_chain(
    retriever: RetrieverLike,
    llm: BaseChatModel,
    *,
    gate: RelevanceGate | bool = True,
    evidence: EvidenceCheck | bool = True,
    answer: Runnable[Any, Any] | None = None,
    lang: str = "auto",
    prompts: dict[str, LayeredPrompt] | None = None,
    max_words: int = 200,
    max_chars_per_chunk: int | None = 1500,
    steps: Sequence[AnswerStep] = DEFAULT_STEPS,
    max_tokens: int | None = None,
    focus: SentenceFocus | None = None,
    on_instruction: OnInstruction = "flag",
) -> Runnable[Any, Any]:
    """Build the chain described in the module docstring.

    ``gate``: a `RelevanceGate` (give it the knowledge base's embeddings), ``True`` for one over the default
    embeddings, ``False`` for none (the model always answers). ``evidence``: an `EvidenceCheck`, ``True`` for one
    over ``llm`` with its default thresholds, ``False`` for none (a gate-passed question is always answered). ``answer`` replaces the answer step: a runnable from
    the state ``{"question", "documents", "history", ...}`` to the same with ``answer`` (e.g. `ExtractiveAnswer`).
    The default answer follows the question's language (``lang``), cites `[n]`, and streams; ``prompts`` (by
    language, ``"zh"``/``"en"``) replace its built-in prompts. ``steps``: what runs on the complete answer, in order
    (`AnswerStep`; default `cite_sources`); an abstention runs none. ``max_tokens`` bounds the default answer's
    reply (bound on that call only; the gate's and the evidence check's calls keep the model's own); None: the
    model's own. ``focus``: the prompt (of the evidence check and of the answer) gives long chunks as their
    sentences that hold the question's terms (`ctxrag.chains.focus.SentenceFocus`); the output's ``documents`` and
    the checks keep the whole chunks. ``on_instruction``: an answer that repeats an instruction planted in a
    retrieved document is given flagged (``"flag"``) or replaced by the no-knowledge notice (``"withhold"``; the
    answer then does not stream, see the module docstring).
    """
    if lang not in ("auto", "zh", "en"):
        raise ValueError(f"lang must be 'auto', 'zh' or 'en', got {lang!r}")
    if on_instruction not in get_args(OnInstruction):
        raise ValueError(f"on_instruction must be 'flag' or 'withhold', got {on_instruction!r}")
    checker = RelevanceGate() if gate is True else (gate or None)
    quoter = EvidenceCheck(llm) if evidence is True else (evidence or None)

    def to_messages(x: dict[str, Any]) -> list[BaseMessage]:
        if focus is not None:
            x = {**x, "documents": focus.focus(x["question"], x["documents"])}
        return answer_messages(x, lang=lang, prompts=prompts, max_words=max_words,
                               max_chars_per_chunk=max_chars_per_chunk)

    writer: Runnable[Any, Any] = llm.bind(max_tokens=max_tokens) if max_tokens else llm
    answer_step = answer or (RunnablePassthrough.assign(answer=RunnableLambda(to_messages) | writer | StrOutputParser())
                             | _checked_markers())
    return (
        RunnableLambda(_prepare)
        | RunnablePassthrough.assign(documents=itemgetter("question") | retriever)
        | RunnablePassthrough.assign(context=itemgetter("documents"))
        | _support_step(checker, quoter, to_messages)
        | RunnableBranch((lambda x: x["route"] == "no_knowledge", RunnableLambda(_abstain)), answer_step)
        | _finisher(steps, on_instruction)
    ).with_config(run_name="ctxrag_rag")
