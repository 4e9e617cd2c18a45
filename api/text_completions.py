"""POST /v1/completions: a prompt continued as it is (no chat template), OpenAI's legacy text
completions. The request goes through the same engine path as a chat (ChatRequest.completion):
the same waiting line, limits and refusals; a client that leaves stops the generation. Streams
are Server-Sent Events of ``text_completion`` objects, the n replies side by side."""

from __future__ import annotations

from collections.abc import AsyncIterator

from engines import ChatModel, ChatRequest, Response
from engines.logprobs import TokenLogprobs

from .completions import sse_data, usage_of
from .errors import APIError, from_exception
from .logprobs import completion_logprobs
from .schemas import now
from .text_completion_schemas import Completion, CompletionChoice, CompletionRequest, text_completion_id


def completion_request(body: CompletionRequest, user: str) -> ChatRequest:
    """The engine's request for ``body`` (``user``: whom it counts for in the line); what the
    server cannot do is refused before any work starts."""
    refuse_unsupported(body)
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        if len(prompt) != 1:
            raise APIError(400, f"prompt holds {len(prompt)} prompts; this server takes one per request: send one request for each.",
                           param="prompt", code="unsupported_parameter")
        [prompt] = prompt
    return ChatRequest.completion(prompt, user=user, **body.generation())


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


async def complete(model: ChatModel, model_id: str, body: CompletionRequest, request: ChatRequest) -> Completion:
    responses = await model.achat(request)
    echo = model.render_prompt(request) if body.echo else ""
    choices = [
        CompletionChoice(index=index, text=echo + response.response_text, finish_reason=response.finish_reason,
                         logprobs=completion_logprobs(response.logprobs, len(echo)))
        for index, response in enumerate(responses)
    ]
    return Completion(id=text_completion_id(), created=now(), model=model_id, choices=choices, usage=usage_of(responses))


async def start_stream(body: CompletionRequest, model: ChatModel, model_id: str, request: ChatRequest) -> AsyncIterator[str]:
    """The SSE body. The first reply item is awaited before the response starts, so a request
    the engine refuses still gets a proper error status."""
    replies = model.astream_replies(request, raw=True)
    try:
        first = await anext(replies)
    except BaseException:
        await replies.aclose()
        raise
    echo = model.render_prompt(request) if body.echo else ""
    return _sse(body, model_id, replies, first, echo)


async def _sse(body: CompletionRequest, model_id: str, replies: AsyncIterator[tuple[int, str | TokenLogprobs | Response]],
               first: tuple[int, str | TokenLogprobs | Response], echo: str) -> AsyncIterator[str]:
    chunk_id, created = text_completion_id(), now()
    # Each reply's token logprobs not sent yet (they go with its next text), and where its text has got to.
    unsent: dict[int, list[TokenLogprobs]] = {}
    offsets = dict.fromkeys(range(body.n), len(echo))

    def chunk(index: int, text: str, finish_reason: str | None = None) -> str:
        tokens = unsent.pop(index, None)
        logprobs = completion_logprobs(tokens, offsets[index]) if tokens else None
        offsets[index] += len(text)
        choice = CompletionChoice(index=index, text=text, logprobs=logprobs, finish_reason=finish_reason)
        return sse_data(Completion(id=chunk_id, created=created, model=model_id, choices=[choice]).model_dump(exclude_none=True))

    finished: list[Response] = []
    try:
        if echo:
            for index in range(body.n):
                yield sse_data(Completion(id=chunk_id, created=created, model=model_id,
                                          choices=[CompletionChoice(index=index, text=echo)]).model_dump(exclude_none=True))
        index, item = first
        while True:
            if isinstance(item, TokenLogprobs):
                unsent.setdefault(index, []).append(item)
            elif isinstance(item, str):
                yield chunk(index, item)
            elif isinstance(item, Response):
                finished.append(item)
                yield chunk(index, "", item.finish_reason)
                if len(finished) == body.n:
                    if body.stream_options and body.stream_options.include_usage:
                        usage = Completion(id=chunk_id, created=created, model=model_id, choices=[], usage=usage_of(finished))
                        yield sse_data(usage.model_dump(exclude_none=True))
                    break
            try:
                index, item = await anext(replies)
            except Exception as error:
                yield sse_data(from_exception(error).body())
                break
        yield "data: [DONE]\n\n"
    finally:
        await replies.aclose()
