"""Kafka's other tools under trio_broker (issue 32, item 6), against a real broker on real
sockets, output compared with the formats of Kafka's sources: ``get-offsets``
(GetOffsetShell), ``delete-records`` (DeleteRecordsCommand), ``broker-api-versions``
(BrokerApiVersionsCommand / NodeApiVersions), ``log-dirs`` (LogDirsCommand), ``features``
(FeatureCommand), ``leader-election`` (LeaderElectionCommand), ``producer-perf-test``
(ProducerPerformance) and ``consumer-perf-test`` (ConsumerPerformance)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.test_tools_cli import tool
from trio_broker.cli import main as cli_main
from trio_broker.tools.brokers import hash_map_order, java_hash


async def topic_with_records(b: str, topic: str, per_partition: list[int]) -> None:
    assert (await tool(b, "topics", "--create", "--topic", topic, "--partitions",
                       str(len(per_partition))))[0] == 0
    for partition, count in enumerate(per_partition):
        if count:
            lines = "".join(f"{topic}-{partition}-{i}\n" for i in range(count))
            assert await tool(b, "produce", "--topic", topic, "--partition", str(partition),
                              stdin=lines) == (0, "", "")


# --------------------------------------------------------------------------- get-offsets
async def test_get_offsets(broker: Any) -> None:
    b = broker.bootstrap
    before = int(time.time() * 1000)
    await topic_with_records(b, "go", [3, 1, 0])
    # GetOffsetShell: topic:partition:offset, latest by default.
    assert await tool(b, "get-offsets", "--topic", "go") == (0, "go:0:3\ngo:1:1\ngo:2:0\n", "")
    assert await tool(b, "get-offsets", "--topic", "go", "--time", "-2") == (
        0, "go:0:0\ngo:1:0\ngo:2:0\n", "")
    # --topic-partitions: a topic regex with a partition, a range (upper bound excluded), N-.
    assert await tool(b, "get-offsets", "--topic-partitions", "g.:0,go:1-2") == (
        0, "go:0:3\ngo:1:1\n", "")
    assert await tool(b, "get-offsets", "--topic-partitions", "go:1-") == (
        0, "go:1:1\ngo:2:0\n", "")
    assert await tool(b, "get-offsets", "--topic", "go", "--partitions", "2,0") == (
        0, "go:0:3\ngo:2:0\n", "")
    # A timestamp: the first offset at or after it; an empty partition prints nothing.
    assert await tool(b, "get-offsets", "--topic", "go", "--time", str(before)) == (
        0, "go:0:0\ngo:1:0\n", "")
    assert await tool(b, "get-offsets", "--topic", "go", "--time",
                      str(int(time.time() * 1000) + 60_000)) == (0, "", "")
    code, out, _ = await tool(b, "get-offsets", "--topic", "go", "--output", "json")
    assert code == 0 and json.loads(out)[0] == {"topic": "go", "partition": 0, "offset": 3}
    assert await tool(b, "get-offsets", "--topic", "nosuch") == (
        1, "", "trio_broker get-offsets: Could not match any topic-partitions with the "
               "specified filters\n")
    code, _, err = await tool(b, "get-offsets", "--time", "yesterday")
    assert code == 2 and "Malformed time argument yesterday" in err
    code, _, err = await tool(b, "get-offsets", "--topic", "go", "--topic-partitions", "go")
    assert code == 2 and "--topic-partitions cannot be used with --topic or --partitions" in err


async def test_get_offsets_orders_as_kafka_and_filters_internal_topics(broker: Any) -> None:
    b = broker.bootstrap
    await topic_with_records(b, "many", [0] * 11)
    code, out, _ = await tool(b, "get-offsets", "--topic", "many")
    # A TreeMap by TopicPartition.toString(): "many-10" sorts before "many-2".
    assert [line.split(":")[1] for line in out.split()] == [
        "0", "1", "10", "2", "3", "4", "5", "6", "7", "8", "9"]
    await tool(b, "consume", "--topic", "many", "--group", "g", "-e")  # __consumer_offsets
    await tool(b, "produce", "--topic", "many", "--partition", "0", stdin="x\n")
    await tool(b, "consume", "--topic", "many", "--group", "g", "--from-beginning", "-e")
    code, out, _ = await tool(b, "get-offsets")
    assert any(line.startswith("__consumer_offsets:") for line in out.split())
    code, out, _ = await tool(b, "get-offsets", "--exclude-internal-topics")
    assert code == 0 and not any(line.startswith("__") for line in out.split())


# ------------------------------------------------------------------------ delete-records
async def test_delete_records(broker: Any, tmp_path: Path) -> None:
    b = broker.bootstrap
    await topic_with_records(b, "dr", [5, 2])
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"partitions": [{"topic": "dr", "partition": 0, "offset": 3},
                                               {"topic": "dr", "partition": 1, "offset": -1}],
                                "version": 1}))
    assert await tool(b, "delete-records", "--offset-json-file", str(plan)) == (
        0, "Executing records delete operation\n"
           "Records delete operation completed:\n"
           "partition: dr-0\tlow_watermark: 3\n"
           "partition: dr-1\tlow_watermark: 2\n", "")
    assert await tool(b, "get-offsets", "--topic", "dr", "--time", "earliest") == (
        0, "dr:0:3\ndr:1:2\n", "")
    assert await tool(b, "consume", "--topic", "dr", "--partition", "0", "--offset",
                      "earliest", "-e") == (0, "dr-0-3\ndr-0-4\n",
                                            "Processed a total of 2 messages\n")
    # Past the high watermark: the partition's error, Kafka's exception text; status 1.
    plan.write_text('{"partitions": [{"topic": "dr", "partition": 0, "offset": 99}]}')
    assert await tool(b, "delete-records", "--offset-json-file", str(plan)) == (
        1, "Executing records delete operation\n"
           "Records delete operation completed:\n"
           "partition: dr-0\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException: "
           "The requested offset is not within the range of offsets maintained by the "
           "server.\n", "")
    plan.write_text('{"partitions": [{"topic": "dr", "partition": 0, "offset": 1}, '
                    '{"topic": "dr", "partition": 0, "offset": 2}], "version": 1}')
    assert await tool(b, "delete-records", "--offset-json-file", str(plan)) == (
        1, "", "trio_broker delete-records: Offset json file contains duplicate topic "
               "partitions: dr-0\n")
    plan.write_text('{"partitions": [], "version": 2}')
    assert (await tool(b, "delete-records", "--offset-json-file", str(plan)))[2] == (
        "trio_broker delete-records: Not supported version field value 2\n")


# ------------------------------------------------------------------- broker-api-versions
async def test_broker_api_versions(broker: Any) -> None:
    b = broker.bootstrap
    code, out, err = await tool(b, "broker-api-versions")
    lines = out.splitlines()
    assert (code, err) == (0, "")
    # BrokerApiVersionsCommand: "<node> -> " + NodeApiVersions.toString(true)
    assert lines[0] == f"{b} (id: 1 rack: null) -> ("
    assert re.fullmatch(r"\tProduce\(0\): \d+ to \d+ \[usable: \d+\],", lines[1])
    assert "\tOffsetDelete(47): 0 [usable: 0]," in lines  # min == max: one number
    assert "\tPushTelemetry(72): UNSUPPORTED," in lines  # known here, not served
    assert not any(line.startswith("\tVote(") for line in lines)  # controller-only
    assert lines[-1] == ")" and not lines[-2].endswith(",")
    keys = [int(m.group(1)) for line in lines[1:-1] if (m := re.search(r"\((\d+)\):", line))]
    assert keys == sorted(keys) and len(keys) == len(lines) - 2
    code, out, _ = await tool(b, "broker-api-versions", "--output", "json")
    (node,) = json.loads(out)
    assert node["node"]["id"] == 1 and {"Produce", "Fetch"} <= {a["name"] for a in node["apis"]}


# ----------------------------------------------------------------------------- log-dirs
async def test_log_dirs(broker: Any) -> None:
    b = broker.bootstrap
    await topic_with_records(b, "ld", [4, 0])
    await topic_with_records(b, "other", [1])
    code, out, err = await tool(b, "log-dirs", "--describe", "--topic-list", "ld")
    lines = out.splitlines()
    assert (code, err, lines[:2]) == (0, "", [
        "Querying brokers for log directories information",
        "Received log directory information from brokers 1"])
    # Jackson writing LogDirsCommand's HashMaps: this key order, no spaces.
    assert lines[2].startswith('{"brokers":[{"broker":1,"logDirs":[{"partitions":[{'
                               '"partition":"ld-')
    assert lines[2].endswith('],"error":null,"logDir":"' + str(broker.data_dir) + '"}]}],'
                             '"version":1}')
    document = json.loads(lines[2])
    (log_dir,) = document["brokers"][0]["logDirs"]
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {"ld-0", "ld-1"} and sizes["ld-0"] > 0 and sizes["ld-1"] == 0
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])
    code, _, err = await tool(b, "log-dirs", "--describe", "--broker-list", "1,7")
    assert (code, err) == (1, "trio_broker log-dirs: ERROR: The given brokers do not exist "
                              "from --broker-list: 7. Current existent brokers: 1\n")
    assert (await tool(b, "log-dirs", "--topic-list", "ld"))[0] == 2  # --describe: required


def test_java_hash_map_order() -> None:
    """The order Jackson writes a java.util.HashMap in (String.hashCode buckets)."""
    assert java_hash("hello") == 99162322
    assert hash_map_order(["version", "brokers"], java_hash) == ["brokers", "version"]
    assert hash_map_order(["logDir", "error", "partitions"], java_hash) == [
        "partitions", "error", "logDir"]


# ----------------------------------------------------------------------------- features
async def test_features(broker: Any) -> None:
    b = broker.bootstrap
    code, out, err = await tool(b, "features", "describe")
    assert (code, err) == (0, "")
    # FeatureCommand.handleDescribe: one line per feature the broker advertises.
    assert all(re.fullmatch(r"Feature: \S+\tSupportedMinVersion: \S+\tSupportedMaxVersion: "
                            r"\S+\tFinalizedVersionLevel: \S+\tEpoch: \S+", line)
               for line in out.splitlines())
    assert "Feature: metadata.version\tSupportedMinVersion: 7\tSupportedMaxVersion: 25\t" \
        "FinalizedVersionLevel: 25\tEpoch: 3" in out.splitlines()
    code, out, err = await tool(b, "features", "upgrade", "--feature", "transaction.version=3")
    assert (code, err) == (1, "trio_broker features: 1 out of 1 operation(s) failed.\n")
    assert out == ("Could not upgrade transaction.version to 3. INVALID_UPDATE_VERSION: The update "
                   "failed for all features since the following feature had an error: Invalid "
                   "update version 3 for feature transaction.version. Local controller 1 only "
                   "supports versions 0-2\n")
    assert await tool(b, "features", "upgrade", "--feature", "kraft.version=1") == (
        0, "kraft.version was upgraded to 1.\n", "")
    code, _, err = await tool(b, "features", "upgrade")
    assert code == 2 and "at least one feature" in err  # found after parsing: our stderr


# ---------------------------------------------------------------------- leader-election
async def test_leader_election(broker: Any, tmp_path: Path) -> None:
    b = broker.bootstrap
    await topic_with_records(b, "le", [0, 0])
    assert await tool(b, "leader-election", "--election-type", "preferred", "--topic", "le",
                      "--partition", "0") == (
        0, "Valid replica already elected for partitions le-0\n", "")
    # All partitions: only those an election was needed for are reported (none here).
    assert await tool(b, "leader-election", "--election-type", "PREFERRED",
                      "--all-topic-partitions") == (0, "", "")
    plan = tmp_path / "elect.json"
    plan.write_text('{"partitions": [{"topic": "le", "partition": 1}, '
                    '{"topic": "le", "partition": 9}]}')
    code, out, err = await tool(b, "leader-election", "--election-type", "unclean",
                                "--path-to-json-file", str(plan))
    assert code == 1 and out.splitlines() == [
        "Valid replica already elected for partitions le-1",
        "Error completing leader election (UNCLEAN) for partition: le-9: "
        "org.apache.kafka.common.errors.UnknownTopicOrPartitionException: This server does not "
        "host this topic-partition."]
    assert err == "1 replica(s) could not be elected\n"
    code, _, err = await tool(b, "leader-election", "--election-type", "preferred")
    assert code == 1 and "One and only one of the following options is required: topic, " \
                         "all-topic-partitions, path-to-json-file" in err
    code, _, err = await tool(b, "leader-election", "--election-type", "preferred", "--topic",
                              "le")
    assert code == 1 and "Missing required option(s): partition" in err
    assert (await tool(b, "leader-election", "--election-type", "random",
                       "--all-topic-partitions"))[0] == 2


# --------------------------------------------------------------------------- perf tests
PRODUCER_TOTAL = re.compile(
    r"(\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg "
    r"latency, \d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms "
    r"99\.9th\.")
PRODUCER_WINDOW = re.compile(
    r"\d+ records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d ms avg latency, "
    r"\d+\.\d ms max latency\.")


async def test_producer_and_consumer_perf_tests(broker: Any) -> None:
    b = broker.bootstrap
    assert (await tool(b, "topics", "--create", "--topic", "perf", "--partitions", "3"))[0] == 0
    code, out, err = await tool(b, "producer-perf-test", "--topic", "perf", "--num-records",
                                "20000", "--record-size", "100", "--throughput", "-1",
                                "--producer-props", "acks=1", "batch.size=4096")
    (line,) = out.splitlines()[-1:]
    match = PRODUCER_TOTAL.fullmatch(line)
    assert (code, err) == (0, "") and match and match.group(1) == "20000", out
    code, out, _ = await tool(b, "get-offsets", "--topic", "perf")
    assert sum(int(row.split(":")[2]) for row in out.split()) == 20000
    # Spread over the partitions (sticky batches), several batches each.
    assert all(int(row.split(":")[2]) > 1000 for row in out.split())

    # Throttled: about 2,000 records/sec, progress lines as it goes.
    started = time.monotonic()
    code, out, _ = await tool(b, "producer-perf-test", "--topic", "perf", "--num-records",
                              "3000", "--payload-monotonic", "--throughput", "2000",
                              "--reporting-interval", "500")
    took = time.monotonic() - started
    lines = out.splitlines()
    assert code == 0 and 1.3 < took < 10, took
    assert lines and all(PRODUCER_WINDOW.fullmatch(x) for x in lines[:-1]) and len(lines) >= 2
    assert PRODUCER_TOTAL.fullmatch(lines[-1])

    code, out, err = await tool(b, "consumer-perf-test", "--topic", "perf", "--messages",
                                "23000", "--group", "pg")
    lines = out.splitlines()
    assert (code, err, lines[0]) == (0, "", (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"))
    fields = lines[1].split(", ")
    monotonic_bytes = sum(len(str(i)) for i in range(3000))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}", fields[0])
    assert fields[2] == f"{(20000 * 100 + monotonic_bytes) / (1024 * 1024):.4f}"
    assert fields[4] == "23000" and len(fields) == 10
    # It joined the group as a member (subscribe(), KIP-848), committed and left.
    code, out, _ = await tool(b, "groups", "--list", "--type", "--state")
    assert out.splitlines()[1].split() == ["pg", "Consumer", "Empty"]
    # The group's position is committed: a second run has nothing to read.
    code, out, _ = await tool(b, "consumer-perf-test", "--topic", "perf", "--messages", "1",
                              "--group", "pg", "--timeout", "300", "--hide-header")
    assert code == 0 and out.startswith("WARNING: Exiting before consuming the expected "
                                        "number of messages: timeout (300 ms) exceeded.")


def test_perf_tests_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["producer-perf-test", "--topic", "t", "--num-records", "1",
                     "--record-size", "1", "--throughput", "-1"]) == 2
    assert "Either --bootstrap-server or bootstrap.servers" in capsys.readouterr().err
    assert cli_main(["producer-perf-test", "--bootstrap-server", "127.0.0.1:1", "--topic",
                     "t", "--num-records", "1", "--throughput", "-1"]) == 2
    assert "one of the arguments --record-size --payload-file --payload-monotonic is " \
           "required" in capsys.readouterr().err
    assert cli_main(["consumer-perf-test", "--bootstrap-server", "127.0.0.1:1",
                     "--messages", "1"]) == 2
    assert "Exactly one of the following arguments is required: topic, include" in \
        capsys.readouterr().err


# ----------------------------------------------------------------------- metadata-quorum
async def test_metadata_quorum(broker: Any) -> None:
    """DescribeQuorum answers for the single voter (this node); the option checks are Kafka's."""
    b = broker.bootstrap
    code, out, err = await tool(b, "metadata-quorum", "describe", "--status")
    assert (code, err) == (0, "")
    assert out.splitlines()[1:] == [
        "LeaderId:               1", "LeaderEpoch:            1", "HighWatermark:          4",
        "MaxFollowerLag:         0", "MaxFollowerLagTimeMs:   0",
        f'CurrentVoters:          [{{"id": 1, "endpoints": ["PLAINTEXT://{b}"]}}]',
        "CurrentObservers:       []"]
    code, _, err = await tool(b, "metadata-quorum", "describe", "--status", "--replication")
    assert (code, err) == (1, "trio_broker metadata-quorum: Only one of --status or "
                              "--replication should be specified with describe sub-command\n")
    code, _, err = await tool(b, "metadata-quorum", "describe")
    assert code == 1 and "One of --status or --replication must be specified" in err


def test_metadata_quorum_voter_text() -> None:
    """MetadataQuorumCommand's Node.toString for CurrentVoters/CurrentObservers."""
    import uuid

    from kio.schema.describe_quorum.v2.response import ReplicaState

    from trio_broker.tools.brokers import replica_text

    voter = ReplicaState(replica_id=1, replica_directory_id=uuid.UUID(int=1), log_end_offset=5,
                         last_fetch_timestamp=-1, last_caught_up_timestamp=-1)
    assert replica_text(voter, {1: ["CONTROLLER://localhost:9093"]}) == (
        '{"id": 1, "directoryId": "AAAAAAAAAAAAAAAAAAAAAQ", "endpoints": '
        '["CONTROLLER://localhost:9093"]}')
    observer = ReplicaState(replica_id=2, replica_directory_id=uuid.UUID(int=0),
                            log_end_offset=5, last_fetch_timestamp=-1,
                            last_caught_up_timestamp=-1)
    assert replica_text(observer, {}) == '{"id": 2}'


async def test_metadata_quorum_output_of_a_kraft_quorum(
        broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The --status and --replication output for a quorum of two voters and an observer, as
    an Apache Kafka cluster answers DescribeQuorum (the answer is made here: trio_broker has
    no quorum; the cluster id comes from the real broker's DescribeCluster)."""
    import uuid

    from kio.schema.describe_quorum.v2.response import PartitionData, ReplicaState

    from trio_broker.tools import brokers

    def state(node: int, end: int, fetched: int, caught_up: int) -> ReplicaState:
        return ReplicaState(replica_id=node, replica_directory_id=uuid.UUID(int=node),
                            log_end_offset=end, last_fetch_timestamp=fetched,
                            last_caught_up_timestamp=caught_up)

    now = int(time.time() * 1000)
    partition = PartitionData(
        partition_index=0, error_code=0, error_message=None, leader_id=1, leader_epoch=7,
        high_watermark=120, current_voters=(state(1, 120, now, now),
                                            state(2, 100, now - 500, now - 2000)),
        observers=(state(3, 110, now - 100, now - 300),))
    endpoints = {1: ["CONTROLLER://c1:9093"], 2: ["CONTROLLER://c2:9093"]}
    monkeypatch.setattr(brokers, "DESCRIBE_QUORUM", 18)  # any API the broker has
    monkeypatch.setattr(brokers, "describe_quorum", lambda conn: (partition, endpoints))
    b = broker.bootstrap
    code, out, _ = await tool(b, "cluster", "describe", "--output", "json")
    cluster_id = json.loads(out)["cluster_id"]
    code, out, err = await tool(b, "metadata-quorum", "describe", "--status")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"ClusterId:              {cluster_id}",
        "LeaderId:               1",
        "LeaderEpoch:            7",
        "HighWatermark:          120",
        "MaxFollowerLag:         20",
        "MaxFollowerLagTimeMs:   2000",
        'CurrentVoters:          [{"id": 1, "directoryId": "AAAAAAAAAAAAAAAAAAAAAQ", '
        '"endpoints": ["CONTROLLER://c1:9093"]}, {"id": 2, "directoryId": '
        '"AAAAAAAAAAAAAAAAAAAAAg", "endpoints": ["CONTROLLER://c2:9093"]}]',
        'CurrentObservers:       [{"id": 3, "directoryId": "AAAAAAAAAAAAAAAAAAAAAw"}]']
    code, out, _ = await tool(b, "metadata-quorum", "describe", "--replication")
    rows = [line.rstrip("\t").split("\t") for line in out.splitlines()]
    assert code == 0 and [[c.strip() for c in r] for r in rows] == [
        ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
         "LastCaughtUpTimestamp", "Status"],
        ["1", "AAAAAAAAAAAAAAAAAAAAAQ", "120", "0", str(now), str(now), "Leader"],
        ["2", "AAAAAAAAAAAAAAAAAAAAAg", "100", "20", str(now - 500), str(now - 2000),
         "Follower"],
        ["3", "AAAAAAAAAAAAAAAAAAAAAw", "110", "10", str(now - 100), str(now - 300),
         "Observer"]]
    code, out, _ = await tool(b, "metadata-quorum", "describe", "--replication",
                              "--human-readable")
    assert code == 0 and out.splitlines()[2].split("\t")[4].strip().endswith(" ms ago")
