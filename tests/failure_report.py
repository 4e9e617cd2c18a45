"""What a failed test's report adds, so that a failure seen once in a full run can be understood
from its report alone: the last lines the app it used wrote (a served app's errors do not reach
the test), and the messages its page was showing (a toast that said why a click did nothing)."""

from __future__ import annotations

import pytest

APP_LOG_LINES = 40


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
