"""The message classes of the old versions kio lacks (:mod:`trio_broker.protocol.legacy_schemas`).

* field by field against Kafka 3.9's specs: :data:`EXPECTED` was written from the spec text
  (``clients/src/main/resources/common/message/*.json``, each field's ``versions``), not from the
  generator's table;
* one frame built byte by byte from the spec (ListOffsets v0) decodes as Kafka reads it;
* every generated version round-trips through kio's writer, the pre-scan and kio's reader;
* hypothesis: random bytes and mutated valid frames of every new version, decoded in a child
  process (``tests/decode_worker.py``), give an answer or ``InvalidRequest``, never anything else.
"""

from __future__ import annotations

import dataclasses
import io
import random
import struct
import sys
import typing
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional

from tests.decode_worker import DecodeWorker, live
from tests.protocol.test_prescan import mutate
from trio_broker.protocol import legacy_schemas
from trio_broker.protocol.codec import (
    decode_request,
    encode_body,
    encode_request,
    request_schema,
    response_schema,
)
from trio_broker.protocol.legacy_schemas import legacy_request, legacy_response, legacy_versions
from trio_broker.protocol.prescan import scan_body
from trio_broker.server.registry import supported_versions

SUPPORTED = supported_versions()

# Kafka 3.9's layout of each old version, from the specs: "name:type", arrays of structs as
# "name:[" ... "]", "?" marking nullable. Request first, then response.
_ACL = ["principal:string", "host:string", "operation:int8", "permission_type:int8"]
_PRODUCE_REQUEST = ["acks:int16", "timeout:timedelta_i32", "topic_data:[", "name:string",
                    "partition_data:[", "index:int32", "records:records?", "]", "]"]
_PRODUCE_PARTITION = ["index:int32", "error_code:error_code", "base_offset:int64"]
_FETCH_TOPICS = ["topics:[", "topic:string", "partitions:[", "partition:int32",
                 "fetch_offset:int64", "partition_max_bytes:int32", "]", "]"]
_FETCH_HEAD = ["replica_id:int32", "max_wait:timedelta_i32", "min_bytes:int32"]
_FETCH_RESPONSES = ["responses:[", "topic:string", "partitions:[", "partition_index:int32",
                    "error_code:error_code", "high_watermark:int64", "records:records?", "]",
                    "]"]
EXPECTED: dict[tuple[int, int], tuple[list[str], list[str]]] = {
    # ProduceResponse: ThrottleTimeMs ("1+") follows Responses; LogAppendTimeMs is "2+".
    (0, 0): (_PRODUCE_REQUEST,
             ["responses:[", "name:string", "partition_responses:[", *_PRODUCE_PARTITION, "]",
              "]"]),
    (0, 1): (_PRODUCE_REQUEST,
             ["responses:[", "name:string", "partition_responses:[", *_PRODUCE_PARTITION, "]",
              "]", "throttle_time:timedelta_i32"]),
    (0, 2): (_PRODUCE_REQUEST,
             ["responses:[", "name:string", "partition_responses:[", *_PRODUCE_PARTITION,
              "log_append_time:datetime_i64?", "]", "]", "throttle_time:timedelta_i32"]),
    # FetchRequest: MaxBytes "3+", IsolationLevel "4+"; FetchResponse: ThrottleTimeMs "1+"
    # first, LastStableOffset and AbortedTransactions "4+".
    (1, 0): (_FETCH_HEAD + _FETCH_TOPICS, _FETCH_RESPONSES),
    (1, 1): (_FETCH_HEAD + _FETCH_TOPICS, ["throttle_time:timedelta_i32", *_FETCH_RESPONSES]),
    (1, 2): (_FETCH_HEAD + _FETCH_TOPICS, ["throttle_time:timedelta_i32", *_FETCH_RESPONSES]),
    (1, 3): ([*_FETCH_HEAD, "max_bytes:int32", *_FETCH_TOPICS],
             ["throttle_time:timedelta_i32", *_FETCH_RESPONSES]),
    (2, 0): (["replica_id:int32", "topics:[", "name:string", "partitions:[",
              "partition_index:int32", "timestamp:int64", "max_num_offsets:int32", "]", "]"],
             ["topics:[", "name:string", "partitions:[", "partition_index:int32",
              "error_code:error_code", "old_style_offsets:[]int64", "]", "]"]),
    (8, 0): (["group_id:string", "topics:[", "name:string", "partitions:[",
              "partition_index:int32", "committed_offset:int64", "committed_metadata:string?",
              "]", "]"],
             ["topics:[", "name:string", "partitions:[", "partition_index:int32",
              "error_code:error_code", "]", "]"]),
    (8, 1): (["group_id:string", "generation_id_or_member_epoch:int32", "member_id:string",
              "topics:[", "name:string", "partitions:[", "partition_index:int32",
              "committed_offset:int64", "commit_timestamp:int64", "committed_metadata:string?",
              "]", "]"],
             ["topics:[", "name:string", "partitions:[", "partition_index:int32",
              "error_code:error_code", "]", "]"]),
    (9, 0): (["group_id:string", "topics:[", "name:string", "partition_indexes:[]int32", "]"],
             ["topics:[", "name:string", "partitions:[", "partition_index:int32",
              "committed_offset:int64", "metadata:string?", "error_code:error_code", "]", "]"]),
    (19, 0): (["topics:[", "name:string", "num_partitions:int32", "replication_factor:int16",
               "assignments:[", "partition_index:int32", "broker_ids:[]int32", "]",
               "configs:[", "name:string", "value:string?", "]", "]", "timeout:timedelta_i32"],
              ["topics:[", "name:string", "error_code:error_code", "]"]),
    (19, 1): (["topics:[", "name:string", "num_partitions:int32", "replication_factor:int16",
               "assignments:[", "partition_index:int32", "broker_ids:[]int32", "]",
               "configs:[", "name:string", "value:string?", "]", "]", "timeout:timedelta_i32",
               "validate_only:bool"],
              ["topics:[", "name:string", "error_code:error_code", "error_message:string?",
               "]"]),
    (20, 0): (["topic_names:[]string", "timeout:timedelta_i32"],
              ["responses:[", "name:string", "error_code:error_code", "]"]),
    (23, 0): (["topics:[", "topic:string", "partitions:[", "partition:int32",
               "leader_epoch:int32", "]", "]"],
              ["topics:[", "topic:string", "partitions:[", "error_code:error_code",
               "partition:int32", "end_offset:int64", "]", "]"]),
    (23, 1): (["topics:[", "topic:string", "partitions:[", "partition:int32",
               "leader_epoch:int32", "]", "]"],
              ["topics:[", "topic:string", "partitions:[", "error_code:error_code",
               "partition:int32", "leader_epoch:int32", "end_offset:int64", "]", "]"]),
    (27, 0): (["markers:[", "producer_id:int64", "producer_epoch:int16",
               "transaction_result:bool", "topics:[", "name:string",
               "partition_indexes:[]int32", "]", "coordinator_epoch:int32", "]"],
              ["markers:[", "producer_id:int64", "topics:[", "name:string", "partitions:[",
               "partition_index:int32", "error_code:error_code", "]", "]", "]"]),
    (29, 0): (["resource_type_filter:int8", "resource_name_filter:string?",
               "principal_filter:string?", "host_filter:string?", "operation:int8",
               "permission_type:int8"],
              ["throttle_time:timedelta_i32", "error_code:error_code", "error_message:string?",
               "resources:[", "resource_type:int8", "resource_name:string", "acls:[", *_ACL,
               "]", "]"]),
    (30, 0): (["creations:[", "resource_type:int8", "resource_name:string", *_ACL, "]"],
              ["throttle_time:timedelta_i32", "results:[", "error_code:error_code",
               "error_message:string?", "]"]),
    (31, 0): (["filters:[", "resource_type_filter:int8", "resource_name_filter:string?",
               "principal_filter:string?", "host_filter:string?", "operation:int8",
               "permission_type:int8", "]"],
              ["throttle_time:timedelta_i32", "filter_results:[", "error_code:error_code",
               "error_message:string?", "matching_acls:[", "error_code:error_code",
               "error_message:string?", "resource_type:int8", "resource_name:string", *_ACL,
               "]", "]"]),
    (32, 0): (["resources:[", "resource_type:int8", "resource_name:string",
               "configuration_keys:[]string?", "]"],
              ["throttle_time:timedelta_i32", "results:[", "error_code:error_code",
               "error_message:string?", "resource_type:int8", "resource_name:string",
               "configs:[", "name:string", "value:string?", "read_only:bool",
               "is_default:bool", "is_sensitive:bool", "]", "]"]),
    (35, 0): (["topics:[?", "topic:string", "partitions:[]int32", "]"],
              ["throttle_time:timedelta_i32", "results:[", "error_code:error_code",
               "log_dir:string", "topics:[", "name:string", "partitions:[",
               "partition_index:int32", "partition_size:int64", "offset_lag:int64",
               "is_future_key:bool", "]", "]", "]"]),
    (34, 0): (["dirs:[", "path:string", "topics:[", "name:string", "partitions:[]int32", "]",
               "]"],
              ["throttle_time:timedelta_i32", "results:[", "topic_name:string", "partitions:[",
               "partition_index:int32", "error_code:error_code", "]", "]"]),
    (38, 0): (["renewers:[", "principal_type:string", "principal_name:string", "]",
               "max_lifetime:timedelta_i64"],
              ["error_code:error_code", "principal_type:string", "principal_name:string",
               "issue_timestamp:datetime_i64", "expiry_timestamp:datetime_i64",
               "max_timestamp:datetime_i64", "token_id:string", "hmac:bytes",
               "throttle_time:timedelta_i32"]),
    (39, 0): (["hmac:bytes", "renew_period:timedelta_i64"],
              ["error_code:error_code", "expiry_timestamp:datetime_i64",
               "throttle_time:timedelta_i32"]),
    (40, 0): (["hmac:bytes", "expiry_time_period:timedelta_i64"],
              ["error_code:error_code", "expiry_timestamp:datetime_i64",
               "throttle_time:timedelta_i32"]),
    (41, 0): (["owners:[?", "principal_type:string", "principal_name:string", "]"],
              ["error_code:error_code", "tokens:[", "principal_type:string",
               "principal_name:string", "issue_timestamp:int64", "expiry_timestamp:int64",
               "max_timestamp:int64", "token_id:string", "hmac:bytes", "renewers:[",
               "principal_type:string", "principal_name:string", "]", "]",
               "throttle_time:timedelta_i32"]),
}
#: The versions kio 0.6.5 lacks that the broker serves.
PAIRS = sorted(EXPECTED)
IDS = [f"{key}-v{version}" for key, version in PAIRS]


def layout(cls: type) -> list[str]:
    out: list[str] = []
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        nullable = "?" if is_optional(f) else ""
        if isinstance(kind, EntityField | EntityTupleField):
            out += [f"{f.name}:[{nullable}", *layout(kind.type_), "]"]
        else:
            array = "[]" if kind.is_array else ""
            out.append(f"{f.name}:{array}{f.metadata['kafka_type']}{nullable}")
    return out


def test_the_generator_covers_exactly_the_versions_expected() -> None:
    assert sorted(legacy_versions()) == PAIRS


@pytest.mark.parametrize(("api_key", "version"), PAIRS, ids=IDS)
def test_fields_match_kafka_39_specs(api_key: int, version: int) -> None:
    request, response = legacy_request(api_key, version), legacy_response(api_key, version)
    assert request is not None and response is not None
    assert (layout(request), layout(response)) == EXPECTED[(api_key, version)]
    for cls in (request, response):
        assert cls.__version__ == version and cls.__api_key__ == api_key
        # Only WriteTxnMarkers v1 of the bases is flexible; every old version here is not.
        assert cls.__flexible__ is False
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert request.__header_schema__.__module__.endswith("request_header.v1.header")
    assert response.__header_schema__.__module__.endswith("response_header.v0.header")
    # the codec's lookup finds them, and their nested classes sit next to them by name
    assert request_schema(api_key, version) is request
    assert response_schema(api_key, version) is response
    for cls in (request, response):
        module = sys.modules[cls.__module__]
        assert getattr(module, cls.__name__) is cls
        for f in dataclasses.fields(cls):
            kind = classify_field(f)
            if isinstance(kind, EntityField | EntityTupleField):
                assert getattr(module, kind.type_.__name__) is kind.type_


def test_list_offsets_v0_frame_built_from_the_spec_decodes() -> None:
    """Header v1, then replica_id, topics[name, partitions[index, timestamp, max_num_offsets]]:
    the bytes a 0.8-era client sends."""
    client = b"old"
    frame = (struct.pack(">hhih", 2, 0, 42, len(client)) + client
             + struct.pack(">i", -1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
             + struct.pack(">i", 1) + struct.pack(">iqi", 3, -2, 7))
    request = decode_request(frame, SUPPORTED)
    assert (request.api_version, request.correlation_id, request.client_id) == (0, 42, "old")
    [topic] = request.body.topics
    [part] = topic.partitions
    assert (topic.name, part.partition_index, part.timestamp, part.max_num_offsets) == (
        "t", 3, -2, 7)
    # and the response's old_style_offsets array is int32 count + int64s
    module = sys.modules[response_schema(2, 0).__module__]
    body = module.ListOffsetsResponse(topics=(module.ListOffsetsTopicResponse(
        name="t", partitions=(module.ListOffsetsPartitionResponse(
            partition_index=3, error_code=ErrorCode.none, old_style_offsets=(9, 4)),)),))
    assert encode_body(body) == (struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iih", 1, 3, 0)
                                 + struct.pack(">iqq", 2, 9, 4))


def test_a_typo_in_the_table_fails_loudly() -> None:
    real = request_schema(2, 0)
    bad = legacy_schemas.Legacy(2, 0, 1, request=(legacy_schemas.Drop("topics.nope"),))
    with pytest.raises(ValueError, match="no field topics.nope"):
        legacy_schemas._build(bad, "request")
    # and the failed build left the registered classes alone
    assert getattr(sys.modules[real.__module__], real.__name__) is real


HYPOTHESIS = settings(deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck),
                      phases=[Phase.explicit, Phase.reuse, Phase.generate])


def _roundtrip(cls: type, body: Any) -> Any:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, body)
    data = buffer.getvalue()
    checked = scan_body(cls, data, 0)
    assert checked == data  # nothing to clamp or strip in a valid body
    decoded, end = entity_reader(cls)(data, 0)
    assert end == len(data)
    return decoded


@pytest.mark.parametrize(("api_key", "version"), PAIRS, ids=IDS)
def test_every_generated_version_round_trips(api_key: int, version: int) -> None:
    request, response = legacy_request(api_key, version), legacy_response(api_key, version)

    @settings(HYPOTHESIS, max_examples=15)
    @given(req=st.from_type(typing.cast(type, request)),
           resp=st.from_type(typing.cast(type, response)))
    def check(req: Any, resp: Any) -> None:
        assert encode_body(_roundtrip(typing.cast(type, request), req)) == encode_body(req)
        assert encode_body(_roundtrip(typing.cast(type, response), resp)) == encode_body(resp)
        frame = encode_request(api_key, version, 5, "rt", req)[4:]
        decoded = decode_request(frame, SUPPORTED)
        assert encode_body(decoded.body) == encode_body(req)

    check()


@pytest.mark.parametrize(("api_key", "version"), PAIRS, ids=IDS)
def test_fuzzed_frames_of_old_versions_only_raise_invalid_request(
        decode_worker: list[DecodeWorker], api_key: int, version: int) -> None:
    """Valid frames mutated, and random tails after a valid header, decoded in a child
    process with the broker's table: ``ok`` or ``invalid``, never an error or a dead child."""
    request = typing.cast(type, legacy_request(api_key, version))
    head = struct.pack(">hhih", api_key, version, 1, 1) + b"c"

    @settings(HYPOTHESIS, max_examples=6)
    @given(body=st.from_type(request), seed=st.integers(0, 2**32 - 1),
           tails=st.lists(st.binary(max_size=120), min_size=10, max_size=10))
    def check(body: Any, seed: int, tails: list[bytes]) -> None:
        frame = encode_request(api_key, version, 3, "fuzz", body)[4:]
        rng = random.Random(seed)
        frames = [frame, *(mutate(rng, frame) for _ in range(40)),
                  *(head + tail for tail in tails)]
        outcomes = live(decode_worker).decode(frames)
        assert outcomes[0] == "ok", outcomes[0]
        bad = [(f.hex(), o) for f, o in zip(frames, outcomes, strict=True)
               if not (o == "ok" or o.startswith("invalid "))]
        assert not bad, bad

    check()
