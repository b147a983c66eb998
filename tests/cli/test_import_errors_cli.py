"""`ctxrag import` on bad options and files (real CLI processes; in the fast lane the same commands in-process): a
one-line error naming the value, never a traceback. Before: `--batch-size 0`, `--format parquet` on a JSONL file and a
garbage `.parquet` gave tracebacks."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from kb_processes import run_cli
from kb.test_kb_concurrency import _env

pytest.importorskip("pyarrow", reason="Parquet import needs pyarrow")


@pytest.mark.parametrize("process", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["in-process", "process"])
def test_import_option_and_format_errors_are_one_line(tmp_path: Path, process: bool) -> None:
    env = _env(tmp_path / "home", "fake")
    jsonl = tmp_path / "chunks.jsonl"
    jsonl.write_text(json.dumps({"text": "a chunk", "vector": [1.0, 0.0, 0.0], "source": "s1"}) + "\n",
                     encoding="utf-8")
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"PAR1 this is not parquet at all" * 10)
    cases = [(("import", str(jsonl), "--kb", "imp", "--batch-size", "0"), "batch_size must be positive, got 0"),
             (("import", str(jsonl), "--kb", "imp", "--format", "parquet"), "not a readable Parquet file"),
             (("import", str(garbage), "--kb", "imp"), "not a readable Parquet file")]
    for args, want in cases:
        code, _, err = run_cli(list(args), env, process=process)
        assert code == 1 and want in err and "Traceback" not in err, (args, err[-1500:])
