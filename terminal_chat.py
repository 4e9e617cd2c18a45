"""The terminal chat: streams replies, keeps the history, `clear` and `exit` commands."""

from __future__ import annotations

import sys
from typing import Any

from engines import ChatError, ChatModel

HELP = "Type a message. Commands: clear (forget the conversation), exit (quit)."


def run_terminal_chat(settings: dict[str, Any], system: str | None = None, stdin=sys.stdin, stdout=sys.stdout) -> None:
    def say(text: str = "", end: str = "\n") -> None:
        stdout.write(text + end)
        stdout.flush()

    say("Loading the model…")
    with ChatModel(settings, progress=lambda fraction, message: say(message)) as model:
        say(f"Ready: {model.model_args.display_name} on {model.model_args.infer_backend}. {HELP}")
        history: list[dict[str, str]] = []
        while True:
            say("\nUser: ", end="")
            line = stdin.readline()
            if not line:
                break
            query = line.strip()
            if query == "exit":
                break
            if query == "clear":
                history = []
                say("History cleared.")
                continue
            if not query:
                continue
            history.append({"role": "user", "content": query})
            say("Assistant: ", end="")
            reply = ""
            try:
                for piece in model.stream_chat(history, system=system):
                    reply += piece
                    say(piece, end="")
            except ChatError as error:
                history.pop()
                say(f"\nerror: {error}")
                continue
            except KeyboardInterrupt:
                say(" [stopped]")
            say()
            history.append({"role": "assistant", "content": reply})
