"""The terminal chat: streams replies, keeps the history, `clear` and `exit` commands. The tools
chosen with --run-tools run when a reply calls them, and the model goes on with their results; a
call of a tool that may change something (any, with --ask-every-call) asks first: y (once), a
(always in this chat), n (the model is told it was denied).

Ctrl-C while a reply is being written stops it and returns to the prompt; Ctrl-C at the prompt quits.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from engines import ChatError, ChatModel, ChatRequest, ReplyChunk, Response, ToolCall
from engines.compaction import Compacting, Compaction
from engines.context_settings import ContextSettings
from tools import ApprovalAsked, StepLimitReached, Tool, ToolCatalog, ToolResult, ToolSettings, ToolsRunning, stream_reply_with_tools

HELP = "Type a message. Commands: clear (forget the conversation), exit (quit). Ctrl-C stops a reply; at the prompt it quits."


def run_terminal_chat(settings: dict[str, Any], system: str | None = None, stdin=sys.stdin, stdout=sys.stdout,
                      tools: ToolSettings = ToolSettings(), context: ContextSettings = ContextSettings(),
                      catalog: ToolCatalog | None = None) -> None:
    """Chat at the terminal with the model of ``settings``; ``tools`` run of ``catalog``'s (the
    app's, with its MCP servers'; without one, the built-in tools alone)."""
    catalog = catalog if catalog is not None else ToolCatalog()

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
        approval = TerminalApproval(tools.ask_every_call, stdin, say)
        try:
            while (query := _ask(stdin, say)) is not None:
                if query == "clear":
                    history, approval.always = [], set()
                    say("History cleared.")
                    continue
                history.append({"role": "user", "content": query})
                say("Assistant: ", end="")
                try:
                    history += _write_reply(model, history, system, tools, catalog, context, approval, say)
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


class TerminalApproval:
    """The agent loop's Approval at the terminal. The question is asked as the reply's
    ApprovalAsked arrives, on the main thread (where Ctrl-C stops the reply), and ``decide``, which
    the loop calls next, hands on what was answered."""

    def __init__(self, every_call: bool, stdin, say) -> None:
        self.every_call = every_call
        self.stdin, self.say = stdin, say
        self.always: set[str] = set()
        self.choice = "n"

    def asks(self, tool: Tool) -> bool:
        return tool.asks_first(self.every_call) and tool.name not in self.always

    def ask(self, calls: Sequence[ToolCall]) -> None:
        names = ", ".join(dict.fromkeys(call.name for call in calls))
        self.say(f"\n[asks] run {names}? y: once, a: always in this chat, n: no > ", end="")
        self.choice = (self.stdin.readline().strip().lower() or "n")[0]

    async def decide(self, calls: Sequence[ToolCall]) -> Mapping[str, bool]:
        if self.choice == "a":
            self.always.update(call.name for call in calls)
        return {call.id: self.choice in ("y", "a") for call in calls}


def _write_reply(model: ChatModel, history: list[dict[str, Any]], system: str | None, tools: ToolSettings, catalog: ToolCatalog,
                 context: ContextSettings, approval: TerminalApproval, say) -> list[dict[str, Any]]:
    """Stream one reply (reasoning after "[thinking]", tool calls, and the results of those that
    ran, on their own lines) and return the messages to keep: each answer with its calls, the
    results, and the last answer; Ctrl-C keeps what was written so far. Where the conversation
    was compacted to fit the context, ``history`` becomes what the model read, said in a line."""
    running = tools.tools(catalog)
    request = ChatRequest.build(history, system=system, tools=[tool.schema() for tool in running.values()] or None,
                                tool_choice=tools.tool_choice, context_policy=context.context_policy)
    content, thinking = "", False
    kept: list[dict[str, Any]] = []
    message: dict[str, Any] = {"role": "assistant"}
    try:
        for item in stream_reply_with_tools(model, request, running, tools.tool_steps, progress=True, approval=approval):
            if isinstance(item, Compacting):
                say(f"[compacting the conversation to fit the model's context: {item.replacing} earlier messages…] ", end="")
            elif isinstance(item, Compaction):
                # What the model read, this reply's answers and results so far among them.
                history[:], kept = item.messages[1:] if system else item.messages, []
                say(f"[compacted] {item.note()}\n", end="")
            elif isinstance(item, Response):
                for call in item.parts.tool_calls:
                    message.setdefault("tool_calls", []).append(call.for_template())
                    say(f"\n[tool call] {call.name}({call.arguments})", end="")
            elif isinstance(item, ToolsRunning):  # this answer's calls run: the next answer starts after their results
                kept.append({**message, "content": content})
                content, message = "", {"role": "assistant"}
            elif isinstance(item, ApprovalAsked):
                approval.ask(item.calls)
            elif isinstance(item, ToolResult):
                kept.append(item.for_template())
                say(f"\n[{item.call.name} failed] {item.error}" if item.error is not None else f"\n[{item.call.name}] {item.content}", end="")
                say("\n", end="")
            elif isinstance(item, StepLimitReached):
                say(f"\n[step limit] the model called tools {item.steps} time{'' if item.steps == 1 else 's'}, the most allowed (--tool-steps); "
                    "its last calls did not run.", end="")
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
    return [*kept, {**message, "content": content}]
