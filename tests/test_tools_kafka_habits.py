"""What a Kafka user types from memory (issue 32, items 1, 7, 9), against a real broker:
``produce`` to a missing topic auto-creates it as kafka-console-producer.sh / kcat do,
``groups --describe`` of a missing group is Kafka's error and status 1, and absent values
print as Kafka prints them (``null``, never Python's ``None``)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.test_tools_cli import tool
from trio_broker.tools import console


# ------------------------------------------------------------ produce auto-creates a topic
def test_produce_creates_a_missing_topic_as_the_console_producer(broker_process: Any) -> None:
    """The issue's command line, as typed: ``printf 'a\\n' | trio_broker produce -b ...``."""
    process = broker_process({"num.partitions": "2"})

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "trio_broker", *args], input=stdin,
                              capture_output=True, text=True, timeout=60, check=False)

    done = cli("produce", "-b", process.bootstrap, "--topic", "newtopic", stdin="a\n")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    done = cli("topics", "--bootstrap-server", process.bootstrap, "--describe", "--topic",
               "newtopic")
    assert done.returncode == 0 and "\tPartitionCount: 2\t" in done.stdout.splitlines()[0]
    done = cli("consume", "-b", process.bootstrap, "--topic", "newtopic", "--from-beginning",
               "-e")
    assert (done.returncode, done.stdout) == (0, "a\n")
    assert process.stop() == 0


async def test_produce_without_auto_create_is_unknown_topic(start_broker: Any) -> None:
    broker = await start_broker({"auto.create.topics.enable": "false"})
    b = broker.bootstrap
    assert await tool(b, "produce", "--topic", "newtopic", stdin="a\n") == (
        1, "", "trio_broker produce: newtopic: UNKNOWN_TOPIC_OR_PARTITION\n")
    assert await tool(b, "topics", "--list") == (0, "", "")


async def test_produce_waits_while_the_new_topic_has_no_leader(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka answers LEADER_NOT_AVAILABLE while it creates the topic; the producer asks again.
    The first two answers of the real broker are turned into that one."""
    real = console.metadata
    calls: list[bool] = []
    not_ready = [2]  # how many answers are LEADER_NOT_AVAILABLE

    def first_answers_not_ready(conn: Any, topics: Any = None, *, auto_create: bool = False
                                ) -> Any:
        response = real(conn, topics, auto_create=auto_create)
        calls.append(auto_create)
        if len(calls) > not_ready[0]:
            return response
        (topic,) = response.topics
        return dataclasses.replace(response, topics=(dataclasses.replace(
            topic, error_code=ErrorCode.leader_not_available, partitions=()),))

    monkeypatch.setattr(console, "metadata", first_answers_not_ready)
    b = broker.bootstrap
    assert await tool(b, "produce", "--topic", "fresh", stdin="x\ny\n") == (0, "", "")
    assert calls == [True, True, True]
    assert await tool(b, "consume", "--topic", "fresh", "--from-beginning", "-e") == (
        0, "x\ny\n", "Processed a total of 2 messages\n")

    # Never ready: given up after the wait, with Kafka's error name.
    calls.clear()
    not_ready[0] = 1_000_000
    monkeypatch.setattr(console, "_LEADER_WAIT_S", 0.2)
    assert await tool(b, "produce", "--topic", "fresh", stdin="z\n") == (
        1, "", "trio_broker produce: fresh: LEADER_NOT_AVAILABLE\n")
    assert len(calls) > 1


# ----------------------------------------------------- groups --describe of a missing group
MISSING = "Error: Consumer group 'nosuch' does not exist.\n"


@pytest.mark.parametrize("view", [(), ("--offsets",), ("--members",), ("--state",)])
async def test_groups_describe_missing_group_exit_1(broker: Any, view: tuple[str, ...]) -> None:
    assert await tool(broker.bootstrap, "groups", "--describe", "--group", "nosuch", *view) \
        == (1, "", MISSING)


async def test_groups_describe_missing_group_json_and_with_others(broker: Any) -> None:
    b = broker.bootstrap
    code, out, err = await tool(b, "groups", "--describe", "--group", "nosuch", "--output",
                                "json")
    assert (code, json.loads(out), err) == (
        1, {"nosuch": {"state": "Dead", "partitions": []}}, MISSING)
    code, out, err = await tool(b, "groups", "--describe", "--group", "nosuch", "--state",
                                "--output", "json")
    assert (code, json.loads(out)["nosuch"]["state"], err) == (1, "Dead", MISSING)

    # A group that exists is still described; the missing one makes the status 1.
    assert (await tool(b, "produce", "--topic", "t", stdin="a\nb\n"))[0] == 0
    assert (await tool(b, "consume", "--topic", "t", "--group", "app", "--from-beginning",
                       "-e"))[0] == 0
    code, out, err = await tool(b, "groups", "--describe", "--group", "app", "--group",
                                "nosuch")
    assert code == 1 and out.splitlines()[2].split()[:6] == ["app", "t", "0", "2", "2", "0"]
    assert err == "\nConsumer group 'app' has no active members.\n" + MISSING
    assert (await tool(b, "groups", "--describe", "--group", "app"))[0] == 0


# --------------------------------------------------------------- null, as Kafka prints it
async def test_cluster_describe_prints_null_not_none(broker: Any) -> None:
    b = broker.bootstrap
    code, out, err = await tool(b, "cluster", "describe")
    assert (code, err) == (0, "")
    assert "  advertised.listeners=null" in out.splitlines()
    assert "None" not in out
    code, out, _ = await tool(b, "cluster", "describe", "--output", "json")
    assert code == 0 and json.loads(out)["listeners"]["advertised.listeners"] is None


@pytest.mark.parametrize("entity", [("--entity-name", "1"), ()])
async def test_configs_brokers_all_prints_null_not_none(broker: Any,
                                                        entity: tuple[str, ...]) -> None:
    b = broker.bootstrap
    code, out, err = await tool(b, "configs", "--describe", "--entity-type", "brokers",
                                *entity, "--all")
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert ("  advertised.listeners=null sensitive=false "
            "synonyms={DEFAULT_CONFIG:advertised.listeners=null}") in lines
    assert any(line.startswith("  cluster.id=null ") for line in lines)
    assert "None" not in out
    code, out, _ = await tool(b, "configs", "--describe", "--broker", "1", "--all",
                              "--output", "json")
    (described,) = json.loads(out)
    (entry,) = [c for c in described["configs"] if c["name"] == "advertised.listeners"]
    assert code == 0 and entry["value"] is None and entry["synonyms"][0]["value"] is None
