"""A minimal Kafka client on Trio, for tests that run the broker in their own Trio run.

Real clients (confluent-kafka, kafka-python, aiokafka) cannot run on Trio's clock, so a test
that wants a 45 s session timeout to pass in no wall time (``trio_kafka_broker`` with
``autojump_clock``) talks to the broker through this one. It covers what such tests need:
ApiVersions, Metadata, CreateTopics, Produce, Fetch, ListOffsets, FindCoordinator,
JoinGroup/SyncGroup/Heartbeat/LeaveGroup, OffsetCommit/OffsetFetch; :meth:`WireClient.request`
sends any other request body.

Requests are encoded with kio, as the broker does. The protocol work is the sans-IO core shared
with the tools' blocking client (:class:`~trio_broker.protocol.client_codec.ClientCodec`): responses
are bounds-checked by the broker's own pre-scan before kio's native reader sees them, so a broker
bug that writes a bad length fails the test instead of the process.

:class:`WireClient` is the raw layer (framed requests and responses on one connection, also
for pipelined bursts and bad frames); :class:`TrioKafkaClient` adds one method per API.
"""

from __future__ import annotations

import datetime
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import trio
from kio.schema.errors import ErrorCode

from ..protocol import records as rb
from ..protocol.client_codec import (
    MAX_RESPONSE_BYTES,
    ClientCodec,
    InvalidResponse,
    ResponseFrames,
    decode_checked,
    request_body,
)

__all__ = ["MAX_RESPONSE_BYTES", "InvalidResponse", "JoinedGroup", "KafkaError", "ResponseFrames",
           "TrioKafkaClient", "WireClient", "assignment", "decode_checked", "request_body",
           "subscription"]

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
API_VERSIONS, CREATE_TOPICS = 18, 19

#: The version the client speaks of each API (the highest the broker supports).
VERSIONS = {PRODUCE: 9, FETCH: 12, LIST_OFFSETS: 7, METADATA: 12, OFFSET_COMMIT: 8,
            OFFSET_FETCH: 7, FIND_COORDINATOR: 3, JOIN_GROUP: 9, HEARTBEAT: 4, LEAVE_GROUP: 5,
            SYNC_GROUP: 5, API_VERSIONS: 3, CREATE_TOPICS: 7}


class KafkaError(Exception):
    """A response carried an error code other than NONE."""

    def __init__(self, code: int, where: str = "") -> None:
        self.code = ErrorCode(code)
        super().__init__(f"{self.code.name.upper()}" + (f" ({where})" if where else ""))


def _check(code: int, where: str = "") -> None:
    if code != ErrorCode.none:
        raise KafkaError(code, where)


def _ms(value: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 (what Java and librdkafka consumers send)."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        data = topic.encode()
        out += struct.pack(">h", len(data)) + data
    return out + struct.pack(">i", -1)


def assignment(partitions: Mapping[str, Sequence[int]]) -> bytes:
    """A ConsumerProtocolAssignment v0."""
    out = struct.pack(">hi", 0, len(partitions))
    for topic, indexes in partitions.items():
        data = topic.encode()
        out += struct.pack(">h", len(data)) + data + struct.pack(">i", len(indexes))
        out += b"".join(struct.pack(">i", i) for i in indexes)
    return out + struct.pack(">i", -1)


class WireClient:
    """Sends framed requests and reads framed responses on one connection."""

    def __init__(self, stream: trio.SocketStream, client_id: str = "wire-test") -> None:
        self.stream = stream
        self.codec = ClientCodec(client_id)
        # The core's state under the names tests that read raw frames use.
        self._sent = self.codec.pending
        self._frames = self.codec.frames

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1", client_id: str = "wire-test"
                      ) -> Any:
        return cls(await trio.open_tcp_stream(host, port), client_id)

    @property
    def client_id(self) -> str | None:
        return self.codec.client_id

    def encode(self, api_key: int, version: int, body: Any, client_id: str | None = None
               ) -> bytes:
        """A request frame (for pipelined bursts sent with :meth:`send_raw`)."""
        return self.codec.encode(api_key, version, body, client_id)[1]

    async def send(self, api_key: int, version: int, body: Any) -> int:
        """Send one request; its correlation id."""
        correlation, frame = self.codec.encode(api_key, version, body)
        await self.stream.send_all(frame)
        return correlation

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def receive_frame(self) -> bytes | None:
        """The next response payload, or None at end of stream."""
        while (payload := self.codec.next_frame()) is None:
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            self.codec.feed(data)
        return payload

    async def receive(self) -> tuple[int, Any]:
        """``(correlation_id, body)`` of the next response."""
        payload = await self.receive_frame()
        if payload is None:
            raise trio.BrokenResourceError("connection closed by the broker")
        return self.codec.decode(payload)

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        await self.send(api_key, version, body)
        return (await self.receive())[1]

    async def closed_by_peer(self) -> bool:
        """True when the broker closes the connection (EOF or reset) rather than answering."""
        return await self.receive_frame() is None

    async def aclose(self) -> None:
        await self.stream.aclose()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@attrs.frozen
class JoinedGroup:
    """A member's view of a completed JoinGroup."""

    group_id: str
    member_id: str
    generation_id: int
    leader: str
    protocol_name: str | None
    members: tuple[str, ...]

    @property
    def is_leader(self) -> bool:
        return self.leader == self.member_id


class TrioKafkaClient(WireClient):
    """One connection to one broker, one method per API a test needs.

    Methods raise :class:`KafkaError` for an error code in the response (a top-level one, or the
    one of the single partition or member they are about)::

        async with await TrioKafkaClient.connect(trio_kafka_broker.port) as client:
            await client.create_topic("t")
            await client.produce("t", 0, [b"a", b"b"])
            assert [r.value for r in await client.fetch("t", 0, 0)] == [b"a", b"b"]
    """

    def __init__(self, stream: trio.SocketStream, client_id: str = "trio-kafka-client") -> None:
        super().__init__(stream, client_id)

    async def call(self, api_key: int, **fields: Any) -> Any:
        """Send a request of the client's version of ``api_key`` built from ``fields``."""
        version = VERSIONS[api_key]
        return await self.request(api_key, version, request_body(api_key, version, **fields))

    def _nested(self, api_key: int, class_name: str, **fields: Any) -> Any:
        return request_body(api_key, VERSIONS[api_key], class_name, **fields)

    # ----------------------------------------------------------------------- cluster
    async def api_versions(self) -> dict[int, tuple[int, int]]:
        response = await self.call(API_VERSIONS, client_software_name="trio-kafka-client",
                                   client_software_version="1.0")
        _check(response.error_code, "ApiVersions")
        return {int(k.api_key): (int(k.min_version), int(k.max_version))
                for k in response.api_keys}

    async def metadata(self, topics: Iterable[str] | None = None) -> Any:
        wanted = None if topics is None else tuple(
            self._nested(METADATA, "MetadataRequestTopic", topic_id=None, name=t) for t in topics)
        return await self.call(METADATA, topics=wanted, allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)

    async def create_topic(self, name: str, partitions: int = 1,
                           configs: Mapping[str, str] | None = None) -> None:
        topic = self._nested(
            CREATE_TOPICS, "CreatableTopic", name=name, num_partitions=partitions,
            replication_factor=1, assignments=(),
            configs=tuple(self._nested(CREATE_TOPICS, "CreatableTopicConfig", name=k, value=v)
                          for k, v in (configs or {}).items()))
        response = await self.call(CREATE_TOPICS, topics=(topic,), timeout=_ms(30000),
                                   validate_only=False)
        _check(response.topics[0].error_code, f"CreateTopics {name}")

    # ---------------------------------------------------------------------- records
    async def produce(self, topic: str, partition: int,
                      values: Sequence[bytes | None | tuple[bytes | None, bytes | None]], *,
                      acks: int = -1, timeout_ms: int = 30000) -> int:
        """Append ``values`` (or ``(key, value)`` pairs) as one batch; the base offset
        (-1 with ``acks=0``, which gets no response)."""
        now = int(time.time() * 1000)
        batch = rb.build_batch([(v[0], v[1], [], now) if isinstance(v, tuple)
                                else (None, v, [], now) for v in values])
        data = self._nested(PRODUCE, "PartitionProduceData", index=partition, records=batch)
        body = request_body(PRODUCE, VERSIONS[PRODUCE], transactional_id=None, acks=acks,
                            timeout=_ms(timeout_ms), topic_data=(self._nested(
                                PRODUCE, "TopicProduceData", name=topic,
                                partition_data=(data,)),))
        if acks == 0:
            # No response comes: forget the correlation id.
            self.codec.forget(await self.send(PRODUCE, VERSIONS[PRODUCE], body))
            return -1
        response = await self.request(PRODUCE, VERSIONS[PRODUCE], body)
        answer = response.responses[0].partition_responses[0]
        _check(answer.error_code, f"Produce {topic}-{partition}")
        return int(answer.base_offset)

    async def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
                    min_bytes: int = 1, max_bytes: int = 1 << 20) -> list[rb.Record]:
        """The records of one partition from ``offset`` (a long poll with ``max_wait_ms``)."""
        part = self._nested(FETCH, "FetchPartition", partition=partition, current_leader_epoch=-1,
                            fetch_offset=offset, last_fetched_epoch=-1, log_start_offset=-1,
                            partition_max_bytes=max_bytes)
        response = await self.call(
            FETCH, cluster_id=None, replica_id=-1, max_wait=_ms(max_wait_ms),
            min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=0,
            session_epoch=-1, rack_id="", forgotten_topics_data=(),
            topics=(self._nested(FETCH, "FetchTopic", topic=topic, partitions=(part,)),))
        _check(response.error_code, "Fetch")
        answer = response.responses[0].partitions[0]
        _check(answer.error_code, f"Fetch {topic}-{partition}")
        data = answer.records or b""
        found: list[rb.Record] = []
        for position, size in rb.iter_batches(data):
            batch = data[position:position + size]
            if not rb.decode_header(batch).is_control:
                found += [r for r in rb.decode_records(batch) if r.offset >= offset]
        return found

    async def list_offset(self, topic: str, partition: int, timestamp: int = -1) -> int:
        """ListOffsets: -1 latest, -2 earliest, else the first offset at or after ``timestamp``."""
        part = self._nested(LIST_OFFSETS, "ListOffsetsPartition", partition_index=partition,
                            current_leader_epoch=-1, timestamp=timestamp)
        response = await self.call(LIST_OFFSETS, replica_id=-1, isolation_level=0, topics=(
            self._nested(LIST_OFFSETS, "ListOffsetsTopic", name=topic, partitions=(part,)),))
        answer = response.topics[0].partitions[0]
        _check(answer.error_code, f"ListOffsets {topic}-{partition}")
        return int(answer.offset)

    # ------------------------------------------------------------------------ groups
    async def find_coordinator(self, group: str) -> tuple[str, int]:
        response = await self.call(FIND_COORDINATOR, key=group, key_type=0)
        _check(response.error_code, f"FindCoordinator {group}")
        return str(response.host), int(response.port)

    async def join_group(self, group: str, topics: Sequence[str] = (), *,
                         session_timeout_ms: int = 45000, rebalance_timeout_ms: int = 300000,
                         member_id: str = "", group_instance_id: str | None = None
                         ) -> JoinedGroup:
        """JoinGroup as a consumer (``range``), answering MEMBER_ID_REQUIRED as clients do."""
        protocol = self._nested(JOIN_GROUP, "JoinGroupRequestProtocol", name="range",
                                metadata=subscription(*topics))
        while True:
            response = await self.call(
                JOIN_GROUP, group_id=group, session_timeout=_ms(session_timeout_ms),
                rebalance_timeout=_ms(rebalance_timeout_ms), member_id=member_id,
                group_instance_id=group_instance_id, protocol_type="consumer",
                protocols=(protocol,), reason=None)
            if response.error_code == ErrorCode.member_id_required and not member_id:
                member_id = response.member_id
                continue
            _check(response.error_code, f"JoinGroup {group}")
            return JoinedGroup(group, str(response.member_id), int(response.generation_id),
                               str(response.leader), response.protocol_name,
                               tuple(str(m.member_id) for m in response.members))

    async def sync_group(self, joined: JoinedGroup,
                         assignments: Mapping[str, bytes] | None = None) -> bytes:
        """SyncGroup; the leader passes ``{member_id: assignment bytes}``. The member's own
        assignment comes back."""
        response = await self.call(
            SYNC_GROUP, group_id=joined.group_id, generation_id=joined.generation_id,
            member_id=joined.member_id, group_instance_id=None, protocol_type="consumer",
            protocol_name=joined.protocol_name, assignments=tuple(
                self._nested(SYNC_GROUP, "SyncGroupRequestAssignment", member_id=m,
                             assignment=a) for m, a in (assignments or {}).items()))
        _check(response.error_code, f"SyncGroup {joined.group_id}")
        return bytes(response.assignment)

    async def heartbeat(self, joined: JoinedGroup) -> None:
        response = await self.call(HEARTBEAT, group_id=joined.group_id,
                                   generation_id=joined.generation_id,
                                   member_id=joined.member_id, group_instance_id=None)
        _check(response.error_code, f"Heartbeat {joined.group_id}")

    async def leave_group(self, joined: JoinedGroup) -> None:
        member = self._nested(LEAVE_GROUP, "MemberIdentity", member_id=joined.member_id,
                              group_instance_id=None, reason=None)
        response = await self.call(LEAVE_GROUP, group_id=joined.group_id, members=(member,))
        _check(response.error_code, f"LeaveGroup {joined.group_id}")

    async def commit(self, group: str, offsets: Mapping[tuple[str, int], int], *,
                     joined: JoinedGroup | None = None) -> None:
        """OffsetCommit (as a group member with ``joined``, else as a simple consumer)."""
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(self._nested(
                OFFSET_COMMIT, "OffsetCommitRequestPartition", partition_index=partition,
                committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""))
        response = await self.call(
            OFFSET_COMMIT, group_id=group,
            generation_id_or_member_epoch=joined.generation_id if joined else -1,
            member_id=joined.member_id if joined else "", group_instance_id=None,
            topics=tuple(self._nested(OFFSET_COMMIT, "OffsetCommitRequestTopic", name=t,
                                      partitions=tuple(p)) for t, p in by_topic.items()))
        for topic in response.topics:
            for part in topic.partitions:
                _check(part.error_code, f"OffsetCommit {topic.name}-{part.partition_index}")

    async def committed(self, group: str, partitions: Iterable[tuple[str, int]]
                        ) -> dict[tuple[str, int], int]:
        """OffsetFetch: the committed offset of each partition (-1: none)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        response = await self.call(
            OFFSET_FETCH, group_id=group, require_stable=False, topics=tuple(
                self._nested(OFFSET_FETCH, "OffsetFetchRequestTopic", name=t,
                             partition_indexes=tuple(p)) for t, p in by_topic.items()))
        _check(response.error_code, f"OffsetFetch {group}")
        return {(t.name, p.partition_index): int(p.committed_offset)
                for t in response.topics for p in t.partitions}
