"""``trio_broker analyze`` on a real Spark standalone cluster (a master and one worker started
from the pyspark package), through both documented routes: ``--master URL`` and
``spark-submit --master URL trio_broker/analytics/__main__.py``. Each must run on the cluster
and give the same summary as local mode. Also: which master ``get_spark`` picks (``--master``,
spark-submit's, ``SPARK_MASTER``, local[2]), and that its local-mode tuning stays local.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

MAIN_SCRIPT = Path(__file__).resolve().parents[2] / "trio_broker" / "analytics" / "__main__.py"
#: Keys of summary.json that differ between any two runs.
VOLATILE = {"generated_at", "elapsed_s", "spark_jobs"}
RUN_TIMEOUT = 300.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _status(web_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=5) as response:
        status: dict[str, Any] = json.load(response)
        return status


def _wait(predicate: Any, what: str, processes: list[subprocess.Popen[bytes]],
          logs: list[Path], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except OSError:  # the web UI is not up yet
            pass
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is not None:
                raise AssertionError(f"{log.name} exited ({process.returncode}) waiting for "
                                     f"{what}:\n{log.read_text(errors='replace')[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a daemon and what it started (a worker's executors): its own process group."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 20)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue


class Cluster:
    """A running standalone master with one worker."""

    def __init__(self, url: str, web_port: int, work_dir: Path) -> None:
        self.url = url
        self.web_port = web_port
        self.work_dir = work_dir

    def status(self) -> dict[str, Any]:
        return _status(self.web_port)


@pytest.fixture(scope="module")
def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture(scope="module")
def cluster(spark_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and a one-core worker on 127.0.0.1, everything they write under a temp dir."""
    base = tmp_path_factory.mktemp("spark-cluster")
    work_dir = base / "work"
    local_dir = base / "local"
    for directory in (work_dir, local_dir, base / "logs"):
        directory.mkdir()
    port, web_port, worker_web_port = _free_port(), _free_port(), _free_port()
    # An empty SPARK_CONF_DIR: no spark-env.sh or spark-defaults.conf of the machine applies.
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_WORKER_DIR": str(work_dir), "SPARK_LOCAL_DIRS": str(local_dir),
           "SPARK_LOG_DIR": str(base / "logs"), "SPARK_PID_DIR": str(base),
           "SPARK_CONF_DIR": str(base), "SPARK_DAEMON_MEMORY": "512m"}
    spark_class = str(spark_home / "bin" / "spark-class")
    commands = {
        "master.log": [spark_class, "org.apache.spark.deploy.master.Master",
                       "--host", "127.0.0.1", "--port", str(port),
                       "--webui-port", str(web_port)],
        "worker.log": [spark_class, "org.apache.spark.deploy.worker.Worker",
                       f"spark://127.0.0.1:{port}", "--host", "127.0.0.1",
                       "--cores", "1", "--memory", "1g", "--work-dir", str(work_dir),
                       "--webui-port", str(worker_web_port)],
    }
    processes: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    try:
        for name, command in commands.items():
            log = base / name
            with log.open("wb") as sink:
                processes.append(subprocess.Popen(command, env=env, cwd=base, stdout=sink,
                                                  stderr=subprocess.STDOUT,
                                                  start_new_session=True))
            logs.append(log)
            if name == "master.log":
                _wait(lambda: _status(web_port)["status"] == "ALIVE", "the master",
                      processes, logs)
        _wait(lambda: any(w["state"] == "ALIVE" for w in _status(web_port)["workers"]),
              "an ALIVE worker", processes, logs)
        yield Cluster(f"spark://127.0.0.1:{port}", web_port, work_dir)
    finally:
        for process in reversed(processes):  # the worker first, then the master
            _stop(process)


def _analyze(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with the cluster's defaults (see :func:`_spark_defaults`)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_CONF_DIR": str(_spark_defaults(cwd))}
    env.pop("SPARK_MASTER", None)  # the master comes from the command line only
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)
    elapsed = time.monotonic() - started
    print(f"{elapsed:.1f}s: {' '.join(command)}")  # shown with pytest -rP
    assert done.returncode == 0, f"{command}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done


def _spark_defaults(directory: Path) -> Path:
    """A Spark conf directory whose spark-defaults.conf both routes read (spark-submit reads it,
    and so does the spark-submit that pyspark starts its JVM with). The local-mode tuning of
    ``get_spark`` is not applied on a cluster: with Spark's 200 shuffle partitions on one core,
    each cluster run took over 2 minutes instead of under 1."""
    conf = directory / "spark-conf"
    conf.mkdir(exist_ok=True)
    (conf / "spark-defaults.conf").write_text(
        "spark.sql.shuffle.partitions 2\nspark.executor.memory 512m\n", encoding="utf-8")
    return conf


def _comparable(out: Path) -> dict[str, Any]:
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return {key: value for key, value in summary.items() if key not in VOLATILE}


@pytest.mark.timeout(900)
def test_analyze_runs_on_the_cluster_through_both_routes(
        cluster: Cluster, spark_home: Path, scenario_logs: list[Path], tmp_path: Path) -> None:
    logs = str(scenario_logs[0].parent)  # absolute: the executors read the same paths
    before = {app["id"] for app in cluster.status()["completedapps"]}
    module = [sys.executable, "-m", "trio_broker.analytics", logs]
    local = _analyze([*module, "--out", str(tmp_path / "local")], tmp_path)
    assert "analyze: Spark ready (master local[2]" in local.stderr

    by_option = _analyze([*module, "--out", str(tmp_path / "option"), "--master", cluster.url],
                         tmp_path)
    submitted = _analyze([str(spark_home / "bin" / "spark-submit"), "--master", cluster.url,
                          str(MAIN_SCRIPT), logs, "--out", str(tmp_path / "submit")], tmp_path)
    for done in (by_option, submitted):
        assert f"analyze: Spark ready (master {cluster.url}," in done.stderr, done.stderr

    # Both ran as applications of the master, with an executor on the worker.
    deadline = time.monotonic() + 30
    while (status := cluster.status())["activeapps"] and time.monotonic() < deadline:
        time.sleep(0.5)  # the master may not have seen the driver leave yet
    assert not status["activeapps"], status["activeapps"]
    apps = [app for app in status["completedapps"] if app["id"] not in before]
    assert [app["name"] for app in apps] == ["trio_broker analyze"] * 2, apps
    assert {app["state"] for app in apps} == {"FINISHED"}, apps
    assert {app["memoryperexecutor"] for app in apps} == {512}, "spark-defaults.conf was read"
    for app in apps:
        assert (cluster.work_dir / app["id"]).is_dir(), f"no executor of {app['id']} ran"

    expected = _comparable(tmp_path / "local")
    assert expected["requests"] > 0
    for route in ("option", "submit"):
        assert _comparable(tmp_path / route) == expected, route


#: Prints the master and shuffle partitions of ``get_spark(argv[1] or None)``'s session.
PROBE = """
import sys
from trio_broker.analytics.session import get_spark
spark, created = get_spark(sys.argv[1] if len(sys.argv) > 1 else None)
print("probe:", spark.sparkContext.master, spark.conf.get("spark.sql.shuffle.partitions"))
spark.stop()
"""


def _probe(command: list[str], tmp_path: Path, **env: str) -> str:
    (tmp_path / "probe.py").write_text(PROBE, encoding="utf-8")
    (tmp_path / "empty-conf").mkdir(exist_ok=True)  # no spark-defaults.conf
    environ = {**os.environ, "PYSPARK_PYTHON": sys.executable,
               "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_CONF_DIR": str(tmp_path / "empty-conf"), **env}
    if "SPARK_MASTER" not in env:
        environ.pop("SPARK_MASTER", None)
    done = subprocess.run(command, cwd=tmp_path, env=environ, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, check=False)
    assert done.returncode == 0, f"{command}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return next(line for line in done.stdout.splitlines() if line.startswith("probe:"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("route", ["SPARK_MASTER", "argument over SPARK_MASTER",
                                   "spark-submit over SPARK_MASTER",
                                   "argument over spark-submit"])
def test_master_precedence(route: str, spark_home: Path, tmp_path: Path) -> None:
    """``--master``, then spark-submit's master, then ``SPARK_MASTER``, then local[2]."""
    probe = str(tmp_path / "probe.py")
    submit = [str(spark_home / "bin" / "spark-submit"), "--master", "local[3]", probe]
    command, env, master = {
        "SPARK_MASTER": ([sys.executable, probe], "local[1]", "local[1]"),
        "argument over SPARK_MASTER": ([sys.executable, probe, "local[3]"], "local[1]",
                                       "local[3]"),
        "spark-submit over SPARK_MASTER": (submit, "local[1]", "local[3]"),
        "argument over spark-submit": ([*submit, "local[1]"], "local[2]", "local[1]"),
    }[route]
    # The local-mode tuning applies to every local master (2 shuffle partitions).
    assert _probe(command, tmp_path, SPARK_MASTER=env) == f"probe: {master} 2"


@pytest.mark.timeout(300)
def test_local_tuning_is_not_applied_on_a_cluster(cluster: Cluster, tmp_path: Path) -> None:
    """On a cluster, Spark's (or the cluster's) settings stand: 200 shuffle partitions."""
    probe = str(tmp_path / "probe.py")
    assert _probe([sys.executable, probe, cluster.url], tmp_path) \
        == f"probe: {cluster.url} 200"
