"""The pytest plugin's cost per test: set-up plus tear-down of ``kafka_broker`` (a broker in a
thread) and ``trio_kafka_broker`` (in the test's Trio run), each a fresh broker with its own data
directory, in a real pytest session (a subprocess, ``-p trio_broker.testing``).

Baseline: the same session's tests with pytest's ``tmp_path`` fixture only (what any test that
touches files pays). Target: <= 50 ms per test (a Kafka container takes seconds to start).
Brokers keep their data in /dev/shm by default; one more figure keeps it in ``tmp_path`` on disk,
where the start's and the clean stop's fsyncs cost most of the time.
The first test of a session also pays the imports; it is reported apart, not in the median.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from .common import REPO_ROOT, BenchResult, Figure, median

TARGET_S = 0.050

# Records each test's set-up + call + tear-down (pytest's own phase durations). The call is
# included because pytest-trio sets up async fixtures inside the call; the test bodies are empty.
CONFTEST = """
import json, os

_TIMES = {}

def pytest_runtest_logreport(report):
    if report.when in ("setup", "call", "teardown"):
        _TIMES[report.nodeid] = _TIMES.get(report.nodeid, 0.0) + report.duration

def pytest_sessionfinish(session):
    with open(os.environ["PLUGIN_BENCH_OUT"], "w") as out:
        json.dump(_TIMES, out)
"""


def _session(workdir: Path, fixture: str, tests: int, is_async: bool, ini: str = ""
             ) -> list[float]:
    """Seconds of each (empty) test, fixtures included, in order."""
    workdir.mkdir(parents=True)
    (workdir / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (workdir / "pytest.ini").write_text(f"[pytest]\ntrio_mode = true\n{ini}", encoding="utf-8")
    prefix = "async def" if is_async else "def"
    body = "".join(f"{prefix} test_{i:03d}({fixture}):\n    pass\n\n" for i in range(tests))
    (workdir / "test_cost.py").write_text(textwrap.dedent(body), encoding="utf-8")
    out = workdir / "times.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PLUGIN_BENCH_OUT": str(out)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "trio_broker.testing", "-p", "no:cacheprovider",
         "-q", "test_cost.py"], cwd=workdir, env=env, capture_output=True, text=True,
        timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"inner session failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    times: dict[str, float] = json.loads(out.read_text(encoding="utf-8"))
    return [times[key] for key in sorted(times)]


def run(quick: bool) -> BenchResult:
    tests = 4 if quick else 40
    result = BenchResult("plugin_fixture")
    with tempfile.TemporaryDirectory(prefix="trio-broker-plugin-bench-") as tmp:
        root = Path(tmp)
        baseline = _session(root / "baseline", "tmp_path", tests, False)
        threaded = _session(root / "threaded", "kafka_broker", tests, False)
        in_trio = _session(root / "trio", "trio_kafka_broker", tests, True)
        on_disk = _session(root / "disk", "kafka_broker", tests, False,
                           "kafka_broker_data_dir = tmp_path\n")
    floor = median(baseline[1:])
    threaded_median, trio_median = median(threaded[1:]), median(in_trio[1:])
    result.figures += [
        Figure("kafka_broker set-up + tear-down (median)", threaded_median, "s",
               "tmp_path fixture", floor, f"<= {TARGET_S * 1000:.0f} ms",
               threaded_median <= TARGET_S),
        Figure("trio_kafka_broker set-up + tear-down (median)", trio_median, "s",
               "tmp_path fixture", floor, f"<= {TARGET_S * 1000:.0f} ms",
               trio_median <= TARGET_S),
        Figure("kafka_broker, data in tmp_path (median)", median(on_disk[1:]), "s",
               "tmp_path fixture", floor, note="kafka_broker_data_dir = tmp_path: fsyncs on disk"),
        Figure("kafka_broker, first test of a session", threaded[0], "s",
               note="includes importing the broker"),
        Figure("kafka_broker slowest test", max(threaded[1:]), "s"),
    ]
    result.notes.append(f"{tests} tests per session; medians leave out the first test")
    return result
