"""The ask chain: the one assembly of retriever, relevance gate, evidence check, cited answer and answer steps that
`ctxrag ask` and `ctxrag demo`, the server's ``/ask`` and the benchmarks answer with, and `RagAnswer`, its output
as a typed model (the server's ``/ask`` schema, the CLI's ``--json`` and the assistant's output share it).

`build_ask_chain` takes knowledge bases that are already open (anything implementing
`ctxrag.stores.protocols.KnowledgeSource`) and a chat model; what it does not get as an argument comes from the
settings (``answer_gate``, ``answer_evidence``, ``answer_focus_chars``, ``answer_on_instruction``). It returns `ctxrag.chains.rag.build_rag_chain`'s runnable: dicts
in, dicts out (streamed), with `RagAnswer.from_output` for typed access.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.chains.ask import RagAnswer, build_ask_chain
    from ctxrag.models.chat import make_chat_model
    chain = build_ask_chain([KnowledgeBase.open("demo")], make_chat_model())
    out = RagAnswer.from_output(chain.invoke("星河知识库支持哪些文件格式？"))
    print(out.supported, out.answer, [s["source"] for s in out.sources])
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import RetrieverLike
from langchain_core.runnables import Runnable
from pydantic import BaseModel, Field

from ctxrag.chains.evidence import EvidenceCheck, default_evidence_check
from ctxrag.chains.focus import SentenceFocus
from ctxrag.chains.key_terms import KeyTerms
from ctxrag.chains.multihop import BRIDGE_MIN_HOPS, MultiHopAnswer
from ctxrag.chains.rag import DEFAULT_STEPS, AnswerStep, OnInstruction, build_rag_chain
from ctxrag.chains.relevance import RelevanceGate
from ctxrag.enums import SearchMode
from ctxrag.prompts.layers import LayeredPrompt
from ctxrag.retrievers.factory import make_multi_kb_retriever
from ctxrag.retrievers.modes import DEFAULT_MODE
from ctxrag.settings import Settings, get_settings
from ctxrag.stores.filters import MetadataFilter
from ctxrag.stores.protocols import KnowledgeSource


class RagAnswer(BaseModel):
    """An answer from the knowledge base with its cited sources (numbered as in the prompt) and retrieved chunks."""

    question: str = ""
    answer: str = ""
    """The answer; its ``[n]`` markers are exactly the ``sources`` listed (set to what the citation check keeps)."""
    answer_as_written: str | None = None
    """The model's own text, before its markers were set to the checked sources (None where no model wrote it)."""
    supported: bool | None = None
    """False: no retrieved chunk supports an answer (the relevance gate or the evidence check said so) and ``answer``
    says the knowledge base has nothing on the question, or the citation check overruled the answer
    (``relevance["overruled_by"]``; with ``answer_on_instruction="withhold"`` an answer overruled by a planted
    instruction is replaced by the notice); None: both are off (or the route does not retrieve)."""
    relevance: dict[str, Any] | None = None
    """The gate's signals and the verdict's reason; the evidence check's under ``"evidence"``."""
    route: str = "rag"
    """``rag`` (answered from the chunks), ``no_knowledge`` (abstained); the assistant adds ``chat`` and ``summary``."""
    sources: list[dict[str, Any]] = Field(default_factory=list)
    invalid_citations: list[int] = Field(default_factory=list)
    citations: list[dict[str, Any]] = Field(default_factory=list)
    """One entry per answer sentence: ``sentence``, ``cited``, ``sources``, ``status`` (see `map_citations`)."""
    documents: list[Document] = Field(default_factory=list)

    @classmethod
    def from_output(cls, out: Mapping[str, Any]) -> "RagAnswer":
        """The typed form of a chain's output dict (keys it does not know, such as ``context``, are left out)."""
        nullable = ("supported", "relevance")
        return cls.model_validate({k: v for k, v in out.items()
                                   if k in cls.model_fields and (v is not None or k in nullable)})

    def to_json(self) -> dict[str, Any]:
        """The ``ctxrag ask --json`` form: the retrieved chunks as their ids (``retrieved``), not their text."""
        out = self.model_dump(exclude={"documents"})
        out["retrieved"] = [d.metadata.get("chunk_id") for d in self.documents]
        return out


def build_ask_chain(
    kbs: Sequence[KnowledgeSource],
    llm: BaseChatModel,
    *,
    k: int = 4,
    mode: SearchMode | str = DEFAULT_MODE,
    rerank: str = "none",
    gate: RelevanceGate | bool | None = None,
    evidence: EvidenceCheck | bool | None = None,
    steps: Sequence[AnswerStep] = DEFAULT_STEPS,
    settings: Settings | None = None,
    multi_hop: int = 0,
    decompose: bool = False,
    bridge: bool | None = None,
    filter: MetadataFilter | None = None,
    lang: str = "auto",
    prompts: Mapping[str, LayeredPrompt] | None = None,
    max_words: int = 200,
    max_chars_per_chunk: int | None = 1500,
    max_tokens: int | None = None,
    retriever: RetrieverLike | None = None,
    answer: Runnable[Any, Any] | None = None,
    focus: SentenceFocus | int | None = None,
    on_instruction: OnInstruction | None = None,
) -> Runnable[Any, Any]:
    """The chain `ctxrag ask` answers with over the open knowledge bases `kbs` (several are fused by RRF).

    ``gate``: None follows the ``answer_gate`` setting; True is a `RelevanceGate` over the first knowledge base's
    embeddings; or a gate of your own, or False. ``evidence``: None follows ``answer_evidence``; True is the
    default `EvidenceCheck` over ``llm`` with the key-term stage over the first knowledge base's BM25 frequencies
    (`ctxrag.chains.evidence.default_evidence_check`). ``steps`` run on the complete answer
    (`ctxrag.chains.rag.AnswerStep`).

    ``filter``: retrieve only chunks whose metadata matches (e.g. ``{"doc_id": [...]}``, the assistant's selected
    documents). ``lang``, ``prompts``, ``max_words``, ``max_chars_per_chunk`` and ``max_tokens`` shape the default
    answer (`ctxrag.chains.rag.build_rag_chain`); ``answer`` replaces it (e.g. `ExtractiveAnswer`, the short answer).

    ``retriever``: one built elsewhere instead of the one from ``kbs``, ``mode``, ``rerank`` and ``filter`` (the
    evaluation's, with a configuration's fusion and reranker options); it returns the chunks read (``k`` per hop with
    ``multi_hop``). ``kbs`` still give the gate's embeddings and the evidence check's key terms.

    ``multi_hop``: at most this many retrievals per question by `ctxrag.chains.multihop.MultiHopAnswer` (``k`` new
    chunks read per hop; the graph retriever when ``mode`` is the default and every knowledge base has a graph
    index); the gate, the evidence check and ``steps`` do not apply. 0: the single-shot chain. ``decompose``: the
    multi-hop chain splits the question into sub-questions first (`MultiHopAnswer.decompose`); ``bridge``: it asks
    only for the missing name per hop and reads a short answer over every passage at the end (`MultiHopAnswer.bridge`);
    None (the default): ``bridge`` unless ``decompose`` (chosen on the ``multihop_answers`` page), False: the loop
    that keeps a fact per hop.

    ``focus``: None follows the ``answer_focus_chars`` setting; a number of characters is a
    `ctxrag.chains.focus.SentenceFocus` over the first knowledge base's BM25 frequencies (0: off, whole chunks up to
    the prompt's per-chunk cut); or a focus of your own.

    ``on_instruction``: None follows the ``answer_on_instruction`` setting; ``"withhold"`` gives the no-knowledge
    notice instead of an answer that repeats an instruction planted in a retrieved document, ``"flag"`` gives that
    answer with ``supported: False`` (`ctxrag.chains.rag.build_rag_chain`).
    """
    if not kbs:
        raise ValueError("build_ask_chain needs at least one knowledge base, got none")
    if retriever is not None and filter is not None:
        raise ValueError(f"build_ask_chain: a filter ({filter!r:.100}) goes to the retriever it builds; with "
                         "retriever= given, build that one with the filter")
    if multi_hop:
        if retriever is None:
            graph = SearchMode.from_str(mode) is DEFAULT_MODE and all(kb.graph_index() is not None for kb in kbs)
            retriever = make_multi_kb_retriever(list(kbs), mode=SearchMode.GRAPH if graph else mode, k=k + 2,
                                                rerank=rerank, search_type="similarity", filter=filter)
        use_bridge = not decompose if bridge is None else bridge
        least = {"min_hops": min(BRIDGE_MIN_HOPS, multi_hop)} if use_bridge else {}
        return MultiHopAnswer(retriever, llm, max_hops=multi_hop, passages_per_hop=k, decompose=decompose,
                              bridge=use_bridge, **least)
    s = settings or get_settings()
    gate = s.answer_gate if gate is None else gate
    evidence = s.answer_evidence if evidence is None else evidence
    checker = RelevanceGate(kbs[0].embeddings) if gate is True else gate
    evidence = default_evidence_check(llm, kbs[0]) if evidence is True else evidence
    focus = s.answer_focus_chars if focus is None else focus
    on_instruction = s.answer_on_instruction if on_instruction is None else on_instruction
    if isinstance(focus, int):
        focus = SentenceFocus(focus, terms=KeyTerms.from_knowledge_base(kbs[0])) if focus > 0 else None
    if retriever is None:
        retriever = make_multi_kb_retriever(list(kbs), mode=mode, k=k, rerank=rerank, search_type="similarity",
                                            filter=filter)
    return build_rag_chain(retriever, llm, gate=checker, evidence=evidence, answer=answer, steps=steps, lang=lang,
                           prompts=dict(prompts) if prompts else None, max_words=max_words,
                           max_chars_per_chunk=max_chars_per_chunk, max_tokens=max_tokens, focus=focus,
                           on_instruction=on_instruction)
