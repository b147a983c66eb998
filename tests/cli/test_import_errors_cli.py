"""`ctxrag import` on bad options and files (real CLI processes): a one-line error naming the value, never a
traceback. Before: `--batch-size 0`, `--format parquet` on a JSONL file and a garbage `.parquet` gave tracebacks."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from test_kb_concurrency import _cli, _env
from ctxrag.testing.llm_server import HANG_GUARD_S

pytest.importorskip("pyarrow", reason="Parquet import needs pyarrow")


def test_import_option_and_format_errors_are_one_line(tmp_path: Path) -> None:
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
        r = subprocess.run(_cli(*args), env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert r.returncode == 1 and want in r.stderr and "Traceback" not in r.stderr, (args, r.stderr[-1500:])
