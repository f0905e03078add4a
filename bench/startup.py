"""Start-up: from spawning ``python -m trio_broker run`` to ``broker_ready`` and to a TCP connect.

Baseline: spawning ``python -c "import trio"`` until it exits, in the same run (the floor any
Trio program pays: interpreter start plus importing Trio). Target: ready within 0.5 s.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import REPO_ROOT, BenchResult, BrokerLauncher, Figure, bench_env, median

TARGET_READY_S = 0.5


def _spawn_to_exit(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=bench_env(), cwd=REPO_ROOT)
    return time.perf_counter() - started


def _can_connect(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.05)
        try:
            sock.connect(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _one_start(workdir: Path) -> tuple[float, float, float | None]:
    """(seconds to broker_ready, seconds to a TCP connect, the broker's own startup_ms)."""
    broker = BrokerLauncher(workdir, {"logging.metrics.snapshot.interval.ms": "0"})
    broker.spawn()
    ready_at: float | None = None
    connect_at: float | None = None
    try:
        deadline = time.monotonic() + 30
        while (ready_at is None or connect_at is None) and time.monotonic() < deadline:
            broker.check_alive()
            now = time.perf_counter()
            if connect_at is None and _can_connect(broker.port):
                connect_at = time.perf_counter()
            if ready_at is None and broker.is_ready():
                ready_at = now
            time.sleep(0.002)
        if ready_at is None or connect_at is None:
            raise TimeoutError("broker did not become ready within 30 s")
        startup_ms = None
        for line in broker.log_path.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event.get("event") == "broker_ready":
                startup_ms = event.get("startup_ms")
        return ready_at - broker.spawned_at, connect_at - broker.spawned_at, startup_ms
    finally:
        broker.stop()


def run(quick: bool) -> BenchResult:
    runs = 1 if quick else 7
    result = BenchResult("startup")
    bare = [_spawn_to_exit("pass") for _ in range(runs)]
    trio_import = [_spawn_to_exit("import trio") for _ in range(runs)]
    # The broker's import floor: everything `trio_broker run` imports before it does any work.
    app_import = [_spawn_to_exit("import trio_broker.cli, trio_broker.server.app")
                  for _ in range(runs)]
    ready: list[float] = []
    connect: list[float] = []
    internal: list[float] = []
    for index in range(runs):
        with tempfile.TemporaryDirectory(prefix="trio-broker-bench-") as tmp:
            r, c, s = _one_start(Path(tmp) / str(index))
        ready.append(r)
        connect.append(c)
        if s is not None:
            internal.append(float(s) / 1000)
    baseline = median(trio_import)
    result.figures += [
        Figure("spawn -> broker_ready (median)", median(ready), "s",
               'python -c "import trio"', baseline, f"<= {TARGET_READY_S} s",
               median(ready) <= TARGET_READY_S),
        Figure("spawn -> TCP connect (median)", median(connect), "s",
               'python -c "import trio"', baseline),
        Figure("python -c 'import trio_broker.server.app'", median(app_import), "s",
               'python -c "import trio"', baseline, note="imports only (kio, storage, ...)"),
        Figure('python -c "pass"', median(bare), "s", 'python -c "import trio"', baseline),
    ]
    if internal:
        result.figures.append(Figure("broker's own startup_ms (median)", median(internal), "s",
                                     note="from config loaded to listeners bound"))
    result.notes.append(f"{runs} runs each; ready = the broker_ready line in the log file")
    if importlib.util.find_spec("hypothesis") is not None:
        result.notes.append("hypothesis is installed: importing kio also imports it (phantom-types "
                            "registers strategies), part of the import floor above")
    return result
