"""Log-probabilities in OpenAI's shapes: chat's (``choices[].logprobs.content``, with
``top_logprobs`` per token) and the legacy completions' (``tokens``, ``token_logprobs``,
``top_logprobs`` as one object per token, ``text_offset``)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from engines.logprobs import Logprob, TokenLogprobs


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob] | None = None
    refusal: list[ChatTokenLogprob] | None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


def _top(logprob: Logprob) -> TopLogprob:
    return TopLogprob(token=logprob.token, logprob=logprob.logprob, bytes=list(logprob.bytes))


def chat_logprobs(tokens: Sequence[TokenLogprobs] | None) -> ChatLogprobs | None:
    if tokens is None:
        return None
    return ChatLogprobs(content=[
        ChatTokenLogprob(**_top(token.chosen).model_dump(), top_logprobs=[_top(top) for top in token.top]) for token in tokens
    ])


def completion_logprobs(tokens: Sequence[TokenLogprobs] | None, start: int = 0) -> CompletionLogprobs | None:
    """The legacy shape, its ``text_offset`` counted in characters from ``start`` (where the
    tokens' text begins in the choice's text)."""
    if tokens is None:
        return None
    offsets = []
    for token in tokens:
        offsets.append(start)
        start += len(token.chosen.token)
    return CompletionLogprobs(
        tokens=[token.chosen.token for token in tokens],
        token_logprobs=[token.chosen.logprob for token in tokens],
        # Alternatives spelled alike (tokens decoding to the same text) keep the likeliest.
        top_logprobs=[{top.token: top.logprob for top in reversed(token.top)} for token in tokens],
        text_offset=offsets,
    )
