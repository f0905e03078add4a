"""``python -m bench --quick`` runs with the test suite, so the benchmarks cannot rot: every
benchmark runs without an error, exits 0, and prints a value for every figure that has a target.
The figures of a quick run mean nothing and are not compared with their targets here."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import BENCHMARKS, main, missed_targets, unjudged_targets
from bench.common import BenchResult, Figure

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(180)
def test_bench_quick_runs_every_benchmark(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "bench", "--quick", "--json", str(out)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(out.read_text(encoding="utf-8"))
    assert document["quick"] is True
    results = {r["name"]: r for r in document["results"]}
    assert list(results) == [name for name, default in BENCHMARKS.items() if default]
    for name, result in results.items():
        assert result["error"] is None, (name, result["error"], result["details"])
        assert result["figures"], f"{name} printed no figure"
        for figure in result["figures"]:
            if figure["target"] is not None:
                value = figure["value"]
                assert isinstance(value, float | int) and math.isfinite(value), (name, figure)
                # judged, or not judged for a stated reason (the baseline answered wrongly)
                assert figure["met"] in (True, False) or figure["unjudged"], (name, figure)
                # ...and the table on stdout shows it, with its verdict.
                row = next(line for line in done.stdout.splitlines()
                           if line.strip().startswith(figure["name"]))
                assert figure["target"] in row, row
                assert ("yes" in row or "NO" in row or "n/a" in row), row


def _result(met: bool | None, target: str | None = "> 1") -> BenchResult:
    return BenchResult("fake", figures=[Figure("figure", 1.0 if met is not None else None, "x",
                                               target=target, met=met)])


def test_missed_targets_are_what_strict_fails_on() -> None:
    assert missed_targets([_result(True)]) == []
    assert missed_targets([_result(None, target=None)]) == []  # no target, nothing to miss
    assert missed_targets([_result(False)]) == ["fake: figure"]
    assert missed_targets([_result(None)]) == ["fake: figure"]  # a target and no value
    # a target that could not be judged (the baseline gave a wrong answer) is listed apart
    unjudged = BenchResult("fake", figures=[Figure("figure", 1.0, "x", target="> 1",
                                                   unjudged="baseline wrong")])
    assert missed_targets([unjudged]) == []
    assert unjudged_targets([unjudged]) == ["fake: figure (baseline wrong)"]
    assert unjudged_targets([_result(False)]) == []


def test_strict_exit_status(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """A missed target: exit 0 without --strict, 1 with it; a benchmark error: 1 either way."""
    import bench.__main__ as bench_main

    outcome: dict[str, BenchResult] = {}
    monkeypatch.setattr(bench_main, "BENCHMARKS", {"fake": True})
    monkeypatch.setattr(bench_main, "benchmark", lambda name: lambda quick: outcome["result"])
    argv = ["--json", str(tmp_path / "out.json")]
    outcome["result"] = _result(False)
    assert main(argv) == 0
    assert main([*argv, "--strict"]) == 1
    assert "TARGETS MISSED: fake: figure" in capsys.readouterr().err
    outcome["result"] = _result(True)
    assert main([*argv, "--strict"]) == 0
    outcome["result"] = BenchResult("fake", error="boom")
    assert main(argv) == 1
