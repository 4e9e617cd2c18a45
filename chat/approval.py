"""Asking the user before a tool call runs (the agent loop's Approval): a call of a tool that may
change something (not marked read-only), or of any tool where the chat asks before every call,
waits for the user's say: once, always in this chat, or deny. The page shows the question and
hands the choice back (webui/tool_approval.py)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engines.prompt.reply_parser import ToolCall
from tools import Tool

CHOICES = ("once", "always", "deny")


@dataclass
class Question:
    """The calls a reply waits on the user's say about, and where the answer goes."""

    key: str
    answer: asyncio.Future


class ChatApproval:
    """The Approval of one reply in ``session`` (a ChatSession): ``every_call`` asks about
    read-only tools too; a tool allowed always in the session's chat is not asked about again."""

    def __init__(self, session: Any, every_call: bool) -> None:
        self.session = session
        self.every_call = every_call

    def asks(self, tool: Tool) -> bool:
        return tool.asks_first(self.every_call) and tool.name not in self.session.always_allowed.get(self.session.chat_id, ())

    async def decide(self, calls: Sequence[ToolCall]) -> Mapping[str, bool]:
        question = Question(question_key([call.id for call in calls]), asyncio.get_running_loop().create_future())
        with self.session.reply.asking(question):
            choice = await question.answer
        if choice == "always":
            self.session.always_allowed.setdefault(self.session.chat_id, set()).update(call.name for call in calls)
        return {call.id: choice != "deny" for call in calls}


def answer(session: Any, picked: str) -> None:
    """The user's say, ``"<choice> <key>"``, for the question it names if the reply still waits on it."""
    choice, key, *_ = (str(picked or "").split() or [""]) + ["", ""]
    question = session.reply.question
    if choice in CHOICES and question is not None and question.key == key:
        settle(question.answer, choice)


def settle(waiting: asyncio.Future, value: Any) -> None:
    """Give what a reply waits on its ``value`` from the thread of any page event (once: a second answer is let be)."""
    waiting.get_loop().call_soon_threadsafe(lambda: waiting.done() or waiting.set_result(value))


def question_key(call_ids: Sequence[str]) -> str:
    """A key for the question about these calls that fits a class name (call ids are the model's)."""
    return hashlib.sha256("\n".join(call_ids).encode()).hexdigest()[:16]
