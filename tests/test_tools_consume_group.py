"""``trio_broker consume --group`` is a real group member (issue 32, item 4): it joins with
the consumer protocol (KIP-848), two of them share the partitions, each commits what it
printed and leaves on exit. The consumers are the real command in subprocesses; the broker is
real, on a real socket."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import trio

from tests.test_tools_cli import tool


def consumer(b: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "trio_broker", "consume", "-b", b, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def members(b: str, group: str) -> list[dict[str, Any]]:
    code, out, _ = await tool(b, "groups", "--describe", "--group", group, "--members",
                              "--verbose", "--output", "json")
    return list(json.loads(out)[group]) if code == 0 else []


async def wait_for_members(b: str, group: str, count: int, owned_each: int | None = None,
                           timeout: float = 30) -> list[dict[str, Any]]:
    """The group's members once there are ``count`` of them, each owning ``owned_each``
    partitions (the assignment reconciled)."""
    deadline = time.monotonic() + timeout
    while True:
        found = await members(b, group)
        if len(found) == count and (owned_each is None or all(
                m["partitions"] == owned_each and m["assignment"] == m["target_assignment"]
                for m in found)):
            return found
        assert time.monotonic() < deadline, found
        await trio.sleep(0.2)


async def finish(process: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str, str]:
    out, err = await trio.to_thread.run_sync(process.communicate, None, timeout)
    return process.returncode, out, err


async def test_two_consumers_of_one_group_share_the_partitions(broker: Any) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "shared", "--partitions", "4"))[0] \
        == 0
    args = ("--topic", "shared", "--group", "g", "--max-messages", "20", "--timeout-ms",
            "30000", "-f", "%p:%v\\n")
    first = consumer(b, *args)
    try:
        (alone,) = await wait_for_members(b, "g", 1, owned_each=4)
        assert alone["assignment"] == "shared:0,1,2,3" and alone["client_id"] == \
            "trio-broker-consume"
        second = consumer(b, *args)
        try:
            both = await wait_for_members(b, "g", 2, owned_each=2)
            assert sorted(m["assignment"] for m in both) in (
                ["shared:0,1", "shared:2,3"], ["shared:0,2", "shared:1,3"],
                ["shared:0,3", "shared:1,2"])
            code, out, _ = await tool(b, "groups", "--describe", "--group", "g", "--state")
            assert code == 0 and out.splitlines()[2].split()[3:] == ["uniform", "Stable", "2"]
            for partition in range(4):
                lines = "".join(f"v{partition}-{i}\n" for i in range(10))
                assert await tool(b, "produce", "--topic", "shared", "--partition",
                                  str(partition), stdin=lines) == (0, "", "")
            results = [await finish(first), await finish(second)]
        finally:
            second.kill()
    finally:
        first.kill()
    seen: list[str] = []
    for code, out, err in results:
        assert (code, err) == (0, "Processed a total of 20 messages\n")
        partitions = {line.split(":")[0] for line in out.split()}
        assert len(partitions) == 2  # each read only its own two partitions, all of them
        seen += out.split()
    assert sorted(seen) == sorted(f"{p}:v{p}-{i}" for p in range(4) for i in range(10))
    # Both left on exit: the group is empty at once (not after the session timeout), and
    # what they printed is committed.
    code, out, err = await tool(b, "groups", "--describe", "--group", "g", "--output", "json")
    described = json.loads(out)["g"]
    assert described["state"] == "Empty"
    assert [(r["partition"], r["current_offset"]) for r in described["partitions"]] == [
        (p, 10) for p in range(4)]


async def test_a_member_rejoins_where_the_group_left_off_and_leaves_on_ctrl_c(
        broker: Any) -> None:
    b = broker.bootstrap
    lines = "".join(f"r{i}\n" for i in range(6))
    assert await tool(b, "produce", "--topic", "resume", stdin=lines) == (0, "", "")
    # One member reads to the end (-e), commits, leaves.
    code, out, err = await finish(consumer(b, "--topic", "resume", "--group", "rg",
                                           "--from-beginning", "-e"))
    assert (code, out, err) == (0, lines, "Processed a total of 6 messages\n")
    assert await tool(b, "produce", "--topic", "resume", stdin="r6\nr7\n") == (0, "", "")
    # The next member starts at the committed offsets, not at the beginning.
    running = consumer(b, "--topic", "resume", "--group", "rg", "--from-beginning")
    try:
        (member,) = await wait_for_members(b, "rg", 1, owned_each=1)
        await trio.sleep(1.0)  # it reads the two new records meanwhile
        running.send_signal(signal.SIGINT)  # Ctrl-C: a normal end, as Kafka's consumer
        code, out, err = await finish(running)
    finally:
        running.kill()
    assert (code, out, err) == (0, "r6\nr7\n", "Processed a total of 2 messages\n")
    code, out, _ = await tool(b, "groups", "--describe", "--group", "rg", "--output", "json")
    described = json.loads(out)["rg"]
    assert described["state"] == "Empty" and described["partitions"][0]["current_offset"] == 8


async def test_partition_or_offset_reads_without_joining(broker: Any) -> None:
    """Kafka's console consumer assign()s with --partition: no membership, a simple commit."""
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "assigned", "--partitions", "2")
            )[0] == 0
    assert await tool(b, "produce", "--topic", "assigned", "--partition", "1",
                      stdin="a\nb\n") == (0, "", "")
    running = consumer(b, "--topic", "assigned", "--group", "ag", "--partition", "1",
                       "--offset", "earliest", "--timeout-ms", "3000")
    try:
        await trio.sleep(1.5)
        assert await members(b, "ag") == []
        code, out, _ = await finish(running)
    finally:
        running.kill()
    assert (code, out) == (0, "a\nb\n")
    code, out, _ = await tool(b, "groups", "--list", "--type")
    assert out.splitlines()[1].split() == ["ag", "Classic"]


async def test_without_kip_848_the_consumer_reads_without_joining(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a broker without ConsumerGroupHeartbeat (Kafka before 4) ``--group`` falls back
    to reading every partition and committing without joining, and says so."""
    from trio_broker.tools import console

    monkeypatch.setattr(console, "CONSUMER_GROUP_HEARTBEAT", 10_000)  # an API nobody has
    b = broker.bootstrap
    assert await tool(b, "produce", "--topic", "old", stdin="x\ny\n") == (0, "", "")
    code, out, err = await tool(b, "consume", "--topic", "old", "--group", "og",
                                "--from-beginning", "-e")
    assert (code, out) == (0, "x\ny\n")
    assert err == ("WARN: the broker does not support ConsumerGroupHeartbeat (KIP-848): reading "
                   "every partition without joining group og\nProcessed a total of 2 messages\n")
    code, out, _ = await tool(b, "groups", "--list", "--type")
    assert out.splitlines()[1].split() == ["og", "Classic"]
