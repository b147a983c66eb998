"""Every notebook in notebooks/ runs top to bottom (nbclient, the venv's ipykernel) without an error, and is stored
without outputs.

The notebooks share the test run's one model: with llama-cpp-python installed, each kernel is pointed at the session
``llama_server_url`` (``CTXRAG_LLM__PROVIDER=openai`` and ``CTXRAG_LLM__BASE_URL``), which the notebooks' first cell
honours instead of loading the GGUF itself."""
from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

from ctxrag.testing.llm_server import HANG_GUARD_S, SERVER_MODEL_ALIAS

nbformat = pytest.importorskip("nbformat", reason="the notebook tools are not installed (pip install 'ctxrag[dev]')")
nbclient = pytest.importorskip("nbclient", reason="the notebook tools are not installed (pip install 'ctxrag[dev]')")
pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install 'ctxrag[dev]')")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
EXPECTED = ["01_quickstart.ipynb", "02_contextual_retrieval.ipynb", "03_hybrid_and_rerank.ipynb",
            "04_graph_rag.ipynb", "05_router_and_notes.ipynb"]
NEEDS_BENCHMARK = {"02_contextual_retrieval.ipynb": REPO.parent / "shared" / "data" / "contextual-retrieval"}


def test_all_notebooks_present_and_stored_without_outputs() -> None:
    assert [p.name for p in NOTEBOOKS] == EXPECTED
    for path in NOTEBOOKS:
        book = nbformat.read(path, as_version=4)
        nbformat.validate(book)
        code = [c for c in book.cells if c.cell_type == "code"]
        assert code, path.name
        assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name} has stored outputs"
        assert "CTXRAG_HOME" in code[0].source, f"{path.name}: the first code cell must set a temporary CTXRAG_HOME"


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_runs_top_to_bottom(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    data = NEEDS_BENCHMARK.get(name)
    if data is not None and not data.is_dir():
        pytest.skip(f"{data} is missing (the benchmark data lives next to the repository)")
    book = nbformat.read(REPO / "notebooks" / name, as_version=4)
    # the kernel inherits the environment: its own home under tmp_path, nothing of the caller's CTXRAG_* settings
    # except the shared model cache
    keep = {"CTXRAG_MODELS_CACHE"}
    env_backup = dict(os.environ)
    for key in list(os.environ):
        if key.startswith("CTXRAG_") and key not in keep:
            del os.environ[key]
    os.environ["CTXRAG_HOME"] = str(tmp_path / "home")
    if importlib.util.find_spec("llama_cpp") is not None:
        os.environ.update({"CTXRAG_LLM__PROVIDER": "openai", "CTXRAG_LLM__MODEL": SERVER_MODEL_ALIAS,
                           "CTXRAG_LLM__BASE_URL": request.getfixturevalue("llama_server_url"),
                           "CTXRAG_LLM__TIMEOUT": str(HANG_GUARD_S)})
    try:
        # the cell timeout is a hang guard: a busy machine makes cells slow, not wrong
        client = nbclient.NotebookClient(book, timeout=int(HANG_GUARD_S), kernel_name="python3",
                                         resources={"metadata": {"path": str(REPO)}})
        t0 = time.perf_counter()
        client.execute()  # raises CellExecutionError (with the cell and its traceback) on any error
        print(f"\n{name}: {time.perf_counter() - t0:.1f} s")
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    errors = [o for c in book.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
