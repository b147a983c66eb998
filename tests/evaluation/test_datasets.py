from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ctxrag.errors import ConfigError, LoadError
from ctxrag.evaluation.datasets import (
    EvalDataset,
    load_anthropic,
    load_beir,
    load_contexts,
    load_dataset,
    load_musique,
    load_squad,
    read_jsonl,
)


def test_anthropic_tiny(fixtures: Path) -> None:
    ds = load_anthropic(fixtures / "anthropic_tiny")
    assert len(ds.corpus) == 6 and len(ds.queries) == 3
    assert ds.queries[1].gold_ids == ["doc_1_chunk_1", "doc_1_chunk_2"]
    assert ds.queries[0].answer.startswith("parse_config")
    # the two identical licence headers share a match key (cookbook compares stripped content)
    assert ds.equivalence["doc_1_chunk_0"] == ds.equivalence["doc_2_chunk_0"]
    assert ds.equivalence["doc_1_chunk_1"] != ds.equivalence["doc_1_chunk_2"]
    assert load_anthropic(fixtures / "anthropic_tiny", match="id").equivalence is None
    assert ds.contexts is None


def test_anthropic_contexts_by_uuid_and_index(fixtures: Path) -> None:
    ds = load_anthropic(fixtures / "anthropic_tiny", contexts=True)
    assert ds.contexts["doc_2_chunk_1"] == "From the Python HTTP client: the client class."
    assert len(ds.contexts) == 6


def test_anthropic_real(anthropic_data: Path) -> None:
    ds = load_dataset("anthropic", [anthropic_data], contexts=True)
    assert len(ds.corpus) == 737 and len(ds.queries) == 248
    assert sum(len(q.gold_ids) for q in ds.queries) == 306
    assert sum(1 for q in ds.queries if len(q.gold_ids) > 1) == 28
    assert len(ds.contexts) == 737 and not ds.missing_gold


def test_missing_gold_is_reported_not_scored(fixtures: Path, tmp_path: Path) -> None:
    folder = tmp_path / "a"
    shutil.copytree(fixtures / "anthropic_tiny", folder)
    lines = (folder / "evaluation_set.jsonl").read_text().splitlines()
    q = json.loads(lines[1])
    q["golden_chunk_uuids"].append(["uuidZ", 9])
    lines[1] = json.dumps(q)
    lines.append(json.dumps({"query": "orphan", "golden_chunk_uuids": [["uuidZ", 1]]}))
    (folder / "evaluation_set.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning, match="2 gold ids are not in the corpus"):
        ds = load_anthropic(folder)
    assert ds.missing_gold == [("q2", "uuidZ_9"), ("q4", "uuidZ_1")]
    assert ds.dropped_queries == ["q4"]
    assert ds.queries[1].gold_ids == ["doc_1_chunk_1", "doc_1_chunk_2"]  # the missing one is not a silent miss
    assert len(ds.queries) == 3


def test_malformed_jsonl_names_file_and_line(fixtures: Path, tmp_path: Path) -> None:
    folder = tmp_path / "a"
    shutil.copytree(fixtures / "anthropic_tiny", folder)
    path = folder / "evaluation_set.jsonl"
    lines = path.read_text().splitlines()
    lines.insert(2, '{"query": "broken", ')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LoadError, match=r"evaluation_set\.jsonl: line 3: invalid JSON") as err:
        load_anthropic(folder)
    assert err.value.path == str(path)
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(LoadError, match="line 2: expected a JSON object"):
        list(read_jsonl(bad))


def test_empty_dataset_is_an_error(tmp_path: Path, fixtures: Path) -> None:
    folder = tmp_path / "a"
    shutil.copytree(fixtures / "anthropic_tiny", folder)
    (folder / "evaluation_set.jsonl").write_text("\n")
    with pytest.raises(LoadError, match="empty dataset"):
        load_anthropic(folder)
    empty = tmp_path / "empty.json"
    empty.write_text('{"data": []}')
    with pytest.raises(LoadError, match="empty dataset"):
        load_squad([empty])
    with pytest.raises(LoadError, match="empty dataset"):
        EvalDataset(name="x", corpus={}, queries=[])


def test_squad_chinese_pooled(fixtures: Path, tmp_path: Path) -> None:
    ds = load_squad([fixtures / "squad_zh.json"])
    assert len(ds.corpus) == 3 and len(ds.queries) == 5
    q = next(q for q in ds.queries if q.id == "zh-4")
    assert q.text == "大熊猫的主要食物是什么？" and q.answer == "竹子"
    assert "竹子" in ds.corpus[q.gold_ids[0]].text
    # two files pool: paragraphs are kept apart and clashing question ids made unique
    pooled = load_dataset("squad", [fixtures / "squad_zh.json", fixtures / "squad_zh.json"])
    assert len(pooled.corpus) == 6 and len(pooled.queries) == 10
    assert len({q.id for q in pooled.queries}) == 10
    not_squad = tmp_path / "n.json"
    not_squad.write_text('{"rows": []}')
    with pytest.raises(LoadError, match="not SQuAD format"):
        load_squad([not_squad])
    broken = tmp_path / "b.json"
    broken.write_text('{"data": [\n  {"title": "x",,}\n]}')
    with pytest.raises(LoadError, match=r"b\.json: line 2: invalid JSON"):
        load_squad([broken])


def test_beir(fixtures: Path, tmp_path: Path) -> None:
    ds = load_beir(fixtures / "beir_tiny")
    assert [q.id for q in ds.queries] == ["q1", "q2", "q3"]  # q4 has no judgements; q2's zero grade is not gold
    assert ds.queries[1].gold_ids == ["d3"]
    assert ds.queries[0].relevance == {"d1": 2.0}
    assert ds.corpus["d1"].text.startswith("FAISS\n")
    with pytest.raises(LoadError, match="no qrels file for split 'dev'"):
        load_beir(fixtures / "beir_tiny", split="dev")
    folder = tmp_path / "b"
    shutil.copytree(fixtures / "beir_tiny", folder)
    with open(folder / "qrels" / "test.tsv", "a") as fh:
        fh.write("q1\tnope\t1\n")
    with pytest.warns(UserWarning, match="1 gold ids are not in the corpus"):
        assert load_beir(folder).missing_gold == [("q1", "nope")]
    (folder / "corpus.jsonl").write_text('{"_id": "d1", "text": "ok"}\nnot json\n')
    with pytest.raises(LoadError, match=r"corpus\.jsonl: line 2"):
        load_beir(folder)


def test_musique(musique_data: Path) -> None:
    ds = load_musique(musique_data)
    assert len(ds.corpus) == 1890 and len(ds.queries) == 100
    assert all(2 <= len(q.gold_ids) <= 4 for q in ds.queries)
    assert ds.extra["openie_file"].endswith(".json")
    q = ds.queries[0]
    assert q.answer == "G. Stanley Hall"


def test_contexts_file_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"chunk_id": "a", "context": "x"}\n{"chunk_id": "b"}\n')
    with pytest.raises(LoadError, match="line 2: missing string field 'context'"):
        load_contexts(path)
    path.write_text('{"chunk_id": "a", "context": "x"}\n')
    assert load_contexts(path) == {"a": "x"}


def test_load_dataset_errors(tmp_path: Path, fixtures: Path) -> None:
    with pytest.raises(ConfigError, match="unknown dataset format 'csv'"):
        load_dataset("csv", [tmp_path])
    with pytest.raises(LoadError, match="no such file"):
        load_dataset("beir", [tmp_path / "missing"])
    with pytest.raises(ConfigError, match="takes one folder"):
        load_dataset("beir", [fixtures / "beir_tiny", fixtures / "beir_tiny"])


def test_sample_is_seeded_and_keeps_the_corpus(fixtures: Path) -> None:
    ds = load_squad([fixtures / "squad_zh.json"])
    a, b = ds.sample(2, seed=1), ds.sample(2, seed=1)
    assert [q.id for q in a.queries] == [q.id for q in b.queries] and len(a.queries) == 2
    assert a.corpus is ds.corpus
    assert ds.sample(None) is ds
    with pytest.raises(ConfigError, match="sample=0"):
        ds.sample(0)
