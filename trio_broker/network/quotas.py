"""Connection quotas checked by the acceptors (Kafka's ``ConnectionQuotas``).

Order of checks on accept, as in Kafka's ``ConnectionQuotas.inc``:

1. wait while the listener's or the broker's creation rate is exceeded, or while no connection
   slot is free (``max.connections``, ``listener.name.<l>.max.connections``);
2. refuse when the client's IP exceeds its connection creation rate quota (the dynamic
   ``connection_creation_rate`` quota of an ``ip`` entity, set with AlterClientQuotas):
   :class:`ConnectionThrottled`, the acceptor closes the socket after the throttle time, and the
   connection is not counted in any rate;
3. refuse at once when the client's IP already has ``max.connections.per.ip`` connections (or its
   override): :class:`TooManyConnections`, the acceptor closes the socket.
"""

from __future__ import annotations

import collections
import socket
from collections.abc import Callable, Mapping

import trio

from ..config import BrokerConfig


class TooManyConnections(Exception):
    """The per-IP connection limit is reached."""

    def __init__(self, ip: str, limit: int) -> None:
        self.ip = ip
        self.limit = limit
        super().__init__(f"too many connections from {ip} (limit {limit})")


class Rate:
    """A windowed event rate, as Kafka's ``Rate`` over ``quota.window.num`` samples."""

    def __init__(self, window_seconds: float, num_windows: int) -> None:
        self._window = window_seconds
        self._num = num_windows
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def _expire(self, now: float) -> None:
        horizon = now - self._window * self._num
        while self._samples and self._samples[0][0] <= horizon:
            self._samples.popleft()

    def unrecord(self, now: float) -> None:
        """Take back the last recorded event (a refused connection is not counted)."""
        if self._samples:
            start, count = self._samples[-1]
            if count > 1:
                self._samples[-1] = (start, count - 1)
            else:
                self._samples.pop()

    @property
    def empty(self) -> bool:
        return not self._samples

    def record(self, now: float) -> None:
        start = now - (now % self._window)
        if self._samples and self._samples[-1][0] == start:
            self._samples[-1] = (start, self._samples[-1][1] + 1)
        else:
            self._samples.append((start, 1))
        self._expire(now)

    def rate(self, now: float) -> float:
        self._expire(now)
        total = sum(count for _, count in self._samples)
        if not self._samples:
            return 0.0
        # Kafka's Rate.windowSize: elapsed since the oldest sample, at least (num - 1) windows.
        elapsed = max(now - self._samples[0][0], self._window * (self._num - 1))
        return total / elapsed

    def throttle_seconds(self, quota: float, now: float) -> float:
        """How long to wait before one more event keeps the rate within ``quota``.

        Kafka's ``QuotaUtils.throttleTime``, capped at one window as the acceptor caps it.
        """
        current = self.rate(now)
        if current <= quota:
            return 0.0
        if quota <= 0:
            return self._window
        elapsed = max(now - self._samples[0][0], self._window * (self._num - 1))
        # Whole milliseconds, at least one, as Kafka rounds its throttle times: a wait of a
        # few femtoseconds would not move the clock and the acceptor would spin.
        throttle_ms = max(round((current - quota) / quota * elapsed * 1000), 1)
        return min(throttle_ms / 1000, self._window)


class ConnectionThrottled(Exception):
    """The client's IP is over its connection creation rate quota."""

    def __init__(self, ip: str, throttle_seconds: float) -> None:
        self.ip = ip
        self.throttle_seconds = throttle_seconds
        super().__init__(f"connection rate of {ip} exceeded; throttled {throttle_seconds:.3f} s")


Resolver = Callable[[str], str]


def resolve_overrides(overrides: Mapping[str, int], resolve: Resolver | None = None
                      ) -> dict[str, int]:
    """Resolve host names in ``max.connections.per.ip.overrides`` to IPs (Kafka resolves them)."""
    resolve = resolve or socket.gethostbyname
    resolved: dict[str, int] = {}
    for host, limit in overrides.items():
        try:
            resolved[resolve(host)] = limit
        except OSError:
            resolved[host] = limit
    return resolved


class ConnectionQuotas:
    """Connection counts and limits for every listener of one broker."""

    def __init__(self, config: BrokerConfig, resolve: Resolver | None = None) -> None:
        self._config = config
        self._per_ip_default = config.max_connections_per_ip
        self._per_ip_overrides = resolve_overrides(config.ip_overrides, resolve)
        self._by_ip: collections.Counter[str] = collections.Counter()
        self._by_listener: collections.Counter[str] = collections.Counter()
        self._listener_max: dict[str, int] = {}
        self._listener_rate: dict[str, tuple[int, Rate]] = {}
        self._broker_rate = Rate(config.quota_window_size_seconds, config.quota_window_num)
        self._slot_freed = trio.lowlevel.ParkingLot()
        #: connection_creation_rate quotas by IP; the key None is the default for every IP.
        self._ip_rate_quotas: dict[str | None, float] = {}
        self._ip_rates: dict[str, Rate] = {}
        self.total = 0

    def add_listener(self, listener: str) -> None:
        self._listener_max[listener] = self._config.listener_setting(listener, "max.connections")
        quota = self._config.listener_setting(listener, "max.connection.creation.rate")
        rate = Rate(self._config.quota_window_size_seconds, self._config.quota_window_num)
        self._listener_rate[listener] = (quota, rate)

    def count(self, *, ip: str | None = None, listener: str | None = None) -> int:
        if ip is not None:
            return self._by_ip[ip]
        if listener is not None:
            return self._by_listener[listener]
        return self.total

    def max_for_ip(self, ip: str) -> int:
        return self._per_ip_overrides.get(ip, self._per_ip_default)

    def _slot_free(self, listener: str) -> bool:
        return (self._by_listener[listener] < self._listener_max[listener]
                and self.total < self._config.max_connections)

    def _rate_wait(self, listener: str, now: float) -> float:
        quota, rate = self._listener_rate[listener]
        waits = [rate.throttle_seconds(quota, now)]
        waits.append(self._broker_rate.throttle_seconds(self._config.max_connection_creation_rate,
                                                        now))
        return max(waits)

    async def wait_for_slot(self, listener: str) -> str | None:
        """Wait for a free slot and for the creation rates; returns why it waited, if it did."""
        if listener not in self._listener_max:
            raise KeyError(f"listener {listener} is not registered")
        reason: str | None = None
        # As Kafka's waitForConnectionSlot: one throttle wait computed up front, then wait for
        # a free slot as long as it takes.
        delay = self._rate_wait(listener, trio.current_time())
        if delay > 0:
            reason = "connection_rate"
            await trio.sleep(delay)
        while not self._slot_free(listener):
            reason = reason or "max_connections"
            await self._slot_freed.park()
        return reason

    def set_ip_connection_rate(self, ip: str | None, rate: float | None) -> None:
        """Set (or with None remove) the connection creation rate quota of ``ip``; ``ip`` None
        is the default quota of every IP without its own."""
        if rate is None:
            self._ip_rate_quotas.pop(ip, None)
        else:
            self._ip_rate_quotas[ip] = rate

    def ip_connection_rates(self) -> dict[str | None, float]:
        return dict(self._ip_rate_quotas)

    def _check_ip_rate(self, ip: str, now: float) -> None:
        quota = self._ip_rate_quotas.get(ip, self._ip_rate_quotas.get(None))
        if quota is None:
            self._ip_rates.pop(ip, None)
            return
        rate = self._ip_rates.get(ip)
        if rate is None:
            rate = self._ip_rates[ip] = Rate(self._config.quota_window_size_seconds,
                                             self._config.quota_window_num)
        rate.record(now)
        delay = rate.throttle_seconds(quota, now)
        if delay > 0:
            rate.unrecord(now)
            if rate.empty:
                del self._ip_rates[ip]
            raise ConnectionThrottled(ip, delay)

    def inc(self, listener: str, ip: str) -> None:
        """Count a new connection, or raise :class:`ConnectionThrottled` or
        :class:`TooManyConnections` (then nothing is counted)."""
        now = trio.current_time()
        self._check_ip_rate(ip, now)
        limit = self.max_for_ip(ip)
        if self._by_ip[ip] >= limit:
            raise TooManyConnections(ip, limit)
        self._listener_rate[listener][1].record(now)
        self._broker_rate.record(now)
        self._by_ip[ip] += 1
        self._by_listener[listener] += 1
        self.total += 1

    def dec(self, listener: str, ip: str) -> None:
        if self._by_ip[ip] <= 0:
            raise ValueError(f"attempted to decrease connection count for address with no "
                             f"connections, address: {ip}")
        self._by_ip[ip] -= 1
        if self._by_ip[ip] == 0:
            del self._by_ip[ip]
        self._by_listener[listener] -= 1
        self.total -= 1
        self._slot_freed.unpark_all()
