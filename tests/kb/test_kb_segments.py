"""Segmented generations in a knowledge base: a commit writes only its new segment and shares the rest (same inodes),
results equal a knowledge base built in one commit, a knowledge base written before segments opens and is migrated
by hard links on its first write, `ctxrag kb optimize` merges to one segment, and kill -9 in the middle of a merge
leaves the previous generation readable. Real FAISS, BM25, SQLite and processes; `fake` embeddings."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import ctxrag.stores.registry as registry
from ctxrag.cli.main import app
from ctxrag.kb.maintenance import check
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import EmbeddingSettings, Settings
from ctxrag.errors import IndexCorruptError
from ctxrag.stores.bm25 import BM25ChunkIndex, BM25Index
from ctxrag.stores.bm25.segmented import SegmentedKeywordIndex
from ctxrag.stores.bm25.doc_keys import ID_ARRAYS
from ctxrag.stores.engine.segment_checksums import VERIFIED_FILE, file_sha256
from ctxrag.testing.llm_server import HANG_GUARD_S

WORDS = ["amberquartz", "bluefjord", "copperlynx", "dustyorchid", "emberflint", "frostgarnet", "glacierwren"]


def _settings(home: Path) -> Settings:
    return Settings(home=home, embeddings=EmbeddingSettings(provider="fake"))


def _corpus(root: Path, words: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i, word in enumerate(words):
        (root / f"{word}.md").write_text(f"# Note {i}\n\nThis note is about {word}, and {WORDS[(i + 1) % 7]} too.\n",
                                         encoding="utf-8")
    return root


def _results(kb: KnowledgeBase) -> list[list[tuple[str, float]]]:
    out = []
    for word in WORDS:
        for mode in ("bm25", "dense"):
            out.append([(Path(d.metadata["source"]).name, round(float(d.metadata.get("score", 0.0)), 9))
                        for d in kb.search(f"{word} note", k=4, mode=mode)])
    return out


def _segment_files(kb: KnowledgeBase) -> dict[str, tuple[int, int]]:
    seg = kb.generations.segments_dir
    return {p.relative_to(seg).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns) for p in seg.rglob("*")
            if p.is_file() and p.name != VERIFIED_FILE}  # the verified marker is a cache an open may rewrite


def test_each_commit_adds_a_segment_and_shares_the_rest(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "c", WORDS)
    kb = KnowledgeBase.open("seg", _settings(tmp_path / "home"))
    kb.ingest([corpus], progress=False, commit_every=2)  # four commits, four segments per index
    doc = json.loads((kb.generations.gen_dir(kb.generation) / "bm25" / "segments.json").read_text())
    assert len(doc["segments"]) == 4
    before = _segment_files(kb)
    kb.delete_document("amberquartz.md")
    (corpus / "amberquartz.md").unlink()
    after = _segment_files(kb)
    assert {k: v for k, v in after.items() if k in before} == before  # earlier segments untouched, not copied
    one = KnowledgeBase.open("one", _settings(tmp_path / "home"))
    one.ingest([corpus], progress=False)  # the same live documents in one commit
    assert _results(kb) == _results(one)
    assert check(kb).clean
    r = CliRunner().invoke(app, ["kb", "optimize", "seg"],
                           env={"CTXRAG_HOME": str(tmp_path / "home"), "CTXRAG_EMBEDDINGS__PROVIDER": "fake"})
    assert r.exit_code == 0 and "bm25: 4 segments -> 1" in r.output and "dense: 4 segments -> 1" in r.output, r.output
    kb.close()
    kb = KnowledgeBase.open("seg", _settings(tmp_path / "home"))
    assert _results(kb) == _results(one) and check(kb).clean
    kb.close()
    one.close()


def test_commits_and_readers_reuse_loaded_segments(tmp_path: Path) -> None:
    """A write session starts from the published generation's segments (forked, not loaded again: no per-commit
    work proportional to the corpus), and a reader that sees another writer's commit loads only the new segment;
    neither changes what the other searches."""
    corpus = _corpus(tmp_path / "c", WORDS)
    kb = KnowledgeBase.open("seg", _settings(tmp_path / "home"))
    kb.ingest([corpus], progress=False, commit_every=2)

    def shared(a: KnowledgeBase | dict, b: KnowledgeBase | dict) -> dict[str, list[bool]]:
        ia = a.indexes if isinstance(a, KnowledgeBase) else a
        ib = b.indexes if isinstance(b, KnowledgeBase) else b
        data = {"dense": lambda s: s.index._index, "bm25": lambda s: s.index.index._blocks[0]}
        return {n: [f(x) is f(y) for x in ia[n].sealed for y in ib[n].sealed if x.id == y.id]
                for n, f in data.items()}

    published = dict(kb.indexes)
    dead = {n: [set(s.dead) for s in published[n].sealed] for n in ("dense", "bm25")}
    kb.delete_document("amberquartz.md")  # tombstones in a shared segment (whose merge rewrites it)
    assert shared(kb, published) == {"dense": [True] * 3, "bm25": [True] * 3}
    assert {n: [s.dead for s in published[n].sealed] for n in dead} == dead  # the old snapshot is unchanged
    other = KnowledgeBase.open("seg", _settings(tmp_path / "home"))
    assert _results(other) == _results(kb)
    before = dict(kb.indexes)
    (corpus / "zz.md").write_text("# Late\n\nA late note about glacierwren.\n", encoding="utf-8")
    other.ingest([corpus / "zz.md"], progress=False)
    assert _results(kb) == _results(other)  # kb follows the other writer's commit ...
    assert all(all(v) and len(v) >= 3 for v in shared(kb, before).values())  # ... loading only the new segment
    assert check(kb).clean
    other.close()
    kb.close()


def test_knowledge_base_written_before_segments_opens_and_is_migrated(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = _corpus(tmp_path / "c", WORDS[:4])
    with monkeypatch.context() as m:  # the design before segments: every index saved whole in the generation
        m.setattr(registry, "segmented", lambda name, kind, make, load, kb_name="NAME": (make, load))
        old = KnowledgeBase.open("old", _settings(tmp_path / "home"))
        old.ingest([corpus], progress=False)
        before = _results(old)
        gen_dir = old.generations.gen_dir(old.generation)
        old.close()
    assert (gen_dir / "bm25" / "bm25.npz").exists() and not (gen_dir / "bm25" / "segments.json").exists()
    kb = KnowledgeBase.open("old", _settings(tmp_path / "home"))
    assert _results(kb) == before and check(kb).clean  # read as one segment
    _corpus(corpus, WORDS[4:])
    kb.ingest([corpus], progress=False)
    doc = json.loads((kb.generations.gen_dir(kb.generation) / "bm25" / "segments.json").read_text())
    first = kb.generations.segments_dir / doc["segments"][0]["id"] / "bm25.npz"
    assert len(doc["segments"]) == 2 and first.stat().st_nlink == 2  # hard-linked from the old generation
    full = KnowledgeBase.open("full", _settings(tmp_path / "home"))
    full.ingest([corpus], progress=False)
    assert _results(kb) == _results(full)
    kb.close()
    full.close()


def _rewrite_bm25_as_version_1(kb: KnowledgeBase) -> list[Path]:
    """Rewrite the BM25 segments of the current generation as format version 1 wrote them (every caller id in
    ``bm25.json``, none in ``bm25.npz``) and re-record their checksums in ``segments.json`` and the generation
    manifest, as if an older ctxrag had written them."""
    gen_dir = kb.generations.gen_dir(kb.generation)
    listing = json.loads((gen_dir / "bm25" / "segments.json").read_text())
    out = []
    for entry in listing["segments"]:
        seg = kb.generations.segments_dir / entry["id"]
        index = BM25Index.load(seg, mmap=False)
        assert bool(index._live.all())  # version 1 kept the id of every slot: a segment without dead slots here
        with np.load(seg / "bm25.npz", allow_pickle=False) as z:
            arrays = {n: z[n] for n in z.files if n not in ID_ARRAYS}
        with open(seg / "bm25.npz", "wb") as fh:
            np.savez(fh, **arrays)
        manifest = json.loads((seg / "bm25.json").read_text())
        manifest.update(version=1, ids={"mode": "explicit", "keys": index.ids},
                        arrays_bytes=(seg / "bm25.npz").stat().st_size)
        (seg / "bm25.json").write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")
        entry["files"] = {n: {"size": (seg / n).stat().st_size, "sha256": file_sha256(seg / n)} for n in entry["files"]}
        out.append(seg)
    (gen_dir / "bm25" / "segments.json").write_text(json.dumps(listing))
    gen_manifest = json.loads((gen_dir / "manifest.json").read_text())
    listed = gen_dir / "bm25" / "segments.json"
    gen_manifest["indexes"]["bm25"]["files"]["segments.json"] = {"size": listed.stat().st_size,
                                                                 "sha256": file_sha256(listed)}
    (gen_dir / "manifest.json").write_text(json.dumps(gen_manifest))
    return out


def test_bm25_segments_of_format_version_1_open_and_take_new_commits(tmp_path: Path) -> None:
    """Caller ids were a JSON list in ``bm25.json`` before version 2 (arrays in ``bm25.npz``): such segments still
    open, score exactly, take tombstones, and sit beside new segments; a merge rewrites them as version 2."""
    corpus = _corpus(tmp_path / "c", WORDS[:4])
    kb = KnowledgeBase.open("v1", _settings(tmp_path / "home"))
    kb.ingest([corpus], progress=False)
    kb.close()
    kb = KnowledgeBase.open("v1", _settings(tmp_path / "home"))
    (old_segment,) = _rewrite_bm25_as_version_1(kb)
    kb.close()
    kb = KnowledgeBase.open("v1", _settings(tmp_path / "home"))
    assert json.loads((old_segment / "bm25.json").read_text())["version"] == 1 and check(kb).clean
    _corpus(corpus, WORDS[4:])
    kb.ingest([corpus], progress=False)  # a version 2 segment beside the version 1 one
    kb.delete_document("bluefjord.md")  # a tombstone in the version 1 segment
    full = KnowledgeBase.open("full", _settings(tmp_path / "home"))
    full.ingest([corpus], progress=False)
    full.delete_document("bluefjord.md")
    assert _results(kb) == _results(full) and check(kb).clean
    kb.snapshots.optimize()  # one merged segment, written as version 2
    doc = json.loads((kb.generations.gen_dir(kb.generation) / "bm25" / "segments.json").read_text())
    merged = kb.generations.segments_dir / doc["segments"][0]["id"] / "bm25.json"
    assert len(doc["segments"]) == 1 and json.loads(merged.read_text())["version"] == 2
    assert _results(kb) == _results(full) and check(kb).clean
    kb.close()
    full.close()


_MERGE_KILL = textwrap.dedent(
    """
    import os, signal, sys
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import EmbeddingSettings, Settings
    from ctxrag.stores.bm25.segmented import SegmentedKeywordIndex
    orig = SegmentedKeywordIndex.merged
    def dying(self, parts):  # the merged segment is built (the dense one already written): die before the switch
        out = orig(self, parts)
        os.kill(os.getpid(), signal.SIGKILL)
    SegmentedKeywordIndex.merged = dying
    kb = KnowledgeBase.open("seg", Settings(home=sys.argv[1], embeddings=EmbeddingSettings(provider="fake")))
    kb.snapshots.optimize()
    """
)


def test_kill_9_in_the_middle_of_a_merge_leaves_the_previous_generation(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path / "c", WORDS)
    home = tmp_path / "home"
    kb = KnowledgeBase.open("seg", _settings(home))
    kb.ingest([corpus], progress=False, commit_every=2)
    before, gen = _results(kb), kb.generation
    kb.close()
    proc = subprocess.run([sys.executable, "-c", _MERGE_KILL, str(home)], timeout=HANG_GUARD_S)
    assert proc.returncode == -signal.SIGKILL
    kb = KnowledgeBase.open("seg", _settings(home))
    assert kb.generation == gen and _results(kb) == before and check(kb).clean
    written = set(_segment_files(kb))
    assert kb.snapshots.optimize() == {"dense": (4, 1), "bm25": (4, 1)}  # the next writer merges, and cleans up
    assert _results(kb) == before
    leftover = {p.name for p in kb.generations.segments_dir.iterdir()}
    doc = json.loads((kb.generations.gen_dir(kb.generation - 1) / "bm25" / "segments.json").read_text())
    kept = {s["id"] for n in (kb.generation - 1, kb.generation) for name in ("dense", "bm25")
            for s in json.loads((kb.generations.gen_dir(n) / name / "segments.json").read_text())["segments"]}
    assert leftover == kept and len(doc["segments"]) == 4 and written
    kb.close()


def test_an_older_segment_list_copied_into_the_current_generation_is_damage(tmp_path: Path) -> None:
    """Issue #43: both generations' manifests and ``indexes/format.json`` deleted and the previous generation's
    ``bm25/segments.json`` copied into the current one. The chunk ids are the same (the document was rewritten in
    place), so only the segment list's own generation stamp, and the rule that a generation with a segment list always
    has a manifest, can tell: `kb check` names the file, search refuses instead of serving the old text, and `kb
    repair` brings back the new text."""
    corpus = _corpus(tmp_path / "c", WORDS[:2])
    home = tmp_path / "home"
    env = {"CTXRAG_HOME": str(home), "CTXRAG_EMBEDDINGS__PROVIDER": "fake"}
    kb = KnowledgeBase.open("stale", _settings(home))
    kb.ingest([corpus], progress=False)
    old_list = (kb.generations.gen_dir(kb.generation) / "bm25" / "segments.json").read_bytes()
    (corpus / "amberquartz.md").write_text("# Note 0\n\nRewritten: now about zirconheron only.\n", encoding="utf-8")
    kb.ingest([corpus], progress=False)
    gen = kb.generation
    assert [Path(d.metadata["source"]).name for d in kb.search("zirconheron", k=1, mode="bm25")] == ["amberquartz.md"]
    kb.close()
    base = home / "kb" / "stale" / "indexes"
    for n in (gen - 1, gen):
        (base / f"gen-{n:06d}" / "manifest.json").unlink()
    (base / "format.json").unlink()
    (base / f"gen-{gen:06d}" / "bm25" / "segments.json").write_bytes(old_list)
    r = CliRunner().invoke(app, ["kb", "check", "stale"], env=env)
    assert r.exit_code == 1 and "bm25" in r.output and "kb repair stale" in r.output, r.output
    r = CliRunner().invoke(app, ["search", "zirconheron", "--kb", "stale", "--mode", "bm25"], env=env)
    assert r.exit_code == 1 and "manifest" in r.output and "Traceback" not in r.output, r.output
    r = CliRunner().invoke(app, ["kb", "repair", "stale"], env=env)
    assert r.exit_code == 0, r.output
    kb = KnowledgeBase.open("stale", _settings(home))
    assert check(kb).clean
    assert [Path(d.metadata["source"]).name for d in kb.search("zirconheron", k=1, mode="bm25")] == ["amberquartz.md"]
    kb.close()


def test_a_segment_list_names_its_generation_and_a_list_of_another_is_refused(tmp_path: Path) -> None:
    """Even where a manifest vouches for nothing (a generation folder copied with its manifest is another matter:
    the manifest's checksum covers the list), a segment list read from ``gen-N`` must say it was written for N."""
    corpus = _corpus(tmp_path / "c", WORDS[:2])
    kb = KnowledgeBase.open("stamp", _settings(tmp_path / "home"))
    kb.ingest([corpus], progress=False, commit_every=1)
    gen = kb.generation
    listing = kb.generations.gen_dir(gen) / "bm25" / "segments.json"
    assert json.loads(listing.read_text())["generation"] == gen
    kb.close()
    older = json.loads((kb.generations.gen_dir(gen - 1) / "bm25" / "segments.json").read_text())
    listing.write_text(json.dumps(older))
    index = SegmentedKeywordIndex("bm25", BM25ChunkIndex, BM25ChunkIndex.load, kb_name="stamp")
    with pytest.raises(IndexCorruptError, match=rf"segments\.json.*generation {gen - 1}.*gen-{gen:06d}"):
        index.load_set(listing.parent)


def test_bm25_stem_is_read_when_the_first_segment_is_written(tmp_path: Path) -> None:
    """``bm25_stem=True`` makes the knowledge base's BM25 match word forms ("indexes" finds "indexing"); a later
    session with the setting off adds documents tokenized the same way, so old and new documents still match."""
    def settings(stem: bool) -> Settings:
        return _settings(tmp_path / "home").model_copy(update={"bm25_stem": stem, "contextualize": False})

    def bm25_hits(kb: KnowledgeBase, query: str) -> set[str]:
        return {Path(d.metadata["source"]).name for d in kb.search(query, k=4, mode="bm25") if d.metadata["score"] > 0}

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    (first / "a.md").write_text("# A\n\nNotes on indexing the tables.\n", encoding="utf-8")
    (second / "b.md").write_text("# B\n\nTwo indexes of rows.\n", encoding="utf-8")
    for folder, words in ((first, WORDS[:3]), (second, WORDS[3:5])):  # other documents, so the terms weigh > 0
        for word in words:
            (folder / f"{word}.md").write_text(f"# {word}\n\nA note about {word}.\n", encoding="utf-8")
    plain = KnowledgeBase.open("plain", settings(False))
    plain.ingest([first], progress=False)
    assert bm25_hits(plain, "indexes") == set()
    plain.close()
    kb = KnowledgeBase.open("stemmed", settings(True))
    kb.ingest([first], progress=False)
    assert bm25_hits(kb, "indexes") == {"a.md"}
    kb.close()
    kb = KnowledgeBase.open("stemmed", settings(False))
    kb.ingest([second], progress=False)
    assert bm25_hits(kb, "indexing") == {"a.md", "b.md"}
    kb.close()
