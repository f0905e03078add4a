"""The ``trio_broker`` command as a user runs it: a subprocess, stopped with SIGTERM."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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


def test_start_up_failures_are_one_line(tmp_path: Path, broker_process: Any) -> None:
    """A locked data directory or a taken port ends the command with a message, not a
    traceback (Trio hands the error up wrapped in exception groups)."""
    running = broker_process()
    locked = run_cli("run", "--override", f"log.dirs={running.data_dir}",
                     "--override", "listeners=PLAINTEXT://127.0.0.1:0")
    assert locked.returncode == 1
    assert locked.stderr.startswith("trio_broker: cannot start: Failed to acquire lock")
    taken = run_cli("run", "--override", f"log.dirs={tmp_path / 'other'}",
                    "--override", f"listeners=PLAINTEXT://127.0.0.1:{running.port}")
    assert taken.returncode == 1
    assert taken.stderr.startswith("trio_broker: cannot start:")
    assert (f"Socket server failed to bind to 127.0.0.1:{running.port}: Address already in use"
            in taken.stderr)
    for result in (locked, taken):
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert running.stop() == 0


@pytest.mark.parametrize("content", [
    "{garbage", "", '{"topics": [{"name": "t"}]}', '{"topics": 5}',
    '{"topics": [{"name": "../escape", "topic_id": "' + "0" * 32 + '", "num_partitions": 1}]}',
    '{"topics": [{"name": "t", "topic_id": "' + "0" * 32 + '", "num_partitions": -1}]}'])
def test_a_corrupt_topics_file_fails_start_up_naming_it(tmp_path: Path, content: str) -> None:
    """The topic metadata file, damaged or hand-edited wrong, is refused as Kafka refuses a
    corrupt checkpoint: one line naming the file, no traceback, nothing created."""
    (tmp_path / "topics.json").write_text(content)
    result = run_cli("run", "--override", f"log.dirs={tmp_path}",
                     "--override", "listeners=PLAINTEXT://127.0.0.1:0")
    assert result.returncode == 1
    assert result.stderr.startswith(f"trio_broker: cannot start: {tmp_path / 'topics.json'} "
                                    "is corrupt")
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (tmp_path.parent / "escape-0").exists()


@pytest.mark.parametrize(("name", "content", "message"), [
    ("client-quotas.json", "{garbage", "cannot read the client quotas in"),
    ("client-quotas.json", '[{"entity": 5}]', "cannot read the client quotas in"),
    ("meta.properties", "version=1\ncluster.id=abc\nnode.id=zz\n", "node.id 'zz' stored in"),
])
def test_other_unreadable_files_of_the_data_dir_fail_start_up_naming_them(
        tmp_path: Path, name: str, content: str, message: str) -> None:
    """Saved client quotas and meta.properties, damaged: one line naming the file (they ended
    in a traceback)."""
    (tmp_path / name).write_text(content)
    result = run_cli("run", "--override", f"log.dirs={tmp_path}",
                     "--override", "listeners=PLAINTEXT://127.0.0.1:0")
    assert result.returncode == 1
    assert result.stderr.startswith(f"trio_broker: cannot start: {message}")
    assert str(tmp_path / name) in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_an_unusable_log_dir_or_logging_file_fails_start_up_naming_the_key(
        tmp_path: Path) -> None:
    """A log directory that is a file (or under one), or a logging.file that is a directory:
    a configuration error naming the key, not an OSError or a traceback."""
    afile = tmp_path / "afile"
    afile.write_text("")
    cases = [
        (["log.dirs=" + str(afile)], "log.dirs", "must be a directory (this is a file)"),
        (["log.dir=" + str(afile / "sub")], "log.dir", "must be a directory that can be"),
        ([f"log.dirs={tmp_path / 'data'}", f"logging.file={tmp_path}"], "logging.file",
         "cannot be opened for writing"),
    ]
    for overrides, key, allowed in cases:
        args = ["run", "--override", "listeners=PLAINTEXT://127.0.0.1:0"]
        for override in overrides:
            args += ["--override", override]
        result = run_cli(*args)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("trio_broker: configuration error: Invalid value")
        assert f"for configuration {key}: {allowed}" in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


#: Runs the command as its console script does, with a real SIGINT delivered to the process
#: at a chosen import (the moment a Ctrl-C lands is otherwise a matter of luck).
_CTRL_C_DURING_IMPORT = """
import builtins, os, signal, sys
real_import = builtins.__import__
def interrupting(name, *args, **kwargs):
    if name == {module!r}:
        builtins.__import__ = real_import
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = interrupting
sys.argv = ["trio_broker", "run", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
            "--override", "log.dirs=" + sys.argv[1]]
from trio_broker.command import main
sys.exit(main())
"""


@pytest.mark.parametrize("module", ["trio", "server.app"])
def test_ctrl_c_during_start_up_is_one_line(tmp_path: Path, module: str) -> None:
    """Ctrl-C while the command imports its modules (``trio``: the command line itself;
    ``server.app``, imported relatively by ``run``: after the configuration was read) ends
    with one line and status 130, not a KeyboardInterrupt traceback."""
    result = subprocess.run(
        [sys.executable, "-c", _CTRL_C_DURING_IMPORT.format(module=module), str(tmp_path)],
        capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 130, result.stderr
    assert result.stderr == "trio_broker: interrupted during start-up\n"

def test_the_soft_open_file_limit_is_raised_to_the_hard_one(broker_process: Any) -> None:
    """As the JVM does for Kafka: a soft limit of a few hundred would not hold the segments of
    a few hundred partitions."""
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)  # not above this one's
    assert hard > 300
    process = broker_process(limits={resource.RLIMIT_NOFILE: (300, hard)})
    assert process.stop() == 0
    (event,) = process.events("open_file_limit_raised")
    assert (event["before"], event["limit"]) == (300, hard)


def _capacity(limit: int, **settings: str) -> Any:
    from trio_broker.cli import connection_capacity
    from trio_broker.config import load_config

    config = load_config({"listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
                          "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
                          **settings})
    return connection_capacity(config, limit)


def test_connection_capacity_against_the_open_file_limit() -> None:
    """The start-up rule (docs/decisions.md, "10,000 connections"): a ``max.connections`` the
    open-file limit cannot hold is short; Kafka's default (no cap) never is, whatever the
    limit: the operating system is then the only limit, as for Kafka."""
    from trio_broker.cli import BASE_FILE_DESCRIPTORS
    from trio_broker.config import INT_MAX

    unlimited = _capacity(1024)
    assert unlimited.max_connections == INT_MAX
    assert unlimited.connections_possible == 1024 - BASE_FILE_DESCRIPTORS
    assert not unlimited.short
    assert _capacity(1024, **{"max.connections": "5000"}).short
    fits = _capacity(20_000, **{"max.connections": "10000"})
    assert not fits.short and fits.connections_possible == 20_000 - BASE_FILE_DESCRIPTORS
    edge = 1024 - BASE_FILE_DESCRIPTORS
    assert not _capacity(1024, **{"max.connections": str(edge)}).short
    assert _capacity(1024, **{"max.connections": str(edge + 1)}).short
    # Listener caps count when every listener has one: their sum is the broker's cap...
    both = _capacity(1024, **{"listener.name.plaintext.max.connections": "600",
                              "listener.name.other.max.connections": "600"})
    assert (both.max_connections, both.short) == (1200, True)
    # ...not when one listener is unlimited.
    one = _capacity(1024, **{"listener.name.plaintext.max.connections": "5000"})
    assert (one.max_connections, one.short) == (INT_MAX, False)
    # No limit at all (RLIM_INFINITY) holds any cap.
    assert not _capacity(resource.RLIM_INFINITY, **{"max.connections": "1000000"}).short


def test_the_open_file_limit_is_logged_and_a_short_one_warned_about(broker_process: Any) -> None:
    """``trio_broker run`` logs its open-file limit and cap; with ``max.connections`` above
    what the limit holds it warns (event and stderr) and starts all the same."""
    import signal

    process = broker_process({"max.connections": "5000"},
                             limits={resource.RLIMIT_NOFILE: (1024, 1024)})
    assert process.process is not None and process.process.stderr is not None
    process.process.send_signal(signal.SIGTERM)
    assert process.process.wait(30) == 0
    stderr = process.process.stderr.read().decode()
    fields = {"limit": 1024, "max_connections": 5000, "connections_possible": 960}
    (logged,) = process.events("open_file_limit")
    assert {key: logged[key] for key in fields} == fields
    (warned,) = process.events("open_file_limit_short")
    assert warned["level"] == "warning"
    assert {key: warned[key] for key in fields} == fields
    assert "max.connections is 5000 but the open-file limit (1024)" in stderr
    # Kafka's default cap: logged, nothing to warn about.
    default = broker_process(limits={resource.RLIMIT_NOFILE: (1024, 1024)})
    assert default.stop() == 0
    (logged,) = default.events("open_file_limit")
    assert logged["max_connections"] == 2**31 - 1 and logged["limit"] == 1024
    assert default.events("open_file_limit_short") == []


def test_a_broker_short_of_file_descriptors_refuses_partitions_and_restarts(
        broker_process: Any) -> None:
    """The request that once left a broker unable to start again: more new partitions than
    the broker can open files for. The request fails, nothing is recorded, the broker keeps
    serving the partitions it has, and it restarts."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    process = broker_process(limits={resource.RLIMIT_NOFILE: (400, 400)})
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    admin.create_topics([NewTopic("wide", 100, 1)])["wide"].result(timeout=30)
    with pytest.raises(KafkaException) as raised:
        admin.create_partitions([NewPartitions("wide", 600)])["wide"].result(timeout=30)
    assert "none of the 500 new partitions were created" in raised.value.args[0].str()
    assert len(admin.list_topics(timeout=10).topics["wide"].partitions) == 100
    producer = Producer({"bootstrap.servers": process.bootstrap})
    producer.produce("wide", b"still here", partition=99)
    assert producer.flush(30) == 0
    assert process.stop() == 0
    assert [e["created"] < 500 for e in process.events("partition_create_failed")] == [True]

    process.start()
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    assert len(admin.list_topics(timeout=10).topics["wide"].partitions) == 100
    consumer = Consumer({"bootstrap.servers": process.bootstrap, "group.id": "check",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("wide", 99, 0)])
    message = consumer.poll(30)
    consumer.close()
    assert message is not None and message.value() == b"still here"
    assert process.stop() == 0


def test_a_full_disk_fails_produces_and_keeps_what_was_acknowledged(
        broker_process: Any) -> None:
    """Writes that do not fit (a file-size limit stands in for a full disk: the same failed
    write) are answered KAFKA_STORAGE_ERROR and cut back off the segment; the broker goes on
    serving, and after a restart exactly the acknowledged records are there."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    process = broker_process({"log.segment.bytes": "10485760"},
                             limits={resource.RLIMIT_FSIZE: (400_000, resource.RLIM_INFINITY)})
    acked: list[bytes] = []
    failed: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            acked.append(message.value())
        else:
            failed.append(error.name())

    producer = Producer({"bootstrap.servers": process.bootstrap, "linger.ms": 100,
                         "batch.size": 1_000_000, "message.timeout.ms": 4000})
    for index in range(100):
        producer.produce("full", b"%04d" % index + b"x" * 996, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0 and len(acked) == 100
    # One batch of 600 KB: past the 400 KB the segment may grow to.
    for index in range(100, 700):
        producer.produce("full", b"%04d" % index + b"x" * 996, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert len(acked) == 100 and len(failed) == 600
    assert process.process is not None and process.process.poll() is None
    errors = {e["error"] for e in process.events("request") if e["api"] == "Produce"}
    assert errors == {"NONE", "KAFKA_STORAGE_ERROR"}
    assert process.stop() == 0

    process.limits = {}
    process.start()
    consumer = Consumer({"bootstrap.servers": process.bootstrap, "group.id": "check",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition("full", 0, 0)])
    values: list[bytes] = []
    while True:
        message = consumer.poll(30)
        assert message is not None
        if message.error():
            break  # end of the partition
        values.append(message.value())
    consumer.close()
    assert values == acked
    assert process.stop() == 0
