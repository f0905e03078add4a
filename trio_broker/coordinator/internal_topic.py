"""What the group and transaction coordinators share about their internal topics
(``__consumer_offsets``, ``__transaction_state``): creating one on first write, reading a
partition back batch by batch when loading, and running their background tasks."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import trio

from ..observability.log import emit
from ..protocol import records as rb


def ensure_topic(log_manager: Any, topic: str, num_partitions: int,
                 configs: Mapping[str, str], segment_bytes: int) -> None:
    """Create the compacted internal ``topic`` unless it exists (Kafka creates these on first
    use, so a broker that never needs one does not pay for its partitions)."""
    if topic not in log_manager.topics and not log_manager.is_reserved(topic):
        # (a creation under way in a worker thread: the write that follows fails as
        # retriable, and the client tries again)
        log_manager.create_topic(topic, num_partitions,
                                 {**configs, "segment.bytes": str(segment_bytes)},
                                 internal=True)


async def ensure_topic_async(log_manager: Any, topic: str, num_partitions: int,
                             configs: Mapping[str, str], segment_bytes: int) -> None:
    """:func:`ensure_topic` with the partitions created in a worker thread (fifty partitions
    held the event loop 160 ms); a creation already under way is waited for."""
    while topic not in log_manager.topics:
        if log_manager.is_reserved(topic):
            await trio.sleep(RESERVED_POLL_S)
            continue
        await log_manager.create_topic_async(
            topic, num_partitions, {**configs, "segment.bytes": str(segment_bytes)},
            internal=True)


#: How often a coordinator looks whether its internal topic's creation has finished.
RESERVED_POLL_S = 0.01


def read_batches(log_manager: Any, topic: str, partition: int, offset: int, max_bytes: int
                 ) -> Iterator[tuple[rb.BatchHeader, bytes]]:
    """Every stored batch of ``topic``/``partition`` that ends at or after ``offset`` (from the
    log start if that is later), with its decoded header, until the high watermark. The
    batches are not checked: callers skip what does not check out, as Kafka skips them."""
    while True:
        result = log_manager.read(topic, partition, offset, max_bytes)
        offset = max(offset, result.log_start_offset)
        if not result.records:
            return
        data = memoryview(result.records)
        advanced = False
        for position, size in rb.iter_batches(data):
            if size < rb.HEADER_SIZE:
                return
            batch = bytes(data[position:position + size])
            header = rb.decode_header(batch)
            if header.last_offset < offset:
                continue
            yield header, batch
            offset = header.last_offset + 1
            advanced = True
        if not advanced or offset >= result.high_watermark:
            return


async def guarded(fn: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Run a coordinator task; a bug in one costs that task, never the broker."""
    try:
        await fn(*args)
    except Exception as exc:
        emit("background_task_failed", task=fn.__name__, error=type(exc).__name__,
             detail=repr(exc))


async def every(interval_ms: float, action: Callable[[], Any]) -> None:
    """Call ``action`` (awaiting it if it is a coroutine function's) every ``interval_ms``,
    first after one interval, until cancelled."""
    while True:
        await trio.sleep(interval_ms / 1000)
        result = action()
        if inspect.isawaitable(result):
            await result
