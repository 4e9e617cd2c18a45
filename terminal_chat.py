"""The terminal chat: streams replies, keeps the history, `clear` and `exit` commands.

Ctrl-C while a reply is being written stops it and returns to the prompt; Ctrl-C at the prompt quits.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from engines import ChatError, ChatModel, ChatRequest, ReplyChunk, Response

HELP = "Type a message. Commands: clear (forget the conversation), exit (quit). Ctrl-C stops a reply; at the prompt it quits."


def run_terminal_chat(settings: dict[str, Any], system: str | None = None, stdin=sys.stdin, stdout=sys.stdout) -> None:
    def say(text: str = "", end: str = "\n") -> None:
        stdout.write(text + end)
        stdout.flush()

    # Started in the background of a script (`cmd &`), a process inherits SIGINT ignored, and
    # Python then leaves it so: Ctrl-C would neither stop a reply nor quit.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    say("Loading the model…")
    with ChatModel(settings, progress=lambda fraction, message: say(message)) as model:
        why = f" ({model.backend_reason})" if model.backend_reason else ""
        say(f"Ready: {model.display_name} on {model.backend}{why}. {HELP}")
        history: list[dict[str, Any]] = []
        try:
            while (query := _ask(stdin, say)) is not None:
                if query == "clear":
                    history = []
                    say("History cleared.")
                    continue
                history.append({"role": "user", "content": query})
                say("Assistant: ", end="")
                try:
                    history.append(_write_reply(model, history, system, say))
                except ChatError as error:
                    history.pop()
                    say(f"\nerror: {error}")
        except KeyboardInterrupt:  # Ctrl-C anywhere but in a reply: quit
            say()


def _ask(stdin, say) -> str | None:
    """The next message typed, or None for exit (the command, or the input's end)."""
    while True:
        say("\nUser: ", end="")
        line = stdin.readline()
        query = line.strip()
        if not line or query == "exit":
            return None
        if query:
            return query


def _write_reply(model: ChatModel, history: list[dict[str, Any]], system: str | None, say) -> dict[str, Any]:
    """Stream one reply (reasoning after "[thinking]", tool calls on their own lines) and return
    it as the assistant message to keep; Ctrl-C keeps what was written so far."""
    content, thinking = "", False
    message: dict[str, Any] = {"role": "assistant"}
    try:
        for item in model.stream_reply(ChatRequest.build(history, system=system)):
            if isinstance(item, Response):
                for call in item.parts.tool_calls:
                    message.setdefault("tool_calls", []).append(call.for_template())
                    say(f"\n[tool call] {call.name}({call.arguments})", end="")
            elif not isinstance(item, ReplyChunk):  # a token's logprobs, where the model's defaults ask for them
                continue
            elif item.kind == "reasoning":
                say(item.text if thinking else f"[thinking] {item.text}", end="")
                thinking = True
            elif item.kind == "content":
                say(f"\n{item.text}" if thinking else item.text, end="")
                content, thinking = content + item.text, False
    except KeyboardInterrupt:
        say(" [stopped]", end="")
    say()
    return {**message, "content": content}
