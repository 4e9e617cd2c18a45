"""Split a raw assistant reply into what the page shows apart: thinking, tool calls, the answer."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


@dataclass(frozen=True)
class ReplyPart:
    kind: Literal["thinking", "tool_call", "answer"]
    text: str
    finished: bool = True


def split_reply(raw: str) -> list[ReplyPart]:
    """Parts in the order they appear. Reasoning templates often open ``<think>`` in the prompt,
    so a lone ``</think>`` means everything before it was thinking; an unclosed block is still
    being written (``finished=False``)."""
    parts: list[ReplyPart] = []
    rest = raw
    opened = rest.find(THINK_OPEN)
    closed = rest.find(THINK_CLOSE)
    if closed != -1 and (opened == -1 or closed < opened):
        parts.append(ReplyPart("thinking", rest[:closed].strip()))
        rest = rest[closed + len(THINK_CLOSE):]
    elif opened != -1 and not rest[:opened].strip():
        rest = rest[opened + len(THINK_OPEN):]
        closed = rest.find(THINK_CLOSE)
        if closed == -1:
            return [ReplyPart("thinking", rest.strip(), finished=False)]
        parts.append(ReplyPart("thinking", rest[:closed].strip()))
        rest = rest[closed + len(THINK_CLOSE):]
    answer_pieces = []
    position = 0
    for match in TOOL_CALL.finditer(rest):
        answer_pieces.append(rest[position:match.start()])
        parts.append(ReplyPart("tool_call", match.group(1).strip(), finished=match.group(0).endswith("</tool_call>")))
        position = match.end()
    answer_pieces.append(rest[position:])
    answer = "".join(answer_pieces).strip()
    if answer:
        parts.append(ReplyPart("answer", answer))
    return parts


def describe_tool_call(text: str) -> tuple[str, str]:
    """A title and a readable body for one tool call (its JSON pretty-printed when it parses)."""
    try:
        call = json.loads(text)
    except json.JSONDecodeError:
        return "⚙ Tool call", f"```\n{text}\n```"
    if not isinstance(call, dict):
        return "⚙ Tool call", f"```json\n{json.dumps(call, indent=2)}\n```"
    name = call.get("name", "unnamed")
    arguments = call.get("arguments", {})
    return f"⚙ Tool call: {name}", f"```json\n{json.dumps(arguments, indent=2, ensure_ascii=False)}\n```"
