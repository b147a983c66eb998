"""The example of docs/models.md runs as written with the real local model."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "models.md"


@pytest.mark.llm
def test_models_page_example_runs(local_chat_model, capsys) -> None:  # noqa: ANN001 - the session model is loaded
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    namespace: dict = {}
    exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102
    assert namespace["capital"].city == "Paris"
    assert namespace["call"]["args"] == {"a": 17, "b": 25}
    assert "42" in namespace["answer"].content
    assert "Paris" in capsys.readouterr().out
