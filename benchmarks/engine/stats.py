"""Medians with bootstrap intervals over repeats, and ratios of medians with theirs: how the engine
A/B says whether a difference was measured. A repeat (one pass of a cell's requests against one
server) is the unit resampled: requests inside a pass share the server's state and are not
independent. Seeded, so a report rebuilt from the same summaries is byte for byte the same.

Standard library only.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

RESAMPLES = 10_000
LEVEL = 0.95
#: Two runs of one cell agree when their medians differ by at most this share.
RUN_AGREEMENT = 0.05


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float
    n: int

    def excludes(self, x: float) -> bool:
        return self.low > x or self.high < x


def _quantiles(stats: list[float], level: float) -> tuple[float, float]:
    stats.sort()
    lo = int((1 - level) / 2 * (len(stats) - 1))
    return stats[lo], stats[len(stats) - 1 - lo]


def median_interval(values: Sequence[float], *, seed: str, resamples: int = RESAMPLES,
                    level: float = LEVEL) -> Interval:
    """The median of `values` and a percentile-bootstrap interval for it."""
    if not values:
        raise ValueError("no values: a cell without a completed repeat has no median")
    rng = random.Random(seed)
    n = len(values)
    boot = [statistics.median(rng.choices(values, k=n)) for _ in range(resamples)]
    low, high = _quantiles(boot, level)
    return Interval(statistics.median(values), low, high, n)


def ratio_interval(a: Sequence[float], b: Sequence[float], *, seed: str, resamples: int = RESAMPLES,
                   level: float = LEVEL) -> Interval:
    """median(a) / median(b), with each arm's repeats resampled on their own (the arms ran apart)."""
    if not a or not b:
        raise ValueError("a ratio needs repeats on both arms")
    if statistics.median(b) == 0:
        raise ValueError("the denominator's median is 0")
    rng = random.Random(seed)
    boot = []
    for _ in range(resamples):
        den = statistics.median(rng.choices(b, k=len(b)))
        boot.append(statistics.median(rng.choices(a, k=len(a))) / den if den else float("inf"))
    low, high = _quantiles(boot, level)
    return Interval(statistics.median(a) / statistics.median(b), low, high, min(len(a), len(b)))


def verdict(ratio: Interval, *, lower_is_better: bool) -> str:
    """'faster' / 'slower' (of the numerator's arm) only where the interval excludes 1.0 over enough
    repeats; the rule is the model card's (builder.bundle.engine_evidence.verdict_of), imported here
    only when asked so the rest of this module stays standard library."""
    from builder.bundle.engine_evidence import verdict_of

    return verdict_of(low=ratio.low, high=ratio.high, n=ratio.n, lower_is_better=lower_is_better)


def run_spread(first: float, second: float) -> float:
    """|second - first| / first: how far a second run's median moved from the first's."""
    if first == 0:
        raise ValueError("the first run's median is 0")
    return abs(second - first) / first
