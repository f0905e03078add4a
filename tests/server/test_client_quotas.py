"""User and client-id quotas end to end in-process: AlterClientQuotas / DescribeClientQuotas on
the wire, then throttling (KIP-219) with Kafka's throttle times, on the autojump clock.

Expected throttle times are computed the way Kafka computes them: a fresh sensor at time 0 has
seen 0 whole windows, so its rate is divided by ``quota.window.num - 1`` = 10 windows (10 s),
and the throttle is ``round((rate - quota) / quota x 10000)`` ms.
"""

from __future__ import annotations

import datetime
import json
import sys
from typing import Any

import pytest
import trio
import trio.testing
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import f64, i8

from tests.kafka_wire import WireClient
from tests.server.test_produce_fetch import batch, fetch_body, produce_body
from trio_broker.protocol.codec import decode_response, request_schema
from trio_broker.server.quota_manager import resolve

API_VERSIONS, PRODUCE, FETCH, METADATA = 18, 0, 1, 3
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
DESCRIBE_QUOTAS, ALTER_QUOTAS = 48, 49
API_VERSIONS_V3 = ApiVersionsRequest(client_software_name="quota-test",
                                     client_software_version="1.0")
WINDOW_MS = 10_000  # (quota.window.num - 1) x quota.window.size.seconds, for a fresh sensor


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


def ms(body: Any) -> int:
    return round(body.throttle_time.total_seconds() * 1000)


def kafka_throttle(value: float, quota: float, window_ms: int = WINDOW_MS) -> int:
    """Kafka's QuotaUtils.throttleTime for ``value`` recorded on a fresh sensor."""
    rate = value / (window_ms / 1000)
    return round((rate - quota) / quota * window_ms) if rate > quota else 0


async def alter(port: int, entity: dict[str, str | None], ops: dict[str, float | None], *,
                validate_only: bool = False) -> list[tuple[Any, str | None]]:
    m = mod(ALTER_QUOTAS, 1)
    client = await WireClient.connect(port, client_id="admin")
    body = await client.request(ALTER_QUOTAS, 1, m.AlterClientQuotasRequest(
        entries=(m.EntryData(
            entity=tuple(m.EntityData(entity_type=k, entity_name=v) for k, v in entity.items()),
            ops=tuple(m.OpData(key=k, value=f64(float(v or 0.0)), remove=v is None)
                      for k, v in ops.items())),),
        validate_only=validate_only))
    await client.aclose()
    return [(e.error_code, e.error_message) for e in body.entries]


async def describe(port: int, *components: tuple[str, int, str | None],
                   strict: bool = False) -> Any:
    m = mod(DESCRIBE_QUOTAS, 1)
    client = await WireClient.connect(port, client_id="admin")
    body = await client.request(DESCRIBE_QUOTAS, 1, m.DescribeClientQuotasRequest(
        components=tuple(m.ComponentData(entity_type=t, match_type=i8(mt), match=match)
                         for t, mt, match in components), strict=strict))
    await client.aclose()
    return body


def entries(body: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity):
            {v.key: v.value for v in entry.values} for entry in body.entries}


OK = [(ErrorCode.none, None)]


# ------------------------------------------------------------------------- precedence
def test_resolve_follows_kafkas_eight_levels() -> None:
    """Remove the most specific entity one at a time: the next level takes over."""
    levels = [
        ((("client-id", "app"), ("user", "alice")), ("alice", "app")),
        ((("client-id", None), ("user", "alice")), ("alice", "app")),
        ((("user", "alice"),), ("alice", "")),
        ((("client-id", "app"), ("user", None)), ("alice", "app")),
        ((("client-id", None), ("user", None)), ("alice", "app")),
        ((("user", None),), ("alice", "")),
        ((("client-id", "app"),), ("", "app")),
        ((("client-id", None),), ("", "app")),
    ]
    values = {entity: float(i + 1) for i, (entity, _) in enumerate(levels)}
    for i, (entity, tags) in enumerate(levels):
        assert resolve(values, "alice", "app") == (tags, float(i + 1))
        del values[entity]
    assert resolve(values, "alice", "app") == (("", "app"), None)
    # other users and clients only see the defaults
    values = {entity: float(i + 1) for i, (entity, _) in enumerate(levels)}
    assert resolve(values, "bob", "app") == (("bob", "app"), 4.0)
    assert resolve(values, "bob", "other") == (("bob", "other"), 5.0)
    assert resolve(values, "alice", "other") == (("alice", "other"), 2.0)


# ------------------------------------------------------------------- alter / describe
async def test_alter_and_describe_users_clients_and_combined(start_broker: Any,
                                                             tmp_path: Any) -> None:
    data = {"log.dirs": str(tmp_path / "q")}
    running = await start_broker(data)
    port = running.port
    assert await alter(port, {"user": "alice"}, {"producer_byte_rate": 1024}) == OK
    assert await alter(port, {"user": None}, {"consumer_byte_rate": 2048}) == OK
    assert await alter(port, {"client-id": "app"}, {"request_percentage": 12.5}) == OK
    assert await alter(port, {"user": "alice", "client-id": "app"},
                       {"producer_byte_rate": 10, "controller_mutation_rate": 2.5}) == OK
    assert await alter(port, {"user": "alice", "client-id": None},
                       {"consumer_byte_rate": 300}) == OK
    assert await alter(port, {"ip": "10.0.0.1"}, {"connection_creation_rate": 5}) == OK
    everything = entries(await describe(port))
    assert everything == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("user", None),): {"consumer_byte_rate": 2048.0},
        (("client-id", "app"),): {"request_percentage": 12.5},
        (("user", "alice"), ("client-id", "app")): {"producer_byte_rate": 10.0,
                                                     "controller_mutation_rate": 2.5},
        (("user", "alice"), ("client-id", None)): {"consumer_byte_rate": 300.0},
        (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
    }
    # MATCH_EXACT, non-strict: every entity naming alice
    assert set(entries(await describe(port, ("user", 0, "alice")))) == {
        (("user", "alice"),), (("user", "alice"), ("client-id", "app")),
        (("user", "alice"), ("client-id", None))}
    # strict: only the entity with exactly these components
    assert set(entries(await describe(port, ("user", 0, "alice"), strict=True))) == {
        (("user", "alice"),)}
    # MATCH_DEFAULT
    assert set(entries(await describe(port, ("user", 1, None)))) == {(("user", None),)}
    assert set(entries(await describe(port, ("user", 0, "alice"), ("client-id", 1, None)))) \
        == {(("user", "alice"), ("client-id", None))}
    # MATCH_SPECIFIED: any client-id, default included
    assert set(entries(await describe(port, ("client-id", 2, None)))) == {
        (("client-id", "app"),), (("user", "alice"), ("client-id", "app")),
        (("user", "alice"), ("client-id", None))}
    assert set(entries(await describe(port, ("client-id", 2, None), strict=True))) == {
        (("client-id", "app"),)}
    assert set(entries(await describe(port, ("ip", 2, None)))) == {(("ip", "10.0.0.1"),)}
    # removing keys; an entity without keys is gone
    assert await alter(port, {"user": "alice", "client-id": "app"},
                       {"producer_byte_rate": None, "controller_mutation_rate": None}) == OK
    assert (("user", "alice"), ("client-id", "app")) not in entries(await describe(port))
    # validate_only changes nothing
    assert await alter(port, {"user": "bob"}, {"producer_byte_rate": 1}, validate_only=True) \
        == OK
    assert (("user", "bob"),) not in entries(await describe(port))
    # persisted: a restarted broker has them all
    await running.shutdown()
    saved = json.loads((tmp_path / "q" / "client-quotas.json").read_text())
    assert {"entity": {"user": None}, "quotas": {"consumer_byte_rate": 2048.0}} in saved
    again = await start_broker(data)
    assert entries(await describe(again.port)) == {
        k: v for k, v in everything.items() if k != (("user", "alice"), ("client-id", "app"))}


@pytest.mark.parametrize(("entity", "ops", "message"), [
    ({"user": "a"}, {"produce_byte_rate": 1}, "Invalid configuration key produce_byte_rate"),
    ({"user": "a"}, {"connection_creation_rate": 1},
     "Invalid configuration key connection_creation_rate"),
    ({"ip": "10.0.0.1"}, {"producer_byte_rate": 1},
     "Invalid configuration key producer_byte_rate"),
    ({"client-id": "a"}, {"producer_byte_rate": 0}, "Quota producer_byte_rate must be greater "
                                                     "than 0"),
    ({"client-id": "a"}, {"request_percentage": -5}, "Quota request_percentage must be greater "
                                                     "than 0"),
    ({"client-id": "a"}, {"consumer_byte_rate": 1.5}, "consumer_byte_rate cannot be a "
                                                      "fractional value."),
    ({"ip": "10.0.0.1"}, {"connection_creation_rate": 3e9},
     "Proposed value for connection_creation_rate is too large for an INT."),
    ({"user": "a", "ip": "10.0.0.1"}, {"producer_byte_rate": 1},
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ({"group": "g"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: group"),
    ({"user": ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
    ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
    ({"ip": "not-an-ip"}, {"connection_creation_rate": 1},
     "not-an-ip is not a valid IP or resolvable host."),
])
async def test_alter_refusals_as_kafka(start_broker: Any, entity: dict[str, str | None],
                                       ops: dict[str, float], message: str) -> None:
    running = await start_broker()
    assert await alter(running.port, entity, ops) == [(ErrorCode.invalid_request, message)]
    assert entries(await describe(running.port)) == {}


async def test_alter_refuses_a_bad_op_for_the_whole_entity(start_broker: Any) -> None:
    running = await start_broker()
    result = await alter(running.port, {"user": "a"},
                         {"producer_byte_rate": 100, "consumer_byte_rate": 0})
    assert result == [(ErrorCode.invalid_request, "Quota consumer_byte_rate must be greater "
                                                  "than 0")]
    assert entries(await describe(running.port)) == {}
    # removing a key that is not set, even an unknown one, is no error
    assert await alter(running.port, {"user": "a"}, {"whatever": None}) == OK


@pytest.mark.parametrize(("components", "error", "message"), [
    ([("", 2, None)], ErrorCode.invalid_request, "Invalid empty entity type."),
    ([("user", 2, None), ("user", 0, "a")], ErrorCode.invalid_request,
     "Entity type user cannot appear more than once in the filter."),
    ([("group", 2, None)], ErrorCode.unsupported_version, "Unsupported entity type group"),
    ([("user", 0, None)], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([("user", 1, "a")], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([("user", 2, "a")], ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([("user", 7, None)], ErrorCode.invalid_request, "Unknown match type 7"),
    ([("ip", 2, None), ("client-id", 2, None)], ErrorCode.invalid_request,
     "Invalid entity filter component combination. IP filter component should not be used "
     "with user or clientId filter component."),
])
async def test_describe_refusals_as_kafka(start_broker: Any, components: list[Any],
                                          error: ErrorCode, message: str) -> None:
    running = await start_broker()
    body = await describe(running.port, *components)
    assert (body.error_code, body.error_message, body.entries) == (error, message, None)


# ----------------------------------------------------------------------------- helpers
async def produce(client: WireClient, size: int, acks: int = -1) -> Any:
    body = produce_body(9, {("t", 0): batch(b"x" * size)}, acks=acks)
    if acks == 0:
        await client.send(PRODUCE, 9, body)
        return None
    return await client.request(PRODUCE, 9, body)


async def request_bytes(log_events: Any, client_id: str) -> int:
    lines = await log_events.wait_for("request", api="Produce", client_id=client_id)
    return int(lines[-1]["request_bytes"])


async def quota_broker(start_broker: Any, **settings: str) -> Any:
    running = await start_broker(settings)
    running.broker.log_manager.create_topic("t", 1)
    return running


async def next_answer_after(client: WireClient) -> float:
    """Send ApiVersions at once; how long until it is answered (the connection's mute)."""
    sent = trio.current_time()
    await client.request(API_VERSIONS, 3, API_VERSIONS_V3)
    return trio.current_time() - sent


# ------------------------------------------------------------------------ byte rates
async def test_producer_byte_rate_throttle_time_and_mute(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await quota_broker(start_broker)
    quota = 1000.0
    assert await alter(running.port, {"client-id": "p"}, {"producer_byte_rate": quota}) == OK
    client = await WireClient.connect(running.port, client_id="p")
    answer = await produce(client, 20_000)
    muted = await next_answer_after(client)  # before anything else lets virtual time pass
    size = await request_bytes(log_events, "p")
    expected = kafka_throttle(size, quota)
    assert expected > 1000
    assert ms(answer) == expected
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none
    # the data was appended, not dropped
    assert running.broker.log_manager.get_partition("t", 0).high_watermark == 1
    assert muted == pytest.approx(expected / 1000, abs=1e-6)
    started = await log_events.wait_for("throttle_started", client_id="p")
    assert started[0]["quota_type"] == "producer_byte_rate"
    assert started[0]["user"] == "ANONYMOUS"
    assert started[0]["throttle_ms"] == expected
    assert await log_events.wait_for("throttle_ended", client_id="p")
    line = (await log_events.wait_for("request", api="Produce", client_id="p"))[0]
    assert line["throttle_ms"] == expected
    # another client is not throttled
    other = await WireClient.connect(running.port, client_id="other")
    assert ms(await produce(other, 20_000)) == 0
    # the metrics name the client
    text = running.app.metrics.exposition().decode()
    assert 'kafka_server_produce_byte_rate{client_id="p",user=""}' in text
    assert f'kafka_server_produce_throttle_time{{client_id="p",user=""}} {float(expected)}' \
        in text


async def test_throttle_beyond_int32_is_the_longest_the_field_carries(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    """producer_byte_rate=1 against a 2.7 MB request asks for a 2.7e9 ms throttle, more than
    throttle_time_ms (an INT32) holds: the response carries 2**31 - 1 and the records are
    acknowledged. Encoding it used to fail after the records were written: the client got
    UNKNOWN_SERVER_ERROR (and would retry: duplicates) and no throttle (Kafka's toInt wraps)."""
    running = await start_broker()
    running.broker.log_manager.create_topic("t", 3)
    assert await alter(running.port, {"client-id": "p"}, {"producer_byte_rate": 1}) == OK
    client = await WireClient.connect(running.port, client_id="p")
    data = batch(b"x" * 900_000)
    answer = await client.request(PRODUCE, 9, produce_body(
        9, {("t", 0): data, ("t", 1): data, ("t", 2): data}))
    assert kafka_throttle(3 * len(data), 1) > 2**31 - 1
    assert ms(answer) == 2**31 - 1
    assert [p.error_code for p in answer.responses[0].partition_responses] == [
        ErrorCode.none] * 3
    line = (await log_events.wait_for("request", api="Produce", client_id="p"))[0]
    assert (line["error"], line["throttle_ms"]) == ("NONE", 2**31 - 1)
    assert (await log_events.wait_for("throttle_started", client_id="p"))[0][
        "throttle_ms"] == 2**31 - 1
    await client.aclose()


async def test_acks_zero_over_quota_sends_nothing_and_mutes(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await quota_broker(start_broker)
    assert await alter(running.port, {"client-id": "p0"}, {"producer_byte_rate": 1000}) == OK
    client = await WireClient.connect(running.port, client_id="p0")
    await produce(client, 20_000, acks=0)
    waited = await next_answer_after(client)  # the first answer is ApiVersions': none for acks=0
    expected = kafka_throttle(await request_bytes(log_events, "p0"), 1000)
    assert waited == pytest.approx(expected / 1000, abs=1e-6)
    started = await log_events.wait_for("throttle_started", client_id="p0")
    assert (started[0]["quota_type"], started[0]["throttle_ms"]) == ("producer_byte_rate",
                                                                     expected)
    assert running.broker.log_manager.get_partition("t", 0).high_watermark == 1


async def fetch_payload(client: WireClient, max_bytes: int = 1 << 20) -> tuple[int, Any]:
    await client.send(FETCH, 12, fetch_body(12, {("t", 0): 0}, max_bytes=max_bytes))
    payload = await client.receive_frame()
    assert payload is not None
    client._sent.clear()
    return len(payload), decode_response(FETCH, 12, payload)[1]


async def test_consumer_byte_rate_caps_fetches_then_throttles_with_no_data(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await quota_broker(start_broker)
    producer = await WireClient.connect(running.port, client_id="writer")
    for _ in range(3):
        await produce(producer, 3000)
    free = await WireClient.connect(running.port, client_id="free")
    _, full = await fetch_payload(free)
    records = len(full.responses[0].partitions[0].records)
    quota = 500.0
    assert await alter(running.port, {"client-id": "c"}, {"consumer_byte_rate": quota}) == OK
    consumer = await WireClient.connect(running.port, client_id="c")
    payload_size, first = await fetch_payload(consumer)
    # Kafka caps the fetch at quota x (num - 1) windows = 5000 bytes: one ~3 KB batch of three
    capped = len(first.responses[0].partitions[0].records)
    assert 3000 < capped <= 5000 < records
    size = payload_size - 5  # less the correlation id and the flexible header's tag section
    assert ms(first) == kafka_throttle(size, quota) == 0
    # the same fetch again: twice the bytes in the window, over the quota: no data this time
    _, second = await fetch_payload(consumer)
    muted = await next_answer_after(consumer)
    expected = kafka_throttle(2 * size, quota)
    assert ms(second) == expected > 0
    assert second.responses == ()
    assert muted == pytest.approx(expected / 1000, abs=1e-6)
    started = await log_events.wait_for("throttle_started", client_id="c")
    assert (started[0]["quota_type"], started[0]["throttle_ms"]) == ("consumer_byte_rate",
                                                                     expected)
    # the unsent bytes were taken back: the client's sensor holds the first fetch only
    sensors = running.broker.client_quotas.managers.fetch.sensors[("", "c")]
    assert sensors.rate.total(trio.current_time()) == size


async def test_consumer_byte_rate_exact_throttle_of_one_fetch(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await quota_broker(start_broker)
    producer = await WireClient.connect(running.port, client_id="writer")
    await produce(producer, 3000)
    free = await WireClient.connect(running.port, client_id="free")
    payload_size, _ = await fetch_payload(free)
    size = payload_size - 5
    quota = 100.0  # cap 1000 bytes: still one whole batch; rate size/10 > 100
    assert await alter(running.port, {"client-id": "c"}, {"consumer_byte_rate": quota}) == OK
    consumer = await WireClient.connect(running.port, client_id="c")
    _, answer = await fetch_payload(consumer)
    assert ms(answer) == kafka_throttle(size, quota) > 0
    assert answer.responses == ()
    # after the throttle the bytes were not charged: the same fetch is throttled the same way
    await trio.sleep(ms(answer) / 1000)
    _, again = await fetch_payload(consumer)
    assert again.responses == ()


# --------------------------------------------------------------------- request quota
async def test_request_percentage_throttle_is_capped_at_one_window(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await start_broker({"quota.window.size.seconds": "2"})
    assert await alter(running.port, {"client-id": "busy"}, {"request_percentage": 1e-9}) == OK
    client = await WireClient.connect(running.port, client_id="busy")
    m = mod(METADATA, 12)
    answer = await client.request(METADATA, 12, m.MetadataRequest(
        topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    # any handler time is far over 1e-9 %: ClientRequestQuotaManager caps at one window (2 s)
    muted = await next_answer_after(client)
    assert ms(answer) == 2000
    assert muted == pytest.approx(2.0, abs=1e-6)
    started = await log_events.wait_for("throttle_started", client_id="busy")
    assert started[0]["quota_type"] == "request_percentage"
    text = running.app.metrics.exposition().decode()
    assert 'kafka_server_request_request_time{client_id="busy",user=""}' in text


# ------------------------------------------------------------ precedence on the wire
async def test_precedence_and_changes_apply_at_once(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await quota_broker(start_broker)
    port = running.port
    await alter(port, {"client-id": None}, {"producer_byte_rate": 100})       # level 8
    await alter(port, {"client-id": "app"}, {"producer_byte_rate": 200})      # level 7
    await alter(port, {"user": None}, {"producer_byte_rate": 400})            # level 6
    await alter(port, {"user": "ANONYMOUS"}, {"producer_byte_rate": 800})     # level 3
    client = await WireClient.connect(port, client_id="app")
    first = await produce(client, 20_000)
    size = await request_bytes(log_events, "app")
    assert ms(first) == kafka_throttle(size, 800)  # the user quota wins over client-id ones
    await trio.sleep(ms(first) / 1000)
    # a user + client-id quota is more specific still: it applies to the next request, to a
    # new sensor (its tags are (user, client-id), the user quota's were (user, ""))
    await alter(port, {"user": "ANONYMOUS", "client-id": "app"}, {"producer_byte_rate": 1600})
    second = await produce(client, 20_000)
    assert ms(second) == kafka_throttle(size, 1600)
    await trio.sleep(ms(second) / 1000)
    # raising the quota applies at once, with the rate measured so far
    await alter(port, {"user": "ANONYMOUS", "client-id": "app"},
                {"producer_byte_rate": 10_000_000})
    assert ms(await produce(client, 20_000)) == 0
    # removing every quota of the type: nothing is throttled any more
    for entity in ({"client-id": None}, {"client-id": "app"}, {"user": None},
                   {"user": "ANONYMOUS"}, {"user": "ANONYMOUS", "client-id": "app"}):
        assert await alter(port, entity, {"producer_byte_rate": None}) == OK
    assert ms(await produce(client, 200_000)) == 0
    # the default client-id quota counts each client id on its own
    await alter(port, {"client-id": None}, {"producer_byte_rate": 100})
    one = await WireClient.connect(port, client_id="one")
    two = await WireClient.connect(port, client_id="two")
    assert ms(await produce(one, 5000)) == ms(await produce(two, 5000)) > 0


# ------------------------------------------------------------ controller mutations
def creatable(m: Any, name: str, partitions: int) -> Any:
    return m.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                            assignments=(), configs=())


async def create_topics(client: WireClient, version: int, topics: dict[str, int]) -> Any:
    m = mod(CREATE_TOPICS, version)
    return await client.request(CREATE_TOPICS, version, m.CreateTopicsRequest(
        topics=tuple(creatable(m, n, p) for n, p in topics.items()),
        timeout=datetime.timedelta(seconds=5), validate_only=False))


async def test_controller_mutation_rate_strict_create_topics(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await start_broker()
    assert await alter(running.port, {"client-id": "admin-x"},
                       {"controller_mutation_rate": 1}) == OK
    client = await WireClient.connect(running.port, client_id="admin-x")
    # bucket: 11 windows x 1 s x 1/s = 11 tokens. 10 → 1 left; 5 is accepted (bucket not yet
    # negative) → -4; the next topic is refused; the client waits 4 s for the bucket to refill.
    body = await create_topics(client, 7, {"a": 10, "b": 5, "c": 1})
    muted = await next_answer_after(client)
    codes = [(t.name, t.error_code) for t in body.topics]
    assert codes == [("a", ErrorCode.none), ("b", ErrorCode.none),
                     ("c", ErrorCode.throttling_quota_exceeded)]
    assert body.topics[2].error_message == "The throttling quota has been exceeded."
    assert ms(body) == 4000
    assert "c" not in running.broker.log_manager.topics
    started = await log_events.wait_for("throttle_started", client_id="admin-x")
    assert started[0]["quota_type"] == "controller_mutation_rate"
    assert muted == pytest.approx(4.0, abs=1e-6)
    # the bucket is back at 0: one topic goes through, and empties it again
    body = await create_topics(client, 7, {"c": 1, "d": 1})
    assert [t.error_code for t in body.topics] == [ErrorCode.none,
                                                   ErrorCode.throttling_quota_exceeded]
    assert ms(body) == 1000


async def test_controller_mutation_rate_permissive_before_v6(
        start_broker: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await start_broker()
    await alter(running.port, {"client-id": "old"}, {"controller_mutation_rate": 1})
    client = await WireClient.connect(running.port, client_id="old")
    body = await create_topics(client, 5, {"a": 10, "b": 5, "c": 1})
    assert [t.error_code for t in body.topics] == [ErrorCode.none] * 3
    assert ms(body) == 5000  # 11 - 16 = -5 tokens at 1/s


async def test_controller_mutation_rate_delete_and_create_partitions(
        start_broker: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await start_broker()
    lm = running.broker.log_manager
    for name in ("x", "y"):
        lm.create_topic(name, 8)
    await alter(running.port, {"user": "ANONYMOUS"}, {"controller_mutation_rate": 1})
    client = await WireClient.connect(running.port, client_id="any")
    m = mod(CREATE_PARTITIONS, 3)
    body = await client.request(CREATE_PARTITIONS, 3, m.CreatePartitionsRequest(
        topics=(m.CreatePartitionsTopic(name="x", count=20, assignments=None),
                m.CreatePartitionsTopic(name="y", count=9, assignments=None)),
        timeout=datetime.timedelta(seconds=5), validate_only=False))
    # 12 new partitions of x: 11 - 12 = -1; y is refused; 1 s to refill
    assert [r.error_code for r in body.results] == [ErrorCode.none,
                                                    ErrorCode.throttling_quota_exceeded]
    assert ms(body) == 1000
    await trio.sleep(1)
    m = mod(DELETE_TOPICS, 5)
    body = await client.request(DELETE_TOPICS, 5, m.DeleteTopicsRequest(
        topic_names=("y", "x"), timeout=datetime.timedelta(seconds=5)))
    # deleting y costs its 8 partitions (0 → -8); x is refused
    assert [r.error_code for r in body.responses] == [ErrorCode.none,
                                                      ErrorCode.throttling_quota_exceeded]
    assert ms(body) == 8000
    assert "x" in lm.topics and "y" not in lm.topics


# ------------------------------------------------------- the throttle wait is cancellable
async def test_shutdown_during_a_throttle_is_immediate(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await quota_broker(start_broker)
    await alter(running.port, {"client-id": "p"}, {"producer_byte_rate": 1})
    client = await WireClient.connect(running.port, client_id="p")
    answer = await produce(client, 10_000)
    assert ms(answer) > 100_000
    started = trio.current_time()
    await running.shutdown()
    assert trio.current_time() - started < 0.5
    assert await client.closed_by_peer()
    closed = await log_events.wait_for("connection_closed", reason="shutdown")
    assert closed


async def test_idle_expiry_during_a_throttle(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await quota_broker(start_broker, **{"connections.max.idle.ms": "3000"})
    await alter(running.port, {"client-id": "p"}, {"producer_byte_rate": 1})
    client = await WireClient.connect(running.port, client_id="p")
    answer = await produce(client, 10_000)
    assert ms(answer) > 100_000
    sent = trio.current_time()
    assert await client.closed_by_peer()
    assert trio.current_time() - sent == pytest.approx(3.0, abs=1e-6)
    assert await log_events.wait_for("connection_expired")


async def test_pipelined_connection_is_muted_for_the_throttle_too(
        start_broker: Any, log_events: Any, autojump_clock: trio.testing.MockClock) -> None:
    running = await quota_broker(start_broker, **{"connection.max.inflight.requests": "8"})
    await alter(running.port, {"client-id": "p"}, {"producer_byte_rate": 1000})
    client = await WireClient.connect(running.port, client_id="p")
    answer = await produce(client, 20_000)
    muted = await next_answer_after(client)
    expected = kafka_throttle(await request_bytes(log_events, "p"), 1000)
    assert ms(answer) == expected > 0
    assert muted == pytest.approx(expected / 1000, abs=1e-6)
    assert await log_events.wait_for("throttle_ended", client_id="p")


async def test_first_file_format_is_still_read(start_broker: Any, tmp_path: Any) -> None:
    data = tmp_path / "old"
    data.mkdir()
    (data / "client-quotas.json").write_text(json.dumps(
        [{"ip": "10.0.0.9", "connection_creation_rate": 3.0},
         {"ip": None, "connection_creation_rate": 50.0}]))
    running = await start_broker({"log.dirs": str(data)})
    assert entries(await describe(running.port, ("ip", 2, None))) == {
        (("ip", "10.0.0.9"),): {"connection_creation_rate": 3.0},
        (("ip", None),): {"connection_creation_rate": 50.0}}
    assert running.app.socket_server.quotas.ip_connection_rates() == {"10.0.0.9": 3.0,
                                                                     None: 50.0}


async def test_the_file_has_one_line_per_entity_rewritten_only_where_it_changed(
        start_broker: Any, tmp_path: Any) -> None:
    """Each entity is one line of ``client-quotas.json``, encoded when it changes; the rest of
    the file is copied as it was. Re-encoding every entity with ``indent=`` (json's pure-Python
    encoder) on each AlterClientQuotas held the event loop for 1.5 s at 50,000 entities."""
    data = tmp_path / "lines"
    running = await start_broker({"log.dirs": str(data)})
    for name in ("a", "b", "c"):
        assert await alter(running.port, {"client-id": name}, {"producer_byte_rate": 10}) == OK
    assert await alter(running.port, {"client-id": "a"},
                       {"request_percentage": 5, "producer_byte_rate": 20}) == OK
    assert await alter(running.port, {"client-id": "b"}, {"producer_byte_rate": None}) == OK
    lines = (data / "client-quotas.json").read_text().splitlines()
    assert lines[0] == "[" and lines[-1] == "]"
    assert [json.loads(line.rstrip(",")) for line in lines[1:-1]] == [
        {"entity": {"client-id": "a"},
         "quotas": {"producer_byte_rate": 20.0, "request_percentage": 5.0}},
        {"entity": {"client-id": "c"}, "quotas": {"producer_byte_rate": 10.0}}]
    await running.shutdown()
    again = await start_broker({"log.dirs": str(data)})
    assert entries(await describe(again.port)) == {
        (("client-id", "a"),): {"producer_byte_rate": 20.0, "request_percentage": 5.0},
        (("client-id", "c"),): {"producer_byte_rate": 10.0}}
    # Every entity gone: an empty list, still read.
    for name in ("a", "c"):
        assert await alter(again.port, {"client-id": name},
                           {"producer_byte_rate": None, "request_percentage": None}) == OK
    assert json.loads((data / "client-quotas.json").read_text()) == []


async def test_the_quota_file_is_written_off_the_event_loop(
        start_broker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An fsync can take seconds on a busy disk: while AlterClientQuotas's write is in its
    fsync, another connection's request is answered, and the alteration is acknowledged only
    after the write. The fsync here waits for the test to release it (for at most 10 s): on the
    event loop it would wait out the 10 s, with the other connection unanswered."""
    import threading

    from trio_broker.storage import durable

    running = await start_broker()
    entered, release = threading.Event(), threading.Event()
    released: list[bool] = []
    real_fsync = durable.os.fsync

    def slow_fsync(fd: int) -> None:
        if not entered.is_set():
            entered.set()
            released.append(release.wait(10))
        real_fsync(fd)

    monkeypatch.setattr(durable.os, "fsync", slow_fsync)
    other = await WireClient.connect(running.port, client_id="other")
    done: list[Any] = []

    async def alter_in_background() -> None:
        done.append(await alter(running.port, {"client-id": "c"}, {"producer_byte_rate": 10}))

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(alter_in_background)
            while not entered.is_set():
                await trio.sleep(0.01)
            await other.request(API_VERSIONS, 3, API_VERSIONS_V3)
            assert done == []  # not acknowledged while its write is unfinished
            release.set()
    await other.aclose()
    assert released == [True]
    assert done == [OK]
    assert entries(await describe(running.port)) == {
        (("client-id", "c"),): {"producer_byte_rate": 10.0}}
