"""The question before a tool call runs (chat/approval.py), as the page asks it: a line under the
call with its choices, Allow once, Always in this chat, Deny.

The line is HTML in the Chatbot, as the ‹k/n› arrows are (webui/versions.py): each choice is a
span with a class, which the page's bridge (webui/page_bridge.py) sends when it is clicked, with
the question's key, to answer the question the reply waits on."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from chat.approval import CHOICES

from .languages import said


def question_line(key: str, names: Sequence[str]) -> dict[str, Any]:
    """The Chatbot message that asks about the calls of ``names``, its choices under it."""
    choices = " · ".join(f'<span class="approve-{choice} q-{key}">{said(f"approval.{choice}")}</span>' for choice in CHOICES)
    asked = said("approval.run", names=html.escape(", ".join(dict.fromkeys(names))))
    return {"role": "assistant", "content": f'<span class="tool-approval">{asked} {choices}</span>'}


# A click of a choice, for the page's bridge (webui/page_bridge.py): the choice and the question's key.
CHOICE_CLICK = ("#chatbot .tool-approval [class*=approve-]", """(choice) => {
    const names = [...choice.classList];
    return `${names.find((name) => name.startsWith("approve-")).slice(8)} ${names.find((name) => name.startsWith("q-")).slice(2)}`;
}""")
