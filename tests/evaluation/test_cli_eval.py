from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ctxrag.cli.eval import eval_app

runner = CliRunner()


def test_retrieval_bm25_json_plot_and_references(fixtures: Path, tmp_path: Path) -> None:
    out, png, md = tmp_path / "r.json", tmp_path / "r.png", tmp_path / "r.md"
    res = runner.invoke(eval_app, ["retrieval", "--format", "anthropic", str(fixtures / "anthropic_tiny"),
                                   "--config", "bm25", "--config", "contextual-bm25", "-k", "1,5",
                                   "--json", str(out), "--plot", str(png), "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    assert "contextual-bm25" in res.stdout and "published: Cookbook, basic dense (voyage-2)" in res.stdout
    assert "stock LangChain floor (measured by the data provider): dense" in res.stdout
    assert "80.92" in res.stdout  # the published Pass@5 beside ours
    doc = json.loads(out.read_text())
    rec = doc["results"][0]
    assert rec["config"]["name"] == "bm25" and rec["dataset"] == "anthropic" and rec["queries"] == 3
    assert {"pass@5", "recall@5", "mrr@5", "ndcg@1", "hit@1"} <= set(rec["metrics"])
    assert all(0 <= v <= 1 for v in rec["metrics"].values())
    assert {"index_seconds", "query_ms_p50", "query_ms_p95"} <= set(rec)
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert md.read_text().startswith("| configuration")


def test_retrieval_squad_with_contexts_file(fixtures: Path, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx.jsonl"
    ctx.write_text("".join(json.dumps({"chunk_id": f"0:{a}:{p}", "context": "中国 地理 动物"}) + "\n"
                           for a, p in [(0, 0), (0, 1), (1, 0)]), encoding="utf-8")
    out = tmp_path / "o.json"
    res = runner.invoke(eval_app, ["retrieval", "-f", "squad", str(fixtures / "squad_zh.json"), "-c", "bm25",
                                   "--contexts", str(ctx), "-k", "1", "--json", str(out), "--sample", "3"])
    assert res.exit_code == 0, res.output
    rec = json.loads(out.read_text())["results"][0]
    assert rec["config"]["name"] == "contextual-bm25" and rec["queries"] == 3
    assert "published" not in res.stdout


def test_bad_input_exits_with_a_message(fixtures: Path, tmp_path: Path) -> None:
    res = runner.invoke(eval_app, ["retrieval", "-f", "beir", str(fixtures / "beir_tiny"), "-c", "nosuch"])
    assert res.exit_code == 1 and "unknown config 'nosuch'" in res.output
    bad = tmp_path / "bad"
    (bad / "qrels").mkdir(parents=True)
    (bad / "corpus.jsonl").write_text('{"_id": "a", "text": "x"}\n{oops\n')
    (bad / "queries.jsonl").write_text('{"_id": "q", "text": "x"}\n')
    (bad / "qrels" / "test.tsv").write_text("q\ta\t1\n")
    res = runner.invoke(eval_app, ["retrieval", "-f", "beir", str(bad), "-c", "bm25"])
    assert res.exit_code == 1 and "corpus.jsonl: line 2: invalid JSON" in res.output
    res = runner.invoke(eval_app, ["retrieval", "-f", "beir", str(fixtures / "beir_tiny"), "-c", "bm25", "-k", "x"])
    assert res.exit_code == 1 and "comma-separated integers" in res.output
    # a config that fails (no contexts for a SQuAD set) is reported and makes the exit code 1, others still run
    res = runner.invoke(eval_app, ["retrieval", "-f", "squad", str(fixtures / "squad_zh.json"), "-c", "bm25",
                                   "-c", "contextual-dense", "-k", "1"])
    assert res.exit_code == 1 and "config contextual-dense" in res.output and "| bm25" in res.stdout


def test_graph_config_on_a_tiny_musique_folder(tmp_path: Path) -> None:
    folder = tmp_path / "mq"
    folder.mkdir()
    corpus = [{"title": "Leonhard Euler", "text": "Euler studied under Johann Bernoulli in Basel."},
              {"title": "Johann Bernoulli", "text": "Johann Bernoulli was the father of Daniel Bernoulli."},
              {"title": "Basel", "text": "Basel is a city on the Rhine in Switzerland."}]
    (folder / "musique_x_corpus.json").write_text(json.dumps(corpus))
    paragraphs = [{"idx": i, "title": c["title"], "paragraph_text": c["text"], "is_supporting": i < 2}
                  for i, c in enumerate(corpus)]
    (folder / "musique_x.json").write_text(json.dumps([{"id": "q1", "question": "Who was the son of Euler's teacher?",
                                                         "answer": "Daniel Bernoulli", "paragraphs": paragraphs}]))
    triples = [[["Leonhard Euler", "student of", "Johann Bernoulli"]], [["Johann Bernoulli", "father of", "Daniel Bernoulli"]],
               [["Basel", "located on", "Rhine"]]]
    (folder / "openie_x.json").write_text(json.dumps({"docs": [
        {"passage": f"{c['title']}\n{c['text']}", "extracted_triples": t} for c, t in zip(corpus, triples)]}))
    out = tmp_path / "g.json"
    res = runner.invoke(eval_app, ["retrieval", "-f", "musique", str(folder), "-c", "graph", "-c", "dense",
                                   "-k", "2", "--json", str(out)])
    assert res.exit_code == 0, res.output
    recs = {r["config"]["name"]: r for r in json.loads(out.read_text())["results"]}
    assert recs["graph"]["metrics"]["pass@2"] == 1.0
