"""Context placement in the indexed text, and import of precomputed contexts from JSONL (incl. Anthropic's file)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.documents import Document

from ctxrag.errors import ConfigError, LoadError
from ctxrag.indexing.placement import ContextPlacement, apply_context, load_precomputed_contexts, text_to_index

BENCH_CONTEXTS = Path(__file__).resolve().parents[2].parent / "shared/data/contextual-retrieval/contexts_deepseek_extracted.jsonl"


def test_prepend_is_default() -> None:
    assert apply_context("Revenue grew 3%.", "ACME 2023 report.") == "ACME 2023 report.\n\nRevenue grew 3%."


def test_append() -> None:
    assert apply_context("Revenue grew 3%.", " ACME 2023 report. ", "append") == "Revenue grew 3%.\n\nACME 2023 report."


@pytest.mark.parametrize("context", [None, "", "   "])
def test_no_context_leaves_text_unchanged(context: str | None) -> None:
    assert apply_context("chunk", context) == "chunk"


def test_placement_from_str() -> None:
    assert ContextPlacement.from_str(" Append ") is ContextPlacement.APPEND
    assert ContextPlacement.from_str(ContextPlacement.PREPEND) is ContextPlacement.PREPEND
    with pytest.raises(ConfigError, match="'middle'.*prepend, append"):
        apply_context("chunk", "ctx", "middle")


def test_text_to_index_keeps_page_content() -> None:
    doc = Document("Revenue grew 3%.", metadata={"context": "ACME 2023."})
    assert text_to_index(doc) == "ACME 2023.\n\nRevenue grew 3%."
    assert text_to_index(doc, "append") == "Revenue grew 3%.\n\nACME 2023."
    assert doc.page_content == "Revenue grew 3%."
    assert text_to_index(Document("plain")) == "plain"


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_by_chunk_id_skips_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "c.jsonl", [
        json.dumps({"chunk_id": "a:0", "context": " first "}), "", json.dumps({"chunk_id": "a:1", "context": "second"}),
    ])  # fmt: skip
    assert load_precomputed_contexts(path) == {"a:0": "first", "a:1": "second"}


def test_load_anthropic_benchmark_lines(tmp_path: Path) -> None:
    if not BENCH_CONTEXTS.is_file():
        pytest.skip(f"{BENCH_CONTEXTS} absent")
    lines = BENCH_CONTEXTS.read_text(encoding="utf-8").splitlines()[:20]
    rows = [json.loads(line) for line in lines]
    path = _write(tmp_path / "bench.jsonl", lines)
    by_pair = load_precomputed_contexts(path, key=("doc_id", "original_index"))
    assert by_pair == {f"{r['doc_id']}_{r['original_index']}": r["context"].strip() for r in rows}
    assert by_pair["doc_1_0"].startswith("The chunk introduces the `DiffExecutor` struct")
    by_chunk_id = load_precomputed_contexts(path)
    assert set(by_chunk_id) == {r["chunk_id"] for r in rows} and "doc_1_chunk_0" in by_chunk_id


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", [json.dumps({"chunk_id": "a", "context": "x"}), "", '{"chunk_id": "b", "con'])
    with pytest.raises(LoadError, match=r"bad\.jsonl: line 3: not valid JSON") as info:
        load_precomputed_contexts(path)
    assert info.value.path.endswith("bad.jsonl")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('["a", "list"]', "line 1: expected a JSON object"),
        ('{"context": "x"}', r"line 1: missing field\(s\) \['chunk_id'\]"),
        ('{"chunk_id": "a"}', r"line 1: missing field\(s\) \['context'\]"),
        ('{"chunk_id": "a", "context": 3}', "line 1: field 'context' must be a string"),
    ],
)
def test_bad_rows(tmp_path: Path, line: str, message: str) -> None:
    with pytest.raises(LoadError, match=message):
        load_precomputed_contexts(_write(tmp_path / "c.jsonl", [line]))


def test_repeated_id_names_both_lines(tmp_path: Path) -> None:
    row = json.dumps({"chunk_id": "a", "context": "x"})
    with pytest.raises(LoadError, match="line 2: id 'a' repeats line 1"):
        load_precomputed_contexts(_write(tmp_path / "c.jsonl", [row, row]))


def test_missing_file_and_empty_key(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match="nope.jsonl: no such file"):
        load_precomputed_contexts(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigError, match="key must name"):
        load_precomputed_contexts(tmp_path / "nope.jsonl", key=())
