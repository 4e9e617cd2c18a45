"""Turning a stream of token ids or text into a stream of text, with stop strings cut off."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class StopStringFilter:
    """Passes text on as it arrives, except text that could be the start of a stop string,
    which is held back until it is clear. Once a stop string appears, the text before it is
    the last given out and ``stopped`` turns true."""

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._stop = tuple(stop)
        self._pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self._stop:
            return text
        pending = self._pending + text
        cut = find_stop(pending, self._stop)
        if cut is not None:
            self.stopped = True
            self._pending = ""
            return pending[:cut]
        keep = partial_suffix_length(pending, self._stop)
        self._pending = pending[len(pending) - keep :]
        return pending[: len(pending) - keep]

    def flush(self) -> str:
        """The held-back text once the reply has ended (it did not become a stop string)."""
        text, self._pending = ("" if self.stopped else self._pending), ""
        return text


class IncrementalDecoder:
    """Decodes token ids as they arrive, in O(new tokens) per step, through a StopStringFilter.

    A token may end in the middle of a multi-byte character (the decoder then shows U+FFFD);
    such text is held back until the character is complete.
    """

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True, stop: Sequence[str] = ()) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._filter = StopStringFilter(stop)
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0

    @property
    def stopped(self) -> bool:
        return self._filter.stopped

    def push(self, new_ids: Sequence[int]) -> str:
        """Add tokens; return the text that is now safe to show."""
        if self.stopped:
            return ""
        self._ids.extend(new_ids)
        decode = self._tokenizer.decode
        prefix_text = decode(self._ids[self._prefix_offset : self._read_offset], skip_special_tokens=self._skip_special)
        full_text = decode(self._ids[self._prefix_offset :], skip_special_tokens=self._skip_special)
        if len(full_text) <= len(prefix_text) or full_text.endswith("\ufffd"):
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return self._filter.push(full_text[len(prefix_text) :])

    def flush(self) -> str:
        return self._filter.flush()


def find_stop(text: str, stop: Sequence[str]) -> int | None:
    """Index where the earliest stop string starts, or None."""
    positions = [index for index in (text.find(s) for s in stop) if index != -1]
    return min(positions) if positions else None


def partial_suffix_length(text: str, markers: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that some marker starts with (but is not all of)."""
    for length in range(min(max(map(len, markers), default=1) - 1, len(text)), 0, -1):
        if any(marker.startswith(text[-length:]) for marker in markers):
            return length
    return 0
