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
    walls = {f.baseline: f for f in result.figures if f.name == "analyze wall time, 20,000 lines"}
    assert set(walls) == {"single-pass Python", "minimal PySpark job"}
    python, minimal = walls["single-pass Python"], walls["minimal PySpark job"]
    assert python.value and python.baseline_value and minimal.baseline_value
    # analyze's headline figures equal plain Python's, and the minimal job counted the same.
    assert python.note == "headline figures equal the baseline's"
    assert minimal.met is not None and python.met is not None
    figures = {f.name: f for f in result.figures}
    peak = figures["analyze peak RSS (process tree, JVM included), 20,000 lines"]
    assert peak.value and peak.value > 100  # MiB: the JVM was measured, not only Python
    assert peak.baseline_value and peak.baseline_value > 100  # the minimal job's JVM too
    cpu = figures["analyze CPU time (process tree, JVM included), 20,000 lines"]
    assert cpu.value and cpu.baseline_value and cpu.value > 1  # s: the JVM's CPU is counted
    assert any("load average" in note for note in result.notes)
