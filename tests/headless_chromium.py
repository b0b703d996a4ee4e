"""Headless Chromium for the report, UI and OpenWebUI page tests: Debian's package, installed as root when
missing, driven through Playwright (no browser download). A plugin of tests/conftest.py."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser")


@pytest.fixture(scope="session")
def chromium() -> str:
    """The headless browser; installed from Debian packages when missing and we are root, else a failure."""
    found = next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)
    if found:
        return found
    if os.geteuid() != 0:
        pytest.fail("chromium is not installed and this is not root: apt-get install chromium chromium-driver")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    lock = ["-o", "DPkg::Lock::Timeout=600"]
    subprocess.run(["apt-get", *lock, "update"], check=True, capture_output=True, env=env, timeout=900)
    subprocess.run(["apt-get", *lock, "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"],
                   check=True, capture_output=True, env=env, timeout=1800)
    found = next((shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n)), None)
    if not found:
        pytest.fail("chromium is still missing after apt-get install chromium chromium-driver")
    return found


# Module scope, not session: Playwright's sync API runs its event loop in this thread until it stops, so it
# must end with the module's tests, or every later asyncio.run() in this worker fails.
@pytest.fixture(scope="module")
def browser(chromium: str):
    """Debian's Chromium through Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        yield browser
        browser.close()
