"""A person in OpenWebUI's own chat page, in headless Chromium: the real OpenWebUI in front of a
simulator engine that reasons. The page shows the answer, and the reasoning in a separate thought
block (collapsed, opened on a click), not in the answer. The screenshot goes to docs/ui/ when
DAYONE_UI_SCREENSHOTS=docs/ui is set, else to a temporary directory.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tasks.openwebui.checks import assistant_messages, shown_reasoning
from tasks.openwebui.server import running_openwebui, venv_path
from tasks.openwebui.session import Person
from tasks.sim.process import start_sim

REPO = Path(__file__).resolve().parents[2]
PROMPT = "What is 17 + 25?"
UI_TIMEOUT_MS = 60_000
SCREENSHOT = "openwebui-chat-thought.png"


@pytest.fixture()
def shots(tmp_path: Path) -> Path:
    chosen = os.environ.get("DAYONE_UI_SCREENSHOTS")
    path = (REPO / chosen) if chosen else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_the_chat_page_shows_the_answer_and_the_thought_apart(browser, tmp_path, shots):
    from playwright.sync_api import expect

    expect.set_options(timeout=UI_TIMEOUT_MS)  # OpenWebUI's first page load compiles its front end's chunks
    with start_sim("sglang", {"reasoning": True, "reasoning_tokens": 12}) as sim, \
            running_openwebui(venv_path(), tmp_path / "openwebui", sim.url + "/v1") as ui:
        person = Person(ui.base_url)
        person.sign_up("dayone-browser-check")
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(UI_TIMEOUT_MS)
        # signed in as the web app keeps it: its token in localStorage
        context.add_init_script(f"window.localStorage.setItem('token', {person.token!r})")
        page = context.new_page()
        page.goto(ui.base_url + "/")
        chat_input = page.locator("#chat-input")
        expect(chat_input).to_be_visible()
        # a new account first sees the release notes, as a person would: close them
        lets_go = page.get_by_role("button", name="Okay, Let's Go!")
        lets_go.click()
        expect(lets_go).to_be_hidden()
        chat_input.click()
        page.keyboard.type(PROMPT)
        page.keyboard.press("Enter")
        page.wait_for_url("**/c/*")
        chat_id = page.url.rstrip("/").rsplit("/", 1)[-1]
        deadline = time.monotonic() + UI_TIMEOUT_MS / 1000
        while not (answers := assistant_messages(person.stored_chat(chat_id))) or not answers[-1].get("done"):
            assert time.monotonic() < deadline, "OpenWebUI never stored a finished answer"
            time.sleep(0.5)
        answer, thought = answers[-1]["content"].strip(), shown_reasoning(answers[-1]).strip()
        assert answer and thought and thought not in answer
        message = page.locator("#response-content-container").last
        expect(message.get_by_text(answer, exact=True)).to_be_visible()  # the answer, on its own
        expect(page.get_by_text(thought, exact=False).first).to_be_hidden()  # the thought is not shown inline
        # OpenWebUI folds the thought (with the built-in tool it called) into a details block: open it
        toggle = message.get_by_role("button", name="Toggle details")
        if toggle.count():
            toggle.first.click()
        thought_block = message.get_by_text("Thought for", exact=False).first
        expect(thought_block).to_be_visible()
        thought_block.click()
        expect(message.get_by_text(thought, exact=False).first).to_be_visible()
        page.screenshot(path=shots / SCREENSHOT)
        context.close()
