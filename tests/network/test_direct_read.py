"""The reader's direct socket read (docs/decisions.md, "A plain socket is read directly"): a
read that returns at once is still a cancellation point and yields to other tasks at least
every READS_PER_YIELD reads."""

from __future__ import annotations

import trio
import trio.testing

from trio_broker.network import connection


async def test_reads_that_return_at_once_let_other_tasks_run() -> None:
    ran = trio.Event()

    async def other() -> None:
        ran.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        # Two yields: within a scheduler batch trio may run this task before the new one.
        for _ in range(2 * connection.READS_PER_YIELD):
            await connection._read_checkpoint()
        assert ran.is_set()


async def test_a_read_that_returns_at_once_raises_a_pending_cancellation() -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await connection._read_checkpoint()
        raise AssertionError("not cancelled")  # pragma: no cover
    assert scope.cancelled_caught


async def test_read_nowait_reports_nothing_data_and_end_of_stream() -> None:
    left, right = trio.socket.socketpair()
    with left, right:
        assert connection._read_nowait(left.fileno()) is None
        await right.send(b"abc")
        assert connection._read_nowait(left.fileno()) == b"abc"
        right.close()
        assert connection._read_nowait(left.fileno()) == b""
