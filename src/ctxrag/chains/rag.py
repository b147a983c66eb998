"""The basic RAG chain: retriever -> layered prompt -> LLM -> answer with `[n]` citations mapped to sources.

Input: a question string, or ``{"question": str, "history": [(role, text), ...]}``, or LangChain's
`create_retrieval_chain` keys ``{"input": str, "chat_history": [messages]}``. Output: a dict with ``question``,
``documents`` (retrieved, numbered from 1 in the prompt), ``context`` (the same list, `create_retrieval_chain`'s
name), ``answer``, ``sources`` (the cited documents) and ``invalid_citations``; ``input`` too when it was given. Sync, async and streaming: `stream` yields ``{"answer": delta}`` chunks as the model writes, then
one ``{"sources": ..., "invalid_citations": ...}`` chunk.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.chains.rag import build_rag_chain
    from ctxrag.models.chat import make_chat_model
    kb = KnowledgeBase.open("demo")
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=4), make_chat_model())
    out = chain.invoke("星河知识库支持哪些文件格式？")
    print(out["answer"], [s["source"] for s in out["sources"]])
"""
from __future__ import annotations

from typing import Any, AsyncIterator, Iterator

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import Runnable, RunnableConfig, RunnableGenerator, RunnableLambda, RunnablePassthrough
from langchain_core.runnables.utils import AddableDict

from ctxrag.chains.citations import format_knowledge, map_citations
from ctxrag.chains.extractive import clean_phrase, echoes_question, restates_question, snap
from ctxrag.prompts.layers import SHORT_RESTATE, SHORT_RETRY, LayeredPrompt
from ctxrag.text import detect_language, is_traditional_chinese, to_simplified

ANSWER_STYLES = ("full", "short")
READING_SCRIPTS = ("auto", "as-written", "simplified")


def _prepare(inp: Any) -> dict[str, Any]:
    if isinstance(inp, str):
        inp = {"question": inp}
    if isinstance(inp, dict) and "question" not in inp and "input" in inp:  # create_retrieval_chain's keys
        out = _prepare({"question": inp["input"], "history": inp.get("chat_history") or inp.get("history")})
        return {**out, "input": inp["input"]}
    if not isinstance(inp, dict) or not isinstance(inp.get("question"), str) or not inp["question"].strip():
        raise ValueError(f"RAG input needs a non-empty 'question' (or 'input') string, got {inp!r:.200}")
    return {"question": inp["question"].strip(), "history": inp.get("history") or []}


def _accumulate(acc: dict[str, Any], chunk: dict[str, Any]) -> None:
    """Merge a streamed chunk: answer deltas are concatenated, other keys replaced."""
    for k, v in chunk.items():
        acc[k] = acc[k] + v if k == "answer" and k in acc else v


def _citations(acc: dict[str, Any]) -> AddableDict:
    return AddableDict(map_citations(acc.get("answer", ""), acc.get("documents", [])))


def _held_back(chunk: dict[str, Any], short: bool) -> list[dict[str, Any]]:
    """A streamed chunk as passed on: short answers are held back until they are snapped to their source."""
    if not (short and "answer" in chunk):
        return [chunk]
    rest = {k: v for k, v in chunk.items() if k != "answer"}
    return [AddableDict(rest)] if rest else []


def _closing(acc: dict[str, Any], short: bool) -> list[AddableDict]:
    """What follows the streamed chunks: the snapped short answer (merged into ``acc``), then the citations."""
    parts = []
    if short:
        parts.append(_short_answer(acc))
        acc.update(parts[-1])
    return [*parts, _citations(acc)]


def _short_answer(acc: dict[str, Any]) -> AddableDict:
    """The short answer style's final answer: the source span standing for the model's phrase, cited as `` [n]``
    (`extractive.snap`; a `[n]` the model wrote anyway is dropped with it), or the model's phrase as written when no
    span is close enough; ``model_answer`` keeps it."""
    raw = acc.get("answer", "")
    out = AddableDict(answer=raw.strip(), model_answer=raw)
    found = snap(raw, acc.get("documents", []), question=acc.get("question", ""))
    if found is not None:
        out["answer"] = f"{found.text} [{found.n}]"
    return out


def build_rag_chain(
    retriever: RetrieverLike,
    llm: BaseChatModel,
    *,
    lang: str = "auto",
    prompts: dict[str, LayeredPrompt] | None = None,
    max_words: int = 200,
    max_chars_per_chunk: int | None = 1500,
    answer_style: str = "full",
    reading_script: str = "auto",
) -> Runnable:
    """Build the chain described in the module docstring.

    The answer follows the question's language, and a Traditional Chinese question gets Traditional Chinese
    instructions. ``answer_style="short"`` asks for the answer phrase alone (for extractive questions and
    short-answer benchmarks scored by exact match / F1) and answers with the span of the
    retrieved chunk it was read from, cited as `` [n]`` after it (`extractive.snap`: Simplified characters for a
    Traditional source, a dropped word or different quotes come back as the source writes them; a Chinese span keeps
    the measure word or type the question asks for, 幾所 -> "14所"); the model's own
    phrase is kept as ``model_answer``, and the answer arrives as one chunk when streamed. ``"full"`` is the normal
    answer with the model's own `[n]` citations.
    ``prompts`` (by language, ``"zh"``/``"en"``) replace the built-in prompts for both styles.
    ``reading_script="simplified"`` (short answers only) gives the model a Chinese question and its chunks in
    Simplified script (OpenCC ``t2s``; Traditional text is converted, Simplified text stays) with the Simplified
    instructions; the answer is still snapped to the Traditional source span. ``"auto"`` (the default) reads
    Simplified for short answers and as written for full answers, whose text the user reads; ``"as-written"`` never
    converts.
    """
    if lang not in ("auto", "zh", "en"):
        raise ValueError(f"lang must be 'auto', 'zh' or 'en', got {lang!r}")
    if answer_style not in ANSWER_STYLES:
        raise ValueError(f"answer_style must be one of {ANSWER_STYLES}, got {answer_style!r}")
    if reading_script not in READING_SCRIPTS:
        raise ValueError(f"reading_script must be one of {READING_SCRIPTS}, got {reading_script!r}")
    if reading_script == "simplified" and answer_style != "short":
        raise ValueError("reading_script='simplified' needs answer_style='short' (a full answer would come back in "
                         f"Simplified script), got answer_style={answer_style!r}")
    simplified = reading_script == "simplified" or (reading_script == "auto" and answer_style == "short")
    custom = dict(prompts or {})

    def prompt_for(lng: str, traditional: bool) -> LayeredPrompt:
        if lng in custom:
            return custom[lng]
        return LayeredPrompt.for_question(lng, traditional=traditional, short=answer_style == "short")  # type: ignore[arg-type]

    def read_traditional(lng: str, question: str) -> bool:
        """Whether the model reads (and is instructed in) Traditional script for this question."""
        return lng == "zh" and is_traditional_chinese(question) and not simplified

    def to_messages(x: dict[str, Any]) -> list:
        lng = detect_language(x["question"]) if lang == "auto" else lang
        docs: list[Document] = x["documents"]
        route = "rag" if docs else "no_knowledge"
        question, knowledge = x["question"], format_knowledge(docs, max_chars_per_chunk)
        if lng == "zh" and simplified:
            question, knowledge = to_simplified(question), to_simplified(knowledge)
        return prompt_for(lng, read_traditional(lng, x["question"])).to_messages(
            route=route, question=question, knowledge=knowledge, history=x["history"], max_words=max_words,
        )

    short = answer_style == "short"
    parse = StrOutputParser()

    def off_target(answer: str, question: str) -> dict[str, str] | None:
        """The follow-up prompts when a short answer only echoes the question or restates it as a sentence."""
        if echoes_question(answer, question):
            return SHORT_RETRY
        return SHORT_RESTATE if restates_question(answer, question) else None

    def retry_for(first: str, x: dict[str, Any], msgs: list[BaseMessage]) -> list[BaseMessage] | None:
        """The follow-up messages when a short answer is off target (asked once), else None."""
        follow = off_target(first, x["question"]) if short else None
        if follow is None:
            return None
        lng = detect_language(x["question"]) if lang == "auto" else lang
        key = "zh-hant" if read_traditional(lng, x["question"]) else lng
        return [*msgs, AIMessage(first), HumanMessage(follow[key].format(phrase=clean_phrase(first)))]

    def better(first: str, second: str, question: str) -> str:
        """The second answer, unless it is empty, an echo, or a restatement after a first one that was one too."""
        if not clean_phrase(second) or echoes_question(second, question):
            return first
        return first if restates_question(second, question) and not echoes_question(first, question) else second

    def short_answer(x: dict[str, Any], config: RunnableConfig) -> str:
        msgs = to_messages(x)
        first = parse.invoke(llm.invoke(msgs, config=config))
        again = retry_for(first, x, msgs)
        return first if again is None else better(first, parse.invoke(llm.invoke(again, config=config)), x["question"])

    async def ashort_answer(x: dict[str, Any], config: RunnableConfig) -> str:
        msgs = to_messages(x)
        first = parse.invoke(await llm.ainvoke(msgs, config=config))
        again = retry_for(first, x, msgs)
        if again is None:
            return first
        return better(first, parse.invoke(await llm.ainvoke(again, config=config)), x["question"])

    # full answers stream token by token; a short one is held back until snapped anyway, so it may be asked twice
    answer = RunnableLambda(short_answer, afunc=ashort_answer) if short else RunnableLambda(to_messages) | llm | parse

    def finish(chunks: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        acc: dict[str, Any] = {}
        for c in chunks:
            _accumulate(acc, c)
            yield from _held_back(c, short)
        yield from _closing(acc, short)

    async def afinish(chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        acc: dict[str, Any] = {}
        async for c in chunks:
            _accumulate(acc, c)
            for part in _held_back(c, short):
                yield part
        for part in _closing(acc, short):
            yield part

    return (
        RunnableLambda(_prepare)
        | RunnablePassthrough.assign(documents=(lambda x: x["question"]) | retriever)
        | RunnablePassthrough.assign(context=lambda x: x["documents"])
        | RunnablePassthrough.assign(answer=answer)
        | RunnableGenerator(finish, afinish)
    ).with_config(run_name="ctxrag_rag")
