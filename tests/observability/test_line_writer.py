"""The log writer thread when the log cannot be written: the broker goes on, memory does not
grow, and the lines lost are counted in a ``log_lines_dropped`` event once writing works again.

Each failure is a real one: a pipe whose reader has gone (EPIPE), a pipe nobody reads (a
stalled writer), a file over the process's file-size limit (EFBIG, in a subprocess).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from trio_broker.observability import log


@pytest.fixture
def restore_logging() -> Iterator[None]:
    yield
    log.configure_logging(broker_id=1, fmt="json", stream=io.StringIO())


def wait_until(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_closed_pipe_loses_lines_but_not_the_writer(
        restore_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = os.fdopen(write_end, "w", encoding="utf-8")
    writer = log.configure_logging(broker_id=1, fmt="json", stream=stream)
    for index in range(5_000):
        log.emit("broker_stopped", uptime_s=float(index))
    writer.flush()
    log.emit("broker_stopped", uptime_s=-1.0)
    writer.flush()
    assert writer._thread.is_alive()
    assert not writer._lines  # nothing kept for a pipe that cannot take it
    assert writer._failed_lines == 5_001
    err = capsys.readouterr().err
    assert err.count("trio_broker: cannot write the log (BrokenPipeError") == 1
    writer.close()
    with contextlib.suppress(BrokenPipeError):  # what is left in its buffer
        stream.close()


def test_a_stalled_log_drops_lines_past_the_bound_and_reports_them(
        restore_logging: None) -> None:
    read_end, write_end = os.pipe()
    stream = os.fdopen(write_end, "w", encoding="utf-8")
    writer = log.configure_logging(broker_id=1, fmt="json", stream=stream)
    writer.MAX_QUEUED_LINES = 3_000  # type: ignore[misc]
    # Nobody reads the pipe: the thread blocks in a write once its 64 KiB are full.
    for index in range(20_000):
        log.emit("broker_stopped", uptime_s=float(index))
    assert len(writer._lines) <= 3_000
    assert writer._dropped > 10_000
    dropped = writer._dropped
    lines: list[dict[str, Any]] = []

    def read() -> None:
        with os.fdopen(read_end, encoding="utf-8") as pipe:
            for text in pipe:
                lines.append(json.loads(text))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def reports() -> list[dict[str, Any]]:
        return [line for line in list(lines) if line["event"] == "log_lines_dropped"]

    # Reported once writing works again (a drop early on may have been reported on its own).
    wait_until(lambda: sum(e["lines"] for e in reports()) == dropped)
    assert {e["level"] for e in reports()} == {"warning"}
    assert len([line for line in lines if line["event"] == "broker_stopped"]) == 20_000 - dropped
    writer.close()
    stream.close()
    reader.join(10)


FILE_SIZE_SCRIPT = r"""
import json, resource, signal, sys
from trio_broker.observability import log

path = sys.argv[1]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
writer = log.configure_logging(broker_id=1, fmt="json", file=path)
log.emit("broker_stopped", uptime_s=0.0)
writer.flush()
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))  # the disk is "full" at 4 KiB
for index in range(1, 201):
    log.emit("broker_stopped", uptime_s=float(index))
    if index % 20 == 0:
        writer.flush()
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again
log.emit("broker_stopped", uptime_s=1000.0)
writer.flush()
writer.flush()  # the report of the lost lines is written by the thread after the first
writer.close()
"""


def test_a_full_file_loses_lines_and_says_how_many(tmp_path: Any) -> None:
    path = tmp_path / "broker.log"
    result = subprocess.run([sys.executable, "-c", FILE_SIZE_SCRIPT, str(path)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("trio_broker: cannot write the log") == 1
    assert "File too large" in result.stderr
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    written = [e["uptime_s"] for e in events if e["event"] == "broker_stopped"]
    (report,) = [e for e in events if e["event"] == "log_lines_dropped"]
    assert written[0] == 0.0 and written[-1] == 1000.0
    # Every line is in the file or counted as lost; the count is an upper bound, as the
    # stream may still write part of a failed write's buffer once there is space again.
    assert report["lines"] > 0 and len(written) < 202 <= len(written) + report["lines"]
    assert len(written) == len(set(written))  # nothing written twice


def test_a_rotation_that_fails_keeps_writing_to_the_same_file(
        tmp_path: Any, restore_logging: None, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "broker.log"
    (tmp_path / "broker.log.1").mkdir()  # the rotated name is taken: the rename fails
    writer = log.configure_logging(broker_id=1, fmt="json", file=str(path), max_bytes=2_000,
                                   backup_count=1)
    for index in range(100):
        log.emit("broker_stopped", uptime_s=float(index))
        if index % 10 == 0:
            writer.flush()
    writer.flush()
    assert writer._thread.is_alive()
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["uptime_s"] for line in lines] == [float(i) for i in range(100)]
    err = capsys.readouterr().err
    # Reported, and retried only once another max_bytes were written, not on every line.
    assert 1 <= err.count("trio_broker: cannot write the log (IsADirectoryError") <= 6
