"""Contextual retrieval at the knowledge-base level: contexts prepended to the indexed text, the original chunk kept as
content; the context cache means a rebuild makes zero LLM requests (counted at a real llama_cpp.server); a dead
endpoint falls back to a header without failing the ingest; precomputed contexts are imported."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from ctxrag.indexing import Contextualizer
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import Settings
from ctxrag.testing.llm_server import HANG_GUARD_S

DOC = ("# Acme annual report\n\nAcme Corp sells garden pumps in Norway.\n\n## Results\n\n"
       "The company's revenue grew 3% over the previous quarter.\n")


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    p = tmp_path / "acme.md"
    p.write_text(DOC, encoding="utf-8")
    return p


def test_contexts_are_indexed_and_content_kept(tmp_path: Path, doc: Path) -> None:
    s = Settings(home=tmp_path / "h")
    llm = GenericFakeChatModel(messages=iter([AIMessage("From Acme Corp's annual report on garden pumps.")] * 20))
    kb = KnowledgeBase.open("ctx", s)
    kb.ingest([doc], contextualizer=Contextualizer(llm, settings=s, model_name="fake"), progress=False)
    chunks = kb.chunks.all_chunks()
    assert chunks and all(c.metadata["context"] == "From Acme Corp's annual report on garden pumps." for c in chunks)
    assert all("Acme Corp's annual report" not in c.page_content for c in chunks)  # content is the original chunk
    rec = kb.store.get_chunks([chunks[0].id])[chunks[0].id]
    assert rec.indexed_text.startswith("From Acme Corp's annual report") and rec.indexed_text.endswith(rec.content)
    # BM25 finds the chunk through a word only its context has
    assert kb.search("annual garden report Acme", k=1, mode="bm25")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_dead_endpoint_falls_back_to_header(tmp_path: Path, doc: Path) -> None:
    from ctxrag.models.chat import chat_openai_compatible

    s = Settings(home=tmp_path / "h")
    llm = chat_openai_compatible(base_url=f"http://127.0.0.1:{_closed_port()}/v1", model="m", api_key="x", max_retries=0, timeout=5)
    ctx = Contextualizer(llm, settings=s, model_name="dead")
    kb = KnowledgeBase.open("ctx", s)
    report = kb.ingest([doc], contextualizer=ctx, progress=False)
    assert not report.failed and report.context_report.fallbacks == len(kb.chunks.all_chunks())
    assert all(c.metadata["context"].startswith("Acme annual report") for c in kb.chunks.all_chunks())


def test_precomputed_contexts(tmp_path: Path, doc: Path) -> None:
    from ctxrag.indexing import load_precomputed_contexts
    from ctxrag import schema

    s = Settings(home=tmp_path / "h")
    kb = KnowledgeBase.open("ctx", s)
    doc_id = schema.make_doc_id("ctx", str(doc.resolve()))
    path = tmp_path / "contexts.jsonl"
    path.write_text(json.dumps({"chunk_id": f"{doc_id}:0", "context": "Imported context about Acme."}) + "\n", encoding="utf-8")
    kb.ingest([doc], precomputed_contexts=load_precomputed_contexts(path), progress=False)
    first = kb.chunks.get_chunks([f"{doc_id}:0"])[0]
    assert first.metadata["context"] == "Imported context about Acme."


@pytest.mark.llm
def test_rebuild_from_cache_makes_no_llm_request(tmp_path: Path, doc: Path, counting_llm_url) -> None:
    from ctxrag.models.chat import chat_openai_compatible

    s = Settings(home=tmp_path / "h")
    llm = chat_openai_compatible(base_url=str(counting_llm_url), model="m", api_key="x", max_tokens=40,
                                 temperature=0, timeout=HANG_GUARD_S)  # greedy: its replies are recorded and replayed
    kb = KnowledgeBase.open("one", s)
    first = kb.ingest([doc], contextualizer=Contextualizer(llm, settings=s, max_tokens=40), progress=False)
    n_chunks = len(kb.chunks.all_chunks())
    assert counting_llm_url.count >= n_chunks and first.context_report.llm_calls >= n_chunks
    counting_llm_url.reset()
    # a second knowledge base built from the same text: every context comes from the cache
    kb2 = KnowledgeBase.open("two", s)
    second = kb2.ingest([doc], contextualizer=Contextualizer(llm, settings=s, max_tokens=40), progress=False)
    assert counting_llm_url.count == 0
    assert second.context_report.cache_hits == n_chunks
    assert [c.metadata.get("context") for c in kb2.chunks.all_chunks()] == [c.metadata.get("context") for c in kb.chunks.all_chunks()]
