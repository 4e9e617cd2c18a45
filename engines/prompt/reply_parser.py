"""Reading a model's reply as typed parts: reasoning, the answer, and tool calls, whole or as it streams.

Tool calls are read in the formats of the common chat templates:
- Hermes / Qwen: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call
  (also what our fallback prompt asks of models whose template ignores tools);
- Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``;
- Llama 3: the whole reply is ``{"name": ..., "parameters": {...}}`` (several joined by ``;``),
  optionally after ``<|python_tag|>``. A Mistral reply whose ``[TOOL_CALLS]`` special token was
  skipped in decoding looks the same (a bare JSON list) and is read the same way.
Reasoning is what a model writes inside ``<think>...</think>`` before its answer; templates of
reasoning models often open ``<think>`` in the prompt, so the reply starts inside it.

A reply that looks like a tool call but does not parse is returned as plain content: text is
never lost. The page, the API and the terminal chat all read replies through this module. What a
backend receives already typed (a remote server's reasoning and tool calls) is added to the parts
as it is, never read for markers.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from .text_stream import partial_suffix_length

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
HERMES_OPEN = "<tool_call>"
MISTRAL_MARKER = "[TOOL_CALLS]"
LLAMA_PYTHON_TAG = "<|python_tag|>"
TOOL_MARKERS = (HERMES_OPEN, MISTRAL_MARKER, LLAMA_PYTHON_TAG)
_HERMES_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # a JSON object, as text (OpenAI's form)
    id: str = field(default_factory=new_call_id, compare=False)

    def for_template(self) -> dict[str, Any]:
        """The call as an assistant message's ``tool_calls`` entry for a chat template, which
        expects the arguments as a mapping (text that is not JSON stays text)."""
        try:
            arguments = json.loads(self.arguments)
        except json.JSONDecodeError:
            arguments = self.arguments
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": arguments}}


@dataclass(frozen=True)
class ReplyChunk:
    """A piece of a streaming reply. "tool_call" pieces are the text of tool calls being
    written, for display; the calls themselves come whole once the reply is complete (if a
    model's text of them does not parse, it comes again then, as content)."""

    kind: Literal["reasoning", "content", "tool_call"]
    text: str


@dataclass(frozen=True)
class ReplyParts:
    reasoning: str | None = None
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


def parse_tool_calls(text: str) -> list[ToolCall]:
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


def _json_calls(text: str) -> list[ToolCall]:
    """One JSON object, a JSON list of them, or objects separated by ';' (Llama 3.2)."""
    decoder, values, position = json.JSONDecoder(), [], 0
    text = text.strip()
    while position < len(text):
        value, position = decoder.raw_decode(text, position)
        values.extend(value if isinstance(value, list) else [value])
        position = len(text) - len(text[position:].lstrip().removeprefix(";").lstrip())
    return [_call(value) for value in values]


def _call(value: Any) -> ToolCall:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ValueError("not a tool call")
    arguments = value.get("arguments", value.get("parameters", {}))
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return ToolCall(name=value["name"], arguments=arguments)


class ReplyParser:
    """Feeds on the reply's text piece by piece and gives back typed chunks.

    Text that could be the start of a marker is held back until it is clear. From a tool-call
    marker on (or from the start, when the reply opens with JSON) the text is held until the
    end, where it becomes tool calls if it parses, and content otherwise.
    ``parse_tools``: read tool calls at all (only when the request offered tools).
    ``in_reasoning``: the prompt already opened ``<think>``, so the reply starts inside it.
    Reasoning and tool calls a backend received already typed are added beside the text
    (add_reasoning, add_call), so that the parts of a reply still come from one place.
    """

    def __init__(self, parse_tools: bool, in_reasoning: bool = False) -> None:
        self._parse_tools = parse_tools
        self._state: Literal["start", "reasoning", "content", "tools"] = "reasoning" if in_reasoning else "start"
        self._held = ""
        self._tool_text_shown = 0
        self._content_started = False
        self._after_reasoning = False
        self._added_calls: list[ToolCall] = []
        self.reasoning = ""
        self.content = ""

    def push(self, text: str) -> list[ReplyChunk]:
        self._held += text
        out: list[ReplyChunk] = []
        while True:
            before = (self._state, len(self._held))
            self._step(out)
            if (self._state, len(self._held)) == before:
                break
        if self._state == "tools" and len(self._held) > self._tool_text_shown:
            out.append(ReplyChunk("tool_call", self._held[self._tool_text_shown:]))
            self._tool_text_shown = len(self._held)
        return out

    def add_reasoning(self, text: str) -> None:
        """Reasoning the backend received apart from the text (a server's ``reasoning_content``).
        Text that comes after it is the answer, as after ``</think>``."""
        self.reasoning += text
        if self._state == "start":
            self._state, self._after_reasoning = "content", True

    def add_call(self, call: ToolCall) -> None:
        """A tool call the backend received whole (from a server's ``tool_calls``), id and all."""
        self._added_calls.append(call)

    def finish(self) -> tuple[list[ReplyChunk], tuple[ToolCall, ...]]:
        """The text still held, and the tool calls, once the reply is complete."""
        out: list[ReplyChunk] = []
        held, self._held = self._held, ""
        calls = parse_tool_calls(held) if self._state == "tools" else []
        if held and not calls:
            self._emit(out, "reasoning" if self._state == "reasoning" else "content", held)
        return out, (*calls, *self._added_calls)

    def parts(self, tool_calls: tuple[ToolCall, ...]) -> ReplyParts:
        return ReplyParts(reasoning=self.reasoning or None, content=self.content or None, tool_calls=tool_calls)

    def _step(self, out: list[ReplyChunk]) -> None:
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
                keep = partial_suffix_length(held, (THINK_CLOSE,))
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
            keep = partial_suffix_length(held, TOOL_MARKERS)
            self._emit(out, "content", held[: len(held) - keep])
            self._held = held[len(held) - keep:]

    def _emit(self, out: list[ReplyChunk], kind: Literal["reasoning", "content"], text: str) -> None:
        if kind == "content" and self._after_reasoning and not self._content_started:
            text = text.lstrip()  # the blank lines a model puts after </think>
        if not text:
            return
        if kind == "content":
            self._content_started = True
            self.content += text
        else:
            self.reasoning += text
        out.append(ReplyChunk(kind, text))


def parse_reply(text: str, parse_tools: bool, in_reasoning: bool = False) -> ReplyParts:
    """The whole reply at once, read exactly as the streaming path reads it."""
    parser = ReplyParser(parse_tools, in_reasoning)
    parser.push(text)
    _, calls = parser.finish()
    return parser.parts(calls)
