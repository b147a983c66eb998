"""The LangServe playground page in headless Chromium (Debian's chromium driven by playwright; no browser download):
it loads, takes a query in its form, runs it, and shows the retrieved chunk; with auth on, a browser that sends the
bearer header gets the same page."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

pytest.importorskip("langserve", reason="the server extra is not installed (pip install 'ctxrag[server]')")
pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install 'ctxrag[dev]')")

from server_helpers import FactEchoChatModel, run_uvicorn, server_settings  # noqa: E402

from ctxrag.server.app import create_app  # noqa: E402
from ctxrag.testing.browser import CHROMIUM_ARGS, chromium_path  # noqa: E402

TOKEN = "pg-token-81c2"


def _chromium() -> str:
    path = chromium_path()
    if path is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium; scripts/bootstrap.sh does it as root)")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("auth", [False, True], ids=["auth-off", "auth-on"])
def test_search_playground_runs_a_query(locker_kb, locker_home, tmp_path: Path, auth: bool) -> None:  # noqa: ANN001
    from playwright.sync_api import sync_playwright

    chromium = _chromium()
    kb, codes = locker_kb
    options = {"auth_token": TOKEN} if auth else {}
    app = create_app(server_settings(locker_home, **options), kbs=[kb], llm=FactEchoChatModel())
    with run_uvicorn(app) as url, sync_playwright() as pw:
        profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path)
        browser = pw.chromium.launch_persistent_context(
            profile, executable_path=chromium, headless=True, args=CHROMIUM_ARGS,
            extra_http_headers={"Authorization": f"Bearer {TOKEN}"} if auth else None)
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            response = page.goto(f"{url}/search/playground/")
            assert response is not None and response.status == 200
            box = page.locator("textarea").first
            box.wait_for()
            box.fill("access code of locker Saffron")
            start = page.get_by_role("button", name="Start")
            start.click()
            page.get_by_text(codes["Saffron"]).first.wait_for()  # the chunk's text, streamed into the output panel
            page.screenshot(path=str(tmp_path / "search_playground.png"), full_page=True)
            output = page.inner_text("body")
            assert "locker_saffron.md" in output and f"locker Saffron is {codes['Saffron']}" in output
        finally:
            browser.close()
    assert (tmp_path / "search_playground.png").stat().st_size > 10_000


@pytest.mark.slow
def test_every_playground_renders_its_form_and_ask_answers(locker_kb, locker_home, tmp_path: Path) -> None:  # noqa: ANN001
    from playwright.sync_api import sync_playwright

    chromium = _chromium()
    kb, codes = locker_kb
    app = create_app(server_settings(locker_home), kbs=[kb], llm=FactEchoChatModel())
    fields = {"ask": ["QUESTION", "HISTORY"], "chat": ["QUESTION", "SELECTED DOC IDS", "ALLOW GENERAL KNOWLEDGE"],
              "notes": ["ACTION", "QUERY", "TAGS"]}
    with run_uvicorn(app) as url, sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path), executable_path=chromium, headless=True,
            args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            for route, labels in fields.items():
                page.goto(f"{url}/{route}/playground/")
                page.get_by_role("button", name="Start").wait_for()
                text = page.inner_text("body").upper()
                missing = [label for label in labels if label not in text]
                assert not missing, f"/{route}/playground/ lacks {missing} (a blank page means the form failed)"
                page.screenshot(path=str(tmp_path / f"{route}_playground.png"), full_page=True)
            page.goto(f"{url}/ask/playground/")
            page.locator("textarea").first.fill("What is the access code of locker Prairie?")
            page.get_by_role("button", name="Start").click()
            page.get_by_text(f"locker Prairie is {codes['Prairie']}").first.wait_for()
            page.screenshot(path=str(tmp_path / "ask_answered.png"), full_page=True)
        finally:
            browser.close()
