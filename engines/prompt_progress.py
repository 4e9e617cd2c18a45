"""How far the model has read a long prompt, for a progress line before the first word."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PromptRead:
    """``read`` of the prompt's ``total`` tokens are in the model's cache, ``cached`` of them
    taken from an earlier request's (so never read this time); ``seconds`` since the reading began.
    Sent after each piece of a prompt that takes more than one, by the backends that read a
    prompt piece by piece (llama.cpp)."""

    read: int
    total: int
    cached: int
    seconds: float
