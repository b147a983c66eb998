"""The loop guard with the real local models: a reply provoked into the `[2][3] [2][3] ...` loop of the issue-13 demo
runs to ``max_tokens`` without the guard and stops early, trimmed, with it (invoke and stream alike); and the demo's
storage question (the one the 0.5B model looped on) gets a plain, loop-free answer from the default model. The default
model answers through the run's ``llama_cpp.server`` (the same GGUF and sampling parameters as the in-process
defaults, without the guard, so the model itself must not loop): its reply is recorded and replayed
(`ctxrag.testing.reply_cache`) instead of decoded in-process every run."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage

from ctxrag.chains.rag import build_rag_chain
from ctxrag.kb.local import KnowledgeBase
from ctxrag.models.chat import chat_openai_compatible
from ctxrag.models.llamacpp import LOOP_FINISH, LocalLlamaChatModel
from ctxrag.models.loop_guard import find_loop
from ctxrag.settings import Settings
from ctxrag.testing.llm_server import HANG_GUARD_S, SERVER_MODEL_ALIAS

pytestmark = pytest.mark.llm
REPO = Path(__file__).resolve().parents[2]
# asks for exactly the degenerate tail the 0.5B model wrote on the demo's storage question (issue 13)
PROVOKE = [HumanMessage("Continue this pattern. Write only the pattern, nothing else:\n[2] [2][3] [2][3] [2][3] [2][3]")]


def _model(path: Path, *, guard: bool, max_tokens: int = 80) -> LocalLlamaChatModel:
    return LocalLlamaChatModel(model_path=str(path), n_ctx=4096, max_tokens=max_tokens, loop_guard=guard,
                               repeat_penalty=1.0)


def test_small_model_loops_without_the_guard_and_stops_with_it(small_model_path: Path) -> None:
    raw = _model(small_model_path, guard=False).invoke(PROVOKE)
    assert raw.response_metadata["finish_reason"] == "length"  # ran until max_tokens
    assert find_loop(str(raw.content)) is not None, raw.content

    guarded = _model(small_model_path, guard=True).invoke(PROVOKE)
    text = str(guarded.content)
    assert guarded.response_metadata["finish_reason"] == LOOP_FINISH
    assert find_loop(text) is None and text.count("[2][3]") <= 2, text
    assert guarded.usage_metadata["output_tokens"] < raw.usage_metadata["output_tokens"]  # stopped early

    streamed = "".join(str(c.content) for c in _model(small_model_path, guard=True).stream(PROVOKE))
    assert streamed == text  # the reader sees what invoke returns


def test_default_model_answers_the_demo_storage_question_without_a_loop(tmp_path: Path, llama_server_url: str) -> None:
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "examples" / "sample_corpus", corpus)
    kb = KnowledgeBase.open("demo", Settings(home=tmp_path / "h"), create=True)
    kb.ingest([corpus], progress=False)
    question = json.loads((REPO / "examples" / "sample_questions.json").read_text(encoding="utf-8"))[2]["question"]
    shipped = LocalLlamaChatModel.model_fields  # the in-process defaults: greedy, llama.cpp's repeat penalty
    llm = chat_openai_compatible(base_url=llama_server_url, model=SERVER_MODEL_ALIAS, api_key="unused",
                                 temperature=shipped["temperature"].default, max_tokens=160,
                                 extra_body={"repeat_penalty": shipped["repeat_penalty"].default},
                                 timeout=HANG_GUARD_S, max_retries=0)
    chain = build_rag_chain(kb.as_retriever(mode="hybrid", k=4), llm)
    answer = "".join(c.get("answer", "") for c in chain.stream(question))
    # no loop and a plain-length answer; whether it is right is measured by `ctxrag eval answers --format keyfacts`
    # (small models are sensitive to the source paths in the prompt, which differ in this temp copy)
    assert answer.strip() and find_loop(answer) is None and len(answer) < 400, answer
    assert answer.count("[") <= 6, answer
