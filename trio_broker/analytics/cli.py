"""``trio_broker analyze``: the command line of the Spark jobs.

::

    trio_broker analyze PATH... --out DIR [--master URL] [--since T] [--until T]
    trio_broker analyze --follow DIR [--out DIR] [--sink console|parquet] [--trigger S]

``trio_broker.cli`` hands ``argv`` (everything after ``analyze``) to :func:`main`; the same runs
as ``python -m trio_broker.analytics`` and under ``spark-submit trio_broker/analytics/__main__.py``.
pyspark is only imported once the arguments are valid and it is known to be installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from . import INSTALL_HINT
from .inputs import InputError, expand_paths, parse_time


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio_broker analyze",
        description="Answer the troubleshooting questions (refused connections, saturation, "
                    "queue blocking, slow requests, top and throttled clients, rebalances) "
                    "from trio_broker's structured JSON logs with Spark.")
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="log files, globs or directories (rotated *.log.N files included)")
    parser.add_argument("--out", help="output directory (tables, summary.json, "
                        "report.html); with --follow, where the parquet sink writes")
    parser.add_argument("--master", help="Spark master URL (default: what spark-submit set, "
                        "else $SPARK_MASTER, else local[2])")
    parser.add_argument("--since", help="only events at or after T (ISO 8601, or 30m/2h/1d ago)")
    parser.add_argument("--until", help="only events before T (ISO 8601, or 30m/2h/1d ago)")
    parser.add_argument("--slowest", type=int, default=50,
                        help="how many of the slowest requests to keep (default 50)")
    parser.add_argument("--follow", type=Path, metavar="DIR",
                        help="stream per-minute aggregates of the live logs in DIR until "
                             "interrupted")
    parser.add_argument("--sink", choices=("console", "parquet"), default="console",
                        help="with --follow: print updates, or append them under --out")
    parser.add_argument("--trigger", type=float, default=5.0, metavar="SECONDS",
                        help="with --follow: micro-batch interval (default 5)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="with --follow: stop after this long instead of running until "
                             "interrupted")
    parser.add_argument("--fetch-max-wait-ms", type=float, default=500.0, metavar="MS",
                        help="a Fetch's remote time up to this is long-poll waiting, not "
                             "slowness (the consumers' fetch.max.wait.ms; default 500)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def pyspark_available() -> bool:
    """Whether the ``analytics`` extra (pyspark) is installed."""
    return importlib.util.find_spec("pyspark") is not None


def _progress_stream() -> TextIO:
    """Where progress lines go: stderr. Under ``spark-submit`` the driver's stderr is merged
    into its stdout by Spark's PythonRunner, so the lines go to the stderr of spark-submit's
    JVM (this process's parent) when it can be opened."""
    if "PYSPARK_GATEWAY_PORT" in os.environ:  # set by spark-submit for its Python driver
        try:
            return open(f"/proc/{os.getppid()}/fd/2", "w", encoding="utf-8")  # noqa: SIM115
        except OSError:
            pass
    return sys.stderr


def _progress(quiet: bool) -> Callable[[str], None]:
    stream = None if quiet else _progress_stream()

    def report(message: str) -> None:
        if stream is not None:
            print(f"analyze: {message}", file=stream, flush=True)
    return report


def _size(files: list[str]) -> int | None:
    """The total size of local input files (None when one is a URL or unreadable)."""
    total = 0
    for name in files:
        try:
            total += os.stat(name).st_size
        except OSError:
            return None
    return total


def main(argv: list[str]) -> int:
    """Run ``trio_broker analyze`` with ``argv`` (the arguments after ``analyze``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.follow is not None:
        if args.paths:
            parser.error("--follow takes a directory and no PATH arguments")
        if args.sink == "parquet" and args.out is None:
            parser.error("--sink parquet needs --out DIR")
    else:
        if not args.paths:
            parser.error("give at least one PATH (file, glob or directory), or --follow DIR")
        if args.out is None:
            parser.error("--out DIR is required")
    if args.out is not None and "://" in args.out:
        parser.error("--out is a directory on the driver's file system (for a cluster, "
                     "one the executors share), not a URL")
    if not pyspark_available():
        print("trio_broker analyze needs PySpark, which is not installed.\n"
              f"Install the analytics extra:  {INSTALL_HINT}\n"
              "(Spark also needs a Java 17 or 21 runtime.)", file=sys.stderr)
        return 2
    if args.follow is not None:
        return _follow(args)
    try:
        files = expand_paths(args.paths)
        since = parse_time(args.since) if args.since else None
        until = parse_time(args.until) if args.until else None
    except InputError as exc:
        print(f"trio_broker analyze: {exc}", file=sys.stderr)
        return 2
    if since is not None and until is not None and since >= until:
        print("trio_broker analyze: --since must be before --until", file=sys.stderr)
        return 2

    from .jobs import get_spark, run_analysis

    out = Path(str(args.out))
    report = _progress(args.quiet)
    report("starting Spark")
    started = time.monotonic()
    spark, created = get_spark(args.master, input_bytes=_size(files))
    report(f"Spark ready (master {spark.sparkContext.master}, "
           f"{time.monotonic() - started:.1f}s)")
    try:
        result = run_analysis(spark, files, out, since=since, until=until,
                              slowest=args.slowest, fetch_max_wait_ms=args.fetch_max_wait_ms,
                              progress=report)
    finally:
        if created:
            spark.stop()
    summary = result.summary
    print(f"{summary['lines']} lines ({summary['unusable_lines']} unusable), "
          f"{summary['requests']} requests, "
          f"{sum(summary['rejected_connections'].values())} refused connections; "
          f"report: {out / 'report.html'}")
    return 0


def _follow(args: argparse.Namespace) -> int:
    from .jobs import get_spark
    from .stream import follow, parquet_sink, print_batch

    directory: Path = args.follow
    if not directory.is_dir():
        print(f"trio_broker analyze: {directory}: not a directory", file=sys.stderr)
        return 2
    report = _progress(args.quiet)
    report("starting Spark")
    spark, created = get_spark(args.master, app_name="trio_broker analyze --follow")
    report(f"Spark ready (master {spark.sparkContext.master})")
    on_batch = parquet_sink(Path(args.out)) if args.sink == "parquet" else print_batch
    try:
        with tempfile.TemporaryDirectory(prefix="trio-broker-follow-") as work:
            report(f"following {directory} (Ctrl-C to stop)")
            follow(spark, directory, work=Path(work), on_batch=on_batch,
                   trigger_seconds=args.trigger, timeout=args.timeout,
                   progress=report)
    except KeyboardInterrupt:
        pass
    finally:
        if created:
            spark.stop()
    return 0
