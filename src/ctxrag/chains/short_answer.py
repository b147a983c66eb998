"""`ExtractiveAnswer`: the answer phrase alone, returned as the span of the retrieved chunk it was read from.

An optional answer step for `build_rag_chain` (``answer=ExtractiveAnswer(llm)``), for extractive questions and short-
answer benchmarks scored by exact match / F1 (``ctxrag eval answers --answer-style short``). The model is asked for
the answer phrase alone; a phrase that only echoes the question or restates it as a sentence is asked for once more;
the phrase is then snapped to the source span (`ctxrag.chains.extractive.snap`: Simplified characters for a
Traditional source, a dropped word or different quotes come back as the source writes them, a Chinese span keeps the
measure word the question asks for, 幾所 -> "14所", a cut bracket pair is closed) and cited as `` [n]`` after it. The
model's own phrase is kept as ``model_answer``; ``snapped`` says whether a chunk holds it (the chain's verdict calls a
phrase no chunk holds unsupported, `ctxrag.chains.rag.final_verdict`).

``"intermediate"`` in the input (a multi-hop chain's searches after the first, `ctxrag.chains.multihop`): names the
chain looked up on the way. A phrase one of them holds (`ctxrag.chains.extractive.names_one_of`: "Mexico" after the
search "Mexico political party of ...") is the chain's middle entity, not the answer, and is asked for once more with
that said (`ctxrag.prompts.layers.SHORT_INTERMEDIATE`); the first phrase is then kept as ``rejected_answer``.

``reading_script="simplified"`` gives the model a Chinese question and its chunks in Simplified script (OpenCC
``t2s``) with the Simplified instructions; the answer is still snapped to the Traditional source. ``"auto"`` (the
default) is ``"simplified"``; ``"as-written"`` never converts.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.chains.rag import build_rag_chain
    from ctxrag.chains.short_answer import ExtractiveAnswer
    from ctxrag.models.chat import make_chat_model
    llm = make_chat_model(max_tokens=48)
    chain = build_rag_chain(KnowledgeBase.open("demo").as_retriever(k=1), llm, answer=ExtractiveAnswer(llm))
    chain.invoke("星河知识库的默认端口是多少？")["answer"]     # '7420 [1]', the span as the source writes it
"""
from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable

from ctxrag.chains.extractive import clean_phrase, echoes_question, names_one_of, restates_question, snap
from ctxrag.chains.rag import answer_messages, question_language
from ctxrag.prompts.layers import SHORT_INTERMEDIATE, SHORT_RESTATE, SHORT_RETRY, LayeredPrompt
from ctxrag.text import is_traditional_chinese

READING_SCRIPTS = ("auto", "as-written", "simplified")


class ExtractiveAnswer(RunnableSerializable[dict[str, Any], dict[str, Any]]):
    """Answer step of `build_rag_chain` giving the source span as the answer (see the module docstring).

    Input: the chain's state ``{"question", "documents", "history"}`` (optionally ``"intermediate"``, names found on
    the way); output: the same with ``answer`` (the span and `` [n]``, or the model's phrase when no span is close
    enough), ``model_answer`` and, when the phrase named an intermediate name and was asked again,
    ``rejected_answer`` (the first phrase).
    """

    llm: Runnable[Any, BaseMessage]
    """The chat model asked for the phrase (a `BaseChatModel`, or one bound with ``.bind(max_tokens=...)``)."""
    lang: str = "auto"
    """``"auto"`` follows the question; ``"zh"`` / ``"en"`` force the prompt language."""
    prompts: dict[str, LayeredPrompt] | None = None
    """Prompts by language replacing the built-in short-answer prompts."""
    reading_script: str = "auto"
    """``"auto"`` / ``"simplified"``: the model reads Chinese in Simplified script; ``"as-written"``: as written."""
    max_chars_per_chunk: int | None = 1500
    """Characters of each chunk shown to the model."""

    model_config = {"arbitrary_types_allowed": True}

    def __init__(self, llm: Runnable[Any, BaseMessage], **kwargs: Any) -> None:
        super().__init__(llm=llm, **kwargs)  # type: ignore[call-arg]  # pydantic fields: llm is one
        if self.lang not in ("auto", "zh", "en"):
            raise ValueError(f"lang must be 'auto', 'zh' or 'en', got {self.lang!r}")
        if self.reading_script not in READING_SCRIPTS:
            raise ValueError(f"reading_script must be one of {READING_SCRIPTS}, got {self.reading_script!r}")

    @property
    def _simplified(self) -> bool:
        return self.reading_script != "as-written"

    def _messages(self, x: dict[str, Any]) -> list[BaseMessage]:
        return answer_messages(x, lang=self.lang, prompts=self.prompts, short=True, simplified=self._simplified,
                               max_chars_per_chunk=self.max_chars_per_chunk)

    def _retry(self, first: str, x: dict[str, Any], msgs: list[BaseMessage]) -> list[BaseMessage] | None:
        """The follow-up messages when the phrase only echoes the question or restates it (asked once), else None."""
        question = x["question"]
        follow = SHORT_RETRY if echoes_question(first, question) else (
            SHORT_RESTATE if restates_question(first, question) else None)
        return None if follow is None else self._follow_up(follow, first, x, msgs)

    def _intermediate(self, first: str, x: dict[str, Any], msgs: list[BaseMessage]) -> list[BaseMessage] | None:
        """The follow-up messages when the phrase is a name the chain found on the way (``x["intermediate"]``)."""
        if names_one_of(first, x.get("intermediate") or []) is None:
            return None
        return self._follow_up(SHORT_INTERMEDIATE, first, x, msgs)

    def _follow_up(self, follow: dict[str, str], first: str, x: dict[str, Any],
                   msgs: list[BaseMessage]) -> list[BaseMessage]:
        """``msgs``, the first phrase as the model's turn, and `follow`'s text in the question's language and script."""
        question = x["question"]
        lng = question_language(question, self.lang)
        key = "zh-hant" if lng == "zh" and is_traditional_chinese(question) and not self._simplified else lng
        return [*msgs, AIMessage(first), HumanMessage(follow[key].format(phrase=clean_phrase(first)))]

    @staticmethod
    def _better(first: str, second: str, question: str) -> str:
        """The second phrase, unless it is empty, an echo, or a restatement after a first one that was one too."""
        if not clean_phrase(second) or echoes_question(second, question):
            return first
        return first if restates_question(second, question) and not echoes_question(first, question) else second

    @staticmethod
    def _snapped(x: dict[str, Any], raw: str, rejected: str | None = None) -> dict[str, Any]:
        found = snap(raw, x.get("documents", []), question=x.get("question", ""))
        answer = raw.strip() if found is None else f"{found.text} [{found.n}]"
        out = {**x, "answer": answer, "model_answer": raw, "snapped": found is not None}
        return out if rejected is None else {**out, "rejected_answer": rejected}

    def invoke(self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return self._call_with_config(self._run, input, config, run_type="chain")  # type: ignore[arg-type]

    async def ainvoke(self, input: dict[str, Any], config: RunnableConfig | None = None,
                      **kwargs: Any) -> dict[str, Any]:
        return await self._acall_with_config(self._arun, input, config, run_type="chain")  # type: ignore[arg-type]

    def _run(self, x: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        parse, msgs = StrOutputParser(), self._messages(x)
        first = parse.invoke(self.llm.invoke(msgs, config=config))
        again = self._retry(first, x, msgs)
        if again is not None:
            first = self._better(first, parse.invoke(self.llm.invoke(again, config=config)), x["question"])
        onward = self._intermediate(first, x, msgs)
        if onward is None:
            return self._snapped(x, first)
        second = self._better(first, parse.invoke(self.llm.invoke(onward, config=config)), x["question"])
        return self._snapped(x, second, rejected=first)

    async def _arun(self, x: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        parse, msgs = StrOutputParser(), self._messages(x)
        first = parse.invoke(await self.llm.ainvoke(msgs, config=config))
        again = self._retry(first, x, msgs)
        if again is not None:
            first = self._better(first, parse.invoke(await self.llm.ainvoke(again, config=config)), x["question"])
        onward = self._intermediate(first, x, msgs)
        if onward is None:
            return self._snapped(x, first)
        second = self._better(first, parse.invoke(await self.llm.ainvoke(onward, config=config)), x["question"])
        return self._snapped(x, second, rejected=first)
