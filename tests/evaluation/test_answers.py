"""`run_answer_eval` / `run_key_fact_eval` / `ctxrag eval answers`: composition with a scripted chat model (fast), and
one smoke test through the real default local model."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from typer.testing import CliRunner

from ctxrag.cli.eval import eval_app
from ctxrag.errors import LoadError
from ctxrag.evaluation.answers import (
    EVIDENCE_CHECKS,
    answer_metrics,
    evidence_arms,
    focus_arms,
    format_answer_table,
    load_key_fact_questions,
    references_of,
    run_answer_eval,
)
from ctxrag.evaluation.datasets import EvalQuery, load_squad
from ctxrag.evaluation.experiments import builtin
from ctxrag.evaluation.runner import EvalRunner

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _fake(*replies: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))


def test_references_pool_squad_answers_and_musique_aliases() -> None:
    q = EvalQuery("1", "q", ["p"], answer="Paris", metadata={"answers": ["Paris", "City of Paris"]})
    assert references_of(q) == ["Paris", "City of Paris"]
    m = EvalQuery("2", "q", ["p"], answer="1962", metadata={"answer_aliases": ["nineteen sixty-two", ""]})
    assert references_of(m) == ["1962", "nineteen sixty-two"]


def test_short_answer_eval_scores_em_f1_and_cited_chunks(fixtures: Path) -> None:
    ds = load_squad([fixtures / "squad_zh.json"])
    ds = ds.sample(2, seed=0)  # zh-... two fixed questions
    golds = [q.answer for q in ds.queries]
    # first: the right phrase citing a retrieved chunk; second: a wrong phrase, no citation
    llm = _fake(f"{golds[0]} [1]", "不知道")
    results = run_answer_eval(EvalRunner(ds, [2], progress=False), [builtin("bm25")], llm, k=2, judge=False,
                              answer_style="short")
    r = results[0]
    assert r.error is None and r.queries == 2
    assert r.metrics["em"] == pytest.approx(0.5) and r.metrics["f1"] == pytest.approx(0.5)
    assert r.metrics["cited_contains"] == pytest.approx(0.5)  # bm25 top-1 is the gold paragraph for the first
    assert "answer_score" not in r.metrics and r.metrics["s_per_answer_p50"] >= 0
    per = r.to_json(per_query=True)["per_query"]
    assert per[0]["em"] == 1.0 and per[0]["cited_ids"] and per[1]["cited_ids"] == [] and "score" not in per[0]
    assert per[0]["model_answer"] == f"{golds[0]} [1]" and per[1]["model_f1"] == 0.0  # the model's own phrase
    assert r.metrics["model_f1"] == pytest.approx(0.5)
    table = format_answer_table(results)
    assert "| bm25" in table and "50.0" in table and "—" in table


def _with_off_corpus_question(fixtures: Path) -> tuple[list[str], object]:
    """The fixture's first question and one about what the corpus never mentions (its key terms are in no chunk)."""
    ds = load_squad([fixtures / "squad_zh.json"])
    first = next(q for q in ds.queries if q.id == "zh-1")
    off = EvalQuery("off-1", "故宫的总设计师是谁？", list(first.gold_ids), answer="蒯祥")
    return [first.text, off.text], replace(ds, queries=[first, off])


def test_answer_arms_check_evidence_as_the_product_does(fixtures: Path) -> None:
    # the product's check (key terms over the corpus's BM25 with jieba) abstains on the off-corpus question before any
    # model call; the plain check cannot read the scripted model's quote, so the gate's verdict stands and it answers
    _, ds = _with_off_corpus_question(fixtures)
    replies = ("山海关 [1]", "蒯祥 [1]")
    product = run_answer_eval(EvalRunner(ds, [1], progress=False), [builtin("bm25")], _fake(*replies), k=1,
                              judge=False)[0]
    assert product.error is None and product.evidence == "default" and product.config.name == "bm25"
    assert product.records[0].answer == "山海关 [1]"
    assert product.records[1].answer.startswith("知识库中没有") and product.records[1].f1 == 0.0
    assert [r.supported for r in product.records] == [None, False]  # None: a scripted reply is no quote to judge
    plain = run_answer_eval(EvalRunner(ds, [1], progress=False), [builtin("bm25")], _fake(*replies), k=1,
                            judge=False, evidence="plain")[0]
    assert [r.answer for r in plain.records] == ["山海关 [1]", "蒯祥 [1]"] and plain.evidence == "plain"
    off = run_answer_eval(EvalRunner(ds, [1], progress=False), [builtin("bm25")], _fake(*replies), k=1,
                          judge=False, evidence="off")[0]
    assert [r.answer for r in off.records] == ["山海关 [1]", "蒯祥 [1]"]


def test_answer_arms_compare_evidence_checks_in_one_run(fixtures: Path) -> None:
    _, ds = _with_off_corpus_question(fixtures)
    # plain answers both; default answers the first and abstains on the second without a model call
    llm = _fake("山海关 [1]", "蒯祥 [1]", "山海关 [1]")
    results = run_answer_eval(EvalRunner(ds, [1], progress=False), [builtin("bm25")], llm, k=1, judge=False,
                              evidence=["plain", "default", "plain"])
    assert [r.config.name for r in results] == ["bm25 evidence=plain", "bm25 evidence=default"]
    assert [r.evidence for r in results] == ["plain", "default"] and all(r.error is None for r in results)
    assert results[0].metrics["em"] == pytest.approx(1.0) and results[1].metrics["em"] == pytest.approx(0.5)
    assert results[1].to_json()["evidence"] == "default"
    assert "bm25 evidence=default" in format_answer_table(results)
    with pytest.raises(ValueError, match="got 'strict'"):
        evidence_arms(["plain", "strict"])
    with pytest.raises(ValueError, match="at least one"):
        evidence_arms([])
    assert evidence_arms("off") == ["off"] and set(EVIDENCE_CHECKS) == {"default", "plain", "off"}


class _Prompts(BaseCallbackHandler):
    """The system message of every chat model call (where the chain puts the chunks)."""

    def __init__(self) -> None:
        self.systems: list[str] = []

    def on_chat_model_start(self, serialized: object, messages: list[list[object]], **kw: object) -> None:
        self.systems.append(next(str(m.content) for m in messages[0] if m.type == "system"))  # type: ignore[attr-defined]


def test_answer_arms_compare_focus_lengths_in_one_run(fixtures: Path) -> None:
    ds = load_squad([fixtures / "squad_zh.json"])
    # the answer is in the paragraph's second sentence, the first (40 characters) is over a 20-character focus
    ds = replace(ds, queries=[next(q for q in ds.queries if q.id == "zh-2")])
    prompts = _Prompts()
    llm = _fake("明朝 [1]", "明朝 [1]")
    llm.callbacks = [prompts]
    results = run_answer_eval(EvalRunner(ds, [1], progress=False), [builtin("bm25")], llm, k=1, judge=False,
                              evidence="off", focus=[0, 20, 0])
    assert [r.config.name for r in results] == ["bm25 focus=0", "bm25 focus=20"]
    assert [r.focus for r in results] == [0, 20] and all(r.error is None for r in results)
    assert results[1].to_json()["focus"] == 20 and "focus" in results[0].to_json()
    whole, focused = prompts.systems
    assert len(focused) < len(whole) and "…" in focused and "…" not in whole
    one = run_answer_eval(EvalRunner(ds, [1], progress=False), [builtin("bm25")], _fake("明朝 [1]"), k=1,
                          judge=False, evidence="off")[0]
    assert one.config.name == "bm25" and one.focus is None and "focus" not in one.to_json()  # the setting's
    assert focus_arms(None) == [None] and focus_arms(300) == [300]
    with pytest.raises(ValueError, match="got -1"):
        focus_arms([0, -1])


def test_answer_metrics_without_records_is_empty() -> None:
    assert answer_metrics([]) == {}


def test_key_fact_questions_file_is_checked(tmp_path: Path) -> None:
    good = load_key_fact_questions(REPO / "examples" / "sample_questions.json")
    assert len(good) == 6 and all(q.key_facts for q in good)
    bad = tmp_path / "q.json"
    bad.write_text(json.dumps([{"question": "Port?", "answer": "7420"}]), encoding="utf-8")
    with pytest.raises(LoadError, match=r"item 0 \('Port\?'\): needs a non-empty 'key_facts' list"):
        load_key_fact_questions(bad)
    bad.write_text(json.dumps([{"question": "Port?", "key_facts": [3]}]), encoding="utf-8")
    with pytest.raises(LoadError, match="key fact 3 must be a string"):
        load_key_fact_questions(bad)


def test_cli_short_answers_on_a_tiny_fixture(fixtures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxrag.models.chat as chat

    seen: dict[str, object] = {}

    def fake_model(**overrides: object) -> GenericFakeChatModel:
        seen.update(overrides)
        return _fake("山海关 [1]", "明朝 [1]", "延庆区 [1]")

    monkeypatch.setattr(chat, "make_chat_model", fake_model)
    out = tmp_path / "a.json"
    res = runner.invoke(eval_app, ["answers", "-f", "squad", str(fixtures / "squad_zh.json"), "-c", "bm25", "-k", "2",
                                   "--sample", "5", "--limit", "3", "--answer-style", "short", "--max-tokens", "32",
                                   "--no-stock", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert seen == {"max_tokens": 32}
    doc = json.loads(out.read_text())
    rec = doc["results"][0]
    assert rec["queries"] == 3 and doc["limit"] == 3 and doc["answer_style"] == "short"
    assert doc["reading_script"] == "auto"
    assert {"em", "f1", "cited_contains", "s_per_answer_p50"} <= set(rec["metrics"])
    assert "| bm25" in res.stdout
    res = runner.invoke(eval_app, ["answers", "-f", "squad", str(fixtures / "squad_zh.json"), "--answer-style", "long"])
    assert res.exit_code == 1 and "--answer-style 'long'" in res.output
    res = runner.invoke(eval_app, ["answers", "-f", "squad", str(fixtures / "squad_zh.json"), "--answer-style", "short",
                                   "--reading-script", "hant"])
    assert res.exit_code == 1 and "--reading-script 'hant'" in res.output
    res = runner.invoke(eval_app, ["answers", "-f", "squad", str(fixtures / "squad_zh.json"),
                                   "--reading-script", "simplified"])
    assert res.exit_code == 1 and "needs --answer-style short" in res.output


def test_short_answers_measure_the_stock_langchain_chain_in_the_same_run(fixtures: Path) -> None:
    from ctxrag.evaluation.stock_chain import STOCK_NAME

    ds = load_squad([fixtures / "squad_zh.json"]).sample(2, seed=0)
    golds = [q.answer for q in ds.queries]
    llm = _fake(f"{golds[0]} [1]", "不知道", golds[0], f"答案是{golds[1]}")
    results = run_answer_eval(EvalRunner(ds, [1], progress=False), [builtin("bm25")], llm, k=1, judge=False,
                              answer_style="short", stock=True)
    assert [r.config.name for r in results] == ["bm25", STOCK_NAME] and all(r.error is None for r in results)
    stock = results[1]
    assert stock.queries == 2 and stock.metrics["em"] == pytest.approx(0.5)  # its own phrase, not snapped
    assert stock.records[0].retrieved_ids  # the stock BM25Retriever's top passage
    assert STOCK_NAME in format_answer_table(results)


def test_cli_key_facts_on_the_demo_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxrag.models.chat as chat

    monkeypatch.setenv("CTXRAG_EMBEDDINGS__PROVIDER", "fake")  # composition only: the retrieval is not the subject
    questions = tmp_path / "q.json"
    items = json.loads((REPO / "examples" / "sample_questions.json").read_text(encoding="utf-8"))[3:5]
    questions.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    # answers, then per question the judge's correctness and faithfulness verdicts
    replies = ["Port 7420 [1].", '{"score": 5, "reason": "right"}', '{"score": 5, "reason": "ok"}',
               "Within 4 hours [1].", '{"score": 2, "reason": "wrong"}', '{"score": 3, "reason": "?"}']
    monkeypatch.setattr(chat, "make_chat_model", lambda **_: _fake(*replies))
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "examples" / "sample_corpus", corpus)
    out = tmp_path / "k.json"
    res = runner.invoke(eval_app, ["answers", "-f", "keyfacts", str(corpus), "--questions", str(questions),
                                   "--evidence", "plain", "--json", str(out)])
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())["results"][0]
    assert rec["evidence"] == "plain" and rec["config"]["name"] == "hybrid"
    assert rec["metrics"]["answers_right"] == 1.0 and rec["metrics"]["key_facts_all"] == 0.5
    assert rec["metrics"]["answer_score_1to5"] == pytest.approx(3.5)  # the judge beside the key facts
    assert [p["key_facts"] for p in rec["per_query"]] == [[True], [False]]
    assert "1/2" in res.stdout
    res = runner.invoke(eval_app, ["answers", "-f", "keyfacts", str(corpus)])
    assert res.exit_code == 1 and "needs --questions" in res.output
    res = runner.invoke(eval_app, ["answers", "-f", "keyfacts", str(corpus), "--questions", str(questions),
                                   "--evidence", "strict"])
    assert res.exit_code == 1 and "--evidence 'strict'" in res.output


def test_cli_key_facts_answer_with_the_products_evidence_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxrag.models.chat as chat

    monkeypatch.setenv("CTXRAG_EMBEDDINGS__PROVIDER", "fake")  # the BM25 half of hybrid finds the port's chunk
    questions = tmp_path / "q.json"
    items = json.loads((REPO / "examples" / "sample_questions.json").read_text(encoding="utf-8"))[3:4]
    items.append({"question": "Which lunar colony hosts the archive's backup vault?", "answer": "Tycho",
                  "key_facts": ["Tycho"]})  # names what the corpus never mentions
    questions.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    # plain: both answered from the script; default (the product's): the port, then an abstention with no model call
    replies = ["Port 7420 [1].", "Tycho [1].", "Port 7420 [1].", "Tycho [1]."]
    monkeypatch.setattr(chat, "make_chat_model", lambda **_: _fake(*replies))
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "examples" / "sample_corpus", corpus)
    out = tmp_path / "k.json"
    res = runner.invoke(eval_app, ["answers", "-f", "keyfacts", str(corpus), "--questions", str(questions),
                                   "--no-judge", "--evidence", "plain", "--evidence", "default", "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    plain, product = doc["results"]
    assert doc["evidence"] == ["plain", "default"]
    assert (plain["config"]["name"], product["config"]["name"]) == ("hybrid evidence=plain", "hybrid evidence=default")
    assert [p["key_facts"] for p in plain["per_query"]] == [[True], [True]]
    assert [p["key_facts"] for p in product["per_query"]] == [[True], [False]]
    assert product["per_query"][1]["answer"].startswith("The knowledge base")
    assert [p["supported"] for p in product["per_query"]] == [None, False]
    out.unlink()
    res = runner.invoke(eval_app, ["answers", "-f", "keyfacts", str(corpus), "--questions", str(questions),
                                   "--no-judge", "--json", str(out)])  # no --evidence: the product's check
    assert res.exit_code == 0, res.output
    (only,) = json.loads(out.read_text())["results"]
    assert only["evidence"] == "default" and [p["key_facts"] for p in only["per_query"]] == [[True], [False]]


def test_cli_key_facts_answer_with_each_focus_length(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ctxrag.models.chat as chat

    monkeypatch.setenv("CTXRAG_EMBEDDINGS__PROVIDER", "fake")
    questions = tmp_path / "q.json"
    items = json.loads((REPO / "examples" / "sample_questions.json").read_text(encoding="utf-8"))[3:4]
    questions.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setattr(chat, "make_chat_model", lambda **_: _fake("Port 7420 [1].", "Port 7420 [1]."))
    corpus = tmp_path / "corpus"
    shutil.copytree(REPO / "examples" / "sample_corpus", corpus)
    out = tmp_path / "k.json"
    res = runner.invoke(eval_app, ["answers", "-f", "keyfacts", str(corpus), "--questions", str(questions),
                                   "--no-judge", "--evidence", "off", "--focus", "0", "--focus", "300",
                                   "--json", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["focus"] == [0, 300]
    assert [(r["config"]["name"], r["focus"]) for r in doc["results"]] == [("hybrid focus=0", 0),
                                                                         ("hybrid focus=300", 300)]
    res = runner.invoke(eval_app, ["answers", "-f", "keyfacts", str(corpus), "--questions", str(questions),
                                   "--focus", "-5"])
    assert res.exit_code != 0 and "--focus" in res.output


# ------------------------------------------------------------------ the real default model


@pytest.mark.llm
def test_real_model_answers_short_questions_and_the_scores_follow(fixtures: Path, server_chat_model) -> None:  # noqa: ANN001
    ds = load_squad([fixtures / "squad_zh.json"])
    ds = ds.sample(3, seed=1)
    llm = server_chat_model.bind(max_tokens=48)
    results = run_answer_eval(EvalRunner(ds, [2], progress=False), [builtin("bm25")], llm, k=2, judge=False,
                              answer_style="short")
    r = results[0]
    assert r.error is None and r.queries == 3
    # the product's evidence check (key terms over the corpus's BM25) lets these answerable questions through
    assert r.evidence == "default" and [rec.supported for rec in r.records] == [True] * 3, r.records
    for rec in r.records:
        assert rec.answer.strip() and len(rec.answer) < 80  # short answers, not essays or loops
    # the paragraphs are tiny and bm25 finds them: the 1.5B model gets most of these right
    assert r.metrics["f1"] >= 0.5, [(x.question, x.answer, x.references) for x in r.records]
