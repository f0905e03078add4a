"""``analyze --follow``: the tailer that feeds Structured Streaming, and the streaming job."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.analytics_logs import logging_to
from trio_broker.analytics.stream import LateRows, LogTailer, follow
from trio_broker.observability import log


def _spooled(spool: Path) -> list[bytes]:
    lines: list[bytes] = []
    for chunk in sorted(spool.glob("chunk-*.jsonl")):
        lines.extend(chunk.read_bytes().splitlines())
    return lines


def test_tailer_follows_rotation_without_losing_or_repeating_lines(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    spool = tmp_path / "spool"
    writer = log.LineWriter(str(logs / "broker.log"), max_bytes=2_000, backup_count=3)
    tailer = LogTailer(logs, spool)
    written = []
    try:
        # Polls after 15 lines (rotation every ~5 polls) and after 150 (three rotations
        # between two polls: the files rotated away unseen must be read too).
        for batch, size in enumerate([15] * 12 + [150] + [15] * 3 + [150, 150]):
            for i in range(size):
                line = json.dumps({"event": "request", "n": batch * 1000 + i})
                writer.write(line)
                written.append(line.encode())
            writer.flush()
            tailer.poll()
        assert len(list(logs.glob("broker.log.*"))) == 3  # it did rotate, several times
    finally:
        writer.close()
        tailer.poll()
        tailer.close()
    assert _spooled(spool) == written
    assert tailer.lines == len(written)
    assert not list(spool.glob(".*"))  # no half-written chunk left behind


def test_tailer_reads_what_a_new_log_rotated_before_it_was_seen(tmp_path: Path) -> None:
    """Rotated files already there at the start are history; a log that appears later is
    read from its first line, even if it rotated before the tailer's next poll."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "old.log").write_text('{"event": "live at start"}\n')
    (logs / "old.log.1").write_text('{"event": "history"}\n')
    tailer = LogTailer(logs, tmp_path / "spool")
    assert tailer.poll() == [b'{"event": "live at start"}']
    writer = log.LineWriter(str(logs / "broker.log"), max_bytes=500, backup_count=10)
    written = []
    try:
        for i in range(60):
            line = json.dumps({"event": "request", "n": i})
            writer.write(line)
            written.append(line.encode())
        writer.flush()
        assert len(list(logs.glob("broker.log.*"))) >= 3
        assert tailer.poll() == written
    finally:
        writer.close()
        tailer.close()
    assert tailer.lines == 1 + len(written)


def test_tailer_waits_for_the_end_of_a_line(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    live = tmp_path / "logs" / "broker.log"
    live.write_text('{"event": "a"}\n{"event": "b", "half')
    tailer = LogTailer(tmp_path / "logs", tmp_path / "spool")
    assert tailer.poll() == [b'{"event": "a"}']
    assert tailer.poll() == []
    with live.open("a") as f:
        f.write(' line"}\n')
    assert tailer.poll() == [b'{"event": "b", "half line"}']
    assert tailer.poll() == []
    with live.open("a") as f:
        f.write('{"event": "c", "torn')
    live.unlink()
    assert tailer.poll() == []
    tailer.close()  # the torn last line is still handed on (Spark counts it as malformed)
    assert _spooled(tmp_path / "spool")[-1] == b'{"event": "c", "torn'
    assert tailer.lines == 3


def test_tailer_from_end_skips_existing_lines(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    live = tmp_path / "logs" / "broker.log"
    live.write_text('{"event": "old"}\n')
    tailer = LogTailer(tmp_path / "logs", tmp_path / "spool", from_start=False)
    assert tailer.poll() == []
    with live.open("a") as f:
        f.write('{"event": "new"}\n')
    assert tailer.poll() == [b'{"event": "new"}']
    tailer.close()


@pytest.mark.spark
def test_follow_aggregates_per_minute_while_the_log_grows(spark: Any, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    batches: list[list[dict[str, Any]]] = []
    latest: dict[tuple[Any, Any], dict[str, Any]] = {}
    lock = threading.Lock()

    def on_batch(frame: Any, batch_id: int) -> None:
        rows = [r.asDict() for r in frame.collect()]
        with lock:
            batches.append(rows)
            for row in rows:
                latest[(row["minute"], row["broker"])] = row

    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            follow(spark, logs, work=tmp_path / "work", on_batch=on_batch, trigger_seconds=0.5,
                   stop=stop, timeout=90)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    path = logs / "broker.log"
    emitted: Counter[str] = Counter()
    thread = threading.Thread(target=run)
    thread.start()
    try:
        with logging_to(path, max_bytes=3_000, backup_count=5):
            for _round in range(3):
                for i in range(10):
                    log.emit("request", api="Produce" if i % 2 else "Fetch", client_id="c",
                             total_ms=float(i), request_queue_ms=0.5, request_bytes=10,
                             error="NONE")
                    emitted["request"] += 1
                log.emit("connection_rejected", listener="PLAINTEXT", ip="10.0.0.9",
                         peer="10.0.0.9:1", reason="per_ip_limit", limit=1)
                emitted["connection_rejected"] += 1
                log.flush()
                time.sleep(1.5)
        with path.open("a") as live:
            live.write('{"event": "request", "trunc\n')
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not errors:
            with lock:
                requests = sum(r["requests"] for r in latest.values())
                malformed = sum(r["malformed"] for r in latest.values())
            if requests == emitted["request"] and malformed == 1:
                break
            time.sleep(0.5)
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert not thread.is_alive()
    spooled = [json.loads(line) for line in _spooled(tmp_path / "work" / "spool")
               if line.startswith(b'{"') and line.endswith(b"}")]
    assert Counter(r["event"] for r in spooled) == emitted  # the tailer handed on every line
    with lock:
        rows = list(latest.values())
    assert sum(r["requests"] for r in rows) == emitted["request"] == 30, batches
    assert sum(r["rejected"] for r in rows) == emitted["connection_rejected"]
    assert sum(r["malformed"] for r in rows) == 1
    assert sum(r["request_bytes"] or 0 for r in rows) == 300
    assert len(batches) >= 2  # updates arrived while the log grew, not once at the end
    assert len(list(logs.glob("broker.log.*"))) >= 1  # and across a rotation


@pytest.mark.spark
def test_cli_follow_with_parquet_sink(spark: Any, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from trio_broker.analytics.cli import main
    from trio_broker.analytics.stream import print_batch

    logs = tmp_path / "logs"
    with logging_to(logs / "broker.log"):
        for i in range(7):
            log.emit("request", api="Metadata", client_id="c", total_ms=float(i), error="NONE")
        log.emit("connection_muted", reason="memory", inflight=0)
    out = tmp_path / "out"
    assert main(["--follow", str(logs), "--sink", "parquet", "--out", str(out),
                 "--trigger", "0.5", "--timeout", "2"]) == 0
    err = capsys.readouterr().err
    assert "analyze: following" in err
    assert f"analyze: Spark ready (master {spark.sparkContext.master})" in err
    batches = [line for line in err.splitlines() if line.startswith("analyze: batch ")]
    assert batches and all("line(s) followed" in line for line in batches)
    assert err.splitlines()[-1] == (
        f"analyze: stopped: 8 line(s) followed from {logs} in {len(batches)} batch(es); "
        "0 line(s) dropped as later than 10 minutes behind the newest")
    table = spark.read.parquet(str(out / "minute_aggregates.parquet"))
    latest = table.orderBy("batch_id").collect()[-1]
    assert (latest["requests"], latest["mutes"], latest["malformed"]) == (7, 1, 0)
    assert spark.sparkContext._jsc is not None  # the shared session was not stopped

    print_batch(table.drop("batch_id"), 3)
    printed = capsys.readouterr().out
    assert printed.startswith("-- batch 3:") and "requests" in printed.splitlines()[1].split()


@pytest.mark.spark
@pytest.mark.timeout(240)
def test_follow_counts_lines_later_than_the_cutoff(spark: Any, tmp_path: Path) -> None:
    """A line more than the cutoff (10 minutes) behind the newest event time already seen
    cannot update its minute any more: Spark's watermark drops it, and it is counted."""
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "broker.log"
    path.write_text("")
    latest: dict[Any, int] = {}
    seen = threading.Condition()

    def on_batch(frame: Any, batch_id: int) -> None:
        with seen:
            for row in frame.collect():
                latest[row["minute"].strftime("%H:%M")] = row["requests"]
            seen.notify_all()

    def request(minute: str) -> str:
        return json.dumps({"timestamp": f"2026-03-14T09:{minute}:00Z", "event": "request",
                           "broker": 1, "api": "Fetch", "total_ms": 1.0, "error": "NONE"})

    late = LateRows()
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            follow(spark, logs, work=tmp_path / "work", on_batch=on_batch, trigger_seconds=0.5,
                   stop=stop, timeout=180, late=late)
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    def wait_for(minute: str, requests: int = 1) -> None:
        with seen:
            assert seen.wait_for(lambda: latest.get(minute, 0) >= requests or bool(errors),
                                 timeout=90), latest

    thread = threading.Thread(target=run)
    thread.start()
    try:
        with path.open("a") as live:
            live.write(request("00") + "\n" + request("30") + "\n")
        wait_for("09:30")
        # Spark moves the watermark (09:20) when a micro-batch ends, and drops late lines by
        # the watermark of the batch before the current one (its late-event watermark): one
        # more answered batch, of a second 09:30 line, puts 09:20 in force. Without it, the
        # 09:01 line was counted in 3 of 4 runs on a busy machine.
        with path.open("a") as live:
            live.write(request("30") + "\n")
        wait_for("09:30", 2)
        with path.open("a") as live:  # 29 minutes behind 09:30, past the cutoff
            live.write(request("01") + "\n" + request("31") + "\n")
        wait_for("09:31")
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    assert (latest["09:00"], latest["09:30"], latest["09:31"]) == (1, 2, 1)
    assert "09:01" not in latest
    assert late.dropped == 1
