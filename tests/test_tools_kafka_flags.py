"""Flags a Kafka user types from memory (issue 32, item 5), with the Kafka tools' meaning,
against a real broker on real sockets: kafka-console-consumer.sh's ``--formatter``,
``--include``, ``--isolation-level`` and ``--consumer-property``; kafka-console-producer.sh's
``--producer-property``, ``--compression-codec`` and ``--sync``; kafka-consumer-groups.sh's
``--verbose``, ``--delete-offsets``, ``--reset-offsets --by-duration``, ``--export``,
``--from-file`` and ``--list --type``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.test_tools_cli import tool
from trio_broker.cli import main as cli_main
from trio_broker.protocol import records as rb
from trio_broker.tools.groups import parse_duration


def batches(broker: Any, topic: str, partition: int = 0) -> list[rb.BatchHeader]:
    """The headers of the batches on disk of one partition (every segment)."""
    found = []
    for path in sorted((Path(broker.data_dir) / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        found += [rb.decode_header(data, position) for position, _ in rb.iter_batches(data)]
    return found


async def produce(b: str, topic: str, lines: str, *args: str) -> None:
    assert await tool(b, "produce", "--topic", topic, *args, stdin=lines) == (0, "", "")


# ------------------------------------------------------------------- console consumer
async def test_formatter_is_not_taken_for_formatter_property(broker: Any) -> None:
    b = broker.bootstrap
    await produce(b, "f", "k1:v1\nk2:v2\n", "--property", "parse.key=true", "--property",
                  "key.separator=:")
    # The command line: --formatter with a class name, as Kafka 3 documents it.
    assert await tool(b, "consume", "--topic", "f", "--from-beginning", "-e", "--formatter",
                      "kafka.tools.DefaultMessageFormatter", "--formatter-property",
                      "print.key=true", "--formatter-property", "key.separator=|") == (
        0, "k1|v1\nk2|v2\n", "Processed a total of 2 messages\n")
    assert await tool(b, "consume", "--topic", "f", "--from-beginning", "-e", "--formatter",
                      "org.apache.kafka.tools.consumer.NoOpMessageFormatter") == (
        0, "", "Processed a total of 2 messages\n")
    code, out, err = await tool(b, "consume", "--topic", "f", "-e", "--formatter",
                                "com.example.MyFormatter")
    assert (code, out) == (2, "") and "Unknown --formatter com.example.MyFormatter" in err


async def test_include_reads_every_matching_topic(broker: Any) -> None:
    b = broker.bootstrap
    await produce(b, "orders.eu", "e1\ne2\n")
    await produce(b, "orders.us", "u1\n")
    await produce(b, "payments", "p1\n")
    await produce(b, "xorders.eu", "x1\n")  # the whole name must match, as Java's matches()
    code, out, err = await tool(b, "consume", "--include", r"orders\..*", "--from-beginning",
                                "-e", "-f", "%t:%v\\n")
    assert (code, sorted(out.splitlines()), err) == (
        0, ["orders.eu:e1", "orders.eu:e2", "orders.us:u1"],
        "Processed a total of 3 messages\n")
    # Kafka's ConsoleConsumerOptions: exactly one of the two.
    code, _, err = await tool(b, "consume", "--include", "orders.*", "--topic", "payments")
    assert code == 2 and "Exactly one of --include/--topic is required." in err


async def test_include_picks_up_a_topic_created_later(broker: Any) -> None:
    """A consumer subscribed to a pattern finds new matching topics (at its next metadata
    refresh); the console consumer with ``--include`` does too."""
    b = broker.bootstrap
    await produce(b, "logs.a", "a1\n")

    async def create_later() -> None:
        await trio.sleep(0.5)
        await produce(b, "logs.b", "b1\n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(create_later)
        code, out, _ = await tool(b, "consume", "--include", "logs.*", "--from-beginning",
                                  "--max-messages", "2", "--timeout-ms", "15000")
    assert (code, sorted(out.splitlines())) == (0, ["a1", "b1"])


async def test_consumer_property_group_and_offset_reset(broker: Any) -> None:
    b = broker.bootstrap
    await produce(b, "cp", "1\n2\n3\n")
    # auto.offset.reset=earliest is --from-beginning; group.id is --group (commits).
    assert await tool(b, "consume", "--topic", "cp", "-e", "--consumer-property",
                      "group.id=cpg", "--consumer-property", "auto.offset.reset=earliest") == (
        0, "1\n2\n3\n", "Processed a total of 3 messages\n")
    code, out, _ = await tool(b, "groups", "--describe", "--group", "cpg", "--output", "json")
    assert code == 0 and [r["current_offset"] for r in json.loads(out)["cpg"]["partitions"]] \
        == [3]
    # --group and group.id must agree, as Kafka checks.
    code, _, err = await tool(b, "consume", "--topic", "cp", "--group", "a",
                              "--consumer-property", "group.id=b")
    assert code == 2 and "The group ids provided in different places" in err
    code, _, err = await tool(b, "consume", "--topic", "cp", "--from-beginning",
                              "--consumer-property", "auto.offset.reset=latest")
    assert code == 2 and "Can't simultaneously specify --from-beginning" in err
    code, _, err = await tool(b, "consume", "--topic", "cp", "--consumer-property", "oops")
    assert code == 2 and "Invalid command line properties: oops" in err


def transactional_session(bootstrap: str) -> None:
    """One committed and one aborted transaction of 2 records each, then a plain record."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-flags"})
    producer.init_transactions(30)
    for word, commit in (("committed", True), ("aborted", False)):
        producer.begin_transaction()
        for i in range(2):
            producer.produce("tx", value=f"{word}-{i}", partition=0)
        assert producer.flush(30) == 0  # written before the abort (else librdkafka drops them)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce("tx", value="plain", partition=0)
    assert plain.flush(30) == 0


@pytest.mark.interop
async def test_isolation_level_read_committed_skips_aborted_records(broker: Any) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "tx"))[0] == 0
    await trio.to_thread.run_sync(transactional_session, b)
    code, out, _ = await tool(b, "consume", "--topic", "tx", "--from-beginning", "-e",
                              "--isolation-level", "read_committed")
    assert (code, out) == (0, "committed-0\ncommitted-1\nplain\n")
    # The default (and the property's read_uncommitted) reads the aborted records too.
    code, out, _ = await tool(b, "consume", "--topic", "tx", "--from-beginning", "-e")
    assert (code, out) == (0, "committed-0\ncommitted-1\naborted-0\naborted-1\nplain\n")
    # isolation.level as a consumer property; the flag wins over it.
    code, out, _ = await tool(b, "consume", "--topic", "tx", "--from-beginning", "-e",
                              "--consumer-property", "isolation.level=read_committed")
    assert (code, out) == (0, "committed-0\ncommitted-1\nplain\n")
    code, out, _ = await tool(b, "consume", "--topic", "tx", "--from-beginning", "-e",
                              "--consumer-property", "isolation.level=read_committed",
                              "--isolation-level", "read_uncommitted")
    assert out.count("aborted-") == 2


def test_isolation_level_is_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["consume", "--bootstrap-server", "127.0.0.1:1", "--topic", "t",
                     "--isolation-level", "serializable"]) == 2
    assert "invalid choice: 'serializable'" in capsys.readouterr().err


# ------------------------------------------------------------------- console producer
async def test_compression_codec_and_producer_properties(broker: Any) -> None:
    b = broker.bootstrap
    for topic in ("c-gzip", "c-zstd", "c-lz4", "c-none"):
        assert (await tool(b, "topics", "--create", "--topic", topic))[0] == 0
    # Given without a value, --compression-codec is gzip (Kafka's option default).
    await produce(b, "c-gzip", "a\nb\n", "--compression-codec")
    await produce(b, "c-zstd", "a\nb\n", "--producer-property", "compression.type=zstd",
                  "--producer-property", "acks=1")
    # The flag wins over the property.
    await produce(b, "c-lz4", "a\nb\n", "--compression-codec", "lz4", "--producer-property",
                  "compression.type=zstd")
    await produce(b, "c-none", "a\nb\n")
    assert [[h.compression for h in batches(broker, t)] for t in
            ("c-gzip", "c-zstd", "c-lz4", "c-none")] == [
        [rb.COMPRESSION_GZIP], [rb.COMPRESSION_ZSTD], [rb.COMPRESSION_LZ4],
        [rb.COMPRESSION_NONE]]
    for topic in ("c-gzip", "c-zstd", "c-lz4"):
        assert await tool(b, "consume", "--topic", topic, "--from-beginning", "-e") == (
            0, "a\nb\n", "Processed a total of 2 messages\n")
    code, _, err = await tool(b, "produce", "--topic", "c-none", "--producer-property",
                              "compression.type=brotli", stdin="x\n")
    assert code == 2 and "Invalid value brotli for configuration compression.type" in err


async def test_sync_sends_each_record_on_its_own(broker: Any) -> None:
    b = broker.bootstrap
    for topic in ("batched", "synced"):
        assert (await tool(b, "topics", "--create", "--topic", topic))[0] == 0
    await produce(b, "batched", "1\n2\n3\n")
    await produce(b, "synced", "1\n2\n3\n", "--sync")
    assert [h.record_count for h in batches(broker, "batched")] == [3]
    assert [h.record_count for h in batches(broker, "synced")] == [1, 1, 1]


# --------------------------------------------------------------------- consumer groups
async def committed_group(b: str, group: str, topic: str, lines: str, *args: str,
                          classic: bool = False) -> None:
    """Offsets committed for ``group``: by a member of a consumer-protocol group (``consume
    --group``), or with ``classic`` by a consumer reading partition 0 without joining (Kafka's
    assign(): a simple commit, which makes a classic group with offsets only)."""
    await produce(b, topic, lines, *args)
    where = ("--partition", "0", "--offset", "earliest") if classic else ("--from-beginning",)
    code, _, _ = await tool(b, "consume", "--topic", topic, "--group", group, *where, "-e")
    assert code == 0


async def test_groups_list_type(broker: Any) -> None:
    b = broker.bootstrap
    await committed_group(b, "typed", "tt", "1\n", classic=True)
    await committed_group(b, "member", "tt", "2\n")
    code, out, err = await tool(b, "groups", "--list", "--type")
    # ConsumerGroupService.printGroupInfo: GROUP (max(15, longest) + 10), then TYPE (20).
    assert (code, err, out) == (0, "", f"{'GROUP':<25} {'TYPE':<20}\n"
                                       f"{'member':<25} {'Consumer':<20}\n"
                                       f"{'typed':<25} {'Classic':<20}\n")
    code, out, _ = await tool(b, "groups", "--list", "--type", "classic", "--state")
    assert out.splitlines() == [f"{'GROUP':<25} {'TYPE':<20} {'STATE':<20}",
                                f"{'typed':<25} {'Classic':<20} {'Empty':<20}"]
    assert await tool(b, "groups", "--list", "--type", "CONSUMER") == (
        0, f"{'GROUP':<25} {'TYPE':<20}\n{'member':<25} {'Consumer':<20}\n", "")
    code, _, err = await tool(b, "groups", "--list", "--type", "share")
    assert code == 2 and "Invalid types list 'share'. Valid types are: Classic, Consumer" in err


async def test_groups_delete_offsets(broker: Any) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "d", "--partitions", "2"))[0] == 0
    await committed_group(b, "dg", "d", "a\nb\nc\nd\n")
    code, out, _ = await tool(b, "groups", "--describe", "--group", "dg", "--output", "json")
    assert sorted(r["partition"] for r in json.loads(out)["dg"]["partitions"]) == [0, 1]

    assert await tool(b, "groups", "--delete-offsets", "--group", "dg", "--topic", "d:1") == (
        0, "Request succeeded for deleting offsets from group dg.\n"
           f"\n{'TOPIC':<15} {'PARTITION':<10} {'STATUS':<15}"
           f"\n{'d':<15} {'1':<10} {'Successful':<15}\n", "")
    code, out, _ = await tool(b, "groups", "--describe", "--group", "dg", "--output", "json")
    assert [r["partition"] for r in json.loads(out)["dg"]["partitions"]] == [0]
    # A topic without partitions given: all of them.
    code, out, _ = await tool(b, "groups", "--delete-offsets", "--group", "dg", "--topic", "d")
    assert code == 0 and out.splitlines()[-2:] == [f"{'d':<15} {'0':<10} {'Successful':<15}",
                                                   f"{'d':<15} {'1':<10} {'Successful':<15}"]
    # A group that does not exist: Kafka's message for GROUP_ID_NOT_FOUND, and status 1.
    code, out, _ = await tool(b, "groups", "--delete-offsets", "--group", "nosuch", "--topic",
                              "d:0")
    assert code == 1 and out.startswith("\nError: The group id does not exist.\n")


async def test_groups_reset_by_duration_export_and_from_file(broker: Any,
                                                             tmp_path: Path) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "r", "--partitions", "2"))[0] == 0
    await produce(b, "r", "0\n1\n2\n", "--partition", "0")
    await committed_group(b, "rg", "r", "3\n4\n5\n", "--partition", "1")  # 3 records each
    # Everything was written in the last hour: an hour back is the start of the log.
    code, out, err = await tool(b, "groups", "--reset-offsets", "--group", "rg", "--topic", "r",
                                "--by-duration", "PT1H", "--export")
    # ConsumerGroupCommand: the CSV (topic,partition,offset lines) then println's newline.
    assert (code, out, err) == (0, "r,0,0\nr,1,0\n\n", "")
    # A moment ago (a millisecond): no record is that recent, so the log end.
    code, out, _ = await tool(b, "groups", "--reset-offsets", "--group", "rg", "--all-topics",
                              "--by-duration", "PT0.001S", "--export")
    assert (code, out) == (0, "r,0,3\nr,1,3\n\n")

    plan = tmp_path / "plan.csv"
    plan.write_text("r,0,1\nr,1,2\n")
    code, out, _ = await tool(b, "groups", "--reset-offsets", "--group", "rg", "--from-file",
                              str(plan), "--execute")
    assert code == 0 and [line.split() for line in out.splitlines()[2:]] == [
        ["rg", "r", "0", "1"], ["rg", "r", "1", "2"]]
    code, out, _ = await tool(b, "groups", "--describe", "--group", "rg", "--output", "json")
    assert [(r["partition"], r["current_offset"]) for r in json.loads(out)["rg"]["partitions"]] \
        == [(0, 1), (1, 2)]
    code, _, err = await tool(b, "groups", "--reset-offsets", "--group", "rg", "--all-topics",
                              "--by-duration", "1 hour")
    assert code == 2 and "Text cannot be parsed to a Duration" in err


def test_durations_as_java_parses_them() -> None:
    assert parse_duration("PT1H") == 3_600_000
    assert parse_duration("P1DT2H3M4.5S") == 93_784_500
    assert parse_duration("pt15m") == 900_000
    assert parse_duration("PT-0.5S") == -500
    assert parse_duration("-PT1M") == -60_000
    for bad in ("PT", "P", "1H", "PT1.5H", "P1W"):
        with pytest.raises(Exception, match="Text cannot be parsed to a Duration"):
            parse_duration(bad)


async def test_groups_describe_verbose(broker: Any) -> None:
    b = broker.bootstrap
    await committed_group(b, "vg", "v", "a\nb\n")
    code, out, err = await tool(b, "groups", "--describe", "--group", "vg", "--verbose")
    lines = out.splitlines()
    assert code == 0 and "has no active members" in err
    # printOffsets with verbose: LEADER-EPOCH after PARTITION, 15 wide.
    assert lines[1] == (f"{'GROUP':<15} {'TOPIC':<15} {'PARTITION':<10} {'LEADER-EPOCH':<15} "
                        f"{'CURRENT-OFFSET':<15} {'LOG-END-OFFSET':<15} {'LAG':<15} "
                        f"{'CONSUMER-ID':<15} {'HOST':<15} CLIENT-ID")
    assert lines[2].split() == ["vg", "v", "0", "-", "2", "2", "0", "-", "-", "-"]
    code, out, _ = await tool(b, "groups", "--describe", "--group", "vg", "--state",
                              "--verbose")
    header, row = (line.split() for line in out.splitlines()[1:])
    assert code == 0 and header == [
        "GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
        "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    # A consumer-protocol group (the member left): its assignor and epochs.
    assert row[:5] == ["vg", b, "(1)", "uniform", "Empty"] and row[7] == "0"
    assert row[5].isdigit() and row[6].isdigit()
    # A classic group (simple commits only) has neither epochs nor an assignor.
    await committed_group(b, "cg", "v", "", classic=True)
    code, out, _ = await tool(b, "groups", "--describe", "--group", "cg", "--state",
                              "--verbose")
    assert out.splitlines()[2].split() == ["cg", b, "(1)", "-", "Empty", "-", "-", "0"]
    code, _, err = await tool(b, "groups", "--list", "--verbose")
    assert code == 2 and "--verbose goes with --describe" in err


def member_session(bootstrap: str, topic: str, group: str, while_active: Any) -> Any:
    """A confluent-kafka member of ``group`` (classic protocol) that owns both partitions of
    ``topic``; ``while_active()`` runs while it is in the group."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "client.id": "verbose-test", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        while not consumer.assignment():
            consumer.poll(0.2)
        return while_active()
    finally:
        consumer.close()


@pytest.mark.interop
async def test_groups_describe_members_verbose(broker: Any) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "mv", "--partitions", "2"))[0] == 0

    def describe_now() -> Any:
        return trio.from_thread.run(tool, b, "groups", "--describe", "--group", "mvg",
                                    "--members", "--verbose")

    code, out, err = await trio.to_thread.run_sync(member_session, b, "mv", "mvg",
                                                   describe_now)
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                "TARGET-ASSIGNMENT"]
    row = lines[2].split()
    # A classic member: no epochs, no target assignment; its assignment as topic:partitions.
    assert row[0] == "mvg" and row[3:] == ["verbose-test", "2", "-", "mv:0,1", "-", "-"]


async def test_whitelist_and_groups_timeout(broker: Any) -> None:
    """Kafka 3's ``--whitelist`` (now ``--include``); kafka-consumer-groups.sh's ``--timeout``
    (how long to wait for answers)."""
    b = broker.bootstrap
    await produce(b, "wl.a", "1\n")
    await produce(b, "wl.b", "2\n")
    code, out, _ = await tool(b, "consume", "--whitelist", "wl\\..", "--from-beginning", "-e")
    assert (code, sorted(out.split())) == (0, ["1", "2"])
    assert await tool(b, "groups", "--list", "--timeout", "2000") == (0, "", "")
    code, _, err = await tool(b, "groups", "--list", "--timeout", "-1")
    assert code == 2 and "--timeout must be at least 0" in err
