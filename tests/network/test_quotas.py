"""Connection quotas checked by the acceptors, after Kafka's ``ConnectionQuotasTest``.

Everything timed runs on the autojump clock: waiting for a slot or for the creation rate costs
virtual time only.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_broker.config import BrokerConfig, load_config
from trio_broker.network.quotas import (
    ConnectionQuotas,
    Rate,
    TooManyConnections,
    resolve_overrides,
)

LISTENERS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
}


def config(**settings: str) -> BrokerConfig:
    return load_config(LISTENERS, {k.replace("_", "."): v for k, v in settings.items()})


def quotas_for(cfg: BrokerConfig, resolve: dict[str, str] | None = None) -> ConnectionQuotas:
    resolver = None if resolve is None else (lambda host: resolve.get(host, host))
    quotas = ConnectionQuotas(cfg, resolve=resolver)
    quotas.add_listener("PLAINTEXT")
    quotas.add_listener("EXTERNAL")
    return quotas


def ip(i: int) -> str:
    return f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"


async def connect(quotas: ConnectionQuotas, listener: str, address: str) -> str | None:
    """What the acceptor does for one accepted socket."""
    reason = await quotas.wait_for_slot(listener)
    quotas.inc(listener, address)
    return reason


# ------------------------------------------------------------------------------ counting
async def test_fail_when_no_listeners() -> None:
    quotas = ConnectionQuotas(config())
    with pytest.raises(KeyError):
        await quotas.wait_for_slot("PLAINTEXT")
    with pytest.raises(KeyError):
        quotas.inc("PLAINTEXT", "127.0.0.1")
    assert quotas.count() == 0
    assert quotas.count(ip="127.0.0.1") == 0


async def test_fail_decrement_for_unknown_ip() -> None:
    quotas = quotas_for(config())
    with pytest.raises(ValueError, match="10.0.0.1"):
        quotas.dec("PLAINTEXT", "10.0.0.1")
    await connect(quotas, "PLAINTEXT", "10.0.0.2")
    with pytest.raises(ValueError):
        quotas.dec("PLAINTEXT", "10.0.0.1")
    assert quotas.count() == 1


async def test_counts_by_ip_listener_and_total() -> None:
    quotas = quotas_for(config())
    await connect(quotas, "PLAINTEXT", "10.0.0.1")
    await connect(quotas, "PLAINTEXT", "10.0.0.1")
    await connect(quotas, "EXTERNAL", "10.0.0.2")
    assert quotas.count() == quotas.total == 3
    assert quotas.count(ip="10.0.0.1") == 2
    assert quotas.count(listener="PLAINTEXT") == 2
    assert quotas.count(listener="EXTERNAL") == 1
    quotas.dec("PLAINTEXT", "10.0.0.1")
    quotas.dec("PLAINTEXT", "10.0.0.1")
    assert quotas.count(ip="10.0.0.1") == 0
    assert (quotas.count(), quotas.count(listener="PLAINTEXT")) == (1, 0)


async def test_no_connection_limits_by_default(autojump_clock: trio.testing.MockClock) -> None:
    quotas = quotas_for(config())
    for listener in ("PLAINTEXT", "EXTERNAL"):
        for i in range(10_000):
            assert await connect(quotas, listener, ip(i % 100)) is None
    assert quotas.count() == 20_000
    assert quotas.count(listener="EXTERNAL") == 10_000
    assert quotas.count(ip=ip(7)) == 200
    assert trio.current_time() == 0  # nothing ever waited


# --------------------------------------------------------------------------------- per IP
async def test_max_connections_per_ip() -> None:
    quotas = quotas_for(config(max_connections_per_ip="3"))
    for _ in range(3):
        await connect(quotas, "PLAINTEXT", "10.0.0.1")
    for listener in ("PLAINTEXT", "EXTERNAL"):
        with pytest.raises(TooManyConnections) as info:
            await connect(quotas, listener, "10.0.0.1")
        assert (info.value.ip, info.value.limit) == ("10.0.0.1", 3)
    # nothing counted for the refused ones
    assert quotas.count(ip="10.0.0.1") == 3
    assert quotas.count() == 3
    assert quotas.count(listener="EXTERNAL") == 0
    # other IPs unaffected
    for _ in range(3):
        await connect(quotas, "EXTERNAL", "10.0.0.2")
    assert quotas.count(ip="10.0.0.2") == 3
    # a closed connection frees the IP's slot
    quotas.dec("PLAINTEXT", "10.0.0.1")
    await connect(quotas, "EXTERNAL", "10.0.0.1")
    assert quotas.count(ip="10.0.0.1") == 3


async def test_zero_max_connections_per_ip_with_override() -> None:
    quotas = quotas_for(config(max_connections_per_ip="0",
                               max_connections_per_ip_overrides="127.0.0.1:5"))
    for _ in range(5):
        await connect(quotas, "PLAINTEXT", "127.0.0.1")
    with pytest.raises(TooManyConnections):
        await connect(quotas, "PLAINTEXT", "127.0.0.1")
    with pytest.raises(TooManyConnections) as info:
        await connect(quotas, "PLAINTEXT", "10.0.0.9")
    assert info.value.limit == 0


async def test_per_ip_overrides_resolve_host_names() -> None:
    cfg = config(max_connections_per_ip="2",
                 max_connections_per_ip_overrides="broker-client.example:4,10.0.0.9:0")
    quotas = quotas_for(cfg, resolve={"broker-client.example": "10.1.2.3"})
    assert quotas.max_for_ip("10.1.2.3") == 4
    assert quotas.max_for_ip("10.0.0.9") == 0
    assert quotas.max_for_ip("10.0.0.8") == 2
    assert quotas.max_for_ip("broker-client.example") == 2  # counted by IP, never by name
    for _ in range(4):
        await connect(quotas, "PLAINTEXT", "10.1.2.3")
    with pytest.raises(TooManyConnections):
        await connect(quotas, "PLAINTEXT", "10.1.2.3")
    with pytest.raises(TooManyConnections):
        await connect(quotas, "PLAINTEXT", "10.0.0.9")


def test_resolve_overrides_keeps_unresolvable_hosts() -> None:
    def resolve(host: str) -> str:
        if host == "gone.example":
            raise OSError("no such host")
        return {"db.example": "10.0.0.5"}.get(host, host)

    resolved = resolve_overrides({"db.example": 1, "gone.example": 2, "10.0.0.6": 3}, resolve)
    assert resolved == {"10.0.0.5": 1, "gone.example": 2, "10.0.0.6": 3}


def test_resolve_overrides_default_resolver_handles_literal_ips() -> None:
    assert resolve_overrides({"127.0.0.1": 3}) == {"127.0.0.1": 3}


async def test_rejected_ip_connection_unrecorded_from_connection_rate_quotas(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Rate 1/s over 11 one-second windows lets 11 connections through at once. If the 50
    # refused connections had been recorded, the allowed IP would have to wait.
    quotas = quotas_for(config(max_connection_creation_rate="1",
                               listener_name_plaintext_max_connection_creation_rate="1",
                               max_connections_per_ip="0",
                               max_connections_per_ip_overrides="10.0.0.1:100"))
    for _ in range(50):
        with pytest.raises(TooManyConnections):
            await connect(quotas, "PLAINTEXT", "10.0.0.2")
    for _ in range(10):
        assert await connect(quotas, "PLAINTEXT", "10.0.0.1") is None
    assert trio.current_time() == 0


# ------------------------------------------------------------------------ max connections
async def test_max_broker_wide_connection_limit(autojump_clock: trio.testing.MockClock) -> None:
    quotas = quotas_for(config(max_connections="5"))
    for i in range(3):
        await connect(quotas, "PLAINTEXT", ip(i))
    for i in range(3, 5):
        await connect(quotas, "EXTERNAL", ip(i))
    reasons: dict[str, str | None] = {}

    async def accept(listener: str, address: str) -> None:
        reasons[address] = await connect(quotas, listener, address)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept, "PLAINTEXT", "10.9.0.1")
        nursery.start_soon(accept, "EXTERNAL", "10.9.0.2")
        await trio.sleep(60)
        assert reasons == {}  # both acceptors wait for a slot
        assert quotas.count() == 5
        quotas.dec("EXTERNAL", ip(4))
        await trio.sleep(1)
        assert len(reasons) == 1  # one slot: one acceptor goes on, the other keeps waiting
        assert quotas.count() == 5
        quotas.dec("PLAINTEXT", ip(0))
    assert reasons == {"10.9.0.1": "max_connections", "10.9.0.2": "max_connections"}
    assert quotas.count() == 5
    assert trio.current_time() == 61


async def test_max_listener_connection_limits(autojump_clock: trio.testing.MockClock) -> None:
    quotas = quotas_for(config(max_connections="100",
                               listener_name_external_max_connections="2"))
    await connect(quotas, "EXTERNAL", "10.0.0.1")
    await connect(quotas, "EXTERNAL", "10.0.0.2")
    done = trio.Event()

    async def accept() -> None:
        assert await connect(quotas, "EXTERNAL", "10.0.0.3") == "max_connections"
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accept)
        await trio.sleep(10)
        # the other listener is not limited by EXTERNAL's cap
        for i in range(20):
            assert await connect(quotas, "PLAINTEXT", ip(i)) is None
        # and closing a PLAINTEXT connection frees no EXTERNAL slot
        quotas.dec("PLAINTEXT", ip(0))
        await trio.sleep(10)
        assert not done.is_set()
        quotas.dec("EXTERNAL", "10.0.0.1")
        await done.wait()
    assert quotas.count(listener="EXTERNAL") == 2
    assert trio.current_time() == 20


async def test_max_connections_zero_on_listener_blocks_only_that_listener(
    autojump_clock: trio.testing.MockClock,
) -> None:
    quotas = quotas_for(config(listener_name_plaintext_max_connections="0"))
    with trio.move_on_after(5) as scope:
        await quotas.wait_for_slot("PLAINTEXT")
    assert scope.cancelled_caught
    assert await connect(quotas, "EXTERNAL", "10.0.0.1") is None


# --------------------------------------------------------------------------- rate limits
HORIZON = 11.0  # quota.window.num (11) x quota.window.size.seconds (1): what a Rate remembers


async def timed_connections(quotas: ConnectionQuotas, listener: str, n: int
                            ) -> tuple[float, list[str | None], list[float]]:
    """Connect ``n`` times back to back: elapsed virtual time, wait reasons, admission times."""
    start = trio.current_time()
    reasons: list[str | None] = []
    times: list[float] = []
    for i in range(n):
        reasons.append(await connect(quotas, listener, ip(i)))
        times.append(trio.current_time() - start)
    return trio.current_time() - start, reasons, times


def assert_paced(times: list[float], rate: int) -> None:
    """Admissions follow a Kafka ``Rate`` quota of ``rate`` per second.

    The Rate averages over at least 10 windows and forgets a window after 11, so (as in Kafka)
    admissions come in bursts at window boundaries; what holds is the long-run pace: n
    connections take about n / rate seconds, less at most one horizon of burst.
    """
    n = len(times)
    assert n / rate - HORIZON - 1 <= times[-1] <= n / rate, times[-1]


async def test_broker_connection_rate_limit_when_actual_rate_below_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    quotas = quotas_for(config(max_connection_creation_rate="10"))
    for i in range(100):  # 5 per second for 20 seconds, alternating listeners
        assert await connect(quotas, ("PLAINTEXT", "EXTERNAL")[i % 2], ip(i)) is None
        await trio.sleep(0.2)
    assert trio.current_time() == pytest.approx(20.0)


async def test_broker_connection_rate_limit_when_actual_rate_above_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Kafka's Rate measures over at least (quota.window.num - 1) windows = 10 s, so the first
    # 10 * rate connections go through at once; further ones wait for the rate: 200 connections
    # at 10/s take about (200 - 100) / 10 = 10 s of virtual time.
    quotas = quotas_for(config(max_connection_creation_rate="10"))
    elapsed, reasons, times = await timed_connections(quotas, "PLAINTEXT", 200)
    assert 9.0 <= elapsed <= 12.0
    assert reasons[:100] == [None] * 100
    assert "connection_rate" in reasons[100:]
    assert_paced(times, 10)
    # the broker-wide rate holds on every listener
    elapsed, reasons, _ = await timed_connections(quotas, "EXTERNAL", 20)
    assert elapsed >= 0.1
    assert "connection_rate" in reasons


async def test_listener_connection_rate_limit_when_actual_rate_above_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    quotas = quotas_for(config(listener_name_external_max_connection_creation_rate="20"))
    elapsed, reasons, _ = await timed_connections(quotas, "PLAINTEXT", 500)
    assert elapsed == 0  # no limit on PLAINTEXT
    assert set(reasons) == {None}
    elapsed, reasons, times = await timed_connections(quotas, "EXTERNAL", 400)
    assert 9.0 <= elapsed <= 12.0  # (400 - 10 * 20) / 20
    assert "connection_rate" in reasons
    assert_paced(times, 20)


@pytest.mark.timeout(3)
async def test_sustained_rate_limit_keeps_accepting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Over a minute of virtual time the acceptor keeps admitting about `rate` connections per
    # second; it must never spin on a throttle too small to move the clock (that hangs here).
    quotas = quotas_for(config(max_connection_creation_rate="10"))
    _, _, times = await timed_connections(quotas, "PLAINTEXT", 600)
    assert_paced(times, 10)


async def test_zero_broker_connection_rate_does_not_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # max.connection.creation.rate=0 is allowed (atLeast(0) in Kafka). Kafka's throttle time is
    # then unbounded and capped at one quota window (connections trickle in); it never fails.
    quotas = quotas_for(config(max_connection_creation_rate="0"))
    elapsed, reasons, _ = await timed_connections(quotas, "PLAINTEXT", 3)
    assert reasons[1:] == ["connection_rate", "connection_rate"]
    assert 0 < elapsed <= 3 * HORIZON


async def test_rate_and_count_limits_combined(autojump_clock: trio.testing.MockClock) -> None:
    quotas = quotas_for(config(max_connections="50", max_connection_creation_rate="2"))
    # 21 at once (2/s over 10 s, plus one), then the rate paces the rest up to the cap
    _, reasons, times = await timed_connections(quotas, "PLAINTEXT", 50)
    assert reasons[:21] == [None] * 21
    assert "connection_rate" in reasons
    assert_paced(times, 2)
    with trio.move_on_after(100) as scope:
        await quotas.wait_for_slot("PLAINTEXT")
    assert scope.cancelled_caught  # full: only a closed connection frees a slot now
    assert quotas.count() == 50


# ------------------------------------------------------------------------------- Rate
def test_rate_empty_is_zero() -> None:
    assert Rate(1, 11).rate(5.0) == 0.0
    assert Rate(1, 11).throttle_seconds(1, 5.0) == 0.0


def test_rate_uses_at_least_num_minus_one_windows() -> None:
    rate = Rate(1, 11)
    for _ in range(50):
        rate.record(0.0)
    assert rate.rate(0.0) == pytest.approx(5.0)  # 50 events / 10 s
    assert rate.rate(4.0) == pytest.approx(5.0)


def test_rate_over_elapsed_time_after_first_windows() -> None:
    rate = Rate(1, 11)
    for t in range(10):  # 10 per second for 10 seconds
        for _ in range(10):
            rate.record(t + 0.5)
    # Kafka's windowSize: the first window began at 0.5; at 10.0 only 9 whole windows have
    # passed, so one empty window is added (10.5 s); at 10.5, 10 whole windows (10 s).
    assert rate.rate(10.0) == pytest.approx(100 / 10.5)
    assert rate.rate(10.5) == pytest.approx(10.0)


def test_rate_samples_expire_after_all_windows() -> None:
    rate = Rate(2, 3)
    for _ in range(12):
        rate.record(0.1)
    # 0.9 s into the first window, plus the two missing windows: 4.9 s
    assert rate.rate(1.0) == pytest.approx(12 / 4.9)
    rate.record(4.5)  # a new window begins at its first event
    assert rate.rate(5.9) == pytest.approx(13 / 5.8)
    # Kafka purges a window whose last event is num x window (6 s) old: the 0.1 one at 6.1
    assert rate.rate(6.0) == pytest.approx(13 / 5.9)
    assert rate.rate(6.1) == pytest.approx(1 / 5.6)
    assert rate.rate(11.0) == 0.0


def test_rate_throttle_time_like_kafka() -> None:
    rate = Rate(1, 11)
    for _ in range(105):
        rate.record(0.0)
    # (observed - quota) / quota * window size = (10.5 - 10) / 10 * 10 s
    assert rate.throttle_seconds(10, 0.0) == pytest.approx(0.5)
    assert rate.throttle_seconds(11, 0.0) == 0.0
    # capped at one window, as the acceptor caps it
    assert rate.throttle_seconds(1, 0.0) == 1.0


def test_rate_throttle_wait_always_moves_the_clock() -> None:
    # The acceptor sleeps the throttle and asks again. A positive throttle that does not move a
    # float clock (now + d == now) makes that loop spin forever on the autojump clock.
    for quota in (5, 10, 30):
        rate = Rate(1, 11)
        now = 0.0
        for _ in range(40 * quota):
            for _attempt in range(10_000):
                delay = rate.throttle_seconds(quota, now)
                if delay <= 0:
                    break
                assert now + delay > now, f"quota {quota}: throttle {delay!r} at {now}"
                now += delay
            else:
                pytest.fail(f"quota {quota}: the throttle never reached zero in 10000 waits "
                            f"(still {rate.throttle_seconds(quota, now)!r} at {now})")
            rate.record(now)


def test_rate_throttle_with_zero_quota() -> None:
    rate = Rate(1, 11)
    rate.record(0.0)
    assert rate.throttle_seconds(0, 0.0) == 1.0  # Kafka: unbounded, capped at one window


async def test_ip_connection_rate_above_limit(autojump_clock: trio.testing.MockClock) -> None:
    """testIpConnectionRateWhenActualRateAboveLimit: over the IP quota inc() raises
    ConnectionThrottled (the acceptor is not blocked); other IPs are unaffected; the default
    quota applies to IPs without their own."""
    from trio_broker.network.quotas import ConnectionThrottled

    quotas = quotas_for(config(quota_window_num="2"))
    quotas.set_ip_connection_rate("10.0.0.1", 2.0)
    quotas.inc("PLAINTEXT", "10.0.0.1")
    quotas.inc("PLAINTEXT", "10.0.0.1")
    with pytest.raises(ConnectionThrottled) as throttled:
        quotas.inc("PLAINTEXT", "10.0.0.1")
    assert 0 < throttled.value.throttle_seconds <= 1.0
    for _ in range(10):
        quotas.inc("PLAINTEXT", "10.0.0.2")  # no quota for this one
    quotas.set_ip_connection_rate(None, 1.0)
    quotas.inc("PLAINTEXT", "10.0.0.3")
    with pytest.raises(ConnectionThrottled):
        quotas.inc("PLAINTEXT", "10.0.0.3")
    await trio.sleep(3)
    quotas.inc("PLAINTEXT", "10.0.0.3")  # the window has moved on


async def test_idle_ip_connection_rates_expire(autojump_clock: trio.testing.MockClock
                                               ) -> None:
    """Under a default IP quota every connecting IP gets a rate; one that has not connected
    within the quota windows is forgotten (Kafka expires idle IP sensors), so the rates kept
    are those of recent IPs, not of every IP ever seen. A forgotten IP starts afresh, which is
    what its old rate would have measured."""
    from trio_broker.network.quotas import ConnectionThrottled

    quotas = quotas_for(config(quota_window_num="2"))
    quotas.set_ip_connection_rate(None, 1.0)
    for i in range(1000):
        quotas.inc("PLAINTEXT", ip(i))
        quotas.dec("PLAINTEXT", ip(i))
    assert quotas.ip_rates_tracked == 1000
    await trio.sleep(1.0)
    quotas.inc("PLAINTEXT", ip(5000))  # still within the windows: nothing expires
    assert quotas.ip_rates_tracked == 1001
    await trio.sleep(1.5)
    quotas.inc("PLAINTEXT", ip(0))
    assert quotas.ip_rates_tracked == 2  # ip(5000), seen 1.5 s ago, and ip(0) again
    with pytest.raises(ConnectionThrottled):
        quotas.inc("PLAINTEXT", ip(0))  # its new rate counts as before


async def test_rejected_ip_connection_unrecorded_from_rates(
        autojump_clock: trio.testing.MockClock) -> None:
    """testRejectedIpConnectionUnrecordedFromConnectionRateQuotas: a throttled connection is not
    counted, so it neither uses a slot nor consumes the listener's or the broker's rate."""
    from trio_broker.network.quotas import ConnectionThrottled

    quotas = quotas_for(config(quota_window_num="2", max_connection_creation_rate="1"))
    quotas.set_ip_connection_rate("10.0.0.1", 1.0)
    quotas.inc("PLAINTEXT", "10.0.0.1")
    for _ in range(5):
        with pytest.raises(ConnectionThrottled):
            quotas.inc("PLAINTEXT", "10.0.0.1")
    assert quotas.count(ip="10.0.0.1") == 1
    assert quotas.count(listener="PLAINTEXT") == 1
    start = trio.current_time()
    await quotas.wait_for_slot("PLAINTEXT")
    assert trio.current_time() - start < 0.01  # the broker rate saw one connection, not six
