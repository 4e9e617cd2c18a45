"""What a model's replies took, counted for operators (api/metrics.py serves it in Prometheus'
text format): replies, prompt tokens and those of them found in the prompt cache, reply tokens,
the wait for the first token and the time per token after it. Every door's replies are counted
(the page's, the API's, the terminal's, summaries'), as ChatModel sees them all."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .backends.base import Response

# Seconds from a request to its reply's first token: a short prompt on a small model takes tens of
# milliseconds, a long one waiting in line minutes.
FIRST_TOKEN_BOUNDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Seconds per token after the first: 5 ms is 200 tokens a second, 1 s a model past its machine.
PER_TOKEN_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


@dataclass
class Histogram:
    """Observations counted under each bound (the last count: above every bound), with their sum."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[next((index for index, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))] += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus' buckets: how many are at most each bound, "+Inf" last."""
        running, buckets = 0, []
        for bound, count in zip([*map(str, self.bounds), "+Inf"], self.counts):
            running += count
            buckets.append((bound, running))
        return buckets


class ReplyMeter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.replies = 0
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.reply_tokens = 0
        self.first_token = Histogram(FIRST_TOKEN_BOUNDS)
        self.per_token = Histogram(PER_TOKEN_BOUNDS)

    def replied(self, response: Response, waited: float | None = None, writing: float | None = None) -> None:
        """A finished reply; ``waited``: seconds from its request to its first token, ``writing``:
        from its first token to its last (None where the reply was not streamed)."""
        with self._lock:
            self.replies += 1
            self.prompt_tokens += response.prompt_length
            self.cached_tokens += response.cached_tokens
            self.reply_tokens += response.response_length
            if waited is not None:
                self.first_token.observe(waited)
            if writing is not None and response.response_length > 1:
                self.per_token.observe(writing / (response.response_length - 1))
