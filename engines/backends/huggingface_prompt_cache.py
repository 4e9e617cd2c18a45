"""Conversations' KV caches kept on the transformers backend, so that a chat's next turn reads only
what is new in it.

A text-only reply of one sequence fills a DynamicCache of its own (huggingface.py). When the reply
ends, that cache (its prompt and its reply, all but the last token) is kept here, the least recently
used let go past the limit (``prompt_cache_gb``, as on llama.cpp). A prompt that starts with a kept
conversation takes its cache, cut back to what they share: no copy is made, and no other reply can
use it meanwhile; it comes back, grown by the new turn, once that reply ends.

Replies stay the ones a fresh reading gives, bit for bit: a prompt is read in chunks from its
start, and what a chunk computes depends on where it starts and ends, so only whole chunks of an
earlier reading are reused (its last, shorter chunk and the reply's tokens, computed one by one,
are read again). That is up to a chunk (512 tokens) read again per turn, for none of the greedy
replies moved at near-ties that reading the rest otherwise would.
"""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Sequence
from typing import Any

# Fewer tokens than this are read again sooner than a cache is looked for and cut.
MIN_TOKENS = 64


def common_start(first: Sequence[int], second: Sequence[int]) -> int:
    """How many first items the two share."""
    common = 0
    for a, b in zip(first, second):
        if a != b:
            break
        common += 1
    return common


def cache_bytes(cache: Any) -> int:
    """The memory of a DynamicCache's keys and values."""
    return sum(tensor.numel() * tensor.element_size() for layer in cache.layers
               for tensor in (layer.keys, layer.values) if tensor is not None)


class KeptCaches:
    """Conversations' caches by the token ids they hold, within ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.hits = 0
        # ids, cache, how many of its first tokens a fresh reading would compute alike, bytes
        self._kept: collections.OrderedDict[int, tuple[list[int], Any, int, int]] = collections.OrderedDict()
        self._names = itertools.count()
        self._lock = threading.Lock()

    def take(self, prompt: list[int], chunk: int) -> tuple[Any, int]:
        """The kept cache that holds the longest start of ``prompt`` in whole ``chunk``-token
        chunks of a fresh reading (64 tokens at least), cut to it, short of the prompt's last token
        (whose logits the reply needs); and its length. (None, 0) where none does."""
        def reusable(ids: list[int], exact: int) -> int:
            return min(common_start(ids, prompt), exact, len(prompt) - 1) // chunk * chunk

        with self._lock:
            found = max(((key, reusable(ids, exact)) for key, (ids, _, exact, _) in self._kept.items()),
                        key=lambda pair: pair[1], default=None)
            if found is None or found[1] < MIN_TOKENS:
                return None, 0
            _, cache, _, _ = self._kept.pop(found[0])
            if not cache.is_croppable:  # a sliding window has let go of its start already
                return None, 0
            self.hits += 1
        reused = found[1]
        if reused < cache.get_seq_length():
            cache.crop(reused - cache.get_seq_length())  # a negative count: the tokens to let go of
        return cache, reused

    def keep(self, ids: list[int], cache: Any, exact: int) -> None:
        """``cache``, which holds ``ids``, for a later prompt that starts with them; its first
        ``exact`` tokens were read in whole chunks from the start. Where it holds all of a kept
        one, that one is of no more use."""
        size = cache_bytes(cache)
        if exact < MIN_TOKENS or size > self.limit:
            return
        with self._lock:
            for key, (held, _, _, _) in list(self._kept.items()):
                if common_start(held, ids) == len(held):
                    del self._kept[key]
            self._kept[next(self._names)] = (ids, cache, exact, size)
            while sum(size for *_, size in self._kept.values()) > self.limit:
                self._kept.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()

    @property
    def summary(self) -> dict[str, int]:
        """What it holds, as /v1/models and the status line show it."""
        with self._lock:
            return {"conversations": len(self._kept), "memory_bytes": sum(size for *_, size in self._kept.values()), "hits": self.hits}
