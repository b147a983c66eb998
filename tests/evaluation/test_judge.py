from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from ctxrag.evaluation.answers import answer_metrics, format_answer_table, run_answer_eval
from ctxrag.evaluation.datasets import load_squad
from ctxrag.evaluation.experiments import builtin
from ctxrag.evaluation.judge import AnswerJudge, parse_judgement
from ctxrag.evaluation.runner import EvalRunner


@pytest.mark.parametrize(
    "reply, score, reason",
    [
        ('{"score": 4, "reason": "mostly right"}', 4, "mostly right"),
        ("```json\n{'score': '5', 'reason': 'exact',}\n```", 5, "exact"),
        ('[{"rating": 2, "explanation": "wrong city"}]', 2, "wrong city"),
        ("Score: 3\nThe answer misses the year.", 3, None),
        # a reply cut off by max_tokens (seen with the local 0.5B model)
        ('{"score": 5, "reason": "The candidate answer is correct with minor omissions. Paris is t', 5,
         "The candidate answer is correct with minor omissions. Paris is t"),
        ("评分：5，理由：完全正确", 5, None),
        ("**4**", 4, None),
        ("4/5", 4, None),
        ('{"score": 9, "reason": "out of range"}', None, "out of range"),
        ("I think the answer is about 1990 and fine.", None, None),
        ("", None, None),
    ],
)
def test_parse_judgement(reply: str, score: int | None, reason: str | None) -> None:
    j = parse_judgement(reply)
    assert j.score == score
    if reason is not None:
        assert j.reason == reason
    assert j.raw == reply


def test_normalized() -> None:
    assert parse_judgement('{"score": 5}').normalized == 1.0
    assert parse_judgement('{"score": 1}').normalized == 0.0
    assert parse_judgement("no idea").normalized is None


def _fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))


def test_judge_prompts_carry_reference_and_context() -> None:
    llm = _fake('{"score": 5, "reason": "same"}', '{"score": 2, "reason": "not in context"}')
    seen: list[str] = []
    orig = llm.invoke
    llm_invoke = lambda msgs, *a, **kw: (seen.append(msgs[-1].content), orig(msgs, *a, **kw))[1]  # noqa: E731
    object.__setattr__(llm, "invoke", llm_invoke)
    judge = AnswerJudge(llm)
    assert judge.correctness("Where?", "Paris", reference="In Paris").score == 5
    assert "In Paris" in seen[0] and "Paris" in seen[0]
    f = judge.faithfulness("Paris", ["Lyon is in France."])
    assert f.score == 2 and f.reason == "not in context" and "Lyon is in France." in seen[1]
    # empty answers are judged without calling the model
    assert judge.correctness("Where?", "  ").score == 1
    assert judge.faithfulness("", ["x"]).score is None


def test_answer_eval_composition_with_fake_llm(fixtures: Path) -> None:
    ds = load_squad([fixtures / "squad_zh.json"]).sample(2, seed=0)
    # per query: the answer, then the correctness and faithfulness verdicts (one unparsable)
    llm = _fake("竹子", '{"score": 5, "reason": "对"}', '{"score": 4, "reason": "ok"}',
                "山海关", "no score here", '{"score": 5, "reason": "ok"}')
    results = run_answer_eval(EvalRunner(ds, [2], progress=False), [builtin("bm25")], llm, k=2)
    r = results[0]
    assert r.error is None and r.queries == 2
    assert r.metrics["judge_unparsed"] == 1.0
    assert r.metrics["answer_score"] == pytest.approx(1.0)  # the unparsed verdict is left out, not guessed
    assert r.metrics["faithfulness"] == pytest.approx((0.75 + 1.0) / 2)
    rec = r.to_json(per_query=True)["per_query"]
    assert rec[0]["answer"] == "竹子" and rec[1]["score"] is None and len(rec[0]["retrieved_ids"]) <= 2
    assert "bm25" in format_answer_table(results)


def test_answer_metrics_all_unparsed() -> None:
    from ctxrag.evaluation.answers import AnswerRecord

    unparsed = parse_judgement("no idea")
    rec = AnswerRecord("1", "q", "a", None, [], unparsed, unparsed, 10.0)
    m = answer_metrics([rec])
    assert m["answer_score"] == 0.0 and m["judge_unparsed"] == 2.0


@pytest.mark.llm
def test_judge_with_the_local_model(server_chat_model) -> None:  # noqa: ANN001
    judge = AnswerJudge(server_chat_model.bind(max_tokens=96))
    good = judge.correctness("What is the capital of France?", "The capital of France is Paris.", reference="Paris")
    bad = judge.correctness("What is the capital of France?", "Berlin is the capital of France.", reference="Paris")
    assert good.score is not None and 1 <= good.score <= 5
    assert bad.score is None or bad.score <= good.score


def test_judge_takes_structured_output_and_falls_back_to_text() -> None:
    from structured_fake import StructuredFake

    judge = AnswerJudge(StructuredFake.of({"score": 4, "reason": "close"}, "Score: 2"))
    first = judge.correctness("2+2?", "4", reference="four")
    assert (first.score, first.reason) == (4, "close")
    assert judge.correctness("2+2?", "5", reference="four").score == 2  # plain text: the old parser
