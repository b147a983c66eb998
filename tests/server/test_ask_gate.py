"""The relevance gate on the ``/ask`` route, under a real uvicorn on 127.0.0.1: an off-topic question gets the
"nothing on this" notice in its language and ``supported: false`` in the JSON; ``answer_gate=False`` turns it off."""
from __future__ import annotations

import httpx
import pytest

pytest.importorskip("langserve", reason="the server extra is not installed (pip install 'ctxrag[server]')")
pytest.importorskip("uvicorn", reason="the server extra is not installed (pip install 'ctxrag[server]')")

from server_helpers import FactEchoChatModel, locker_question, run_uvicorn, server_settings  # noqa: E402

from ctxrag.server.app import create_app  # noqa: E402
from ctxrag.testing.llm_server import HANG_GUARD_S  # noqa: E402


def _ask(url: str, question: str) -> dict:
    r = httpx.post(f"{url}/ask/invoke", json={"input": {"question": question}}, timeout=HANG_GUARD_S)
    assert r.status_code == 200, r.text
    return r.json()["output"]


def test_ask_abstains_on_an_unrelated_question_and_answers_a_covered_one(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, codes = locker_kb
    app = create_app(server_settings(locker_home), kbs=[kb], llm=FactEchoChatModel())
    with run_uvicorn(app) as url:
        covered = _ask(url, locker_question("Quartz"))
        assert covered["supported"] is True and codes["Quartz"] in covered["answer"]
        assert covered["relevance"]["supported"] is True and covered["citations"][0]["status"] == "ok"
        for question, notice in (("Who painted the Mona Lisa?", "The knowledge base has no material"),
                                 ("珠穆朗玛峰的海拔是多少米？", "知识库中没有关于")):
            out = _ask(url, question)
            assert out["supported"] is False and out["answer"].startswith(notice) and out["sources"] == []
        chunks = httpx.post(f"{url}/ask/stream", json={"input": {"question": "Who painted the Mona Lisa?"}},
                            timeout=HANG_GUARD_S).text
        assert "The knowledge base has no material" in chunks and '"supported":false' in chunks.replace(" ", "")


def test_ask_gate_off_by_setting(locker_kb, locker_home) -> None:  # noqa: ANN001
    kb, _ = locker_kb
    # the evidence check off too: its key-term stage (no model call) would abstain on a painting the lockers never name
    settings = server_settings(locker_home).model_copy(update={"answer_gate": False, "answer_evidence": False})
    with run_uvicorn(create_app(settings, kbs=[kb], llm=FactEchoChatModel())) as url:
        out = _ask(url, "Who painted the Mona Lisa?")
        assert out["supported"] is None and out["answer"] == "I do not know."
