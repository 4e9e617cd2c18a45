"""The model's ``python`` tool, run in the user's own browser rather than on the server: while a
call waits, the reply shows its code marked with the code's key; the user's press of ▶ Run under
it runs it there (webui/python_in_browser.py), and what it printed comes back with the key to the
call that waits on it. The press is what runs it, never the marker alone."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from typing import Any

from tools import BUILTIN_TOOLS, Tool

from .approval import settle

# How long a call waits for the user to press Run (and the run to end).
WAIT_SECONDS = 600


def code_key(code: str) -> str:
    """The key of a run of ``code``, which fits a class name (one run serves calls of the same code)."""
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def browser_python(session: Any) -> Tool:
    """The ``python`` tool of one tab (a ChatSession): each call waits for the tab's browser to run its code."""

    async def run(arguments: dict[str, Any]) -> str:
        with session.reply.running_in_browser(code_key(arguments["code"])) as ran:
            try:
                output, failed = await asyncio.wait_for(asyncio.shield(ran), WAIT_SECONDS)
            except TimeoutError:
                raise RuntimeError(f"nobody ran it in the browser within {WAIT_SECONDS // 60} minutes") from None
        if failed:
            raise RuntimeError(output)
        return output

    return dataclasses.replace(BUILTIN_TOOLS["python"], run=run)


def finished(session: Any, ran: Any) -> None:
    """What a run in the browser printed (``{"key", "output", "failed"}``), for the call that waits on it."""
    try:
        key, output, failed = str(ran["key"]), str(ran["output"]), bool(ran.get("failed"))
    except (KeyError, TypeError, AttributeError):
        return
    waiting = session.reply.browser_runs.get(key)
    if waiting is not None:
        settle(waiting, (output, failed))
