"""MkDocs hook: the configuration reference is generated from the `Settings` model at build time, so it cannot drift.

docs/configuration.md holds the marker ``<!-- settings-reference -->``; this hook replaces it with one table per
settings group (environment variable, TOML key, type, default, meaning). The meaning is each field's docstring in
``src/ctxrag/settings.py``. ``render()`` is also what the test suite compares against.
"""
from __future__ import annotations

import ast
import sys
import typing
from pathlib import Path
from typing import Any

MARKER = "<!-- settings-reference -->"
SRC = Path(__file__).resolve().parents[2] / "src"


def _settings_module() -> Any:
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    import ctxrag.settings as settings

    return settings


def _attribute_docstrings(path: Path) -> dict[str, dict[str, str]]:
    """``{class name: {field: docstring}}`` from the string literal under each annotated class attribute."""
    out: dict[str, dict[str, str]] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        docs: dict[str, str] = {}
        for stmt, nxt in zip(node.body, node.body[1:]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and isinstance(nxt, ast.Expr)
                    and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
                docs[stmt.target.id] = " ".join(nxt.value.value.split())
        out[node.name] = docs
    return out


def _type(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    text = str(annotation) if typing.get_origin(annotation) else getattr(annotation, "__name__", str(annotation))
    for module in ("typing.", "pathlib.", "pydantic.types."):
        text = text.replace(module, "")
    # a union's "|" outside the code spans, escaped, so it does not split the table cell
    return " \\| ".join(f"`{part.strip()}`" for part in text.split("|"))


def _default(name: str, field: Any) -> str:
    if name == "home":
        return "`~/.ctxrag`"
    if field.default_factory is not None:
        value = field.default_factory()
    else:
        value = field.default
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f'`"{value}"`' if isinstance(value, str) else f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|") if text else "—"


def render() -> str:
    """The Markdown tables of every setting, top-level ones first, then one table per nested group."""
    settings = _settings_module()
    docs = _attribute_docstrings(Path(settings.__file__))
    top = settings.Settings
    prefix = top.model_config.get("env_prefix", "")
    delim = top.model_config.get("env_nested_delimiter", "__")
    head = ["| environment variable | TOML key | type | default | meaning |", "|---|---|---|---|---|"]
    flat, groups = list(head), []
    for name, field in top.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, settings.BaseModel):
            rows = [f"### `{name}`: {_cell((annotation.__doc__ or '').strip())}", "", *head]
            for sub, subfield in annotation.model_fields.items():
                rows.append(f"| `{prefix}{name.upper()}{delim}{sub.upper()}` | `{name}.{sub}` | "
                            f"{_type(subfield.annotation)} | {_default(sub, subfield)} | "
                            f"{_cell(docs.get(annotation.__name__, {}).get(sub, ''))} |")
            groups.append("\n".join(rows))
            continue
        flat.append(f"| `{prefix}{name.upper()}` | `{name}` | {_type(annotation)} | {_default(name, field)} | "
                    f"{_cell(docs.get(top.__name__, {}).get(name, ''))} |")
    return "\n\n".join(["### Top level", "\n".join(flat), *groups]) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:  # noqa: ARG001 (MkDocs hook)
    if MARKER in markdown:
        return markdown.replace(MARKER, render())
    return markdown
