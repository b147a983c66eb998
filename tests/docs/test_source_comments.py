"""Code comments and docstrings in src/ say why, not how much: benchmark figures and benchmark data set names belong
on the generated benchmark pages (docs/benchmarks/), where they carry the machine, date and commit of their run. A
default chosen from a benchmark names its page instead. The evaluation package may name its data sets."""
from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ctxrag"
EXEMPT = {SRC / "evaluation", SRC / "resources"}  # resources/: shipped data (the demo corpus has a .py file)

FIGURES = [
    (re.compile(r"\b(DRCD|MuSiQue|HotpotQA|2Wiki\w*)\b"), "benchmark data set"),
    (re.compile(r"\b(?:P|R|Pass|Recall|recall|MRR|nDCG|NDCG|Hit|hit)@\d+\b[^.;:\n]{0,24}?\d+\.\d+"), "metric figure"),
    (re.compile(r"\d+\.\d+\s*(?:/\s*)?(?:P|R|MRR|nDCG)@\d+"), "metric figure"),
    (re.compile(r"\b(?:F1|EM)\b\s*(?:of\s*)?[=:]?\s*\d+(?:\.\d+)?\b|\b\d+(?:\.\d+)?\s*(?:F1|EM)\b"), "answer score"),
    (re.compile(r"\b\d+(?:\.\d+)?\s*%"), "percentage"),
    (re.compile(r"\b\d+ of (?:the )?(?:first )?\d+\b"), "count from a run"),
    (re.compile(r"[+-]\d+(?:\.\d+)?\s*(?:points?|P@|R@|MRR)|(?<=[\s(])[+-]\d+\.\d+\b"), "gain from a run"),
    (re.compile(r"\b\d+(?:\.\d+)?\s*(?:tok/s|s/chunk|s/query|s/answer|s per (?:chunk|query|answer)|ms per)"),
     "speed from a run"),
    (re.compile(r"\b\d+(?:\.\d+)?\s*(?:ms|s) instead of \d"), "speed from a run"),
    (re.compile(r"\b\d+(?:\.\d+)?x (?:faster|slower)|\babout \d+(?:\.\d+)?x\b"), "speed-up from a run"),
]


def _docstring_prose(text: str) -> list[tuple[int, str]]:
    """(offset, line) of a docstring's prose: doctests with their output and indented example code are left out."""
    out, in_doctest = [], False
    for i, line in enumerate(inspect.cleandoc(text).splitlines()):
        stripped = line.strip()
        if stripped.startswith(">>>"):
            in_doctest = True
        elif not stripped:
            in_doctest = False
        if not (in_doctest or line.startswith("    ")):
            out.append((i, line))
    return out


def parse(source: str, tries: int = 3) -> ast.Module:
    """`ast.parse`, asked again on CPython 3.11's spurious "AST constructor recursion depth mismatch" SystemError
    (python/cpython#106905, fixed in later releases; seen once in an xdist worker of the fast lane)."""
    for attempt in range(tries):
        try:
            return ast.parse(source)
        except SystemError as e:
            if "recursion depth mismatch" not in str(e) or attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def prose(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring (module, class, function and attribute docstrings)."""
    source = path.read_text(encoding="utf-8")
    out: list[tuple[int, str]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out.append((tok.start[0], tok.string))
    for node in ast.walk(parse(source)):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                out += [(stmt.lineno + i, text) for i, text in _docstring_prose(stmt.value.value)]
    return out


def findings(path: Path) -> list[str]:
    found = []
    for line, text in prose(path):
        for pattern, what in FIGURES:
            match = pattern.search(text)
            if match:
                found.append(f"{path.relative_to(SRC.parent.parent)}:{line}: {what} {match.group(0)!r}")
    return found


def _sources() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py")) if not any(d in p.parents for d in EXEMPT)]


def test_no_benchmark_figures_in_source_comments() -> None:
    found = [f for path in _sources() for f in findings(path)]
    assert not found, ("benchmark figures in comments or docstrings: move them to the benchmark page "
                       "(docs/benchmarks/) and name the page instead:\n" + "\n".join(found))


@pytest.mark.parametrize("text", [
    "# Chinese (DRCD dev): BM25 is stronger", "# R@1 92.5 against 76.3", "# hybrid 93.1 / MRR@10 95.9",
    "# F1 9.8 with the example", "# 21 of 200 answers were echoes", "# +2.96 points in two runs",
    "# 2 threads generated 0.2 tok/s", "# about 3x faster than numpy", "# 24 ms instead of 0.2 ms", "# 87.4% grounded",
])
def test_patterns_catch_figures(text: str, tmp_path: Path) -> None:
    path = SRC / "_probe.py"
    assert any(p.search(text) for p, _ in FIGURES), text
    del path


@pytest.mark.parametrize("text", [
    "# the best overlap F1 with the phrase", "# see docs/benchmarks/chinese_retrieval.md", "# weights 0.4/0.6",
    "# the 1.5B model", "# chunk_size 800", "# a fifth of the index",
])
def test_patterns_leave_reasons_alone(text: str) -> None:
    assert not any(p.search(text) for p, _ in FIGURES), text
