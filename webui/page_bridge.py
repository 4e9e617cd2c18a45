"""The one way the page's own scripts hand the server what a person did in the chat that no Gradio
component carries: a ‹k/n› arrow pressed (webui/versions.py), a say about a tool call
(webui/tool_approval.py), what a Python block printed when its ▶ Run was pressed
(webui/python_in_browser.py).

A script sends with ``anychatBridge.send(kind, value)``, which writes ``{"kind", "value", "at"}``
as JSON into one hidden field (``at``, the time, so that each send changes it); a click on an
element of the Chatbot is sent by the bridge itself, for each kind of click declared to it
(``bridge_script``). The field's change events (webui/chat_tab.py) each read the kinds they take
and let the others be: a say or a run's output at once, to the reply that waits on it; a version
in turn with the chat's other changes."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

BRIDGE_ID = "page-bridge"


def bridge_script(clicks: Mapping[str, tuple[str, str]]) -> str:
    """The script that sets the bridge up as the page loads (demo.load's js): ``anychatBridge.send``,
    and for each kind of ``clicks`` (kind: the CSS selector of what is clicked, and a JS function
    of the element clicked that gives the value to send, or null to send nothing), a click of it sent."""
    handlers = ",\n        ".join(f"[{json.dumps(kind)}, {json.dumps(selector)}, {value_of}]" for kind, (selector, value_of) in clicks.items())
    return """() => {
    const bridge = {
        send(kind, value) {
            const field = document.querySelector("#%(id)s textarea, #%(id)s input");
            if (!field) return;
            field.value = JSON.stringify({ kind, value, at: Date.now() });
            field.dispatchEvent(new Event("input", { bubbles: true }));
        },
    };
    const clicks = [
        %(clicks)s
    ];
    document.addEventListener("click", (event) => {
        if (!(event.target instanceof Element)) return;
        for (const [kind, selector, valueOf] of clicks) {
            const clicked = event.target.closest(selector);
            const value = clicked ? valueOf(clicked) : null;
            if (value !== null && value !== undefined) bridge.send(kind, value);
        }
    });
    window.anychatBridge = bridge;
}""" % {"id": BRIDGE_ID, "clicks": handlers}


def sent(text: Any, kind: str) -> Any:
    """The value the page's scripts sent in the field's ``text`` where it is of ``kind``; None for
    another kind, or for anything that is not the bridge's."""
    try:
        message = json.loads(str(text or ""))
    except json.JSONDecodeError:
        return None
    return message.get("value") if isinstance(message, dict) and message.get("kind") == kind else None


def taking(kind: str, handler: Callable[[Any, Any], dict[str, Any]]) -> Callable[[Any, str], dict[str, Any]]:
    """``handler`` of a tab's session and a value, as a handler of the bridge's field: run with the
    value where the page's scripts sent one of ``kind``; where they sent another kind, nothing changes."""

    @functools.wraps(handler)
    def taken(session: Any, bridged: str) -> dict[str, Any]:
        value = sent(bridged, kind)
        return {} if value is None else handler(session, value)

    return taken
