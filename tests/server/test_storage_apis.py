"""DeleteRecords, DescribeLogDirs and the leader-epoch / timestamp bookkeeping of stored batches,
over real sockets against an in-process broker (``start_broker``) with the raw wire client."""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
import trio
from kio.schema.errors import ErrorCode

from tests.kafka_wire import WireClient
from trio_broker.protocol import records as rb
from trio_broker.protocol.codec import request_schema
from trio_broker.storage.log import now_ms

PRODUCE, FETCH, LIST_OFFSETS, DELETE_RECORDS, DESCRIBE_LOG_DIRS = 0, 1, 2, 21, 35
TIMEOUT = 10


def mod(api_key: int, version: int) -> Any:
    return sys.modules[request_schema(api_key, version).__module__]


def produce(topic: str, partition: int, data: bytes, version: int = 9) -> Any:
    m = mod(PRODUCE, version)
    return m.ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(m.TopicProduceData(name=topic, partition_data=(
            m.PartitionProduceData(index=partition, records=data),)),))


def fetch(topic: str, partition: int, offset: int, version: int = 12) -> Any:
    m = mod(FETCH, version)
    return m.FetchRequest(
        max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20,
            current_leader_epoch=-1, log_start_offset=-1, last_fetched_epoch=-1),)),))


def list_offsets(topic: str, partition: int, timestamp: int, version: int = 7) -> Any:
    m = mod(LIST_OFFSETS, version)
    return m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(m.ListOffsetsTopic(
        name=topic, partitions=(m.ListOffsetsPartition(
            partition_index=partition, timestamp=timestamp, current_leader_epoch=-1),)),))


def delete_records(wants: dict[tuple[str, int], int], version: int = 2) -> Any:
    m = mod(DELETE_RECORDS, version)
    topics: dict[str, list[Any]] = {}
    for (topic, partition), offset in wants.items():
        topics.setdefault(topic, []).append(
            m.DeleteRecordsPartition(partition_index=partition, offset=offset))
    return m.DeleteRecordsRequest(
        timeout=datetime.timedelta(seconds=5),
        topics=tuple(m.DeleteRecordsTopic(name=n, partitions=tuple(p)) for n, p in topics.items()))


def batch(*values: bytes, ts: int | None = None) -> bytes:
    stamp = now_ms() if ts is None else ts
    return rb.build_batch([(None, v, [], stamp) for v in values])


async def test_delete_records_over_the_wire(start_broker: Any) -> None:
    with trio.fail_after(TIMEOUT):
        running = await start_broker()
        lm = running.broker.log_manager
        lm.create_topic("dr", 2)
        client = await WireClient.connect(running.port)
        for i in range(5):
            answer = await client.request(PRODUCE, 9, produce("dr", 0, batch(b"v%d" % i)))
            assert answer.responses[0].partition_responses[0].error_code is ErrorCode.none
        for version in (0, 1, 2):
            got = await client.request(DELETE_RECORDS, version, delete_records(
                {("dr", 0): 2 + version, ("dr", 1): 1, ("nope", 0): 0}, version))
            results = {(t.name, p.partition_index): (p.error_code, p.low_watermark)
                       for t in got.topics for p in t.partitions}
            assert results == {
                ("dr", 0): (ErrorCode.none, 2 + version),
                ("dr", 1): (ErrorCode.offset_out_of_range, -1),  # past the high watermark
                ("nope", 0): (ErrorCode.unknown_topic_or_partition, -1)}
        got = await client.request(FETCH, 12, fetch("dr", 0, 3))
        part = got.responses[0].partitions[0]
        assert (part.error_code, part.log_start_offset) == (ErrorCode.offset_out_of_range, 4)
        got = await client.request(FETCH, 12, fetch("dr", 0, 4))
        part = got.responses[0].partitions[0]
        assert part.error_code is ErrorCode.none and part.log_start_offset == 4
        got = await client.request(LIST_OFFSETS, 7, list_offsets("dr", 0, -2))
        assert got.topics[0].partitions[0].offset == 4
        # -1: up to the high watermark; internal topics are refused
        got = await client.request(DELETE_RECORDS, 2, delete_records({("dr", 0): -1}))
        assert got.topics[0].partitions[0].low_watermark == 5
        lm.create_topic("__transaction_state", 1)
        got = await client.request(DELETE_RECORDS, 2,
                                   delete_records({("__transaction_state", 0): 0}))
        assert got.topics[0].partitions[0].error_code is ErrorCode.invalid_topic_exception
        await client.aclose()


async def test_describe_log_dirs(start_broker: Any) -> None:
    with trio.fail_after(TIMEOUT):
        running = await start_broker()
        lm = running.broker.log_manager
        lm.create_topic("a", 2)
        lm.create_topic("b", 1)
        data = batch(b"x" * 100)
        client = await WireClient.connect(running.port)
        await client.request(PRODUCE, 9, produce("a", 1, data))
        await client.request(PRODUCE, 9, produce("a", 1, data))
        for version in (1, 2, 3, 4, 5):
            m = mod(DESCRIBE_LOG_DIRS, version)
            got = await client.request(DESCRIBE_LOG_DIRS, version,
                                       m.DescribeLogDirsRequest(topics=None))
            assert len(got.results) == 1
            result = got.results[0]
            assert result.error_code is ErrorCode.none
            assert result.log_dir == str(running.data_dir.resolve())
            sizes = {(t.name, p.partition_index): (p.partition_size, p.offset_lag)
                     for t in result.topics for p in t.partitions}
            assert sizes[("a", 1)] == (2 * len(data), 0)
            assert sizes[("a", 0)] == sizes[("b", 0)] == (0, 0)
            if version >= 4:
                assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
            if version >= 5:
                assert result.is_cordoned is False  # KIP-1066: no cordoned.log.dirs here
            # only the requested partitions that exist
            got = await client.request(DESCRIBE_LOG_DIRS, version, m.DescribeLogDirsRequest(
                topics=(m.DescribableLogDirTopic(topic="a", partitions=(1, 7)),
                        m.DescribableLogDirTopic(topic="zz", partitions=(0,)))))
            assert [(t.name, [p.partition_index for p in t.partitions])
                    for t in got.results[0].topics] == [("a", [1])]
        await client.aclose()


async def test_list_offsets_by_timestamp_when_the_client_left_max_timestamp_unset(
        start_broker: Any) -> None:
    """sarama 1.22 / kafka-go: the header's max timestamp is -1; the broker derives it."""
    import struct

    with trio.fail_after(TIMEOUT):
        running = await start_broker()
        running.broker.log_manager.create_topic("go", 1)
        client = await WireClient.connect(running.port)
        base = 1_600_000_000_000
        for n in range(3):
            data = bytearray(rb.build_batch([(None, b"%d" % n, [], base + 10 * n + d)
                                             for d in (0, 1)]))
            struct.pack_into(">q", data, rb.MAX_TIMESTAMP_OFFSET, -1)
            struct.pack_into(">I", data, rb.CRC_OFFSET, rb.compute_crc(data))
            got = await client.request(PRODUCE, 9, produce("go", 0, bytes(data)))
            assert got.responses[0].partition_responses[0].error_code is ErrorCode.none
        for timestamp, expected in ((base, (0, base)), (base + 11, (3, base + 11)),
                                    (base + 15, (4, base + 20)), (base + 22, (-1, -1))):
            got = await client.request(LIST_OFFSETS, 7, list_offsets("go", 0, timestamp))
            part = got.topics[0].partitions[0]
            assert (part.offset, part.timestamp) == expected, timestamp
        got = await client.request(FETCH, 12, fetch("go", 0, 0))
        records = got.responses[0].partitions[0].records
        assert [rb.validate_batch(records[p:p + s]).max_timestamp
                for p, s in rb.iter_batches(records)] == [base + 1, base + 11, base + 21]
        await client.aclose()


async def test_batches_carry_the_leader_epoch_metadata_reports(start_broker: Any) -> None:
    """Kafka stamps the partition leader epoch into each batch on append; clients commit it
    and validate positions with it, so it must match Metadata, ListOffsets and
    OffsetForLeaderEpoch."""
    with trio.fail_after(TIMEOUT):
        running = await start_broker()
        running.broker.log_manager.create_topic("ep", 1)
        client = await WireClient.connect(running.port)
        sent = rb.build_batch([(None, b"a", [], now_ms())], partition_leader_epoch=-1)
        await client.request(PRODUCE, 9, produce("ep", 0, sent))
        await client.request(PRODUCE, 9, produce("ep", 0, rb.build_batch(
            [(None, b"b", [], now_ms())], partition_leader_epoch=17)))
        m = mod(3, 12)
        got = await client.request(3, 12, m.MetadataRequest(
            topics=(m.MetadataRequestTopic(name="ep", topic_id=None),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        epoch = got.topics[0].partitions[0].leader_epoch
        assert epoch == 0
        got = await client.request(FETCH, 12, fetch("ep", 0, 0))
        records = got.responses[0].partitions[0].records
        headers = [rb.validate_batch(records[p:p + s]) for p, s in rb.iter_batches(records)]
        assert [h.partition_leader_epoch for h in headers] == [epoch, epoch]
        for timestamp in (-2, -1, 0):
            got = await client.request(LIST_OFFSETS, 7, list_offsets("ep", 0, timestamp))
            assert got.topics[0].partitions[0].leader_epoch == epoch
        m = mod(23, 4)
        got = await client.request(23, 4, m.OffsetForLeaderEpochRequest(
            replica_id=-1, topics=(m.OffsetForLeaderTopic(topic="ep", partitions=(
                m.OffsetForLeaderPartition(partition=0, current_leader_epoch=epoch,
                                           leader_epoch=epoch),)),)))
        part = got.topics[0].partitions[0]
        assert (part.error_code, part.leader_epoch, part.end_offset) == (ErrorCode.none, epoch, 2)
        await client.aclose()


async def test_probe_apis_answer_as_a_one_node_kafka(start_broker: Any) -> None:
    """ElectLeaders, List/AlterPartitionReassignments and DescribeProducers, as tools probe them."""
    with trio.fail_after(TIMEOUT):
        running = await start_broker()
        node = running.broker.node_id
        running.broker.log_manager.create_topic("p", 2)
        client = await WireClient.connect(running.port)
        for version in (0, 1, 2):
            m = mod(43, version)
            fields: dict[str, Any] = {"election_type": 0} if version >= 1 else {}
            got = await client.request(43, version, m.ElectLeadersRequest(
                topic_partitions=(m.TopicPartitions(topic="p", partitions=(0, 1, 1, 9)),
                                  m.TopicPartitions(topic="nope", partitions=(0,))),
                timeout=datetime.timedelta(seconds=5), **fields))
            assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
                    for r in got.replica_election_results] == [
                ("p", [(0, ErrorCode.election_not_needed), (1, ErrorCode.election_not_needed),
                       (9, ErrorCode.unknown_topic_or_partition)]),
                ("nope", [(0, ErrorCode.unknown_topic_or_partition)])]
            got = await client.request(43, version, m.ElectLeadersRequest(
                topic_partitions=None, timeout=datetime.timedelta(seconds=5), **fields))
            assert got.replica_election_results == ()

        m = mod(46, 0)
        for topics in (None, (m.ListPartitionReassignmentsTopics(name="p",
                                                                 partition_indexes=(0, 1)),)):
            got = await client.request(46, 0, m.ListPartitionReassignmentsRequest(
                timeout=datetime.timedelta(seconds=5), topics=topics))
            assert (got.error_code, got.topics) == (ErrorCode.none, ())

        for version in (0, 1):
            m = mod(45, version)
            fields = {"allow_replication_factor_change": True} if version >= 1 else {}
            got = await client.request(45, version, m.AlterPartitionReassignmentsRequest(
                timeout=datetime.timedelta(seconds=5), **fields, topics=(
                    m.ReassignableTopic(name="p", partitions=(
                        m.ReassignablePartition(partition_index=0, replicas=(node,)),
                        m.ReassignablePartition(partition_index=1, replicas=(node, node + 1)),
                        m.ReassignablePartition(partition_index=1, replicas=None),
                        m.ReassignablePartition(partition_index=1, replicas=()),
                        m.ReassignablePartition(partition_index=1, replicas=(node, node)),
                        m.ReassignablePartition(partition_index=5, replicas=(node,)))),)))
            assert got.error_code is ErrorCode.none
            assert [p.error_code for p in got.responses[0].partitions] == [
                ErrorCode.none, ErrorCode.invalid_replica_assignment,
                ErrorCode.no_reassignment_in_progress, ErrorCode.invalid_replica_assignment,
                ErrorCode.invalid_replica_assignment, ErrorCode.unknown_topic_or_partition]

        pid = running.broker.log_manager.allocate_producer_id()
        data = rb.build_batch([(None, b"x", [], now_ms()), (None, b"y", [], now_ms())],
                              producer_id=pid, producer_epoch=3, base_sequence=0)
        await client.request(PRODUCE, 9, produce("p", 1, data))
        m = mod(61, 0)
        got = await client.request(61, 0, m.DescribeProducersRequest(topics=(
            m.TopicRequest(name="p", partition_indexes=(0, 1, 4)),)))
        parts = got.topics[0].partitions
        assert [(p.partition_index, p.error_code) for p in parts] == [
            (0, ErrorCode.none), (1, ErrorCode.none), (4, ErrorCode.unknown_topic_or_partition)]
        assert parts[0].active_producers == ()
        (state,) = parts[1].active_producers
        assert (state.producer_id, state.producer_epoch, state.last_sequence,
                state.coordinator_epoch, state.current_txn_start_offset) == (pid, 3, 1, -1, -1)
        assert state.last_timestamp > 0
        await client.aclose()


def compressed_frame(records: list[Any], codec: int, *, max_timestamp: int,
                     payload: bytes | None = None) -> bytes:
    """A client batch compressed with ``codec`` whose header max timestamp is
    ``max_timestamp`` whatever its records say; ``payload`` replaces the compressed records
    (raw snappy, a bomb). CRC valid."""
    import struct

    out = bytearray(rb.build_batch(records, attributes=codec))
    if payload is not None:
        out = out[:rb.HEADER_SIZE] + payload
        struct.pack_into(">i", out, 8, len(out) - rb.LOG_OVERHEAD)
    struct.pack_into(">q", out, rb.MAX_TIMESTAMP_OFFSET, max_timestamp)
    struct.pack_into(">I", out, rb.CRC_OFFSET, rb.compute_crc(out))
    return bytes(out)


@pytest.mark.parametrize("codec", ["snappy-xerial", "snappy-raw", "lz4", "zstd"])
async def test_list_offsets_by_timestamp_for_compressed_batches_with_a_wrong_max_timestamp(
        start_broker: Any, codec: str) -> None:
    """The derived max timestamp covers every codec: each batch claims a max timestamp far off
    (or -1); the broker reads the records, rewrites the header and indexes the right one."""
    import cramjam

    number = {"lz4": rb.COMPRESSION_LZ4, "zstd": rb.COMPRESSION_ZSTD}.get(
        codec, rb.COMPRESSION_SNAPPY)
    with trio.fail_after(TIMEOUT):
        running = await start_broker()
        running.broker.log_manager.create_topic("c", 1)
        client = await WireClient.connect(running.port)
        base = 1_600_000_000_000
        for n, claimed in enumerate((-1, base, base + 10**9)):
            records = [(b"k", b"%d" % n * 50, [], base + 10 * n + d) for d in (0, 7, 1)]
            raw = None
            if codec == "snappy-raw":  # librdkafka's framing: one raw snappy block
                plain = rb.build_batch(records)[rb.HEADER_SIZE:]
                raw = bytes(cramjam.snappy.compress_raw(plain))
            data = compressed_frame(records, number, max_timestamp=claimed, payload=raw)
            got = await client.request(PRODUCE, 9, produce("c", 0, data))
            assert got.responses[0].partition_responses[0].error_code is ErrorCode.none
        for timestamp, expected in ((base + 1, (1, base + 7)), (base + 8, (3, base + 10)),
                                    (base + 18, (6, base + 20)), (base + 28, (-1, -1)),
                                    (-3, (7, base + 27))):
            got = await client.request(LIST_OFFSETS, 7, list_offsets("c", 0, timestamp))
            part = got.topics[0].partitions[0]
            assert (part.offset, part.timestamp) == expected, timestamp
        got = await client.request(FETCH, 12, fetch("c", 0, 0))
        records = got.responses[0].partitions[0].records
        assert [rb.validate_batch(records[p:p + s]).max_timestamp
                for p, s in rb.iter_batches(records)] == [base + 7, base + 17, base + 27]
        assert [r.value for p, s in rb.iter_batches(records)
                for r in rb.decode_records(records[p:p + s])] == [b"%d" % n * 50 for n in
                                                                  range(3) for _ in range(3)]
        await client.aclose()


async def test_decompression_bombs_and_bad_frames_are_corrupt_message(
        start_broker: Any) -> None:
    """A batch decompressing past the cap (64 x message.max.bytes, here 16 MiB as the floor),
    malformed compressed bytes and a linked-block lz4 frame (which Kafka's reader refuses) are
    CORRUPT_MESSAGE; nothing is stored and the broker keeps serving."""
    import cramjam

    with trio.fail_after(TIMEOUT):
        running = await start_broker({"message.max.bytes": "100000"})
        running.broker.log_manager.create_topic("b", 1)
        client = await WireClient.connect(running.port)
        # one record whose value is 20 MiB of zeros: under 100 kB compressed
        value_length = 20 << 20
        record = bytearray(b"\x00")  # attributes
        record += b"\x00\x00\x02\x6b"  # ts delta 0, offset delta 0, key length 1 ("k")
        record += rb_varint(value_length) + bytes(value_length) + b"\x00"
        plain = rb_varint(len(record)) + bytes(record)
        template = [(b"k", b"x", [], now_ms())]
        linked = cramjam.lz4.Compressor(block_linked=True)
        linked.compress(rb.build_batch(template)[rb.HEADER_SIZE:])
        cases = {
            "zstd bomb": (rb.COMPRESSION_ZSTD, bytes(cramjam.zstd.compress(plain, level=3))),
            "lz4 bomb": (rb.COMPRESSION_LZ4, rb_lz4(plain)),
            # snappy's ratio is bounded (~21x): its bomb is a block whose preamble claims
            # 1 GiB, refused before anything is allocated
            "snappy bomb": (rb.COMPRESSION_SNAPPY, rb_xerial(b"")[:16] + b"\x00\x00\x00\x06"
                            + rb_varint_u(1 << 30) + b"\x00"),
            "gzip bomb": (rb.COMPRESSION_GZIP, bytes(cramjam.gzip.compress(plain))),
            "zstd garbage": (rb.COMPRESSION_ZSTD, b"\x28\xb5\x2f\xfd" + b"\x01" * 40),
            "lz4 linked blocks": (rb.COMPRESSION_LZ4, bytes(linked.finish())),
            "snappy garbage": (rb.COMPRESSION_SNAPPY, b"\x82SNAPPY\x00" + b"\xff" * 12),
        }
        for what, (codec, payload) in cases.items():
            assert len(payload) < 100_000, what
            data = compressed_frame(template, codec, max_timestamp=-1, payload=payload)
            if "bomb" in what and codec != rb.COMPRESSION_SNAPPY:
                # a valid batch: only the cap refuses it
                assert len(rb.decode_records(data, 64 << 20)[0].value or b"") == value_length
            got = await client.request(PRODUCE, 9, produce("b", 0, data))
            part = got.responses[0].partition_responses[0]
            assert part.error_code is ErrorCode.corrupt_message, what
        assert running.broker.log_manager.get_partition("b", 0).log_end_offset == 0
        fine = compressed_frame(template, rb.COMPRESSION_ZSTD, max_timestamp=-1)
        got = await client.request(PRODUCE, 9, produce("b", 0, fine))
        assert got.responses[0].partition_responses[0].error_code is ErrorCode.none
        await client.aclose()


def rb_varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def rb_varint_u(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def rb_lz4(data: bytes) -> bytes:
    from trio_broker.protocol import compression
    return compression.compress(rb.COMPRESSION_LZ4, data)


def rb_xerial(data: bytes) -> bytes:
    from trio_broker.protocol import compression
    return compression.compress(rb.COMPRESSION_SNAPPY, data)


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
async def test_a_batch_whose_record_count_is_short_of_its_records_is_invalid_record(
        start_broker: Any, timestamp_type: str) -> None:
    """A batch declaring fewer records than it carries (its CRC and lastOffsetDelta consistent
    with the count) or with bytes after its last record is INVALID_RECORD, as Kafka's
    RecordIterator answers ("records still remaining"), whatever the timestamp type and codec:
    stored, it would give its records fewer offsets than they need. Nothing is stored."""
    import struct

    with trio.fail_after(TIMEOUT):
        running = await start_broker({})
        running.broker.log_manager.create_topic(
            "n", 1, {"message.timestamp.type": timestamp_type})
        client = await WireClient.connect(running.port)

        def recount(data: bytes, count: int, extra: bytes = b"") -> bytes:
            out = bytearray(data + extra)
            struct.pack_into(">i", out, 8, len(out) - rb.LOG_OVERHEAD)
            struct.pack_into(">i", out, rb.HEADER_SIZE - 4, count)  # record count
            struct.pack_into(">i", out, 23, count - 1)  # lastOffsetDelta
            struct.pack_into(">I", out, rb.CRC_OFFSET, rb.compute_crc(out))
            return bytes(out)

        two = [(None, b"a", [], now_ms()), (None, b"b", [], now_ms())]
        cases = {
            "two records counted as one": recount(rb.build_batch(two), 1),
            "bytes after the last record": recount(batch(b"a"), 1, b"\x00\x00\x00"),
            "compressed, counted as one": recount(
                rb.build_batch(two, attributes=rb.COMPRESSION_ZSTD), 1),
        }
        for what, data in cases.items():
            got = await client.request(PRODUCE, 9, produce("n", 0, data))
            part = got.responses[0].partition_responses[0]
            assert part.error_code is ErrorCode.invalid_record, what
            assert "records still remaining" in (part.error_message or ""), what
        assert running.broker.log_manager.get_partition("n", 0).log_end_offset == 0
        got = await client.request(PRODUCE, 9, produce("n", 0, batch(b"fine")))
        assert got.responses[0].partition_responses[0].error_code is ErrorCode.none
        await client.aclose()
