"""Rounds of two ways compared in pairs: each round of one way against the other's in the same
round. On two shared cores the machine drifts between rounds by more than the differences the
benchmarks look for; within a round both ways see the same machine, so the drift cancels out of
each pair, which a comparison of two medians keeps."""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """The median of the pairs' differences or ratios, and the bounds of their middle half (with
    one round, the value itself for all three)."""
    values = sorted(values)
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, _, high = statistics.quantiles(values, n=4)
    return statistics.median(values), low, high
