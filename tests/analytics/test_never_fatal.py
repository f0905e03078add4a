"""No input makes ``trio_broker analyze`` fail (issue 30, item 2; docs/logging.md).

Bad files (empty, truncated or fake gzip, unreadable, a directory, a symlink loop, missing,
names Hadoop cannot take) among good ones, and lines with values out of range (a numeric
timestamp, ``1e308`` milliseconds): the run ends with ``summary.json`` and ``report.html``,
every good line counted, each bad file named in ``unusable_files`` with its reason and each
bad line counted as unusable with its problem. Each test runs the whole job (one SparkSession
for the module: the session fixture), so the examples are few.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.analytics.analytics_logs import scenario, write_scenario
from trio_broker.analytics import cli
from trio_broker.analytics.jobs import run_analysis

pytestmark = pytest.mark.spark

GOOD = {"timestamp": "2026-03-14T09:00:00Z", "level": "info", "event": "request", "broker": 1,
        "api": "Produce", "client_id": "p", "total_ms": 1.5, "request_bytes": 10,
        "response_bytes": 20}


def _good_lines(count: int, start: int = 0) -> list[str]:
    return [json.dumps({**GOOD, "timestamp": f"2026-03-14T09:{(start + i) % 60:02d}:00Z",
                        "correlation_id": start + i}) for i in range(count)]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _gzip(path: Path, lines: list[str]) -> Path:
    path.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode()))
    return path


def _truncated_gzip(path: Path) -> Path:
    data = gzip.compress("".join(line + "\n" for line in _good_lines(200)).encode())
    path.write_bytes(data[: len(data) // 2])
    return path


def _unreadable(path: Path) -> bool:
    try:
        with path.open("rb"):
            return False
    except PermissionError:
        return True


def _check_outputs(out: Path, summary: dict[str, Any]) -> None:
    written = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert written["unusable_files"] == summary["unusable_files"]
    assert "<html" in (out / "report.html").read_text(encoding="utf-8")
    assert not (out / "_inputs").exists(), "the safe-name links are removed at the end"
    assert summary["usable_lines"] == sum(summary["events_by_name"].values())
    assert summary["usable_lines"] + summary["unusable_lines"] == summary["lines"]


@pytest.mark.timeout(900)
def test_every_bad_file_and_value_among_good_files(spark: Any, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    scenario_files = write_scenario(logs / "broker.log", scenario(minutes=1))
    scenario_lines = sum(len(p.read_text().splitlines()) for p in scenario_files)
    # Good files under names Hadoop cannot take as they are (":", glob characters, hidden).
    colon = _write(logs / "broker-2026-11-27T19:00.log", _good_lines(4, start=10))
    globby = _write(logs / "b[1]{x}*?\\ %é.log", _good_lines(3, start=20))
    hidden = _write(logs / "_under.log", _good_lines(2, start=30))
    zipped = _gzip(logs / "broker-2026-11-27T18:00.log.1.gz", _good_lines(5, start=40))
    # Lines with values out of range, in a file whose name has a colon.
    bad_values = {
        "bad timestamp": [json.dumps({**GOOD, "timestamp": 12345}),
                          json.dumps({**GOOD, "timestamp": 1700000000}),
                          json.dumps({**GOOD, "timestamp": "0001-01-01T00:00:00Z"})],
        "out of range: total_ms": [json.dumps({**GOOD, "total_ms": 1e308}),
                                   '{"timestamp": "2026-03-14T09:00:00Z", "event": "request", '
                                   '"api": "Produce", "total_ms": NaN}',
                                   json.dumps({**GOOD, "total_ms": -1.0}),
                                   json.dumps({**GOOD, "total_ms": "Infinity"})],
        "out of range: local_ms": [json.dumps({**GOOD, "local_ms": 2e12})],
        "out of range: request_bytes": [json.dumps({**GOOD, "request_bytes": -5})],
    }
    values = _write(logs / "values:1.log",
                    [line for group in bad_values.values() for line in group])
    good_lines = scenario_lines + 4 + 3 + 2 + 5
    # The bad files.
    empty = _write(logs / "empty.log", [])
    empty_gz = logs / "empty.log.gz"
    empty_gz.write_bytes(b"")
    truncated = _truncated_gzip(logs / "cut.log.gz")
    fake_gz = _write(logs / "text.log.gz", _good_lines(2))
    locked = _write(logs / "locked.log", _good_lines(3, start=50))
    locked.chmod(0)
    directory = logs / "sub.log"
    directory.mkdir()
    loop = logs / "loop.log"
    loop.symlink_to(loop.name)
    missing = logs / "missing.log"
    files = [*map(str, scenario_files), str(colon), str(globby), str(hidden), str(zipped),
             str(values), str(empty), str(empty_gz), str(truncated), str(fake_gz), str(locked),
             str(directory), str(loop), str(missing)]
    expected_files = {str(truncated): "truncated gzip", str(fake_gz): "not gzip",
                      str(directory): "a directory holding no log files",
                      str(loop): "symlink loop", str(missing): "no such file"}
    if _unreadable(locked):
        expected_files[str(locked)] = "unreadable: Permission denied"
    else:  # root reads it anyway: its lines count
        good_lines += 3
    try:
        result = run_analysis(spark, files, tmp_path / "out")
    finally:
        locked.chmod(0o644)
    summary = result.summary
    _check_outputs(tmp_path / "out", summary)
    assert summary["unusable_files"] == expected_files
    for name, why in expected_files.items():
        assert f"{name}: not read: {why}" in summary["warnings"]
    assert summary["usable_lines"] == good_lines
    counted = {reason: entry["count"] for reason, entry in summary["unusable"].items()}
    assert counted == {reason: len(lines) for reason, lines in bad_values.items()}
    # Samples name the files as the caller did, with their line numbers.
    for number, reason in ((1, "bad timestamp"), (4, "out of range: total_ms")):
        assert summary["unusable"][reason]["samples"][0].startswith(f"{values}:{number}: ")
    # Every good file, odd names included, is read under its own name (no "no broker events"
    # warning for it); the empty ones, and only they, have none.
    no_events = {w.removesuffix(": no broker events in this file") for w in summary["warnings"]
                 if w.endswith("no broker events in this file")}
    assert no_events == {str(values), str(empty), str(empty_gz)}
    assert summary["inputs"] == files


@pytest.mark.timeout(900)
def test_cli_exits_0_with_bad_files_among_good_ones(spark: Any, tmp_path: Path) -> None:
    """Through ``trio_broker analyze``: a directory of logs with a colon in a name, a
    truncated gzip, a symlink loop, plus a PATH that does not exist among the others."""
    logs = tmp_path / "logs"
    logs.mkdir()
    _write(logs / "broker-2026-11-27T19:00.log", _good_lines(6))
    _write(logs / "broker.log", _good_lines(4, start=10))
    _truncated_gzip(logs / "broker.log.1.gz")
    (logs / "loop.log").symlink_to("loop.log")
    out = tmp_path / "out"
    missing = str(tmp_path / "typo.log")
    assert cli.main([str(logs), missing, "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["usable_lines"] == 10
    assert summary["unusable_files"] == {
        str(logs / "broker.log.1.gz"): "truncated gzip", str(logs / "loop.log"): "symlink loop",
        missing: "no such file"}
    assert (out / "report.html").exists()


@pytest.mark.timeout(900)
def test_nothing_readable_still_gives_a_report(spark: Any, tmp_path: Path) -> None:
    """An empty file alone (zero lines), and no usable file at all."""
    empty = _write(tmp_path / "empty.log", [])
    result = run_analysis(spark, [str(empty)], tmp_path / "out1")
    _check_outputs(tmp_path / "out1", result.summary)
    assert result.summary["lines"] == 0 and result.summary["unusable_files"] == {}
    fake = _write(tmp_path / "fake.log.gz", _good_lines(1))
    result = run_analysis(spark, [str(fake), str(tmp_path / "nope.log")], tmp_path / "out2")
    _check_outputs(tmp_path / "out2", result.summary)
    assert result.summary["lines"] == 0
    assert result.summary["unusable_files"] == {str(fake): "not gzip",
                                                str(tmp_path / "nope.log"): "no such file"}


# -- generated bad files --------------------------------------------------------------------

_KINDS = ("good", "good gz", "empty", "truncated gzip", "not gzip", "directory", "symlink loop")
_ODD = st.text(alphabet=":[]{}*?\\ %,é'\"#=@~!$&()^", max_size=4)
_FILES = st.lists(st.tuples(st.sampled_from(_KINDS), _ODD, st.sampled_from(["", "_", "."]),
                            st.integers(1, 6)),
                  min_size=1, max_size=6)
# No shrinking phase: each example runs the whole job, and a failure prints its example.
_SETTINGS = settings(max_examples=3, deadline=None, derandomize=True,
                     phases=[Phase.explicit, Phase.reuse, Phase.generate],
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])


@pytest.mark.timeout(900)
@_SETTINGS
@given(specs=_FILES)
def test_generated_bad_files_never_fail_the_run(
        spark: Any, tmp_path_factory: pytest.TempPathFactory,
        specs: list[tuple[str, str, str, int]]) -> None:
    directory = tmp_path_factory.mktemp("files")
    files: list[str] = []
    expected: dict[str, str] = {}
    good = 0
    for index, (kind, odd, prefix, lines) in enumerate(specs):
        suffix = ".log.gz" if kind in ("good gz", "truncated gzip", "not gzip") else ".log"
        path = directory / f"{prefix}{index}{odd}{suffix}"
        if kind == "good":
            _write(path, _good_lines(lines, start=index * 6))
            good += lines
        elif kind == "good gz":
            _gzip(path, _good_lines(lines, start=index * 6))
            good += lines
        elif kind == "empty":
            _write(path, [])
        elif kind == "truncated gzip":
            _truncated_gzip(path)
            expected[str(path)] = kind
        elif kind == "not gzip":
            _write(path, _good_lines(lines))
            expected[str(path)] = kind
        elif kind == "directory":
            path.mkdir()
            expected[str(path)] = "a directory holding no log files"
        else:
            os.symlink(path.name, path)
            expected[str(path)] = kind
        files.append(str(path))
    out = directory / "out"
    result = run_analysis(spark, files, out)
    summary = result.summary
    _check_outputs(out, summary)
    assert summary["unusable_files"] == expected
    assert summary["usable_lines"] == summary["lines"] == good
    assert summary["requests"] == good
