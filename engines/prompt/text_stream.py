"""Turning a stream of token ids or text into a stream of text, with stop strings cut off."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any


class StopStringFilter:
    """Passes text on as it arrives, except text that could be the start of a stop string,
    which is held back until it is clear. Once a stop string appears, the text before it is
    the last given out and ``matched`` is that stop string. Each piece costs in proportion to
    its own length, however long the stop strings are."""

    def __init__(self, stop: Sequence[str] = ()) -> None:
        self._matchers = [_MarkerMatcher(marker) for marker in stop]
        self._pending = ""
        self.matched: str | None = None

    @property
    def stopped(self) -> bool:
        return self.matched is not None

    def push(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self._matchers:
            return text
        held, pending = len(self._pending), self._pending + text
        ends = [(end, matcher.marker) for matcher in self._matchers if (end := matcher.feed(text)) is not None]
        if ends:
            # The stop string the model completed first, as find_stop picks it.
            end, marker = min(ends, key=lambda found: found[0])
            self.matched = marker
            self._pending = ""
            return pending[: held + end - len(marker)]
        keep = max(matcher.matched for matcher in self._matchers)
        self._pending = pending[len(pending) - keep :]
        return pending[: len(pending) - keep]

    def flush(self) -> str:
        """The held-back text once the reply has ended (it did not become a stop string)."""
        text, self._pending = ("" if self.stopped else self._pending), ""
        return text


class _MarkerMatcher:
    """Looks for one marker in text read piece by piece, in time linear in the text
    (Knuth-Morris-Pratt): ``matched`` is the length of the longest end of what was read that
    the marker starts with."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.matched = 0
        self._fallback = _fallbacks(marker)

    def feed(self, text: str) -> int | None:
        """Read ``text``; the index in it just past the marker's first whole occurrence, or None."""
        marker, fallback, matched = self.marker, self._fallback, self.matched
        for index, char in enumerate(text):
            while matched and marker[matched] != char:
                matched = fallback[matched - 1]
            if marker[matched] == char:
                matched += 1
                if matched == len(marker):
                    self.matched = matched
                    return index + 1
        self.matched = matched
        return None


@functools.lru_cache(maxsize=256)
def _fallbacks(marker: str) -> tuple[int, ...]:
    """For each length k, the longest proper end of marker[:k] that is also a start of it."""
    fallback = [0] * len(marker)
    matched = 0
    for index in range(1, len(marker)):
        while matched and marker[index] != marker[matched]:
            matched = fallback[matched - 1]
        if marker[index] == marker[matched]:
            matched += 1
        fallback[index] = matched
    return tuple(fallback)


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

    @property
    def stop_sequence(self) -> str | None:
        """The stop string that ended the text, once one has."""
        return self._filter.matched

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


def find_stop(text: str, stop: Sequence[str]) -> tuple[int, str] | None:
    """The stop string that ends first in ``text`` (ties: the first given), so the one the model
    met first writing ``text``, and where it starts; None if none is in it."""
    first = None
    for marker in stop:
        index = text.find(marker)
        if index != -1 and (first is None or index + len(marker) < first[0]):
            first = (index + len(marker), index, marker)
    return None if first is None else first[1:]


def partial_suffix_length(text: str, markers: Sequence[str]) -> int:
    """Length of the longest end of ``text`` that some marker starts with (but is not all of)."""
    longest = 0
    for marker in markers:
        matcher = _MarkerMatcher(marker)
        matcher.feed(text[max(0, len(text) - len(marker) + 1) :])
        longest = max(longest, matcher.matched)
    return longest
