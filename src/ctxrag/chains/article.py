"""Turn chosen notes into a Markdown article: outline -> one section per outline entry (from the notes it draws on,
citing them) -> assembled article with a references list. Streams.

Citations are numbered globally by the notes chosen ([1] is the first note). Each section prompt shows only that
section's notes, numbered locally from 1 (a small model copes better), and the section's local numbers are mapped back
to the global ones; a number that matches no note given to the section is removed from the text and reported in
``invalid_citations``, so every citation left in the article points to a real note.

`stream` yields ``{"outline": [...]}``, then per section ``{"section": title}`` and ``{"text": delta}`` chunks (the
model's raw text, before citation mapping), then ``{"article": markdown, "citations": {n: note_id},
"invalid_citations": [...], "notes": [note ids]}``. `write` returns that last dict.

Example::

    from ctxrag.chains.article import ArticleWriter
    from ctxrag.kb.notes import NoteBook
    book = NoteBook(kb)
    writer = ArticleWriter(llm)
    out = writer.write("混合检索笔记", book.select(tag="retrieval"))
    print(out["article"])
"""
from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ctxrag.chains.citations import cited_numbers
from ctxrag.models.parsing import extract_json
from ctxrag.prompts.notes import REFERENCES, outline_messages, section_messages
from ctxrag.text import detect_language

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from langchain_core.language_models import BaseChatModel

    from ctxrag.kb.notes import Note

log = logging.getLogger(__name__)

_CITE_GROUP = re.compile(r"\[(\d{1,3}(?:\s*[,，、]\s*\d{1,3})*)\]")


def remap_citations(text: str, mapping: dict[int, int]) -> tuple[str, list[int]]:
    """Rewrite ``[n]`` / ``[n, m]`` through `mapping` (local -> global); unknown numbers are dropped.
    Returns the new text and the dropped numbers."""
    dropped: list[int] = []

    def sub(m: re.Match[str]) -> str:
        kept = []
        for part in re.split(r"[,，、]", m.group(1)):
            n = int(part.strip())
            if n in mapping:
                if mapping[n] not in kept:
                    kept.append(mapping[n])
            elif n not in dropped:
                dropped.append(n)
        return "".join(f"[{k}]" for k in kept)

    return _CITE_GROUP.sub(sub, text), dropped


class ArticleWriter:
    """Notes -> outline -> sections -> Markdown (see the module docstring)."""

    def __init__(self, llm: BaseChatModel, *, max_sections: int = 4, section_words: int = 150,
                 outline_tokens: int = 160, section_tokens: int = 260, max_note_chars: int = 800) -> None:
        if max_sections < 1:
            raise ValueError(f"max_sections must be at least 1, got {max_sections}")
        self.llm = llm
        self.max_sections = max_sections
        self.section_words = section_words
        self.outline_tokens = outline_tokens
        self.section_tokens = section_tokens
        self.max_note_chars = max_note_chars

    def _numbered(self, notes: Sequence[Note], numbers: Sequence[int]) -> str:
        return "\n\n".join(f"[{n}] {note.title}\n{note.text[: self.max_note_chars]}" for n, note in zip(numbers, notes))

    def outline(self, topic: str, notes: Sequence[Note]) -> list[dict[str, Any]]:
        """``[{"title", "notes": [global numbers]}]``; falls back to one section per few notes on a bad reply."""
        lang = detect_language(topic + " ".join(n.title for n in notes))
        listing = "\n".join(f"[{i}] {n.title}: {n.text[:120]}" for i, n in enumerate(notes, 1))
        sections: list[dict[str, Any]] = []
        try:
            reply = self.llm.bind(max_tokens=self.outline_tokens).invoke(
                outline_messages(topic, listing, self.max_sections, lang))
            data = extract_json(str(getattr(reply, "content", reply)))
            if isinstance(data, dict):
                data = data.get("sections") or [data]
            for item in data if isinstance(data, list) else []:
                if not isinstance(item, dict) or not str(item.get("title") or "").strip():
                    continue
                nums = [int(x) for x in item.get("notes") or [] if str(x).strip().isdigit()]
                nums = [n for n in dict.fromkeys(nums) if 1 <= n <= len(notes)]
                if nums:
                    sections.append({"title": str(item["title"]).strip()[:80], "notes": nums})
        except Exception as e:  # noqa: BLE001 - a weak model's outline is optional
            log.warning("article outline from the model failed (%s); using a default outline", e)
        sections = sections[: self.max_sections]
        used = {n for s in sections for n in s["notes"]}
        missing = [i for i in range(1, len(notes) + 1) if i not in used]
        if not sections:
            size = max(1, -(-len(notes) // self.max_sections))
            return [{"title": notes[g[0] - 1].title, "notes": g}
                    for g in (list(range(i, min(i + size, len(notes) + 1))) for i in range(1, len(notes) + 1, size))]
        if missing:  # every chosen note appears somewhere
            sections[-1]["notes"] = sections[-1]["notes"] + missing
        return sections

    def stream(self, topic: str, notes: Sequence[Note]) -> Iterator[dict[str, Any]]:
        if not notes:
            raise ValueError("an article needs at least one note")
        if not topic.strip():
            raise ValueError("an article needs a topic / title")
        lang = detect_language(topic + " ".join(n.text[:200] for n in notes))
        plan = self.outline(topic, notes)
        yield {"outline": plan}
        body: list[str] = [f"# {topic.strip()}", ""]
        invalid: list[dict[str, Any]] = []
        for sec in plan:
            yield {"section": sec["title"]}
            chosen = [notes[n - 1] for n in sec["notes"]]
            local = list(range(1, len(chosen) + 1))
            msgs = section_messages(topic, sec["title"], self._numbered(chosen, local), self.section_words, lang)
            raw = ""
            for chunk in self.llm.bind(max_tokens=self.section_tokens).stream(msgs):
                delta = getattr(chunk, "content", chunk)
                if isinstance(delta, str) and delta:
                    raw += delta
                    yield {"text": delta}
            text, dropped = remap_citations(raw.strip(), dict(zip(local, sec["notes"])))
            if dropped:
                invalid.append({"section": sec["title"], "numbers": dropped})
            if not cited_numbers(text):  # an uncited section still credits the notes it was written from
                text = f"{text} {''.join(f'[{n}]' for n in sec['notes'])}".strip()
            body += [f"## {sec['title']}", "", text, ""]
        cited = sorted(set(cited_numbers("\n".join(body))))
        body += [f"## {REFERENCES[lang]}", ""]
        body += [f"[{n}] {notes[n - 1].title} ({notes[n - 1].source})" for n in cited]
        yield {"article": "\n".join(body).strip() + "\n", "citations": {n: notes[n - 1].id for n in cited},
               "invalid_citations": invalid, "notes": [n.id for n in notes]}

    def write(self, topic: str, notes: Sequence[Note]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for chunk in self.stream(topic, notes):
            if "article" in chunk or "outline" in chunk:
                out.update(chunk)
        return out
