"""The files of this project one text message runs through on the server, counted the same way
each time (docs/life_of_a_token.md, "A message's way"): the app served in this process, the page
open in Chromium, a profiler on every thread the server started, from Enter in the message box
until the reply is in and the sidebar has kept the chat; every project file whose code ran then.
The page, the chat core and the tools (webui/, chat/, tools/), past the Gradio patches' room that
every event of the page goes through (webui/gradio_patches/, listed apart), are at most
MOST_PAGE_FILES of them, and a chat that runs no tool goes through neither the agent loop nor
approval."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from harness.app_in_process import AppInProcess
from harness.browser import open_chat, replies, wait_until_answered

pytestmark = [pytest.mark.browser, pytest.mark.server]

ROOT = Path(__file__).resolve().parent.parent
PAGE_FOLDERS = ("webui", "chat", "tools")
GRADIO_PATCHES = "webui/gradio_patches/"
MOST_PAGE_FILES = 25


class FilesRun:
    """The project's files whose code runs, while ``recording``, on the threads started after
    ``threading.setprofile(profile)``; the test harness's own are none of them."""

    def __init__(self) -> None:
        self.recording = False
        self.files: set[str] = set()

    def profile(self, frame, event, arg) -> None:
        if self.recording and event == "call":
            self.files.add(frame.f_code.co_filename)

    def project_files(self) -> list[str]:
        ours = []
        for name in self.files:
            path = Path(name)
            if path.suffix == ".py" and path.is_relative_to(ROOT):
                relative = str(path.relative_to(ROOT))
                if relative.split("/")[0] not in (".venv", "tests", "harness"):
                    ours.append(relative)
        return sorted(ours)


@pytest.fixture
def files_run():
    run = FilesRun()
    threading.setprofile(run.profile)
    try:
        yield run
    finally:
        threading.setprofile(None)


def test_a_text_message_runs_through_few_files_of_the_page(tmp_path, browser, files_run, monkeypatch):
    from playwright.sync_api import expect

    import webui.chat_sidebar

    # The sidebar's look for other tabs' writes, every few seconds, is no part of a message's way.
    monkeypatch.setattr(webui.chat_sidebar, "LIST_REFRESH_SECONDS", 3600.0)
    app = AppInProcess(tmp_path)
    try:
        page = browser.new_page()
        try:
            open_chat(page, app.url)
            box = page.locator("#chat-input textarea")
            box.fill("Say pear.")
            before = replies(page)
            files_run.recording = True
            box.press("Enter")
            wait_until_answered(page, before)
            expect(page.locator("#saved-chats-note")).to_contain_text("1 chat")
            time.sleep(1)  # the events after the reply answer as Stop hides; the saved note is the last of them
            files_run.recording = False
        finally:
            page.close()
    finally:
        app.stop()
    files = files_run.project_files()
    page_files = [name for name in files if name.split("/")[0] in PAGE_FOLDERS and not name.startswith(GRADIO_PATCHES)]
    patches = [name for name in files if name.startswith(GRADIO_PATCHES)]
    listing = "\n".join(files)
    print(f"{len(files)} project files; {len(page_files)} of the page, the core and the tools, besides {len(patches)} Gradio patches:\n"
          f"{listing}", file=sys.stderr)
    assert {"webui/handlers.py", "chat/reply.py", "chat/keeper.py", "webui/chat_sidebar.py"} <= set(page_files), \
        f"the profiler missed part of the message's way:\n{listing}"
    assert len(page_files) <= MOST_PAGE_FILES, f"{len(page_files)} files of the page, the core and the tools (at most {MOST_PAGE_FILES}):\n{listing}"
    assert not {"tools/agent_loop.py", "chat/approval.py"} & set(page_files), f"a chat without tools went through the tool loop:\n{listing}"
