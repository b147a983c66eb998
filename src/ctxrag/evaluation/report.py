"""Report evaluation results: a Markdown table (with published reference rows), the JSON file and matplotlib plots.

Example::

    from ctxrag.evaluation.report import format_table, write_json, plot_results
    print(format_table(results, ks=[5, 10, 20], references=ANTHROPIC_REFERENCES))
    write_json(results, "out.json"); plot_results(results, "out.png", ks=[5, 10, 20])
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxrag.errors import ConfigError
from ctxrag.evaluation.runner import ConfigResult


@dataclass(frozen=True)
class ReferenceRow:
    """A published number to print beside ours: Pass@k in percent by k, optional mean ms/query."""

    label: str
    pass_at: dict[int, float]
    ms: float | None = None


_PUB = "published"
_FLOOR = "stock LangChain floor (measured by the data provider)"

# ../shared/data/contextual-retrieval/README.md, copied by hand (Pass@5/10/20 in %)
ANTHROPIC_REFERENCES: tuple[ReferenceRow, ...] = (
    ReferenceRow(f"{_PUB}: Cookbook, basic dense (voyage-2)", {5: 80.92, 10: 87.15, 20: 90.06}),
    ReferenceRow(f"{_PUB}: Cookbook, contextual dense (claude-haiku-4-5 contexts)", {5: 88.12, 10: 92.34, 20: 94.29}),
    ReferenceRow(f"{_PUB}: Cookbook, + contextual BM25 (Elasticsearch)", {5: 88.86, 10: 92.31, 20: 95.23}),
    ReferenceRow(f"{_PUB}: Cookbook, contextual dense + Cohere rerank", {5: 92.15, 10: 95.26, 20: 97.45}),
    ReferenceRow(f"{_PUB}: Milvus, voyage-2 + BGE-M3 sparse, RRF", {5: 84.69}),
    ReferenceRow(f"{_PUB}: Milvus, + claude-3-haiku contexts", {5: 87.14}),
    ReferenceRow(f"{_PUB}: Milvus, + Cohere rerank", {5: 90.91}),
    ReferenceRow(f"{_FLOOR}: dense", {5: 74.74, 10: 80.79, 20: 86.10}, 28),
    ReferenceRow(f"{_FLOOR}: BM25", {5: 65.52, 10: 70.87, 20: 79.16}, 1),
    ReferenceRow(f"{_FLOOR}: Ensemble 0.5/0.5", {5: 79.09, 10: 83.26, 20: 86.68}, 22),
    ReferenceRow(f"{_FLOOR}: dense, contexts", {5: 80.78, 10: 88.85, 20: 92.74}, 20),
    ReferenceRow(f"{_FLOOR}: BM25, contexts", {5: 71.98, 10: 81.33, 20: 87.30}, 1),
    ReferenceRow(f"{_FLOOR}: Ensemble 0.5/0.5, contexts", {5: 85.23, 10: 89.43, 20: 93.86}, 22),
)


def references_for(dataset_format: str) -> tuple[ReferenceRow, ...]:
    """Published reference rows for a dataset format (only the Anthropic set has them)."""
    return ANTHROPIC_REFERENCES if dataset_format == "anthropic" else ()


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.2f}"


def _extra_k(ks: Sequence[int]) -> int:
    return 10 if 10 in ks else max(ks)


def format_table(results: Sequence[ConfigResult], ks: Sequence[int],
                 references: Sequence[ReferenceRow] = ()) -> str:
    """Markdown table: Pass@k (%) per k, MRR and nDCG at 10 (or the largest k), latency, index time; then references."""
    ks = sorted(ks)
    xk = _extra_k(ks)
    head = (["configuration", "queries"] + [f"P@{k}" for k in ks] + [f"MRR@{xk}", f"nDCG@{xk}"]
            + ["ms p50", "ms p95", "index s"])
    rows: list[list[str]] = []
    for r in results:
        if r.error:
            rows.append([r.config.name, "0"] + ["—"] * (len(head) - 3) + [f"error: {r.error[:80]}"])
            continue
        m = r.metrics
        rows.append([r.config.name, str(r.queries)] + [_pct(m.get(f"pass@{k}")) for k in ks]
                    + [_pct(m.get(f"mrr@{xk}")), _pct(m.get(f"ndcg@{xk}"))]
                    + [f"{r.query_ms_p50:.1f}", f"{r.query_ms_p95:.1f}", f"{r.index_seconds:.1f}"])
    for ref in (r for r in references if set(r.pass_at) & set(ks)):
        rows.append([ref.label, ""] + [f"{ref.pass_at[k]:.2f}" if k in ref.pass_at else "" for k in ks]
                    + ["", ""] + ([f"{ref.ms:g} (mean)"] if ref.ms is not None else [""]) + ["", ""])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(line(row) for row in rows)
    return "\n".join(out)


def results_json(results: Sequence[ConfigResult], *, per_query: bool = False, **meta: Any) -> dict[str, Any]:
    """The JSON document: ``{"results": [per-config records], ...meta}``."""
    return {**meta, "results": [r.to_json(per_query=per_query) for r in results]}


def write_json(results: Sequence[ConfigResult], path: str | Path, *, per_query: bool = False, **meta: Any) -> Path:
    """Write `results_json` to ``path`` (UTF-8, indented)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results_json(results, per_query=per_query, **meta), indent=2, ensure_ascii=False),
                    encoding="utf-8")
    return path


def _short(label: str) -> str:
    return label.replace(_FLOOR, "stock LangChain floor")


_CURVES = (("pass", "Pass@k = Recall@k"), ("hit", "hit rate@k"), ("mrr", "MRR@k"), ("ndcg", "nDCG@k"))


def plot_results(results: Sequence[ConfigResult], path: str | Path, ks: Sequence[int],
                 references: Sequence[ReferenceRow] = (), title: str = "") -> Path:
    """One PNG: metric@k curves per configuration (top row) and a bar chart of Pass@k per configuration, with the
    reference rows as hatched bars (bottom)."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("evaluation plots need matplotlib: pip install 'ctxrag[eval]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted(ks)
    good = [r for r in results if not r.error]
    if not good:
        raise ValueError("nothing to plot: every configuration failed")
    rows = [(r.config.name, {k: 100 * r.metrics[f"pass@{k}"] for k in ks}, False) for r in good]
    rows += [(ref.label, {k: v for k, v in ref.pass_at.items() if k in ks}, True) for ref in references
             if set(ref.pass_at) & set(ks)]
    fig = plt.figure(figsize=(16, 4.5 + 0.42 * len(rows)))
    grid = fig.add_gridspec(2, 4, height_ratios=[3.2, 0.42 * len(rows) + 1.2])
    cmap = plt.get_cmap("tab10")
    for i, (metric, label) in enumerate(_CURVES):
        ax = fig.add_subplot(grid[0, i])
        for j, r in enumerate(good):
            ax.plot(ks, [100 * r.metrics[f"{metric}@{k}"] for k in ks], marker="o", color=cmap(j % 10),
                    label=r.config.name)
        ax.set_title(label)
        ax.set_xlabel("k")
        ax.set_xticks(ks)
        ax.set_ylabel("%")
        ax.grid(alpha=0.3)
        if i == 0:
            ax.legend(fontsize=7, loc="lower right")
    ax = fig.add_subplot(grid[1, :])
    height = 0.8 / len(ks)
    for j, k in enumerate(ks):
        # smallest k on top within each group
        ys = [len(rows) - 1 - n - (j - (len(ks) - 1) / 2) * height for n in range(len(rows))]
        vals = [row[1].get(k, 0.0) for row in rows]
        bars = ax.barh(ys, vals, height=height, color=cmap(j), label=f"Pass@{k}")
        for bar, row in zip(bars, rows):
            if row[2]:
                bar.set_hatch("//")
                bar.set_alpha(0.55)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_short(row[0]) for row in reversed(rows)], fontsize=8)
    lo = min(v for row in rows for v in row[1].values()) if any(row[1] for row in rows) else 0
    ax.set_xlim(max(0, lo - 10), 100)
    ax.set_xlabel("Pass@k (%); hatched = published / reference numbers")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
