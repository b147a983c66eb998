from __future__ import annotations

import pytest

from ctxrag.evaluation.answer_metrics import (
    contains_answer,
    exact_match,
    f1_score,
    is_chinese,
    key_fact_hits,
    strip_citations,
)

# ------------------------------------------------------------------ English: SQuAD v1.1 rules


@pytest.mark.parametrize(
    ("prediction", "references", "em", "f1"),
    [
        ("Eiffel Tower", ["Eiffel Tower"], 1.0, 1.0),
        ("the Eiffel Tower.", ["Eiffel Tower"], 1.0, 1.0),  # articles and punctuation dropped
        ("Eiffel Tower in Paris", ["Eiffel Tower"], 0.0, 2 * 0.5 * 1.0 / 1.5),  # P 2/4, R 2/2
        ("Paris", ["Eiffel Tower"], 0.0, 0.0),
        ("Tower", ["Eiffel Tower", "the tower"], 1.0, 1.0),  # best over the references
        ("Port 7420 [1]", ["7420"], 0.0, 2 * 0.5 * 1.0 / 1.5),  # the citation marker is not scored
        ("7420 [1][2]", ["7420"], 1.0, 1.0),
    ],
)
def test_english_em_and_f1(prediction: str, references: list[str], em: float, f1: float) -> None:
    assert exact_match(prediction, references) == em
    assert f1_score(prediction, references) == pytest.approx(f1)


def test_english_bag_of_tokens_counts_duplicates_once_each() -> None:
    # SQuAD: Counter intersection; "a a b" vs "a b": shared 2, P 2/3, R 2/2 ("a" is an article and dropped: use x)
    assert f1_score("x x y", ["x y"]) == pytest.approx(2 * (2 / 3) * 1.0 / (2 / 3 + 1.0))


# ------------------------------------------------------------------ Chinese: CMRC 2018 rules


@pytest.mark.parametrize(
    ("prediction", "references", "em", "f1"),
    [
        ("台北", ["台北"], 1.0, 1.0),
        ("台北。", ["台北"], 1.0, 1.0),  # CMRC punctuation removed
        ("「台北」[2]", ["台北"], 1.0, 1.0),
        ("台北市", ["台北"], 0.0, 0.8),  # LCS 2: P 2/3, R 2/2
        ("在台北市的西邊", ["台北市西邊"], 0.0, 2 * (3 / 7) * (3 / 5) / (3 / 7 + 3 / 5)),  # longest common SUBSTRING 3
        ("高雄", ["台北"], 0.0, 0.0),
        ("1962年", ["1962年", "一九六二年"], 1.0, 1.0),
        ("西元1962年", ["1962年"], 0.0, 2 * (2 / 4) * 1.0 / (2 / 4 + 1.0)),  # "1962" is one token, then 年
    ],
)
def test_chinese_em_and_f1(prediction: str, references: list[str], em: float, f1: float) -> None:
    assert exact_match(prediction, references) == em
    assert f1_score(prediction, references) == pytest.approx(f1)


def test_language_follows_the_reference() -> None:
    assert is_chinese("台北") and not is_chinese("Taipei 101")
    # a Chinese reference is scored by characters even when the prediction mixes in Latin words
    assert f1_score("Taipei 台北", ["台北"]) == pytest.approx(2 * (2 / 3) * 1.0 / (2 / 3 + 1.0))


def test_no_reference_is_an_error() -> None:
    with pytest.raises(ValueError, match="no reference answer"):
        f1_score("x", [])
    with pytest.raises(ValueError, match="no reference answer"):
        exact_match("x", ["", "  "])


def test_strip_citations() -> None:
    assert strip_citations("A [1], B [2, 3] and C [4][5].") == "A , B and C ."
    assert strip_citations("答案是台北[1]。") == "答案是台北。"


# ------------------------------------------------------------------ cited chunks and key facts


def test_contains_answer_ignores_case_space_and_punctuation() -> None:
    chunks = ["The server listens on port 7,420 by default.", "团队版包含 200 GB 存储。"]
    assert contains_answer(chunks, ["7420"])
    assert contains_answer(chunks, ["200GB"])
    assert not contains_answer(chunks, ["8080"])
    assert not contains_answer([], ["7420"])


def test_key_fact_hits_with_alternative_spellings() -> None:
    answer = "星河知识库支持 PDF、Word（.docx）、Markdown、HTML 和 JSONL [1]。"
    facts = ["PDF", ["Word", "docx"], "Markdown", "HTML", ["纯文本", "txt"], ["JSON Lines", "jsonl"]]
    assert key_fact_hits(answer, facts) == [True, True, True, True, False, True]
    assert key_fact_hits("Within 30 minutes [2].", [["30 minutes", "half an hour"]]) == [True]
    assert key_fact_hits("4 hours.", [["30 minutes", "half an hour"]]) == [False]
    with pytest.raises(ValueError, match="key fact"):
        key_fact_hits("x", [[]])
