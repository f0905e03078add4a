"""Log analytics: ``trio_broker analyze`` against two baselines taken in the same run.

A broker log of N lines (2,000,000 and 6,000,000 by default, about 1.2 and 3.7 GB; mostly
``request`` lines, plus snapshots, connection churn, refusals, invalid frames, group events and
a few damaged lines) is generated into a temporary directory. Then, for each size, on the same
file:

- plain Python: one process reading the file once with ``json.loads`` and computing the
  headline figures (requests and errors per API, exact p99 of ``total_ms`` per API);
- minimal PySpark: the same figures from ``spark.read.json`` with a four-field schema and one
  ``groupBy`` (``percentile_approx`` for the p99): Spark's own floor for one scan of the log;
- ``python -m trio_broker analyze FILE --out DIR`` (Spark in local mode, JVM included).

Each is measured as a process tree (wall time, CPU time, and peak RSS summed over the process
and its children, polled from /proc every 50 ms). Targets (issue "log analytics, pass 3"):
analyze within 1.5x the minimal PySpark job and 2x plain Python at 2,000,000 lines, its ratio
to plain Python not growing with the input, and 1.5 GiB peak. The headline figures of analyze
and plain Python are compared, so a fast but wrong job fails the bench.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from trio_broker.observability.events import SCHEMA_VERSION

from .common import REPO_ROOT, BenchResult, Figure, bench_env

DEFAULT_LINES = (2_000_000, 6_000_000)
QUICK_LINES = (200_000,)
#: analyze's wall time at most this many times plain Python's, and the minimal PySpark job's.
TARGET_RATIO = 2.0
TARGET_SPARK_RATIO = 1.5
TARGET_PEAK_BYTES = 3 * 1024**3 // 2

_APIS = [("Produce", 0, 9, 0.40), ("Fetch", 1, 13, 0.35), ("Metadata", 3, 12, 0.08),
         ("OffsetCommit", 8, 8, 0.05), ("Heartbeat", 12, 4, 0.06), ("JoinGroup", 11, 9, 0.01),
         ("SyncGroup", 14, 5, 0.01), ("ApiVersions", 18, 3, 0.02), ("ListOffsets", 2, 7, 0.02)]
_ERRORS = ["NOT_LEADER_OR_FOLLOWER", "UNKNOWN_TOPIC_OR_PARTITION", "REQUEST_TIMED_OUT",
           "REBALANCE_IN_PROGRESS"]


def generate_log(path: Path, lines: int, seed: int = 12) -> None:
    """Write a broker log of ``lines`` lines (formatted by hand: json.dumps is the slow part)."""
    rng = random.Random(seed)
    weights = [w for *_, w in _APIS]
    clients = [(f"client-{i}", f"10.1.{i // 250}.{i % 250}") for i in range(40)]
    # Pools of pre-drawn values keep the generator fast; the mix still varies per line.
    pool = 4096
    apis = rng.choices(_APIS, weights, k=pool)
    uniform = [rng.random() for _ in range(pool)]
    expo = [rng.expovariate(1.0) for _ in range(pool)]
    head = ('{"timestamp":"%s","level":"info","event":"%s","broker":1,'
            f'"schema_version":{SCHEMA_VERSION}')
    second = 0.0
    with path.open("w", encoding="utf-8", buffering=1 << 20) as out:
        chunk: list[str] = []
        for n in range(lines):
            second += 0.0009
            whole = int(second)
            stamp = (f"2026-03-14T{9 + whole // 3600:02d}:{whole // 60 % 60:02d}:"
                     f"{whole % 60:02d}.{int((second - whole) * 1e6):06d}Z")
            k = n % pool
            client, ip = clients[(n * 7) % len(clients)]
            conn = (f',"connection_id":"127.0.0.1:9092-{ip}:{40000 + n % 97}-0-{n % 997}",'
                    f'"listener":"PLAINTEXT","processor":{n % 2},"peer":"{ip}:{40000 + n % 97}",'
                    '"security_protocol":"PLAINTEXT"')
            if n % 500 == 0:
                chunk.append(head % (stamp, "metrics_snapshot") + (
                    f',"request_queue_size":{n % 37},"response_queue_size":{n % 5},'
                    f'"network_processor_avg_idle_percent":{uniform[k]:.4f},'
                    f'"memory_pool_available":{1 << 24},"memory_pool_used":{n % 9999},'
                    f'"connection_count":{30 + n % 11},'
                    f'"request_handler_avg_idle_percent":{uniform[k - 1]:.4f}}}'))
                continue
            if n % 211 == 0:
                event = ("connection_accepted", "connection_closed", "connection_expired",
                         "connection_rejected", "invalid_request", "rebalance_started",
                         "rebalance_completed", "throttle_started")[(n // 211) % 8]
                if event == "connection_accepted":
                    chunk.append(head % (stamp, event) + conn + f',"ip":"{ip}"}}')
                elif event == "connection_closed":
                    reason = ("client", "idle", "invalid_frame", "shutdown")[n % 4]
                    chunk.append(head % (stamp, event) + conn + (
                        f',"reason":"{reason}","detail":"","requests":{n % 300},'
                        f'"duration_ms":{expo[k] * 60000:.3f}}}'))
                elif event == "connection_expired":
                    chunk.append(head % (stamp, event) + conn + ',"idle_ms":600000.0}')
                elif event == "connection_rejected":
                    chunk.append(head % (stamp, event) + (
                        f',"listener":"PLAINTEXT","ip":"{ip}","peer":"{ip}:5555",'
                        '"reason":"per_ip_limit","limit":50,"detail":"too many"}'))
                elif event == "invalid_request":
                    chunk.append(head % (stamp, event) + conn + (
                        ',"reason":"frame_too_large","size":104857700,"detail":"over limit"}'))
                elif event == "rebalance_started":
                    chunk.append(head % (stamp, event) + conn + (
                        f',"group_id":"group-{n % 5}","reason":"member joined",'
                        f'"generation":{n % 50},"members":3,"previous_state":"Stable"}}'))
                elif event == "rebalance_completed":
                    chunk.append(head % (stamp, event) + conn + (
                        f',"group_id":"group-{n % 5}","generation":{n % 50 + 1},'
                        '"protocol":"range","leader":"m-1","members":3,"state":"Stable",'
                        f'"duration_ms":{3000 + expo[k] * 1000:.3f}}}'))
                else:
                    chunk.append(head % (stamp, event) + conn + (
                        f',"client_id":"{client}","quota_type":"produce",'
                        f'"throttle_ms":{expo[k] * 100:.3f}}}'))
                continue
            if n % 100_003 == 7:  # a torn line, as a crash leaves it
                chunk.append(head % (stamp, "request") + ',"api":"Pro')
                continue
            api, key, version, _ = apis[k]
            queue = expo[k] * 0.4
            local = expo[k - 3] * (3.0 if api == "Produce" else 1.0)
            remote = (uniform[k - 5] * 500.0 if api == "Fetch" and uniform[k - 7] < 0.3
                      else 0.0)
            send = expo[k - 11] * 0.2
            total = queue + local + remote + send + 0.05
            error = _ERRORS[n % 4] if uniform[k - 13] < 0.01 else "NONE"
            chunk.append(head % (stamp, "request") + conn + (
                f',"api":"{api}","api_key":{key},"api_version":{version},'
                f'"correlation_id":{n},"client_id":"{client}",'
                '"client_software_name":"librdkafka","client_software_version":"2.3.0",'
                f'"principal":"User:ANONYMOUS","request_bytes":{100 + n % 9000},'
                f'"response_bytes":{50 + (n * 13) % 20000},"error":"{error}",'
                f'"response_action":"send","request_queue_ms":{queue:.3f},'
                f'"local_ms":{local:.3f},"remote_ms":{remote:.3f},"throttle_ms":0.0,'
                f'"response_queue_ms":0.01,"send_ms":{send:.3f},"total_ms":{total:.3f}}}'))
            if len(chunk) >= 10_000:
                out.write("\n".join(chunk) + "\n")
                chunk.clear()
        if chunk:
            out.write("\n".join(chunk) + "\n")


#: The plain-Python baseline: one pass, the headline figures, printed as JSON.
BASELINE = r"""
import json, math, sys
from collections import Counter, defaultdict
requests, errors, totals = Counter(), Counter(), defaultdict(list)
with open(sys.argv[1], "rb") as handle:
    for line in handle:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("event") != "request":
            continue
        api = record.get("api")
        if not isinstance(api, str):
            continue
        requests[api] += 1
        if record.get("error") not in (None, "NONE", ""):
            errors[api] += 1
        total = record.get("total_ms")
        if isinstance(total, (int, float)):
            totals[api].append(total)
p99 = {}
for api, values in totals.items():
    values.sort()
    p99[api] = values[max(0, math.ceil(0.99 * len(values)) - 1)]
print(json.dumps({"requests_by_api": requests, "errors_by_api": errors, "p99_by_api": p99}))
"""


#: The minimal PySpark job: the same figures, one scan with a four-field schema, Spark's floor.
MINIMAL_SPARK = r"""
import json, sys
from pyspark.sql import SparkSession, functions as F, types as T
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
schema = T.StructType([T.StructField(name, kind) for name, kind in (
    ("event", T.StringType()), ("api", T.StringType()), ("error", T.StringType()),
    ("total_ms", T.DoubleType()))])
failed = ~F.coalesce(F.col("error"), F.lit("NONE")).isin("NONE", "")
rows = (spark.read.schema(schema).json(sys.argv[1]).where(F.col("event") == "request")
        .groupBy("api").agg(F.count(F.lit(1)).alias("requests"),
                            F.count(F.when(failed, 1)).alias("errors"),
                            F.percentile_approx("total_ms", 0.99).alias("p99"))).collect()
print(json.dumps({"requests_by_api": {r["api"]: r["requests"] for r in rows}}))
spark.stop()
"""


def _tree_usage(root: int) -> dict[int, tuple[int, float]]:
    """{pid: (RSS bytes, CPU seconds so far)} of ``root`` and all its descendants (/proc).

    A child that still has its parent's memory image (the JVM spawning a command: posix_spawn
    clones the address space until the exec) reports the parent's RSS as its own: its RSS is
    not counted (it would double the JVM's for that instant), its CPU time is.
    """
    children: dict[int, list[int]] = {}
    usage: dict[int, tuple[int, float]] = {}
    image: dict[int, tuple[str, ...]] = {}
    parent: dict[int, int] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(entry), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        parent[pid] = ppid
        # Start and end of code, start of stack: the parent's while the image is shared (the
        # size is not compared: the JVM's changes between reading the parent and the child).
        image[pid] = (fields[23], fields[24], fields[25])
        usage[pid] = (int(fields[21]) * os.sysconf("SC_PAGE_SIZE"),
                      (int(fields[11]) + int(fields[12])) / tick)
    tree: dict[int, tuple[int, float]] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in usage:
            rss, cpu = usage[pid]
            if pid != root and image.get(parent[pid]) == image[pid]:
                rss = 0
            tree[pid] = (rss, cpu)
        stack.extend(children.get(pid, []))
    return tree


def _tree_rss(root: int) -> int:
    """RSS of ``root`` and all its descendants, in bytes (read from /proc)."""
    return sum(rss for rss, _ in _tree_usage(root).values())


@attrs.frozen
class Measured:
    """One measured run of a process tree."""

    wall_s: float
    peak_bytes: int
    #: CPU seconds of the tree (user + system; each process's last poll, so up to 50 ms short
    #: per process): on a shared machine a fairer comparison than wall time.
    cpu_s: float
    out: str
    err: str


def measure(argv: Sequence[str], *, cwd: Path) -> Measured:
    """Run ``argv``: wall time, peak RSS and CPU time of its process tree, its output."""
    started = time.perf_counter()
    process = subprocess.Popen(list(argv), cwd=cwd, env=bench_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    peak = 0
    cpu: dict[int, float] = {}
    done = threading.Event()

    def poll() -> None:
        nonlocal peak
        while not done.is_set():
            tree = _tree_usage(process.pid)
            peak = max(peak, sum(rss for rss, _ in tree.values()))
            for pid, (_, seconds) in tree.items():
                cpu[pid] = max(cpu.get(pid, 0.0), seconds)
            done.wait(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    out, err = process.communicate()
    elapsed = time.perf_counter() - started
    done.set()
    poller.join()
    if process.returncode != 0:
        raise RuntimeError(f"{argv[2:4]} exited {process.returncode}: {err[-2000:]}")
    return Measured(elapsed, peak, sum(cpu.values()), out, err)


def _agree(baseline: dict[str, dict[str, float]], summary: dict[str, object]) -> list[str]:
    """Where analyze's headline figures differ from the baseline's (p99 within 1%)."""
    problems = []
    if summary.get("requests_by_api") != baseline["requests_by_api"]:
        problems.append("requests per API differ")
    if summary.get("errors_by_api") != baseline["errors_by_api"]:
        problems.append("errors per API differ")
    latency = summary.get("latency_ms_by_api")
    assert isinstance(latency, dict)
    for api, exact in baseline["p99_by_api"].items():
        got = (latency.get(api) or {}).get("p99")
        if got is None or not math.isclose(got, exact, rel_tol=0.01, abs_tol=0.01):
            problems.append(f"p99 of {api}: {got} vs exact {exact}")
    return problems


def _one_size(result: BenchResult, work: Path, count: int) -> float:
    """Generate a log of ``count`` lines, measure the three jobs on it, add their figures;
    returns analyze's ratio to plain Python."""
    log = work / f"broker-{count}.log"
    started = time.perf_counter()
    generate_log(log, count)
    size = log.stat().st_size
    label = f"{count:,} lines"
    result.notes.append(f"{label}: generated ({size / 1e9:.2f} GB) in "
                        f"{time.perf_counter() - started:.1f} s")
    load_before = os.getloadavg()[0]
    try:
        base = measure([sys.executable, "-c", BASELINE, str(log)], cwd=REPO_ROOT)
        minimal = measure([sys.executable, "-c", MINIMAL_SPARK, str(log)], cwd=REPO_ROOT)
        out = work / f"out-{count}"
        spark = measure(
            [sys.executable, "-m", "trio_broker", "analyze", str(log), "--out", str(out)],
            cwd=REPO_ROOT)
    finally:
        log.unlink()
    load_after = os.getloadavg()[0]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    problems = _agree(json.loads(base.out), summary)
    if json.loads(minimal.out)["requests_by_api"] != summary.get("requests_by_api"):
        problems.append("the minimal PySpark job counted other requests")
    agreement = "; ".join(problems) or "headline figures equal the baseline's"
    result.figures += [
        Figure(f"analyze wall time, {label}", spark.wall_s, "s", "single-pass Python",
               base.wall_s, f"<= {TARGET_RATIO:g}x baseline",
               spark.wall_s <= TARGET_RATIO * base.wall_s and not problems, agreement),
        Figure(f"analyze wall time, {label}", spark.wall_s, "s", "minimal PySpark job",
               minimal.wall_s, f"<= {TARGET_SPARK_RATIO:g}x baseline",
               spark.wall_s <= TARGET_SPARK_RATIO * minimal.wall_s and not problems),
        Figure(f"analyze CPU time (process tree, JVM included), {label}", spark.cpu_s, "s",
               "minimal PySpark job", minimal.cpu_s),
        Figure(f"plain Python CPU time, {label}", base.cpu_s, "s"),
        Figure(f"analyze peak RSS (process tree, JVM included), {label}",
               spark.peak_bytes / 2**20, "MiB", "minimal PySpark job",
               minimal.peak_bytes / 2**20, f"<= {TARGET_PEAK_BYTES / 2**20:.0f} MiB",
               spark.peak_bytes <= TARGET_PEAK_BYTES),
        Figure(f"analyze lines per second, {label}", count / spark.wall_s, "lines/s",
               "single-pass Python", count / base.wall_s),
    ]
    result.notes.append(f"{label}: load average (1 min) {load_before:.2f} before, "
                        f"{load_after:.2f} after, on {os.cpu_count()} CPUs (a shared machine "
                        "slows every job)")
    result.notes.append(f"{label}: analyze ran {summary.get('spark_jobs')} Spark jobs over one "
                        "read of the input")
    result.details += [f"{label}: {line}" for line in spark.err.splitlines()
                       if line.startswith("analyze: [")]
    return spark.wall_s / base.wall_s


def run(quick: bool, lines: int | Sequence[int] | None = None) -> BenchResult:
    """For each size: generate the log, run the baselines and ``analyze``, report time, CPU
    and peak memory, and whether analyze's ratio to plain Python grows with the input."""
    if lines is None:
        counts: Sequence[int] = QUICK_LINES if quick else DEFAULT_LINES
    else:
        counts = (lines,) if isinstance(lines, int) else lines
    result = BenchResult("analytics")
    work = Path(tempfile.mkdtemp(prefix="trio-broker-bench-analytics-"))
    try:
        ratios = [_one_size(result, work, count) for count in counts]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if len(ratios) > 1:
        result.figures.append(Figure(
            f"analyze/plain Python ratio at {counts[-1]:,} lines over that at {counts[0]:,}",
            ratios[-1] / ratios[0], "x", target="<= 1 (does not grow with the input)",
            met=ratios[-1] <= ratios[0]))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.analytics [--lines N]``: this benchmark alone."""
    import argparse

    from .__main__ import render

    parser = argparse.ArgumentParser(prog="python -m bench.analytics")
    parser.add_argument("--lines", type=int, nargs="+", default=list(DEFAULT_LINES),
                        help="log sizes to measure (default: 2000000 6000000)")
    args = parser.parse_args(argv)
    result = run(False, lines=args.lines)
    print(render([result]))
    return 0 if all(f.met is not False for f in result.figures) else 1


if __name__ == "__main__":
    sys.exit(main())
