"""RequestHandlerAvgIdlePercent is Kafka's meter: the handlers' idle share of the time since
the previous reading, not a point sample (which a 1 s snapshot almost never catches busy)."""

from __future__ import annotations

from typing import Any

from tests.kafka_wire import METADATA_ALL_V12, WireClient

METADATA = 3


async def test_idle_ratio_counts_handler_time_since_the_previous_reading(broker: Any) -> None:
    pool = broker.app._pools[0]
    client = await WireClient.connect(broker.port)
    await client.request(METADATA, 12, METADATA_ALL_V12)
    pool.read_avg_idle_ratio()
    assert pool.read_avg_idle_ratio() == 1.0  # nothing handled since the previous reading
    for _ in range(20):
        await client.request(METADATA, 12, METADATA_ALL_V12)
    busy = pool.read_avg_idle_ratio()
    assert 0.0 <= busy < 1.0
    assert pool.read_avg_idle_ratio() == 1.0
    await client.aclose()
