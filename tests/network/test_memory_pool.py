"""The ``queued.max.request.bytes`` memory pool: Kafka's non-strict SimpleMemoryPool on Trio."""

from __future__ import annotations

import trio
import trio.testing

from trio_broker.network.memory_pool import MemoryPool, UnboundedPool


async def test_allocation_succeeds_while_available_and_may_go_negative() -> None:
    pool = MemoryPool(100)
    assert (pool.available, pool.used, pool.out_of_memory) == (100, 0, False)
    assert pool.try_allocate(60)
    assert (pool.available, pool.used) == (40, 60)
    # Non-strict: 1 byte available is enough for any allocation.
    assert pool.try_allocate(1000)
    assert pool.available == -960
    assert pool.used == 1060
    assert pool.out_of_memory
    assert not pool.try_allocate(1)
    assert pool.available == -960  # a failed allocation takes nothing


async def test_exactly_zero_available_is_out_of_memory() -> None:
    pool = MemoryPool(10)
    assert pool.try_allocate(10)
    assert pool.available == 0
    assert pool.out_of_memory
    assert not pool.try_allocate(1)
    pool.release(1)
    assert not pool.out_of_memory
    assert pool.try_allocate(5)


async def test_release_restores_memory() -> None:
    pool = MemoryPool(100)
    assert pool.try_allocate(150)
    pool.release(150)
    assert (pool.available, pool.used, pool.out_of_memory) == (100, 0, False)


async def test_allocate_returns_at_once_when_available() -> None:
    pool = MemoryPool(100)
    # no scheduling round-trip on the hot path when memory is there
    with trio.testing.assert_no_checkpoints():
        await pool.allocate(30)
    assert pool.available == 70


async def test_allocate_waits_until_release(autojump_clock: trio.testing.MockClock) -> None:
    pool = MemoryPool(100)
    assert pool.try_allocate(100)
    done = trio.Event()

    async def reader() -> None:
        await pool.allocate(40)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.sleep(30)  # virtual: nothing but a release can wake the reader
        assert not done.is_set()
        assert pool.available == 0
        pool.release(100)
        await done.wait()
    assert pool.available == 60
    assert trio.current_time() == 30


async def test_release_that_leaves_pool_depleted_does_not_wake(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = MemoryPool(10)
    assert pool.try_allocate(30)  # available -20
    woke = trio.Event()

    async def reader() -> None:
        await pool.allocate(5)
        woke.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        pool.release(20)  # back to exactly 0: still out of memory
        await trio.sleep(1)
        assert not woke.is_set()
        pool.release(1)
        await woke.wait()
    assert pool.available == -4


async def test_waiters_that_cannot_allocate_wait_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = MemoryPool(10)
    assert pool.try_allocate(10)
    finished: list[str] = []

    async def reader(name: str) -> None:
        await pool.allocate(5)
        finished.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader, "a")
        nursery.start_soon(reader, "b")
        await trio.testing.wait_all_tasks_blocked()
        pool.release(1)  # one waiter gets it (non-strict, available goes to -4), the other waits
        await trio.sleep(1)
        assert len(finished) == 1
        assert pool.available == -4
        pool.release(9)
        await trio.sleep(1)
        assert sorted(finished) == ["a", "b"]
    assert pool.available == 0


async def test_depleted_time_is_measured(autojump_clock: trio.testing.MockClock) -> None:
    pool = MemoryPool(10)
    await trio.sleep(1)
    assert pool.try_allocate(10)
    await trio.sleep(2.5)
    pool.release(5)
    assert pool.depleted_seconds == 2.5
    # a second depletion adds to the total; releases while still depleted do not end it
    assert pool.try_allocate(20)
    await trio.sleep(1)
    pool.release(10)
    assert pool.depleted_seconds == 2.5
    await trio.sleep(3)
    pool.release(10)
    assert pool.depleted_seconds == 6.5


async def test_unbounded_pool_never_runs_out() -> None:
    pool = UnboundedPool()
    assert pool.try_allocate(10**12)
    with trio.testing.assert_no_checkpoints():
        await pool.allocate(10**12)
    pool.release(10**12)
    assert (pool.size, pool.available, pool.used, pool.out_of_memory) == (-1, -1, 0, False)
    assert pool.depleted_seconds == 0.0
