"""Splitting a model's reply into reasoning, content and tool calls, whole or as it streams.

Tool calls are read in the formats of the common chat templates:
- Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call
  (also what our fallback prompt asks of models whose template ignores tools);
- Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``;
- Llama 3: the whole reply is ``{"name": ..., "parameters": {...}}`` (several joined by ``;``),
  optionally after ``<|python_tag|>``. A Mistral reply whose ``[TOOL_CALLS]`` special token was
  skipped in decoding looks the same (a bare JSON list) and is read the same way.
Reasoning is what a model writes inside ``<think>...</think>`` before its answer.

A reply that looks like a tool call but does not parse is returned as plain content: text is
never lost.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
HERMES_OPEN = "<tool_call>"
MISTRAL_MARKER = "[TOOL_CALLS]"
LLAMA_PYTHON_TAG = "<|python_tag|>"
TOOL_MARKERS = (HERMES_OPEN, MISTRAL_MARKER, LLAMA_PYTHON_TAG)
_HERMES_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


@dataclass
class ParsedToolCall:
    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")


def parse_tool_calls(text: str) -> list[ParsedToolCall]:
    """The tool calls that ``text`` (starting at a tool-call marker or a JSON value) holds, or []."""
    stripped = text.strip()
    try:
        if stripped.startswith(HERMES_OPEN):
            return [_call(json.loads(body)) for body in _HERMES_BLOCK.findall(stripped)]
        for marker in (MISTRAL_MARKER, LLAMA_PYTHON_TAG):
            if stripped.startswith(marker):
                return _json_calls(stripped[len(marker):])
        return _json_calls(stripped)
    except (ValueError, TypeError, KeyError):
        return []


def _json_calls(text: str) -> list[ParsedToolCall]:
    """One JSON object, a JSON list of them, or objects separated by ';' (Llama 3.2)."""
    decoder, values, position = json.JSONDecoder(), [], 0
    text = text.strip()
    while position < len(text):
        value, position = decoder.raw_decode(text, position)
        values.extend(value if isinstance(value, list) else [value])
        position = len(text) - len(text[position:].lstrip().removeprefix(";").lstrip())
    return [_call(value) for value in values]


def _call(value: Any) -> ParsedToolCall:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ValueError("not a tool call")
    arguments = value.get("arguments", value.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ParsedToolCall(name=value["name"], arguments=arguments)


Kind = Literal["reasoning", "content"]


@dataclass
class Reply:
    reasoning: str | None
    content: str | None
    tool_calls: list[ParsedToolCall]


class ReplySplitter:
    """Feeds on the reply's text piece by piece and gives back (kind, text) pieces to send.

    Text that could be the start of a marker is held back until it is clear. From a tool-call
    marker on (or from the start, when the reply opens with JSON) the text is held until the
    end, where it becomes tool calls if it parses, and content otherwise.
    ``in_reasoning``: the prompt already opened ``<think>``, so the reply starts inside it.
    """

    def __init__(self, parse_tools: bool, in_reasoning: bool = False) -> None:
        self._parse_tools = parse_tools
        self._state: Literal["start", "reasoning", "content", "tools"] = "reasoning" if in_reasoning else "start"
        self._held = ""
        self._content_started = False
        self._after_reasoning = False
        self.reasoning = ""
        self.content = ""

    def push(self, text: str) -> list[tuple[Kind, str]]:
        self._held += text
        out: list[tuple[Kind, str]] = []
        while True:
            before = (self._state, len(self._held))
            self._step(out)
            if (self._state, len(self._held)) == before:
                return out

    def finish(self) -> tuple[list[tuple[Kind, str]], list[ParsedToolCall]]:
        """The text still held, and the tool calls, once the reply is complete."""
        out: list[tuple[Kind, str]] = []
        held, self._held = self._held, ""
        calls = parse_tool_calls(held) if self._state == "tools" else []
        if held and not calls:
            self._emit(out, "reasoning" if self._state == "reasoning" else "content", held)
        return out, calls

    def reply(self, calls: list[ParsedToolCall]) -> Reply:
        return Reply(reasoning=self.reasoning or None, content=self.content or None, tool_calls=calls)

    def _step(self, out: list[tuple[Kind, str]]) -> None:
        held = self._held
        if self._state == "start":
            opening = held.lstrip()
            if opening.startswith(THINK_OPEN):
                self._held, self._state = opening[len(THINK_OPEN):], "reasoning"
            elif opening and not THINK_OPEN.startswith(opening):
                self._state = "content"
        elif self._state == "reasoning":
            end = held.find(THINK_CLOSE)
            if end != -1:
                self._emit(out, "reasoning", held[:end])
                self._held, self._state = held[end + len(THINK_CLOSE):], "content"
                self._after_reasoning = True
            else:
                keep = _partial_marker_length(held, (THINK_CLOSE,))
                self._emit(out, "reasoning", held[: len(held) - keep])
                self._held = held[len(held) - keep:]
        elif self._state == "content" and held:
            if not self._parse_tools:
                self._emit(out, "content", held)
                self._held = ""
                return
            if not self._content_started:
                opening = held.lstrip()
                if not opening:
                    return
                if opening[0] in "{[":
                    self._state = "tools"
                    return
            starts = [index for index in (held.find(marker) for marker in TOOL_MARKERS) if index != -1]
            if starts:
                self._emit(out, "content", held[: min(starts)])
                self._held, self._state = held[min(starts):], "tools"
                return
            keep = _partial_marker_length(held, TOOL_MARKERS)
            self._emit(out, "content", held[: len(held) - keep])
            self._held = held[len(held) - keep:]

    def _emit(self, out: list[tuple[Kind, str]], kind: Kind, text: str) -> None:
        if kind == "content" and self._after_reasoning and not self._content_started:
            text = text.lstrip()  # the blank lines a model puts after </think>
        if not text:
            return
        if kind == "content":
            self._content_started = True
            self.content += text
        else:
            self.reasoning += text
        out.append((kind, text))


def _partial_marker_length(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest end of ``text`` that some marker starts with."""
    for length in range(min(max(map(len, markers)) - 1, len(text)), 0, -1):
        if any(marker.startswith(text[-length:]) for marker in markers):
            return length
    return 0


def split_reply(text: str, parse_tools: bool, in_reasoning: bool = False) -> Reply:
    """The whole reply at once, read exactly as the streaming path reads it."""
    splitter = ReplySplitter(parse_tools, in_reasoning)
    splitter.push(text)
    _, calls = splitter.finish()
    return splitter.reply(calls)
