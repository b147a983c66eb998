"""The multi-hop requests (`ctxrag.prompts.multihop`): each language's plan and sub-answer requests hold the
question, a JSON example the model can copy, and the passages, with no format field left unfilled."""
from __future__ import annotations

import json
import re

import pytest

from ctxrag.prompts.multihop import NO_PASSAGES, plan_messages, sub_answer_messages

QUESTIONS = {"en": "Who led the country where Ceelmakoile is?", "zh": "星河知识库作者出生的城市在哪个省？"}


@pytest.mark.parametrize("lang", sorted(QUESTIONS))
def test_plan_request_holds_the_question_and_a_json_example_with_references(lang: str) -> None:
    system, human = plan_messages(QUESTIONS[lang])
    text = str(human.content)
    assert text.rstrip().endswith(("Reply with JSON.", "用 JSON 回复。")) and QUESTIONS[lang] in text
    examples = [json.loads(m) for m in re.findall(r'\{"questions": \[.*?\]\}', text)]
    assert len(examples) == 2 and all("#1" in ex["questions"][1] for ex in examples)
    assert "#2" in examples[1]["questions"][2] and "JSON" in str(system.content)


@pytest.mark.parametrize("lang", sorted(QUESTIONS))
def test_sub_answer_request_holds_the_passages_or_says_there_are_none(lang: str) -> None:
    text = str(sub_answer_messages(QUESTIONS[lang], "[3] Somalia: a country.")[1].content)
    assert "[3] Somalia: a country." in text and QUESTIONS[lang] in text and '"answer"' in text
    empty = str(sub_answer_messages(QUESTIONS[lang], "")[1].content)
    assert NO_PASSAGES[lang] in empty and "{" not in empty.replace('"answer"', "")
