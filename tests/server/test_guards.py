"""The endpoint's guards under a real uvicorn on 127.0.0.1: an empty token is refused at start (fails closed), a dead
chat endpoint gives 503 on every LLM route, unknown ``selected_doc_ids`` give 404, batch and query caps, cross-site
POSTs (text/plain, foreign Origin or Host) refused without a token, and absolute source paths only for local
clients."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("langserve", reason="the server extra is not installed (pip install 'ctxrag[server]')")
pytest.importorskip("uvicorn", reason="the server extra is not installed (pip install 'ctxrag[server]')")

from langchain_core.documents import Document  # noqa: E402
from server_helpers import FactEchoChatModel, locker_question, run_uvicorn, server_settings  # noqa: E402

from ctxrag.errors import ConfigError  # noqa: E402
from ctxrag.models.chat import chat_openai_compatible  # noqa: E402
from ctxrag.server.app import create_app  # noqa: E402
from ctxrag.server.runnables import hide_paths, hide_paths_in_text  # noqa: E402
from ctxrag.testing.llm_server import HANG_GUARD_S  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("token", ["", "   "])
def test_empty_token_is_refused_at_start(locker_kb, locker_home, token: str) -> None:  # noqa: ANN001
    kb, _ = locker_kb
    with pytest.raises(ConfigError, match="auth_token is set but empty"):
        create_app(server_settings(locker_home, auth_token=token), kbs=[kb], llm=FactEchoChatModel())


def test_cli_serve_with_empty_token_exits_with_a_clear_error(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, _ = locker_kb
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_")}
    env.update(CTXRAG_HOME=str(locker_home), CTXRAG_LLM__PROVIDER="none", CTXRAG_SERVER__AUTH_TOKEN="")
    p = subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "serve", "--kb", kb.name, "--port",
                        str(_closed_port())], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert p.returncode == 1 and "auth_token is set but empty" in p.stderr and "auth on" not in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_dead_chat_endpoint_gives_503_on_every_llm_route(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, _ = locker_kb
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    dead = chat_openai_compatible(base_url=url, api_key="sk-secret-77", model="x", max_retries=0, timeout=5)
    app = create_app(server_settings(locker_home), kbs=[kb], llm=dead)
    with run_uvicorn(app) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
        for route, payload in (("/ask", {"question": locker_question("Kelp")}),
                               ("/chat", {"question": locker_question("Kelp")})):
            r = c.post(f"{route}/invoke", json={"input": payload})
            assert r.status_code == 503, (route, r.status_code, r.text)
            assert url in r.json()["detail"] and "unreachable" in r.json()["detail"]
            assert "sk-secret-77" not in r.text and "Traceback" not in r.text
            r = c.post(f"{route}/batch", json={"inputs": [payload]})
            assert r.status_code == 503, (route, r.text)
        assert c.post("/search/invoke", json={"input": "locker Kelp"}).status_code == 200  # no model needed


def test_dead_chat_endpoint_on_a_stream_route_logs_one_line_per_request(locker_kb, locker_home, caplog) -> None:  # noqa: ANN001
    """Before: every streamed request to a dead endpoint logged a full traceback (one per request, server log flooded)."""
    kb, _ = locker_kb
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    dead = chat_openai_compatible(base_url=url, api_key="sk-secret-77", model="x", max_retries=0, timeout=5)
    app = create_app(server_settings(locker_home), kbs=[kb], llm=dead)
    caplog.set_level("WARNING", logger="ctxrag.server")
    with run_uvicorn(app) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
        for _ in range(2):
            streamed = c.post("/ask/stream", json={"input": {"question": locker_question("Kelp")}}).text
            assert "event: error" in streamed and "sk-secret-77" not in streamed
    streaming = [r for r in caplog.records if "failed while streaming" in r.getMessage()]
    assert len(streaming) == 2, [r.getMessage() for r in caplog.records]
    assert all(r.levelname == "WARNING" and r.exc_info is None and "unreachable" in r.getMessage() for r in streaming)
    assert "sk-secret-77" not in caplog.text


def test_health_with_a_trailing_slash_answers_without_a_token(locker_kb, locker_home) -> None:  # noqa: ANN001
    """Before: ``/health/`` answered 307 to ``/health`` instead of the health document."""
    kb, _ = locker_kb
    app = create_app(server_settings(locker_home, auth_token="tok-123"), kbs=[kb], llm=FactEchoChatModel())
    with run_uvicorn(app) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S, follow_redirects=False) as c:
        for path in ("/health", "/health/"):
            r = c.get(path)
            assert r.status_code == 200 and r.json()["status"] == "ok", (path, r.status_code, r.text)
        assert c.post("/search/invoke", json={"input": "locker Kelp"}).status_code == 401


def test_unknown_selected_doc_ids_give_404_naming_them(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, codes = locker_kb
    known = kb.list_documents()[0].doc_id
    app = create_app(server_settings(locker_home), kbs=[kb], llm=FactEchoChatModel())
    with run_uvicorn(app) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
        r = c.post("/chat/invoke", json={"input": {"question": locker_question("Kelp"),
                                                   "selected_doc_ids": [known, "nope-1", "nope-2"]}})
        assert r.status_code == 404 and "nope-1" in r.json()["detail"] and "nope-2" in r.json()["detail"]
        assert known not in r.json()["detail"].split("unknown selected_doc_ids", 1)[1].split("]")[0]
        r = c.post("/chat/invoke", json={"input": {"question": locker_question("Kelp"), "selected_doc_ids": [known]}})
        assert r.status_code == 200, r.text


def test_batch_and_query_caps(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, codes = locker_kb
    settings = server_settings(locker_home, max_batch_inputs=3)
    settings = settings.model_copy(update={"max_query_chars": 200})
    app = create_app(settings, kbs=[kb], llm=FactEchoChatModel())
    with run_uvicorn(app) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
        r = c.post("/search/batch", json={"inputs": ["locker Kelp"] * 4})
        assert r.status_code == 413 and "too many inputs in one batch: 4 (limit 3" in r.json()["detail"]
        r = c.post("/ask/batch", json={"inputs": [{"question": "x"}] * 50_000})
        assert r.status_code == 413 and "50000" in r.json()["detail"]
        names = ["Kelp", "Reef", "Onyx"]
        r = c.post("/search/batch", json={"inputs": [f"locker {n}" for n in names]})
        assert r.status_code == 200
        assert [codes[n] in out[0]["page_content"] for n, out in zip(names, r.json()["output"])] == [True] * 3
        long_query = "locker Kelp " * 20  # 240 characters
        for route, payload in (("/search", long_query), ("/ask", {"question": long_query}),
                               ("/chat", {"question": long_query}),
                               ("/notes", {"action": "search", "query": long_query})):
            r = c.post(f"{route}/invoke", json={"input": payload})
            assert r.status_code == 400 and "too long (240 characters, limit 200" in r.json()["detail"], (route, r.text)
        r = c.post("/search/invoke", json={"input": "locker Kelp " * 16})
        assert r.status_code == 200 and codes["Kelp"] in r.json()["output"][0]["page_content"]


def test_cross_site_posts_are_refused_without_a_token(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, _ = locker_kb
    app = create_app(server_settings(locker_home, allowed_hosts=["rag.example.internal"]), kbs=[kb],
                     llm=FactEchoChatModel())
    note = {"input": {"action": "add", "text": "cross-site note 5521"}}

    def count_notes(c: httpx.Client) -> int:
        r = c.post("/notes/invoke", json={"input": {"action": "list"}})
        return sum("5521" in n["text"] for n in r.json()["output"]["notes"])

    with run_uvicorn(app) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
        import json as _json

        # what a foreign page can send without a CORS preflight: a "simple" text/plain POST
        r = c.post("/notes/invoke", content=_json.dumps(note), headers={"content-type": "text/plain",
                                                                        "origin": "http://evil.example"})
        assert r.status_code == 403 and "evil.example" in r.json()["detail"]
        r = c.post("/notes/invoke", content=_json.dumps(note), headers={"content-type": "text/plain"})
        assert r.status_code == 415 and "application/json" in r.json()["detail"]
        r = c.post("/notes/invoke", json=note, headers={"origin": "http://evil.example"})
        assert r.status_code == 403
        r = c.post("/notes/invoke", json=note, headers={"origin": "null"})
        assert r.status_code == 403
        r = c.post("/notes/invoke", json=note, headers={"host": "attacker.example:8000"})  # DNS rebinding
        assert r.status_code == 403 and "attacker.example" in r.json()["detail"]
        assert count_notes(c) == 0
        for origin in (base, "http://localhost:3000", "http://rag.example.internal"):
            r = c.post("/search/invoke", json={"input": "locker Kelp"}, headers={"origin": origin})
            assert r.status_code == 200, (origin, r.text)
        r = c.post("/notes/invoke", json=note, headers={"origin": base})
        assert r.status_code == 200 and count_notes(c) == 1
        assert c.get("/health").status_code == 200 and c.get("/search/playground/").status_code == 200


def test_token_set_skips_the_origin_check_but_not_auth(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, _ = locker_kb
    app = create_app(server_settings(locker_home, auth_token="tok-9d1"), kbs=[kb], llm=FactEchoChatModel())
    with run_uvicorn(app) as base, httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
        auth = {"Authorization": "Bearer tok-9d1"}
        r = c.post("/search/invoke", json={"input": "locker Kelp"}, headers={**auth, "origin": "https://app.example"})
        assert r.status_code == 200
        assert c.post("/search/invoke", json={"input": "locker Kelp"}, headers={"origin": base}).status_code == 401


def _outside_address() -> str | None:
    """A non-loopback address of this machine, so a request to it comes from a non-local client address."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: nothing is sent, the kernel only picks the route's address
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") else address


@pytest.mark.parametrize("expose", ["local", "always", "never"])
def test_source_paths_by_client(locker_kb, locker_home, expose: str) -> None:  # noqa: ANN001
    kb, codes = locker_kb
    outside = _outside_address()
    settings = server_settings(locker_home, expose_paths=expose, host="0.0.0.0",
                               allowed_hosts=[outside] if outside else [])
    app = create_app(settings, kbs=[kb], llm=FactEchoChatModel())
    with run_uvicorn(app, host="0.0.0.0") as local:
        clients = {"local": local}
        if outside:  # the same server through the machine's own outside address: the client is not 127.0.0.1
            clients["outside"] = local.replace("127.0.0.1", outside)
        for who, base in clients.items():
            expect_full = expose == "always" or (expose == "local" and who == "local")
            with httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
                hit = c.post("/search/invoke", json={"input": "locker Kelp"}).json()["output"][0]
                answer = c.post("/ask/invoke", json={"input": {"question": locker_question("Kelp")}}).json()["output"]
                streamed = c.post("/ask/stream", json={"input": {"question": locker_question("Kelp")}}).text
                # every intermediate step's output (the retriever's documents) is in these two
                logged = c.post("/ask/stream_log", json={"input": {"question": locker_question("Kelp")}}).text
                events = c.post("/search/stream_events", json={"input": "locker Kelp"}).text
            sources = [hit["metadata"]["source"], answer["sources"][0]["source"],
                       answer["documents"][0]["metadata"]["source"]]
            assert all(Path(s).name == "locker_kelp.md" for s in sources), sources
            assert all(Path(s).is_absolute() == expect_full for s in sources), (who, expose, sources)
            for text in (streamed, logged, events):
                assert "locker_kelp.md" in text and (str(locker_home) in text) == expect_full, (who, expose, text[:300])
            assert "event: error" not in logged + events
            assert codes["Kelp"] in answer["answer"]
    if not outside:
        pytest.skip("no non-loopback address on this machine: only the local client was checked")


@pytest.mark.parametrize("client_kind", ["never-local", "local-outside"])
def test_batch_routes_hide_paths(locker_kb, locker_home, client_kind: str) -> None:  # noqa: ANN001
    """LangServe's /batch keeps only ``configurable`` of the per-request config: the flag must survive there, and a
    missing flag hides paths (before: 9 absolute paths from /search/batch, 5 each from /ask/batch and /chat/batch)."""
    kb, _ = locker_kb
    expose, who = client_kind.split("-")
    outside = _outside_address()
    if who == "outside" and not outside:
        pytest.skip("no non-loopback address on this machine")
    settings = server_settings(locker_home, expose_paths=expose, host="0.0.0.0",
                               allowed_hosts=[outside] if outside else [])
    app = create_app(settings, kbs=[kb], llm=FactEchoChatModel())
    with run_uvicorn(app, host="0.0.0.0") as local:
        base = local.replace("127.0.0.1", outside) if who == "outside" else local
        question = {"question": locker_question("Kelp")}
        with httpx.Client(base_url=base, timeout=HANG_GUARD_S) as c:
            bodies = {
                "/search/batch": {"inputs": ["locker Kelp", "locker Kelp"]},
                "/ask/batch": {"inputs": [question, question]},
                "/chat/batch": {"inputs": [question]},
                # a client asking for paths in its own config is overridden by the server's setting
                "/search/batch?cfg": {"inputs": ["locker Kelp"],
                                      "config": {"configurable": {"ctxrag_expose_paths": True}}},
            }
            for route, body in bodies.items():
                r = c.post(route.split("?")[0], json=body)
                assert r.status_code in (200, 422), (route, r.text[:300])
                if r.status_code == 422:  # a server that refuses a client's configurable key: nothing leaked either
                    continue
                assert "locker_kelp.md" in r.text, (route, r.text[:300])
                assert str(locker_home) not in r.text, (route, r.text[:500])


def test_hide_paths_copies_and_keeps_uris() -> None:
    doc = Document(page_content="x", metadata={"source": "/srv/kb/a.md", "kb": "k"})
    value = {"sources": [{"n": 1, "source": "/srv/kb/a.md"}, {"n": 2, "source": "note://42"}],
             "documents": [doc], "answer": "see /srv/kb/a.md"}
    out = hide_paths(value)
    assert out["sources"] == [{"n": 1, "source": "a.md"}, {"n": 2, "source": "note://42"}]
    assert out["documents"][0].metadata == {"source": "a.md", "kb": "k"}
    assert doc.metadata["source"] == "/srv/kb/a.md" and value["sources"][0]["source"] == "/srv/kb/a.md"


def test_hide_paths_in_text_spares_urls_and_chunk_keys() -> None:
    patch = {"ops": [{"op": "add", "path": "/logs/r/final_output/documents/0/metadata/source", "value": "/srv/a.md"},
                     {"op": "add", "path": "/logs/p", "value": "(source: FAQ, /srv/kb/faq.md) [1] https://x.org/a/b"}]}
    out = hide_paths_in_text(patch)
    assert out["ops"][0]["value"] == "a.md"
    assert out["ops"][1]["value"] == "(source: FAQ, faq.md) [1] https://x.org/a/b"
