"""Where the saved chats live: the browser's localStorage, through gr.BrowserState.

gr.BrowserState encrypts what it stores with a secret of the server's, in the browser (the secret
travels in the page's config, so this hides the chats from a casual look, not from the person
at the browser). Its default secret and key are random per start, which would make every chat
unreadable after a restart; both are fixed here, the secret made once in the app's cache.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

import gradio as gr

from engines.model_files.cache import cache_dir

STORAGE_KEY = "anychat-saved-chats"
SECRET_FILE = "browser-state-secret"


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


def saved_chats_storage() -> gr.BrowserState:
    return gr.BrowserState(None, storage_key=STORAGE_KEY, secret=page_secret())
