"""The question before a tool call runs (chat/approval.py), as the page asks it: a line under the
call with its choices, Allow once, Always in this chat, Deny.

The line is HTML in the Chatbot, as the ‹k/n› arrows are (webui/versions.py): each choice is a
span with a class, and a script the page runs once puts the choice and the question's key into a
hidden field, whose change event answers the question the reply waits on."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from chat.approval import CHOICES

from .languages import said

PICK_ID = "approval-pick"


def question_line(key: str, names: Sequence[str]) -> dict[str, Any]:
    """The Chatbot message that asks about the calls of ``names``, its choices under it."""
    choices = " · ".join(f'<span class="approve-{choice} q-{key}">{said(f"approval.{choice}")}</span>' for choice in CHOICES)
    asked = said("approval.run", names=html.escape(", ".join(dict.fromkeys(names))))
    return {"role": "assistant", "content": f'<span class="tool-approval">{asked} {choices}</span>'}


# Runs once as the page loads (demo.load's js).
APPROVAL_CHOICES = """() => {
    document.addEventListener("click", (event) => {
        const choice = event.target instanceof Element ? event.target.closest("#chatbot .tool-approval [class*=approve-]") : null;
        const field = document.querySelector("#%s textarea, #%s input");
        if (!choice || !field) return;
        const names = [...choice.classList];
        const picked = names.find((name) => name.startsWith("approve-")).slice(8);
        const key = names.find((name) => name.startsWith("q-")).slice(2);
        field.value = `${picked} ${key} ${Date.now()}`;
        field.dispatchEvent(new Event("input", {bubbles: true}));
    });
}""" % (PICK_ID, PICK_ID)
