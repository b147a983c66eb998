"""Chat history as the chains see it: a sequence of ``(role, text)`` tuples, ``{"role", "content"}`` dicts or
LangChain messages, read the same way everywhere.

Example::

    from ctxrag.history import format_history, role_text
    role_text(("human", "团队版多少钱？"))                         # ("human", "团队版多少钱？")
    format_history([("human", "hi"), ("ai", "hello")])           # "User: hi\\nAssistant: hello"
"""
from __future__ import annotations

from typing import Any, Sequence


def role_text(item: Any) -> tuple[str, str]:
    """The role and text of one history item (tuple, dict or message)."""
    if isinstance(item, (tuple, list)) and len(item) == 2:
        return str(item[0]), str(item[1])
    if isinstance(item, dict):
        return str(item.get("role", "")), str(item.get("content", ""))
    return str(getattr(item, "type", "")), str(getattr(item, "content", ""))


def is_user(role: str) -> bool:
    return role in ("human", "user")


def format_history(history: Sequence[Any], max_turns: int = 6, max_chars: int = 400) -> str:
    """``User: ...`` / ``Assistant: ...`` lines of the last `max_turns` messages."""
    lines = []
    for item in list(history)[-max_turns:]:
        role, text = role_text(item)
        who = "User" if is_user(role) else "Assistant"
        lines.append(f"{who}: {text.strip()[:max_chars]}")
    return "\n".join(lines)


def with_last_user_turn(question: str, history: Sequence[Any] | None) -> str:
    """`question` prefixed with the last non-empty user turn of `history` (a follow-up's missing subject)."""
    if not history:
        return question
    for item in reversed(list(history)):
        role, text = role_text(item)
        if is_user(role) and text.strip():
            return f"{text.strip()} {question}"
    return question
