"""Microbenchmark: µs per ``decode_request`` and per pre-scan for typical client frames.

``python -m bench.decode_micro [--repeat N] [--baseline CODEC_PY]`` prints, per frame: the whole
``decode_request``, the pre-scan alone (``scan_body``) and kio's native body reader alone, the
best of several runs. ``--baseline`` loads another ``codec.py`` (e.g. from
``git show main~1:trio_broker/protocol/codec.py > /tmp/codec_before.py``) and times its
``decode_request`` interleaved with ours, so that a loaded machine skews both alike.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import timeit
from collections.abc import Callable
from functools import partial
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
    """``{label: (api_key, version, body)}``, shaped like what librdkafka and Java clients send."""
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


def _best_us(funcs: list[Any], number: int, rounds: int = 7) -> list[float]:
    """Best µs per call of each function, the functions timed in turn in every round."""
    best = [float("inf")] * len(funcs)
    for _ in range(rounds):
        for index, func in enumerate(funcs):
            best[index] = min(best[index], timeit.timeit(func, number=number) / number * 1e6)
    return best


def _load_baseline(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("_baseline_codec", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.decode_request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20000)
    parser.add_argument("--baseline", help="another codec.py whose decode_request to compare")
    args = parser.parse_args()
    supported = supported_versions()
    baseline = _load_baseline(args.baseline) if args.baseline else None
    print(f"{'frame':34} {'bytes':>5} {'baseline':>8} {'decode_request':>14} {'prescan':>8} "
          f"{'kio body':>9}  (µs)")
    for label, (key, version, body) in frames().items():
        frame = encode_request(key, version, 7, "rdkafka", body)[4:]
        decoded = decode_request(frame, supported)
        assert decoded.body == body, label
        schema = request_schema(key, version)
        offset = 2 + 2 + 4 + 2 + len("rdkafka") + (1 if schema.__flexible__ else 0)
        reader = entity_reader(schema)
        funcs: list[Callable[[], Any]] = [partial(decode_request, frame, supported),
                                          partial(reader, frame, offset)]
        if scan_body is not None:
            funcs.append(partial(scan_body, schema, frame, offset))
        if baseline is not None:
            assert baseline(frame, supported).body == body, label
            funcs.append(partial(baseline, frame, supported))
        times = _best_us(funcs, args.repeat)
        whole, native = times[0], times[1]
        scan = times[2] if scan_body is not None else float("nan")
        before = times[-1] if baseline is not None else float("nan")
        print(f"{label:34} {len(frame):5} {before:8.2f} {whole:14.2f} {scan:8.2f} "
              f"{native:9.2f}")


if __name__ == "__main__":
    main()
