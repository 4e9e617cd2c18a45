"""Replies of the Responses API shown in their login's page as a chat, where the operator wants it
(--responses-in-page): each reply kept is written into the chat of its chain as it is kept, in the
page's shape, so the page lists, opens, searches and continues it as any other chat.

A chain is one chat: a reply goes after the reply it went on from (``previous_response_id``); two
replies that went on from the same one are two versions there (‹1/2›), as a regenerated reply is.
Where the reply it went on from no longer shows (its chat or its messages deleted in the page),
the chain's replies that no longer show are written again, into a new chat.

The page's shape is not the API's: the page keeps a reply's tool calls with their results in the
reply (its answers before its last as ``steps``: chat/turns.py Turn), where the API has the
results as messages of their own, in the request after the call. A reply that answers a call of
the one before it is shown as a new version of that one, with the call's result in it.

Deleting a reply (DELETE /v1/responses/{id}) takes its messages out of the chat, with whatever
follows them (the later replies of its chain, which can no longer be gone on from either, and what
was written after them in the page); a chat left with no message is deleted."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from .message_changes import MessageChanges
from .tables import ApiResponse, Chat, Message

# A chat's title: its first words, as the page's own titles (chat/keeper.py title_of).
TITLE_LENGTH = 60
UNTITLED = "Responses API"

# Writes a chat's messages in a session (ChatStore's write): owner, chat id, the changes, and
# the title and system prompt of a chat it makes; the ids of the messages added.
ChatWrite = Callable[[Session, str, str, MessageChanges, dict[str, str]], list[int]]


class ResponsesInPage:
    def __init__(self, write: ChatWrite) -> None:
        self.write = write

    def show(self, session: Session, row: ApiResponse) -> None:
        """Write ``row``'s messages into its chain's chat (and those of its chain that no longer
        show). Only a login's: without logins each browser has chats of its own, and an API
        client none (its replies are its address's)."""
        if not row.owner.startswith("login:"):
            return
        unshown = [row]
        while unshown[-1].previous is not None:
            before = session.get(ApiResponse, unshown[-1].previous)
            if before is None or before.owner != row.owner or _shown_reply(session, before) is not None:
                break
            unshown.append(before)
        for each in reversed(unshown):
            self._place(session, each)

    def _place(self, session: Session, row: ApiResponse) -> None:
        previous = session.get(ApiResponse, row.previous) if row.previous is not None else None
        reply = _shown_reply(session, previous) if previous is not None else None
        before = {**reply.data, "role": reply.role, "content": reply.content} if reply is not None else None
        turns, replaces = page_turns(row.messages, before)
        if not turns:
            return
        if reply is None:
            chat_id, after = uuid.uuid4().hex, None
        else:
            chat_id, after = previous.chat_id, reply.parent if replaces else reply.id
        created = {"title": _title_of(turns), "system": _system(row)}
        ids = self.write(session, row.owner, chat_id, MessageChanges.line(turns, after), created)
        row.chat_id, row.first_message, row.last_message = chat_id, ids[0], ids[-1]

    def hide(self, session: Session, row: ApiResponse) -> None:
        """Take ``row``'s messages, and what follows them, out of its chat; the chat too, where nothing is left."""
        first = session.get(Message, row.first_message) if row.first_message is not None else None
        chat = session.get(Chat, row.chat_id) if row.chat_id is not None else None
        if first is None or chat is None or first.chat_id != chat.id or chat.owner != row.owner:
            return
        self.write(session, row.owner, chat.id, MessageChanges([], [], {}, [first.id]), {})
        if not session.scalar(select(exists().where(Message.chat_id == chat.id))) and chat.deleted is None:
            chat.deleted = time.time()


def _shown_reply(session: Session, row: ApiResponse) -> Message | None:
    """The message of ``row``'s reply in its chat, where the page still shows it."""
    if row.last_message is None:
        return None
    return session.scalar(select(Message).join(Chat).where(Message.id == row.last_message, Chat.id == row.chat_id,
                                                           Chat.owner == row.owner, Chat.deleted.is_(None)))


def page_turns(messages: list[dict[str, Any]], before: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], bool]:
    """A reply's messages (its input's and its reply, as Chat Completions reads them) as the page
    keeps them, and whether the first stands in place of ``before``: the reply they go on from,
    as the page keeps it, where they begin with the results of its calls."""
    continues = bool(before and before.get("tool_calls") and messages and messages[0].get("role") in ("tool", "assistant"))
    # A copy: the results are written into its calls, and ``before`` is its row's own.
    turns: list[dict[str, Any]] = [copy.deepcopy({key: value for key, value in before.items() if key != "stats"})] if continues else []
    for message in messages:
        role = message.get("role")
        if role == "tool" and turns and turns[-1]["role"] == "assistant":
            for call in turns[-1].get("tool_calls", ()):
                if call["id"] == message.get("tool_call_id"):
                    call["result"] = _text(message.get("content"))
        elif role == "assistant":
            turns.append(_reply(message, turns.pop() if turns and turns[-1]["role"] == "assistant" and turns[-1].get("tool_calls") else None))
        elif role == "user":
            turns.append({"role": "user", "content": _text(message.get("content")), "state": "done"})
    return turns, continues


def _reply(message: dict[str, Any], called: dict[str, Any] | None) -> dict[str, Any]:
    """An assistant message as the page's reply; ``called``: the page's reply before it, whose
    calls it answers, which becomes its step."""
    reply: dict[str, Any] = {"role": "assistant", "content": _text(message.get("content")), "state": "done"}
    if message.get("reasoning_content"):
        reply["reasoning"] = message["reasoning_content"]
    if message.get("tool_calls"):
        reply["tool_calls"] = [{"id": call["id"], "name": call["function"]["name"], "arguments": call["function"]["arguments"]}
                               for call in message["tool_calls"]]
    if called is not None:
        step = {key: called[key] for key in ("reasoning", "content", "tool_calls") if called.get(key)}
        reply["steps"] = [*called.get("steps", ()), step]
    return reply


def _text(content: Any) -> str:
    """A message's text; what the page cannot show of it (an image, a file sent as data) named."""
    if not isinstance(content, list):
        return content or ""
    texts = []
    for part in content:
        kind = part.get("type")
        if kind == "text":
            texts.append(part.get("text", ""))
        elif kind == "image_url":
            texts.append("[image]")
        else:
            name = (part.get("file") or {}).get("filename")
            texts.append(f"[file {name}]" if name else "[file]")
    return "\n\n".join(text for text in texts if text)


def _system(row: ApiResponse) -> str:
    """The system prompt of a chat a reply starts: its request's instructions and system messages."""
    instructions = row.response.get("instructions")
    said = [instructions if isinstance(instructions, str) else ""]
    said += [_text(message.get("content")) for message in row.messages if message.get("role") == "system"]
    return "\n\n".join(text for text in said if text)


def _title_of(turns: list[dict[str, Any]]) -> str:
    first = next((turn["content"] for turn in turns if turn["role"] == "user"), "")
    text = " ".join(first.split()) or UNTITLED
    return text if len(text) <= TITLE_LENGTH else text[: TITLE_LENGTH - 1].rstrip() + "…"
