"""OpenAI's Responses API on the request path Chat Completions takes: a request, with the
conversation of the response it goes on from (``previous_response_id``, kept in the chat store:
store/responses.py), is read into a ChatCompletionRequest (``as_chat_completion``), so it goes
through the same checks, limits, documents, waiting line, Stop on disconnect and logins; the reply
is written back as a response object and its output items, or the stream of its events, and kept
(unless ``store: false``) for a later request to go on from.

What the server cannot do is said, not refused, where a client like Codex sends it whatever the
server: tools of types other than function (web search, file search, custom, MCP) are left out,
and reasoning effort for a model whose template has no thinking switch is ignored, each with a
line in the response's ``warnings`` (this server's extension)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from engines import ChatModel, ChatRequest, ReplyChunk, Response
from store import ResponseStore, StoreError

from .errors import APIError
from .event_stream import event_stream, first_of
from .responses_schemas import (FunctionCallItem, FunctionCallOutputItem, FunctionTool, InputFile, InputImage, InputItem, InputText,
                                MessageItem, ReasoningItem, ResponsesRequest)
from .schemas import ChatCompletionRequest, chat_completion_request

# OpenAI's effort levels past the ones a chat template knows.
EFFORTS = {"xhigh": "high"}


@dataclass
class Conversion:
    """A Responses request as Chat Completions reads it: ``chat`` the request, ``added`` the
    messages its input adds to the conversation (kept with the reply), ``namespaces`` the
    namespace of each tool offered from one, ``warnings`` what was left out."""

    chat: ChatCompletionRequest
    added: list[dict[str, Any]]
    namespaces: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def as_chat_completion(body: ResponsesRequest, model: ChatModel, earlier: list[dict[str, Any]]) -> Conversion:
    """``body`` after the conversation ``earlier`` (the previous response's), as a chat completion request."""
    for name, instead in (("background", "send the request and wait, or stream it"), ("conversation", "use previous_response_id"),
                          ("prompt", "send the prompt's text as instructions and input")):
        if getattr(body, name):
            raise APIError(400, f"{name} is not supported by this server; {instead}.", param=name, code="unsupported_parameter")
    warnings: list[str] = []
    added = _chat_messages([{"type": "message", "role": "user", "content": body.input}] if isinstance(body.input, str) else body.input)
    system = [{"role": "system", "content": body.instructions}] if body.instructions else []
    fields: dict[str, Any] = {"model": model.model_id, "messages": [*system, *earlier, *added], "max_tokens": body.max_output_tokens,
                              "temperature": body.temperature, "top_p": body.top_p, "parallel_tool_calls": body.parallel_tool_calls,
                              "context_policy": {"auto": "drop_oldest", "disabled": "refuse"}.get(body.truncation or "")}
    tools, namespaces = _tools(body.tools or [], warnings)
    if tools:
        fields["tools"] = tools
    fields["tool_choice"] = _tool_choice(body.tool_choice, bool(tools), warnings)
    if body.text is not None and body.text.format is not None:
        fields["response_format"] = _response_format(body.text.format)
    effort = body.reasoning.effort if body.reasoning else None
    if effort is not None:
        if model.steers_reasoning:
            fields["reasoning_effort"] = EFFORTS.get(effort, effort)
        else:
            warnings.append(f"reasoning.effort {effort!r} is ignored: this model's chat template has no thinking switch.")
    return Conversion(chat_completion_request(fields), added, namespaces, warnings)


def _chat_messages(items: list[InputItem] | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Input items as chat messages: a function call joins the assistant message before it, and
    an earlier reply's reasoning the assistant message after it."""
    messages: list[dict[str, Any]] = []
    reasoning = ""
    for index, item in enumerate(items):
        if isinstance(item, dict):  # input given as text
            item = MessageItem.model_validate(item)
        where = f"input.{index}"
        if isinstance(item, ReasoningItem):
            reasoning = "\n\n".join(part.text for part in item.content or item.summary)
        elif isinstance(item, MessageItem) and item.role != "assistant":
            role = "user" if item.role == "user" else "system"
            messages.append({"role": role, "content": item.content if isinstance(item.content, str) else
                             [_user_part(part, f"{where}.content.{number}") for number, part in enumerate(item.content)]})
        elif isinstance(item, FunctionCallOutputItem):
            output = item.output if isinstance(item.output, str) else "\n\n".join(
                part.text for part in item.output if isinstance(part, InputText))
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
        else:
            joins = isinstance(item, FunctionCallItem) and messages and messages[-1]["role"] == "assistant"
            reply = messages[-1] if joins else {"role": "assistant", "content": ""}
            if isinstance(item, MessageItem):
                reply["content"] = item.content if isinstance(item.content, str) else "".join(
                    getattr(part, "text", None) or getattr(part, "refusal", "") for part in item.content)
            else:
                reply.setdefault("tool_calls", []).append(
                    {"id": item.call_id, "type": "function", "function": {"name": item.name, "arguments": item.arguments}})
            if reasoning:
                reply["reasoning_content"], reasoning = reasoning, ""
            if not joins:
                messages.append(reply)
    return messages


def _user_part(part: Any, where: str) -> dict[str, Any]:
    if isinstance(part, InputImage):
        if part.image_url is None:
            raise APIError(400, f"{where}: a file_id names a file of OpenAI's Files API, which this server does not have; "
                                "send the image as image_url (a data: URL or a URL).", param=where)
        return {"type": "image_url", "image_url": {"url": part.image_url}}
    if isinstance(part, InputFile):
        if part.file_data is None:
            raise APIError(400, f"{where}: send the file's content as file_data (with its filename); this server fetches no "
                                "file_url and has no Files API for a file_id.", param=where)
        return {"type": "file", "file": {"file_data": part.file_data, "filename": part.filename}}
    return {"type": "text", "text": getattr(part, "text", None) or getattr(part, "refusal", "")}


def _tools(given: list[dict[str, Any]], warnings: list[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The function tools to offer (a namespace's among them), and each one's namespace; the rest left out, said in ``warnings``."""
    offered: list[dict[str, Any]] = []
    namespaces: dict[str, str] = {}
    for index, tool in enumerate(given):
        kind = tool.get("type")
        inner = [(f"tools.{index}", tool)] if kind == "function" else \
            [(f"tools.{index}.tools.{number}", each) for number, each in enumerate(tool.get("tools") or [])] if kind == "namespace" else []
        if not inner:
            warnings.append(f"tools.{index}: a tool of type {kind!r} ({tool.get('name', 'unnamed')}) is not run by this server; "
                            "it was left out. Only function tools are offered to the model.")
        for where, function in inner:
            if function.get("type") != "function":
                warnings.append(f"{where}: a tool of type {function.get('type')!r} is not run by this server; it was left out.")
                continue
            try:
                parsed = FunctionTool.model_validate(function)
            except ValidationError as error:
                raise APIError(400, f"{where}: not a function tool ({error.errors()[0]['msg']}).", param=where) from None
            offered.append({"type": "function", "function": {"name": parsed.name, "description": parsed.description or "",
                                                              "parameters": parsed.parameters or {"type": "object", "properties": {}}}})
            if kind == "namespace":
                namespaces[parsed.name] = tool.get("name", "")
    return offered, namespaces


def _tool_choice(choice: str | dict[str, Any] | None, tools: bool, warnings: list[str]) -> str | dict[str, Any] | None:
    if choice is None or isinstance(choice, str):
        return choice if tools or choice in (None, "none") else None
    if choice.get("type") == "function" and tools:
        return {"type": "function", "function": {"name": choice.get("name", "")}}
    warnings.append(f"tool_choice of type {choice.get('type')!r} is not supported here; the model chooses (auto).")
    return None


def _response_format(format: dict[str, Any]) -> dict[str, Any] | None:
    kind = format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": format.get("name", "output"), "schema": format.get("schema", {}),
                                                       "strict": format.get("strict")}}
    raise APIError(400, f"text.format of type {kind!r} is not one this server knows: text, json_object or json_schema.", param="text.format")


# ---- the reply


def response_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


class ResponseWriter:
    """The response object and its stream's events, written as the engine's reply comes."""

    def __init__(self, body: ResponsesRequest, conversion: Conversion, model: ChatModel) -> None:
        self.body, self.conversion, self.model = body, conversion, model
        self.id, self.created = response_id(), time.time()
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the reasoning or message item being written
        self.sequence = 0
        self.finished: Response | None = None

    def response(self, status: str, usage: dict[str, Any] | None = None, incomplete: str | None = None) -> dict[str, Any]:
        body = self.body
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status, "model": self.model.model_id,
            "output": self.output, "instructions": body.instructions, "previous_response_id": body.previous_response_id,
            "tools": body.tools or [], "tool_choice": body.tool_choice or "auto", "parallel_tool_calls": body.parallel_tool_calls is not False,
            "temperature": body.temperature, "top_p": body.top_p, "max_output_tokens": body.max_output_tokens,
            "text": body.text.model_dump(exclude_none=True) if body.text else {"format": {"type": "text"}},
            "reasoning": body.reasoning.model_dump(exclude_none=True) if body.reasoning else None, "truncation": body.truncation or "disabled",
            "store": body.store, "metadata": body.metadata or {}, "usage": usage, "error": None,
            "incomplete_details": {"reason": incomplete} if incomplete else None, "warnings": self.conversion.warnings or None,
            "completed_at": time.time() if status in ("completed", "incomplete") else None,
        }

    def opening(self) -> list[dict[str, Any]]:
        return [self.event("response.created", response=self.response("in_progress")),
                self.event("response.in_progress", response=self.response("in_progress"))]

    def events(self, item: Any) -> Iterator[dict[str, Any]]:
        if isinstance(item, ReplyChunk) and item.text:
            kind = "reasoning" if item.kind == "reasoning" else "message" if item.kind == "content" else None
            if kind is None:
                return
            if self.open is None or self.open["type"] != kind:
                yield from self._close()
                yield from self._open(kind)
            text = self.open["content"][0]
            text["text"] += item.text
            delta = "response.reasoning_text.delta" if kind == "reasoning" else "response.output_text.delta"
            extra = {} if kind == "reasoning" else {"logprobs": []}
            yield self.event(delta, item_id=self.open["id"], output_index=len(self.output) - 1, content_index=0, delta=item.text, **extra)
        elif isinstance(item, Response):
            yield from self._close()
            calls = item.parts.tool_calls[:1] if self.body.parallel_tool_calls is False else item.parts.tool_calls
            for call in calls:
                done = {"type": "function_call", "id": _item_id("fc"), "call_id": call.id, "name": call.name, "arguments": call.arguments,
                        "status": "completed", **({"namespace": self.conversion.namespaces[call.name]}
                                                  if call.name in self.conversion.namespaces else {})}
                self.output.append({**done, "arguments": "", "status": "in_progress"})
                index = len(self.output) - 1
                yield self.event("response.output_item.added", output_index=index, item=self.output[index])
                yield self.event("response.function_call_arguments.delta", item_id=done["id"], output_index=index, delta=call.arguments)
                yield self.event("response.function_call_arguments.done", item_id=done["id"], output_index=index, name=call.name,
                                 arguments=call.arguments)
                self.output[index] = done
                yield self.event("response.output_item.done", output_index=index, item=done)
            self.finished = item

    def final(self) -> dict[str, Any]:
        """The finished response, after the reply's last item."""
        reply = self.finished
        reasoning = "".join(item["content"][0]["text"] for item in self.output if item["type"] == "reasoning")
        usage = {"input_tokens": reply.prompt_length, "input_tokens_details": {"cached_tokens": reply.cached_tokens, "cache_write_tokens": 0},
                 "output_tokens": reply.response_length,
                 "output_tokens_details": {"reasoning_tokens": self.model.count_tokens(reasoning) if reasoning else 0},
                 "total_tokens": reply.prompt_length + reply.response_length}
        calls = any(item["type"] == "function_call" for item in self.output)
        cut = reply.finish_reason == "length" and not calls
        return self.response("incomplete" if cut else "completed", usage, "max_output_tokens" if cut else None)

    def kept_messages(self) -> list[dict[str, Any]]:
        """What this response adds to the conversation: its input's messages and its reply."""
        reply: dict[str, Any] = {"role": "assistant", "content": "".join(
            part["text"] for item in self.output if item["type"] == "message" for part in item["content"])}
        reasoning = "".join(item["content"][0]["text"] for item in self.output if item["type"] == "reasoning")
        if reasoning:
            reply["reasoning_content"] = reasoning
        calls = [{"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
                 for item in self.output if item["type"] == "function_call"]
        if calls:
            reply["tool_calls"] = calls
        return [*self.conversion.added, reply]

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.sequence += 1
        return {"type": kind, "sequence_number": self.sequence - 1, **fields}

    def _open(self, kind: str) -> Iterator[dict[str, Any]]:
        if kind == "reasoning":
            self.open = {"type": "reasoning", "id": _item_id("rs"), "summary": [], "content": [{"type": "reasoning_text", "text": ""}]}
        else:
            self.open = {"type": "message", "id": _item_id("msg"), "role": "assistant", "status": "in_progress",
                         "content": [{"type": "output_text", "text": "", "annotations": []}]}
        self.output.append(self.open)
        index = len(self.output) - 1
        yield self.event("response.output_item.added", output_index=index, item={**self.open, "content": []})
        if kind == "message":
            yield self.event("response.content_part.added", item_id=self.open["id"], output_index=index, content_index=0,
                             part={"type": "output_text", "text": "", "annotations": []})

    def _close(self) -> Iterator[dict[str, Any]]:
        item, self.open = self.open, None
        if item is None:
            return
        index = self.output.index(item)
        text = item["content"][0]["text"]
        if item["type"] == "reasoning":
            wants_summary = self.body.reasoning is not None and (self.body.reasoning.summary or self.body.reasoning.generate_summary)
            # A local model's reasoning is given whole; as the summary too where one is asked for.
            item["summary"] = [{"type": "summary_text", "text": text}] if wants_summary else []
            yield self.event("response.reasoning_text.done", item_id=item["id"], output_index=index, content_index=0, text=text)
        else:
            item["status"] = "completed"
            yield self.event("response.output_text.done", item_id=item["id"], output_index=index, content_index=0, text=text, logprobs=[])
            yield self.event("response.content_part.done", item_id=item["id"], output_index=index, content_index=0, part=item["content"][0])
        yield self.event("response.output_item.done", output_index=index, item=item)


@dataclass(frozen=True)
class Keeping:
    """Where a response is kept, and whose it is."""

    store: ResponseStore
    owner: str

    async def keep(self, writer: ResponseWriter, response: dict[str, Any]) -> dict[str, Any]:
        """The response as kept; where the store refuses it (a quota), the reply is still the
        client's, marked not kept, with the store's reason in its warnings."""
        try:
            await asyncio.to_thread(self.store.keep, self.owner, writer.id, writer.body.previous_response_id, writer.kept_messages(), response)
        except StoreError as error:
            why = f"This response was not kept, so previous_response_id cannot name it: {error}"
            return {**response, "store": False, "warnings": [*(response["warnings"] or []), why]}
        return response


async def respond(body: ResponsesRequest, conversion: Conversion, model: ChatModel, request: ChatRequest,
                  keeping: Keeping | None) -> dict[str, Any]:
    writer = ResponseWriter(body, conversion, model)
    async with contextlib.aclosing(model.astream_replies(request)) as replies:
        async for _, item in replies:
            list(writer.events(item))  # the events are the stream's; the response is built as they are
    response = writer.final()
    return await keeping.keep(writer, response) if keeping is not None else response


async def start_stream(body: ResponsesRequest, conversion: Conversion, model: ChatModel, request: ChatRequest,
                       keeping: Keeping | None) -> AsyncIterator[str]:
    """The response's events, once the reply's first item has come (a refusal gets its status).
    It is kept before ``response.completed`` is sent: a client that goes on from it at once finds it."""
    writer = ResponseWriter(body, conversion, model)
    replies = model.astream_replies(request)
    first = await first_of(replies)

    def events(reply: tuple[int, Any]) -> Iterator[str]:
        for event in writer.events(reply[1]):
            yield sse(event)

    async def completed() -> str:
        if writer.finished is None:  # the reply failed, and its error event was sent
            return ""
        response = writer.final()
        if keeping is not None:
            response = await keeping.keep(writer, response)
        return sse(writer.event("response.completed", response=response))

    def failure(error: APIError) -> str:
        return sse(writer.event("error", code=error.code or error.type, message=error.message, param=error.param))

    return event_stream(replies, first, [sse(event) for event in writer.opening()], events, lambda: writer.finished is not None,
                        failure=failure, ending=completed)


def sse(event: dict[str, Any]) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"
