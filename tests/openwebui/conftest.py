"""The headless browser for the OpenWebUI page: the report tests' fixture (Debian's chromium)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("dayone_report_conftest_owui", REPO / "tests" / "report" / "conftest.py")
_report_conftest = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _report_conftest  # its dataclasses look their module up
_spec.loader.exec_module(_report_conftest)
chromium = _report_conftest.chromium


@pytest.fixture(scope="module")
def browser(chromium: str):
    """Debian's Chromium through Playwright (no browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        yield browser
        browser.close()
