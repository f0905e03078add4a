"""Message classes for the request versions Kafka 3.9 serves and kio 0.6.5 lacks (KIP-896).

kio is generated from Kafka 4.x's JSON specs, which dropped the oldest versions of many APIs.
Those versions differ from kio's lowest version of the same API by a handful of fields, so they
are not written out class by class: :data:`LEGACY` is a table, read off Kafka 3.9's
``clients/src/main/resources/common/message/*.json``, of how each missing version differs from
kio's lowest one (fields it lacks, fields only it has, a different flexibility), and
:func:`derive` builds kio-compatible frozen dataclasses from kio's class and that difference.

The classes carry what kio's reader and writer and our pre-scan read: ``__type__``,
``__version__``, ``__flexible__``, ``__api_key__``, ``__header_schema__``, ``kafka_type`` in
each field's metadata, ``tuple[X, ...]`` for arrays and ``X | None`` for nullable fields. The
nested classes of one message live in a module object of their own (registered in
``sys.modules``), as kio's do, so that handlers find them by name next to the top-level class.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, Final, Literal

import attrs
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

__all__ = ["LEGACY", "Add", "Drop", "Legacy", "derive", "legacy_request", "legacy_response",
           "legacy_versions"]

Kind = Literal["request", "response"]

#: The Python type kio uses for each ``kafka_type`` an added field may have.
_PYTHON_TYPES: Final[Mapping[str, type]] = {
    "int8": i8, "int16": i16, "int32": i32, "int64": i64, "bool": bool, "string": str,
}


@attrs.frozen
class Drop:
    """A field of kio's lowest version that the old version does not have (dotted path)."""

    path: str


@attrs.frozen
class Add:
    """A field only the old version has: ``path`` (dotted), placed after the sibling ``after``
    (``None``: first). ``array`` makes it ``tuple[type, ...]``."""

    path: str
    after: str | None
    kafka_type: str
    array: bool = False
    nullable: bool = False
    default: Any = dataclasses.MISSING


Op = Drop | Add


@attrs.frozen
class Legacy:
    """One old version of an API: its key and version, kio's version it is derived from, the
    request's and response's differences, and its flexibility when that differs from the base."""

    api_key: int
    version: int
    base: int
    request: tuple[Op, ...] = ()
    response: tuple[Op, ...] = ()
    flexible: bool | None = None


# Read off Kafka 3.9's specs ("versions" of each field). Every entry names kio's lowest
# version as its base; a field whose "versions" excludes the old version is a Drop, a field
# whose "versions" is only the old range ("0", "1") is an Add.
LEGACY: Final[tuple[Legacy, ...]] = (
    # Produce: TransactionalId is "3+" (v0-v2 carry message sets of magic 0/1, or v2 batches);
    # the response's ThrottleTimeMs is "1+", LogAppendTimeMs "2+".
    Legacy(0, 0, 3, request=(Drop("transactional_id"),),
           response=(Drop("throttle_time"),
                     Drop("responses.partition_responses.log_append_time"))),
    Legacy(0, 1, 3, request=(Drop("transactional_id"),),
           response=(Drop("responses.partition_responses.log_append_time"),)),
    Legacy(0, 2, 3, request=(Drop("transactional_id"),)),
    # Fetch: MaxBytes is "3+", IsolationLevel "4+"; the response's ThrottleTimeMs is "1+",
    # LastStableOffset and AbortedTransactions "4+".
    *(Legacy(1, version, 4,
             request=((Drop("max_bytes"),) if version < 3 else ()) + (Drop("isolation_level"),),
             response=((Drop("throttle_time"),) if version == 0 else ()) + (
                 Drop("responses.partitions.last_stable_offset"),
                 Drop("responses.partitions.aborted_transactions")))
      for version in range(4)),
    # ListOffsets: v1 removed MaxNumOffsets and replaced OldStyleOffsets by Timestamp+Offset.
    Legacy(2, 0, 1,
           request=(Add("topics.partitions.max_num_offsets", "timestamp", "int32", default=i32(1)),),
           response=(Drop("topics.partitions.timestamp"), Drop("topics.partitions.offset"),
                     Add("topics.partitions.old_style_offsets", "error_code", "int64",
                         array=True))),
    # OffsetCommit: GenerationIdOrMemberEpoch and MemberId are "1+", CommitTimestamp is "1",
    # RetentionTimeMs is "2-4"; the response gained ThrottleTimeMs in v3 (kio's v2 lacks it).
    Legacy(8, 0, 2,
           request=(Drop("generation_id_or_member_epoch"), Drop("member_id"),
                    Drop("retention_time"))),
    Legacy(8, 1, 2,
           request=(Drop("retention_time"),
                    Add("topics.partitions.commit_timestamp", "committed_offset", "int64",
                        default=i64(-1)))),
    # OffsetFetch v0: the same bytes as v1 (v0 read ZooKeeper's offsets, v1 Kafka's).
    Legacy(9, 0, 1),
    # CreateTopics: ValidateOnly is "1+", ErrorMessage "1+", ThrottleTimeMs "2+".
    Legacy(19, 0, 2, request=(Drop("validate_only"),),
           response=(Drop("throttle_time"), Drop("topics.error_message"))),
    Legacy(19, 1, 2, response=(Drop("throttle_time"),)),
    # DeleteTopics: ThrottleTimeMs is "1+".
    Legacy(20, 0, 1, response=(Drop("throttle_time"),)),
    # OffsetForLeaderEpoch: CurrentLeaderEpoch "2+", ThrottleTimeMs "2+", response LeaderEpoch "1+".
    Legacy(23, 0, 2, request=(Drop("topics.partitions.current_leader_epoch"),),
           response=(Drop("throttle_time"), Drop("topics.partitions.leader_epoch"))),
    Legacy(23, 1, 2, request=(Drop("topics.partitions.current_leader_epoch"),),
           response=(Drop("throttle_time"),)),
    # WriteTxnMarkers: the same fields; flexibleVersions is "1+".
    Legacy(27, 0, 1, flexible=False),
    # The ACL APIs: the pattern type fields are "1+" (v0 knows only LITERAL patterns).
    Legacy(29, 0, 1, request=(Drop("pattern_type_filter"),),
           response=(Drop("resources.pattern_type"),)),
    Legacy(30, 0, 1, request=(Drop("creations.resource_pattern_type"),)),
    Legacy(31, 0, 1, request=(Drop("filters.pattern_type_filter"),),
           response=(Drop("filter_results.matching_acls.pattern_type"),)),
    # DescribeConfigs: IncludeSynonyms, ConfigSource and Synonyms are "1+", IsDefault is "0".
    Legacy(32, 0, 1, request=(Drop("include_synonyms"),),
           response=(Drop("results.configs.config_source"), Drop("results.configs.synonyms"),
                     Add("results.configs.is_default", "read_only", "bool"))),
    # AlterReplicaLogDirs v0: the same bytes as v1.
    Legacy(34, 0, 1),
    # DescribeLogDirs v0: the same bytes as v1.
    Legacy(35, 0, 1),
    # The delegation token APIs' v0: the same bytes as v1 (v1 changed the throttling).
    Legacy(38, 0, 1),
    Legacy(39, 0, 1),
    Legacy(40, 0, 1),
    Legacy(41, 0, 1),
)


def _substitute(annotation: Any, old: type, new: type) -> Any:
    """``annotation`` with the entity class ``old`` replaced by ``new`` (in tuples, unions)."""
    if annotation is old:
        return new
    origin = typing.get_origin(annotation)
    if origin is tuple:
        (inner, _) = typing.get_args(annotation)
        return tuple[_substitute(inner, old, new), ...]  # type: ignore[misc]
    if origin in (types.UnionType, typing.Union):
        args = [_substitute(arg, old, new) for arg in typing.get_args(annotation)]
        union = args[0]
        for arg in args[1:]:
            union = union | arg
        return union
    return annotation


def _added_field(op: Add) -> tuple[str, Any, dataclasses.Field[Any]]:
    python_type: Any = _PYTHON_TYPES[op.kafka_type]
    if op.array:
        python_type = tuple[python_type, ...]
    if op.nullable:
        python_type = python_type | None
    spec: dataclasses.Field[Any] = dataclasses.field(
        metadata={"kafka_type": op.kafka_type}, default=op.default)
    return op.path.rsplit(".", 1)[-1], python_type, spec


def derive(base: type, *, version: int, flexible: bool, header: type, ops: tuple[Op, ...],
           module: types.ModuleType, prefix: str = "") -> type:
    """A copy of the kio class ``base`` (and, recursively, its nested classes) for ``version``,
    with the differences ``ops`` applied; every class is set on ``module``."""
    drops = {op.path for op in ops if isinstance(op, Drop)}
    adds: dict[str | None, list[Add]] = {}
    for op in ops:
        parent = op.path.rpartition(".")[0]
        if isinstance(op, Add) and (parent + "." if parent else "") == prefix:
            adds.setdefault(op.after, []).append(op)
    specs: list[tuple[str, Any, dataclasses.Field[Any]]] = [
        _added_field(op) for op in adds.get(None, [])]
    for f in dataclasses.fields(base):
        path = prefix + f.name
        if path in drops:
            continue
        annotation: Any = f.type
        kind = classify_field(f)
        if isinstance(kind, EntityField | EntityTupleField):
            nested = derive(kind.type_, version=version, flexible=flexible, header=header,
                            ops=ops, module=module, prefix=path + ".")
            annotation = _substitute(annotation, kind.type_, nested)
        spec: dataclasses.Field[Any] = dataclasses.field(
            metadata=f.metadata, default=f.default, default_factory=f.default_factory)
        specs.append((f.name, annotation, spec))
        specs.extend(_added_field(op) for op in adds.get(f.name, []))
    namespace = {
        "__type__": base.__type__,  # type: ignore[attr-defined]
        "__version__": i16(version),
        "__flexible__": flexible,
        "__api_key__": base.__api_key__,  # type: ignore[attr-defined]
        "__header_schema__": header,
        "__doc__": f"{base.__name__} v{version} (Kafka 3.9; derived from kio's "
                   f"v{base.__version__}).",  # type: ignore[attr-defined]
    }
    cls = dataclasses.make_dataclass(base.__name__, specs, namespace=namespace, frozen=True,
                                     slots=True, kw_only=True)
    cls.__module__ = module.__name__  # make_dataclass takes no module= before Python 3.12
    setattr(module, base.__name__, cls)
    return cls


def _check_paths(entry: Legacy, kind: Kind, built: type) -> None:
    """Every Drop names a field of the base and every Add appears: a typo fails at import."""
    ops = entry.request if kind == "request" else entry.response
    base = _kio(kind, entry.api_key, entry.base)
    for op in ops:
        if isinstance(op, Drop) and _find(base, op.path) is None:
            raise ValueError(f"{base.__name__} v{entry.base} has no field {op.path}")
        if isinstance(op, Add) and _find(built, op.path) is None:
            raise ValueError(f"{op.path} was not added to {built.__name__}")


def _find(cls: type, path: str) -> dataclasses.Field[Any] | None:
    head, _, rest = path.partition(".")
    for f in dataclasses.fields(cls):
        if f.name == head:
            if not rest:
                return f
            kind = classify_field(f)
            if isinstance(kind, EntityField | EntityTupleField):
                return _find(kind.type_, rest)
    return None


def _kio(kind: Kind, api_key: int, version: int) -> type:
    load = load_request_schema if kind == "request" else load_response_schema
    found: type = load(api_key, version)
    return found


def _build(entry: Legacy, kind: Kind) -> type:
    base = _kio(kind, entry.api_key, entry.base)
    flexible = bool(base.__flexible__) if entry.flexible is None else entry.flexible  # type: ignore[attr-defined]
    header: type = base.__header_schema__  # type: ignore[attr-defined]
    if entry.flexible is False:
        # Non-flexible versions use request header v1 and response header v0.
        header = RequestHeaderV1 if kind == "request" else ResponseHeaderV0
    name = f"{__name__}.{api_key_map[entry.api_key]}_v{entry.version}_{kind}"
    module = types.ModuleType(name, f"Kafka 3.9's {kind} classes (see {__name__}).")
    cls = derive(base, version=entry.version, flexible=flexible, header=header,
                 ops=entry.request if kind == "request" else entry.response, module=module)
    if cls.__type__ is not (EntityType.request if kind == "request"  # type: ignore[attr-defined]
                            else EntityType.response):
        raise ValueError(f"{cls.__name__}: not a {kind}")
    _check_paths(entry, kind, cls)
    # Registered only once checked: handlers find nested classes through sys.modules.
    sys.modules[name] = module
    return cls


_BY_KEY: Final[dict[tuple[int, int], Legacy]] = {(e.api_key, e.version): e for e in LEGACY}


@cache
def _legacy(api_key: int, version: int, kind: Kind) -> type | None:
    entry = _BY_KEY.get((api_key, version))
    return None if entry is None else _build(entry, kind)


def legacy_request(api_key: int, version: int) -> type | None:
    """The request class of an old version kio lacks, or None."""
    return _legacy(api_key, version, "request")


def legacy_response(api_key: int, version: int) -> type | None:
    """The response class of an old version kio lacks, or None."""
    return _legacy(api_key, version, "response")


def legacy_versions() -> tuple[tuple[int, int], ...]:
    """Every ``(api_key, version)`` this module provides."""
    return tuple(_BY_KEY)
