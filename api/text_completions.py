"""POST /v1/completions: prompts continued as they are (no chat template), OpenAI's legacy text
completions. Each prompt goes through the same engine path as a chat (ChatRequest.completion):
the same waiting line, limits and refusals; a client that leaves stops every generation. Choice
``i`` of prompt ``p`` is choice ``p * n + i``, as in OpenAI's API. Streams are Server-Sent Events
of ``text_completion`` objects, all replies side by side."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterator

from engines import ChatModel, ChatRequest, PromptRead, Response
from engines.backends.base import side_by_side
from engines.generation_args import GenerationArgs
from engines.logprobs import TokenLogprobs
from engines.settings import field_range

from .errors import APIError
from .event_stream import event_stream, first_of, sse_data
from .logprobs import completion_logprobs
from .schemas import PromptProgress, Usage, now, wants_progress
from .text_completion_schemas import Completion, CompletionChoice, CompletionRequest, text_completion_id

# As many replies per request as n allows for one prompt: the line holds no more for one request.
MAX_REPLIES = field_range(GenerationArgs.model_fields["num_return_sequences"])["le"]


def completion_requests(body: CompletionRequest, user: str) -> list[ChatRequest]:
    """The engine's requests for ``body``, one per prompt (``user``: whom they count for in the
    line); what the server cannot do is refused before any work starts."""
    refuse_unsupported(body)
    prompt = body.prompt
    prompts = [prompt] if isinstance(prompt, str) or not prompt or isinstance(prompt[0], int) else prompt
    if len(prompts) * body.n > MAX_REPLIES:
        raise APIError(400, f"{len(prompts)} prompts with n={body.n} ask for {len(prompts) * body.n} replies; one request "
                       f"may ask for at most {MAX_REPLIES}: split the prompts over several requests.", param="prompt")
    return [ChatRequest.completion(one, user=user, **body.generation()) for one in prompts]


def refuse_unsupported(body: CompletionRequest) -> None:
    if body.suffix is not None:
        raise APIError(400, "suffix is not supported: this server writes no fill-in-the-middle prompts, and the models it "
                       "serves are continued left to right only. Leave suffix out and send the text before the gap as prompt.",
                       param="suffix", code="unsupported_parameter")
    if body.logit_bias:
        raise APIError(400, "logit_bias is not supported by this server; leave it out.", param="logit_bias", code="unsupported_parameter")
    if body.best_of is not None and body.best_of != body.n:
        raise APIError(400, "best_of is not supported by this server (it keeps every reply it writes): leave it out, or use n.",
                       param="best_of", code="unsupported_parameter")
    if body.echo and body.logprobs is not None:
        raise APIError(400, "echo with logprobs would need the prompt's own logprobs, which this server does not compute: "
                       "leave out one of them.", param="echo", code="unsupported_parameter")
    if body.stream_options is not None and not body.stream:
        raise APIError(400, "stream_options is only allowed when stream is true.", param="stream_options")


async def complete(body: CompletionRequest, model: ChatModel, requests: list[ChatRequest]) -> Completion:
    replies = await _all([model.achat(request) for request in requests])
    choices = []
    for request, responses in zip(requests, replies):
        echo = model.render_prompt(request) if body.echo else ""
        for response in responses:
            choices.append(CompletionChoice(index=len(choices), text=echo + response.response_text, finish_reason=response.finish_reason,
                                            logprobs=completion_logprobs(response.logprobs, len(echo))))
    return Completion(id=text_completion_id(), created=now(), model=model.model_id, choices=choices, usage=_usage(replies))


async def _all(calls: list[Awaitable[list[Response]]]) -> list[list[Response]]:
    """Every call's replies; the first error (or leaving) cancels the others."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _usage(replies: list[list[Response]]) -> Usage:
    prompt = sum(responses[0].prompt_length for responses in replies if responses)
    completion = sum(response.response_length for responses in replies for response in responses)
    cached = sum(min(response.cached_tokens for response in responses) for responses in replies if responses)
    return Usage.of(prompt, completion, cached)


async def start_stream(body: CompletionRequest, model: ChatModel, requests: list[ChatRequest]) -> AsyncIterator[str]:
    """The SSE body, once the first reply item has come (see api/event_stream.py)."""
    replies = side_by_side([model.astream_replies(request, progress=wants_progress(body), raw=True) for request in requests])
    first = await first_of(replies)
    echoes = [model.render_prompt(request) if body.echo else "" for request in requests]
    return _sse(body, model.model_id, replies, first, echoes)


def _sse(body: CompletionRequest, model_id: str, replies: AsyncIterator[tuple[int, tuple[int, str | TokenLogprobs | Response]]],
         first: tuple[int, tuple[int, str | TokenLogprobs | Response]], echoes: list[str]) -> AsyncIterator[str]:
    chunk_id, created = text_completion_id(), now()
    # Each choice's token logprobs not sent yet (they go with its next text), and where its text has got to.
    unsent: dict[int, list[TokenLogprobs]] = {}
    offsets = {prompt * body.n + reply: len(echo) for prompt, echo in enumerate(echoes) for reply in range(body.n)}
    finished: dict[int, list[Response]] = {}

    def chunk(choices: list[CompletionChoice] | None = None, usage: Usage | None = None) -> str:
        return sse_data(Completion(id=chunk_id, created=created, model=model_id, choices=choices or [], usage=usage).model_dump(exclude_none=True))

    def choice(index: int, text: str, finish_reason: str | None = None) -> str:
        tokens = unsent.pop(index, None)
        logprobs = completion_logprobs(tokens, offsets[index]) if tokens else None
        offsets[index] += len(text)
        return chunk([CompletionChoice(index=index, text=text, logprobs=logprobs, finish_reason=finish_reason)])

    def complete() -> bool:
        return sum(map(len, finished.values())) == len(offsets)

    def events(reply: tuple[int, tuple[int, str | TokenLogprobs | Response]]) -> Iterator[str]:
        prompt, (number, item) = reply
        index = prompt * body.n + number
        if isinstance(item, TokenLogprobs):
            unsent.setdefault(index, []).append(item)
        elif isinstance(item, PromptRead):
            yield sse_data(Completion(id=chunk_id, created=created, model=model_id, choices=[],
                                      prompt_progress=PromptProgress.of(index, item)).model_dump(exclude_none=True))
        elif isinstance(item, str):
            yield choice(index, item)
        elif isinstance(item, Response):
            finished.setdefault(prompt, []).append(item)
            yield choice(index, "", item.finish_reason)
            if complete() and body.stream_options and body.stream_options.include_usage:
                yield chunk(usage=_usage(list(finished.values())))

    opening = (chunk([CompletionChoice(index=index, text=echoes[index // body.n])]) for index in offsets if echoes[index // body.n])
    return event_stream(replies, first, opening, events, complete)
