"""The error response of any request (Kafka's ``AbstractRequest.getErrorResponse``), sans-IO.

When a handler fails unexpectedly Kafka answers the request with the API's error response
(``RequestHandlerHelper.sendErrorOrCloseConnection``) and keeps the connection: UNKNOWN_SERVER_ERROR
in every error field, the requested topics, partitions, groups or resources echoed back so the
client can match each one, and "no data" everywhere else.

One generic rule, driven by kio's generated schemas, builds that response for every API:

* a response array is **mirrored** from the request array it pairs with: the one whose entries
  share the most fields with the response's entries, the same array name breaking ties
  (``topic_data`` → ``responses``, ``partition_data`` → ``partition_responses``). Only arrays
  whose entries carry an error code (or lead to some that do, or only hold identifying fields)
  are mirrored; the others stay empty, as Kafka leaves them. Request arrays of plain names or
  indexes (``coordinator_keys``, ``groups``, ``topic_names``, ``partition_indexes``) become
  entries keyed by that value.
* in a mirrored entry, identifying fields (names, topic ids, partition indexes, group ids, keys,
  resource types and names, quota entities) are copied from the request entry;
* every ``error_code`` field gets the code, ``error_message`` is null (Kafka sends no message
  for UNKNOWN_SERVER_ERROR so as not to leak internals), ``throttle_time_ms`` is 0, and every
  other field takes its schema default, else Kafka's "nothing" value: -1 for integers (offsets,
  ids, epochs: ``INVALID_OFFSET``, ``Node.noNode()``, ``NO_PRODUCER_EPOCH``), empty strings,
  bytes and arrays, null where nullable.

:data:`_OVERRIDES` holds the few places where Kafka's hand-written ``getErrorResponse`` differs
from that rule (Produce acks=0 has no response at all; some APIs answer only a top-level error).
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from collections.abc import Callable, Mapping
from functools import cache
from types import UnionType
from typing import Any, TypeVar, cast

import attrs
from kio.schema.errors import ErrorCode

from .codec import response_schema

PRODUCE = 0

#: Fields that identify a request entry and are echoed in its response entry.
_IDENTITY = frozenset({
    "name", "topic", "topic_id", "partition", "partition_index", "index", "group_id", "key",
    "resource_type", "resource_name", "entity_type", "entity_name",
    "producer_id",  # WriteTxnMarkers markers
})
#: Response field → the request field that feeds it when the names differ.
_ALIASES = {"partition_index": ("partition_index", "partition")}
#: Request arrays of plain values → the response entry field each value becomes.
_VALUE_ARRAYS: dict[str, str | tuple[str, ...]] = {
    "coordinator_keys": "key",        # FindCoordinator v4+
    "groups": "group_id",             # DescribeGroups
    "groups_names": "group_id",       # DeleteGroups
    "group_ids": "group_id",          # ConsumerGroupDescribe
    "topic_names": "name",            # DeleteTopics v1-v5
    "partition_indexes": "partition_index",  # OffsetFetch v1, DescribeProducers
    # ElectLeaders (partition_id), AddPartitionsToTxn v0-v3 (partition_index): the first of
    # these the response entry has.
    "partitions": ("partition_id", "partition_index"),
    "transactional_ids": "transactional_id",  # DescribeTransactions
}
#: Kafka's ``Errors.UNKNOWN_SERVER_ERROR.message()``, sent where Kafka uses ``error.message()``.
UNKNOWN_SERVER_ERROR_MESSAGE = ("The server experienced an unexpected error when processing the "
                                "request.")


@attrs.frozen
class _Override:
    """Where one API's ``getErrorResponse`` differs from the generic rule."""

    #: Response arrays (dotted paths from the response root) left empty.
    not_mirrored: frozenset[str] = frozenset()
    #: Response arrays sent as null.
    null: frozenset[str] = frozenset()
    #: Top-level fields copied from the request.
    copied: tuple[str, ...] = ()
    #: Values used instead of null for these dotted paths.
    instead_of_null: Mapping[str, Any] = attrs.field(factory=dict)
    #: error_message fields get Kafka's default message for the code (``error.message()``).
    message: bool = False
    #: Response array (dotted path) → the request array it answers entry for entry, where
    #: the entries share no field the generic pairing could go by (the ACL APIs).
    paired: Mapping[str, str] = attrs.field(factory=dict)


_NONE = _Override()
#: ``{api_key: [(min_version, max_version, override)]}``, checked against Kafka's request classes.
_OVERRIDES: dict[int, list[tuple[int, int, _Override]]] = {
    # FetchRequest: the session id is echoed.
    1: [(0, 12, _Override(copied=("session_id",))),
        # v13+: the top-level error only ("the client can handle a top level error code").
        (13, 99, _Override(copied=("session_id",), not_mirrored=frozenset({"responses"})))],
    # MetadataRequest: a topic asked for by id gets the name "" ("the response does not allow
    # null").
    3: [(0, 99, _Override(instead_of_null={"topics.name": ""}))],
    # OffsetFetchRequest: v1 answers each partition with offset -1 and metadata "" (NO_METADATA);
    # v2-v7 only the top-level error; v8+ each group with its error and no topics.
    9: [(0, 1, _Override(instead_of_null={"topics.partitions.metadata": ""})),
        (2, 7, _Override(not_mirrored=frozenset({"topics"}))),
        (8, 99, _Override(not_mirrored=frozenset({"groups.topics"})))],
    # AddPartitionsToTxnRequest v4+: the top-level error only, no transaction results.
    24: [(4, 99, _Override(not_mirrored=frozenset({"results_by_transaction"})))],
    # FindCoordinator: prepareOldResponse / prepareErrorResponse set error.message().
    10: [(0, 99, _Override(message=True))],
    # LeaveGroupRequest: the top-level error only, no member entries.
    13: [(0, 99, _Override(not_mirrored=frozenset({"members"})))],
    # DescribeConfigsRequest: error.message() in each result.
    32: [(0, 99, _Override(message=True))],
    # OffsetDeleteRequest: the top-level error only.
    47: [(0, 99, _Override(not_mirrored=frozenset({"topics"})))],
    # DescribeClientQuotasRequest: entries null.
    48: [(0, 99, _Override(null=frozenset({"entries"})))],
    # AlterClientQuotasRequest: error.message() in each entry.
    49: [(0, 99, _Override(message=True))],
    # CreateAclsRequest / DeleteAclsRequest: one result per creation / filter (nCopies).
    30: [(0, 99, _Override(paired={"results": "creations"}))],
    31: [(0, 99, _Override(paired={"filter_results": "filters"}))],
    # SaslAuthenticateRequest: the code and error.message(), no bytes.
    36: [(0, 99, _Override(message=True))],
    # DescribeQuorumRequest.getTopLevelErrorResponse: the code alone.
    55: [(0, 99, _Override(not_mirrored=frozenset({"topics"})))],
    # UpdateFeaturesResponse.createWithErrors: result rows only when the request succeeded.
    57: [(0, 99, _Override(not_mirrored=frozenset({"results"})))],
}


def error_response(api_key: int, api_version: int, request_body: Any,
                   error_code: int = ErrorCode.unknown_server_error.value) -> Any:
    """The response body Kafka sends for a request that failed with ``error_code``.

    ``None`` when Kafka sends nothing and closes the connection instead (Produce with acks=0).
    ``request_body`` may be ``None`` (an ApiVersions request of an unsupported version).
    """
    if api_key == PRODUCE and int(getattr(request_body, "acks", 1)) == 0:
        return None
    code = ErrorCode(error_code)
    if api_key in _SCRAM_CREDENTIALS:
        return _scram_credentials_error(api_key, api_version, request_body, code)
    if api_key == _ALTER_REPLICA_LOG_DIRS:
        return _alter_replica_log_dirs_error(api_version, request_body, code)
    if api_key == _CREATE_DELEGATION_TOKEN:
        return _create_delegation_token_error(api_version, code)
    override = _override(api_key, api_version)
    message = override_message(code) if override.message else None
    builder = _Builder(code, message, override)
    return builder.build(response_schema(api_key, api_version), request_body, "")


#: DescribeUserScramCredentials and AlterUserScramCredentials: written by hand in Kafka too.
_SCRAM_CREDENTIALS = (50, 51)
_ALTER_REPLICA_LOG_DIRS, _CREATE_DELEGATION_TOKEN = 34, 38
#: Kafka's "no time" in a timestamp field (``DelegationTokenManager.ErrorTimestamp``): -1 ms.
NO_TIME = datetime.datetime.fromtimestamp(-0.001, tz=datetime.UTC)


def _alter_replica_log_dirs_error(api_version: int, body: Any, code: ErrorCode) -> Any:
    """AlterReplicaLogDirsRequest.getErrorResponse: one result per topic entry of every
    directory, in request order (the directories flattened), each partition with the error."""
    import sys

    module = sys.modules[response_schema(_ALTER_REPLICA_LOG_DIRS, api_version).__module__]
    return module.AlterReplicaLogDirsResponse(
        throttle_time=datetime.timedelta(0), results=tuple(
            module.AlterReplicaLogDirTopicResult(topic_name=topic.name, partitions=tuple(
                module.AlterReplicaLogDirPartitionResult(partition_index=partition,
                                                         error_code=code)
                for partition in topic.partitions))
            for directory in getattr(body, "dirs", None) or () for topic in directory.topics))


def _create_delegation_token_error(api_version: int, code: ErrorCode) -> Any:
    """CreateDelegationTokenRequest.getErrorResponse: ``prepareResponse`` with ANONYMOUS as
    owner and requester, timestamps -1, no token id, an empty HMAC."""
    import sys

    module = sys.modules[response_schema(_CREATE_DELEGATION_TOKEN, api_version).__module__]
    fields = dict(error_code=code, principal_type="User", principal_name="ANONYMOUS",
                  issue_timestamp=NO_TIME, expiry_timestamp=NO_TIME, max_timestamp=NO_TIME,
                  token_id="", hmac=b"", throttle_time=datetime.timedelta(0))
    if api_version >= 3:
        fields.update(token_requester_principal_type="User",
                      token_requester_principal_name="ANONYMOUS")
    return module.CreateDelegationTokenResponse(**fields)


def _scram_credentials_error(api_key: int, api_version: int, body: Any, code: ErrorCode) -> Any:
    """Describe: the top-level error and one result per requested user, its ``user`` unset.
    Alter: one result per distinct user of the deletions and upsertions, sorted by name."""
    import sys

    module = sys.modules[response_schema(api_key, api_version).__module__]
    message = override_message(code)
    zero = datetime.timedelta(0)
    if api_key == 50:
        results = tuple(module.DescribeUserScramCredentialsResult(
            user="", error_code=code, error_message=message, credential_infos=())
            for _ in (getattr(body, "users", None) or ()))
        return module.DescribeUserScramCredentialsResponse(
            throttle_time=zero, error_code=code, error_message=message, results=results)
    changes = (*getattr(body, "deletions", ()), *getattr(body, "upsertions", ()))
    users = sorted({change.name for change in changes})
    return module.AlterUserScramCredentialsResponse(throttle_time=zero, results=tuple(
        module.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
        for user in users))


#: Kafka's ``Errors.X.message()`` for the codes sent with their default message.
_MESSAGES = {
    ErrorCode.unknown_server_error: UNKNOWN_SERVER_ERROR_MESSAGE,
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.invalid_request: (
        "This most likely occurs because of a request being malformed by the client library "
        "or the message was sent to an incompatible broker. See the broker logs for more "
        "details."),
}


def override_message(code: ErrorCode) -> str | None:
    """Kafka's default message for ``code`` where we know it."""
    return _MESSAGES.get(code)


def _override(api_key: int, api_version: int) -> _Override:
    for low, high, override in _OVERRIDES.get(api_key, ()):
        if low <= api_version <= high:
            return override
    return _NONE


# ------------------------------------------------------------------------------ schema shape
_T = TypeVar("_T")


def _memo(fn: Callable[..., _T]) -> Callable[..., _T]:
    """``functools.cache`` for functions of classes (typeshed's Hashable check rejects them)."""
    return cast(Callable[..., _T], cache(fn))


@attrs.frozen
class _Field:
    name: str
    kafka_type: str | None          # None: an entity or an array of entities
    nullable: bool
    array: bool
    entity: type[Any] | None        # the nested class of an entity or entity array
    default: Any                    # dataclasses.MISSING when the schema has none


@_memo
def _fields(cls: Any) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nullable = False
        if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            nullable = len(args) < len(typing.get_args(hint))
            hint = args[0]
        array = typing.get_origin(hint) is tuple
        inner = typing.get_args(hint)[0] if array else hint
        entity = inner if dataclasses.is_dataclass(inner) else None
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out.append(_Field(f.name, f.metadata.get("kafka_type"), nullable, array,
                          entity if isinstance(entity, type) else None, default))
    return tuple(out)


def _by_name(cls: Any) -> dict[str, _Field]:
    return {f.name: f for f in _fields(cls)}


def _kind(f: _Field) -> str:
    if f.entity is not None:
        return "entities" if f.array else "entity"
    return "values" if f.array else "scalar"


def _similarity(request_cls: Any, response_cls: Any) -> int:
    """How many fields (by name and kind) two entry classes share."""
    request = {_canonical(f.name): _kind(f) for f in _fields(request_cls)}
    return len([f for f in _fields(response_cls) if request.get(_canonical(f.name)) == _kind(f)])


def _canonical(name: str) -> str:
    return "partition_index" if name == "partition" else name


@_memo
def _pairs(request_cls: Any, response_cls: Any) -> dict[str, tuple[str, bool]]:
    """Response entity-array field → (request array field, whether that one holds values)."""
    if request_cls is None:
        return {}
    request = _fields(request_cls)
    response = [f for f in _fields(response_cls) if f.entity is not None and f.array]
    candidates: list[tuple[int, int, int, str, str]] = []
    for r_index, r in enumerate(response):
        assert r.entity is not None
        for q_index, q in enumerate(request):
            if not q.array:
                continue
            if q.entity is not None:
                score = _similarity(q.entity, r.entity)
                if score == 0:
                    continue
                same = int(q.name == r.name)
                candidates.append((score * 2 + same, -q_index, -r_index, r.name, q.name))
    candidates.sort(reverse=True)
    pairs: dict[str, tuple[str, bool]] = {}
    used: set[str] = set()
    for _, _, _, r_name, q_name in candidates:
        if r_name not in pairs and q_name not in used:
            pairs[r_name] = (q_name, False)
            used.add(q_name)
    for r in response:
        if r.name in pairs:
            continue
        assert r.entity is not None
        target_fields = _by_name(r.entity)
        for q in request:
            target = _value_target(q.name, target_fields)
            if q.array and q.entity is None and q.name not in used and target is not None:
                pairs[r.name] = (q.name, True)
                used.add(q.name)
                break
    return pairs


def _value_target(request_array: str, response_fields: Mapping[str, _Field]) -> str | None:
    """The response entry field that a request array of plain values feeds, if it has one."""
    targets = _VALUE_ARRAYS.get(request_array, ())
    for target in (targets,) if isinstance(targets, str) else targets:
        if target in response_fields:
            return target
    return None


@_memo
def _mirrors(request_cls: Any, response_cls: Any, path: str,
             not_mirrored: frozenset[str]) -> bool:
    """Whether entries of ``response_cls`` are worth echoing: they carry an error code, lead to
    mirrored entries that do, or hold nothing but identifying fields (quota entities)."""
    fields = _fields(response_cls)
    if any(f.kafka_type == "error_code" for f in fields):
        return True
    scalars = [f for f in fields if f.entity is None]
    if scalars and all(f.name in _IDENTITY for f in scalars) and len(scalars) == len(fields):
        return True
    for r_name, (q_name, values) in _pairs(request_cls, response_cls).items():
        child_path = f"{path}.{r_name}" if path else r_name
        if child_path in not_mirrored:
            continue
        q_entity = _by_name(request_cls)[q_name].entity
        r_entity = _by_name(response_cls)[r_name].entity
        assert r_entity is not None
        if values:
            if any(f.kafka_type == "error_code" for f in _fields(r_entity)):
                return True
            continue
        assert q_entity is not None
        if _mirrors(q_entity, r_entity, child_path, not_mirrored):
            return True
    return False


# ------------------------------------------------------------------------------ building
class _Builder:
    def __init__(self, code: ErrorCode, message: str | None, override: _Override) -> None:
        self.code = code
        self.message = message
        self.override = override

    def build(self, cls: type[Any], request: Any, path: str, *,
              identity: Mapping[str, Any] | None = None) -> Any:
        """One response entity; ``request`` is the request entry it answers (or None)."""
        request_cls = type(request) if dataclasses.is_dataclass(request) else None
        pairs = _pairs(request_cls, cls)
        values: dict[str, Any] = {}
        for f in _fields(cls):
            child_path = f"{path}.{f.name}" if path else f.name
            if f.entity is not None and f.array:
                pair = pairs.get(f.name)
                if pair is None and child_path in self.override.paired:
                    pair = (self.override.paired[child_path], False)
                values[f.name] = self._array(f, request, request_cls, pair, child_path)
                continue
            value = self._scalar(f, child_path)
            if identity is not None and f.name in identity:
                value = identity[f.name]
            elif not path and f.name in self.override.copied and request is not None:
                value = getattr(request, f.name, value)
            elif request_cls is not None and path and f.name in _IDENTITY:
                for source in _ALIASES.get(f.name, (f.name,)):
                    if hasattr(request, source):
                        value = getattr(request, source)
                        break
            if value is None and not f.nullable:
                value = self._nothing(f, child_path, allow_null=False)
            elif value is None and child_path in self.override.instead_of_null:
                value = self.override.instead_of_null[child_path]
            values[f.name] = value
        return cls(**values)

    def _array(self, f: _Field, request: Any, request_cls: type[Any] | None,
               pair: tuple[str, bool] | None, path: str) -> Any:
        assert f.entity is not None
        if path in self.override.null and f.nullable:
            return None
        if pair is None or request is None or path in self.override.not_mirrored:
            return ()
        q_name, values = pair
        items = getattr(request, q_name, None) or ()  # a null array echoes as empty
        if values:
            target = _value_target(q_name, _by_name(f.entity))
            assert target is not None
            return tuple(self.build(f.entity, None, path, identity={target: item})
                         for item in items)
        assert request_cls is not None
        q_entity = _by_name(request_cls)[q_name].entity
        assert q_entity is not None
        if not _mirrors(q_entity, f.entity, path, self.override.not_mirrored):
            return ()
        return tuple(self.build(f.entity, item, path) for item in items)

    def _scalar(self, f: _Field, path: str) -> Any:
        if f.kafka_type == "error_code":
            return self.code
        if f.name == "error_message" and f.kafka_type == "string":
            return self.message if f.nullable or self.message else ""
        if f.kafka_type in ("timedelta_i32", "timedelta_i64"):
            return datetime.timedelta(0)  # throttle_time_ms: 0
        if f.default is not dataclasses.MISSING:
            return f.default
        return self._nothing(f, path, allow_null=True)

    def _nothing(self, f: _Field, path: str, *, allow_null: bool) -> Any:
        """Kafka's value for "no data" in a field without a schema default."""
        if f.array:
            return None if allow_null and f.nullable and path in self.override.null else ()
        if f.entity is not None:
            return self.build(f.entity, None, path)
        if path in self.override.instead_of_null:
            return self.override.instead_of_null[path]
        kafka_type = f.kafka_type
        if kafka_type == "records":
            return b""  # MemoryRecords.EMPTY
        if allow_null and f.nullable:
            return None
        if kafka_type in ("int8", "int16", "int32", "int64"):
            return -1
        if kafka_type in ("uint16", "float64"):
            return 0
        if kafka_type == "bool":
            return False
        if kafka_type == "string":
            return ""
        if kafka_type == "bytes":
            return b""
        if kafka_type == "uuid":
            return uuid.UUID(int=0)
        if kafka_type == "datetime_i64":
            return datetime.datetime.fromtimestamp(0, tz=datetime.UTC)
        raise TypeError(f"no 'nothing' value for {kafka_type} field {f.name}")
