"""ContextCache on real SQLite files: hits, misses, every key part, reopen, WAL, threads, corrupt files."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

from ctxrag.errors import IndexCorruptError
from ctxrag.indexing.contexts.cache import ContextCache
from ctxrag.indexing.contexts.chunk_context import Contextualizer
from ctxrag.indexing.contexts.document_context import DocumentContextualizer
from ctxrag.prompts.contextual import default_context_prompts, default_document_summary_prompts

KEY = ("doc-hash", "chunk-hash", "qwen", "anthropic-en-v1")


def _sha256(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_contexts_cached_under_the_stored_key_layout_still_hit(tmp_path: Path) -> None:
    """The key layout every cache written so far uses: (sha256 of the document, sha256 of the chunk or
    "__document__", model name, prompt version). Both contextualizers answer from it without calling the model."""
    doc, chunk = "ACME annual report 2023. Revenue grew 3% on strong demand.", "Revenue grew 3% on strong demand."
    chunk_version, doc_version = default_context_prompts()["en"].version, default_document_summary_prompts()["en"].version
    never = GenericFakeChatModel(messages=iter([]))  # any call would fail (StopIteration) and fall back
    with ContextCache(tmp_path / "c.sqlite") as cache:
        cache.put(_sha256(doc), _sha256(chunk), "m", chunk_version, "Where the chunk sits.")
        cache.put(_sha256(doc), "__document__", "m", doc_version, "ACME's 2023 report.")
        per_chunk = Contextualizer(never, cache=cache, model_name="m")
        assert per_chunk.contextualize_document(doc, [chunk], title="ACME") == ["Where the chunk sits."]
        per_doc = DocumentContextualizer(never, cache=cache, model_name="m")
        assert per_doc.contextualize_document(doc, [chunk, doc], title="ACME") == ["ACME's 2023 report."] * 2
        assert per_chunk.report().cache_hits == 1 and per_doc.report().cache_hits == 2
        assert per_chunk.report().llm_calls == per_doc.report().llm_calls == 0


def test_put_then_get_and_miss(tmp_path: Path) -> None:
    with ContextCache(tmp_path / "c.sqlite") as cache:
        assert cache.get(*KEY) is None
        cache.put(*KEY, "From ACME's report.")
        assert cache.get(*KEY) == "From ACME's report."
        assert len(cache) == 1


@pytest.mark.parametrize("position", range(4))
def test_every_key_part_matters(tmp_path: Path, position: int) -> None:
    with ContextCache(tmp_path / "c.sqlite") as cache:
        cache.put(*KEY, "ctx")
        other = list(KEY)
        other[position] = other[position] + "-changed"
        assert cache.get(*other) is None
        assert cache.get(*KEY) == "ctx"


def test_put_replaces(tmp_path: Path) -> None:
    with ContextCache(tmp_path / "c.sqlite") as cache:
        cache.put(*KEY, "old")
        cache.put(*KEY, "new")
        assert cache.get(*KEY) == "new" and len(cache) == 1


def test_reopen_keeps_contexts_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "contexts.sqlite"
    cache = ContextCache(path)
    cache.put(*KEY, "kept")
    cache.close()
    with ContextCache(path) as again:
        assert again.get(*KEY) == "kept"
        assert again.get_many([KEY, ("x", "y", "z", "w")]) == {KEY: "kept"}
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode.lower() == "wal"


def test_two_handles_on_one_file_see_each_other(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    with ContextCache(path) as a, ContextCache(path) as b:
        a.put(*KEY, "from a")
        assert b.get(*KEY) == "from a"


def test_default_location_is_under_cache_dir(ctxrag_home: Path) -> None:
    from ctxrag.settings import get_settings

    with ContextCache.default() as cache:
        assert cache.path == get_settings().cache_dir / "contexts.sqlite"
        assert cache.path.is_relative_to(ctxrag_home)


def test_concurrent_writers_in_threads(tmp_path: Path) -> None:
    with ContextCache(tmp_path / "c.sqlite") as cache:

        def write(n: int) -> None:
            for i in range(25):
                cache.put(f"d{n}", f"c{i}", "m", "v", f"{n}-{i}")

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(cache) == 100
        assert cache.get("d3", "c24", "m", "v") == "3-24"


def test_clear(tmp_path: Path) -> None:
    with ContextCache(tmp_path / "c.sqlite") as cache:
        cache.put(*KEY, "x")
        cache.clear()
        assert len(cache) == 0 and cache.get(*KEY) is None


def test_corrupt_file_raises_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "contexts.sqlite"
    path.write_bytes(b"this is not a sqlite database" * 100)
    with pytest.raises(IndexCorruptError, match="contexts.sqlite"):
        ContextCache(path)
