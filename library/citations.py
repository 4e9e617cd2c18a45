"""A reply's citations ([1], [2], or [1, 3]) read back to the passages the model was given."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

_CITATION = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
Numbered = TypeVar("Numbered")


def cited_numbers(reply: str) -> list[int]:
    """The numbers the reply cites, in the order first cited."""
    numbers: list[int] = []
    for found in _CITATION.finditer(reply):
        for number in found[1].split(","):
            if int(number) not in numbers:
                numbers.append(int(number))
    return numbers


def cited(reply: str, given: Sequence[Numbered]) -> tuple[list[Numbered], list[int]]:
    """The passages of ``given`` (numbered from 1, in order) that the reply cites, in the order
    first cited, and the numbers it cites that name no passage given (which the page says)."""
    numbers = cited_numbers(reply)
    return [given[number - 1] for number in numbers if 1 <= number <= len(given)], [n for n in numbers if not 1 <= n <= len(given)]
