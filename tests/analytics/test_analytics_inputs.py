"""PATH arguments, time bounds and the command line without Spark (no pyspark needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from trio_broker.analytics import INSTALL_HINT, cli
from trio_broker.analytics.inputs import InputError, expand_paths, parse_time


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}\n")
    return path


def test_directory_stands_for_its_log_files_rotated_oldest_first(tmp_path: Path) -> None:
    for name in ("broker.log", "broker.log.1", "broker.log.2", "broker.log.10", "other.jsonl",
                 "old.log.3.gz", "notes.txt", ".hidden.log", "broker.log.tmp"):
        _touch(tmp_path / name)
    (tmp_path / "sub").mkdir()
    _touch(tmp_path / "sub" / "nested.log")
    names = [Path(p).name for p in expand_paths([str(tmp_path)])]
    assert names == ["broker.log.10", "broker.log.2", "broker.log.1", "broker.log",
                     "old.log.3.gz", "other.jsonl"]


def test_files_globs_and_duplicates(tmp_path: Path) -> None:
    a = _touch(tmp_path / "a" / "broker.log")
    b = _touch(tmp_path / "b" / "broker.log")
    _touch(tmp_path / "b" / "broker.log.1")
    got = expand_paths([str(a), str(tmp_path / "*" / "broker.log*"), str(a)])
    assert got == [str(a), str(tmp_path / "b" / "broker.log"),
                   str(tmp_path / "b" / "broker.log.1")]
    assert expand_paths(["hdfs://nn/logs/*.log"]) == ["hdfs://nn/logs/*.log"]
    assert str(b) in got


def test_missing_inputs_are_reported(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        expand_paths([str(tmp_path / "nope.log")])
    with pytest.raises(InputError, match="matches no file"):
        expand_paths([str(tmp_path / "*.log")])
    with pytest.raises(InputError, match="holds no log files"):
        expand_paths([str(tmp_path)])


def test_parse_time() -> None:
    now = datetime(2026, 3, 14, 12, 0, tzinfo=UTC)
    assert parse_time("2026-03-14T09:30:00Z") == datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
    assert parse_time("2026-03-14T09:30:00") == datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
    assert parse_time("2026-03-14T10:30:00+01:00") == datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
    assert parse_time("2026-03-14") == datetime(2026, 3, 14, tzinfo=UTC)
    assert parse_time("90m", now=now) == now - timedelta(minutes=90)
    assert parse_time("1.5h", now=now) == now - timedelta(minutes=90)
    assert parse_time("2d", now=now) == now - timedelta(days=2)
    with pytest.raises(InputError, match="ISO 8601"):
        parse_time("yesterday")


def test_without_pyspark_analyze_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    monkeypatch.setattr(cli.importlib.util, "find_spec",
                        lambda name: None if name == "pyspark" else object())
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert INSTALL_HINT in err and "pip install 'trio-broker[analytics]'" in err
    assert not (tmp_path / "out").exists()


def test_bad_arguments_exit_with_usage(capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--out", str(tmp_path)])
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        cli.main([str(tmp_path)])  # no --out
    with pytest.raises(SystemExit):
        cli.main(["--follow", str(tmp_path), "--sink", "parquet"])  # parquet needs --out
    with pytest.raises(SystemExit):
        cli.main([str(tmp_path), "--out", "hdfs://nn/out"])
    assert "usage: trio_broker analyze" in capsys.readouterr().err


@pytest.mark.spark  # past argument parsing, main needs pyspark installed
def test_bad_paths_and_times_exit_2_before_starting_spark(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    _touch(tmp_path / "broker.log")
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "o"), "--since", "soon"]) == 2
    assert cli.main([str(tmp_path), "--out", str(tmp_path / "o"), "--since", "1h",
                     "--until", "2h"]) == 2
    assert "--since must be before --until" in capsys.readouterr().err


def test_module_entry_point_runs_main() -> None:
    """``python -m trio_broker.analytics`` reaches the CLI (in a fresh interpreter: the installed
    pytest plugin makes pytest's import hook own the package, which runpy cannot use)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "trio_broker.analytics", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_trio_broker_analyze_without_pyspark_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """The whole command path (trio_broker.cli -> analytics.cli) imports no pyspark up front."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['pyspark'] = None\n"  # as if the extra were not installed
            "from trio_broker.cli import main\n"
            f"sys.exit(main(['analyze', {str(tmp_path)!r}, '--out', {str(tmp_path / 'o')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert INSTALL_HINT in done.stderr
