"""Graph retrieval for multi-hop questions (Milvus's Graph RAG method on a `GraphIndex`).

(Over 400 lines on purpose: one retriever whose five ranking modes share seeding, expansion and the fallback fill;
splitting the modes apart would scatter one algorithm.)

1. Question entities: asked of the LLM (``{"entities": [...]}``) when there is one, always joined with the graph's
   own vocabulary matches (`GraphIndex.find_entity_mentions`), so a weak or absent LLM still finds them.
2. Seeds: for each question entity the `entity_top_k` most similar graph entities (an exact name match counts
   first), and the `relation_top_k` relations most similar to the whole question.
3. Expansion: relations within `degree` (1 or 2) hops of the seeds through the incidence matrix
   (`ctxrag.graph.expand.expand_relations`), joined with the seed relations.
4. Ranking: by cosine with the question (``rerank="embedding"``); by cosine of two-relation chains with the
   question (``rerank="path"``, no LLM: the chain "Johann Bernoulli teacher of Leonhard Euler. Daniel Bernoulli son
   of Johann Bernoulli" matches "the son of Euler's teacher" better than either hop); or an LLM one-shot prompt over
   the `max_candidates` best candidates (``rerank="llm"``): reasoning, then a JSON list of useful relations. The
   LLM's picks go first, the rest keep embedding order; an unparseable reply falls back to embedding order.
5. Passages: relations in rank order map to the passages they came from; the first `k` distinct passages are returned.
   When the graph yields fewer than `k`, `fallback_retriever` (e.g. dense) fills the rest.

``rerank="ppr"`` replaces steps 3-5 with HippoRAG 2's graph search (`ctxrag.graph.ppr`): a Personalized PageRank walk
over entities and passages, seeded by the entities of the relations closest to the question, the question's entities,
the entities of the best chains and the fallback retriever's passages; passages rank by stationary probability. It is
the best measured ranking without an LLM (docs/benchmarks/graph_rag.md) and the knowledge base's default.

Each Document carries ``chunk_id``, ``score`` (= ``graph_score``: the best relation's cosine for embedding ranking,
``1 / (1 + rank)`` for path and LLM ranking, PageRank probability over the top one's for ppr), ``graph_relations``
(the relations that led to it; for ppr the passage's relations closest to the question) and ``graph_rank``.

Example::

    from ctxrag.retrievers.graph import GraphRetriever
    r = GraphRetriever(graph_index=index, embeddings=make_embeddings(), degree=1, k=5)
    docs = r.invoke("What contribution did the son of Euler's teacher make?")
    docs[0].metadata["graph_relations"]
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig
from pydantic import Field, field_validator, model_validator

from ctxrag.enums import ChoiceEnum
from ctxrag.graph.expand import expand_relations
from ctxrag.stores.graph import GraphIndex
from ctxrag.stores.graph.normalize import entity_key
from ctxrag.graph.ppr import PassageGraph, personalized_pagerank
from ctxrag.models.embeddings import embed_array
from ctxrag.models.parsing import extract_json
from ctxrag.prompts.graph import entity_prompt, relation_rerank_messages
from ctxrag.retrievers.base import CtxragRetriever, sub_call_kwargs
from ctxrag.retrievers.fusion import dedup_by_chunk, min_max
from ctxrag.schema import CHUNK_ID, SCORE
from ctxrag.stores.filters import MetadataFilter, matcher, metadata_matches
from ctxrag.stores.protocols import ChunkLookup

log = logging.getLogger(__name__)

GRAPH_SCORE = "graph_score"
GRAPH_RELATIONS = "graph_relations"
GRAPH_RANK = "graph_rank"
GRAPH_RERANK = "graph_rerank"
"""How the relations were ranked: ``embedding``, ``llm`` or ``llm-failed`` (unparseable reply, embedding order)."""
GRAPH_FALLBACK = "graph_fallback"
PPR_PASSAGE_SEEDS = 20
"""Default number of fallback (dense) passages that seed the PageRank walk; give the fallback retriever k >= this."""


class GraphRerank(ChoiceEnum):
    """How candidate relations are ranked."""

    __label__ = "graph rerank"

    LLM = "llm"
    """An LLM picks the useful relations (one-shot prompt); the rest follow in embedding order."""
    EMBEDDING = "embedding"
    """Cosine of each relation sentence with the question (Milvus's method without its LLM step)."""
    PPR = "ppr"
    """Personalized PageRank over entities and passages (HippoRAG 2's graph search): seeds are the entities of the
    relations most similar to the question, the question's own entities, the entities of the best two-relation chains
    and the fallback retriever's passages (small weight); passages rank by stationary probability. No LLM; needs
    `fallback_retriever` for its passage seeds (give it k of about 20)."""
    PATH = "path"
    """Cosine of two-relation chains ("r1. r2", sharing an entity) with the question: embeds the hop an LLM would
    reason out, so "teacher of Euler. son of Johann" outranks the first hop alone. Costs ~`path_beam` x
    `path_fanout` short embeddings per question."""


def parse_relation_choice(reply: str, candidates: list[str]) -> list[int] | None:
    """Indices into `candidates` that an LLM reply selects, in its order; None when the reply has no usable JSON.

    Items may be ``"[3] text"``, ``3``, ``"3"`` or the relation text itself; numbers are 1-based as shown in the prompt.
    """
    try:
        value = extract_json(reply)
    except ValueError:
        return None
    items: Any = value
    if isinstance(value, dict):
        items = next(
            (v for k, v in value.items() if isinstance(v, list) and ("relation" in k.lower() or "关系" in k)),
            next((v for v in value.values() if isinstance(v, list)), None),
        )
    if not isinstance(items, list):
        return None
    by_text = {entity_key(c): i for i, c in enumerate(candidates)}
    chosen: list[int] = []
    for item in items:
        idx: int | None = None
        if isinstance(item, (int, float)) and not isinstance(item, bool):
            idx = int(item) - 1
        elif isinstance(item, str):
            text = item.strip()
            head = text.lstrip("[(").split("]")[0].split(")")[0].split(".")[0].strip()
            if head.isdigit():
                idx = int(head) - 1
            else:
                idx = by_text.get(entity_key(text))
        if idx is not None and 0 <= idx < len(candidates) and idx not in chosen:
            chosen.append(idx)
    return chosen


class GraphRetriever(CtxragRetriever):
    """Multi-hop retrieval over a `GraphIndex`: entities and relations -> subgraph expansion -> ranked relations ->
    passages (see the module docstring). Usable alone or inside fusion with dense / BM25 retrievers.

    Example::

        r = GraphRetriever(graph_index=index, embeddings=emb, llm=make_chat_model(), rerank="llm", degree=1, k=5,
                           fallback_retriever=dense)
        r.invoke("Who was in charge of the country where the composer of Aschenbrodel was a citizen?")
    """

    graph_index: GraphIndex
    embeddings: Embeddings
    llm: BaseChatModel | Runnable | None = None
    """A chat model, or one with bound options (``llm.bind(max_tokens=256)``)."""
    rerank: GraphRerank = GraphRerank.EMBEDDING
    degree: int = 1
    k: int = Field(default=5, gt=0)
    """How many passages to return."""
    entity_top_k: int = 3
    """Similar graph entities taken per question entity."""
    relation_top_k: int = 3
    """Relations most similar to the question taken as seeds."""
    max_candidates: int = 30
    """Candidate relations shown to the LLM (the best by cosine); embedding ranking uses them all."""
    llm_top_n: int = 3
    """Relations the LLM is asked to pick."""
    path_beam: int = 10
    """``rerank="path"``: first hops tried (the best candidates by cosine)."""
    path_fanout: int = 8
    """``rerank="path"``: second hops tried per first hop (its neighbours, best by cosine)."""
    ppr_damping: float = Field(default=0.5, ge=0.0, lt=1.0)
    """``rerank="ppr"``: probability of following an edge rather than jumping back to a seed (HippoRAG 2: 0.5)."""
    ppr_fact_top_k: int = 5
    """``rerank="ppr"``: relations most similar to the question whose entities seed the walk."""
    ppr_path_seeds: int = Field(default=3, ge=0)
    """``rerank="ppr"``: best two-relation chains (as in ``rerank="path"``) whose entities also seed it (0: none)."""
    ppr_passage_weight: float = Field(default=0.05, ge=0.0)
    """``rerank="ppr"``: seed weight of the fallback retriever's passages (min-max normalised scores times this)."""
    ppr_passage_seeds: int = PPR_PASSAGE_SEEDS
    """``rerank="ppr"``: how many of the fallback retriever's first passages seed the walk (its k may be larger)."""
    synonym_threshold: float = 0.8
    """``rerank="ppr"``: entities this similar (cosine) among each other's 10 nearest are linked as synonyms."""
    llm_entities: bool = True
    """Ask the LLM (when there is one) for the question's entities, besides vocabulary matching."""
    fallback_retriever: BaseRetriever | None = None
    chunks: ChunkLookup | None = None
    """Optional (a knowledge base's ``chunks``): full chunk Documents by id, and the chunk ids a metadata filter
    allows. Without it Documents carry the graph's stored text and a filter is matched against the graph's own passage
    metadata. Either way passages are filtered before the top-k cut."""
    relation_preview: int = Field(default=5, ge=0)
    """How many relations each Document lists in ``graph_relations``."""

    @field_validator("rerank", mode="before")
    @classmethod
    def _rerank(cls, v: Any) -> GraphRerank:
        return GraphRerank.from_str(v)

    @field_validator("degree")
    @classmethod
    def _degree(cls, v: int) -> int:
        if v not in (1, 2):
            raise ValueError(f"degree must be 1 or 2, got {v}")
        return v

    @field_validator("entity_top_k", "relation_top_k", "max_candidates", "llm_top_n", "path_beam", "path_fanout",
                     "ppr_fact_top_k", "ppr_passage_seeds")
    @classmethod
    def _positive(cls, v: int, info: Any) -> int:
        if v < 1:
            raise ValueError(f"{info.field_name} must be >= 1, got {v}")
        return v

    @model_validator(mode="after")
    def _llm_for_llm_rerank(self) -> GraphRetriever:
        if self.rerank is GraphRerank.LLM and self.llm is None:
            raise ValueError("rerank='llm' needs an llm (pass llm=make_chat_model()) or use rerank='embedding'")
        return self

    # ---- steps -------------------------------------------------------------------------------------------------
    def question_entities(self, question: str, config: RunnableConfig | None = None) -> list[str]:
        """Entity mentions of the question: the LLM's (if any) then vocabulary matches, deduplicated.

        `config` (callbacks, tags) is passed to the LLM call, so tracing sees it."""
        mentions: list[str] = []
        if self.llm is not None and self.llm_entities:
            try:
                reply = self.llm.invoke(entity_prompt("auto", question).format_messages(question=question), config)
                value = extract_json(str(reply.content))
                items = value.get("entities", []) if isinstance(value, dict) else value
                mentions += [str(x) for x in items if isinstance(x, (str, int)) and str(x).strip()]
            except Exception as exc:  # noqa: BLE001 - a weak model's bad answer must not stop retrieval
                log.warning("LLM entity extraction failed (%s); using vocabulary matches", exc)
        mentions += self.graph_index.find_entity_mentions(question)
        seen: set[str] = set()
        return [m for m in mentions if entity_key(m) and not (entity_key(m) in seen or seen.add(entity_key(m)))]

    def seed_entities(self, mentions: list[str]) -> list[int]:
        """Graph entities for the mentions: exact name matches, then the `entity_top_k` most similar per mention."""
        g = self.graph_index
        if not mentions or g.n_entities == 0:
            return []
        ids: list[int] = [i for m in mentions if (i := g.entity_id(m)) is not None]
        vectors = embed_array(self.embeddings, mentions)
        for vec in vectors:
            ids += [i for i, _ in g.search_entities(vec, self.entity_top_k)]
        return list(dict.fromkeys(ids))

    def candidate_relations(
        self, question: str, query_vec: np.ndarray, config: RunnableConfig | None = None
    ) -> tuple[list[int], list[str]]:
        """Candidate relation ids ranked by cosine with the question, and the question entities used."""
        g = self.graph_index
        if g.n_relations == 0:
            return [], []
        mentions = self.question_entities(question, config)
        entities = self.seed_entities(mentions)
        seed_relations = [i for i, _ in g.search_relations(query_vec, self.relation_top_k)]
        ids = expand_relations(g.incidence, entities, seed_relations, self.degree) | set(seed_relations)
        ranked = sorted(ids)
        sims = g.relation_similarity(query_vec, ranked)
        order = np.argsort(-sims, kind="stable")
        return [ranked[i] for i in order], mentions

    def rank_paths(self, query_vec: np.ndarray, candidates: list[int]) -> list[tuple[float, int, int]]:
        """Two-relation chains ``(cosine, r1, r2)`` best first: r1 among the `path_beam` best candidates, r2 one of
        its `path_fanout` most similar neighbours (relations sharing an entity with r1)."""
        g = self.graph_index
        m = g.incidence
        mt = m.T.tocsr()
        pairs: list[tuple[int, int]] = []
        seen: set[tuple[int, int]] = set()
        for r1 in candidates[: self.path_beam]:
            neighbours = sorted({int(r) for e in mt.getrow(r1).indices for r in m.getrow(e).indices} - {r1})
            if not neighbours:
                continue
            sims = g.relation_similarity(query_vec, neighbours)
            for j in np.argsort(-sims, kind="stable")[: self.path_fanout]:
                pair = (r1, neighbours[int(j)])
                if pair not in seen and pair[::-1] not in seen:
                    seen.add(pair)
                    pairs.append(pair)
        if not pairs:
            return []
        texts = [f"{g.relation_text(a)}. {g.relation_text(b)}" for a, b in pairs]
        scores = embed_array(self.embeddings, texts) @ query_vec
        order = np.argsort(-scores, kind="stable")
        return [(float(scores[i]), pairs[i][0], pairs[i][1]) for i in order]

    def rank_relations(
        self, question: str, candidates: list[int], query_vec: np.ndarray | None = None,
        config: RunnableConfig | None = None,
    ) -> tuple[list[int], str]:
        """Candidates reordered by the chosen method (rest in embedding order) and how ranking went."""
        if self.rerank is GraphRerank.PATH and candidates:
            if query_vec is None:
                query_vec = embed_array(self.embeddings, [question], is_query=True)[0]
            ranked = list(dict.fromkeys(r for _, a, b in self.rank_paths(query_vec, candidates) for r in (a, b)))
            return ranked + [c for c in candidates if c not in set(ranked)], GraphRerank.PATH.value
        if self.rerank is GraphRerank.EMBEDDING or self.llm is None or not candidates:
            return candidates, GraphRerank.EMBEDDING.value
        shown = candidates[: self.max_candidates]
        texts = [self.graph_index.relation_text(i) for i in shown]
        try:
            reply = self.llm.invoke(relation_rerank_messages(question, texts, top_n=self.llm_top_n), config)
            chosen = parse_relation_choice(str(reply.content), texts)
        except Exception as exc:  # noqa: BLE001 - degrade to embedding order, never fail the query
            log.warning("LLM relation ranking failed (%s); using embedding order", exc)
            chosen = None
        if not chosen:
            return candidates, "llm-failed"
        picked = [shown[i] for i in chosen]
        rest = [c for c in candidates if c not in set(picked)]
        return picked + rest, GraphRerank.LLM.value

    # ---- retrieval ---------------------------------------------------------------------------------------------
    def rank_passages_ppr(
        self, question: str, query_vec: np.ndarray, seed_docs: list[Document], config: RunnableConfig | None = None
    ) -> list[tuple[str, float]]:
        """``rerank="ppr"``: passages by Personalized PageRank probability (best first, positive only)."""
        g = self.graph_index
        pg = PassageGraph.build(g, synonym_threshold=self.synonym_threshold)
        fact_scores = g.relation_vectors @ np.asarray(query_vec, dtype=np.float32)
        lo = float(fact_scores.min())
        span = float(fact_scores.max()) - lo or 1.0
        entities: dict[int, float] = {}

        def seed(entity: int, weight: float) -> None:  # HippoRAG's node specificity: weight / passages of the entity
            w = weight / max(float(pg.entity_passage_counts[entity]), 1.0)
            entities[entity] = max(entities.get(entity, 0.0), w)

        for rid in np.argsort(-fact_scores, kind="stable")[: self.ppr_fact_top_k]:
            for e in set(g.relation_entities(int(rid))):
                seed(e, (float(fact_scores[rid]) - lo) / span)
        if self.ppr_path_seeds:
            candidates, mentions = self.candidate_relations(question, query_vec, config)
            for score, a, b in self.rank_paths(query_vec, candidates)[: self.ppr_path_seeds]:
                for e in {*g.relation_entities(a), *g.relation_entities(b)}:
                    seed(e, (score - lo) / span)
        else:
            mentions = self.question_entities(question, config)
        for m in mentions:
            if (e := g.entity_id(m)) is not None:
                seed(e, 1.0)
        passages = _normalised_scores(seed_docs[: self.ppr_passage_seeds])
        reset = pg.seed_weights(entities, {p: w * self.ppr_passage_weight for p, w in passages.items()})
        if not reset.any():
            return []
        stationary = personalized_pagerank(pg.transition, reset, damping=self.ppr_damping)
        scores = pg.passage_scores(stationary)
        return sorted(((p, s) for p, s in scores.items() if s > 0), key=lambda x: -x[1])

    def _allowed(self, filter: MetadataFilter | None) -> Callable[[str], bool]:
        if filter is None:
            return lambda pid: True
        if self.chunks is not None:
            allowed = self.chunks.allowed_chunk_ids(filter)
            return (lambda pid: True) if allowed is None else allowed.__contains__
        matches = matcher(filter)
        return lambda pid: matches(self.graph_index.passage_metadata(pid))

    def _retrieve(
        self, query: str, *, k: int, filter: MetadataFilter | None,
        run_manager: CallbackManagerForRetrieverRun | None = None, **options: Any,
    ) -> list[Document]:
        g = self.graph_index
        allowed = self._allowed(filter)
        config: RunnableConfig | None = {"callbacks": run_manager.get_child()} if run_manager else None
        query_vec = embed_array(self.embeddings, [query], is_query=True)[0]
        fallback_docs: list[Document] | None = None

        def fallback() -> list[Document]:
            nonlocal fallback_docs
            if fallback_docs is None:
                if self.fallback_retriever is None:
                    fallback_docs = []
                else:
                    kwargs = sub_call_kwargs(self.fallback_retriever, k, filter, "GraphRetriever")
                    callbacks = run_manager.get_child() if run_manager else None
                    fallback_docs = self.fallback_retriever.invoke(query, config={"callbacks": callbacks}, **kwargs)
            return fallback_docs

        order: list[str] = []
        reasons: dict[str, list[str]] = {}
        best: dict[str, float] = {}
        if self.rerank is GraphRerank.PPR:
            how = GraphRerank.PPR.value
            ranked = self.rank_passages_ppr(query, query_vec, fallback(), config) if g.n_relations else []
            ranked_passages = [(pid, prob) for pid, prob in ranked if allowed(pid)]
            top = ranked_passages[0][1] if ranked_passages else 1.0
            for pid, prob in ranked_passages[:k]:
                order.append(pid)
                best[pid] = prob / top
                rels = g.passage_relations(pid)
                sims = g.relation_similarity(query_vec, rels)
                closest = np.argsort(-sims, kind="stable")[: self.relation_preview]
                reasons[pid] = [g.relation_text(rels[i]) for i in closest]
        else:
            candidates, _ = self.candidate_relations(query, query_vec, config)
            ranked_ids, how = self.rank_relations(query, candidates, query_vec, config)
            sims = dict(zip(candidates, g.relation_similarity(query_vec, candidates).tolist()))
            sims.update({r: sims.get(r) or float(g.relation_similarity(query_vec, [r])[0]) for r in ranked_ids})
            for rank, rid in enumerate(ranked_ids):
                score = sims[rid] if how in ("embedding", "llm-failed") else 1.0 / (1 + rank)
                for pid in g.relation_passages(rid):
                    if pid not in reasons:
                        if len(order) >= k or not allowed(pid):
                            continue
                        order.append(pid)
                        reasons[pid] = []
                        best[pid] = score
                    if len(reasons[pid]) < self.relation_preview:
                        reasons[pid].append(g.relation_text(rid))
        docs = self._documents(order)
        for rank, doc in enumerate(docs):
            pid = order[rank]
            doc.metadata.update(
                {CHUNK_ID: pid, SCORE: best[pid], GRAPH_SCORE: best[pid], GRAPH_RELATIONS: reasons[pid],
                 GRAPH_RANK: rank + 1, GRAPH_RERANK: how, GRAPH_FALLBACK: False}
            )
        if len(docs) < k and self.fallback_retriever is not None:
            have = {d.metadata[CHUNK_ID] for d in docs}
            for doc in fallback():
                cid = doc.metadata.get(CHUNK_ID) or doc.id
                ok = allowed(str(cid)) if self.chunks is not None else metadata_matches(doc.metadata, filter)
                if cid in have or len(docs) >= k or not ok:
                    continue
                have.add(cid)
                doc = Document(doc.page_content, id=doc.id, metadata={**doc.metadata, GRAPH_FALLBACK: True})
                docs.append(doc)
        return docs

    def _documents(self, passage_ids: list[str]) -> list[Document]:
        g = self.graph_index
        if self.chunks is not None and passage_ids:
            found = {(d.metadata.get(CHUNK_ID) or d.id): d for d in self.chunks.get_chunks(passage_ids)}
            out = []
            for pid in passage_ids:
                d = found.get(pid)
                if d is None:
                    d = Document(g.passage_text(pid), id=pid, metadata=g.passage_metadata(pid))
                out.append(Document(d.page_content, id=pid, metadata=dict(d.metadata)))
            return out
        return [Document(g.passage_text(pid), id=pid, metadata=g.passage_metadata(pid)) for pid in passage_ids]


def _normalised_scores(docs: list[Document]) -> dict[str, float]:
    """Chunk id -> min-max normalised retrieval score in [0, 1] (rank-based when a document has no ``score``)."""
    unique = dedup_by_chunk(docs)
    if not unique:
        return {}
    raw = []
    for rank, (_, d) in enumerate(unique):
        s = d.metadata.get(SCORE)
        raw.append(float(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else 1.0 / (1 + rank))
    return dict(zip((key for key, _ in unique), min_max(raw)))
