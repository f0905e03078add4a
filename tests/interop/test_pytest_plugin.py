"""The pytest plugin (trio_broker.testing) with real clients: inner pytest sessions (pytester)
that use ``kafka_broker`` with confluent-kafka, kafka-python and aiokafka, as a user's project
would (``-p trio_broker.testing``: the plugin as it loads without an installed entry point).

Each inner session is a subprocess: pytester's in-process runs drop the modules a run imported,
and a client library imported a second time in one process (confluent-kafka's C extension,
kafka-python's protocol classes) no longer works.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.interop, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "test_with_kafka.py"
INI = "[pytest]\ntrio_mode = true\n"


def run(pytester: pytest.Pytester, source: str, passed: int) -> pytest.RunResult:
    pytester.makeini(INI)
    pytester.makepyfile(test_inner=textwrap.dedent(source))
    # This checkout's trio_broker, whatever the environment has installed.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", str(ROOT))
        result = pytester.runpytest_subprocess("-p", "trio_broker.testing",
                                               "-p", "no:cacheprovider", timeout=150)
    result.assert_outcomes(passed=passed)
    return result


def test_the_example_users_copy(pytester: pytest.Pytester) -> None:
    """examples/test_with_kafka.py: confluent-kafka round trip with records() and committed(),
    an intercepted NOT_LEADER_OR_FOLLOWER retried, a permanent error reaching the application,
    a crash and recovery, aiokafka, and a session timeout in virtual time."""
    run(pytester, EXAMPLE.read_text(encoding="utf-8"), passed=6)


def test_kafka_python_and_aiokafka_groups(pytester: pytest.Pytester) -> None:
    run(pytester, """
        import asyncio

        def test_kafka_python(kafka_broker):
            from kafka import KafkaConsumer, KafkaProducer

            kafka_broker.create_topic("t", partitions=2)
            producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
            for i in range(4):
                producer.send("t", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2,
                              headers=[("n", str(i).encode())])
            producer.flush(30)
            producer.close()
            stored = kafka_broker.records("t")
            assert [(r.partition, r.offset, r.key, r.headers) for r in stored] == [
                (0, 0, b"k0", (("n", b"0"),)), (0, 1, b"k2", (("n", b"2"),)),
                (1, 0, b"k1", (("n", b"1"),)), (1, 1, b"k3", (("n", b"3"),))]

            consumer = KafkaConsumer("t", bootstrap_servers=kafka_broker.bootstrap_servers,
                                     group_id="kp", auto_offset_reset="earliest",
                                     enable_auto_commit=False, consumer_timeout_ms=20000)
            values = []
            for message in consumer:
                values.append(message.value)
                if len(values) == 4:
                    break
            consumer.commit()
            consumer.close()
            assert sorted(values) == [b"v0", b"v1", b"v2", b"v3"]
            assert kafka_broker.committed("kp") == {("t", 0): 2, ("t", 1): 2}
            assert kafka_broker.events("offsets_committed", group_id="kp")

        def test_aiokafka_group(kafka_broker):
            from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

            kafka_broker.create_topic("a")

            async def main():
                producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
                await producer.start()
                try:
                    for i in range(3):
                        await producer.send_and_wait("a", b"m%d" % i)
                finally:
                    await producer.stop()
                consumer = AIOKafkaConsumer(
                    "a", bootstrap_servers=kafka_broker.bootstrap_servers, group_id="aio",
                    auto_offset_reset="earliest", enable_auto_commit=False)
                await consumer.start()
                try:
                    got = []
                    async with asyncio.timeout(30):
                        async for message in consumer:
                            got.append(message.value)
                            if len(got) == 3:
                                break
                    await consumer.commit()
                finally:
                    await consumer.stop()
                return got

            assert asyncio.run(main()) == [b"m0", b"m1", b"m2"]
            assert kafka_broker.committed("aio") == {("a", 0): 3}
            assert [e["member_id"] for e in kafka_broker.events("member_left", group_id="aio")]
    """, passed=2)


def test_interceptions_with_confluent_kafka(pytester: pytest.Pytester) -> None:
    run(pytester, """
        from confluent_kafka import Producer
        from trio_broker.testing import close, delay

        def deliver(broker, values, **settings):
            producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0,
                                 **settings})
            errors = []
            for value in values:
                producer.produce("t", value=value, on_delivery=lambda e, m: errors.append(e))
            assert producer.flush(30) == 0
            return errors

        def test_connection_closed_mid_produce(kafka_broker):
            kafka_broker.create_topic("t")
            # The first Produce closes the connection unhandled: the idempotent producer
            # reconnects and sends it again, stored once.
            with kafka_broker.intercept("Produce", close(), nth=1) as closed:
                assert deliver(kafka_broker, [b"x"], **{"enable.idempotence": True}) == [None]
            assert closed.applied == 1
            assert [r.value for r in kafka_broker.records("t")] == [b"x"]
            [closed_event] = kafka_broker.events("connection_closed", reason="handler")
            assert "interception" in closed_event["detail"]

        def test_slow_broker_times_out_the_request(kafka_broker):
            kafka_broker.create_topic("t")
            # A Produce answered after 3 s while the client waits 1 s: librdkafka times the
            # request out and retries it; idempotence keeps one copy.
            with kafka_broker.intercept("Produce", delay(3), times=1):
                assert deliver(kafka_broker, [b"y"], **{
                    "enable.idempotence": True, "request.timeout.ms": 1000,
                    "message.timeout.ms": 20000}) == [None]
            assert [r.value for r in kafka_broker.records("t")] == [b"y"]
    """, passed=2)
