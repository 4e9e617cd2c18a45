"""The chat core's notices (chat/notices.py) as the page shows them: a toast in the user's language."""

from __future__ import annotations

import gradio as gr

from chat.notices import Notice

from .languages import said


def toast(notice: Notice) -> None:
    """Show ``notice`` in the page of the event being handled (from its thread, or a thread it started)."""
    shown = gr.Info if notice.level == "info" else gr.Warning
    shown(said(notice.key, **notice.values))
