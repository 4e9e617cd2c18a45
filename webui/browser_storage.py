"""What the browser keeps, in its localStorage through gr.BrowserState: which browser it is (the
owner of its chats where the page has no logins) and the chat it showed last. The chats
themselves are on the server (store/); those older versions kept in the browser are read once,
moved into the store and removed from the browser (chat/browser_chats.py).

gr.BrowserState encrypts what it stores with a secret of the server's, in the browser (the secret
travels in the page's config, so this hides the value from a casual look, not from the person
at the browser). Its default secret and key are random per start, which would make what it
stores unreadable after a restart; both are fixed here, the secret made once in the app's cache.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import tempfile
import uuid
from pathlib import Path
from typing import Any

import gradio as gr

from engines.model_files.cache import cache_dir

STORAGE_KEY = "anychat-browser"
OLD_CHATS_KEY = "anychat-saved-chats"
SECRET_FILE = "browser-state-secret"
BROWSER_ID = re.compile(r"[0-9a-f]{32}")


def page_secret(folder: Path | None = None) -> str:
    """The secret in ``folder`` (the app's cache), made there by the first start that needs it."""
    path = (folder or cache_dir()) / SECRET_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, draft = tempfile.mkstemp(dir=path.parent, prefix=SECRET_FILE)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_urlsafe(32))
        # A link appears whole and only if nothing is there: of two starts at once, one secret wins.
        with contextlib.suppress(FileExistsError):
            os.link(draft, path)
        os.unlink(draft)
    return path.read_text(encoding="ascii").strip()


def browser_storage() -> gr.BrowserState:
    return gr.BrowserState(None, storage_key=STORAGE_KEY, secret=page_secret())


def old_chats_storage() -> gr.BrowserState:
    return gr.BrowserState(None, storage_key=OLD_CHATS_KEY, secret=page_secret())


def browser_memory(value: Any) -> tuple[str, str]:
    """The browser's id and the chat it showed last; a new id where it has none (or one that is
    not an id: the person at the browser can write anything there). Without logins the id is
    what keeps one browser's chats from another's, so it is random and long."""
    value = value if isinstance(value, dict) else {}
    browser, current = value.get("id"), value.get("current")
    if not (isinstance(browser, str) and BROWSER_ID.fullmatch(browser)):
        browser = uuid.uuid4().hex
    return browser, current if isinstance(current, str) else ""
