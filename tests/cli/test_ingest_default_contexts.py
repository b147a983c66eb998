"""`ctxrag ingest` with no flag writes golden-chunk contexts through the real embedded model (the default strategy,
``auto``: one ``document`` call per English document, the no-LLM ``header`` for a Chinese one), keeps them in the chunk
metadata, and a second ingest of the same text asks the model nothing. The in-process path's mechanics, so the
model file is the 0.5B (that the shipped default is the 1.5B is `tests/models/test_gguf.py`'s to check)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ctxrag.cli.main import app
from ctxrag.kb.local import KnowledgeBase
from ctxrag.settings import get_settings

DOC = """# Falcon-7 pump

## Flow
The Falcon-7 pump moves 40 litres per minute at 2 bar and draws 65 watts.

## Noise
It was designed in Oslo for greenhouses, where it runs below 30 dB at night.
"""

ZH_DOC = """# 玉山

## 地理
玉山位於臺灣中部，主峰海拔3952公尺，是東北亞第一高峰。
"""


@pytest.mark.llm
@pytest.mark.default_settings
def test_default_ingest_contextualizes_through_the_local_model(tmp_path: Path, small_model_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXRAG_LLM__MODEL_PATH", str(small_model_path))
    get_settings.cache_clear()
    (tmp_path / "falcon.md").write_text(DOC, encoding="utf-8")
    (tmp_path / "yushan.md").write_text(ZH_DOC, encoding="utf-8")
    r = CliRunner().invoke(app, ["ingest", str(tmp_path / "falcon.md"), str(tmp_path / "yushan.md"),
                                 "--kb", "ctx", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{"):])
    # one call for the English document (not one per chunk), none for the Chinese one
    assert report["context_report"]["llm_calls"] == 1, report
    assert report["context_report"]["documents"] == 2, report
    kb = KnowledgeBase.open("ctx")
    hits = kb.as_retriever(mode="bm25", k=5).invoke("Falcon-7 pump")
    docs = [d for d in hits if d.metadata["source"].endswith("falcon.md")]
    zh = [d for d in hits if d.metadata["source"].endswith("yushan.md")]
    contexts = {d.metadata.get("context") for d in docs}
    assert docs and None not in contexts and len(contexts) == 1, contexts  # one document context for every chunk
    context = contexts.pop()
    assert "Falcon" in context and len(context) > 40, context  # an LLM summary, not the bare title header
    assert zh and {d.metadata.get("context") for d in zh} == {"玉山 > 玉山"}, zh  # title > heading path, no LLM
    kb.close()
    again = CliRunner().invoke(app, ["ingest", str(tmp_path / "falcon.md"), "--kb", "ctx", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.output[again.output.index("{"):])["files"][0]["status"] == "skipped", report
