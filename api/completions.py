"""POST /v1/chat/completions: an OpenAI request into ChatModel calls, and their replies back.

Streams are Server-Sent Events in OpenAI's chunk format. With n > 1 the n replies stream side
by side (the engine prepares the request once and gives each reply its own place in line; its
max_concurrent decides whether they run at once). If the client goes away, the stream is
closed, and ChatModel passes that on to the engine, which stops generating.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from engines import ChatModel, ChatRequest, ConfigError, PromptRead, QueuePlace, Response
from engines.compaction import Compacting, Compaction
from engines.context_settings import ContextPolicy
from engines.prompt.document_sandbox import SandboxLimits
from engines.logprobs import TokenLogprobs
from engines.prompt.reply_parser import ReplyChunk, ToolCall as ParsedToolCall

from library.citations import cited
from library.whole_document import LongDocumentSettings
from store import DocumentLibrary, StoreError

from .errors import APIError
from .long_documents import fitted
from .event_stream import event_stream, first_of, sse_data
from .logprobs import chat_logprobs
from .media import to_engine_input
from .schemas import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    Choice,
    ChunkChoice,
    CompactionReport,
    DocumentReport,
    PromptProgress,
    Delta,
    FunctionCall,
    FunctionCallDelta,
    NamedToolChoice,
    ToolCall,
    ToolCallDelta,
    Usage,
    completion_id,
    now,
    wants_progress,
)


async def chat_request(body: ChatCompletionRequest, model: ChatModel, local_media_dir: Path | None, user: str,
                       limits: SandboxLimits, context_policy: ContextPolicy | None = None,
                       library: tuple[DocumentLibrary, str] | None = None) -> tuple[ChatRequest, list[DocumentReport]]:
    """The engine's request for this API request (``user``: whom it counts for in the line;
    ``context_policy``: the server's, for a request that names none); what the server cannot do
    is refused before any work starts. ``library``: where documents too long for the context are
    kept, and whose they are; with it, they are answered from their passages (api/long_documents.py),
    which the reports say. Documents are read on worker threads."""
    refuse_unsupported(body, model)
    engine_input = await asyncio.to_thread(to_engine_input, body.messages, local_media_dir, limits, user)
    generation = body.generation()
    use_tools = bool(body.tools) and body.tool_choice != "none"
    tools = [tool.model_dump(exclude_none=True) for tool in body.tools] if use_tools else None
    tool_choice = body.tool_choice.model_dump() if isinstance(body.tool_choice, NamedToolChoice) else body.tool_choice
    if tool_choice not in (None, "auto", "none") and not body.tools:
        raise APIError(400, "tool_choice forces a tool call, but no tools were given: give tools, or leave tool_choice out.", param="tool_choice")

    def build(messages: list[dict[str, Any]]) -> ChatRequest:
        return ChatRequest.build(messages, tools=tools, media=engine_input.media,
                                 chat_template_kwargs=body.chat_template_kwargs, user=user, response_format=body.response_format,
                                 tool_choice=tool_choice, parallel_tool_calls=body.parallel_tool_calls,
                                 continue_final_message=body.continue_final_message, context_policy=body.context_policy or context_policy,
                                 **generation)

    request = build(engine_input.messages)
    if library is None:
        return request, []
    store, owner = library
    try:
        return await fitted(engine_input, request, model, store, owner, build, LongDocumentSettings(long_documents=body.long_documents))
    except (StoreError, ConfigError) as error:
        raise APIError(400, f"A document is too long for the model's context, and could not be kept to answer from its passages: {error}",
                       code="document_not_kept") from None


def refuse_unsupported(body: ChatCompletionRequest, model: ChatModel) -> None:
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs: true; set both, or leave top_logprobs out.", param="top_logprobs")
    refused = {
        "logit_bias": bool(body.logit_bias),
    }
    for name, asked in refused.items():
        if asked:
            raise APIError(400, f"{name} is not supported by this server; leave it out.", param=name, code="unsupported_parameter")
    # As vLLM's API: the reply either opens a new assistant turn or continues the last one. Left
    # out, add_generation_prompt follows continue_final_message.
    if body.continue_final_message and body.add_generation_prompt and "add_generation_prompt" in body.model_fields_set:
        raise APIError(400, "continue_final_message and add_generation_prompt cannot both be true: a reply either continues the "
                            "last assistant message or opens a new one. Set add_generation_prompt to false (or leave it out).",
                       param="add_generation_prompt")
    if not body.add_generation_prompt and not body.continue_final_message:
        raise APIError(400, "add_generation_prompt: false leaves no assistant turn to write into unless continue_final_message is "
                            "true (the last message, an assistant reply, is continued): set continue_final_message, or leave "
                            "add_generation_prompt out.", param="add_generation_prompt", code="unsupported_parameter")
    if body.stream_options is not None and not body.stream:
        raise APIError(400, "stream_options is only allowed when stream is true.", param="stream_options")


def _tool_calls(calls: tuple[ParsedToolCall, ...]) -> list[ToolCall] | None:
    return [ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments)) for c in calls] or None


def _kept_calls(body: ChatCompletionRequest, calls: tuple[ParsedToolCall, ...]) -> tuple[ParsedToolCall, ...]:
    """The calls the client takes: with parallel_tool_calls false, the first only."""
    return calls[:1] if body.parallel_tool_calls is False else calls


async def complete(body: ChatCompletionRequest, model: ChatModel, request: ChatRequest, documents: list[DocumentReport] = ()) -> ChatCompletion:
    finished: dict[int, Response] = {}
    compaction = None
    async with contextlib.aclosing(model.astream_replies(request)) as replies:
        async for index, item in replies:
            if isinstance(item, Response):
                finished[index] = item
            elif isinstance(item, Compaction):
                compaction = CompactionReport.of(item)
    responses = [finished[index] for index in sorted(finished)]
    choices = []
    for index, response in enumerate(responses):
        reply = response.parts
        calls = _kept_calls(body, reply.tool_calls)
        choices.append(Choice(
            index=index,
            message=AssistantMessage(content=reply.content, reasoning_content=reply.reasoning, tool_calls=_tool_calls(calls),
                                     **_citations(reply.content, documents)),
            finish_reason="tool_calls" if calls else response.finish_reason,
            logprobs=chat_logprobs(response.logprobs),
            stop_reason=None if calls else response.stop_sequence,
        ))
    return ChatCompletion(id=completion_id(), created=now(), model=model.model_id, choices=choices, usage=_usage(responses),
                          compaction=compaction, documents=list(documents) or None)


def _citations(content: str, documents: list[DocumentReport]) -> dict[str, Any]:
    """A reply's citations of the passages given, where the request's documents were answered from passages."""
    if not documents:
        return {}
    sources, unknown = cited(content, [passage for document in documents for passage in document.passages])
    return {"citations": sources, "unknown_citations": unknown or None}


def _usage(responses: list[Response]) -> Usage:
    prompt = responses[0].prompt_length if responses else 0
    completion = sum(response.response_length for response in responses)
    return Usage.of(prompt, completion, min((response.cached_tokens for response in responses), default=0))


# ---- streaming


async def start_stream(body: ChatCompletionRequest, model: ChatModel, request: ChatRequest,
                       documents: list[DocumentReport] = ()) -> AsyncIterator[str]:
    """The SSE body, once the first reply item has come (see api/event_stream.py); the replies
    take their places in line together, so a refusal is of them all. ``documents``: said in the
    first chunk, and the replies' citations in their last."""
    replies = model.astream_replies(request, progress=wants_progress(body))
    return _sse(body, model.model_id, replies, await first_of(replies), list(documents))


def _sse(body: ChatCompletionRequest, model_id: str, replies: AsyncIterator[tuple[int, ReplyChunk | TokenLogprobs | Response]],
         first: tuple[int, ReplyChunk | TokenLogprobs | Response], documents: list[DocumentReport]) -> AsyncIterator[str]:
    chunk_id, created = completion_id(), now()
    # Each reply's token logprobs not sent yet: they go with the reply's next chunk.
    unsent: dict[int, list[TokenLogprobs]] = {}
    finished: list[Response] = []

    def chunk(index: int, delta: Delta, finish_reason: str | None = None, stop_reason: str | None = None) -> str:
        logprobs = chat_logprobs(unsent.pop(index)) if unsent.get(index) else None
        choice = ChunkChoice(index=index, delta=delta, finish_reason=finish_reason, logprobs=logprobs, stop_reason=stop_reason)
        return sse_data(ChatCompletionChunk(id=chunk_id, created=created, model=model_id, choices=[choice]).model_dump(exclude_none=True))

    def events(reply: tuple[int, ReplyChunk | TokenLogprobs | Response]) -> Iterator[str]:
        index, item = reply
        if isinstance(item, TokenLogprobs):
            unsent.setdefault(index, []).append(item)
        elif isinstance(item, PromptRead):
            progress = ChatCompletionChunk(id=chunk_id, created=created, model=model_id, choices=[], prompt_progress=PromptProgress.of(index, item))
            yield sse_data(progress.model_dump(exclude_none=True))
        elif isinstance(item, Compaction):
            report = ChatCompletionChunk(id=chunk_id, created=created, model=model_id, choices=[], compaction=CompactionReport.of(item))
            yield sse_data(report.model_dump(exclude_none=True))
        elif isinstance(item, QueuePlace | Compacting):
            return
        elif isinstance(item, ReplyChunk):
            if item.kind == "reasoning":
                yield chunk(index, Delta(reasoning_content=item.text))
            elif item.kind == "content":
                yield chunk(index, Delta(content=item.text))
        else:
            calls = _kept_calls(body, item.parts.tool_calls)
            if calls:
                deltas = [
                    ToolCallDelta(index=i, id=c.id, type="function", function=FunctionCallDelta(name=c.name, arguments=c.arguments))
                    for i, c in enumerate(calls)
                ]
                yield chunk(index, Delta(tool_calls=deltas))
            finished.append(item)
            yield chunk(index, Delta(**_citations(item.parts.content, documents)), "tool_calls" if calls else item.finish_reason,
                        None if calls else item.stop_sequence)
            if len(finished) == body.n and body.stream_options and body.stream_options.include_usage:
                usage = ChatCompletionChunk(id=chunk_id, created=created, model=model_id, choices=[], usage=_usage(finished))
                yield sse_data(usage.model_dump(exclude_none=True))

    said = [sse_data(ChatCompletionChunk(id=chunk_id, created=created, model=model_id, choices=[], documents=documents).model_dump(exclude_none=True))]
    opening = (*(said if documents else ()), *(chunk(index, Delta(role="assistant", content="")) for index in range(body.n)))
    return event_stream(replies, first, opening, events, lambda: len(finished) == body.n)
