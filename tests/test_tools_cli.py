"""``trio_broker topics|groups|configs|produce|consume|cluster`` against a real broker on a
real socket (in-process, port 0); output checked against the Kafka tools' formats."""

from __future__ import annotations

import functools
import io
import json
import re
import socket
import struct
import subprocess
import sys
import threading
from typing import Any

import pytest
import trio

from trio_broker.cli import main as cli_main
from trio_broker.tools.topics import main as topics_main


async def tool(bootstrap: str, name: str, *args: str, stdin: str | None = None
               ) -> tuple[int, str, str]:
    """Run ``trio_broker NAME --bootstrap-server B ARGS`` in a worker thread."""
    from trio_broker.cli import _TOOL_MODULES

    module_name, _, function = _TOOL_MODULES[name].target.partition(":")
    module = __import__(f"trio_broker{module_name}", fromlist=["main"])
    entry = getattr(module, function or "main")
    out, err = io.StringIO(), io.StringIO()
    kwargs: dict[str, Any] = {"out": out, "err": err}
    if stdin is not None:
        kwargs["stdin"] = io.StringIO(stdin)
    run = functools.partial(entry, ["--bootstrap-server", bootstrap, *args], **kwargs)
    with trio.fail_after(60):
        code = await trio.to_thread.run_sync(run, abandon_on_cancel=True)
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------ topics
async def test_topics_create_list_describe_alter_delete(broker: Any) -> None:
    b = broker.bootstrap
    assert await tool(b, "topics", "--create", "--topic", "orders", "--partitions", "2",
                      "--config", "retention.ms=1000", "--config", "cleanup.policy=compact") \
        == (0, "Created topic orders.\n", "")
    code, _, err = await tool(b, "topics", "--create", "--topic", "orders")
    assert code == 1 and err == "trio_broker topics: Topic 'orders' already exists.\n"
    assert (await tool(b, "topics", "--create", "--topic", "orders", "--if-not-exists"))[0] == 0
    assert (await tool(b, "topics", "--create", "--topic", "audit"))[0] == 0
    assert await tool(b, "topics", "--list") == (0, "audit\norders\n", "")

    code, out, _ = await tool(b, "topics", "--describe", "--topic", "orders")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    # kafka-topics.sh: TopicCommand's TopicDescription then one PartitionDescription per line
    assert re.fullmatch(r"Topic: orders\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 2\t"
                        r"ReplicationFactor: 1\tConfigs: cleanup.policy=compact,"
                        r"retention.ms=1000", lines[0]), lines[0]
    assert lines[1:] == ["\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1",
                         "\tTopic: orders\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1"]

    assert await tool(b, "topics", "--alter", "--topic", "orders", "--partitions", "4") == (
        0, "", "")
    code, out, _ = await tool(b, "topics", "--describe", "--topic", "orders", "--output", "json")
    (described,) = json.loads(out)
    assert described["partition_count"] == 4 and described["configs"] == {
        "cleanup.policy": "compact", "retention.ms": "1000"}
    assert [p["leader"] for p in described["partitions"]] == [1, 1, 1, 1]

    assert await tool(b, "topics", "--delete", "--topic", "orders") == (0, "", "")
    assert await tool(b, "topics", "--delete", "--topic", "orders") == (
        1, "", "trio_broker topics: Topic 'orders' does not exist as expected\n")
    assert (await tool(b, "topics", "--delete", "--topic", "orders", "--if-exists"))[0] == 0
    assert await tool(b, "topics", "--list") == (0, "audit\n", "")


async def test_topics_describe_reports(broker: Any) -> None:
    """kafka-topics.sh's --describe filters: the Topic lines of topics with overrides, or the
    partition lines of the partitions in a state (one broker: none under-replicated)."""
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "strict", "--partitions", "2",
                       "--config", "min.insync.replicas=2"))[0] == 0
    assert (await tool(b, "topics", "--create", "--topic", "plain"))[0] == 0
    code, out, _ = await tool(b, "topics", "--describe", "--topics-with-overrides")
    assert code == 0 and re.fullmatch(
        r"Topic: strict\tTopicId: \S+\tPartitionCount: 2\tReplicationFactor: 1\t"
        r"Configs: min.insync.replicas=2\n", out), out
    assert await tool(b, "topics", "--describe", "--under-min-isr-partitions") == (0, (
        "\tTopic: strict\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n"
        "\tTopic: strict\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1\n"), "")
    assert await tool(b, "topics", "--describe", "--at-min-isr-partitions") == (
        0, "\tTopic: plain\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\n", "")
    for report in ("--under-replicated-partitions", "--unavailable-partitions"):
        assert await tool(b, "topics", "--describe", report) == (0, "", "")
    code, out, _ = await tool(b, "topics", "--describe", "--at-min-isr-partitions",
                              "--output", "json")
    assert [(t["name"], len(t["partitions"])) for t in json.loads(out)] == [("plain", 1)]
    code, _, err = await tool(b, "topics", "--list", "--unavailable-partitions")
    assert code == 2 and "only valid with --describe" in err


async def test_topics_refused_by_the_broker(broker: Any) -> None:
    code, out, err = await tool(broker.bootstrap, "topics", "--create", "--topic", "bad",
                                "--config", "cleanup.policy=nonsense")
    assert (code, out) == (1, "")
    assert err.startswith("trio_broker topics: bad: INVALID_CONFIG") and err.count("\n") == 1


@pytest.mark.parametrize(("args", "reason"), [
    ((), "one of the arguments --create --list --describe --alter --delete is required"),
    (("--list", "--describe"), "not allowed with argument"),
    (("--alter", "--topic", "t"), "--alter needs --partitions"),
    (("--create",), "--topic is required"),
    (("--create", "--topic", "t", "--partitions", "x"), "invalid int value"),
    (("--list", "--if-not-exists"), "--if-not-exists is only valid with --create"),
    (("--list", "--bogus"), "unrecognized arguments: --bogus"),
])
def test_bad_flags_exit_2(args: tuple[str, ...], reason: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["topics", "--bootstrap-server", "127.0.0.1:1", *args]) == 2
    err = capsys.readouterr().err
    assert reason in err and err.count("\n") == 1


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("topics", "groups", "configs", "produce", "consume", "cluster"):
        assert cli_main([name, "--help"]) == 0
        assert "examples:" in capsys.readouterr().out


def test_unreachable_broker_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["topics", "--bootstrap-server", "127.0.0.1:1", "--list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Broker may not be available" in err


@pytest.mark.parametrize(("value", "reason"), [
    ("abc", "Not a number of type INT"), ("1.5", "Not a number of type INT"),
    ("-1", "Value must be at least 0")])
@pytest.mark.parametrize("command", ["topics", "groups", "configs", "acls", "quotas"])
def test_bad_request_timeout_is_kafkas_one_line(
        command: str, value: str, reason: str, tmp_path: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A --command-config value Kafka's ConfigDef refuses: its message, status 1."""
    config = tmp_path / "client.properties"
    config.write_text(f"request.timeout.ms={value}\n")
    action = {"configs": ["--describe", "--entity-type", "topics"],
              "quotas": ["--describe", "--entity-type", "users"]}.get(command, ["--list"])
    assert cli_main([command, "--bootstrap-server", "127.0.0.1:1", *action,
                     "--command-config", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and \
        f"Invalid value {value} for configuration request.timeout.ms: {reason}" in err


@pytest.mark.parametrize(("command", "flag"), [("produce", "--producer.config"),
                                             ("consume", "--consumer.config")])
def test_console_config_flags_of_kafka_3(command: str, flag: str, tmp_path: Any,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """kafka-console-producer/consumer.sh 3.x's names for --command-config are read."""
    config = tmp_path / "client.properties"
    config.write_text("request.timeout.ms=soon\n")
    assert cli_main([command, "--bootstrap-server", "127.0.0.1:1", "--topic", "t", flag,
                     str(config)]) == 1
    assert capsys.readouterr().err == (
        f"trio_broker {command}: Invalid value soon for configuration request.timeout.ms: "
        "Not a number of type INT\n")


def test_installed_command(broker_process: Any) -> None:
    process = broker_process()
    done = subprocess.run([sys.executable, "-m", "trio_broker", "topics", "--bootstrap-server",
                           process.bootstrap, "--create", "--topic", "t1"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "Created topic t1.\n", "")
    assert process.stop() == 0


# ------------------------------------------------------------------------------ groups
def confluent_group_session(bootstrap: str, topic: str, group: str, consume: int,
                            while_active: Any) -> Any:
    """Produce 10 records over 2 partitions, consume ``consume`` of them in ``group`` with
    confluent-kafka, committing each; call ``while_active()`` before the consumer leaves."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, key=f"k{i}", value=f"v{i}", partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "client.id": "cli-test"})
    consumer.subscribe([topic])
    seen = 0
    try:
        while seen < consume:
            message = consumer.poll(5)
            if message is None or message.error():
                continue
            seen += 1
            consumer.commit(message=message, asynchronous=False)
        return while_active()
    finally:
        consumer.close()


@pytest.mark.interop
async def test_groups_list_describe_reset_delete(broker: Any) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "t2", "--partitions", "2"))[0] == 0

    def describe_now() -> Any:
        return [trio.from_thread.run(tool, b, "groups", "--describe", "--group", "app", *view)
                for view in ((), ("--members",), ("--state",))]

    active, members, state = await trio.to_thread.run_sync(
        confluent_group_session, b, "t2", "app", 7, describe_now)
    code, out, err = members
    assert (code, err, out.splitlines()[1].split()) == (
        0, "", ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"])
    (member,) = [line.split() for line in out.splitlines()[2:]]
    assert member[0] == "app" and member[2:] == ["/127.0.0.1", "cli-test", "2"]
    code, out, err = state
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == [
        "GROUP           COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE           #MEMBERS",
        f"app             {b + ' (1)':<25} range                Stable          1"]
    code, out, err = active
    lines = out.splitlines()
    assert (code, err, lines[0]) == (0, "", "")
    header = ("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  "
              "LAG             CONSUMER-ID")
    assert lines[1].startswith(header) and lines[1].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
        "CONSUMER-ID", "HOST", "CLIENT-ID"]
    rows = [line.split() for line in lines[2:]]
    assert [r[:6] for r in rows] in ([["app", "t2", "0", "2", "5", "3"],
                                      ["app", "t2", "1", "5", "5", "0"]],
                                     [["app", "t2", "0", "5", "5", "0"],
                                      ["app", "t2", "1", "2", "5", "3"]])
    assert all(r[6].startswith("cli-test-") and r[7] == "/127.0.0.1" and r[8] == "cli-test"
               for r in rows)

    assert await tool(b, "groups", "--list") == (0, "app\n", "")
    code, out, err = await tool(b, "groups", "--describe", "--group", "app")
    assert code == 0 and "Consumer group 'app' has no active members." in err
    assert all(line.split()[6:] == ["-", "-", "-"] for line in out.splitlines()[2:])

    # dry run by default (with Kafka's warning), then executed
    code, out, err = await tool(b, "groups", "--reset-offsets", "--group", "app",
                                "--all-topics", "--to-earliest")
    assert code == 0 and err.startswith("WARN: No action will be performed")
    assert out.splitlines()[1:] == [
        "GROUP                          TOPIC                          PARTITION  NEW-OFFSET     ",
        "app                            t2                             0          0              ",
        "app                            t2                             1          0              "]
    code, out, _ = await tool(b, "groups", "--reset-offsets", "--group", "app", "--topic",
                              "t2:0", "--shift-by", "-1", "--execute", "--output", "json")
    shifted = json.loads(out)["offsets"]
    assert code == 0 and len(shifted) == 1 and shifted[0]["partition"] == 0
    code, out, _ = await tool(b, "groups", "--reset-offsets", "--group", "app", "--topic", "t2",
                              "--to-datetime", "2000-01-01T00:00:00.000", "--execute")
    assert code == 0
    code, out, _ = await tool(b, "groups", "--describe", "--group", "app", "--output", "json")
    assert [(r["partition"], r["current_offset"], r["lag"])
            for r in json.loads(out)["app"]["partitions"]] == [(0, 0, 5), (1, 0, 5)]
    assert await tool(b, "groups", "--reset-offsets", "--group", "app", "--topic", "t2",
                      "--to-offset", "99", "--execute", "--output", "json") == (
        0, '{"group": "app", "executed": true, "offsets": [{"topic": "t2", "partition": 0, '
           '"offset": 5}, {"topic": "t2", "partition": 1, "offset": 5}]}\n', "")

    assert await tool(b, "groups", "--delete", "--group", "app") == (
        0, "Deletion of requested consumer groups ('app') was successful.\n", "")
    code, _, err = await tool(b, "groups", "--delete", "--group", "app")
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err and err.count("\n") == 1
    assert await tool(b, "groups", "--list") == (0, "", "")


@pytest.mark.parametrize(("args", "reason"), [
    (("--describe",), "need --group or --all-groups"),
    (("--reset-offsets", "--group", "g", "--to-earliest"), "one of --topic, --all-topics"),
    (("--reset-offsets", "--group", "g", "--all-topics"), "needs one of --to-earliest"),
    (("--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "yesterday"),
     "Error parsing timestamp"),
    (("--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--to-latest"),
     "not allowed with argument"),
    (("--list", "--execute"), "go with --reset-offsets"),
    (("--list", "--members"), "go with --describe"),
    (("--describe", "--group", "g", "--members", "--state"), "not allowed with argument"),
])
def test_groups_bad_flags_exit_2(args: tuple[str, ...], reason: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["groups", "--bootstrap-server", "127.0.0.1:1", *args]) == 2
    err = capsys.readouterr().err
    assert reason in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- configs
async def test_configs_topics_and_brokers(broker: Any) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "c1", "--config",
                       "retention.ms=5000"))[0] == 0
    entity = ("--entity-type", "topics", "--entity-name", "c1")
    assert await tool(b, "configs", "--describe", *entity) == (0, (
        "Dynamic configs for topic c1 are:\n"
        "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000, "
        "DEFAULT_CONFIG:log.retention.hours=168}\n"), "")
    assert await tool(b, "configs", "--alter", *entity, "--add-config",
                      "cleanup.policy=[compact,delete],segment.ms=100000") == (
        0, "Completed updating config for topic c1.\n", "")
    assert (await tool(b, "configs", "--alter", *entity, "--delete-config",
                       "retention.ms"))[0] == 0
    # ConfigCommand.alterConfig: configs that are not set cannot be deleted (nothing is)
    assert await tool(b, "configs", "--alter", *entity, "--delete-config",
                      "segment.ms,retention.ms,flush.ms") == (
        1, "", "trio_broker configs: Invalid config(s): retention.ms,flush.ms\n")
    code, out, _ = await tool(b, "configs", "--describe", *entity)
    assert code == 0 and [line.split(" sensitive=")[0] for line in out.splitlines()] == [
        "Dynamic configs for topic c1 are:", "  cleanup.policy=compact,delete",
        "  segment.ms=100000"]
    code, out, _ = await tool(b, "configs", "--describe", *entity, "--all", "--output", "json")
    (described,) = json.loads(out)
    assert {c["name"] for c in described["configs"]} >= {"cleanup.policy", "retention.ms",
                                                         "compression.type"}

    code, out, _ = await tool(b, "configs", "--describe", "--entity-type", "brokers",
                              "--entity-name", "1")
    assert (code, out.splitlines()[0]) == (0, "Dynamic configs for broker 1 are:")
    # kafka-configs.sh's shortcuts for the entity type and name
    assert await tool(b, "configs", "--describe", "--topic", "c1") == \
        await tool(b, "configs", "--describe", *entity)
    assert await tool(b, "configs", "--describe", "--broker", "1") == (0, out, "")
    assert await tool(b, "configs", "--describe", "--broker-defaults") == (
        0, "Default configs for brokers in the cluster are:\n", "")
    # a broker key that cannot change at run time is refused: one line, status 1
    # (dynamic ones: tests/interop/test_dynamic_broker_configs.py)
    code, out, err = await tool(b, "configs", "--alter", "--entity-type", "brokers",
                                "--entity-default", "--add-config", "num.io.threads=1")
    assert (code, out, err.count("\n")) == (1, "", 1) and "INVALID_REQUEST" in err


@pytest.mark.interop
async def test_configs_as_confluent_admin_reports_them(broker: Any) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "c2"))[0] == 0
    assert (await tool(b, "configs", "--alter", "--entity-type", "topics", "--entity-name",
                       "c2", "--add-config", "cleanup.policy=[compact,delete],segment.ms=100000"
                       ))[0] == 0

    def confluent_view() -> dict[str, str]:
        from confluent_kafka.admin import AdminClient, ConfigResource

        admin = AdminClient({"bootstrap.servers": b})
        (future,) = admin.describe_configs([ConfigResource("topic", "c2")]).values()
        return {k: v.value for k, v in future.result(30).items() if not v.is_default}

    code, out, _ = await tool(b, "configs", "--describe", "--entity-type", "topics",
                              "--entity-name", "c2")
    ours = dict(line.split(" sensitive=")[0].strip().split("=", 1)
                for line in out.splitlines()[1:])
    assert code == 0 and await trio.to_thread.run_sync(confluent_view) == ours == {
        "cleanup.policy": "compact,delete", "segment.ms": "100000"}
    # and kafka-topics.sh's Configs line says the same
    code, out, _ = await tool(b, "topics", "--describe", "--topic", "c2")
    assert out.splitlines()[0].endswith("Configs: cleanup.policy=compact,delete,"
                                        "segment.ms=100000")


async def test_configs_quotas_are_the_quotas_command(broker: Any) -> None:
    b = broker.bootstrap
    assert await tool(b, "configs", "--alter", "--entity-type", "ips", "--entity-name",
                      "10.0.0.1", "--add-config", "connection_creation_rate=5") == (
        0, "Completed updating config for ip 10.0.0.1.\n", "")
    expected = (0, "Quota configs for ip '10.0.0.1' are connection_creation_rate=5.0\n", "")
    assert await tool(b, "configs", "--describe", "--entity-type", "ips") == expected
    assert await tool(b, "quotas", "--describe", "--entity-type", "ips") == expected


@pytest.mark.parametrize(("args", "reason"), [
    (("--describe",), "one of --entity-type, --topic, --broker, --broker-defaults is required"),
    (("--describe", "--topic", "t", "--entity-name", "u"), "--topic cannot be combined"),
    (("--describe", "--topic", "t", "--broker", "1"), "--topic cannot be combined"),
    (("--describe", "--broker", "x"), "valid integer"),
    (("--describe", "--entity-type", "groups"), "invalid choice: 'groups'"),
    (("--describe", "--entity-type", "brokers", "--entity-name", "x"), "valid integer"),
    (("--describe", "--entity-type", "topics", "--add-config", "a=b"), "--describe cannot"),
])
def test_configs_bad_flags_exit_2(args: tuple[str, ...], reason: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["configs", "--bootstrap-server", "127.0.0.1:1", *args]) == 2
    err = capsys.readouterr().err
    assert reason in err and err.count("\n") == 1


# ------------------------------------------------------------------- produce / consume
def command(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "trio_broker", *args], capture_output=True,
                          timeout=120, check=False, **kwargs)


def test_produce_consume_pipe_round_trip(broker_process: Any, tmp_path: Any) -> None:
    """10,000 keyed lines with headers: ``produce < file``, then ``consume | file``."""
    process = broker_process()
    server = ("--bootstrap-server", process.bootstrap)
    assert command("topics", *server, "--create", "--topic", "pipe", "--partitions",
                   "3").returncode == 0
    lines = [f"trace:t{i},env:prod\tkey{i % 97}:value {i} \u00e9" for i in range(10_000)]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with source.open("rb") as stdin:
        produced = command("produce", *server, "--topic", "pipe", "--property",
                           "parse.key=true", "--property", "key.separator=:", "--property",
                           "parse.headers=true", stdin=stdin)
    assert (produced.returncode, produced.stdout, produced.stderr) == (0, b"", b"")
    # through a real OS pipe, as `trio_broker consume ... | sort`
    consumer = subprocess.Popen(
        [sys.executable, "-m", "trio_broker", "consume", *server, "--topic", "pipe",
         "--from-beginning", "--max-messages", "10000", "-f", "%h\\t%k:%v\\n"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sort = subprocess.run(["sort"], stdin=consumer.stdout, capture_output=True, timeout=120,
                          check=True)
    assert consumer.stdout is not None
    consumer.stdout.close()
    assert consumer.wait(timeout=120) == 0
    assert consumer.stderr is not None
    assert consumer.stderr.read() == b"Processed a total of 10000 messages\n"
    got = sort.stdout.decode("utf-8").splitlines()
    # kcat's %h writes headers as k=v
    assert sorted(got) == sorted(line.replace(":t", "=t", 1).replace("env:", "env=")
                                 for line in lines)
    # keyed records are spread by Kafka's murmur2 partitioner: one key, one partition
    by_partition = command("consume", *server, "--topic", "pipe", "--from-beginning", "-e",
                           "-f", "%p %k\\n").stdout.decode().split("\n")
    partitions_of_key: dict[str, set[str]] = {}
    for row in filter(None, by_partition):
        partition, key = row.split()
        partitions_of_key.setdefault(key, set()).add(partition)
    assert len(partitions_of_key) == 97 and all(len(p) == 1 for p in partitions_of_key.values())
    assert process.stop() == 0


async def test_produce_consume_formats_and_groups(broker: Any) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "fmt", "--partitions", "1"))[0] == 0
    assert await tool(b, "produce", "--topic", "fmt", "--property", "parse.key=true",
                      stdin="a\tone\nb\ttwo\nc\tthree\n") == (0, "", "")
    code, out, err = await tool(b, "consume", "--topic", "fmt", "--from-beginning",
                                "--max-messages", "2", "--property", "print.key=true",
                                "--property", "print.offset=true")
    assert (code, out, err) == (0, "Offset:0\ta\tone\nOffset:1\tb\ttwo\n",
                                "Processed a total of 2 messages\n")
    # Kafka 4's names for the same properties
    assert await tool(b, "produce", "--topic", "fmt", "--reader-property", "parse.key=true",
                      "--reader-property", "key.separator=:", stdin="") == (0, "", "")
    code, out, _ = await tool(b, "consume", "--topic", "fmt", "--from-beginning", "--max-messages",
                              "1", "--formatter-property", "print.key=true")
    assert (code, out) == (0, "a\tone\n")
    code, out, _ = await tool(b, "consume", "--topic", "fmt", "--partition", "0", "--offset",
                              "1", "-e", "-f", "%t/%p/%o %K %S %k=%v|%h|\\n")
    assert (code, out) == (0, "fmt/0/1 1 3 b=two||\nfmt/0/2 1 5 c=three||\n")
    # kcat's short flags: -b -t -K -o -e -f
    assert (await tool(b, "produce", "-t", "fmt", "-K", ":", stdin="d:four\n"))[0] == 0
    code, out, _ = await tool(b, "consume", "-t", "fmt", "-o", "-1", "-e", "-f", "%k:%v\n")
    assert (code, out) == (0, "d:four\n")
    # --timeout-ms ends a consumer that waits for new records
    code, out, _ = await tool(b, "consume", "--topic", "fmt", "--timeout-ms", "300")
    assert (code, out) == (0, "")
    # --group starts at the committed offsets and commits what it wrote
    code, out, _ = await tool(b, "consume", "--topic", "fmt", "--group", "g1",
                              "--from-beginning", "--max-messages", "1")
    assert (code, out) == (0, "one\n")
    code, out, _ = await tool(b, "consume", "--topic", "fmt", "--group", "g1", "-e")
    assert (code, out) == (0, "two\nthree\nfour\n")
    code, out, _ = await tool(b, "groups", "--describe", "--group", "g1", "--output", "json")
    assert [(r["current_offset"], r["lag"]) for r in
            json.loads(out)["g1"]["partitions"]] == [(4, 0)]


@pytest.mark.interop
async def test_consume_moves_past_transaction_markers(broker: Any) -> None:
    """A transaction's commit marker takes an offset: the console consumer's position (and
    the offset it commits) moves past it, so -e ends and the group has no lag, as Kafka's."""
    from confluent_kafka import Producer

    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "tx"))[0] == 0

    def transaction() -> None:
        producer = Producer({"bootstrap.servers": b, "transactional.id": "cli-tx"})
        producer.init_transactions(30)
        producer.begin_transaction()
        for value in ("one", "two"):
            producer.produce("tx", value=value)
        producer.commit_transaction(30)

    await trio.to_thread.run_sync(transaction)
    code, out, err = await tool(b, "consume", "--topic", "tx", "--from-beginning", "-e",
                                "--group", "g", "--timeout-ms", "10000")
    assert (code, out, err) == (0, "one\ntwo\n", "Processed a total of 2 messages\n")
    code, out, _ = await tool(b, "groups", "--describe", "--group", "g", "--output", "json")
    assert [(r["current_offset"], r["log_end_offset"], r["lag"])
            for r in json.loads(out)["g"]["partitions"]] == [(3, 3, 0)]


@pytest.mark.interop
async def test_records_read_by_confluent_kafka(broker: Any) -> None:
    """What `produce` writes, confluent-kafka reads: keys, values, headers, partitions."""
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "cx", "--partitions", "4"))[0] == 0
    assert (await tool(b, "produce", "--topic", "cx", "--property", "parse.key=true",
                       "--property", "parse.headers=true",
                       stdin="".join(f"h:{i}\tk{i}\tv{i}\n" for i in range(40))))[0] == 0

    def read() -> list[Any]:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": b, "group.id": "cx",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["cx"])
        got: list[Any] = []
        try:
            while len(got) < 40:
                message = consumer.poll(5)
                if message is not None and not message.error():
                    got.append((message.partition(), message.key(), message.value(),
                                message.headers()))
        finally:
            consumer.close()
        return got

    from trio_broker.tools.console import key_partition

    got = await trio.to_thread.run_sync(read)
    assert sorted((k, v, h) for _, k, v, h in got) == sorted(
        (f"k{i}".encode(), f"v{i}".encode(), [("h", str(i).encode())]) for i in range(40))
    assert all(p == key_partition(k, 4) for p, k, _, _ in got)


def test_murmur2_matches_kafka() -> None:
    from trio_broker.tools.console import murmur2

    # values of Kafka's Utils.murmur2 (UtilsTest.testMurmur2 and the Java client)
    assert murmur2(b"21") & 0xFFFFFFFF == -973932308 & 0xFFFFFFFF
    assert murmur2(b"foobar") & 0xFFFFFFFF == -790332482 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-long-string") & 0xFFFFFFFF == -985981536 & 0xFFFFFFFF
    assert murmur2(b"a-little-bit-longer-string") & 0xFFFFFFFF == -1486304829 & 0xFFFFFFFF
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") & 0xFFFFFFFF == \
        -58897971 & 0xFFFFFFFF
    assert murmur2(b"abc") & 0xFFFFFFFF == 479470107


@pytest.mark.parametrize(("args", "reason"), [
    (("produce",), "the following arguments are required: --topic"),
    (("produce", "--topic", "t", "--acks", "0"), "invalid choice"),
    (("consume",), "Exactly one of --include/--topic is required."),
    (("consume", "--topic", "t", "--offset", "5"), "The partition is required"),
    (("consume", "--topic", "t", "--offset", "1", "--from-beginning", "--partition", "0"),
     "not allowed with argument"),
    (("consume", "--topic", "t", "--max-messages", "x"), "invalid int value"),
])
def test_console_bad_flags_exit_2(args: tuple[str, ...], reason: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main([args[0], "--bootstrap-server", "127.0.0.1:1", *args[1:]]) == 2
    err = capsys.readouterr().err
    assert reason in err and err.count("\n") == 1


# ----------------------------------------------------------------------------- cluster
async def test_cluster_describe(broker: Any) -> None:
    b = broker.bootstrap
    code, out, err = await tool(b, "cluster", "describe")
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert lines[0].startswith("ClusterId:") and lines[1] == "ControllerId:    1"
    assert f"  {b} (id: 1 rack: null)" in lines
    assert "  listeners=PLAINTEXT://127.0.0.1:0" in lines  # as configured (port 0)
    # kafka-broker-api-versions.sh's table
    start = lines.index(f"{b} (id: 1 rack: null) -> (")
    assert re.fullmatch(r"\tProduce\(0\): \d+ to \d+ \[usable: \d+\],", lines[start + 1])
    assert any(re.fullmatch(r"\tApiVersions\(18\): 0 to \d+ \[usable: \d+\],?", line)
               for line in lines)
    assert lines[-1] == ")"
    code, out, _ = await tool(b, "cluster", "describe", "--output", "json")
    info = json.loads(out)
    assert info["node"]["id"] == 1 and {a["name"] for a in info["apis"]} >= {
        "Produce", "Fetch", "Metadata", "ApiVersions", "DescribeCluster"}


@pytest.mark.interop
async def test_cluster_as_confluent_admin_reports_it(broker: Any) -> None:
    b = broker.bootstrap
    code, out, _ = await tool(b, "cluster", "describe", "--output", "json")
    info = json.loads(out)

    def confluent_view() -> tuple[Any, list[int]]:
        from confluent_kafka.admin import AdminClient

        cluster = AdminClient({"bootstrap.servers": b}).list_topics(timeout=30)
        return cluster.cluster_id, sorted(cluster.brokers)

    assert await trio.to_thread.run_sync(confluent_view) == (info["cluster_id"], [1])


def test_cluster_bad_action_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["cluster", "explode", "--bootstrap-server", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'explode'" in err and err.count("\n") == 1


# ----------------------------------------------------- parsers of broker bytes (fuzzed)
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_member_assignment_parser_never_raises(data: bytes) -> None:
    """DescribeGroups' member_assignment comes from the broker: any bytes are survivable."""
    from trio_broker.tools.groups import parse_assignment

    assert isinstance(parse_assignment(data), list)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=5), st.lists(st.integers(0, 2**31 - 1),
                                                                 max_size=4), max_size=4))
def test_member_assignment_round_trip(assigned: dict[str, list[int]]) -> None:
    from trio_broker.testing.client import assignment
    from trio_broker.tools.groups import parse_assignment

    assert parse_assignment(assignment(assigned)) == [
        (topic, p) for topic, parts in assigned.items() for p in parts]


@settings(max_examples=200, deadline=None)
@given(key=st.none() | st.binary(max_size=20), value=st.none() | st.binary(max_size=20),
       headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)),
                        max_size=3),
       fmt=st.text(alphabet="%tpokvhTKS\\nx ", max_size=20))
def test_formatter_takes_any_record(key: bytes | None, value: bytes | None,
                                    headers: list[tuple[str, bytes | None]], fmt: str) -> None:
    from trio_broker.protocol.records import Record
    from trio_broker.tools.console import Formatter

    record = Record(offset=7, timestamp=1, key=key, value=value, headers=tuple(headers))
    assert isinstance(Formatter(fmt, {})("t", 0, record), bytes)
    assert Formatter(None, {"print.key": "true"})("t", 0, record).endswith(b"\n")


# ------------------------------------------------------------ --command-config security
@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.security.conftest import make_certs

    return make_certs(tmp_path_factory.mktemp("cli-certs"))


async def test_command_config_sasl_ssl(start_broker: Any, tls_files: Any, tmp_path: Any) -> None:
    """Over SASL_SSL (TLS checked against the CA, then SASL PLAIN), as a Java client's
    properties file says; a wrong password is one line and status 1."""
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="admin" password="admin-secret" user_admin="admin-secret";')
    running = await start_broker({
        "listeners": "SASL_SSL://127.0.0.1:0", "ssl.keystore.location": str(tls_files.keystore),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas})
    bootstrap = f"127.0.0.1:{running.port_of('SASL_SSL')}"
    good = tmp_path / "client.properties"
    good.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                    f"ssl.truststore.type=PEM\nssl.truststore.location={tls_files.ca_pem}\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                    'required username="admin" password="admin-secret";\n')
    assert await tool(bootstrap, "topics", "--command-config", str(good), "--create",
                      "--topic", "secure") == (0, "Created topic secure.\n", "")
    assert await tool(bootstrap, "topics", "--command-config", str(good), "--list") == (
        0, "secure\n", "")
    bad = tmp_path / "bad.properties"
    bad.write_text(good.read_text().replace("admin-secret", "wrong"))
    code, out, err = await tool(bootstrap, "topics", "--command-config", str(bad), "--list")
    assert (code, out, err.count("\n")) == (1, "", 1) and "SASL_AUTHENTICATION_FAILED" in err
    untrusted = tmp_path / "untrusted.properties"
    untrusted.write_text(good.read_text().replace(str(tls_files.ca_pem),
                                                  str(tls_files.other_ca_pem)))
    code, out, err = await tool(bootstrap, "topics", "--command-config", str(untrusted),
                                "--list")
    assert (code, out, err.count("\n")) == (1, "", 1) and "SSL handshake" in err


@pytest.mark.interop
async def test_users_scram_then_login_with_them(start_broker: Any, tmp_path: Any) -> None:
    """`users` creates SCRAM credentials over the wire (salted here); the tools and
    confluent-kafka then log in with them."""
    running = await start_broker({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512"})
    plain = f"127.0.0.1:{running.port_of('PLAINTEXT')}"
    sasl = f"127.0.0.1:{running.port_of('SASL_PLAINTEXT')}"
    assert await tool(plain, "users", "--alter", "--entity-name", "alice", "--add-config",
                      "SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
                      "SCRAM-SHA-512=[password=alice-512]") == (
        0, "Completed updating config for user alice.\n", "")
    assert await tool(plain, "users", "--describe", "--entity-name", "alice") == (0, (
        "SCRAM credential configs for user-principal 'alice' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n"), "")
    code, _, err = await tool(plain, "users", "--alter", "--entity-name", "alice",
                              "--add-config", "SCRAM-SHA-256=[iterations=8192]")
    assert code == 1 and "You must supply 'password=...'" in err

    config = tmp_path / "alice.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                      "sasl.username=alice\nsasl.password=alice-512\n")
    assert await tool(sasl, "topics", "--command-config", str(config), "--create", "--topic",
                      "a") == (0, "Created topic a.\n", "")

    def confluent_login() -> list[str]:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": sasl, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
                             "sasl.password": "alice-secret"})
        return sorted(admin.list_topics(timeout=30).topics)

    assert await trio.to_thread.run_sync(confluent_login) == ["a"]
    assert await tool(plain, "users", "--alter", "--entity-name", "alice", "--delete-config",
                      "SCRAM-SHA-512") == (0, "Completed updating config for user alice.\n", "")
    code, _, err = await tool(sasl, "topics", "--command-config", str(config), "--list")
    assert code == 1 and "SASL_AUTHENTICATION_FAILED" in err and err.count("\n") == 1


async def test_groups_unknown_group(broker: Any) -> None:
    """As kafka-consumer-groups.sh: its error line on stderr, nothing on stdout, status 1
    (issue 32; tests/test_tools_kafka_habits.py has the other views)."""
    for view in ((), ("--members",), ("--state",)):
        assert await tool(broker.bootstrap, "groups", "--describe", "--group", "nope",
                          *view) == (1, "", "Error: Consumer group 'nope' does not exist.\n")
    assert await tool(broker.bootstrap, "groups", "--list", "--output", "json") == (
        0, "[]\n", "")



async def test_groups_describe_empty_and_rebalancing_groups(broker: Any) -> None:
    """ConsumerGroupCommand.shouldPrintMemberState: "has no active members" for every view of
    an empty group (no table without rows), "Warning: ... is rebalancing." while a member's
    JoinGroup waits for the others."""
    from trio_broker.testing.client import TrioKafkaClient, assignment

    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "t"))[0] == 0
    empty = "\nConsumer group 'g' has no active members.\n"
    assert (await tool(b, "groups", "--reset-offsets", "--group", "g", "--topic", "t",
                       "--to-earliest", "--execute"))[0] == 0
    code, out, err = await tool(b, "groups", "--describe", "--group", "g", "--state")
    assert (code, err, out.splitlines()[2].split()[-2:]) == (0, empty, ["Empty", "0"])
    assert await tool(b, "groups", "--describe", "--group", "g", "--members") == (0, "", empty)

    async with await TrioKafkaClient.connect(broker.port) as first, \
            await TrioKafkaClient.connect(broker.port) as second:
        joined = await first.join_group("g", ["t"], rebalance_timeout_ms=60000)
        await first.sync_group(joined, {joined.member_id: assignment({"t": [0]})})
        async with trio.open_nursery() as nursery:
            # the second member's JoinGroup waits for the first to rejoin: PreparingRebalance
            nursery.start_soon(functools.partial(second.join_group, "g", ["t"]))
            rebalancing = "\nWarning: Consumer group 'g' is rebalancing.\n"
            for _ in range(100):
                code, out, err = await tool(b, "groups", "--describe", "--group", "g")
                if err == rebalancing:
                    break
                await trio.sleep(0.05)
            assert (code, err, out.splitlines()[2].split()[:6]) == (
                0, rebalancing, ["g", "t", "0", "0", "0", "0"])
            code, out, err = await tool(b, "groups", "--describe", "--group", "g", "--state")
            assert (code, err, out.splitlines()[2].split()[-2:]) == (
                0, rebalancing, ["PreparingRebalance", "2"])
            assert await tool(b, "groups", "--delete", "--group", "g") == (
                1, "", "trio_broker groups: Deletion of consumer group 'g' failed: the group is "
                       "not empty (NON_EMPTY_GROUP)\n")
            nursery.cancel_scope.cancel()


async def test_groups_delete_tries_every_group(broker: Any) -> None:
    """ConsumerGroupService.deleteGroups: a group that cannot be deleted does not keep the
    others; the deleted ones are named on stdout, the failures on stderr, status 1."""
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "t"))[0] == 0
    for group in ("a", "c"):
        assert (await tool(b, "groups", "--reset-offsets", "--group", group, "--topic", "t",
                           "--to-earliest", "--execute"))[0] == 0
    # --list --state [STATES] (ConsumerGroupService.printGroupInfo), states in any case
    row = "{:<25} {:<20}".format
    assert await tool(b, "groups", "--list", "--state") == (
        0, f"{row('GROUP', 'STATE')}\n{row('a', 'Empty')}\n{row('c', 'Empty')}\n", "")
    assert await tool(b, "groups", "--list", "--state", "stable,preparingrebalance") == (
        0, f"{row('GROUP', 'STATE')}\n", "")
    code, _, err = await tool(b, "groups", "--list", "--state", "Bogus")
    assert code == 2 and "Invalid state list 'Bogus'. Valid states are: " in err
    assert await tool(b, "groups", "--delete", "--group", "a", "--group", "nope", "--group",
                      "c") == (
        1, "These consumer groups were deleted successfully: 'a', 'c'\n",
        "trio_broker groups: Deletion of consumer group 'nope' failed: the group does not "
        "exist (GROUP_ID_NOT_FOUND)\n")
    assert await tool(b, "groups", "--list") == (0, "", "")


# ------------------------------------------------------------------- untrusted responses
def answer_once(listener: socket.socket, response: bytes) -> None:
    """A 'broker' on a real socket: reads one request frame, writes ``response``, closes."""
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(10)
        request = b""
        while len(request) < 4 or len(request) < 4 + int.from_bytes(request[:4], "big"):
            data = conn.recv(65536)
            if not data:
                return
            request += data
        conn.sendall(response)


@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=120), framed=st.booleans())
def test_garbage_responses_are_one_line_not_a_traceback(body: bytes, framed: bool) -> None:
    """Whatever a 'broker' answers (random bytes after the right size and correlation id, or
    random bytes with no framing at all), the blocking client refuses it through the pre-scan
    and the tool prints one line and exits 1."""
    response = struct.pack(">ii", len(body) + 4, 1) + body if framed else body
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)
        server = threading.Thread(target=answer_once, args=(listener, response))
        server.start()
        out, err = io.StringIO(), io.StringIO()
        port = listener.getsockname()[1]
        code = topics_main(["--bootstrap-server", f"127.0.0.1:{port}", "--list"],
                           out=out, err=err)
        server.join(10)
    assert code == 1, (code, err.getvalue())
    assert err.getvalue().count("\n") == 1 and "Traceback" not in err.getvalue(), err.getvalue()
