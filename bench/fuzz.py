"""``python -m bench --only fuzz``: a million mutated real client frames against ``trio_broker run``.

The long form of ``tests/server/test_fuzz_frames.py`` (same fuzzer, :mod:`bench.fuzzing`). A
broker that dies is restarted and the run goes on, so the figures count every death; each one's
killing frame is listed. Reported: frames/s, deaths, tracebacks (stderr, ``request_failed``
events), leaked connections (the broker's connection gauge and accept/close counters once the
clients are gone), and RSS at the start and the end. ``--quick`` sends 20,000 frames.

The broker logs at WARNING (a million frames at INFO would write gigabytes); connection counts
come from its Prometheus endpoint instead of the log.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import trio

from .common import BenchResult, BrokerLauncher, Figure, free_port, rss_bytes
from .fuzzing import (
    FuzzStats,
    Mutator,
    api_versions_frame,
    fuzz,
    load_seed_frames,
    prepare_broker,
    summary,
)

FRAMES = 1_000_000
QUICK_FRAMES = 20_000
WARMUP_FRAMES = 5_000
SEED = int(os.environ.get("TRIO_BROKER_FUZZ_SEED", "9"))
CONCURRENCY = 32
MAX_BATCH = 3
RSS_GROWTH_TARGET_MIB = 64


class _Brokers:
    """The current broker, and every one that died before it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.dead: list[tuple[int | None, str]] = []
        self.current = self._start()

    def _start(self) -> BrokerLauncher:
        metrics_port = free_port()
        launcher = BrokerLauncher(self.root / f"broker{len(self.dead)}", {
            "connections.max.idle.ms": "3000",
            "auto.create.topics.enable": "false",
            "logging.level": "WARNING",
            "metrics.prometheus.listener": f"127.0.0.1:{metrics_port}",
        })
        launcher.spawn()
        deadline = time.monotonic() + 30
        while True:  # broker_ready is an INFO line: wait for the listener instead
            launcher.check_alive()
            try:
                socket.create_connection(("127.0.0.1", launcher.port), 0.5).close()
                socket.create_connection(("127.0.0.1", metrics_port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    launcher.kill()
                    raise TimeoutError("broker did not listen within 30 s") from None
                time.sleep(0.05)
        self.metrics_port = metrics_port
        return launcher

    def alive(self) -> bool:
        process = self.current.process
        return process is not None and process.poll() is None

    async def restart(self) -> int:
        """Record the dead broker's exit status and stderr; start and prepare a new one;
        return its port."""
        process = self.current.process
        assert process is not None and process.stderr is not None
        self.dead.append((process.poll(), process.stderr.read().decode(errors="replace")))
        process.stderr.close()
        self.current = self._start()
        await prepare_broker(self.current.port, load_seed_frames())
        return self.current.port

    def scrape(self) -> dict[str, float]:
        """Sums of the broker's Prometheus samples by metric name (and close reason)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback only
            text = response.read().decode()
        sums: dict[str, float] = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            name_labels, _, value = line.rpartition(" ")
            name = name_labels.split("{", 1)[0]
            if name.endswith("_created"):  # prometheus_client's creation timestamps
                continue
            sums[name] = sums.get(name, 0.0) + float(value)
            reason = re.search(r'reason="([^"]*)"', name_labels)
            if reason and name.startswith("kafka_server_socket_server_metrics_connection_close"):
                key = f"close:{reason.group(1)}"
                sums[key] = sums.get(key, 0.0) + float(value)
        return sums


def _log_events(log_path: Path, names: set[str]) -> list[dict[str, Any]]:
    found = []
    for path in sorted(log_path.parent.glob(log_path.name + "*")):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                if any(f'"event":"{n}"' in line for n in names):
                    found.append(json.loads(line))
    return found


async def _main(frames: int, result: BenchResult) -> None:
    seeds = load_seed_frames()
    all_seeds = [p for payloads in seeds.values() for p in payloads]
    with tempfile.TemporaryDirectory(prefix="trio-broker-fuzz-") as tmp:
        brokers = _Brokers(Path(tmp))
        try:
            await prepare_broker(brokers.current.port, seeds)
            mutator = Mutator(all_seeds, SEED)
            mutants = iter(mutator)
            preamble = api_versions_frame()
            options: dict[str, Any] = {
                "is_alive": brokers.alive, "concurrency": CONCURRENCY, "max_batch": MAX_BATCH,
                "preamble": preamble, "stop_on_death": False, "restart": brokers.restart}
            warm = await fuzz(brokers.current.port, mutants, count=min(WARMUP_FRAMES, frames),
                              seed=SEED, **options)
            rss_start = rss_bytes(brokers.current.pid)
            started = time.perf_counter()
            last = [started]

            def progress(stats: FuzzStats) -> None:
                now = time.perf_counter()
                if now - last[0] > 30:
                    last[0] = now
                    print(f"  fuzz: {stats.frames_sent:,} frames, {stats.deaths} deaths, "
                          f"{stats.frames_sent / (now - started):,.0f} frames/s",
                          file=sys.stderr, flush=True)

            stats = await fuzz(brokers.current.port, mutants,
                               count=max(0, frames - WARMUP_FRAMES), seed=SEED + 1,
                               progress=progress, **options)
            elapsed = time.perf_counter() - started
            rss_end = rss_bytes(brokers.current.pid)
            # Every client connection is closed: wait for the broker to close its ends too.
            deadline = time.monotonic() + 15
            while True:
                metrics = brokers.scrape()
                open_now = metrics.get("kafka_server_socket_server_metrics_connection_count", 0)
                if open_now == 0 or time.monotonic() > deadline:
                    break
                await trio.sleep(0.2)
            created = metrics.get("kafka_server_socket_server_metrics_connection_creation_total", 0)
            closed = sum(v for k, v in metrics.items() if k.startswith("close:"))
        finally:
            code = brokers.current.stop()
        stderr_final = ""
        process = brokers.current.process
        if process is not None and process.stderr is not None and not process.stderr.closed:
            stderr_final = process.stderr.read().decode(errors="replace")
        failures = _log_events(brokers.current.log_path, {"request_failed"})

    deaths = warm.deaths + stats.deaths
    stderrs = [err for _, err in brokers.dead] + [stderr_final]
    tracebacks = sum(err.count("Traceback") for err in stderrs)
    leaked = int(open_now) + abs(int(created - closed))
    sent = warm.frames_sent + stats.frames_sent
    read = metrics.get("kafka_network_requestmetrics_requests_total", 0) + metrics.get(
        "close:invalid_frame", 0)
    result.figures += [
        Figure("frames sent", float(sent), "frames",
               note="" if sent == frames else
               f"of {frames:,} made; the others went to a broker that had died"),
        Figure("frames/s", stats.frames_sent / elapsed if elapsed else None, "frames/s",
               note=f"{CONCURRENCY} connections at a time, 1-{MAX_BATCH} frames each"),
        Figure("frames read by the last broker", read, "frames",
               note="answered requests + refused frames (Prometheus counters)"),
        Figure("process deaths", float(deaths), "deaths", target="0", met=deaths == 0),
        Figure("tracebacks on stderr", float(tracebacks), "", target="0", met=tracebacks == 0),
        Figure("handler failures (request_failed)", float(len(failures)), "", target="0",
               met=not failures),
        Figure("leaked connections", float(leaked), "", target="0", met=leaked == 0,
               note=f"{created:.0f} accepted, {closed:.0f} closed, {open_now:.0f} open"),
        Figure("stalled connections (client gave up)", float(warm.stalled + stats.stalled), ""),
        Figure("RSS start", rss_start / 2**20, "MiB"),
        Figure("RSS end", rss_end / 2**20, "MiB",
               target=f"< start + {RSS_GROWTH_TARGET_MIB} MiB",
               met=rss_end - rss_start < RSS_GROWTH_TARGET_MIB * 2**20),
        Figure("exit status after SIGTERM", float(code if code is not None else -999), "",
               target="0", met=code == 0),
    ]
    result.notes.append(f"mutations: {summary(mutator)['ops']}")
    result.notes.append(f"{len(mutator.apis)} (API, version) pairs from "
                        f"{len(all_seeds)} captured frames of {', '.join(seeds)}")
    for report in warm.death_reports + stats.death_reports:
        result.details.append(report[:600])
    for failure in failures[:5]:
        result.details.append(f"request_failed: {failure.get('api')} {failure.get('error')}")


def run(quick: bool) -> BenchResult:
    """The benchmark entry point (``python -m bench --only fuzz``)."""
    result = BenchResult("fuzz")
    trio.run(_main, QUICK_FRAMES if quick else FRAMES, result)
    return result
