"""Prompts that turn notes into an article: an outline (JSON), then one section at a time citing notes as [n].

Example::

    from ctxrag.prompts.notes import outline_messages
    outline_messages("Hybrid search", "[1] RRF: merges ranked lists...", 3, "en")
"""
from __future__ import annotations

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

OUTLINE = {
    "en": (
        "Plan an article titled \"{topic}\" from the numbered notes below. Reply with JSON only: a list of at most "
        '{max_sections} sections, each {{"title": SECTION_TITLE, "notes": [NOTE_NUMBERS]}}, using every note at least once.'
        "\n\nNotes:\n{notes}\n\nJSON:"
    ),
    "zh": (
        "根据下面的编号笔记，为题为《{topic}》的文章列出提纲。只输出 JSON：不超过 {max_sections} 个小节的列表，每项为"
        '{{"title": 小节标题, "notes": [笔记编号]}}，每条笔记至少用一次。\n\n笔记：\n{notes}\n\nJSON：'
    ),
}

SECTION_SYSTEM = {
    "en": ("You write one section of an article using ONLY the numbered notes given. Cite every claim with the note's "
           "number in square brackets, like [1]. Do not invent facts or notes. Write plain paragraphs, no heading."),
    "zh": "你只根据给出的编号笔记撰写文章的一个小节。每个论断都用方括号标注笔记编号，例如 [1]。不要编造事实或笔记。只写正文段落，不写标题。",
}

SECTION_USER = {
    "en": "Article: {topic}\nSection: {section}\n\nNotes:\n{notes}\n\nWrite the section (at most {max_words} words), citing notes as [n].",
    "zh": "文章：{topic}\n小节：{section}\n\n笔记：\n{notes}\n\n请撰写这一小节（不超过 {max_words} 字），用 [n] 引用笔记。",
}

REFERENCES = {"en": "References", "zh": "参考笔记"}


def outline_messages(topic: str, notes: str, max_sections: int, lang: str) -> list[BaseMessage]:
    return [HumanMessage(OUTLINE[_l(lang)].format(topic=topic, notes=notes, max_sections=max_sections))]


def section_messages(topic: str, section: str, notes: str, max_words: int, lang: str) -> list[BaseMessage]:
    lng = _l(lang)
    return [SystemMessage(SECTION_SYSTEM[lng]),
            HumanMessage(SECTION_USER[lng].format(topic=topic, section=section, notes=notes, max_words=max_words))]


def _l(lang: str) -> str:
    if lang not in ("zh", "en"):
        raise ValueError(f"unknown prompt language {lang!r}; use 'zh' or 'en'")
    return lang
