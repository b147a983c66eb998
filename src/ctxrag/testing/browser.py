"""Headless Chromium for browser tests: Debian's ``chromium`` driven by playwright (no browser download).

Example::

    from ctxrag.testing.browser import CHROMIUM_ARGS, chromium_path
    path = chromium_path()     # None when no chromium is installed (a test skips)
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
"""Flags for a sandbox-less CI container without network: nothing phones home, nothing needs a GPU."""


def chromium_path() -> str | None:
    """``$CTXRAG_TEST_CHROMIUM``, else ``chromium`` on PATH, else ``/usr/bin/chromium``; None when none exists."""
    path = os.environ.get("CTXRAG_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    return path if Path(path).is_file() else None
