"""Anthropic's Messages API on the request path Chat Completions takes: a request is read into
a ChatCompletionRequest (``as_chat_completion``), so it goes through the same checks, limits,
documents, waiting line, Stop on disconnect and logins, and builds the same ChatRequest; the
replies are written back as Anthropic's message, or its stream's events. The model's reasoning
only ever goes in ``thinking`` blocks, never inside a text block."""

from __future__ import annotations

import base64
import json
import mimetypes
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

from engines import ChatModel, ChatRequest, Response
from engines.prompt.reply_parser import ReplyChunk

from .completions import complete as complete_chat
from .errors import APIError
from .event_stream import event_stream, first_of
from .anthropic_schemas import (CountTokensRequest, DocumentBlock, ImageBlock, InputBlock, MessageResponse, MessagesRequest,
                                MessagesUsage, ResponseBlock, ResponseText, ResponseThinking, ResponseToolUse, StopReason, TextBlock,
                                ThinkingBlock, ToolResultBlock, ToolUseBlock)
from .schemas import ChatCompletion, ChatCompletionRequest, DocumentReport, chat_completion_request

# Anthropic's effort levels, as the reasoning_effort a chat template knows.
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
STOP_REASONS: dict[str, StopReason] = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def as_chat_completion(body: CountTokensRequest, model_id: str) -> tuple[ChatCompletionRequest, list[str]]:
    """The Chat Completions request this Messages request is, and the names of the server tools
    it gives that this server does not run (left out)."""
    for name in ("container", "mcp_servers"):
        if getattr(body, name) is not None:
            raise APIError(400, f"{name} is not supported by this server (it runs no {name.replace('_', ' ')}); leave it out.",
                           param=name, code="unsupported_parameter")
    tools = [tool for tool in body.tools or () if tool.type in (None, "custom")]
    skipped = [tool.name for tool in body.tools or () if tool.type not in (None, "custom")]
    fields: dict[str, Any] = {"model": model_id, "messages": _chat_messages(body)}
    if tools:
        fields["tools"] = [{"type": "function", "function": {"name": tool.name, "description": tool.description or "",
                                                             "parameters": tool.input_schema or {"type": "object", "properties": {}}}}
                           for tool in tools]
    choice = body.tool_choice
    if choice is not None and (tools or choice.type == "none"):
        fields["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type) or \
            {"type": "function", "function": {"name": choice.name or ""}}
        if choice.disable_parallel_tool_use:
            fields["parallel_tool_calls"] = False
    if body.thinking is not None:
        fields["chat_template_kwargs"] = {"enable_thinking": body.thinking.type != "disabled"}
    if body.output_config is not None:
        if body.output_config.effort is not None:
            fields["reasoning_effort"] = EFFORTS[body.output_config.effort]
        if body.output_config.format is not None:
            fields["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": body.output_config.format.schema_}}
    if body.messages[-1].role == "assistant":
        # Anthropic's prefill: the reply goes on from the last assistant message's words.
        fields["continue_final_message"] = True
    if isinstance(body, MessagesRequest):
        fields |= {"max_tokens": body.max_tokens, "temperature": body.temperature, "top_p": body.top_p, "top_k": body.top_k,
                   "stop": body.stop_sequences}
    return chat_completion_request(fields), skipped


def _chat_messages(body: CountTokensRequest) -> list[dict[str, Any]]:
    system = body.system if isinstance(body.system, str) or body.system is None else "\n\n".join(block.text for block in body.system)
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for index, message in enumerate(body.messages):
        blocks: list[InputBlock] = [TextBlock(type="text", text=message.content)] if isinstance(message.content, str) else message.content
        where = f"messages.{index}"
        if not blocks:
            raise APIError(400, f"{where}.content is empty: a message needs at least one content block.", param=f"{where}.content")
        if message.role == "assistant":
            messages.append(_assistant_message(blocks, where))
            continue
        # A user turn's tool results answer the calls of the turn before: they go first, as tool messages.
        for block in blocks:
            if isinstance(block, ToolResultBlock):
                messages.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": _result_text(block, where)})
        parts = [_user_part(block, where) for block in blocks if not isinstance(block, ToolResultBlock)]
        if parts:
            messages.append({"role": "user", "content": parts})
    return messages


def _assistant_message(blocks: list[InputBlock], where: str) -> dict[str, Any]:
    text, reasoning, calls = [], [], []
    for block in blocks:
        if isinstance(block, TextBlock):
            text.append(block.text)
        elif isinstance(block, ThinkingBlock):
            reasoning.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            calls.append({"id": block.id, "type": "function", "function": {"name": block.name, "arguments": json.dumps(block.input)}})
        elif block.type != "redacted_thinking":  # Anthropic's encrypted reasoning: nothing a local model can read
            raise APIError(400, f"{where}: an assistant message cannot hold a {block.type} block; send it in a user message.",
                           param=where)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if reasoning:
        message["reasoning_content"] = "\n\n".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _user_part(block: InputBlock, where: str) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageBlock):
        source = block.source
        if source.type == "base64":
            return {"type": "image_url", "image_url": {"url": f"data:{source.media_type};base64,{source.data}"}}
        if source.type == "url":
            return {"type": "image_url", "image_url": {"url": source.url}}
    if isinstance(block, DocumentBlock):
        return {"type": "file", "file": _document_file(block, where)}
    if getattr(getattr(block, "source", None), "type", None) == "file":
        raise APIError(400, f"{where}: a file_id names a file of Anthropic's Files API, which this server does not have; "
                            "send the file's data as base64.", param=where)
    raise APIError(400, f"{where}: a user message cannot hold a {block.type} block.", param=where)


def _document_file(block: DocumentBlock, where: str) -> dict[str, str]:
    """A document block as a Chat Completions ``file`` part: its data, and a name whose extension says its format."""
    source = block.source
    if source.type == "base64":
        media_type, data = source.media_type, source.data
    elif source.type == "text":
        media_type, data = source.media_type, base64.b64encode(source.data.encode()).decode()
    elif source.type == "content":
        text = source.content if isinstance(source.content, str) else "\n\n".join(
            part.get("text", "") for part in source.content if part.get("type") == "text")
        media_type, data = "text/plain", base64.b64encode(text.encode()).decode()
    elif source.type == "url":
        raise APIError(400, f"{where}: this server does not fetch documents from URLs; send the document's data as base64.",
                       param=where)
    else:
        raise APIError(400, f"{where}: a file_id names a file of Anthropic's Files API, which this server does not have; "
                            "send the file's data as base64.", param=where)
    name = block.title or "document"
    extension = mimetypes.guess_extension(media_type) or ".txt"
    return {"file_data": f"data:{media_type};base64,{data}", "filename": name if "." in name else f"{name}{extension}"}


def _result_text(block: ToolResultBlock, where: str) -> str:
    if isinstance(block.content, str):
        text = block.content
    else:
        if any(part.type == "image" for part in block.content):
            raise APIError(400, f"{where}: a tool_result holds an image, which a tool message cannot carry here; "
                                "send the image in the user message's content beside it.", param=where)
        text = "\n\n".join(part.text for part in block.content)
    return f"Error: {text}" if block.is_error else text


# ---- replies


def message_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


async def complete(body: ChatCompletionRequest, model: ChatModel, request: ChatRequest, documents: list[DocumentReport]) -> MessageResponse:
    return as_message(await complete_chat(body, model, request, documents))


def as_message(completion: ChatCompletion) -> MessageResponse:
    [choice] = completion.choices
    reply = choice.message
    content: list[ResponseBlock] = []
    if reply.reasoning_content:
        content.append(ResponseThinking(thinking=reply.reasoning_content))
    if reply.content or not reply.tool_calls:
        content.append(ResponseText(text=reply.content or ""))
    content += [ResponseToolUse(id=call.id, name=call.function.name, input=_arguments(call.function.arguments))
                for call in reply.tool_calls or ()]
    usage = completion.usage
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    return MessageResponse(id=message_id(), model=completion.model, content=content, **_stop(choice.finish_reason, choice.stop_reason),
                           usage=MessagesUsage(input_tokens=usage.prompt_tokens - cached, output_tokens=usage.completion_tokens,
                                               cache_read_input_tokens=cached))


def _stop(finish_reason: str, stop_sequence: str | None) -> dict[str, Any]:
    """Why the reply ended, as Anthropic says it: one of the request's stop_sequences (named) ended it, or else its finish reason."""
    if stop_sequence is not None:
        return {"stop_reason": "stop_sequence", "stop_sequence": stop_sequence}
    return {"stop_reason": STOP_REASONS[finish_reason], "stop_sequence": None}


def _arguments(arguments: str) -> dict[str, Any]:
    # The reply parser hands on tool calls whose arguments are a JSON object; anything else is kept whole, not lost.
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return {"arguments": arguments}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


async def start_stream(body: ChatCompletionRequest, model: ChatModel, request: ChatRequest) -> AsyncIterator[str]:
    """Anthropic's event stream, once the reply's first item has come (a refusal gets its status).
    Its place in line and a long prompt's reading come too, each sent as a ping: a client waiting
    for a busy model keeps its connection."""
    replies = model.astream_replies(request, progress=True)
    return _events(body, model.model_id, replies, await first_of(replies))


def _events(body: ChatCompletionRequest, model_id: str, replies: AsyncIterator[tuple[int, Any]], first: tuple[int, Any]) -> AsyncIterator[str]:
    blocks: list[str] = []  # the type of each block opened, the last one open until another opens
    finished: list[Response] = []

    def opened(block: dict[str, Any]) -> Iterator[str]:
        yield from closed()
        blocks.append(block["type"])
        yield event("content_block_start", index=len(blocks) - 1, content_block=block)

    def closed() -> Iterator[str]:
        if blocks and blocks[-1] != "closed":
            yield event("content_block_stop", index=len(blocks) - 1)
            blocks[-1] = "closed"

    def delta(kind: str, opening: dict[str, Any], change: dict[str, Any]) -> Iterator[str]:
        if not blocks or blocks[-1] != kind:
            yield from opened(opening)
        yield event("content_block_delta", index=len(blocks) - 1, delta=change)

    def events(reply: tuple[int, Any]) -> Iterator[str]:
        _, item = reply
        if isinstance(item, ReplyChunk) and item.text:
            if item.kind == "reasoning":
                yield from delta("thinking", {"type": "thinking", "thinking": "", "signature": ""},
                                 {"type": "thinking_delta", "thinking": item.text})
            elif item.kind == "content":
                yield from delta("text", {"type": "text", "text": ""}, {"type": "text_delta", "text": item.text})
        elif isinstance(item, Response):
            calls = item.parts.tool_calls[:1] if body.parallel_tool_calls is False else item.parts.tool_calls
            if not blocks and not calls:
                yield from opened({"type": "text", "text": ""})
            for call in calls:
                yield from opened({"type": "tool_use", "id": call.id, "name": call.name, "input": {}})
                yield event("content_block_delta", index=len(blocks) - 1, delta={"type": "input_json_delta", "partial_json": call.arguments})
            yield from closed()
            finished.append(item)
            yield event("message_delta", delta=_stop("tool_calls" if calls else item.finish_reason, None if calls else item.stop_sequence),
                        usage={"input_tokens": item.prompt_length - item.cached_tokens, "output_tokens": item.response_length,
                               "cache_read_input_tokens": item.cached_tokens})
            yield event("message_stop")
        elif not isinstance(item, ReplyChunk):
            # Waiting in line, reading a long prompt, compacting: the client hears the connection is alive.
            yield event("ping")

    start = {"id": message_id(), "type": "message", "role": "assistant", "model": model_id, "content": [], "stop_reason": None,
             "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
    return event_stream(replies, first, (event("message_start", message=start), event("ping")), events, lambda: bool(finished),
                        failure=lambda error: sse_event("error", error.anthropic_body()), ending="")


def event(kind: str, **fields: Any) -> str:
    return sse_event(kind, {"type": kind, **fields})


def sse_event(kind: str, body: dict[str, Any]) -> str:
    return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"
