"""`ctxrag.history`: the three history item shapes read alike, formatting keeps the last turns, trimmed."""
from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from ctxrag.history import format_history, role_text, with_last_user_turn


def test_role_text_reads_tuples_dicts_and_messages() -> None:
    assert role_text(("human", "团队版多少钱？")) == ("human", "团队版多少钱？")
    assert role_text({"role": "user", "content": "hi"}) == ("user", "hi")
    assert role_text(AIMessage("每月 699 元。")) == ("ai", "每月 699 元。")
    assert role_text(object()) == ("", "")


def test_format_history_keeps_the_last_turns_trimmed() -> None:
    history = [("human", "one"), ("ai", "two"), HumanMessage("three"), {"role": "assistant", "content": "x" * 50}]
    assert format_history(history, max_turns=3, max_chars=5) == "Assistant: two\nUser: three\nAssistant: xxxxx"
    assert format_history([]) == ""


def test_with_last_user_turn() -> None:
    assert with_last_user_turn("那企业版呢？", None) == "那企业版呢？"
    history = [("human", "团队版多少钱？"), ("ai", "每月 699 元。"), ("user", "  ")]
    assert with_last_user_turn("那企业版呢？", history) == "团队版多少钱？ 那企业版呢？"
    assert with_last_user_turn("q", [("ai", "only the assistant spoke")]) == "q"
