from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from ctxrag.errors import LoadError
from ctxrag.graph.triplets import (
    Triplet,
    TripletExtractor,
    coerce_triplet,
    load_openie_file,
    load_triplets_json,
    parse_triplets,
)

MULTIHOP = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "multihop"
OPENIE = MULTIHOP / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"


@pytest.mark.parametrize(
    "reply",
    [
        '{"triplets": [["Euler", "student of", "Johann Bernoulli"]]}',
        'Sure! Here you go:\n```json\n{"triplets": [["Euler", "student of", "Johann Bernoulli"],]}\n```',
        "{'triples': [['Euler', 'student of', 'Johann Bernoulli']]}",
        '[{"subject": "Euler", "predicate": "student of", "object": "Johann Bernoulli"}]',
        '{"head": "Euler", "relation": "student of", "tail": "Johann Bernoulli"}',
        '["Euler", "student of", "Johann Bernoulli"]',
        '{"三元组": [{"主语": "Euler", "谓语": "student of", "宾语": "Johann Bernoulli"}]}',
    ],
)
def test_parse_forms(reply: str) -> None:
    assert parse_triplets(reply) == [Triplet("Euler", "student of", "Johann Bernoulli")]


def test_parse_skips_malformed_and_dedupes(caplog: pytest.LogCaptureFixture) -> None:
    reply = '{"triplets": [["A", "p", "B"], ["A", "p"], ["A", "p", "B"], [1, 2, 3], ["...", "p", "B"], [null, "p", "B"]]}'
    with caplog.at_level(logging.WARNING):
        got = parse_triplets(reply)
    assert got == [Triplet("A", "p", "B"), Triplet("1", "2", "3")]
    assert "skipped 3 malformed" in caplog.text


def test_parse_without_json_raises() -> None:
    with pytest.raises(ValueError, match="no JSON"):
        parse_triplets("I cannot find any facts here.")


def test_coerce_cleans_whitespace() -> None:
    assert coerce_triplet(["  Daniel \n Bernoulli", " son of ", "Johann Bernoulli"]) == Triplet(
        "Daniel Bernoulli", "son of", "Johann Bernoulli"
    )
    assert coerce_triplet({"subject": "A"}) is None
    assert coerce_triplet([True, "p", "B"]) is None


def test_extractor_retries_then_succeeds() -> None:
    llm = GenericFakeChatModel(messages=iter([AIMessage("no idea"), AIMessage('{"triplets": [["A", "likes", "B"]]}')]))
    ex = TripletExtractor(llm, max_retries=1)
    assert ex("A likes B.") == [Triplet("A", "likes", "B")]
    assert ex.failures == 0


def test_extractor_gives_up_with_warning(caplog: pytest.LogCaptureFixture) -> None:
    llm = GenericFakeChatModel(messages=iter([AIMessage("nope"), AIMessage("still nope")]))
    ex = TripletExtractor(llm, max_retries=1)
    with caplog.at_level(logging.WARNING):
        assert ex.extract("A likes B.") == []
    assert ex.failures == 1
    assert "2 replies without JSON" in caplog.text


def test_extractor_uses_chinese_prompt_for_chinese_text() -> None:
    seen = []

    class Spy(GenericFakeChatModel):
        def _generate(self, messages, stop=None, run_manager=None, **kw):  # noqa: ANN001, ANN202
            seen.append(messages)
            return super()._generate(messages, stop, run_manager, **kw)

    ex = TripletExtractor(Spy(messages=iter([AIMessage('{"triplets": [["丹尼尔·伯努利", "父亲", "约翰·伯努利"]]}')])))
    assert ex("丹尼尔·伯努利是约翰·伯努利的儿子。") == [Triplet("丹尼尔·伯努利", "父亲", "约翰·伯努利")]
    assert "三元组" in seen[0][0].content
    assert ex.extract("   ") == []


def test_extractor_rejects_bad_options() -> None:
    llm = GenericFakeChatModel(messages=iter([]))
    with pytest.raises(ValueError, match="max_retries"):
        TripletExtractor(llm, max_retries=-1)
    with pytest.raises(ValueError, match="max_chars"):
        TripletExtractor(llm, max_chars=0)


def test_load_triplets_json(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps([[["A", "p", "B"]], [], [{"subject": "C", "predicate": "q", "object": "D"}, ["bad"]]]))
    assert load_triplets_json(path) == [[Triplet("A", "p", "B")], [], [Triplet("C", "q", "D")]]


@pytest.mark.parametrize(
    ("content", "reason"), [(None, "no such file"), ("{oops", "not valid JSON"), ('{"a": 1}', "one list of triplets")]
)
def test_load_triplets_json_errors(tmp_path: Path, content: str | None, reason: str) -> None:
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(LoadError, match=reason):
        load_triplets_json(path)


def test_load_openie_errors(tmp_path: Path) -> None:
    path = tmp_path / "o.json"
    path.write_text('{"docs": [{"title": "x"}]}')
    with pytest.raises(LoadError, match="extracted_triples"):
        load_openie_file(path)
    path.write_text("[]")
    with pytest.raises(LoadError, match="'docs'"):
        load_openie_file(path)


@pytest.mark.skipif(not OPENIE.is_file(), reason="../shared/data/multihop is absent")
def test_load_openie_file_of_the_sample() -> None:
    docs = load_openie_file(OPENIE)
    assert len(docs) == 1890
    passage, triplets = docs[0]
    assert passage.startswith("Journal of Mathematical Physics\n")
    assert Triplet("Journal of Mathematical Physics", "published by", "American Institute of Physics") in triplets
    assert 16_000 < sum(len(t) for _, t in docs) < 17_500  # 17,419 raw, minus non-3-item and duplicates


@pytest.mark.llm
def test_real_model_extracts_triplets(server_chat_model) -> None:  # noqa: ANN001
    """The local 1.5B (the run's server, schema-constrained) on an English and a Chinese passage: both must yield
    parseable triplets; quality is reported, not gated."""
    from ctxrag.testing.bernoulli import PASSAGES

    ex = TripletExtractor(server_chat_model.bind(max_tokens=200), max_retries=1)
    texts = [PASSAGES["daniel"], "丹尼尔·伯努利是瑞士物理学家，约翰·伯努利的儿子，著有《流体力学》。"]
    results = [ex(t) for t in texts]
    for text, got in zip(texts, results):
        print(text[:40], "->", got)
    assert all(results), results
    assert all(isinstance(t, Triplet) and t.subject and t.object for r in results for t in r)


def test_extractor_takes_structured_output_and_falls_back_to_text() -> None:
    from ctxrag.graph.triplets import TripletList
    from structured_fake import StructuredFake

    llm = StructuredFake.of({"triplets": [["A", "likes", "B"]]}, '{"triplets": [["C", "knows", "D"]]}')
    ex = TripletExtractor(llm, max_retries=0)
    assert ex("A likes B.") == [Triplet("A", "likes", "B")]
    assert llm.schemas[-1]["function"]["name"] == TripletList.__name__
    assert ex("C knows D.") == [Triplet("C", "knows", "D")]  # a plain-text reply: parsed as before
    assert ex.failures == 0
