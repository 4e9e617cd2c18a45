"""What the Tools panel offers as the page opens (and on Refresh): the tools that run here now,
built-in and those of the MCP servers, and each server's state, why where it is not ready. The
servers connect in the background, and their tools change while the app runs."""

from __future__ import annotations

from typing import Any

import gradio as gr

from tools import ToolCatalog

from .inert_markdown import inert


def offered_tools(catalog: ToolCatalog) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The run_tools checkboxes' choices, ``catalog``'s tools, the servers' list, and its Refresh
    button (those two hidden without servers)."""
    statuses = catalog.server_statuses()
    lines = [f"- **{inert(status.name)}**: {inert(status.summary()).replace('*', '∗')}" for status in statuses]
    servers = "MCP servers (their tools are named server\\_\\_tool):\n" + "\n".join(lines)
    return gr.update(choices=list(catalog.tools())), gr.update(value=servers, visible=bool(statuses)), gr.update(visible=bool(statuses))
