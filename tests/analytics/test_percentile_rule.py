"""The analytics' percentile rule, sans-IO (no PySpark, no JVM: runs in the unit session).

The headline p50/p95/p99 of ``total_ms`` per API are the nearest rank (``percentile_disc``):
the value at rank ``ceil(p * n)``, at least 1, of the ``n`` ordered values. The Spark job
(``headline_percentiles``) builds that rank from :func:`nearest_rank` with Spark's ``ceil`` and
``greatest``; the spark session checks the job against ``percentile_disc`` itself. Every other
percentile comes from KLL sketches, whose rank error the summary states."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import pytest

from trio_broker.analytics.request_tables import (
    HEADLINE_METHOD,
    KLL_K,
    KLL_RANK_ERROR,
    PERCENTILES,
    kll_rank_error,
    nearest_rank,
)


def _percentile(values: list[float], pct: float) -> float:
    return sorted(values)[nearest_rank(pct, len(values)) - 1]


@pytest.mark.parametrize(("count", "ranks"), [
    (1, (1, 1, 1)),
    (2, (1, 2, 2)),
    (4, (2, 4, 4)),
    (20, (10, 19, 20)),
    (100, (50, 95, 99)),
    (101, (51, 96, 100)),
    (200, (100, 190, 198)),
    (1000, (500, 950, 990)),
])
def test_nearest_rank_is_the_ceiling_of_p_times_n(count: int, ranks: tuple[int, ...]) -> None:
    assert PERCENTILES == (0.5, 0.95, 0.99)
    assert tuple(nearest_rank(pct, count) for pct in PERCENTILES) == ranks


def test_nearest_rank_is_at_least_one() -> None:
    """A rank of 0 would pick no value (or, as an index, the last one)."""
    for pct in (0.0, 1e-9, *PERCENTILES):
        assert nearest_rank(pct, 0) == 1
        assert nearest_rank(pct, 1) == 1
    assert nearest_rank(0.0, 50) == 1


def test_nearest_rank_is_the_smallest_rank_that_covers_p_of_the_values() -> None:
    """The definition, in exact decimal arithmetic: the rank r with r/n >= p and (r-1)/n < p.
    The float product p * n never rounds across an integer for these percentiles."""
    for pct in PERCENTILES:
        exact = Fraction(str(pct))
        for count in range(1, 20_001):
            rank = nearest_rank(pct, count)
            assert Fraction(rank, count) >= exact, (pct, count, rank)
            assert rank == 1 or Fraction(rank - 1, count) < exact, (pct, count, rank)


def test_the_percentile_is_a_value_of_the_group_not_an_interpolation() -> None:
    assert [_percentile([4.0, 1.0, 3.0, 2.0], pct) for pct in PERCENTILES] == [2.0, 4.0, 4.0]
    hundred = [float(v) for v in range(100, 0, -1)]
    assert [_percentile(hundred, pct) for pct in PERCENTILES] == [50.0, 95.0, 99.0]
    assert [_percentile([7.5], pct) for pct in PERCENTILES] == [7.5, 7.5, 7.5]


def test_the_percentile_is_the_smallest_value_whose_running_count_reaches_the_rank() -> None:
    """What the Spark job does on counts per distinct value (ties) equals the sorted list's
    value at the rank."""
    counts = {0.125: 5, 0.25: 10, 1.0: 4, 9.0: 1}
    values = [value for value, n in counts.items() for _ in range(n)]
    total = sum(counts.values())
    for pct in PERCENTILES:
        running = 0
        picked = None
        for value in sorted(counts):
            running += counts[value]
            if running >= nearest_rank(pct, total):
                picked = value
                break
        assert picked == _percentile(values, pct)
    assert [_percentile(values, pct) for pct in PERCENTILES] == [0.25, 1.0, 9.0]


class _Expr:
    """A stand-in for a Spark column: records the expression built on it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __rmul__(self, other: Any) -> _Expr:
        return _Expr(f"({other} * {self.text})")


def test_the_spark_rule_is_greatest_of_ceil_p_times_n_and_one() -> None:
    """The operations the Spark job passes in are applied in the rule's order: ceil of
    p * n first, then at least 1 (``F.greatest(..., F.lit(1))``)."""
    built = nearest_rank(0.95, _Expr("_all"), ceil=lambda e: _Expr(f"ceil{e.text}"),
                         at_least=lambda e, low: _Expr(f"greatest({e.text}, {low})"))
    assert built.text == "greatest(ceil(0.95 * _all), 1)"


def test_kll_rank_error_is_datasketches_bound() -> None:
    """DataSketches documents 1.33% (one quantile, 99% confidence) for its default k=200;
    the error shrinks as k grows, and the summary states it for the k in use."""
    assert kll_rank_error(200) == pytest.approx(0.0133, abs=5e-5)
    assert kll_rank_error(1000) < kll_rank_error(200) < kll_rank_error(100)
    assert KLL_K == 1000
    assert kll_rank_error(KLL_K) == KLL_RANK_ERROR
    assert f"{KLL_RANK_ERROR:.2%}" == "0.28%"  # what docs/performance.md states
    assert math.isclose(KLL_RANK_ERROR, 2.296 / 1000**0.9723)
    assert "nearest rank" in HEADLINE_METHOD and "exact" in HEADLINE_METHOD
