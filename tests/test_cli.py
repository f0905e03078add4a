"""The ``trio_broker`` command as a user runs it: a subprocess, stopped with SIGTERM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from trio_broker import __version__


def run_cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trio_broker", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_version_and_help() -> None:
    assert run_cli("--version").stdout.strip() == f"trio_broker {__version__}"
    result = run_cli("--help")
    assert result.returncode == 0
    assert "run" in result.stdout and "analyze" in result.stdout
    assert "--override" in run_cli("run", "--help").stdout


def test_bad_config_value_fails_startup_naming_the_key(tmp_path: Path) -> None:
    result = run_cli("run", "--override", "num.io.threads=zero",
                     "--override", f"log.dirs={tmp_path}")
    assert result.returncode == 2
    assert "num.io.threads" in result.stderr and "int" in result.stderr


def test_ssl_listener_without_keystore_fails_startup(tmp_path: Path) -> None:
    result = run_cli("run", "--override", "listeners=SASL_SSL://127.0.0.1:0",
                     "--override", f"log.dirs={tmp_path}")
    assert result.returncode == 2
    assert "ssl.keystore.location" in result.stderr and "keystore" in result.stderr


def test_missing_config_file_fails_startup(tmp_path: Path) -> None:
    result = run_cli("run", "--config", str(tmp_path / "missing.properties"))
    assert result.returncode == 2 and "missing.properties" in result.stderr


def test_config_file_then_overrides(tmp_path: Path, broker_process: Any) -> None:
    """A Kafka server.properties works; --override wins; Kafka-only keys are reported."""
    properties = tmp_path / "server.properties"
    properties.write_text("# a Kafka server.properties\nnum.network.threads=2\n"
                          "zookeeper.connect=localhost:2181\nnode.id=7\n")
    process = broker_process({"node.id": "9"}, config_file=properties)
    ready = process.events("broker_ready")
    assert ready[0]["broker"] == 9
    assert f"127.0.0.1:{process.port}" in ready[0]["listeners"]
    ignored = process.events("config_key_ignored")
    assert [(e["key"], e["reason"]) for e in ignored] == [
        ("zookeeper.connect", "Kafka key without effect here")]
    assert process.stop() == 0


def test_run_and_sigterm(broker_process: Any) -> None:
    """Starts, says where it listens, stops on SIGTERM in order with exit status 0."""
    process = broker_process()
    assert process.stop() == 0
    steps = [e["step"] for e in process.events("shutdown_step")]
    assert steps[0] == "acceptors_stopped"
    assert process.events("broker_stopped")
    assert not [e for e in process.events() if e["level"] == "error"]
