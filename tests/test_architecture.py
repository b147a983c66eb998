"""The import-linter contracts in pyproject.toml ([tool.importlinter]: the layers and no cycles) hold for this
checkout's source, and every top-level module of ctxrag sits in a layer, so a new module cannot escape the check.
No contract ignores an import, and the whole module import graph (built by grimp, the graph import-linter reads;
imports under ``if TYPE_CHECKING`` left out, since they never run) has no cycle of any length.

Runs import-linter's own CLI (`lint-imports`) on this repository's `src/`; a broken contract fails with its report."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import grimp
from importlinter.application.use_cases import read_user_options
from importlinter.configuration import configure

from ctxrag.testing.llm_server import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def contracts() -> list[dict[str, Any]]:
    """The contracts as import-linter reads them from pyproject.toml."""
    configure()
    return read_user_options(config_filename=str(ROOT / "pyproject.toml")).contracts_options


def test_import_contracts_are_kept() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S,
    )
    report = run.stdout + run.stderr
    assert run.returncode == 0, report
    assert f"Contracts: {len(contracts())} kept, 0 broken." in report, report


def test_every_top_level_module_is_in_a_layer() -> None:
    layers = next(c for c in contracts() if c["type"] == "layers")["layers"]
    named = {m.strip().strip("()") for layer in layers for m in layer.replace(":", "|").split("|")}
    children = grimp.build_graph("ctxrag", cache_dir=None).find_children("ctxrag")
    assert children - named == set(), f"put these modules in a layer of [tool.importlinter]: {sorted(children - named)}"
    assert named - children == set(), f"layers name modules that do not exist: {sorted(named - children)}"


def test_no_contract_ignores_an_import() -> None:
    ignoring = {c["id"]: c["ignore_imports"] for c in contracts() if c.get("ignore_imports")}
    assert ignoring == {}, f"remove the cycle or back edge instead of ignoring it: {ignoring}"


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected set of two or more modules (or a module importing itself), by Tarjan's algorithm
    (iterative): each is one or more import cycles."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in order:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in order:
                    order[child] = low[child] = len(order)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], order[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == order[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1 or module in graph.find_modules_directly_imported_by(module):
                    cycles.append(sorted(component))
    return cycles


def test_import_cycles_finds_a_cycle_of_three() -> None:
    graph = grimp.ImportGraph()
    for importer, imported in [("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d"), ("p.d", "p.e")]:
        graph.add_import(importer=importer, imported=imported)
    assert import_cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_no_import_cycle_at_any_depth() -> None:
    graph = grimp.build_graph("ctxrag", cache_dir=None, exclude_type_checking_imports=True)
    cycles = import_cycles(graph)
    paths = [graph.find_shortest_chain(importer=c[0], imported=c[1]) for c in cycles]
    assert cycles == [], f"import cycles among ctxrag modules: {cycles} (e.g. {paths})"
