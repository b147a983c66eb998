"""Damage matrix: every index file of the current generation and ``kb.sqlite`` truncated to 0 and to half, garbled in
place (same size) and deleted. Each case gives an error naming the file (or the same results as before), never
silently different results, never deletes an intact file; `kb repair` brings back the results seen before. Plus
``ctxrag kb check`` / ``repair`` / ``show`` through the CLI. Real FAISS, BM25 and SQLite; `fake` embeddings (identical
text -> identical vector, so dense results are exact to compare)."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxrag.cli.main import app
from ctxrag.errors import IndexCorruptError, StoreCorruptError
from ctxrag.kb.maintenance import check, repair
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import EmbeddingSettings, Settings

WORDS = ["amberquartz", "bluefjord", "copperlynx", "dustyorchid", "emberflint", "frostgarnet"]
INDEX_FILES = ["dense/index.faiss", "dense/ids.json", "bm25/bm25.json", "bm25/bm25.npz", "manifest.json",
               "dense/segments.json", "bm25/segments.json"]
"""Files of the current generation; an index file (``dense/index.faiss``) means that file of the index's first
segment (`index_file`)."""
DAMAGES = ["zero", "half", "garble", "delete"]


def _settings(home: Path) -> Settings:
    return Settings(home=home, embeddings=EmbeddingSettings(provider="fake"))


def _results(kb: KnowledgeBase) -> list[list[str | None]]:
    """Per word: BM25 top-1, dense top-1 for the chunk's own text, and the hybrid top-3."""
    texts = {r.chunk_id: r.indexed_text for r in kb.store.iter_chunks()}
    out = []
    for word in WORDS:
        bm25 = [d.id for d in kb.search(word, k=1, mode="bm25")]
        cid = bm25[0] if bm25 else None
        dense = [d.id for d in kb.search(texts[cid], k=1, mode="dense")] if cid else []
        hybrid = [d.id for d in kb.search(f"{word} document", k=3, mode="hybrid")]
        out.append([cid, dense[0] if dense else None, *hybrid])
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    home = tmp_path_factory.mktemp("pristine") / "home"
    corpus = home.parent / "corpus"
    corpus.mkdir()
    for i, word in enumerate(WORDS):
        (corpus / f"doc{i}.md").write_text(f"# Doc {i}\n\nThis document is about {word} and nothing else.\n",
                                           encoding="utf-8")
    kb = KnowledgeBase.open("dmg", _settings(home))
    kb.ingest([corpus], progress=False, commit_every=2)  # several generations, like a real history
    before = _results(kb)
    kb.close()
    assert all(r[0] is not None and r[0] == r[1] for r in before)
    return home, before


def _hashes(root: Path) -> dict[str, str]:
    # .verified.json: a segment's record of which files were hashed (a cache: an open rewrites it after hashing)
    skip = {"kb.sqlite-wal", "kb.sqlite-shm", "write.lock", "write.lock.holder", ".verified.json"}
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() and p.name not in skip}


def _damage(path: Path, how: str) -> None:
    size = path.stat().st_size
    if how == "zero":
        path.write_bytes(b"")
    elif how == "half":
        with open(path, "r+b") as f:
            f.truncate(size // 2)
    elif how == "garble":
        start = max(0, size // 2 - 2048)
        n = min(4096, size - start)
        with open(path, "r+b") as f:
            f.seek(start)
            old = f.read(n)
            f.seek(start)
            f.write(bytes((b + 1 + i % 250) % 256 for i, b in enumerate(old)))  # every byte changes
    else:
        path.unlink()


def index_file(gen_dir: Path, rel: str) -> Path:
    """`rel` in generation `gen_dir`: the generation's own files as they are, an index file in its first segment."""
    kind, _, name = rel.partition("/")
    listing = gen_dir / kind / "segments.json"
    if not name or name == "segments.json" or not listing.exists():
        return gen_dir / rel
    first = json.loads(listing.read_text(encoding="utf-8"))["segments"][0]["id"]
    return gen_dir.parent / "segments" / first / name


def _copy(pristine: Path, tmp_path: Path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    shutil.copytree(pristine, home)
    return home, home / "kb" / "dmg"


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("rel", INDEX_FILES)
def test_damaged_index_file_is_named_and_repair_restores(pristine, tmp_path: Path, rel: str, how: str) -> None:  # noqa: ANN001
    src, before = pristine
    home, root = _copy(src, tmp_path)
    kb = KnowledgeBase.open("dmg", _settings(home))
    gen_dir = kb.generations.gen_dir(kb.generation)
    kb.close()
    target = index_file(gen_dir, rel)
    _damage(target, how)
    intact = {k: v for k, v in _hashes(root).items() if root / k != target}
    kb = KnowledgeBase.open("dmg", _settings(home))
    try:
        got = _results(kb)
    except IndexCorruptError as e:
        assert target.name in str(e) and "kb repair dmg" in str(e), str(e)
    else:
        assert got == before, f"{rel} {how}: silently different results"
    finally:
        kb.close()
    after = _hashes(root)
    assert {k: after.get(k) for k in intact} == intact, "an intact file was changed or deleted"
    kb = KnowledgeBase.open("dmg", _settings(home))
    report = repair(kb)
    assert check(kb).clean, check(kb).lines()
    assert _results(kb) == before
    if rel != "manifest.json" or how != "delete":  # a generation without manifest loads as before: nothing to do
        assert report.generation == kb.generation
    kb.close()
    again = KnowledgeBase.open("dmg", _settings(home))  # and the repair was committed, not only held in memory
    assert _results(again) == before and check(again).clean
    again.close()


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_store_is_a_one_line_error_and_indexes_survive(pristine, tmp_path: Path, how: str) -> None:  # noqa: ANN001
    src, _ = pristine
    home, root = _copy(src, tmp_path)
    _damage(root / "kb.sqlite", how)
    indexes = {k: v for k, v in _hashes(root).items() if k.startswith("indexes/")}
    with pytest.raises(StoreCorruptError, match=r"kb\.sqlite.*(damaged|missing)"):
        KnowledgeBase.open("dmg", _settings(home), create=False)
    with pytest.raises(StoreCorruptError):
        KnowledgeBase.open("dmg", _settings(home), create=True)  # never re-created over the damage
    for args in (["kb", "show", "dmg"], ["kb", "check", "dmg"], ["search", "amberquartz", "--kb", "dmg"]):
        r = CliRunner().invoke(app, args, env={"CTXRAG_HOME": str(home), "CTXRAG_EMBEDDINGS__PROVIDER": "fake"})
        assert r.exit_code == 1, (args, r.output)
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "kb.sqlite" in lines[0], r.output
        assert "Traceback" not in r.output
    assert {k: v for k, v in _hashes(root).items() if k.startswith("indexes/")} == indexes
    if how == "zero":
        assert (root / "kb.sqlite").stat().st_size == 0  # no empty schema written over it
    if how == "delete":
        assert not (root / "kb.sqlite").exists()


def test_cli_check_lists_differences_and_repair_fixes_them(pristine, tmp_path: Path) -> None:  # noqa: ANN001
    src, before = pristine
    home, _root = _copy(src, tmp_path)
    env = {"CTXRAG_HOME": str(home), "CTXRAG_EMBEDDINGS__PROVIDER": "fake"}
    r = CliRunner().invoke(app, ["kb", "check", "dmg"], env=env)
    assert r.exit_code == 0 and "dense: 6 chunks, ok" in r.output and "bm25: 6 chunks, ok" in r.output, r.output
    kb = KnowledgeBase.open("dmg", _settings(home))
    victim = kb.search("copperlynx", k=1, mode="bm25")[0].id
    with kb.snapshots.session() as session:  # a lost update as the old code made them: bm25 lacks one stored chunk
        session.indexes["bm25"].delete([victim])
        kb.snapshots.commit(session)
    kb.close()
    r = CliRunner().invoke(app, ["kb", "show", "dmg"], env=env)
    assert r.exit_code == 0 and "warning: index 'bm25' holds 5 chunks, the document store 6" in r.output
    r = CliRunner().invoke(app, ["kb", "check", "dmg"], env=env)
    assert r.exit_code == 1 and f"missing from the index: {victim}" in r.output and "kb repair dmg" in r.output
    r = CliRunner().invoke(app, ["kb", "repair", "dmg"], env=env)
    assert r.exit_code == 0 and "bm25: rebuilt from 6 stored chunks (1 were missing, 0 not stored)" in r.output, r.output
    r = CliRunner().invoke(app, ["kb", "check", "dmg"], env=env)
    assert r.exit_code == 0, r.output
    kb = KnowledgeBase.open("dmg", _settings(home))
    assert _results(kb) == before
    kb.close()


def test_index_kind_missing_from_generation_is_rebuilt_and_saved_by_repair(pristine, tmp_path: Path) -> None:  # noqa: ANN001
    """A generation written before an index kind existed (simulated: its manifest entry and folder removed)."""
    src, before = pristine
    home, _root = _copy(src, tmp_path)
    kb = KnowledgeBase.open("dmg", _settings(home))
    gen_dir = kb.generations.gen_dir(kb.generation)
    kb.close()
    manifest = json.loads((gen_dir / "manifest.json").read_text(encoding="utf-8"))
    del manifest["indexes"]["bm25"]
    (gen_dir / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    shutil.rmtree(gen_dir / "bm25")
    kb = KnowledgeBase.open("dmg", _settings(home))
    assert _results(kb) == before  # rebuilt in memory, with a warning
    assert not check(kb).clean
    assert repair(kb).actions["bm25"].startswith("rebuilt from 6 stored chunks")
    assert check(kb).clean and (kb.generations.gen_dir(kb.generation) / "bm25" / "segments.json").exists()
    kb.close()


def test_check_hashes_every_file_and_finds_damage_the_open_trusted(pristine, tmp_path: Path) -> None:  # noqa: ANN001
    """An open trusts a segment's verified marker (its files unchanged since hashed); `kb check` hashes everything,
    so damage that kept a file's size and times (bit rot; simulated by a marker forged to match) is still found,
    and `kb repair` rebuilds the index."""
    from ctxrag.stores.engine.segment_checksums import VERIFIED_FILE

    src, before = pristine
    home, _root = _copy(src, tmp_path)
    kb = KnowledgeBase.open("dmg", _settings(home))
    _results(kb)  # the copy's files are hashed once (new inodes) and the markers rewritten
    target = index_file(kb.generations.gen_dir(kb.generation), "dense/index.faiss")
    kb.close()
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one stored vector value: the file still loads
    target.write_bytes(bytes(data))
    marker = json.loads((target.parent / VERIFIED_FILE).read_text(encoding="utf-8"))
    st = target.stat()
    marker["files"][target.name].update(size=st.st_size, ino=st.st_ino, dev=st.st_dev, mtime_ns=st.st_mtime_ns,
                                        ctime_ns=st.st_ctime_ns)
    (target.parent / VERIFIED_FILE).write_text(json.dumps(marker), encoding="utf-8")
    kb = KnowledgeBase.open("dmg", _settings(home))
    report = check(kb)
    assert not report.clean and any(target.name in (d.error or "") for d in report.differences), report.lines()
    assert repair(kb).actions["dense"].startswith("rebuilt from 6 stored chunks")
    assert check(kb).clean and _results(kb) == before
    kb.close()
