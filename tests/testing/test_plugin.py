"""The pytest plugin (trio_broker.testing), tested as its users run it: inner pytest sessions
(pytester) with ``-p trio_broker.testing``, as in a project where trio-broker is not installed.

Inner sessions run in subprocesses: pytester's in-process runs drop every module a run imported
from ``sys.modules``, which breaks later tests of this session that cached kio classes.

These use the plugin's own Trio client; the tests with confluent-kafka, kafka-python and aiokafka
are in tests/interop/test_pytest_plugin.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
INI = "[pytest]\ntrio_mode = true\n"
HEADER = """
import time

import pytest
import trio
from kio.schema.errors import ErrorCode

from trio_broker.testing import KafkaError, close, delay, drop, error
from trio_broker.testing.client import TrioKafkaClient, assignment, request_body
"""


def run(pytester: pytest.Pytester, source: str, *args: str, ini: str = "",
        passed: int | None = None) -> pytest.RunResult:
    """Run ``source`` as a test file in an inner session with the plugin; assert the outcome."""
    pytester.makeini(INI + ini)
    pytester.makepyfile(test_inner=HEADER + textwrap.dedent(source))
    # This checkout's trio_broker, whatever the environment has installed.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(ROOT))
        result = pytester.runpytest_subprocess("-p", "trio_broker.testing",
                                               "-p", "no:cacheprovider", *args, timeout=100)
    if passed is not None:
        result.assert_outcomes(passed=passed)
    return result


def test_timeouts_and_throttles_in_exact_virtual_time(pytester: pytest.Pytester) -> None:
    run(pytester, """
        async def test_expiry(trio_kafka_broker, autojump_clock):
            async with await trio_kafka_broker.client() as client:
                await client.create_topic("t")
                member = await client.join_group("g", ["t"], session_timeout_ms=45_000)
                assert member.is_leader
                await client.sync_group(member, {member.member_id: assignment({"t": [0]})})
                await client.heartbeat(member)
                start, wall = trio.current_time(), time.perf_counter()
                [expired] = await trio_kafka_broker.wait_for_event("member_expired",
                                                                   group_id="g")
                # The coordinator's timer: exactly the session timeout after the heartbeat.
                assert trio.current_time() - start == 45.0
                assert time.perf_counter() - wall < 1.0
                assert expired["reason"] == "session_timeout"
                with pytest.raises(KafkaError) as failed:
                    await client.heartbeat(member)
                assert failed.value.code == ErrorCode.unknown_member_id

        async def test_idle_connection_expires_after_10_minutes(trio_kafka_broker,
                                                                autojump_clock):
            async with await trio_kafka_broker.client() as client:
                await client.api_versions()
                start = trio.current_time()
                await trio_kafka_broker.wait_for_event("connection_expired")
                assert trio.current_time() - start == 600.0
                assert await client.closed_by_peer()

        async def test_quota_throttle_mutes_for_exactly_the_throttle_time(trio_kafka_broker,
                                                                          autojump_clock):
            from kio.static.primitive import f64

            ALTER_QUOTAS = 49
            broker = trio_kafka_broker
            broker.create_topic("t")
            entry = request_body(
                ALTER_QUOTAS, 1, "EntryData",
                entity=(request_body(ALTER_QUOTAS, 1, "EntityData", entity_type="client-id",
                                     entity_name="p"),),
                ops=(request_body(ALTER_QUOTAS, 1, "OpData", key="producer_byte_rate",
                                  value=f64(1000.0), remove=False),))
            async with await broker.client("admin") as admin:
                altered = await admin.request(ALTER_QUOTAS, 1, request_body(
                    ALTER_QUOTAS, 1, entries=(entry,), validate_only=False))
                assert altered.entries[0].error_code == ErrorCode.none
            async with await broker.client("p") as client:
                assert await client.produce("t", 0, [b"x" * 20_000]) == 0
                sent = trio.current_time()
                await client.api_versions()  # waits out the connection's mute
                waited = trio.current_time() - sent
            [started] = broker.events("throttle_started", client_id="p")
            assert started["throttle_ms"] > 1000
            assert waited == pytest.approx(started["throttle_ms"] / 1000, abs=1e-6)
    """, passed=3)


def test_intercept_changes_what_the_client_sees(pytester: pytest.Pytester) -> None:
    run(pytester, """
        async def test_intercept(trio_kafka_broker, autojump_clock):
            broker = trio_kafka_broker
            async with await broker.client() as client:
                await client.create_topic("t")
                # The second Produce only: answered NOT_LEADER_OR_FOLLOWER, not appended.
                with broker.intercept("Produce", error("NOT_LEADER_OR_FOLLOWER"),
                                      nth=2) as lost:
                    assert await client.produce("t", 0, [b"a"]) == 0
                    with pytest.raises(KafkaError) as failed:
                        await client.produce("t", 0, [b"b"])
                    assert failed.value.code == ErrorCode.not_leader_or_follower
                    assert await client.produce("t", 0, [b"c"]) == 1
                assert (lost.seen, lost.applied) == (3, 1)
                assert [r.value for r in broker.records("t")] == [b"a", b"c"]
                # Removed at the end of the block.
                assert await client.produce("t", 0, [b"d"]) == 2

                # A delay on the broker's clock (virtual here), then the normal answer.
                with broker.intercept("Metadata", delay(7.5)):
                    start = trio.current_time()
                    await client.metadata(["t"])
                    assert trio.current_time() - start == 7.5

                # A predicate: only requests for topic "u" fail.
                await client.create_topic("u")
                with broker.intercept(
                        "Produce", error("REQUEST_TIMED_OUT"),
                        when=lambda request: request.body.topic_data[0].name == "u"):
                    assert await client.produce("t", 0, [b"e"]) == 3
                    with pytest.raises(KafkaError) as failed:
                        await client.produce("u", 0, [b"x"])
                    assert failed.value.code == ErrorCode.request_timed_out

                # Drop: handled (stored) but never answered.
                with broker.intercept("Produce", drop()):
                    with trio.move_on_after(60) as waited:
                        await client.produce("t", 0, [b"dropped"])
                    assert waited.cancelled_caught
                assert broker.records("t")[-1].value == b"dropped"

            async with await broker.client() as client:
                # Close: the connection is closed instead of an answer.
                with broker.intercept("ListOffsets", close(), times=1) as closed:
                    with pytest.raises(trio.BrokenResourceError):
                        await client.list_offset("t", 0)
                assert closed.applied == 1
            async with await broker.client() as client:
                assert await client.list_offset("t", 0) == 5
            [first, *_] = broker.events("request", api="Produce", error="NOT_LEADER_OR_FOLLOWER")

        def test_unknown_names_are_refused(kafka_broker):
            with pytest.raises(ValueError, match="unknown API 'Prodcue'"):
                kafka_broker.intercept("Prodcue", error("NONE"))
            with pytest.raises(ValueError, match="unknown Kafka error code"):
                error("NOT_A_CODE")
    """, passed=2)


def test_records_committed_metrics_and_restart(pytester: pytest.Pytester) -> None:
    run(pytester, """
        async def test_records_and_committed(trio_kafka_broker):
            broker = trio_kafka_broker
            broker.create_topic("t", partitions=2, config={"message.timestamp.type":
                                                           "LogAppendTime"})
            async with await broker.client() as client:
                await client.produce("t", 1, [(b"k1", b"v1"), (None, b"v2")])
                await client.produce("t", 0, [(b"k0", None)])
                await client.commit("g", {("t", 0): 1, ("t", 1): 2})
                assert await client.committed("g", [("t", 0), ("t", 1)]) == {
                    ("t", 0): 1, ("t", 1): 2}
            records = broker.records("t")
            assert [(r.partition, r.offset, r.key, r.value) for r in records] == [
                (0, 0, b"k0", None), (1, 0, b"k1", b"v1"), (1, 1, None, b"v2")]
            assert all(r.timestamp > 0 for r in records)
            assert [r.offset for r in broker.records("t", partition=1)] == [0, 1]
            assert broker.committed("g") == {("t", 0): 1, ("t", 1): 2}
            assert broker.committed("nobody") == {}
            produced = broker.metrics.get("kafka_network_requestmetrics_requests_total",
                                          request="Produce", version="9")
            assert produced == 2
            assert "kafka_network_requestmetrics_requests_total" in broker.metrics.text()
            with pytest.raises(KeyError):
                broker.records("missing")

        async def test_restart_after_a_crash(trio_kafka_broker):
            broker = trio_kafka_broker
            async with await broker.client() as client:
                await client.create_topic("t")
                await client.produce("t", 0, [b"a", b"b"])
                await client.commit("g", {("t", 0): 2})
            port = broker.port
            await broker.restart(kill=True)
            assert broker.port == port
            opened = broker.events("log_manager_opened")
            assert [e["clean_shutdown"] for e in opened] == [False, False]
            assert [r.value for r in broker.records("t")] == [b"a", b"b"]
            assert broker.committed("g") == {("t", 0): 2}
            async with await broker.client() as client:
                assert await client.produce("t", 0, [b"c"]) == 2
            await broker.restart()
            assert broker.events("log_manager_opened")[-1]["clean_shutdown"] is True
            assert [r.value for r in broker.records("t")] == [b"a", b"b", b"c"]
    """, passed=2)


def test_configuration_sources_and_bad_keys(pytester: pytest.Pytester) -> None:
    ini = ("kafka_broker_config =\n    num.partitions=2\n    message.max.bytes=5000\n"
           "kafka_broker_data_dir = tmp_path\n")
    result = run(pytester, """
        def test_ini_and_command_line(kafka_broker):
            assert kafka_broker.config.num_partitions == 3          # command line over ini
            assert kafka_broker.config.message_max_bytes == 5000     # ini
            assert kafka_broker.config.group_initial_rebalance_delay_ms == 0  # fixture default

        def test_data_in_tmp_path(kafka_broker, tmp_path_factory):
            assert tmp_path_factory.getbasetemp() in kafka_broker.data_dir.parents

        @pytest.mark.kafka_broker_config(**{"num.partitions": "4"})
        class TestMarkers:
            @pytest.mark.kafka_broker_config(**{"message.max.bytes": 7000})
            async def test_closest_marker_wins(self, trio_kafka_broker):
                assert trio_kafka_broker.config.num_partitions == 4
                assert trio_kafka_broker.config.message_max_bytes == 7000

        def test_session_broker_ignores_markers(kafka_broker_session):
            assert kafka_broker_session.config.num_partitions == 3

        @pytest.mark.kafka_broker_config(**{"num.partitons": "4"})
        def test_misspelt_key(kafka_broker):
            pass

        @pytest.mark.kafka_broker_config(**{"num.partitions": "0"})
        def test_bad_value(kafka_broker):
            pass
    """, "--kafka-broker-config", "num.partitions=3", ini=ini)
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.re_match_lines([
        r".*ConfigError: Invalid value '4' for configuration num.partitons: not a "
        r"configuration key of trio_broker.*",
        r".*ConfigError: Invalid value 0 for configuration num.partitions: .*",
    ], consecutive=False)


def test_each_broker_has_its_own_events_and_the_session_broker_is_shared(
        pytester: pytest.Pytester) -> None:
    run(pytester, """
        from pathlib import Path

        FIRST = []

        def test_first(kafka_broker, kafka_broker_session):
            # By default the data lives in memory (tmpfs), removed at tear-down.
            assert kafka_broker.data_dir.parent == Path("/dev/shm")
            FIRST.append(kafka_broker.data_dir)
            kafka_broker.create_topic("first")
            kafka_broker_session.create_topic("shared")
            assert kafka_broker.events("topic_created", topic="first")

        def test_second(kafka_broker, kafka_broker_session):
            # A fresh broker: nothing of the first test's broker, whose data is gone.
            assert not FIRST[0].exists() and kafka_broker.data_dir != FIRST[0]
            assert not kafka_broker.events("topic_created", topic="first")
            assert kafka_broker.events("broker_ready")
            # The session's broker is the same one.
            assert kafka_broker_session.events("topic_created", topic="shared")

            async def produce() -> int:
                async with await TrioKafkaClient.connect(kafka_broker_session.port) as client:
                    return await client.produce("shared", 0, [b"from trio.run"])
            assert trio.run(produce) == 0
            assert [r.value for r in kafka_broker_session.records("shared")] == [
                b"from trio.run"]
            found = kafka_broker_session.events.wait_for("request", api="Produce")
            assert found[0]["error"] == "NONE"
    """, passed=2)
