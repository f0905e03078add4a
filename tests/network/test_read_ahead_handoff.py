"""One receive at a time: while a write is blocked the read-ahead task receives for the reader,
and a reader that wants bytes meanwhile waits for that receive to end, then takes its frame
(trio allows one receive per socket at a time; two would fail the connection with
``BusyResourceError``). The connection mutation run left this hand-off open
(docs/development.md, ``_receive``, ``_read_frame``).

The set-up puts the reader behind the read-ahead: a throttle holds the reader (not receiving)
while a long-polling Fetch answers with more than the socket buffers hold, so the write blocks
and the read-ahead task takes the receive; when the throttle ends, the reader wants bytes while
the read-ahead is still waiting for them. Time runs on the autojump clock.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from kio.schema.metadata.v12.request import MetadataRequest

from tests.kafka_wire import API_VERSIONS_V3
from tests.network.conftest import THROTTLE_MS
from tests.network.test_pipelining import connections, correlations, read_ahead_broker
from trio_broker.testing.client import TrioKafkaClient

API_VERSIONS, METADATA, FETCH = 18, 3, 1
#: How long the Fetch waits for more data than there is: it answers before the throttle ends.
FETCH_WAIT_MS = 200
RECORD_BYTES = 200_000  # far more than the client's and the broker's 4 KiB socket buffers


async def test_a_reader_that_wants_bytes_while_the_read_ahead_receives_waits_for_it(
        start_broker: Any, throttling_metadata: None,
        autojump_clock: trio.testing.MockClock) -> None:
    from tests.server.test_produce_fetch import fetch_body

    running, _, client = await read_ahead_broker(start_broker, "16")
    async with await TrioKafkaClient.connect(running.port) as producer:
        await producer.create_topic("t")
        await producer.produce("t", 0, [b"x" * RECORD_BYTES])
    [connection] = [c for c in connections(running) if c.requests == 0]

    # 1: a throttled Metadata answer (the throttle starts once it is sent), and 2: a Fetch
    # that waits FETCH_WAIT_MS for more than the partition holds, then answers with the record.
    await client.send_raw(
        client.encode(METADATA, 12, MetadataRequest(
            topics=(), allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        + client.encode(FETCH, 11, fetch_body(11, {("t", 0): 0}, min_bytes=50_000_000,
                                               max_wait_ms=FETCH_WAIT_MS)))
    assert await correlations(client, 1) == [1]
    throttled_at = trio.current_time()
    # 3: read during the throttle, dispatched when it ends (the reader waits, not receiving).
    await client.send_raw(client.encode(API_VERSIONS, 3, API_VERSIONS_V3))
    await trio.sleep(FETCH_WAIT_MS / 1000 + 0.05)
    # The Fetch's answer is being written and blocks: the read-ahead task holds the receive.
    assert connection._receiving and connection._received_lot is not None
    assert len(connection._received_lot) == 0
    await trio.sleep_until(throttled_at + THROTTLE_MS / 1000 + 0.05)
    # The throttle is over: the reader dispatched 3 and now waits for the read-ahead's receive.
    assert connection.requests == 3
    assert len(connection._received_lot) == 1

    # 4: received by the read-ahead task, handed to the reader, answered after the Fetch.
    await client.send_raw(client.encode(API_VERSIONS, 3, API_VERSIONS_V3))
    with trio.fail_after(30):
        assert await correlations(client, 3) == [2, 3, 4]
    assert connection.requests == 4
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)  # the connection reads on
    await client.aclose()
