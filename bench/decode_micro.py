"""Microbenchmark: µs per ``decode_request`` and per pre-scan for typical client frames.

``python -m bench.decode_micro [--repeat N]`` prints, per frame: the whole ``decode_request``,
the pre-scan alone (``scan_body``) and kio's native body reader alone, best of 5 runs.
"""

from __future__ import annotations

import argparse
import datetime
import timeit
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.fetch.v12 import request as fetch
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.metadata.v12 import request as metadata
from kio.schema.offset_commit.v8 import request as offset_commit
from kio.schema.produce.v9 import request as produce
from kio.schema.types import GroupId, TopicName
from kio.serial import entity_reader
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64

from trio_broker.protocol.codec import decode_request, encode_request, request_schema

try:
    from trio_broker.protocol.prescan import scan_body
except ImportError:  # a tree from before the pre-scan: measure decode_request alone
    scan_body = None  # type: ignore[assignment]
from trio_broker.protocol.records import build_batch
from trio_broker.server.registry import supported_versions

_ZERO = i32Timedelta.parse(datetime.timedelta(0))


def frames() -> dict[str, tuple[int, int, Any]]:
    """``{label: (api_key, version, body)}`` shaped like what librdkafka and the Java client send."""
    batch = build_batch([(b"key", b"x" * 100, [], 1_700_000_000_000)])
    return {
        "Produce v9 (1 batch, 1 record)": (0, 9, produce.ProduceRequest(
            transactional_id=None, acks=i16(-1), timeout=i32Timedelta.parse(
                datetime.timedelta(seconds=30)),
            topic_data=(produce.TopicProduceData(name=TopicName("orders"), partition_data=(
                produce.PartitionProduceData(index=i32(0), records=Records(batch)),)),))),
        "Fetch v12 (1 partition)": (1, 12, fetch.FetchRequest(
            max_wait=_ZERO, min_bytes=i32(1), max_bytes=i32(52428800), isolation_level=i8(1),
            topics=(fetch.FetchTopic(topic=TopicName("orders"), partitions=(
                fetch.FetchPartition(partition=i32(0), fetch_offset=i64(12345),
                                     partition_max_bytes=i32(1048576)),)),),
            forgotten_topics_data=(), rack_id="")),
        "Metadata v12 (1 topic)": (3, 12, metadata.MetadataRequest(
            topics=(metadata.MetadataRequestTopic(topic_id=None, name=TopicName("orders")),),
            allow_auto_topic_creation=True, include_topic_authorized_operations=False)),
        "ApiVersions v3": (18, 3, ApiVersionsRequest(
            client_software_name="librdkafka", client_software_version="2.3.0")),
        "OffsetCommit v8 (1 partition)": (8, 8, offset_commit.OffsetCommitRequest(
            group_id=GroupId("group"), generation_id_or_member_epoch=i32(3),
            member_id="rdkafka-0f3c7a52-5b1d-4f7e-9a55-6d0f0a7c2b11", group_instance_id=None,
            topics=(offset_commit.OffsetCommitRequestTopic(name=TopicName("orders"), partitions=(
                offset_commit.OffsetCommitRequestPartition(
                    partition_index=i32(0), committed_offset=i64(12345),
                    committed_metadata=""),)),))),
        "Heartbeat v4": (12, 4, HeartbeatRequest(
            group_id=GroupId("group"), generation_id=i32(3),
            member_id="rdkafka-0f3c7a52-5b1d-4f7e-9a55-6d0f0a7c2b11")),
    }


def _best_us(func: Any, number: int) -> float:
    return min(timeit.repeat(func, number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20000)
    args = parser.parse_args()
    supported = supported_versions()
    print(f"{'frame':34} {'bytes':>5} {'decode_request':>14} {'prescan':>8} {'kio body':>9}  (µs)")
    for label, (key, version, body) in frames().items():
        frame = encode_request(key, version, 7, "rdkafka", body)[4:]
        decoded = decode_request(frame, supported)
        assert decoded.body == body, label
        schema = request_schema(key, version)
        offset = 2 + 2 + 4 + 2 + len("rdkafka") + (1 if schema.__flexible__ else 0)
        reader = entity_reader(schema)
        whole = _best_us(lambda f=frame: decode_request(f, supported), args.repeat)
        scan = (float("nan") if scan_body is None else
                _best_us(lambda f=frame, s=schema, o=offset: scan_body(s, f, o), args.repeat))
        native = _best_us(lambda f=frame, r=reader, o=offset: r(f, o), args.repeat)
        print(f"{label:34} {len(frame):5} {whole:14.2f} {scan:8.2f} {native:9.2f}")


if __name__ == "__main__":
    main()
