"""Request and response bodies of POST /v1/completions (OpenAI's legacy text completions), as
strict as the chat bodies in api/schemas.py, whose rules and generation fields they share."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

from engines.logprobs import MAX_TOP_LOGPROBS

from .logprobs import CompletionLogprobs
from .schemas import PromptProgress, StreamOptions, Usage, _RequestBody, generation_field, generation_settings

# OpenAI's default for this endpoint (its chat endpoint has none).
DEFAULT_MAX_TOKENS = 16


class CompletionRequest(_RequestBody):
    model: str
    prompt: str | list[int] | list[str] | list[list[int]] = Field(description="the text to continue, or its token ids")
    max_tokens: int | None = generation_field("max_tokens", default=DEFAULT_MAX_TOKENS)
    temperature: float | None = generation_field("temperature")
    top_p: float | None = generation_field("top_p")
    n: int = generation_field("n", default=1)
    stop: str | list[str] | None = generation_field("stop")
    seed: int | None = generation_field("seed")
    presence_penalty: float | None = generation_field("presence_penalty")
    frequency_penalty: float | None = generation_field("frequency_penalty")
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS, description="report this many likeliest tokens at each place, with the chosen one's")
    echo: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Declared so that they can be refused with a reason; see text_completions.refuse_unsupported.
    suffix: str | None = None
    best_of: int | None = None
    logit_bias: dict[str, float] | None = None
    # Accepted and ignored, as it does not change the reply.
    user: str | None = None
    # Extensions that vLLM's API accepts as well.
    top_k: int | None = generation_field("top_k")
    repetition_penalty: float | None = generation_field("repetition_penalty")
    min_p: float | None = generation_field("min_p")

    def generation(self) -> dict[str, Any]:
        """The generation settings the request gives, under GenerationArgs' names (logprobs is
        GenerationArgs' own: the chosen token's and this many alternatives)."""
        return generation_settings(self)


def text_completion_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None = None


class Completion(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    prompt_progress: PromptProgress | None = None
