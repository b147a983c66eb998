"""The lazily exported names of `ctxrag` and `ctxrag.chains`: each resolves at run time to the object its module
defines, and each is imported in the package's ``TYPE_CHECKING`` block from the same module (what type checkers and
IDEs read), so the two lists cannot drift apart."""
from __future__ import annotations

import ast
import importlib
import inspect
from types import ModuleType

import pytest

import ctxrag
import ctxrag.chains

PACKAGES = [ctxrag, ctxrag.chains]


def type_checking_imports(package: ModuleType) -> dict[str, str]:
    """name -> module of every ``from M import name`` inside ``if TYPE_CHECKING:`` in the package's __init__."""
    tree = ast.parse(inspect.getsource(package))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.dump(stmt)
                for alias in stmt.names:
                    found[alias.asname or alias.name] = str(stmt.module)
    return found


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_name_in_all_resolves_to_its_modules_object(package: ModuleType) -> None:
    exports: dict[str, str] = package._EXPORTS
    assert set(package.__all__) - {"__version__"} == set(exports)
    for name in package.__all__:
        value = getattr(package, name)
        if name in exports:
            assert value is getattr(importlib.import_module(exports[name]), name), name


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_type_checking_block_imports_every_export_from_the_same_module(package: ModuleType) -> None:
    assert type_checking_imports(package) == package._EXPORTS


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        ctxrag.NoSuchThing  # noqa: B018
    assert "KnowledgeBase" in dir(ctxrag)
