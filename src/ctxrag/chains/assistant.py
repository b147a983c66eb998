"""The assistant: decides per question, in the background, whether to chat, retrieve, say "no material", or summarise
the selected documents, then answers with a five-level `LayeredPrompt`, streaming.

Input ``{"question", "selected_doc_ids": [...], "history": [(role, text), ...], "allow_general_knowledge": bool}``
(a bare string is a question). Flow: rewrite a follow-up into a standalone question -> route ->

- ``chat``: plain answer, no sources;
- ``rag``: the ask chain `ctxrag ask` and ``/ask`` answer with (`ctxrag.chains.ask.build_ask_chain`), over the
  standalone question and the history: hybrid retrieval (restricted to the selected documents when there are any;
  optionally after a catalog first stage that picks documents), the relevance gate (with the router's margin, and
  optionally an LLM yes/no), the evidence check (the model quotes the sentence that states the answer; the quote
  must be in a chunk and about the question), the cited answer and its ``steps`` (default the citation check); a
  "no" from the gate or the evidence check turns the route into ``no_knowledge``;
- ``no_knowledge``: a fixed, plain "the knowledge base has no material on ..." notice, no sources; with
  ``allow_general_knowledge`` the model then answers from general knowledge, marked as such;
- ``summary``: whole-document summaries of the selected documents (map-reduce when long), answered with ``[n]``
  citing documents.

Output of `invoke`: ``{"route", "decision", "question", "standalone_question", "supported", "relevance", "answer",
"answer_as_written", "documents", "sources", "invalid_citations", "citations"}`` on every route (``supported``:
True when answered from the knowledge base, False for the no-knowledge notice, whose reason is
``decision["reason"]``, None for chat and summaries; ``answer_as_written`` None but on the RAG route), the shape of
`ctxrag.chains.ask.RagAnswer` plus the decision. The RAG route's fields are the ask chain's own, so its ``supported``
agrees with the citation check as the ask chain's does (`ctxrag.chains.rag.final_verdict`: an answer no chunk holds
a sentence of is not supported). `stream` yields ``{"route", "decision", ...}`` first, then ``{"answer": delta}``
chunks, then ``{"documents", "sources", "invalid_citations", "citations", ...}``; on the RAG route ``supported`` and
``relevance`` come with that last chunk, on the others with the first.

The steps are LCEL runnables named ``rewrite`` -> ``route`` -> ``retrieve`` -> ``answer`` (`Assistant.chain`;
on the RAG route ``retrieve`` picks the documents to search and the ask chain retrieves inside ``answer``); the
caller's config (callbacks, tags, ``--debug`` tracing) reaches each of them and every LLM call inside, so
``astream_events`` shows the turn step by step.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.chains.assistant import Assistant
    from ctxrag.models.chat import make_chat_model
    bot = Assistant(KnowledgeBase.open("demo"), make_chat_model(max_tokens=200))
    out = bot.invoke({"question": "JINA最近有什么新研究？"})
    out["route"], out["answer"]            # 'no_knowledge', '知识库中没有关于“JINA最近有什么新研究？”的资料。'
"""
from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator, Sequence

from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableGenerator, RunnableLambda
from langchain_core.runnables.utils import AddableDict

from ctxrag.chains.ask import build_ask_chain
from ctxrag.chains.citations import map_citations
from ctxrag.chains.evidence import EvidenceCheck, default_evidence_check
from ctxrag.chains.rag import DEFAULT_STEPS, AnswerStep, OnInstruction
from ctxrag.chains.relevance import RelevanceGate, no_knowledge_notice
from ctxrag.chains.rewrite import QuestionRewriter
from ctxrag.chains.router import EmbeddingRouter, Route, RouteDecision, Router
from ctxrag.chains.summarize import DocumentSummarizer
from ctxrag.prompts.layers import LayeredPrompt
from ctxrag.stores.filters import MetadataFilter
from ctxrag.stores.protocols import CatalogSource, DocumentCatalogView
from ctxrag.text import detect_language

if TYPE_CHECKING:  # pragma: no cover
    from langchain_core.language_models import BaseChatModel

log = logging.getLogger(__name__)


_ASK_ONLY = frozenset({"question", "history", "context", "route", "input"})
"""Fields of the ask chain's output the assistant's head already carries (or does not send)."""


def _prepare(inp: Any) -> dict[str, Any]:
    if isinstance(inp, str):
        inp = {"question": inp}
    if not isinstance(inp, dict) or not isinstance(inp.get("question"), str) or not inp["question"].strip():
        raise ValueError(f"assistant input needs a non-empty 'question' string, got {inp!r:.200}")
    history = [tuple(h) if isinstance(h, list) else h for h in (inp.get("history") or [])]
    selected = inp.get("selected_doc_ids") or []
    if isinstance(selected, str) or not all(isinstance(s, str) for s in selected):
        raise ValueError(f"'selected_doc_ids' must be a list of document ids, got {selected!r:.200}")
    return {"question": inp["question"].strip(), "history": history, "selected_doc_ids": list(selected),
            "allow_general_knowledge": bool(inp.get("allow_general_knowledge", False))}


class Assistant(Runnable[Any, dict[str, Any]]):
    """Routing assistant over one knowledge base (see the module docstring)."""

    def __init__(
        self,
        kb: CatalogSource,
        llm: BaseChatModel | None,
        *,
        router: Router | None = None,
        catalog: DocumentCatalogView | None = None,
        rewrite: bool = True,
        k: int = 4,
        mode: str = "hybrid",
        catalog_first_stage: int | None = None,
        relevance_margin: float | None = None,
        llm_relevance: bool = False,
        evidence: EvidenceCheck | bool = True,
        prompts: dict[str, LayeredPrompt] | None = None,
        max_tokens: int | None = None,
        max_words: int = 200,
        max_chars_per_chunk: int = 1200,
        summarizer: DocumentSummarizer | None = None,
        steps: Sequence[AnswerStep] = DEFAULT_STEPS,
        on_instruction: OnInstruction | None = None,
    ) -> None:
        self.kb = kb
        self.llm = llm
        self.catalog = catalog or kb.catalog()
        fallback = router if isinstance(router, EmbeddingRouter) else getattr(router, "fallback", None)
        self.fast = fallback if isinstance(fallback, EmbeddingRouter) else EmbeddingRouter(kb, catalog=self.catalog)
        self.router: Router = router or self.fast
        self.rewriter = QuestionRewriter(llm if rewrite else None)
        self.k = k
        self.mode = mode
        self.catalog_first_stage = catalog_first_stage
        self.relevance_margin = relevance_margin
        self.llm_relevance = llm_relevance
        # True without a chat model: nothing to quote with, so no evidence check (True itself is no check)
        self.evidence: EvidenceCheck | None = (
            (default_evidence_check(llm, kb) if llm is not None else None) if evidence is True else (evidence or None))
        self.given_prompts = dict(prompts or {})
        """The prompts given, by language (the RAG route's default: the ask chain's, `LayeredPrompt.for_question`)."""
        self.prompts = {"zh": LayeredPrompt.default("zh"), "en": LayeredPrompt.default("en")}
        self.prompts.update(self.given_prompts)
        self.max_tokens = max_tokens
        self.max_words = max_words
        self.max_chars_per_chunk = max_chars_per_chunk
        self.summarizer = summarizer or DocumentSummarizer(kb, llm, catalog=self.catalog)
        self.steps = tuple(steps)
        self.on_instruction = on_instruction
        """The RAG route's answer that repeats a planted instruction: flagged or withheld (None: the
        ``answer_on_instruction`` setting; `ctxrag.chains.ask.build_ask_chain`)."""
        self._chain: Runnable[Any, dict[str, Any]] | None = None
        self._gates: dict[float, RelevanceGate] = {}

    # -- runnable: rewrite -> route -> retrieve -> answer, composed with LCEL -------------------------------------
    @property
    def chain(self) -> Runnable[Any, dict[str, Any]]:
        """The composed chain; every step gets the caller's config, so callbacks and tracing see each LLM call."""
        if self._chain is None:
            self._chain = (
                RunnableLambda(_prepare, name="prepare")
                | RunnableLambda(self._rewrite_step, name="rewrite")
                | RunnableLambda(self._route_step, name="route")
                | RunnableLambda(self._retrieve_step, name="retrieve")
                # langchain-core's hints omit the (input, config) generator form RunnableGenerator accepts
                | RunnableGenerator(self._answer_step, self._aanswer_step, name="answer")  # type: ignore[arg-type]
            ).with_config(run_name="Assistant")
        return self._chain

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return dict(self.chain.invoke(input, config, **kwargs))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return dict(await self.chain.ainvoke(input, config, **kwargs))

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[dict[str, Any]]:
        yield from self.chain.stream(input, config, **kwargs)

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        async for chunk in self.chain.astream(input, config, **kwargs):
            yield chunk

    # -- steps ------------------------------------------------------------------------------------------------
    def _rewrite_step(self, x: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return {**x, "standalone_question": self.rewriter.rewrite(x["question"], x["history"], config=config)}

    def _route_step(self, x: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        question, selected = x["standalone_question"], x["selected_doc_ids"]
        route: Any = self.router.route  # `Router.route` has no config; the LLM router's takes one
        if "config" in inspect.signature(route).parameters:
            decision = route(question, selected or None, x["history"], config=config)
        else:  # a custom router without config support
            decision = route(question, selected or None, x["history"])
        return {**x, "decision": decision}

    def _retrieve_step(self, x: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """RAG: the documents to search (the ask chain retrieves in the answer step); summary: their summaries."""
        decision: RouteDecision = x["decision"]
        question, selected = x["standalone_question"], x["selected_doc_ids"]
        docs: list[Document] = []
        doc_filter: MetadataFilter | None = None
        if decision.route is Route.RAG:
            doc_filter = self._scope(question, selected)
        elif decision.route is Route.SUMMARY:
            docs = self._summaries(selected, config)
        return {**x, "documents": docs, "doc_filter": doc_filter}

    def _answer_step(self, inputs: Iterator[dict[str, Any]], config: RunnableConfig) -> Iterator[AddableDict]:
        for x in inputs:
            for chunk in self._answer(x, config):
                yield AddableDict(chunk)

    async def _aanswer_step(
        self, inputs: AsyncIterator[dict[str, Any]], config: RunnableConfig
    ) -> AsyncIterator[AddableDict]:
        async for x in inputs:
            for chunk in self._answer(x, config):  # the local model streams synchronously
                yield AddableDict(chunk)

    def _answer(self, x: dict[str, Any], config: RunnableConfig) -> Iterator[dict[str, Any]]:
        decision: RouteDecision = x["decision"]
        if decision.route is Route.RAG:
            yield from self._rag(x, config)
            return
        if decision.route is Route.NO_KNOWLEDGE:
            yield from self._abstained(x, decision, None, config)
            return
        question, docs = x["standalone_question"], x["documents"]
        yield {**self._head(x, decision), "supported": None, "relevance": None, "answer_as_written": None}
        answer = ""
        for delta in self._llm_stream(self._messages(x, question, docs, decision.route), config):
            answer += delta
            yield {"answer": delta}
        cites: dict[str, Any] = {"sources": [], "invalid_citations": [], "citations": []}
        if decision.route is Route.SUMMARY:  # summaries paraphrase: the model's own citations, unchecked
            cites = map_citations(answer, docs, check=False)
            for s in cites["sources"]:
                s["doc_id"] = docs[s["n"] - 1].metadata.get("doc_id")
        yield {"documents": docs, **cites}

    def _rag(self, x: dict[str, Any], config: RunnableConfig) -> Iterator[dict[str, Any]]:
        """The RAG route: the ask chain's stream, with the assistant's head first; an abstention of the chain (the
        gate or the evidence check said no) becomes the ``no_knowledge`` route."""
        decision: RouteDecision = x["decision"]
        chain = self.ask_chain(x["question"], x["selected_doc_ids"], x["doc_filter"])
        parts = iter(chain.stream({"question": x["standalone_question"], "history": x["history"]}, config))
        state: dict[str, Any] = {}
        first = ""
        for part in parts:  # up to the first answer piece: the chain's route is known by then
            state.update({k: v for k, v in part.items() if k != "answer"})
            if "answer" in part:
                first = part["answer"]
                break
        if state.get("route") == "no_knowledge":
            for part in parts:  # the abstention's verdict; no model call follows
                state.update({k: v for k, v in part.items() if k != "answer"})
            relevance = state.get("relevance")
            why = (relevance or {}).get("reason", "")
            no = RouteDecision(Route.NO_KNOWLEDGE, decision.confidence, f"{decision.reason}; {why}",
                               decision.router_used, decision.fallback, decision.signals)
            yield from self._abstained(x, no, relevance, config)
            return
        yield self._head(x, decision)  # the verdict comes last, once the citation check agrees (`final_verdict`)
        if first:
            yield {"answer": first}
        for part in parts:
            if part.get("answer"):
                yield {"answer": part["answer"]}
            state.update({k: v for k, v in part.items() if k != "answer"})
        yield {k: v for k, v in state.items() if k not in _ASK_ONLY}

    def ask_chain(self, question: str, selected: Sequence[str],
                  doc_filter: MetadataFilter | None) -> Runnable[Any, Any]:
        """The ask chain (`ctxrag.chains.ask.build_ask_chain`) the RAG route answers `question` with: this
        assistant's knowledge base, ``k``, mode, gate (`_gate`), evidence check, answer steps and prompt options,
        over the chunks `doc_filter` allows."""
        if self.llm is None:
            raise ValueError("the rag route needs a chat model; the Assistant was built with llm=None")
        return build_ask_chain(
            [self.kb], self.llm, k=self.k, mode=self.mode, gate=self._gate(bool(selected)),
            evidence=self.evidence if self.evidence is not None else False, steps=self.steps, filter=doc_filter,
            lang=detect_language(question), prompts=self.given_prompts, max_words=self.max_words,
            max_chars_per_chunk=self.max_chars_per_chunk, max_tokens=self.max_tokens,
            on_instruction=self.on_instruction)

    def _head(self, x: dict[str, Any], decision: RouteDecision) -> dict[str, Any]:
        """The first chunk of every route (``answer`` is in the output also when the model writes nothing)."""
        return {"route": decision.route.value, "decision": decision.to_dict(), "question": x["question"],
                "standalone_question": x["standalone_question"], "answer": ""}

    def _abstained(self, x: dict[str, Any], decision: RouteDecision, relevance: dict[str, Any] | None,
                   config: RunnableConfig) -> Iterator[dict[str, Any]]:
        yield {**self._head(x, decision), "supported": False, "relevance": relevance, "answer_as_written": None}
        yield from self._no_knowledge(x, x["standalone_question"], detect_language(x["question"]), config)
        yield {"documents": [], "sources": [], "invalid_citations": [], "citations": []}

    def _llm(self) -> Any:
        if self.llm is None:
            raise ValueError("this route needs a chat model; the Assistant was built with llm=None")
        return self.llm.bind(max_tokens=self.max_tokens) if self.max_tokens else self.llm

    def _llm_stream(self, messages: list[BaseMessage], config: RunnableConfig | None) -> Iterator[str]:
        for chunk in self._llm().stream(messages, config=config):
            text = getattr(chunk, "content", chunk)
            if isinstance(text, str) and text:
                yield text

    def _scope(self, question: str, selected: Sequence[str]) -> MetadataFilter | None:
        """The RAG route's filter: the selected documents, else those the catalog first stage picks, else none."""
        if selected:
            return {"doc_id": list(selected)}
        if self.catalog_first_stage:
            picked = [d for d, _ in self.catalog.search(question, self.catalog_first_stage)]
            return {"doc_id": picked} if picked else None
        return None

    def _gate(self, selected: bool) -> RelevanceGate:
        """The relevance gate `build_rag_chain` uses (`RelevanceGate`), with the router's margin (a lower one when
        documents are selected) unless ``relevance_margin`` is given."""
        t = self.fast.thresholds
        margin = self.relevance_margin if self.relevance_margin is not None else (
            t.selected_margin if selected else t.coverage_margin)
        gate = self._gates.get(margin)
        if gate is None:
            gate = self._gates[margin] = RelevanceGate(self.kb.embeddings, min_margin=margin,
                                                       llm=self.llm if self.llm_relevance else None)
        return gate

    def _messages(self, x: dict[str, Any], question: str, docs: list[Document], route: Route) -> list[BaseMessage]:
        """The answer prompt of ``route`` (levels 1-5) in the language of the user's question."""
        return self.prompts[detect_language(x["question"])].to_messages(
            route=route.value, question=question, knowledge=self._knowledge(docs, route), history=x["history"],
            allow_general_knowledge=x["allow_general_knowledge"], max_words=self.max_words)

    def _no_knowledge(self, x: dict[str, Any], question: str, lang: str,
                      config: RunnableConfig | None) -> Iterator[dict[str, Any]]:
        yield {"answer": no_knowledge_notice(x["question"])}
        if not x["allow_general_knowledge"] or self.llm is None:
            return
        yield {"answer": "\n\n"}
        messages = self.prompts[lang].to_messages(route="no_knowledge", question=question, history=x["history"],
                                                  allow_general_knowledge=True, max_words=self.max_words)
        for delta in self._llm_stream(messages, config):
            yield {"answer": delta}

    def _summaries(self, selected: Sequence[str], config: RunnableConfig | None = None) -> list[Document]:
        docs = []
        for doc_id in selected:
            rec = self.kb.documents.get_document(doc_id)
            if rec is None:
                raise ValueError(f"selected document {doc_id!r} is not in knowledge base {self.kb.name!r}")
            docs.append(Document(page_content=self.summarizer.summarize(doc_id, config), id=doc_id,
                                 metadata={"doc_id": doc_id, "source": rec.source, "title": rec.title,
                                           "kb": self.kb.name}))
        return docs

    def _knowledge(self, docs: list[Document], route: Route) -> str:
        from ctxrag.chains.citations import format_knowledge

        return format_knowledge(docs, self.max_chars_per_chunk) if docs else ""


def build_assistant_chain(
    kb: CatalogSource, llm: BaseChatModel | None, router: Router | str | None = None, **kwargs: Any
) -> Assistant:
    """An `Assistant`; `router` may be a router object or ``"fast"`` / ``"llm"``."""
    if isinstance(router, str):
        from ctxrag.chains.router import make_router

        catalog = kwargs.pop("catalog", None) or kb.catalog()
        return Assistant(kb, llm, router=make_router(router, kb, llm, catalog=catalog), catalog=catalog, **kwargs)
    return Assistant(kb, llm, router=router, **kwargs)
