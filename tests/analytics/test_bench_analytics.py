"""The analytics benchmark cannot rot: a small run produces every figure, and analyze's headline
figures equal the plain-Python baseline's (the bench's own check)."""

from __future__ import annotations

import pytest

from bench import analytics

pytestmark = pytest.mark.spark


@pytest.mark.timeout(300)
def test_small_analytics_bench_runs_and_agrees() -> None:
    result = analytics.run(False, lines=20_000)
    assert result.error is None
    figures = {f.name: f for f in result.figures}
    wall = figures["analyze wall time"]
    assert wall.value and wall.baseline_value and wall.note == "headline figures equal the " \
        "baseline's"
    peak = figures["analyze peak RSS (process tree, JVM included)"]
    assert peak.value and peak.value > 100  # MiB: the JVM was measured, not only Python
    cpu = figures["analyze CPU time (process tree, JVM included)"]
    assert cpu.value and cpu.baseline_value and cpu.value > 1  # s: the JVM's CPU is counted
    assert any("load average" in note for note in result.notes)
