"""The storage and replica admin APIs with kafka-python 3's KafkaAdminClient, which has a call for
each: delete_records, describe_log_dirs, describe_producers, list/alter_partition_reassignments
and elect_leaders. The answers are those of a one-node Kafka."""

from __future__ import annotations

from typing import Any

import pytest
import trio

pytestmark = pytest.mark.interop

TIMEOUT = 15.0


def kafka_python_session(bootstrap: str, data_dir: str, node: int) -> None:
    from kafka import KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import ElectionNotNeededError, InvalidReplicationAssignmentError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(TIMEOUT * 1000))
    admin.create_topics([NewTopic("kp", num_partitions=2, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    for _ in range(4):
        producer.send("kp", value=b"x" * 100, partition=0).get(timeout=TIMEOUT)
        producer.flush()
    producer.close()
    tp0, tp1 = TopicPartition("kp", 0), TopicPartition("kp", 1)

    deleted = admin.delete_records({tp0: 2})
    assert deleted[tp0]["low_watermark"] == 2, deleted

    (broker_dirs,) = admin.describe_log_dirs()
    text = repr(broker_dirs)
    assert data_dir in text and "'kp'" in text, text

    states = admin.describe_producers([tp0, tp1])
    active0 = states[tp0].active_producers
    assert len(active0) == 1 and active0[0].last_sequence == 3, states
    assert states[tp1].active_producers == []

    assert admin.list_partition_reassignments() == {}
    errors = admin.alter_partition_reassignments({tp0: [node], tp1: [node, node + 1]})
    assert errors[tp0] is None and errors[tp1] is InvalidReplicationAssignmentError, errors

    response = admin.elect_leaders(0, {"kp": [0, 1]}, raise_errors=False)
    codes = [p.error_code for result in response.replica_election_results
             for p in result.partition_result]
    assert codes == [ElectionNotNeededError.errno] * 2, response
    admin.close()


async def test_kafka_python_probe_admin_calls(broker: Any, log_events: Any) -> None:
    with trio.fail_after(TIMEOUT * 6):
        await trio.to_thread.run_sync(kafka_python_session, broker.bootstrap,
                                      str(broker.data_dir.resolve()), broker.broker.node_id,
                                      abandon_on_cancel=True)
    for event in ("invalid_request", "unsupported_api", "request_failed"):
        assert log_events.events(event) == [], event
