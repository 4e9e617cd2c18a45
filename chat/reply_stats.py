"""The small line under each finished reply: its tokens, speed, time to first token and backend."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel

from engines import BACKEND_NAMES, ChatModel, PromptRead, QueuePlace, Response
from engines.compaction import Compacting, Compaction
from tools import StepLimitReached, ToolResult, ToolsRunning


class ReplyStats(BaseModel):
    """How a reply was written. ``finish_reason``: the model's own ("stop", "length"), or
    "stopped" where the user stopped it. The rate counts the tokens after the first, over the
    time after the first, so that it is the model's writing speed, apart from reading the prompt."""

    tokens: int
    tokens_per_second: float | None
    first_token_seconds: float | None
    # Conversation files bring stats from elsewhere, and the line is shown as HTML: names only.
    backend: Literal[BACKEND_NAMES]
    finish_reason: Literal["stop", "length", "stopped"]
    # The (last) answer's prompt, and how much of it the backend found cached (stats saved before
    # these were kept have neither).
    prompt_tokens: int | None = None
    cached_tokens: int | None = None

    def after(self, earlier: ReplyStats | None) -> ReplyStats:
        """These stats of a continued reply's new part, over the whole reply (``earlier``: its
        first part's, None where unknown): all its tokens, its first token, and the rate over
        the writing time of both parts (each part's time after its own first token)."""
        if earlier is None:
            return self
        after_first = max(earlier.tokens - 1, 0) + max(self.tokens - 1, 0)
        writing = sum((part.tokens - 1) / part.tokens_per_second for part in (earlier, self) if part.tokens_per_second)
        return self.model_copy(update={
            "tokens": earlier.tokens + self.tokens,
            "tokens_per_second": after_first / writing if writing > 0 else None,
            "first_token_seconds": earlier.first_token_seconds,
        })

    def line(self) -> str:
        if self.finish_reason == "stopped":
            parts = [f"■ stopped after {self.tokens} tokens"]
        else:
            parts = [f"{self.tokens} tokens" + (" (max_new_tokens reached)" if self.finish_reason == "length" else "")]
        if self.tokens_per_second is not None:
            parts.append(f"{self.tokens_per_second:.1f} tokens/s")
        if self.first_token_seconds is not None:
            seconds = self.first_token_seconds
            parts.append(f"first token {seconds * 1000:.0f} ms" if seconds < 1 else f"first token {seconds:.1f} s")
        if self.prompt_tokens:
            parts.append(f"{self.prompt_tokens:,}-token prompt" + (f", {self.cached_tokens:,} cached" if self.cached_tokens else ""))
        parts.append(self.backend)
        return " · ".join(parts)


class ReplyClock:
    """Times one reply of ``model`` as it leaves the model, before the page's throttling holds it
    back (chat/streaming.py hands it each item as it comes). A reply that ran tools is timed over
    all its answers, without the time its tools took."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.started = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        # The last answer's Response, once it has one; the tokens of the answers before it.
        self.response: Response | None = None
        self.earlier_tokens = 0
        self.tools_started: float | None = None
        self.tools_took = 0.0

    def note(self, item: Any) -> None:
        """One item of the reply, as it leaves the model or its tools."""
        if isinstance(item, QueuePlace):  # waiting behind others is not the model's time
            if self.first is None:
                self.started = time.perf_counter()
            return
        if isinstance(item, ToolsRunning):
            self.earlier_tokens += self.response.response_length if self.response is not None else 0
            self.response, self.tools_started = None, time.perf_counter()
            return
        if isinstance(item, ToolResult | StepLimitReached):
            return
        now = time.perf_counter()
        if self.tools_started is not None:  # the next answer's first item: the tools are done
            self.tools_took += now - self.tools_started
            self.tools_started = None
        if isinstance(item, PromptRead | Compacting | Compaction):  # the model is reading or summarizing: no token yet
            return
        self.last = now
        if self.first is None:
            self.first = self.last
        if isinstance(item, Response):
            self.response = item

    def stats(self, text: str) -> ReplyStats:
        """The finished reply's stats; ``text``, what a stopped reply had written, is counted in tokens."""
        if self.response is not None:
            tokens, finish_reason = self.earlier_tokens + self.response.response_length, self.response.finish_reason
        else:
            tokens, finish_reason = self.model.count_tokens(text), "stopped"
        writing = (self.last or 0) - (self.first or 0) - self.tools_took
        return ReplyStats(
            tokens=tokens,
            tokens_per_second=(tokens - 1) / writing if tokens > 1 and writing > 0 else None,
            first_token_seconds=None if self.first is None else self.first - self.started,
            backend=self.model.backend,
            finish_reason=finish_reason,
            prompt_tokens=self.response.prompt_length if self.response is not None else None,
            cached_tokens=self.response.cached_tokens if self.response is not None else None,
        )
