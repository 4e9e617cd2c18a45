"""Turning a stream of token ids into a stream of text, with stop strings cut off."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class IncrementalDecoder:
    """Decodes token ids as they arrive, in O(new tokens) per step.

    A token may end in the middle of a multi-byte character (the decoder then shows U+FFFD);
    such text is held back until the character is complete. Text that could be the start of a
    stop string is held back too, and once a stop string appears, the text before it is the
    last that is given out and ``stopped`` turns true.
    """

    def __init__(self, tokenizer: Any, skip_special_tokens: bool = True, stop: Sequence[str] = ()) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._stop = tuple(stop)
        self._ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self._pending = ""
        self.stopped = False

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
        return self._release(full_text[len(prefix_text) :])

    def flush(self) -> str:
        """The held-back text once generation has ended (it did not become a stop string)."""
        if self.stopped:
            return ""
        text, self._pending = self._pending, ""
        return text

    def _release(self, text: str) -> str:
        if not self._stop:
            return text
        pending = self._pending + text
        cut = find_stop(pending, self._stop)
        if cut is not None:
            self.stopped = True
            self._pending = ""
            return pending[:cut]
        keep = _longest_stop_prefix_suffix(pending, self._stop)
        self._pending = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep]


def find_stop(text: str, stop: Sequence[str]) -> int | None:
    """Index where the earliest stop string starts, or None."""
    positions = [index for index in (text.find(s) for s in stop) if index != -1]
    return min(positions) if positions else None


def _longest_stop_prefix_suffix(text: str, stop: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that some stop string starts with."""
    longest = 0
    for s in stop:
        for length in range(min(len(s) - 1, len(text)), longest, -1):
            if s.startswith(text[-length:]):
                longest = length
                break
    return longest
