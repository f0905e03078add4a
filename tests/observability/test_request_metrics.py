"""RequestMetrics' per-request observation counts what a plain walk of the seven timings would."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st

from trio_broker.observability.metrics import REQUEST_TIME_HISTOGRAMS, RequestMetrics

# Zeros are the usual value (no queue, remote or throttle time) and take a shortcut; bounds
# themselves and values beyond the last bound are the edges.
VALUES = st.one_of(st.just(0.0), st.sampled_from([0.05, 0.1, 1.0, 60000.0, 70000.0]),
                   st.floats(min_value=0.0, max_value=1e6, allow_nan=False))
TIMINGS = st.fixed_dictionaries({field: VALUES for field in REQUEST_TIME_HISTOGRAMS})


@settings(max_examples=200, deadline=None)
@given(st.lists(TIMINGS, min_size=1, max_size=20))
def test_observe_counts_buckets_and_sums_as_a_plain_walk(requests: list[dict[str, float]]
                                                         ) -> None:
    metrics = RequestMetrics()
    bounds = metrics._bounds
    buckets = [[0] * (len(bounds) + 1) for _ in REQUEST_TIME_HISTOGRAMS]
    sums = [0.0] * len(REQUEST_TIME_HISTOGRAMS)
    for timings in requests:
        metrics.observe("Produce", 9, timings, "NONE", 100)
        for index, field in enumerate(RequestMetrics.FIELDS):
            buckets[index][bisect_left(bounds, timings[field])] += 1
            sums[index] += timings[field]
    series = metrics._series["Produce"]
    assert series.buckets == buckets
    assert series.sums == sums
    assert series.versions == {9: len(requests)} and series.errors == {"NONE": len(requests)}
    assert series.bytes == 100 * len(requests)
