"""The HTTP endpoint under a real uvicorn on 127.0.0.1: LangServe routes through `RemoteRunnable` (invoke, batch,
stream), 50 concurrent clients each getting its own answer, bearer auth on and off, JSON 4xx for bad input (malformed
JSON, wrong shape, oversized bodies, plain and chunked), JSON 5xx without tracebacks, the `ctxrag serve` command, and
one end-to-end run with the real local model."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("langserve", reason="the server extra is not installed (pip install 'ctxrag[server]')")
pytest.importorskip("uvicorn", reason="the server extra is not installed (pip install 'ctxrag[server]')")

from langchain_core.documents import Document  # noqa: E402
from langserve import RemoteRunnable  # noqa: E402
from server_helpers import (  # noqa: E402
    LOCKER_NAMES, FactEchoChatModel, FailingChatModel, locker_question, run_uvicorn, server_settings,
)

from ctxrag.errors import KnowledgeBaseNotFound, ModelError  # noqa: E402
from ctxrag.server.app import create_app  # noqa: E402
from ctxrag.testing.llm_server import HANG_GUARD_S  # noqa: E402
from ctxrag.testing.processes import stop_process  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tok-3f9a1c77e2"


@pytest.fixture
def server(locker_kb, locker_home):  # noqa: ANN001, ANN201 - (base url, codes); one server at a time (see run_uvicorn)
    kb, codes = locker_kb
    app = create_app(server_settings(locker_home), kbs=[kb], llm=FactEchoChatModel(delay_s=0.05))
    with run_uvicorn(app) as url:
        yield url, codes


def test_health_and_index(server) -> None:  # noqa: ANN001
    url, _ = server
    health = httpx.get(f"{url}/health").json()
    assert health["status"] == "ok" and health["knowledge_bases"] == ["lockers"] and health["auth"] is False
    assert set(health["routes"]) == {"/ask", "/chat", "/search", "/notes"}
    index = httpx.get(f"{url}/").json()
    assert index["routes"]["/ask"]["playground"] == "/ask/playground/"


def test_remote_runnable_ask_invoke_stream_batch(server) -> None:  # noqa: ANN001
    url, codes = server
    ask = RemoteRunnable(f"{url}/ask/", timeout=HANG_GUARD_S)
    out = ask.invoke({"question": locker_question("Quartz")})
    assert out["answer"] == f"The access code of locker Quartz is {codes['Quartz']} [1]."
    assert [s["n"] for s in out["sources"]] == [1] and out["sources"][0]["source"].endswith("locker_quartz.md")
    assert isinstance(out["documents"][0], Document) and out["invalid_citations"] == []

    chunks = list(ask.stream({"question": locker_question("Maple")}))
    answer_parts = [c["answer"] for c in chunks if "answer" in c]
    assert len(answer_parts) > 3  # word by word, not one blob
    assert "".join(answer_parts) == f"The access code of locker Maple is {codes['Maple']} [1]."
    assert chunks[-1]["sources"][0]["source"].endswith("locker_maple.md")

    outs = ask.batch([{"question": locker_question(n)} for n in ("Onyx", "Reef")])
    assert [o["answer"] for o in outs] == [f"The access code of locker {n} is {codes[n]} [1]." for n in ("Onyx", "Reef")]


def test_remote_runnable_search_chat_notes(server) -> None:  # noqa: ANN001
    url, codes = server
    docs = RemoteRunnable(f"{url}/search/", timeout=HANG_GUARD_S).invoke("access code of locker Zephyr")
    assert docs and isinstance(docs[0], Document) and docs[0].metadata["source"].endswith("locker_zephyr.md")
    assert codes["Zephyr"] in docs[0].page_content

    chat = RemoteRunnable(f"{url}/chat/", timeout=HANG_GUARD_S)
    chunks = list(chat.stream({"question": locker_question("Birch")}))
    assert "route" in chunks[0]  # the route is known before the answer streams
    answer = "".join(c.get("answer", "") for c in chunks)
    if chunks[0]["route"] == "rag":
        assert codes["Birch"] in answer
    full = chat.invoke({"question": locker_question("Birch")})
    assert full["route"] == chunks[0]["route"] and full["answer"] == answer

    notes = RemoteRunnable(f"{url}/notes/", timeout=HANG_GUARD_S)
    added = notes.invoke({"action": "add", "text": "Locker Birch sticks in cold weather.", "tags": ["depot"]})
    assert added["notes"][0]["tags"] == ["depot"]
    found = notes.invoke({"action": "search", "query": "which locker sticks when it is cold?", "tag": "depot"})
    assert found["notes"][0]["id"] == added["notes"][0]["id"]
    assert [n["id"] for n in notes.invoke({"action": "list", "tag": "depot"})["notes"]] == [added["notes"][0]["id"]]


def test_fifty_concurrent_clients_each_get_their_own_answer(server) -> None:  # noqa: ANN001
    url, codes = server

    async def one(name: str) -> tuple[str, str]:
        out = await RemoteRunnable(f"{url}/ask/", timeout=HANG_GUARD_S).ainvoke({"question": locker_question(name)})
        return name, out["answer"]

    async def all_at_once() -> list[tuple[str, str]]:
        return await asyncio.wait_for(asyncio.gather(*(one(n) for n in LOCKER_NAMES)), timeout=HANG_GUARD_S)

    t0 = time.perf_counter()
    results = asyncio.run(all_at_once())
    elapsed = time.perf_counter() - t0
    print(f"\n50 concurrent /ask clients: {elapsed:.2f} s")
    assert len(results) == 50
    wrong = [(n, a) for n, a in results if a != f"The access code of locker {n} is {codes[n]} [1]."]
    assert not wrong, wrong


def test_bad_input_gets_json_4xx(server) -> None:  # noqa: ANN001
    url, _ = server
    with httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/ask/invoke", content=b'{"input": {"question": ', headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json() == {"detail": [{"msg": "Invalid JSON body"}]}
        r = c.post("/ask/invoke", json={"inputs": {"question": "x"}})
        assert r.status_code == 422 and "detail" in r.json()
        r = c.post("/ask/invoke", json={"input": {"question": ""}})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "question"
        r = c.post("/ask/invoke", json={"input": {"question": "hi", "history": [["robot", "x"]]}})
        assert r.status_code == 422
        r = c.post("/search/invoke", json={"input": "   "})
        assert r.status_code == 400 and "non-empty query" in r.json()["detail"]
        r = c.post("/notes/invoke", json={"input": {"action": "add"}})
        assert r.status_code == 400 and "needs a non-empty 'text'" in r.json()["detail"]
        r = c.post("/notes/invoke", json={"input": {"action": "add", "text": "x", "tags": ["bad tag"]}})
        assert r.status_code == 400 and "invalid tag" in r.json()["detail"]
        r = c.post("/nope/invoke", json={"input": "x"})
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
        for r in (c.post("/ask/invoke", content=b"{"), c.post("/search/invoke", json={"input": " "})):
            assert "Traceback" not in r.text and r.headers["content-type"].startswith("application/json")


def test_oversized_bodies_get_413(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, codes = locker_kb
    app = create_app(server_settings(locker_home, max_body_bytes=2000), kbs=[kb], llm=FactEchoChatModel())
    big = {"input": {"question": "x" * 3000}}
    with run_uvicorn(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        r = c.post("/ask/invoke", json=big)  # declared Content-Length
        assert r.status_code == 413 and r.json() == {"detail": "request body too large (limit 2000 bytes)"}

        def chunked():  # no Content-Length: counted while it arrives
            for _ in range(10):
                yield b"x" * 500

        r = c.post("/ask/invoke", content=chunked(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        r = c.post("/search/invoke", json={"input": "locker Coral"})  # small bodies still pass
        assert r.status_code == 200 and codes["Coral"] in r.json()["output"][0]["page_content"]


def test_auth_on(locker_kb, locker_home, caplog: pytest.LogCaptureFixture) -> None:  # noqa: ANN001
    kb, codes = locker_kb
    app = create_app(server_settings(locker_home, auth_token=TOKEN), kbs=[kb], llm=FactEchoChatModel())
    with run_uvicorn(app) as url, httpx.Client(base_url=url, timeout=30) as c:
        assert c.get("/health").status_code == 200 and c.get("/health").json()["auth"] is True
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                        {"Authorization": "Bearer"}, {"Authorization": TOKEN}):
            r = c.post("/search/invoke", json={"input": "locker Iris"}, headers=headers)
            assert r.status_code == 401, headers
            assert r.json()["detail"].startswith("missing or invalid bearer token") and TOKEN not in r.text
            assert r.headers["www-authenticate"] == "Bearer"
        assert c.get("/search/playground/").status_code == 401
        assert c.post("/ask/invoke", content=b"x" * 5_000_000).status_code == 401  # refused before the body counts
        good = RemoteRunnable(f"{url}/ask/", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=HANG_GUARD_S)
        assert codes["Iris"] in good.invoke({"question": locker_question("Iris")})["answer"]
        assert codes["Iris"] in "".join(ch.get("answer", "") for ch in good.stream({"question": locker_question("Iris")}))
        with pytest.raises(httpx.HTTPStatusError, match="401"):
            RemoteRunnable(f"{url}/ask/", timeout=HANG_GUARD_S).invoke({"question": locker_question("Iris")})
    assert TOKEN not in caplog.text and TOKEN not in repr(app.user_middleware)


def test_auth_off_needs_no_header(server) -> None:  # noqa: ANN001
    url, codes = server
    r = httpx.post(f"{url}/search/invoke", json={"input": "locker Lotus"}, headers={"Authorization": "Bearer junk"})
    assert r.status_code == 200 and codes["Lotus"] in r.json()["output"][0]["page_content"]


def test_failures_are_json_5xx_without_traceback(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, _ = locker_kb
    crash = create_app(server_settings(locker_home), kbs=[kb],
                       llm=FailingChatModel(error=RuntimeError("secret internals at /srv/x.py")))
    down = create_app(server_settings(locker_home), kbs=[kb],
                      llm=FailingChatModel(error=ModelError("chat endpoint http://127.0.0.1:9/v1 is unreachable")))
    with run_uvicorn(crash) as url:
        r = httpx.post(f"{url}/ask/invoke", json={"input": {"question": locker_question("Kelp")}}, timeout=30)
        assert r.status_code == 500 and r.json() == {"detail": "internal server error"}
        assert "secret internals" not in r.text and "Traceback" not in r.text
        r = httpx.post(f"{url}/ask/stream", json={"input": {"question": locker_question("Kelp")}}, timeout=30)
        assert "event: error" in r.text and "secret internals" not in r.text and "Traceback" not in r.text
        assert httpx.get(f"{url}/health").status_code == 200  # still serving
    with run_uvicorn(down) as url:
        r = httpx.post(f"{url}/ask/invoke", json={"input": {"question": locker_question("Kelp")}}, timeout=30)
        assert r.status_code == 503 and "unreachable" in r.json()["detail"]


def test_without_llm_only_search_and_notes(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, codes = locker_kb
    app = create_app(server_settings(locker_home), kbs=[kb])  # llm.provider = none
    assert [k.name for k in app.state.knowledge_bases] == ["lockers"]
    with run_uvicorn(app) as url:
        health = httpx.get(f"{url}/health").json()
        assert set(health["routes"]) == {"/search", "/notes"} and health["llm"].startswith("unavailable")
        assert httpx.post(f"{url}/ask/invoke", json={"input": {"question": "x"}}).status_code == 404
        docs = RemoteRunnable(f"{url}/search/").invoke("access code of locker Hazel")
        assert codes["Hazel"] in docs[0].page_content


def test_unknown_knowledge_base(locker_home) -> None:  # noqa: ANN001
    with pytest.raises(KnowledgeBaseNotFound, match="unknown knowledge base 'missing'"):
        create_app(server_settings(locker_home), kb_names=["missing"], llm=FactEchoChatModel())


def test_chains_import_without_langserve() -> None:
    code = ("import sys; sys.modules['langserve'] = None\n"
            "import ctxrag.server.runnables, ctxrag.chains.rag, ctxrag.chains.assistant, ctxrag.cli.main\n"
            "try:\n    import ctxrag.server.app\nexcept ImportError:\n    print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_cli_serve(locker_kb, locker_home) -> None:  # noqa: ANN001
    from ctxrag.testing.llm_server import free_port

    kb, codes = locker_kb
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_")}
    env.update(CTXRAG_HOME=str(locker_home), CTXRAG_LLM__PROVIDER="none", CTXRAG_SERVER__AUTH_TOKEN=TOKEN)
    bad = subprocess.run([sys.executable, "-m", "ctxrag.cli.main", "serve", "--kb", "missing"], env=env,
                         capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert bad.returncode == 1 and "unknown knowledge base 'missing'" in bad.stderr
    proc = subprocess.Popen([sys.executable, "-m", "ctxrag.cli.main", "serve", "--kb", kb.name, "--host", "127.0.0.1",
                             "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "ctxrag serve did not answer /health"
            time.sleep(0.3)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        docs = RemoteRunnable(f"http://127.0.0.1:{port}/search/", headers=auth, timeout=HANG_GUARD_S).invoke("locker Walnut")
        assert codes["Walnut"] in docs[0].page_content
    finally:
        stop_process(proc)
    log = proc.stdout.read().decode() if proc.stdout else ""
    assert TOKEN not in log


@pytest.mark.llm
def test_real_local_model_through_the_endpoint(locker_kb, locker_home, server_chat_model) -> None:  # noqa: ANN001
    kb, codes = locker_kb
    app = create_app(server_settings(locker_home), kbs=[kb], llm=server_chat_model.bind(max_tokens=40), k=2)
    with run_uvicorn(app) as url:
        ask = RemoteRunnable(f"{url}/ask/", timeout=HANG_GUARD_S)
        out = ask.invoke({"question": locker_question("Garnet")})
        assert out["documents"][0].metadata["source"].endswith("locker_garnet.md")
        assert out["answer"].strip()
        chunks = list(ask.stream({"question": locker_question("Garnet")}))
        parts = [c["answer"] for c in chunks if "answer" in c]
        assert len(parts) > 1 and "".join(parts).strip()
        print(f"\nlocal model via /ask: {out['answer']!r}")


def test_an_unknown_search_mode_is_refused_before_any_knowledge_base_opens(tmp_path: Path) -> None:
    from ctxrag.errors import ConfigError
    from ctxrag.settings import Settings

    with pytest.raises(ConfigError, match="unknown search mode 'sparse'; choose one of: dense, bm25, hybrid"):
        create_app(Settings(home=tmp_path), kb_names=["not-there"], mode="sparse")
    with pytest.raises(KnowledgeBaseNotFound):
        create_app(Settings(home=tmp_path), kb_names=["not-there"], mode="BM-25")  # a known spelling gets that far


class MisCitingEcho(FactEchoChatModel):
    """`FactEchoChatModel`'s answer citing the next chunk instead, as a Markdown link ("[here]([n])")."""

    def _reply(self, messages: list) -> str:  # noqa: ANN001
        import re

        return re.sub(r"\[(\d+)\]", lambda m: f"[here]([{int(m.group(1)) % 4 + 1}])", super()._reply(messages))


def test_ask_and_its_stream_cite_exactly_the_sources_listed(locker_kb, locker_home) -> None:  # noqa: ANN001
    from ctxrag.chains.checked_markers import marker_numbers

    kb, codes = locker_kb
    with run_uvicorn(create_app(server_settings(locker_home), kbs=[kb], llm=MisCitingEcho())) as url:
        ask = RemoteRunnable(f"{url}/ask/", timeout=HANG_GUARD_S)
        out = ask.invoke({"question": locker_question("Quartz")})
        chunks = list(ask.stream({"question": locker_question("Quartz")}))
    assert codes["Quartz"] in out["answer"] and "](" not in out["answer"], out["answer"]
    assert out["sources"] and marker_numbers(out["answer"]) == [s["n"] for s in out["sources"]]
    streamed = "".join(c.get("answer", "") for c in chunks)
    assert streamed == out["answer"] and next(c["sources"] for c in chunks if "sources" in c) == out["sources"]


def test_a_remote_runnable_script_exits_without_a_traceback(server, tmp_path: Path) -> None:  # noqa: ANN001
    """A script that awaits the client under asyncio.run and ends: LangServe closes its async pool at exit in a new
    event loop, which raised 'Event loop is closed' while the server kept the connection alive."""
    url, codes = server
    script = tmp_path / "client.py"
    script.write_text(
        "import asyncio\nfrom langserve import RemoteRunnable\n"
        f"ask = RemoteRunnable({url + '/ask/'!r})\nsearch = RemoteRunnable({url + '/search/'!r})\n"
        f"print(asyncio.run(ask.ainvoke({{'question': {locker_question('Quartz')!r}}}))['answer'])\n"
        "async def stream():\n"
        f"    return [c async for c in search.astream('access code of locker Quartz')]\n"
        "print(len(asyncio.run(stream())))\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0 and codes["Quartz"] in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "Event loop is closed" not in done.stderr, done.stderr
