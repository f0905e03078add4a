"""``python -m bench [--quick] [--strict] [--only NAME] [--json out.json] [--profile]``.

Runs each benchmark, prints a table of figures with their in-run baselines and ratios, and writes
the same as JSON. A benchmark that fails is reported (with the reason) and the others still run.

Exit status: 1 when a benchmark failed; with ``--strict`` also when a figure missed its target
(``met: NO``, or no value where a target was set; not when the target could not be judged,
``met: n/a``: the baseline gave a wrong answer); else 0. ``--quick`` runs the benchmarks at a
tiny size (the default set in seconds): the figures mean nothing, it proves that the benchmarks
still run (``tests/test_bench_smoke.py`` runs it with the test suite).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from . import small_requests, throughput
from .common import BenchResult, Figure, raise_fd_limit

# One line per benchmark, in running order: a module of this package whose
# ``run(quick: bool) -> BenchResult`` does the work, and whether it runs by default (False: only
# with --only NAME).
BENCHMARKS = {
    "startup": True,
    "plugin_fixture": True,  # the pytest plugin's broker fixtures: set-up + tear-down per test
    "idle_memory": True,
    # issue 35: 10,000 connections in a burst, held idle; RSS each, fresh-connection latency
    "many_connections": True,
    "small_requests": True,
    "throughput": True,
    "stall": True,  # 20 rounds of bulk + one-record produce: no connection may stall
    "zero_copy": True,  # broker CPU per MB consumed, with sendfile and without
    "reference": True,  # the same client script against Tansu (a Rust broker) in the same run
    # about 2.5 min: 1,000 one-record/s producers next to a heavy one (issue 11's goal)
    "many_producers": True,
    # heavy requests (bombs, huge arrays, thousands of partitions) beside a 20 ms probe
    "event_loop": True,
    "fuzz": False,  # opt-in (--only fuzz): a million frames
    "analytics": False,  # opt-in (--only analytics; needs pyspark, Java): analyze 2M- and 6M-line logs
}


def benchmark(name: str) -> Callable[[bool], BenchResult]:
    """The ``run`` function of the benchmark module ``name``."""
    run: Callable[[bool], BenchResult] = importlib.import_module(f"{__package__}.{name}").run
    return run


def missed_targets(results: list[BenchResult]) -> list[str]:
    """``benchmark: figure`` of every figure that has a target and did not meet it (a figure
    whose target could not be judged, ``unjudged``, is not a miss: see ``unjudged_targets``)."""
    return [f"{result.name}: {figure.name}" for result in results for figure in result.figures
            if figure.target is not None and figure.met is not True and not figure.unjudged]


def unjudged_targets(results: list[BenchResult]) -> list[str]:
    """``benchmark: figure (why)`` of every target that could not be judged."""
    return [f"{result.name}: {figure.name} ({figure.unjudged})" for result in results
            for figure in result.figures if figure.target is not None and figure.unjudged]


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _row(figure: Figure) -> list[str]:
    ratio = figure.ratio
    met = "n/a" if figure.unjudged else {True: "yes", False: "NO", None: ""}[figure.met]
    return [figure.name, _fmt(figure.value), figure.unit, figure.baseline or "",
            _fmt(figure.baseline_value), "" if ratio is None else f"{ratio:.2f}x",
            figure.target or "", met, figure.note]


def render(results: list[BenchResult]) -> str:
    """The results as a plain-text table, one section per benchmark."""
    header = ["figure", "value", "unit", "baseline", "baseline value", "ratio", "target", "met", "note"]
    lines: list[str] = []
    for result in results:
        lines.append(f"== {result.name} ({result.seconds:.1f} s)")
        if result.error:
            lines.append(f"   ERROR: {result.error}")
        rows = [header] + [_row(f) for f in result.figures]
        if result.figures:
            widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
            for row in rows:
                cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                lines.append(("   " + "  ".join(cells)).rstrip())
        for note in result.notes:
            lines.append(f"   note: {note}")
        if result.details:
            lines.append("")
            lines.extend("   " + d for d in result.details)
        lines.append("")
    return "\n".join(lines)


# Issue 11's goals, in its order, with the targets issue 35 raised (connection set-up, CPU per
# request): (benchmark, part of the figure's name, the goal in the issue's words).
# ``render_goals`` prints them again as one table after the full report.
ISSUE_GOALS = [
    ("reference", "produce ", "produce large batches: >= 1.2x the reference broker"),
    ("reference", "consume ", "consume large batches: >= 1.2x the reference broker"),
    ("zero_copy", "broker CPU per MB consumed", "zero-copy consume: broker CPU per MB saved"),
    ("reference", "connect + ApiVersions v0 + close, sequential",
     "connection set-up, sequential: >= 1.0x the reference broker"),
    ("reference", "connect + ApiVersions v0 + close, 8",
     "connection set-up, 8 connectors: >= 1.0x the reference broker"),
    ("reference", "x 100 B, one record per request", "small produce requests: >= 1.5x the reference broker"),
    ("reference", "broker CPU per one-record produce",
     "small produce: broker CPU <= 0.5x the reference broker's"),
    ("reference", "broker CPU per one-record Produce v9, raw",
     "one-record requests, raw client: broker CPU <= 0.5x the reference broker's"),
    ("reference", "the same, connection.max.inflight",
     "pipelining: >= 2x one-in-flight on the same workload"),
    ("many_producers", "heavy producer kept",
     "1,000 producers of 1 record/s + a heavy one: heavy keeps >= 80% of solo"),
    ("many_producers", "NetworkProcessorAvgIdlePercent, heavy with", "network idle %, mixed"),
    ("many_producers", "RequestHandlerAvgIdlePercent, heavy with", "request-handler idle %, mixed"),
    ("startup", "spawn -> broker_ready", "start -> ready < 0.5 s"),
    ("idle_memory", "broker RSS per idle connection", "idle connection <= 10 KiB"),
]


def render_goals(results: list[BenchResult]) -> str:
    """Issue 11's goals (with issue 35's targets) as one table: each goal's figure from this
    run, its baseline (the reference broker's where there is one), ratio, target and verdict;
    "not run" when its benchmark was not part of the run."""
    by_name = {result.name: result for result in results}
    header = ["goal", "value", "unit", "baseline", "baseline value", "ratio", "target", "met"]
    rows = [header]
    for bench, prefix, goal in ISSUE_GOALS:
        result = by_name.get(bench)
        figure = next((f for f in result.figures if prefix in f.name), None) \
            if result else None
        if figure is None:
            why = "not run" if result is None else (result.error or "no figure")
            rows.append([goal, why, "", "", "", "", "", ""])
            continue
        rows.append([goal, *_row(figure)[1:8]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["== issue 11 and 35 goals (figures from the sections above, same run)"]
    for row in rows:
        lines.append(("   " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
                     .rstrip())
    return "\n".join(lines) + "\n"


def _run_one(name: str, fn: Callable[[], BenchResult]) -> BenchResult:
    print(f"running {name} ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    try:
        result = fn()
    except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
        result = BenchResult(name, error=f"{type(exc).__name__}: {exc}")
        result.details = traceback.format_exc().splitlines()[-12:]
    result.seconds = time.perf_counter() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="trio_broker benchmarks: every figure next to a baseline from the same run.")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, seconds in all: checks that every benchmark runs, its "
                             "figures mean nothing")
    parser.add_argument("--strict", action="store_true",
                        help="exit with status 1 when a figure misses its target (met: NO)")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), metavar="NAME",
                        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="write the results as JSON (default: bench-results.json in a "
                             "temporary directory, path printed)")
    parser.add_argument("--profile", nargs="?", const="throughput", default=None,
                        choices=["throughput", "small_requests"],
                        help="run the produce benchmark (or the pipelined small-request load) "
                             "with the broker under cProfile and print the top 25 functions by "
                             "cumulative time")
    parser.add_argument("--profile-out", type=Path, default=None, metavar="FILE",
                        help="where to keep the cProfile file (default: a temporary file)")
    args = parser.parse_args(argv)

    raise_fd_limit()
    results: list[BenchResult] = []
    if args.profile:
        out = args.profile_out or Path(tempfile.mkdtemp(prefix="trio-broker-prof-")) / "broker.prof"
        if args.profile == "small_requests":
            results.append(_run_one("profile", lambda: small_requests.profile(args.quick, out)))
        else:
            results.append(_run_one("profile",
                                    lambda: throughput.run(args.quick, profile_to=out)))
        results[-1].notes.append(f"profile file: {out} (python -m pstats {out})")
    else:
        for name in args.only or [n for n, default in BENCHMARKS.items() if default]:
            results.append(_run_one(name, functools.partial(benchmark(name), args.quick)))

    print(render(results))
    if not args.profile:
        print(render_goals(results))
    document = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": args.quick,
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "loadavg": os.getloadavg()},
        "results": [r.as_json() for r in results],
    }
    json_path = args.json or Path(tempfile.gettempdir()) / "bench-results.json"
    json_path.write_text(json.dumps(document, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"results written to {json_path}")
    failed = [r.name for r in results if r.error]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    missed = missed_targets(results)
    if missed:
        print(f"{'TARGETS MISSED' if args.strict else 'targets missed'}: {'; '.join(missed)}",
              file=sys.stderr)
    unjudged = unjudged_targets(results)
    if unjudged:
        print(f"targets not judged: {'; '.join(unjudged)}", file=sys.stderr)
    return 1 if failed or (args.strict and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
