"""The documentation site builds with `mkdocs build --strict` (a broken link, a missing page or a bad API reference
fails), and its configuration page is generated from `Settings`, so it cannot drift."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docs" / "hooks"))
import settings_reference  # noqa: E402
from ctxrag.testing.llm_server import HANG_GUARD_S  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once per module with ``mkdocs build --strict``."""
    pytest.importorskip("mkdocs", reason="the docs tools are not installed (pip install 'ctxrag[dev]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install 'ctxrag[dev]')")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed (pip install 'ctxrag[dev]')")
    out = tmp_path_factory.mktemp("site") / "site"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]),
           "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"
    return out


def test_mkdocs_build_strict(site: Path) -> None:
    page = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "settings-reference" not in page and "CTXRAG_LLM__BASE_URL" in page
    assert (site / "benchmarks" / "index.html").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("query, page_title", [("BM25", "BM25 speed"), ("知识库", None)])
def test_the_sites_search_finds_pages_in_a_browser(site: Path, tmp_path: Path, query: str,
                                                  page_title: str | None) -> None:
    """The built site served over HTTP on 127.0.0.1 (the search index loads in a web worker, which file:// pages
    cannot start), in headless Chromium: typing a query lists matching pages."""
    import functools
    import tempfile
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install 'ctxrag[dev]')")
    from playwright.sync_api import sync_playwright

    from ctxrag.testing.browser import CHROMIUM_ARGS, chromium_path

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

    chromium = chromium_path()
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; scripts/bootstrap.sh does it as root)")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch_persistent_context(tempfile.mkdtemp(dir=tmp_path), executable_path=chromium,
                                                            headless=True, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                page.set_default_timeout(HANG_GUARD_S * 1000)  # a hang guard: a busy machine is slow, not wrong
                page.goto(f"http://127.0.0.1:{server.server_address[1]}/")
                page.keyboard.press("/")  # the site's search shortcut
                box = page.locator("input.md-search__input")
                box.fill(query)
                # Material searches on keyup (and on focus), not on the input event that fill() sends: without a key
                # the query was only read if the focus handler ran after fill(), which a loaded CI machine missed.
                box.press("End")
                results = page.locator(".md-search-result__item")
                results.first.wait_for()
                assert "matching document" in page.locator(".md-search-result__meta").inner_text()
                if page_title is not None:
                    assert page_title in results.first.inner_text()
            finally:
                browser.close()
    finally:
        server.shutdown()


def test_configuration_reference_names_every_setting() -> None:
    from ctxrag.settings import Settings

    text = settings_reference.render()
    for name, field in Settings.model_fields.items():
        nested = getattr(field.annotation, "model_fields", None)
        if nested:
            for sub in nested:
                assert f"`CTXRAG_{name.upper()}__{sub.upper()}`" in text
        else:
            assert f"`CTXRAG_{name.upper()}`" in text
    assert "| `CTXRAG_DEFAULT_KB` | `default_kb` | `str` | `\"general\"` |" in text


def test_configuration_page_holds_the_marker() -> None:
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert settings_reference.MARKER in page


def test_settings_docstrings_are_read_from_the_source(tmp_path: Path) -> None:
    source = tmp_path / "s.py"
    source.write_text('class A:\n    x: int = 1\n    """The x,\n    on two lines."""\n    y: int = 2\n', "utf-8")
    assert settings_reference._attribute_docstrings(source) == {"A": {"x": "The x, on two lines."}}


def test_benchmark_nav_lists_every_json(tmp_path: Path) -> None:
    import benchmark_nav

    (tmp_path / "benchmarks" / "data").mkdir(parents=True)
    for name, title in (("b_new", "Zeta: later"), ("a_old", "alpha run")):
        (tmp_path / "benchmarks" / "data" / f"{name}.json").write_text(f'{{"title": "{title}"}}', encoding="utf-8")
    config = {"docs_dir": str(tmp_path), "nav": [{"Home": "index.md"}, {"Benchmarks": []}]}
    benchmark_nav.on_config(config)
    assert config["nav"][1]["Benchmarks"] == ["benchmarks/index.md", {"alpha run": "benchmarks/a_old.md"},
                                              {"Zeta": "benchmarks/b_new.md"}]
