"""`MultiHopAnswer`: multi-hop answers by iterative retrieval (IRCoT-style), a runnable over a retriever and a chat
model.

One retrieval and one answer cannot follow a chain of facts ("When was the singer of Hello born?" needs the singer
first, then the birth). This chain retrieves, reads, and retrieves again:

1. retrieve for the question itself;
2. **hop**: the model reads the passages this hop found (only those no earlier hop showed it) beside the facts it
   kept so far, and replies, grammar-constrained (`HopStep`), with the sentence of them that helps (the fact) and
   either the next sub-question or the answer;
3. the fact is kept as a short note (not the passage, so each prompt stays small) when the passages hold it
   (`grounded`: its numbers and most of its words); the loop stops on an answer the passages read so far hold the
   same way (a small model answers the first hop from memory: "born in 1974" for a singer the passages have not
   named yet), and not before hop ``min_hops``; otherwise it retrieves for the sub-question, or, without one, for the fact and the made-up answer
   (IRCoT's query: the model's last sentence still names what to look up), and reads again. The last hop (``max_hops``) asks for the best answer (`LastHop`) and
   takes it as it is. A query asked before, or none, ends the loop with the last answer the model gave, or, when it
   gave none, with the last hop's request over the facts alone (a hop with an empty query).

``bridge=True`` (self-ask style, no plan, no notes): after each retrieval but the last, the model reads every
passage read so far and writes only short strings (`Bridge`): the one name or fact still missing, as a search, and
the answer if the passages give it; the missing name is retrieved next. At the end the answer is read in a few words
over every passage (`ctxrag.chains.short_answer.ExtractiveAnswer`); a phrase that names one of the loop's own searches
(its middle entity: "Mexico" after searching "Mexico political party of ...") is asked for once more, as a step on
the way and not the answer (``rejected_answer`` in the output keeps the first phrase).

The answer is snapped to the span of a read passage that states it (`ctxrag.chains.extractive.snap`) and cited as
`` [n]`` over ``documents`` (every passage read, in reading order).

Output: the ask chain's shape (`ctxrag.chains.ask.RagAnswer`): ``question``, ``documents`` / ``context``,
``answer``, ``sources``, ``invalid_citations``, ``citations``, ``supported``, ``relevance`` (None), ``route``; plus
``model_answer`` (the model's words) and ``hops`` (`Hop.to_dict` per hop: the query, the passages read, the fact,
the answer or next question). ``supported`` is True when the answer is a span of a passage read, False when the loop
ended without an answer (``answer`` is then the "nothing found" notice) or with one no passage states (kept, uncited).

A reply the schema cannot read (a chat model without structured output) is parsed from its text as JSON; a reply
that is not JSON at all ends the loop as one without an answer.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.chains.multihop import MultiHopAnswer
    from ctxrag.models.chat import make_chat_model
    chain = MultiHopAnswer(KnowledgeBase.open("demo").as_retriever(k=3), make_chat_model(), max_hops=3)
    out = chain.invoke("星河知识库的默认端口是多少？")
    out["answer"], [h["query"] for h in out["hops"]]
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from pydantic import BaseModel, Field, StringConstraints, ValidationError

from ctxrag.chains.extractive import snap
from ctxrag.chains.rag import cite_sources
from ctxrag.chains.relevance import no_knowledge_notice
from ctxrag.models.structured import structured_runnable
from ctxrag.chains.short_answer import ExtractiveAnswer
from ctxrag.prompts.multihop import bridge_messages, hop_messages, plan_messages, sub_answer_messages
from ctxrag.schema import chunk_key

log = logging.getLogger(__name__)

MAX_FACT_CHARS = 160
"""Longest fact the grammar lets the model keep from one hop: one sentence with its names and dates."""
MAX_ANSWER_CHARS = 40
"""Longest answer the grammar lets the model write (a name, a date, a short phrase)."""
MAX_SEARCH_CHARS = 60
"""Longest search string the grammar lets the model write for the missing name or fact (``bridge``)."""
MAX_QUESTION_CHARS = 120
"""Longest sub-question the grammar lets the model write."""
MAX_SUB_QUESTIONS = 4
"""Most sub-questions a decomposition may list (the multi-hop questions measured chain two to four facts)."""
_REFERENCE = re.compile(r"#(\d)")
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)
_TOKEN = re.compile(r"[\u4e00-\u9fff]|[^\W_\u4e00-\u9fff]+", re.UNICODE)
MIN_GROUNDED = 0.6
"""Share of a fact's words (Chinese: characters) its hop's passages must hold for it to be kept; of an answer's, the
passages read so far, for the loop to stop on it."""


class HopStep(BaseModel):
    """One hop's reply: the sentence of the new passages that helps, then the next sub-question or (none) the answer.
    The sub-question comes before the answer: a small model asked for the answer first gives one from memory."""

    fact: str = Field(default="", max_length=MAX_FACT_CHARS)
    next_question: str = Field(default="", max_length=MAX_QUESTION_CHARS)
    answer: str = Field(default="", max_length=MAX_ANSWER_CHARS)


class LastHop(BaseModel):
    """The last hop's reply: the fact the new passages add, then the best answer."""

    fact: str = Field(default="", max_length=MAX_FACT_CHARS)
    answer: str = Field(default="", max_length=MAX_ANSWER_CHARS)


class Bridge(BaseModel):
    """A hop's reply without a plan (``bridge``): the one name or fact still missing, as a short search string, then
    the answer when the passages give it. Short strings only: the 1.5B writes these far better than plans."""

    missing: str = Field(default="", max_length=MAX_SEARCH_CHARS)
    answer: str = Field(default="", max_length=MAX_ANSWER_CHARS)


class Plan(BaseModel):
    """The decomposition: the simple questions that answer the question, in order; ``#n`` names the n-th's answer."""

    questions: list[Annotated[str, StringConstraints(max_length=MAX_QUESTION_CHARS)]] = Field(
        default_factory=list, max_length=MAX_SUB_QUESTIONS)


class SubAnswer(BaseModel):
    """One sub-question's answer, a few words copied from its search results."""

    answer: str = Field(default="", max_length=MAX_ANSWER_CHARS)


def resolve(sub_question: str, answers: list[str]) -> str:
    """``sub_question`` with each ``#n`` replaced by the n-th answer; one that names no earlier answer gets the last
    one appended (its search needs the name: "Who led the country?" after "Somalia").

    >>> resolve("Where was #1 born?", ["Frank Herbert"])
    'Where was Frank Herbert born?'
    >>> resolve("Who led the country?", ["Somalia"])
    'Who led the country? Somalia'
    """
    def sub(m: re.Match[str]) -> str:
        n = int(m.group(1))
        return answers[n - 1] if 1 <= n <= len(answers) else m.group(0)

    text = _REFERENCE.sub(sub, sub_question).strip()
    if answers and not _REFERENCE.search(sub_question):
        text = f"{text} {answers[-1]}"
    return text


@dataclass
class Hop:
    """One hop of the loop: what was searched, which passages were read, what the model kept and decided."""

    query: str
    """What this hop retrieved for: the question, then each sub-question; "" for the request of a loop that ran out
    of queries before an answer (no retrieval: the best answer from the facts)."""
    read: list[int] = field(default_factory=list)
    """The passages this hop showed the model, numbered as in ``documents`` (from 1)."""
    fact: str = ""
    answer: str = ""
    next_question: str = ""
    kept: bool = False
    """Whether the fact was kept as a note (the passages hold it, `grounded`)."""
    error: str | None = None
    """Why the model's reply could not be read (the loop then stops)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def grounded(fact: str, passages: str) -> bool:
    """Whether ``passages`` hold ``fact``: every number in it, and at least `MIN_GROUNDED` of its words (characters
    for Chinese), case folded.

    >>> grounded("Mara Velt was born in 1961.", "Mara Velt is a singer. She was born in Aarhus in 1961.")
    True
    >>> grounded("Mara Velt was born in 1974.", "Mara Velt is a singer. She was born in Aarhus in 1961.")
    False
    """
    words = _TOKEN.findall(fact.lower())
    if not words:
        return False
    held = set(_TOKEN.findall(passages.lower()))
    if any(w.isdigit() and w not in held for w in words):
        return False
    return sum(w in held for w in words) / len(words) >= MIN_GROUNDED


def _same_question(a: str, b: str) -> bool:
    return _NOT_WORD.sub("", a.lower()) == _NOT_WORD.sub("", b.lower())


def _from_text(text: str, schema: type[BaseModel]) -> BaseModel | None:
    """The reply's JSON object read as ``schema`` (a model without structured output); None when it is not one."""
    found = _JSON_OBJECT.search(text)
    if found is None:
        return None
    try:
        return schema.model_validate(json.loads(found.group(0)))
    except (ValueError, ValidationError):
        return None


def _prepare(inp: Any) -> str:
    question = inp.get("question", inp.get("input")) if isinstance(inp, dict) else inp
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"MultiHopAnswer needs a question (a string or {{'question': str}}), got {inp!r}")
    return question.strip()


BRIDGE_MIN_HOPS = 3
"""``min_hops`` of the bridge as `ctxrag.chains.ask.build_ask_chain` (``ctxrag ask --multi-hop``) runs it: the loop
makes at least this many retrievals (at most ``max_hops``), searching the hop's answer when the model names nothing
new to look up. Chosen on the multi-hop answers benchmark (its page says on which questions)."""


class MultiHopAnswer(RunnableSerializable[Any, dict[str, Any]]):
    """Iterative retrieval over ``retriever`` with ``llm`` (see the module docstring).

    Input: a question, or ``{"question": str}``; output: the ask chain's dict plus ``hops`` and ``model_answer``.
    """

    retriever: RetrieverLike
    """Retrieves for the question and for each sub-question (any LangChain retriever; hybrid or graph in ctxrag)."""
    llm: Runnable[Any, BaseMessage]
    """The chat model asked at each hop (`with_structured_output` when it has it)."""
    max_hops: int = 3
    """Most retrievals (and model calls) per question."""
    min_hops: int = 2
    """No answer is taken before this hop (the last hop's always is): the 1.5B answers a two-hop question from the
    first passage it reads ("1998" for the birth year of a 1998 song's singer); 1 lets a one-hop question stop at
    once."""
    passages_per_hop: int = 3
    """Most new passages (not read at an earlier hop) shown to the model per hop."""
    max_chars_per_passage: int = 600
    """Characters of each passage shown to the model."""
    max_tokens: int = 128
    """Most tokens of one hop's reply."""
    decompose: bool = False
    """Split the question into simple sub-questions up front (`Plan`, one call), then answer each over its own
    retrieval in a few words copied from the passages (`SubAnswer`), ``#n`` in a later one replaced by the n-th
    answer; the last answer is the answer. At most ``max_hops`` sub-questions; a plan the model cannot give falls
    back to the loop. False: the loop above."""
    bridge: bool = False
    """Iterative retrieval without a plan or notes (self-ask style): retrieve for the question; at each hop but the
    last the model reads every passage read so far and names the one thing still missing as a short search string
    (`Bridge`), which is retrieved next (its answer, when it names nothing missing before hop ``min_hops``); the
    loop ends at ``max_hops`` retrievals, on no search string or one searched before (from hop ``min_hops``; before
    it, the hop's answer is searched instead, when it is new; the ask chain runs the bridge with
    `BRIDGE_MIN_HOPS`). The
    answer is then read in a few words over every passage read (`ExtractiveAnswer`, snapped to a span);
    ``loop_answer`` in the output is the last answer a hop gave. Takes precedence over ``decompose``."""

    model_config = {"arbitrary_types_allowed": True}

    def __init__(self, retriever: RetrieverLike, llm: Runnable[Any, BaseMessage], **kwargs: Any) -> None:
        super().__init__(retriever=retriever, llm=llm, **kwargs)  # type: ignore[call-arg]  # pydantic fields
        for name in ("max_hops", "min_hops", "passages_per_hop", "max_chars_per_passage", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)!r}")

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        # langchain-core's hints omit the (input, config) form _call_with_config accepts
        return self._call_with_config(self._run, input, config, run_type="chain")  # type: ignore[arg-type]

    def _passages(self, docs: list[Document], first: int) -> str:
        blocks = []
        for n, d in enumerate(docs, first):
            text = " ".join(d.page_content.split())[: self.max_chars_per_passage]
            title = d.metadata.get("title") or ""
            blocks.append(f"[{n}] {title + ': ' if title and not text.startswith(title) else ''}{text}")
        return "\n".join(blocks)

    def _ask(self, question: str, facts: list[str], passages: str, last: bool,
             config: RunnableConfig) -> tuple[HopStep | LastHop | None, str | None]:
        schema: type[HopStep] | type[LastHop] = LastHop if last else HopStep
        reply = structured_runnable(self.llm, schema, max_tokens=self.max_tokens).invoke(
            hop_messages(question, facts, passages, last=last), config)
        parsed = reply.parsed if isinstance(reply.parsed, schema) else _from_text(reply.text, schema)
        if not isinstance(parsed, (HopStep, LastHop)):
            log.warning("multi-hop: the model's reply could not be read (%s)", reply.error)
            return None, reply.error or "the reply is not the JSON asked for"
        return parsed, None

    def _run(self, inp: Any, config: RunnableConfig) -> dict[str, Any]:
        question = _prepare(inp)
        if self.bridge:
            return self._run_bridge(question, config)
        if self.decompose:
            planned = self._run_plan(question, config)
            if planned is not None:
                return planned
        documents: list[Document] = []
        seen: set[str] = set()
        facts: list[str] = []
        hops: list[Hop] = []
        query, answer = question, ""
        for i in range(self.max_hops):
            last = i == self.max_hops - 1
            found = self.retriever.invoke(query, config)
            new = [d for d in found if chunk_key(d) not in seen][: self.passages_per_hop]
            seen.update(chunk_key(d) for d in new)
            hop = Hop(query=query, read=list(range(len(documents) + 1, len(documents) + len(new) + 1)))
            passages = self._passages(new, len(documents) + 1)
            documents.extend(new)
            read = "\n".join(d.page_content for d in documents)
            hops.append(hop)
            reply, hop.error = self._ask(question, facts, passages, last, config)
            if reply is None:
                break
            hop.fact, hop.answer = reply.fact.strip(), reply.answer.strip()
            hop.next_question = getattr(reply, "next_question", "").strip()
            hop.kept = bool(hop.fact) and grounded(hop.fact, passages) and not any(
                _same_question(hop.fact, f) for f in facts)
            if hop.kept:
                facts.append(hop.fact)
            answer = hop.answer or answer
            if hop.answer and (last or (i + 1 >= self.min_hops and grounded(hop.answer, read))):
                break
            query = hop.next_question or " ".join(x for x in (hop.fact, hop.answer) if x)
            if not query or any(_same_question(query, h.query) for h in hops):
                break
        if not answer and hops and hops[-1].error is None and len(hops) < self.max_hops:
            answer = self._best_answer(question, facts, hops, config)
        return self._output(question, answer, documents, hops)

    def _run_bridge(self, question: str, config: RunnableConfig) -> dict[str, Any]:
        """The loop of ``bridge``: retrieve, ask for the missing name, retrieve for it; a short answer at the end."""
        documents: list[Document] = []
        seen: set[str] = set()
        hops: list[Hop] = []
        query, loop_answer = question, ""

        def searchable(q: str) -> bool:  # a search string not made before
            return bool(q) and not any(_same_question(q, h.query) for h in hops)

        for i in range(self.max_hops):
            found = self.retriever.invoke(query, config)
            new = [d for d in found if chunk_key(d) not in seen][: self.passages_per_hop]
            seen.update(chunk_key(d) for d in new)
            hops.append(hop := Hop(query=query, read=list(range(len(documents) + 1, len(documents) + len(new) + 1))))
            documents.extend(new)
            if i == self.max_hops - 1:
                break
            searched = [h.query for h in hops[1:]]
            reply = structured_runnable(self.llm, Bridge, max_tokens=self.max_tokens).invoke(
                bridge_messages(question, searched, self._passages(documents, 1)), config)
            parsed = reply.parsed if isinstance(reply.parsed, Bridge) else _from_text(reply.text, Bridge)
            if not isinstance(parsed, Bridge):
                hop.error = reply.error or "the reply is not the JSON asked for"
                log.warning("multi-hop: the model's reply could not be read (%s)", hop.error)
                break
            hop.next_question, hop.answer = parsed.missing.strip(), parsed.answer.strip()
            loop_answer = hop.answer or loop_answer
            if not hop.next_question and i + 1 >= self.min_hops:
                break
            query = hop.next_question or hop.answer
            if i + 1 < self.min_hops and not searchable(query):
                query = hop.answer  # before hop min_hops a search made before is not an end: look up the answer
            if not searchable(query):
                break
        return {**self.final_read(question, documents, hops, config), "loop_answer": loop_answer}

    def final_read(self, question: str, documents: list[Document], hops: list[Hop],
                   config: RunnableConfig | None = None) -> dict[str, Any]:
        """The bridge's last step: the answer read in a few words over ``documents`` (`ExtractiveAnswer`), the
        searches of ``hops`` after the first given as names found on the way (a phrase naming one is asked for once
        more; the first phrase is then ``rejected_answer``). The output as `invoke`'s, without ``loop_answer``."""
        if not documents:
            return self._output(question, "", documents, hops)
        read = ExtractiveAnswer(self.llm).invoke({"question": question, "documents": documents, "history": [],
                                                  "intermediate": [h.query for h in hops[1:]]}, config)
        out = self._output(question, str(read.get("model_answer", "")).strip(), documents, hops)
        return out if "rejected_answer" not in read else {**out, "rejected_answer": read["rejected_answer"]}

    def _plan(self, question: str, config: RunnableConfig) -> list[str]:
        reply = structured_runnable(self.llm, Plan, max_tokens=self.max_tokens).invoke(plan_messages(question), config)
        parsed = reply.parsed if isinstance(reply.parsed, Plan) else _from_text(reply.text, Plan)
        if not isinstance(parsed, Plan):
            log.warning("multi-hop: the decomposition could not be read (%s)", reply.error)
            return []
        return [q.strip() for q in parsed.questions if q.strip()][: self.max_hops]

    def _run_plan(self, question: str, config: RunnableConfig) -> dict[str, Any] | None:
        """Decomposition (``decompose``): None when the model gives no sub-questions (the loop then runs)."""
        subs = self._plan(question, config)
        if not subs:
            return None
        documents: list[Document] = []
        number: dict[str, int] = {}
        hops: list[Hop] = []
        answers: list[str] = []
        for i, sub in enumerate(subs):
            query = resolve(sub, answers)
            shown = self.retriever.invoke(query, config)[: self.passages_per_hop]
            for d in shown:
                if chunk_key(d) not in number:
                    documents.append(d)
                    number[chunk_key(d)] = len(documents)
            hop = Hop(query=query, read=[number[chunk_key(d)] for d in shown],
                      next_question=subs[i + 1] if i + 1 < len(subs) else "")
            hops.append(hop)
            blocks = [self._passages([d], number[chunk_key(d)]) for d in shown]
            reply = structured_runnable(self.llm, SubAnswer, max_tokens=self.max_tokens).invoke(
                sub_answer_messages(query, "\n".join(blocks)), config)
            parsed = reply.parsed if isinstance(reply.parsed, SubAnswer) else _from_text(reply.text, SubAnswer)
            if not isinstance(parsed, SubAnswer):
                hop.error = reply.error or "the reply is not the JSON asked for"
                break
            hop.answer = parsed.answer.strip()
            if not hop.answer:
                break
            answers.append(hop.answer)
        answer = answers[-1] if len(answers) == len(subs) else ""
        return self._output(question, answer, documents, hops)

    def _best_answer(self, question: str, facts: list[str], hops: list[Hop], config: RunnableConfig) -> str:
        """The last hop's request without retrieving (nothing new to search for): the best answer from the facts."""
        final = Hop(query="")
        hops.append(final)
        reply, final.error = self._ask(question, facts, "", True, config)
        if reply is not None:
            final.answer = reply.answer.strip()
        return final.answer

    @staticmethod
    def _output(question: str, answer: str, documents: list[Document], hops: list[Hop]) -> dict[str, Any]:
        out: dict[str, Any] = {"question": question, "documents": documents, "context": documents,
                               "model_answer": answer, "hops": [h.to_dict() for h in hops], "relevance": None}
        if not answer:
            return {**out, "answer": no_knowledge_notice(question), "supported": False, "route": "no_knowledge",
                    "sources": [], "invalid_citations": [], "citations": []}
        span = snap(answer, documents, question=question)
        cited = answer if span is None else f"{span.text} [{span.n}]"
        out.update(answer=cited, supported=span is not None, route="rag")
        return {**out, **cite_sources(out)}
