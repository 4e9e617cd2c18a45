"""Helpers for the browser tests: the real app in a subprocess, Debian's Chromium through Playwright,
and what a test does on the page (send a message, wait for the reply)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from .processes import stop_process

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppProcess:
    """``python app.py --port N [extra_args]`` (the default model unless they name one; ``api``
    among them for the API alone), until stopped. Its output goes to a file: a pipe nobody reads would fill up and block the server."""

    def __init__(self, temp_dir: Path, extra_args: tuple[str, ...] = (), timeout: float = 300, port: int | None = None) -> None:
        # The same port again for a restart: the browser keeps localStorage per origin.
        self.port = port or free_port()
        self.log_path = temp_dir / "app.log"
        env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False",
            "OMP_WAIT_POLICY": "PASSIVE", "GRADIO_TEMP_DIR": str(temp_dir / "gradio"), "PYTHONUNBUFFERED": "1",
            "ANYCHAT_DATA_DIR": str(temp_dir / "data"),
        }
        self._log = open(self.log_path, "w")
        # A process group of its own, so that stopping it also stops what it started (vLLM's
        # engine processes), even where the app itself has to be killed.
        self.process = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(self.port), *extra_args], cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.url = self._wait_for_url(timeout)

    def _wait_for_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"The app exited with {self.process.returncode}:\n{self.log()}")
            # The page's line, or for `app.py api` the API's.
            if match := re.search(r"Running on local URL:\s+(\S+)|OpenAI-compatible API on (\S+)/v1", self.log()):
                return (match.group(1) or match.group(2)).rstrip("/") + "/"
            time.sleep(0.5)
        raise TimeoutError(f"The app did not start in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process, 30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()


@contextmanager
def chromium(timeout_ms: int) -> Iterator:
    """Debian's Chromium through Playwright, with ``expect`` waiting up to ``timeout_ms``."""
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        expect.set_options(timeout=timeout_ms)
        try:
            yield browser
        finally:
            browser.close()


def is_local(url: str) -> bool:
    parsed = urlparse(url)
    return parsed.scheme in ("data", "blob", "about") or parsed.hostname in LOCAL_HOSTS


# Stop shows while a reply is written. Counting its appearances tells a test that its request
# started even when a short reply is over before the test could look. Gradio 6 takes a hidden
# button out of the page, so being there is being shown: asking for its offsetParent instead made
# the browser lay the page out at every change to the page (0.4 s of a 200-message reply's 8 s of the
# browser's time, which bench/ui_stream.py counted as the page's).
COUNT_REPLIES = """() => {
    window.replies = 0;
    let shown = false;
    new MutationObserver(() => {
        const now = document.getElementById("stop-btn") !== null;
        if (now && !shown) window.replies += 1;
        shown = now;
    }).observe(document.body, {subtree: true, childList: true});
}"""


def open_chat(page, url: str) -> None:
    """Open the page and wait until it is ready."""
    watch = LoadWatch(page)
    page.goto(url)
    wait_until_ready(page, watch)


class LoadWatch:
    """What a page asked of the server and what went wrong in it since it was opened, for the
    failure of a page that never became ready to say where it stopped (a CI run once found a page
    still at Gradio's "Loading..." after three minutes, which alone says nothing)."""

    def __init__(self, page) -> None:
        self.opened = time.monotonic()
        self.pending: dict[int, tuple[float, str]] = {}
        self.failed: list[str] = []
        self.errors: list[str] = []
        page.on("request", lambda request: self.pending.__setitem__(id(request), (time.monotonic(), f"{request.method} {request.url}")))
        page.on("requestfinished", lambda request: self.pending.pop(id(request), None))
        page.on("requestfailed", self._failed)
        page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        page.on("pageerror", lambda error: self.errors.append(f"{error}"))

    def _failed(self, request) -> None:
        self.pending.pop(id(request), None)
        self.failed.append(f"{request.method} {request.url}: {request.failure}")

    def __str__(self) -> str:
        now = time.monotonic()
        pending = [f"{what} (asked {asked - self.opened:.1f} s after opening, {now - asked:.1f} s ago)" for asked, what in self.pending.values()]
        return (f"opened {now - self.opened:.1f} s ago; requests unanswered: {pending or 'none'}; "
                f"failed: {self.failed or 'none'}; errors in the page: {self.errors or 'none'}")


def wait_until_ready(page, watch: LoadWatch | None = None) -> None:
    """Until the page is ready: the model said what it reads (text only, for the default model)
    and the saved chats are restored. ``watch``, where the page has one, says in a failure what
    the page was still waiting for."""
    from playwright.sync_api import expect

    try:
        expect(page.locator("#chat-input textarea")).to_have_attribute("placeholder", re.compile("reads text only"))
    except AssertionError as error:
        if watch is None:
            raise
        raise AssertionError(f"{error}\nThe page: {watch}") from None
    expect(page.locator("#saved-chats-note")).to_contain_text("kept on the server")
    page.evaluate(COUNT_REPLIES)


def replies(page) -> int:
    return page.evaluate("window.replies")


def send(page, text: str) -> int:
    """Send a message; returns the reply count to hand to wait_until_answered."""
    before = replies(page)
    box = page.locator("#chat-input textarea")
    box.fill(text)
    box.press("Enter")
    return before


def ask(page, text: str) -> None:
    wait_until_answered(page, send(page, text))


def click_and_wait(page, button_id: str) -> None:
    before = replies(page)
    page.locator(f"#{button_id}").click()
    wait_until_answered(page, before)


def wait_until_answered(page, replies_before: int) -> None:
    from playwright.sync_api import expect

    page.wait_for_function(f"window.replies > {replies_before}", timeout=10_000)
    expect(page.locator("#stop-btn")).to_be_hidden()


def bot_messages(page):
    """The assistant's messages, without the stats line under each reply or the ‹k/n› line under a message that has versions."""
    return page.locator("#chatbot [data-testid=bot]").filter(has_not=page.locator(".reply-stats, .versions"))


def user_messages(page):
    return page.locator("#chatbot [data-testid=user]")


def shown_messages(page) -> list[str]:
    """The text of every message the chat shows, stats lines included; not Gradio's progress timer
    over the chat, which an event that merely outputs to the chat shows for a moment (a full run
    once saw "0.5s" appear there after a Stop, and took it for the reply growing)."""
    return page.locator("#chatbot [data-testid=user], #chatbot [data-testid=bot]").all_inner_texts()


def import_conversation(page, path) -> None:
    """Import a conversation file through the sidebar's button, as a person does."""
    if not page.locator("#import-btn").is_visible():
        page.get_by_text("Conversation file").click()
    with page.expect_file_chooser() as chooser:
        page.locator("#import-btn").click()
    chooser.value.set_files(str(path))


# Records, at every change of the chat, when it was and what the newest reply showed.
# One watcher at a time: each reads the chat at every change to it, so watchers left from earlier
# replies multiplied the browser's work (bench/ui_stream.py, 7 rounds under 200 messages: the page
# at 0.81 of direct with them piling up, 0.91 with one).
WATCH_REPLY = """() => {
    window.shown = [];
    window.replyWatcher?.disconnect();
    const chatbot = document.querySelector("#chatbot");
    window.replyWatcher = new MutationObserver(() => {
        const replies = [...chatbot.querySelectorAll("[data-testid=bot]")].filter(m => !m.querySelector(".reply-stats"));
        const newest = replies[replies.length - 1];
        window.shown.push([performance.now(), replies.length, newest ? newest.innerText : ""]);
    });
    window.replyWatcher.observe(chatbot, {subtree: true, childList: true, characterData: true});
}"""


def open_tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


# Gradio keeps the updates sent to controls not shown yet (the page's opening sends the model's
# defaults to the Settings tab) and applies them once the tab, first shown, has settled. On a
# loaded machine that has landed just after a value typed at once, setting max_new_tokens back to
# the model's 1024 (in two CI runs; not seen alone, even with the browser's CPU slowed 8 times).
TYPED_HOLDS_MS = 500


def set_number(page, elem_id: str, value) -> None:
    """Type ``value`` into a number field, again if it was set back, until the field holds it."""
    from playwright.sync_api import expect

    field = page.locator(f"#{elem_id} input[type=number]")
    for _ in range(3):
        field.fill(str(value))
        field.press("Enter")
        page.wait_for_timeout(TYPED_HOLDS_MS)
        if field.input_value() == str(value):
            break
    expect(field).to_have_value(str(value))


def load_model(page, path, loaded):
    """Load a model from the Settings tab and wait for the status line that says it is loaded."""
    from playwright.sync_api import expect

    open_tab(page, "Settings")
    page.locator("#model-path").get_by_role("textbox").fill(path)
    page.locator("#load-btn").click()
    expect(page.locator("#model-status")).to_contain_text(loaded)


def open_tools(page):
    """Greedy, short replies, and the Tools panel open with the first answer made a call."""
    open_tab(page, "Settings")
    set_number(page, "temperature", 0)
    set_number(page, "max-new-tokens", 40)
    open_tab(page, "Chat")
    page.locator("#tools-panel").get_by_text("Tools", exact=True).click()
    page.locator("#tool-choice input[role=combobox]").click()
    page.get_by_role("option", name="required", exact=True).click()
