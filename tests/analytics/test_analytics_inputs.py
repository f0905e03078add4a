"""PATH arguments, time bounds and the command line without Spark (no pyspark needed)."""

from __future__ import annotations

import os
import re
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


# -- prepare_inputs: every input file checked before Spark reads it (no Spark) ---------------


def _gz(path: Path, text: str = '{"a": 1}\n') -> Path:
    import gzip

    path.write_bytes(gzip.compress(text.encode()))
    return path


def test_prepare_inputs_reports_each_unusable_file_with_its_reason(tmp_path: Path) -> None:
    import gzip

    from trio_broker.analytics.inputs import prepare_inputs

    good = _touch(tmp_path / "broker.log")
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    empty_gz = tmp_path / "empty.log.gz"
    empty_gz.write_bytes(b"")
    zipped = _gz(tmp_path / "broker.log.1.gz")
    members = tmp_path / "two.log.gz"  # concatenated members, as `cat a.gz b.gz` makes
    members.write_bytes(gzip.compress(b"{}\n") + gzip.compress(b"{}\n"))
    data = gzip.compress(("x" * 100_000).encode())
    truncated = tmp_path / "cut.log.gz"
    truncated.write_bytes(data[: len(data) // 2])
    corrupt = tmp_path / "crc.log.gz"
    corrupt.write_bytes(data[:-8] + bytes(8))  # a wrong CRC and size
    fake = _touch(tmp_path / "text.log.gz")
    directory = tmp_path / "dir.log"
    directory.mkdir()
    loop = tmp_path / "loop.log"
    loop.symlink_to("loop.log")
    broken = tmp_path / "broken.log"
    broken.symlink_to("nowhere.log")
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    names = [str(p) for p in (good, empty, empty_gz, zipped, members, truncated, corrupt, fake,
                              directory, loop, broken, fifo, tmp_path / "missing.log")]
    prepared = prepare_inputs([*names, "hdfs://nn/logs/*.log", "file:///x/y.log"],
                              tmp_path / "work")
    assert prepared.readable == [*names[:5], "hdfs://nn/logs/*.log", "file:///x/y.log"]
    assert prepared.display == {f"file:{n}": n for n in names[:5]}
    unusable = dict(prepared.unusable_files)
    assert unusable.pop(str(corrupt)).startswith("corrupt gzip: ")
    assert unusable == {str(truncated): "truncated gzip", str(fake): "not gzip",
                        str(directory): "a directory holding no log files",
                        str(loop): "symlink loop", str(broken): "no such file (a broken symlink)",
                        str(fifo): "not a regular file",
                        str(tmp_path / "missing.log"): "no such file"}
    assert not (tmp_path / "work").exists(), "no link needed: no work directory"


def test_prepare_inputs_unreadable_file(tmp_path: Path) -> None:
    from trio_broker.analytics.inputs import prepare_inputs

    locked = _touch(tmp_path / "locked.log")
    locked.chmod(0)
    try:
        try:
            locked.open("rb").close()
            readable = True  # root: chmod does not stop reads
        except PermissionError:
            readable = False
        prepared = prepare_inputs([str(locked)], tmp_path / "work")
    finally:
        locked.chmod(0o644)
    if readable:
        assert prepared.readable == [str(locked)] and not prepared.unusable_files
    else:
        assert prepared.unusable_files == {str(locked): "unreadable: Permission denied"}
        assert prepared.readable == []


@pytest.mark.parametrize("name", ["broker-2026-11-27T19:00.log", "b[1].log", "b{a,b}.log",
                                  "b*?.log", "back\\slash.log", "sp ace%20.log", "é.log",
                                  "_under.log", ".dot.log", "c:olon.log.3.gz"])
def test_prepare_inputs_hands_odd_names_to_spark_through_safe_links(tmp_path: Path,
                                                                    name: str) -> None:
    from trio_broker.analytics.inputs import prepare_inputs

    target = _gz(tmp_path / name) if name.endswith(".gz") else _touch(tmp_path / name)
    work = tmp_path / "out" / "_inputs"
    prepared = prepare_inputs([str(target)], work)
    assert not prepared.unusable_files
    [link] = prepared.readable
    assert Path(link).parent == work and prepared.work == work
    assert re.fullmatch(r"[A-Za-z0-9._/+-]+", link) and not Path(link).name.startswith(("_", "."))
    assert Path(link).resolve() == target.resolve()
    assert link.endswith(".gz") == name.endswith(".gz"), "the codec is picked by the suffix"
    assert prepared.display == {f"file:{link}": str(target)}


def test_prepare_inputs_links_elsewhere_when_work_itself_is_odd(tmp_path: Path) -> None:
    import shutil

    from trio_broker.analytics.inputs import prepare_inputs

    target = _touch(tmp_path / "a:b.log")
    prepared = prepare_inputs([str(target)], tmp_path / "out:1" / "_inputs")
    try:
        [link] = prepared.readable
        assert re.fullmatch(r"[A-Za-z0-9._/+-]+", link)
        assert Path(link).parent == prepared.work and Path(link).resolve() == target.resolve()
    finally:
        shutil.rmtree(prepared.work, ignore_errors=True)


def test_one_bad_path_among_good_ones_is_kept_for_prepare_inputs(tmp_path: Path) -> None:
    good = _touch(tmp_path / "logs" / "broker.log")
    loop = tmp_path / "logs" / "loop.log"
    loop.symlink_to("loop.log")
    (tmp_path / "logs" / "sub.log").mkdir()
    (tmp_path / "empty").mkdir()
    got = expand_paths([str(tmp_path / "logs"), str(tmp_path / "typo.log"),
                        str(tmp_path / "*.nothing"), str(tmp_path / "empty")])
    assert got == [str(good), str(loop), str(tmp_path / "logs" / "sub.log"),
                   str(tmp_path / "typo.log"), str(tmp_path / "*.nothing"),
                   str(tmp_path / "empty")]
    # A symlink loop named alone is a file to report, not a typo.
    assert expand_paths([str(loop)]) == [str(loop)]
    # Only when no PATH stands for anything does the run stop (exit 2): a typo.
    with pytest.raises(InputError, match="typo.log: no such file.*matches no file"):
        expand_paths([str(tmp_path / "typo.log"), str(tmp_path / "*.nothing")])


def test_unreadable_directory_is_an_unusable_file_not_an_error(tmp_path: Path) -> None:
    from trio_broker.analytics.inputs import prepare_inputs

    locked = tmp_path / "locked"
    _touch(locked / "broker.log")
    good = _touch(tmp_path / "good.log")
    locked.chmod(0)
    try:
        try:
            os.listdir(locked)
            listable = True  # root
        except PermissionError:
            listable = False
        got = expand_paths([str(locked), str(good)])
        prepared = prepare_inputs(got, tmp_path / "work")
    finally:
        locked.chmod(0o755)
    if listable:
        assert got == [str(locked / "broker.log"), str(good)]
    else:
        assert got == [str(locked), str(good)]
        assert prepared.unusable_files[str(locked)].startswith("a directory, unreadable: ")
    assert str(good) in prepared.readable
