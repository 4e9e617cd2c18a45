"""What a failed test's report adds, so that a failure seen once in a full run can be understood
from its report alone: the last lines the app it used wrote (a served app's errors do not reach
the test), and what its page was showing: the messages (a toast that said why a click did
nothing) and the chat (which one was open, what it held)."""

from __future__ import annotations

import pytest

APP_LOG_LINES = 40
CHAT_SHOWN_CHARACTERS = 600


def add_what_the_app_said(item: pytest.Item, report: pytest.TestReport) -> None:
    if report.when != "call" or not report.failed:
        return
    arguments = getattr(item, "funcargs", {})
    for name, value in arguments.items():
        if callable(getattr(value, "log", None)) and hasattr(value, "log_path"):  # AppProcess, AppInProcess
            lines = value.log().splitlines()[-APP_LOG_LINES:]
            report.sections.append((f"the last {len(lines)} lines of the app's log ({name})", "\n".join(lines)))
    page = arguments.get("page")
    if callable(getattr(page, "is_closed", None)) and not page.is_closed():  # a Playwright page
        try:
            toasts = page.get_by_test_id("toast-body").all_inner_texts()
        except Exception as error:  # the page may be what failed
            toasts = [f"(could not be read: {error})"]
        report.sections.append(("the messages the page showed", "\n".join(toasts) or "(none)"))
        report.sections.append(("the chat the page showed", chat_shown(page)))


def chat_shown(page) -> str:
    try:
        listed = page.locator("#chat-list label").evaluate_all(
            "labels => labels.map(label => (label.querySelector('input')?.checked ? '[open] ' : '') + label.innerText)")
        title = page.locator("#chat-title textarea, #chat-title input").first.input_value(timeout=1000)
        text = page.locator("#chatbot").inner_text(timeout=1000)
    except Exception as error:  # the page may be what failed
        return f"(could not be read: {error})"
    return f"listed: {listed}\ntitle: {title!r}\nchat: {text[-CHAT_SHOWN_CHARACTERS:]}"
