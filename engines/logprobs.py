"""Log-probabilities of a reply's tokens, as OpenAI's API reports them.

A backend that reads the model's logits (llama.cpp, transformers) takes the log-softmax of the
raw logits at each step, before any sampling setting (penalties, temperature, top-k/p) changes
them, as OpenAI and vLLM report them: ``top_logprobs`` gives the numbers, on the thread that
generates. ``LogprobNames`` then puts each token's text to them, on the event loop.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

# As many alternatives per token as OpenAI's API gives.
MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class RawLogprobs:
    """One generated token's id and log-probability, and the ``top`` likeliest (id, log-probability)
    pairs at its place, best first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Logprob:
    """A token's text, log-probability and the UTF-8 bytes of its text."""

    token: str
    logprob: float
    bytes: tuple[int, ...]


@dataclass(frozen=True)
class TokenLogprobs:
    """One token of a reply: its own Logprob, and the likeliest tokens at its place, best first."""

    chosen: Logprob
    top: tuple[Logprob, ...] = ()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities of one step's logits (a vector over the vocabulary), summed in float64."""
    logits = np.asarray(logits, dtype=np.float64)
    peak = logits.max()
    return logits - (peak + np.log(np.exp(logits - peak).sum()))


def top_logprobs(logprobs: np.ndarray, token: int, count: int) -> RawLogprobs:
    """``token``'s log-probability among ``logprobs`` (log_softmax's vector) and the ``count``
    likeliest tokens' (ties broken by the lower id, as a greedy pick breaks them)."""
    if count:
        likeliest = np.argpartition(-logprobs, count - 1)[:count]
        likeliest = likeliest[np.lexsort((likeliest, -logprobs[likeliest]))]
        top = tuple((int(i), float(logprobs[i])) for i in likeliest)
    else:
        top = ()
    return RawLogprobs(int(token), float(logprobs[token]), top)


class LogprobNames:
    """Each token's text for RawLogprobs, with the model's tokenizer. A token's text is what the
    tokenizer decodes it to alone, so a token holding part of a character's UTF-8 bytes reads
    as U+FFFD (as in vLLM)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def named(self, raw: RawLogprobs) -> TokenLogprobs:
        return TokenLogprobs(self._logprob(raw.token, raw.logprob), tuple(self._logprob(i, lp) for i, lp in raw.top))

    def _logprob(self, token: int, logprob: float) -> Logprob:
        text = self._text(token)
        return Logprob(text, logprob, tuple(text.encode("utf-8")))

    @functools.lru_cache(maxsize=65536)  # noqa: B019 (one per loaded model, freed with it)
    def _text(self, token: int) -> str:
        return self._tokenizer.decode([token], skip_special_tokens=False)
