"""JinaReranker against a real HTTP server on 127.0.0.1 that speaks Jina's rerank protocol, with injected faults."""
from __future__ import annotations

import asyncio
import logging
import socket

import pytest
from langchain_core.documents import Document

from ctxrag.compressors.jina import JinaReranker
from ctxrag.errors import ModelError

try:
    from tests.compressors.jina_server import JinaRerankServer
except ImportError:  # tests/ is not a package: pytest puts this folder on sys.path
    from jina_server import JinaRerankServer

KEY = "jina_SECRET_test_key_0123456789"
QUERY = "capital of france paris"

DOCS = [
    Document("Berlin is the capital of Germany.", id="d0", metadata={"chunk_id": "d0", "score": 0.9}),
    Document("Paris is the capital of France.", id="d1", metadata={"chunk_id": "d1", "score": 0.8}),
    Document("Bananas are yellow.", id="d2", metadata={"chunk_id": "d2", "score": 0.7}),
    Document("France borders Spain.", id="d3", metadata={"chunk_id": "d3", "score": 0.6}),
]


@pytest.fixture
def server():
    with JinaRerankServer(api_key=KEY, delay=0.6) as s:
        yield s


def make(server: JinaRerankServer, **kw) -> JinaReranker:
    kw.setdefault("backoff", 0.0)
    kw.setdefault("timeout", 2.0)
    return JinaReranker(base_url=server.url, api_key=KEY, model="jina-reranker-v2-base-multilingual", **kw)


def ids(docs) -> list[str]:
    return [d.id for d in docs]


def test_empty_documents_send_nothing(server):
    assert make(server).compress_documents([], QUERY) == []
    assert server.requests == []


def test_reranks_and_sends_every_field_explicitly(server):
    out = make(server, top_n=3).compress_documents(DOCS, QUERY)
    assert ids(out) == ["d1", "d0", "d3"]  # 4/4, 2/4 (capital, of), 1/4 (france)
    assert out[0].metadata["rerank_score"] == pytest.approx(1.0)
    assert out[0].metadata["score"] == pytest.approx(1.0)
    assert out[0].metadata["chunk_id"] == "d1"
    assert DOCS[1].metadata["score"] == 0.8  # inputs untouched
    (body,) = server.bodies()
    assert body == {
        "model": "jina-reranker-v2-base-multilingual",
        "query": QUERY,
        "documents": [d.page_content for d in DOCS],
        "top_n": 3,
        "return_documents": False,
    }
    assert server.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    assert server.requests[0]["path"] == "/v1/rerank"


def test_top_n_none_returns_all_reordered(server):
    out = make(server, top_n=None).compress_documents(DOCS, QUERY)
    assert ids(out) == ["d1", "d0", "d3", "d2"]
    assert server.bodies()[0]["top_n"] == 4


def test_trailing_slash_in_base_url(server):
    reranker = JinaReranker(base_url=server.url + "/", api_key=KEY, backoff=0)
    assert ids(reranker.compress_documents(DOCS, QUERY))[0] == "d1"


def test_context_is_sent_before_the_chunk(server):
    doc = Document("It is 8849 m high.", id="e", metadata={"context": "About Mount Everest."})
    make(server).compress_documents([doc], "everest")
    assert server.bodies()[0]["documents"] == ["About Mount Everest.\n\nIt is 8849 m high."]
    make(server, include_context=False).compress_documents([doc], "everest")
    assert server.bodies()[1]["documents"] == ["It is 8849 m high."]


def test_429_then_success_is_retried(server):
    server.faults.append("429")
    out = make(server, top_n=2).compress_documents(DOCS, QUERY)
    assert ids(out) == ["d1", "d0"]
    assert len(server.requests) == 2


def test_500_then_success_is_retried(server):
    server.faults.extend(["500", "500"])
    out = make(server, top_n=1, max_retries=2).compress_documents(DOCS, QUERY)
    assert ids(out) == ["d1"]
    assert len(server.requests) == 3


def test_persistent_500_keeps_input_order_cut_to_top_n_and_warns(server, caplog):
    server.faults.extend(["500"] * 5)
    with caplog.at_level(logging.WARNING, logger="ctxrag.compressors.jina"):
        out = make(server, top_n=2, max_retries=2).compress_documents(DOCS, QUERY)
    assert ids(out) == ["d0", "d1"]  # input order, still at most top_n
    assert len(server.requests) == 3
    assert "HTTP 500" in caplog.text and "input order" in caplog.text


def test_persistent_500_strict_raises(server):
    server.faults.extend(["500"] * 5)
    with pytest.raises(ModelError, match="HTTP 500"):
        make(server, max_retries=1, strict=True).compress_documents(DOCS, QUERY)


def test_timeout_then_success(server):
    server.faults.append("timeout")
    out = make(server, timeout=0.2, top_n=1).compress_documents(DOCS, QUERY)
    assert ids(out) == ["d1"]
    assert len(server.requests) == 2


def test_timeout_for_good_keeps_input_order(server, caplog):
    server.faults.extend(["timeout", "timeout"])
    with caplog.at_level(logging.WARNING, logger="ctxrag.compressors.jina"):
        out = make(server, timeout=0.2, max_retries=1).compress_documents(DOCS, QUERY)
    assert ids(out) == ids(DOCS)
    assert "Timeout" in caplog.text


def test_malformed_json_is_not_retried_and_keeps_order(server, caplog):
    server.faults.append("malformed")
    with caplog.at_level(logging.WARNING, logger="ctxrag.compressors.jina"):
        out = make(server).compress_documents(DOCS, QUERY)
    assert ids(out) == ids(DOCS)
    assert len(server.requests) == 1
    assert "not JSON" in caplog.text


def test_malformed_json_strict_raises(server):
    server.faults.append("malformed")
    with pytest.raises(ModelError, match="not JSON"):
        make(server, strict=True).compress_documents(DOCS, QUERY)


def test_out_of_range_index_is_rejected(server):
    server.faults.append("bad_index")
    with pytest.raises(ModelError, match="bad result"):
        make(server, strict=True).compress_documents(DOCS, QUERY)


def test_fewer_results_than_asked_fill_up_in_input_order(server, caplog):
    server.faults.append("fewer")
    with caplog.at_level(logging.WARNING, logger="ctxrag.compressors.jina"):
        out = make(server, top_n=3).compress_documents(DOCS, QUERY)
    # the server returned d1, d0; the third slot goes to the first unscored document in input order
    assert ids(out) == ["d1", "d0", "d2"]
    assert out[2].metadata["rerank_score"] is None
    assert out[2].metadata["score"] == 0.7  # unscored: the previous stage's score stays
    assert "returned 2 results, expected 3" in caplog.text


def test_wrong_key_is_not_retried(server):
    reranker = JinaReranker(base_url=server.url, api_key="wrong", backoff=0, strict=True)
    with pytest.raises(ModelError, match="HTTP 401"):
        reranker.compress_documents(DOCS, QUERY)
    assert len(server.requests) == 1


def test_connection_refused_keeps_input_order():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reranker = JinaReranker(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0)
    assert ids(reranker.compress_documents(DOCS, QUERY)) == ids(DOCS)


def test_connection_refused_is_not_retried(caplog):
    """No server listening: the first ConnectError falls back at once (429/5xx are retried, see above)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reranker = JinaReranker(base_url=f"http://127.0.0.1:{port}/v1", max_retries=3, backoff=5.0)
    with caplog.at_level(logging.INFO, logger="ctxrag.compressors.jina"):
        assert ids(reranker.compress_documents(DOCS, QUERY)) == ids(DOCS)
        assert ids(asyncio.run(reranker.acompress_documents(DOCS, QUERY))) == ids(DOCS)
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    assert "after 4 attempts" not in caplog.text and "ConnectError" in caplog.text
    with pytest.raises(ModelError, match="ConnectError"):
        reranker.model_copy(update={"strict": True}).compress_documents(DOCS, QUERY)


def test_public_api_without_key_is_refused_at_construction():
    with pytest.raises(ValueError, match="needs an API key.*CTXRAG_RERANK__API_KEY"):
        JinaReranker()
    with pytest.raises(ValueError, match="needs an API key"):
        JinaReranker(base_url="https://api.jina.ai/v1/", api_key="  ")
    assert JinaReranker(api_key="jina_x").base_url == "https://api.jina.ai/v1"


def test_batches_merge_by_score(server):
    docs = [Document(f"filler text number {i}", id=f"f{i}") for i in range(7)]
    docs.insert(5, Document("paris france capital", id="best"))
    docs.insert(2, Document("paris only", id="second"))
    out = make(server, batch_size=3, top_n=2).compress_documents(docs, QUERY)
    assert ids(out) == ["best", "second"]
    bodies = server.bodies()
    assert [len(b["documents"]) for b in bodies] == [3, 3, 3]
    assert all(b["top_n"] == 2 for b in bodies)


def test_api_key_never_in_logs_errors_or_repr(server, caplog):
    server.faults.extend(["echo_key"] * 3)
    reranker = make(server, max_retries=1, strict=True)
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(ModelError) as info:
            reranker.compress_documents(DOCS, QUERY)
        server.faults.extend(["echo_key"] * 3)
        reranker.strict = False
        reranker.compress_documents(DOCS, QUERY)
    assert "Authorization" in str(info.value)  # the echoed detail is there...
    assert KEY not in str(info.value)  # ...but the key is redacted
    assert "***" in str(info.value)
    assert "Authorization" in caplog.text
    assert KEY not in caplog.text
    assert KEY not in repr(reranker) and KEY not in str(reranker.model_dump())


def test_async_path_reranks_retries_and_batches(server):
    server.faults.append("429")
    docs = [Document(f"filler text number {i}", id=f"f{i}") for i in range(5)] + [Document("paris", id="p")]
    out = asyncio.run(make(server, batch_size=2, top_n=2).acompress_documents(docs, QUERY))
    assert ids(out)[0] == "p"
    assert len(server.requests) == 4  # 3 batches + 1 retry


def test_async_failure_keeps_input_order(server):
    server.faults.extend(["500"] * 4)
    out = asyncio.run(make(server, max_retries=1).acompress_documents(DOCS, QUERY))
    assert ids(out) == ids(DOCS)


@pytest.mark.parametrize("field,value", [("top_n", 0), ("batch_size", 0), ("timeout", 0), ("max_retries", -1)])
def test_invalid_options_fail_early(field, value):
    with pytest.raises(ValueError, match=field):
        JinaReranker(**{field: value})
