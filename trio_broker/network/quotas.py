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

from ..config import INT_MAX, BrokerConfig


class TooManyConnections(Exception):
    """The per-IP connection limit is reached."""

    def __init__(self, ip: str, limit: int) -> None:
        self.ip = ip
        self.limit = limit
        super().__init__(f"too many connections from {ip} (limit {limit})")


def to_ms(seconds: float) -> int:
    """A clock reading in whole milliseconds, as Kafka's ``time.milliseconds()`` (rounded so
    that float noise of the autojump clock never moves a reading across a millisecond)."""
    return round(seconds * 1000)


class _Sample:
    """One window of a sampled stat (Kafka's ``SampledStat.Sample``)."""

    __slots__ = ("start_ms", "last_event_ms", "value", "count")

    def __init__(self, now_ms: int) -> None:
        self.reset(now_ms)

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_event_ms = now_ms
        self.value = 0.0
        self.count = 0


class SampledStat:
    """Kafka's ``SampledStat``: ``num`` windows of ``window`` seconds (one extra is kept), a
    window starting at its first event; :meth:`total` and :meth:`average` combine them."""

    __slots__ = ("_window_ms", "_num", "_samples", "_current")

    def __init__(self, window_seconds: float, num_windows: int) -> None:
        self._window_ms = max(round(window_seconds * 1000), 1)
        self._num = num_windows
        self._samples: list[_Sample] = []
        self._current = 0

    def record_ms(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self._window_ms:
            # Kafka's advance: a ring of num + 1 samples (see purge below).
            self._current = (self._current + 1) % (self._num + 1)
            if self._current >= len(self._samples):
                sample = _Sample(now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.count += 1
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def purge(self, now_ms: int) -> None:
        """Reset samples without events in the last ``num`` windows (samples overlapping the
        monitored period are kept even if they started before it)."""
        expire = self._num * self._window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire:
                sample.reset(now_ms)

    def total(self, now_ms: int) -> float:
        self.purge(now_ms)
        return sum(sample.value for sample in self._samples)

    def average(self, now_ms: int) -> float:
        """Kafka's ``Avg``: the mean of the recorded values (0 when there is none)."""
        self.purge(now_ms)
        count = sum(sample.count for sample in self._samples)
        return sum(sample.value for sample in self._samples) / count if count else 0.0

    def oldest_start_ms(self, now_ms: int) -> int:
        if not self._samples:
            return now_ms
        return min(sample.start_ms for sample in self._samples)

    @property
    def empty(self) -> bool:
        return all(sample.value == 0 for sample in self._samples)

    def expired(self, now_ms: int) -> bool:
        """No event in the last ``num`` windows: :meth:`purge` would reset every sample, so
        the stat measures what a new one would."""
        expire = self._num * self._window_ms
        return all(now_ms - sample.last_event_ms >= expire for sample in self._samples)


class Rate:
    """Kafka's ``Rate`` over a :class:`SampledStat` sum: events (or bytes, or percent-seconds)
    per second over ``quota.window.num`` windows of ``quota.window.size.seconds``.

    Times are trio clock readings in seconds, taken in whole milliseconds as Kafka does.
    """

    __slots__ = ("_stat", "_window_ms", "_num")

    def __init__(self, window_seconds: float, num_windows: int) -> None:
        self._stat = SampledStat(window_seconds, num_windows)
        self._window_ms = max(round(window_seconds * 1000), 1)
        self._num = num_windows

    def record(self, now: float, value: float = 1.0) -> None:
        self._stat.record_ms(value, to_ms(now))

    def unrecord(self, now: float, value: float = 1.0) -> None:
        """Take back a recorded value: Kafka records its negative."""
        self._stat.record_ms(-value, to_ms(now))

    @property
    def empty(self) -> bool:
        return self._stat.empty

    def expired(self, now: float) -> bool:
        """Nothing recorded within the quota windows: a new Rate would measure the same."""
        return self._stat.expired(to_ms(now))

    def window_size_ms(self, now_ms: int) -> int:
        """Kafka's ``Rate.windowSize``: time since the oldest sample began; while fewer than
        ``num - 1`` whole windows have passed, the missing ones count as empty windows."""
        self._stat.purge(now_ms)
        elapsed = now_ms - self._stat.oldest_start_ms(now_ms)
        full = elapsed // self._window_ms
        if full < self._num - 1:
            elapsed += (self._num - 1 - full) * self._window_ms
        return max(elapsed, 1)

    def total(self, now: float) -> float:
        """What the windows still hold (the rate's numerator)."""
        return self._stat.total(to_ms(now))

    def rate_ms(self, now_ms: int) -> float:
        total = self._stat.total(now_ms)
        return total / (self.window_size_ms(now_ms) / 1000)

    def rate(self, now: float) -> float:
        return self.rate_ms(to_ms(now))

    def throttle_ms(self, quota: float, now: float) -> int:
        """Kafka's ``QuotaUtils.throttleTime`` when the rate exceeds ``quota``, else 0:
        ``round((rate - quota) / quota * windowSize)``, the delay that brings the rate back
        to the quota if nothing more is recorded."""
        now_ms = to_ms(now)
        current = self.rate_ms(now_ms)
        if current <= quota:
            return 0
        if quota <= 0:
            return 2**31 - 1
        return round((current - quota) / quota * self.window_size_ms(now_ms))

    def throttle_seconds(self, quota: float, now: float) -> float:
        """How long to wait before one more event keeps the rate within ``quota``, capped at
        one window as Kafka's ConnectionQuotas caps it (at least 1 ms, so that a wait always
        moves the clock and the acceptor never spins)."""
        throttle = self.throttle_ms(quota, now)
        if throttle <= 0:
            return 0.0
        return min(max(throttle, 1), self._window_ms) / 1000


class TokenBucket:
    """Kafka's ``TokenBucket`` (KIP-599): ``quota`` tokens per second, at most ``num x window x
    quota`` in the bucket; a recording takes tokens and may drive the bucket negative."""

    __slots__ = ("_burst_seconds", "tokens", "_last_ms")

    def __init__(self, window_seconds: float, num_windows: int) -> None:
        self._burst_seconds = num_windows * window_seconds
        self.tokens: float | None = None  # full on first use (Kafka refills from the epoch)
        self._last_ms = 0

    def _refill(self, quota: float, now_ms: int) -> None:
        burst = self._burst_seconds * quota
        if self.tokens is None:
            self.tokens = burst
        else:
            self.tokens = min(burst, self.tokens + quota * (now_ms - self._last_ms) / 1000)
        self._last_ms = now_ms

    def measure(self, quota: float, now: float) -> float:
        self._refill(quota, to_ms(now))
        assert self.tokens is not None
        return self.tokens

    def record(self, quota: float, value: float, now: float) -> None:
        self._refill(quota, to_ms(now))
        assert self.tokens is not None
        self.tokens = min(self._burst_seconds * quota, self.tokens - value)


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
        self._ip_rates_swept_at = 0.0
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
        # A rate quota of INT_MAX (the default: unlimited) cannot be exceeded (it would take
        # billions of connections within the quota windows), so its throttle time is not
        # computed: that was a tenth of the acceptor's CPU per connection.
        quota, rate = self._listener_rate[listener]
        wait = rate.throttle_seconds(quota, now) if quota < INT_MAX else 0.0
        broker_quota = self._config.max_connection_creation_rate
        if broker_quota < INT_MAX:
            wait = max(wait, self._broker_rate.throttle_seconds(broker_quota, now))
        return wait

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

    @property
    def ip_rates_tracked(self) -> int:
        """IPs whose connection creation rate is being measured."""
        return len(self._ip_rates)

    def _expire_ip_rates(self, now: float) -> None:
        """Drop the rates of IPs that have not connected within the quota windows, checked once
        per those windows: as Kafka expires an idle IP's sensor, so that a default IP quota
        keeps one Rate per recently seen IP, not per IP ever seen (an IPv6 client has a /64 of
        addresses to connect from)."""
        config = self._config
        span = config.quota_window_size_seconds * config.quota_window_num
        if now - self._ip_rates_swept_at < span:
            return
        self._ip_rates_swept_at = now
        for ip in [ip for ip, rate in self._ip_rates.items() if rate.expired(now)]:
            del self._ip_rates[ip]

    def _check_ip_rate(self, ip: str, now: float) -> None:
        quota = self._ip_rate_quotas.get(ip, self._ip_rate_quotas.get(None))
        if quota is None:
            self._ip_rates.pop(ip, None)
            return
        self._expire_ip_rates(now)
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
        # Rates are recorded only where a quota reads them (see _rate_wait).
        quota, rate = self._listener_rate[listener]
        if quota < INT_MAX:
            rate.record(now)
        if self._config.max_connection_creation_rate < INT_MAX:
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
