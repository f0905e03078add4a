"""Random but well-formed requests of every implemented API and version, against a broker that
has topics, groups and data: every request is answered with a response that decodes with the
response schema of its version, carries the request's correlation id and only known error codes;
no handler fails, nothing is logged at error level, no connection is closed on a valid request.

Bodies come from kio's own hypothesis strategies (``st.from_type`` on the generated message
classes), so every field takes values the protocol allows but clients rarely send: negative
partitions, empty names, huge sizes, null arrays where they are nullable. A random topic name
would only ever reach UNKNOWN_TOPIC_OR_PARTITION, so names, partitions, offsets, group ids and
resources are then re-drawn, each with a good chance, from what exists on the broker. Waits that a
request may ask for (Fetch's max_wait, JoinGroup's timeouts) are drawn short so that the test can
wait for every answer instead of for a time.

One broker serves the whole module from a thread of its own, so each example costs one
connection and one round trip, not one broker start. The examples are derandomized (the same on
every run, as CI needs); ``RANDOM_REQUESTS_EXAMPLES=500 RANDOM_REQUESTS_SEED=random`` explores
further.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import random
import socket
import struct
import threading
import typing
import uuid
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.create_topics.v7 import request as create_topics
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.static.primitive import Records, i16, i32, i32Timedelta

from tests.kafka_wire import METADATA_ALL_V12
from trio_broker.config import load_config
from trio_broker.protocol.codec import (
    API_VERSIONS_KEY,
    api_name,
    encode_request,
    request_schema,
    response_schema,
)
from trio_broker.protocol.framing import FrameDecoder
from trio_broker.protocol.records import build_batch
from trio_broker.server.app import BrokerApp
from trio_broker.server.registry import supported_versions

# Produce needs record bytes: mostly real batches, sometimes none or garbage.
st.register_type_strategy(Records, st.one_of(
    st.none(), st.binary(max_size=100),
    *[st.builds(lambda value: build_batch([(b"k", value, [], 1_700_000_000_000)]),
                st.binary(max_size=50))] * 3))

API_VERSIONS = [(key, version) for key, (low, high) in supported_versions().items()
                for version in range(low, high + 1)]
EXAMPLES = int(os.environ.get("RANDOM_REQUESTS_EXAMPLES", "25"))
DERANDOMIZE = os.environ.get("RANDOM_REQUESTS_SEED", "") != "random"
ANSWER_TIMEOUT_S = 10.0

# What a failed request leaves in the broker's log (see problems() in the test).
# The broker writes compact JSON ("event":"x"): a marker with a space after the colon never
# matched, and handler failures went unseen.
PROBLEM_MARKERS = ('"error"', '"request_failed"', '"invalid_request"')
TOPICS = {"random-a": 3, "random-b": 1}
GROUPS = ("random-group", "")
PRODUCE, METADATA, JOIN_GROUP, CREATE_TOPICS = 0, 3, 11, 19
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
# Fields whose value is re-drawn from what exists on the broker (see _retarget).
PARTITION_FIELDS = {"index", "partition", "partition_index", "partition_indexes", "partitions"}
OFFSET_FIELDS = {"fetch_offset", "committed_offset", "log_start_offset"}
SHORT_WAITS = {"max_wait", "rebalance_timeout", "session_timeout"}  # drawn in -1..50 ms
# Drawn as a client without a group membership sends them (OffsetCommit from assign() users).
NO_MEMBER = {"member_id": "", "generation_id_or_member_epoch": -1, "generation_id": -1}
SMALL_COUNTS = {"num_partitions", "count"}  # drawn <= 8: a huge count creates that many dirs


@pytest.fixture(scope="module")
def broker_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    app = BrokerApp(load_config({
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path_factory.mktemp("random-requests")),
        "logging.metrics.snapshot.interval.ms": "0",
        "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1",
        "shutdown.graceful.timeout.ms": "500",
        # Authorization on, open while no ACL matches: random CreateAcls bodies are validated
        # and stored, and the ACLs they leave behind take every handler through its denials.
        "authorizer.class.name": "standard", "allow.everyone.if.no.acl.found": "true"}))
    ready = threading.Event()
    tokens: list[trio.lowlevel.TrioToken] = []

    async def serve() -> None:
        tokens.append(trio.lowlevel.current_trio_token())
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            ready.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert ready.wait(30), "the broker did not start"
    yield app.listeners[0].port
    trio.from_thread.run(app.shutdown, trio_token=tokens[0])
    thread.join(30)


# ------------------------------------------------------------------ one request, one answer
@dataclasses.dataclass
class Answer:
    correlation_id: int
    body: Any


def read_frame(sock: socket.socket, frames: FrameDecoder) -> bytes | None:
    """The next response payload, or None when the broker closed the connection."""
    while (payload := frames.next_frame()) is None:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not data:
            return None
        frames.feed(data)
    return payload


@cache
def _response_reader(api_key: int, version: int) -> Any:
    return entity_reader(response_schema(api_key, version))


#: The delegation token APIs answer a refusal with Kafka's "no time", -1, in timestamp fields,
#: which kio's reader refuses (a negative timestamp): those answers are read with the -1s as 0.
NO_TIME_ANSWERS = frozenset({38, 39, 40})


def decode_answer(api_key: int, version: int, payload: bytes) -> Answer:
    """Parse a response with the schema of its version; every byte must belong to it."""
    if api_key in NO_TIME_ANSWERS:
        payload = payload.replace(b"\xff" * 8, b"\x00" * 8)
    (correlation,) = struct.unpack_from(">i", payload, 0)
    offset = 4
    if response_schema(api_key, version).__flexible__ and api_key != API_VERSIONS_KEY:
        assert payload[offset] == 0, "tagged fields in a response header"
        offset += 1
    # kio's reader returns the number of bytes it read, not an end offset.
    body, size = _response_reader(api_key, version)(payload, offset)
    assert offset + size == len(payload), \
        f"{len(payload) - offset - size} bytes after the response body"
    return Answer(correlation, body)


def unknown_error_codes(value: Any, path: str = "") -> list[str]:
    """Paths of every ``error_code`` (at any depth) that is not a Kafka error code."""
    found: list[str] = []
    if isinstance(value, tuple):
        for index, item in enumerate(value):
            found += unknown_error_codes(item, f"{path}[{index}]")
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if field.name == "error_code":
                try:
                    ErrorCode(int(item))
                except ValueError:
                    found.append(f"{path}.error_code={item}")
            else:
                found += unknown_error_codes(item, f"{path}.{field.name}")
    return found


def exchange(port: int, api_key: int, version: int, correlation: int, client_id: str,
             body: Any) -> Answer | None:
    """Send one request and return its answer (None: the broker closed the connection).

    Produce with acks=0 gets no answer; an ApiVersions request pipelined after it shows that the
    broker went on, and its answer is returned instead.
    """
    no_answer = api_key == PRODUCE and int(body.acks) == 0
    frame = encode_request(api_key, version, correlation, client_id, body)
    if no_answer:
        frame += encode_request(API_VERSIONS_KEY, 0, correlation + 1, client_id,
                                request_schema(API_VERSIONS_KEY, 0)())
    frames = FrameDecoder(2**31 - 1)
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S) as sock:
        sock.sendall(frame)
        try:
            payload = read_frame(sock, frames)
        except TimeoutError:
            pytest.fail(f"no answer within {ANSWER_TIMEOUT_S} s to {body!r}")
    if payload is None:
        return None
    if no_answer:
        return decode_answer(API_VERSIONS_KEY, 0, payload)
    return decode_answer(api_key, version, payload)


# ---------------------------------------------------------- aiming random bodies at the broker
@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _retarget(rng: random.Random, value: Any, ids: tuple[uuid.UUID, ...] = ()) -> Any:
    """``value`` with names, topic ids (of ``ids``), partitions, offsets, groups and waits
    re-drawn, field by field.

    The choices come from one seeded ``random.Random`` (the seed is a hypothesis draw): a
    hypothesis draw per field would cost more than the rest of the example.
    """
    if isinstance(value, tuple):
        return tuple(_retarget(rng, item, ids) for item in value)
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    hints = _hints(type(value))
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(value):
        old = getattr(value, field.name)
        new = _retarget_field(rng, field.name, str(hints[field.name]), old, ids)
        if new is old:
            new = _retarget(rng, old, ids)
        if new is not old:
            changes[field.name] = new
    if {"resource_type", "resource_name"} <= set(hints):
        # Describe/Alter(Incremental)Configs: aim at a topic or at this broker.
        kind = rng.choice([None, TOPIC_RESOURCE, BROKER_RESOURCE])
        resource_type = type(getattr(value, "resource_type"))  # noqa: B009 (typed Any)
        if kind == TOPIC_RESOURCE:
            changes.update(resource_type=resource_type(kind),
                           resource_name=rng.choice([*TOPICS, "random-x"]))
        elif kind == BROKER_RESOURCE:
            changes.update(resource_type=resource_type(kind),
                           resource_name=rng.choice(["1", "", "7"]))
    return dataclasses.replace(value, **changes) if changes else value


def _retarget_field(rng: random.Random, name: str, hint: str, old: Any,
                    ids: tuple[uuid.UUID, ...] = ()) -> Any:
    """A re-drawn value for one field, or ``old`` itself to keep it."""
    if name == "topic_id" and ids:
        # Requests that name topics by id (Produce v13, Fetch v13+, OffsetCommit/Fetch v10).
        return rng.choice([old, *ids, *ids])
    if "TopicName" in hint:
        if isinstance(old, tuple):
            return tuple(_pick(rng, old, *TOPICS, *TOPICS) for old in old)
        return old if old is None else _pick(rng, old, *TOPICS, *TOPICS)
    if "GroupId" in hint:
        if isinstance(old, tuple):
            return tuple(_pick(rng, old, *GROUPS) for old in old)
        return _pick(rng, old, *GROUPS)
    if name in PARTITION_FIELDS and ("i32" in hint):
        if isinstance(old, tuple):
            return tuple(_pick(rng, old, *range(4)) for old in old)
        return _pick(rng, old, *range(4))
    if name in OFFSET_FIELDS:
        return _pick(rng, old, *range(6))
    if name in SMALL_COUNTS and "i32" in hint:
        return type(old)(rng.randint(-1, 8))
    if name in SHORT_WAITS:
        return i32Timedelta.parse(datetime.timedelta(milliseconds=rng.randint(-1, 50)))
    if name == "acks":
        return _pick(rng, old, -1, 0, 1)
    if name.endswith("transactional_id"):
        # Mostly one id, so transactions progress; null only where the field is nullable.
        return rng.choice([None, None, "random-txn", old] if "None" in hint
                          else ["random-txn", "random-txn", old])
    if name in NO_MEMBER and rng.random() < 0.5:  # old None: OffsetFetch v9's nullable id
        return NO_MEMBER[name] if old is None else type(old)(NO_MEMBER[name])
    return old


def _pick(rng: random.Random, old: Any, *choices: Any) -> Any:
    """``old`` or one of ``choices`` (as the field's type), equally likely."""
    index = rng.randrange(len(choices) + 1)
    return old if index == len(choices) else type(old)(choices[index])


# -------------------------------------------------------------------------------- the test
def ensure_topics(port: int) -> tuple[uuid.UUID, ...]:
    """Create the test topics (an earlier DeleteTopics may have removed them); their ids."""
    body = create_topics.CreateTopicsRequest(
        topics=tuple(create_topics.CreatableTopic(
            name=TopicName(name), num_partitions=i32(count), replication_factor=i16(1), assignments=(),
            configs=()) for name, count in TOPICS.items()),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)), validate_only=False)
    answer = exchange(port, CREATE_TOPICS, 7, 1, "random-requests-setup", body)
    assert answer is not None
    codes = {t.name: t.error_code for t in answer.body.topics}
    assert set(codes.values()) <= {ErrorCode.none, ErrorCode.topic_already_exists}, codes
    described = exchange(port, METADATA, 12, 2, "random-requests-setup", METADATA_ALL_V12)
    assert described is not None
    return tuple(t.topic_id for t in described.body.topics if t.name in TOPICS)


@pytest.mark.parametrize(("api_key", "version"), API_VERSIONS,
                         ids=[f"{api_name(k)}-v{v}" for k, v in API_VERSIONS])
def test_random_requests_are_answered(broker_port: int, api_key: int, version: int,
                                      log_events: Any) -> None:
    ids = ensure_topics(broker_port)
    client_id = f"random-{api_key}-{version}"
    sent: list[int] = []
    closed: list[str] = []

    def problems(since: int = 0) -> list[dict[str, Any]]:
        """Failures the broker logged (after the first ``since`` characters of the log)."""
        text = log_events.text()[since:]
        if not any(marker in text for marker in PROBLEM_MARKERS):
            return []  # the common case, without parsing every line
        lines = [json.loads(line) for line in text.splitlines() if line]
        return [e for e in lines if e.get("level") == "error"
                or e["event"] in ("request_failed", "invalid_request")]

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=DERANDOMIZE, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=st.from_type(request_schema(api_key, version)),
           seed=st.integers(0, 2**32 - 1), correlation=st.integers(-(2**31), 2**31 - 2))
    def send(body: Any, seed: int, correlation: int) -> None:
        body = _retarget(random.Random(seed), body, ids)
        logged_before = len(log_events.text())
        sent.append(correlation)
        answer = exchange(broker_port, api_key, version, correlation, client_id, body)
        if answer is None:
            # Kafka closes the connection only when an acks=0 Produce fails: there is no
            # response to carry the error.
            assert api_key == PRODUCE and int(body.acks) == 0, \
                f"connection closed on {body!r}: {problems(logged_before)}"
            closed.append(repr(body))
        else:
            expected = correlation + 1 if api_key == PRODUCE and int(body.acks) == 0 \
                else correlation
            assert answer.correlation_id == expected
            assert not unknown_error_codes(answer.body), (unknown_error_codes(answer.body), body)
        # A handler's failure is logged before its answer is sent, so it is in the log now.
        assert not problems(logged_before), (problems(logged_before), body)

    send()
    # Every request has its log line before the test ends: nothing lands in the next test.
    _wait_for_request_lines(log_events, client_id, len(sent))
    assert problems() == []


def _wait_for_request_lines(log_events: Any, client_id: str, count: int) -> None:
    """Wait (at most 5 s) until the broker has logged ``count`` request lines of
    ``client_id``: its log line follows the answer, from the broker's thread."""
    logged = threading.Event()
    for _ in range(500):
        if len(log_events.events("request", client_id=client_id)) >= count:
            return
        logged.wait(0.01)
    logged_count = len(log_events.events("request", client_id=client_id))
    pytest.fail(f"{count} requests sent, {logged_count} logged")
