"""Turn structured formats (HTML, PDF, DOCX, JSON records) into plain text with Markdown headings.

Headings become ``#`` lines so `ChunkSplitter` can split on them and track heading paths the same way for
every format. Each converter takes already-read input and returns text plus format-specific metadata; file
access and error wrapping live in `ctxrag.loading.loaders`.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from bs4 import BeautifulSoup, NavigableString, Tag

from ctxrag.errors import LoadError

_DROP_TAGS = ("script", "style", "nav", "noscript", "template", "svg", "iframe", "head")
_BLOCK_TAGS = frozenset(
    "address article aside blockquote dd details dialog div dl dt fieldset figcaption figure footer form header "
    "hr li main ol p section summary table tbody thead tfoot tr ul caption body html".split()
)
_HEADING = re.compile(r"^h([1-6])$")
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
TEXT_FIELDS = ("text", "content", "body", "page_content")
_RECORD_TITLE_FIELDS = ("title", "name", "question", "heading")


def _inline_text(node: Tag) -> str:
    return _SPACES.sub(" ", node.get_text(" ")).strip()


# Block boundaries are marked with _PARAGRAPH while walking; whitespace-only lines (source formatting between
# tags) are dropped afterwards, and only the markers become blank lines. <pre> blocks are kept verbatim.
_PARAGRAPH = "\x00"
_PRE = "\x01"


def _table_text(table: Tag) -> str:
    """A table as ``| a | b |`` rows; when the first row is a header (all ``<th>``), every later cell is written
    ``header: value``, so a row read alone (a chunk, a small model) still says what each value is.

    ``<tr><th>Plan</th><th>P1</th></tr><tr><td>Team</td><td>4 hours</td></tr>`` gives
    ``| Plan | P1 |`` then ``| Plan: Team | P1: 4 hours |``."""
    lines = []
    caption = table.find("caption")
    if caption is not None and _inline_text(caption):
        lines.append(_inline_text(caption))
    header: list[str] = []
    for i, row in enumerate(table.find_all("tr")):
        cells = row.find_all(["td", "th"], recursive=False)
        texts = [_inline_text(c) for c in cells]
        if i == 0 and cells and all(c.name == "th" for c in cells):
            header = texts
        elif header and len(header) == len(texts):
            texts = [f"{h}: {t}" if h and t else t for h, t in zip(header, texts)]
        if any(texts):
            lines.append("| " + " | ".join(texts) + " |")
    return "\n".join(lines)


def _walk_html(node: Tag, out: list[str], pres: list[str]) -> None:
    for child in node.children:
        if isinstance(child, NavigableString):
            if child.__class__ is NavigableString:  # skip comments, doctype, CDATA
                out.append(_SPACES.sub(" ", str(child).replace("\n", " ")))
            continue
        if not isinstance(child, Tag):
            continue
        name = child.name.lower()
        heading = _HEADING.match(name)
        if heading:
            text = _inline_text(child)
            if text:
                out.append(f"\n{_PARAGRAPH}\n{'#' * int(heading.group(1))} {text}\n{_PARAGRAPH}\n")
        elif name == "pre":
            pres.append(child.get_text().strip("\n"))
            out.append(f"\n{_PARAGRAPH}\n{_PRE}{len(pres) - 1}{_PRE}\n{_PARAGRAPH}\n")
        elif name == "br":
            out.append("\n")
        elif name == "table":
            out.append(f"\n{_PARAGRAPH}\n{_table_text(child)}\n{_PARAGRAPH}\n")
        elif name in ("td", "th"):
            out.append(" " + _inline_text(child) + " |")
        elif name == "tr":
            out.append("\n|")
            _walk_html(child, out, pres)
            out.append("\n")
        elif name == "li":
            out.append("\n- ")
            _walk_html(child, out, pres)
            out.append("\n")
        elif name in _BLOCK_TAGS:
            out.append(f"\n{_PARAGRAPH}\n")
            _walk_html(child, out, pres)
            out.append(f"\n{_PARAGRAPH}\n")
        else:
            _walk_html(child, out, pres)


def html_to_text(html: str) -> tuple[str, str | None]:
    """HTML -> (text with Markdown ``#`` headings, title from <title> or the first <h1>, or None)."""
    soup = BeautifulSoup(html.replace(_PARAGRAPH, "").replace(_PRE, ""), "html.parser")
    title_tag = soup.find("title")
    title = _inline_text(title_tag) if title_tag else ""
    if not title:
        h1 = soup.find("h1")
        title = _inline_text(h1) if h1 else ""
    for tag in soup.find_all(_DROP_TAGS):
        tag.decompose()
    out: list[str] = []
    pres: list[str] = []
    _walk_html(soup, out, pres)
    lines = [line.strip() for line in "".join(out).replace("\r", "").split("\n")]
    text = "\n".join(line for line in lines if line)
    text = re.sub(rf"(?:\n?{_PARAGRAPH}\n?)+", "\n\n", text).strip()
    text = re.sub(rf"{_PRE}(\d+){_PRE}", lambda m: pres[int(m.group(1))], text)
    return text, (title or None)


def pdf_to_text(path: Path) -> tuple[str, dict[str, Any]]:
    """Text of every page joined by blank lines; metadata ``page_starts`` (offset of each page) and ``page_count``."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    pypdf_logger = logging.getLogger("pypdf")
    previous_level = pypdf_logger.level
    pypdf_logger.setLevel(logging.ERROR)  # its repair warnings ("EOF marker not found") would spam ingest output
    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise LoadError(path, "encrypted PDF needs a password")
        page_texts = [(page.extract_text() or "").strip() for page in reader.pages]
    except LoadError:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError, AttributeError, IndexError) as exc:
        raise LoadError(path, f"corrupt or unreadable PDF: {type(exc).__name__}: {exc}") from None
    finally:
        pypdf_logger.setLevel(previous_level)
    parts: list[str] = []
    page_starts: list[int] = []
    offset = 0
    for text in page_texts:
        if parts:
            offset += 2  # the "\n\n" joiner
        page_starts.append(offset)
        parts.append(text)
        offset += len(text)
    text = "\n\n".join(parts)
    if not text.strip():
        raise LoadError(path, f"PDF has {len(page_texts)} page(s) but no extractable text (scanned images need OCR)")
    return text, {"page_starts": page_starts, "page_count": len(page_texts)}


def docx_to_text(path: Path) -> tuple[str, str | None]:
    """DOCX -> (text with Markdown headings, tables as ``a | b`` rows; core-properties title or None)."""
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(str(path))
    except Exception as exc:  # python-docx raises PackageNotFoundError, BadZipFile, KeyError, lxml errors...
        raise LoadError(path, f"corrupt or unreadable DOCX: {type(exc).__name__}: {exc}") from None
    blocks: list[str] = []
    for element in document.element.body.iterchildren():
        tag = element.tag.rsplit("}", 1)[-1]
        if tag == "p":
            paragraph = Paragraph(element, document)
            text = paragraph.text.strip()
            if not text:
                continue
            style = (paragraph.style.name if paragraph.style is not None else "") or ""
            level = re.match(r"Heading (\d)", style)
            if style == "Title":
                blocks.append(f"# {text}")
            elif level:
                blocks.append(f"{'#' * min(int(level.group(1)), 6)} {text}")
            elif style.startswith("List"):
                blocks.append(f"- {text}")
            else:
                blocks.append(text)
        elif tag == "tbl":
            rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in Table(element, document).rows]
            if rows:
                blocks.append("\n".join(rows))
    title = (document.core_properties.title or "").strip() or None
    return "\n\n".join(blocks), title


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, (str, int, float, bool)) for v in value):
        return ", ".join(str(v) for v in value)
    return json.dumps(value, ensure_ascii=False)


def record_to_text(record: Any) -> str:
    """One record -> text: its text field (``text``/``content``/``body``/``page_content``) under its title, or
    ``key: value`` lines when it has no text field."""
    if not isinstance(record, dict):
        return _render_value(record).strip()
    for field in TEXT_FIELDS:
        value = record.get(field)
        if isinstance(value, str) and value.strip():
            title = next((record[k] for k in _RECORD_TITLE_FIELDS if isinstance(record.get(k), str) and record[k].strip()), None)
            return f"{title.strip()}\n{value.strip()}" if title else value.strip()
    return "\n".join(f"{key}: {_render_value(value)}" for key, value in record.items() if value not in (None, "", [], {})).strip()


def records_to_text(records: list[Any], lines: list[int] | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Records -> text with one block per record separated by blank lines, and per-record spans
    ``{"index", "line", "start_index", "end_index", "data"}`` (``line`` only for JSONL)."""
    parts: list[str] = []
    spans: list[dict[str, Any]] = []
    offset = 0
    for index, record in enumerate(records):
        block = record_to_text(record)
        if not block:
            continue
        if parts:
            offset += 2
        span: dict[str, Any] = {"index": index, "start_index": offset, "end_index": offset + len(block), "data": record}
        if lines is not None:
            span["line"] = lines[index]
        spans.append(span)
        parts.append(block)
        offset += len(block)
    return "\n\n".join(parts), spans


def parse_json_records(text: str, path: Path) -> list[Any]:
    """A JSON file of records: a list, an object holding one list (``records``/``data``/``items``...), or one object."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LoadError(path, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
        return lists[0] if len(lists) == 1 else [data]
    if isinstance(data, list):
        return data
    return [data]


def parse_jsonl_records(
    text: str, path: Path, bad_lines: list[tuple[int, str]] | None = None
) -> tuple[list[Any], list[int]]:
    """JSON Lines: one JSON value per non-blank line; returns records and their 1-based line numbers.

    A malformed line raises `LoadError` naming it, unless `bad_lines` is given: then it is appended there as
    ``(line number, reason)`` and the good records are kept.
    """
    records: list[Any] = []
    line_numbers: list[int] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            reason = f"invalid JSON on line {number} (column {exc.colno}): {exc.msg}"
            if bad_lines is None:
                raise LoadError(path, reason) from None
            bad_lines.append((number, reason))
            continue
        line_numbers.append(number)
    return records, line_numbers
