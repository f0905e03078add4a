"""The byte-weighted memory pool behind ``queued.max.request.bytes`` (Kafka's SimpleMemoryPool).

Non-strict, as Kafka configures it: an allocation succeeds whenever any memory is available, even
if it drives the balance negative; a reader whose frame cannot be allocated waits (its connection
is muted) until memory is released.
"""

from __future__ import annotations

import trio


class MemoryPool:
    """Shared by every processor of the broker's data plane."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._available = size
        self._released = trio.lowlevel.ParkingLot()
        self._depleted_since: float | None = None
        self.depleted_seconds = 0.0

    @property
    def available(self) -> int:
        return self._available

    @property
    def used(self) -> int:
        return self.size - self._available

    @property
    def out_of_memory(self) -> bool:
        return self._available <= 0

    def try_allocate(self, nbytes: int) -> bool:
        if self._available <= 0:
            return False
        self._available -= nbytes
        if self._available <= 0 and self._depleted_since is None:
            self._depleted_since = trio.current_time()
        return True

    async def allocate(self, nbytes: int) -> None:
        """Reserve ``nbytes``, waiting while the pool is depleted."""
        while not self.try_allocate(nbytes):
            await self._released.park()

    def release(self, nbytes: int) -> None:
        self._available += nbytes
        if self._available > 0:
            if self._depleted_since is not None:
                self.depleted_seconds += trio.current_time() - self._depleted_since
                self._depleted_since = None
            self._released.unpark_all()


class UnboundedPool:
    """Used when ``queued.max.request.bytes`` is not positive (Kafka's MemoryPool.NONE)."""

    size = -1
    available = -1
    used = 0
    out_of_memory = False
    depleted_seconds = 0.0

    def try_allocate(self, nbytes: int) -> bool:
        return True

    async def allocate(self, nbytes: int) -> None:
        return None

    def release(self, nbytes: int) -> None:
        return None
