"""The LangChain example of docs/langchain.md runs unchanged: it is executed here as written, with only the rerank
server's URL pointed at a real Jina-protocol server on 127.0.0.1 (the README's shorter drop-in example runs in
tests/docs/test_code_blocks.py)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "compressors"))
from jina_server import JinaRerankServer  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "langchain.md"
URL_IN_DOC = "http://127.0.0.1:8080/v1"


def _snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert len(blocks) == 1, f"{DOC}: expected one python block, found {len(blocks)}"
    assert URL_IN_DOC in blocks[0]
    return blocks[0]


def test_langchain_user_code_runs_unchanged(capsys) -> None:  # noqa: ANN001
    with JinaRerankServer() as server:
        namespace: dict = {}
        exec(compile(_snippet().replace(URL_IN_DOC, server.url), str(DOC), "exec"), namespace)  # noqa: S102
        assert server.requests, "the compression retriever must call the reranker"
    ids = lambda docs: [d.id for d in docs]  # noqa: E731
    assert len(namespace["docs"]) == 2 and ids(namespace["only_faiss"]) == ["faiss"]
    assert len(namespace["diverse"]) == 2
    assert {d.metadata["topic"] for d in namespace["hybrid_docs"]} <= {"fusion", "bm25"} and namespace["hybrid_docs"]
    best = namespace["best"]
    assert best and len(best) <= 3 and "bm25" in ids(best)
    assert all(d.metadata.get("rerank_score") is not None for d in best)
    assert "bm25" in capsys.readouterr().out

