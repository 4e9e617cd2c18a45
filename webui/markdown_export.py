"""A conversation as a Markdown file, to read (it is not imported back: Export JSON is for that).

Each message is a section headed by its role; reasoning is a collapsed "Thinking" block, tool
calls their name and JSON arguments, documents a collapsed block of their text. Images are
embedded as data: URLs, so the file shows them on any machine; videos and audio are only named
(with their size), since Markdown viewers do not play data: URLs and such files would make the
text unwieldy: the JSON export keeps them. It holds the branch the chat shows, and says so where
its messages have other versions (the JSON export keeps those too).
"""

from __future__ import annotations

import os
import re

from chat.conversation_file import BoundedFile, embed
from chat.turns import SavedToolCall, Turn, media_kind
from engines import ChatError
from limits import size_text
from store import MessageTree

from .chat_view import fenced

ROLES = {"user": "User", "assistant": "Assistant"}


def write_markdown(path: str, tree: MessageTree[Turn], system_prompt: str, limit: int) -> None:
    """The branch ``tree`` shows as Markdown at ``path``, written as it is built, at most ``limit``
    bytes (with its images); beyond that, or where an image is gone, a ChatError that says so."""
    shown = tree.branch()
    try:
        with open(path, "wb") as file:
            out = BoundedFile(file, limit)
            out.write("# Conversation\n")
            others = sum(len(tree.versions(place)) > 1 for place in shown)
            if others:
                out.write(f"\n*The branch shown only: {others} of its messages {'has' if others == 1 else 'have'} other versions "
                          "(regenerated or edited), not included here; Export JSON keeps them.*\n")
            if system_prompt:
                out.write(f"\n## System prompt\n\n{system_prompt}\n")
            for place in shown:
                _write_turn(tree.messages[place], out)
    except OSError as error:
        raise ChatError(f"The file could not be written on the server ({error.strerror}).") from None


def _write_turn(turn: Turn, out: BoundedFile) -> None:
    if turn.summary is not None:
        out.write(f"\n## {turn.summary.title()}\n\n*{turn.summary.tokens()}; Export JSON keeps the messages it replaced.*\n\n")
        _write_answer("", turn.content, [], out)
        return
    out.write(f"\n## {ROLES[turn.role]}\n\n")
    for step in turn.steps:
        _write_answer(step.reasoning, step.content, step.tool_calls, out)
    _write_answer(turn.reasoning, "", [], out)
    for medium in turn.files:
        name = _link_text(os.path.basename(medium))
        if media_kind(medium) == "image":
            out.write(f"![{name}](")
            embed(medium, out)
            out.write(")\n\n")
        else:
            size = os.path.getsize(medium) if os.path.exists(medium) else None
            out.write(f"📎 {media_kind(medium)}: {name}" + (f" ({size_text(size)}, not embedded)" if size is not None else " (missing)") + "\n\n")
    for name in turn.missing_files:
        out.write(f"📎 {_link_text(name)} (missing on the server)\n\n")
    for document in turn.documents:
        out.write(f"<details><summary>📄 {_link_text(document.name)} ({document.summary})</summary>\n\n{fenced(document.text)}\n\n</details>\n\n")
    _write_answer("", turn.content, turn.tool_calls, out)
    if turn.step_limit:
        out.write(f"*⏹ Step limit reached: the model called tools in {answers(turn.step_limit)}; its last calls did not run.*\n\n")
    if turn.error:
        out.write(f"> ⚠ {turn.error}\n\n")
    if turn.stats is not None:
        out.write(f"*{turn.stats.line()}*\n")
    elif turn.stopped:
        out.write("*■ stopped*\n")


def _write_answer(reasoning: str, content: str, calls: list[SavedToolCall], out: BoundedFile) -> None:
    """One answer of the model: its reasoning, collapsed, its text, and its tool calls with the
    result of each that ran."""
    if reasoning:
        out.write(f"<details><summary>Thinking</summary>\n\n{reasoning}\n\n</details>\n\n")
    if content:
        out.write(f"{content}\n\n")
    for call in calls:
        out.write(f"**Tool call** `{call.name}`:\n\n{fenced(call.arguments, 'json')}\n\n")
        if call.error is not None:
            out.write(f"**Error** ({call.seconds or 0:.2f} s):\n\n{fenced(call.error)}\n\n")
        elif call.result is not None:
            out.write(f"**Result** ({call.seconds or 0:.2f} s):\n\n{fenced(call.result)}\n\n")


def _link_text(name: str) -> str:
    return re.sub(r"[\[\]()<>*_`\\\n]", "_", name)


def answers(count: int) -> str:
    return f"{count} answer{'' if count == 1 else 's'}"
