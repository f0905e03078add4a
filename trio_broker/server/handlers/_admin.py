"""Helpers shared by the metadata and admin handlers (no handler is registered here).

kio generates one dataclass per API version, and fields come and go between versions. Handlers
build their answers with :func:`build`, which keeps only the fields the chosen version has, so
one code path serves every version of an API.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import sys
from types import ModuleType
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import response_schema

#: Kafka's ``Topic.validate``: legal characters and maximum length.
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249

#: ``TopicInfo.internal`` aside, names Kafka treats as internal (``Topic.isInternal``).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

#: AclOperation codes (``org.apache.kafka.common.acl.AclOperation``), for the authorized-operations
#: bit fields. Without an authorizer Kafka reports every operation the resource supports.
_READ, _WRITE, _CREATE, _DELETE, _ALTER, _DESCRIBE = 3, 4, 5, 6, 7, 8
_CLUSTER_ACTION, _DESCRIBE_CONFIGS, _ALTER_CONFIGS, _IDEMPOTENT_WRITE = 9, 10, 11, 12
_CREATE_TOKENS, _DESCRIBE_TOKENS = 13, 14
TOPIC_OPERATIONS = sum(
    1 << op for op in (_READ, _WRITE, _CREATE, _DELETE, _ALTER, _DESCRIBE, _DESCRIBE_CONFIGS,
                       _ALTER_CONFIGS)
)
CLUSTER_OPERATIONS = sum(
    1 << op for op in (_CREATE, _ALTER, _DESCRIBE, _CLUSTER_ACTION, _DESCRIBE_CONFIGS,
                       _ALTER_CONFIGS, _IDEMPOTENT_WRITE, _CREATE_TOKENS, _DESCRIBE_TOKENS)
)
#: The "not requested" value of an authorized-operations field.
OPERATIONS_OMITTED = -(2**31)


def response_module(api_key: int, api_version: int) -> ModuleType:
    """The kio module holding a response class and its nested entity classes."""
    return sys.modules[response_schema(api_key, api_version).__module__]


_FIELD_NAMES: dict[type[Any], frozenset[str]] = {}


def _field_names(cls: type[Any]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in dataclasses.fields(cls))
    return names


#: Per (class, names given), whether every given name is a field of the class: then the values
#: pass as they are (the common case, and on the per-request path of Produce and Fetch).
_ALL_FIELDS: dict[tuple[type[Any], tuple[str, ...]], bool] = {}


def build(cls: type[Any], **values: Any) -> Any:
    """Instantiate a kio dataclass with the given values that this version has; drop the rest."""
    key = (cls, tuple(values))
    fits = _ALL_FIELDS.get(key)
    if fits is None:
        fits = _ALL_FIELDS[key] = _field_names(cls).issuperset(values)
    if fits:
        return cls(**values)
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type[Any], name: str) -> bool:
    return name in _field_names(cls)


def topic_name_problem(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's ``Topic.validate``), or None."""
    if name is None or name == "":
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters"
    if not _LEGAL_TOPIC.match(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
                "alphanumerics, '.', '_' and '-'")
    return None


def error_of(exc: BaseException) -> tuple[ErrorCode, str]:
    """Kafka error code and message of a storage error (or of an unexpected exception)."""
    code = getattr(exc, "error_code", None)
    message = getattr(exc, "message", None) or str(exc)
    if isinstance(code, ErrorCode):
        return code, message
    if isinstance(code, int):
        try:
            return ErrorCode(code), message
        except ValueError:
            pass
    return ErrorCode.unknown_server_error, message


def is_internal_topic(name: str, info: Any = None) -> bool:
    if info is not None and getattr(info, "internal", False):
        return True
    return name in INTERNAL_TOPICS


#: Reported per resource when the broker runs without storage (the front end on its own).
NO_STORAGE = (ErrorCode.kafka_storage_error, "The broker has no storage attached")


def unknown_isolation_level(body: Any) -> bool:
    """An ``isolation_level`` other than 0 (read_uncommitted) and 1 (read_committed): Kafka's
    ``IsolationLevel.forId`` throws, and the consumer's Fetch or ListOffsets fails with
    UNKNOWN_SERVER_ERROR (``getErrorResponse``) instead of reading as read_uncommitted."""
    return int(getattr(body, "isolation_level", 0)) not in (0, 1)


def throttle(ctx: Any) -> datetime.timedelta:
    """The response's ``throttle_time`` field."""
    return datetime.timedelta(milliseconds=ctx.throttle_ms)


def duplicates(names: Any) -> set[Any]:
    """Items that occur more than once (Kafka refuses such entries with INVALID_REQUEST)."""
    seen: set[Any] = set()
    repeated: set[Any] = set()
    for name in names:
        (repeated if name in seen else seen).add(name)
    return repeated


#: ``Errors.THROTTLING_QUOTA_EXCEEDED.message()`` (KIP-599).
THROTTLING_QUOTA_EXCEEDED = "The throttling quota has been exceeded."
#: Kafka's controller refuses a CreateTopics or CreatePartitions request that would create more
#: partitions than this in one go (``MAX_PARTITIONS_PER_BATCH``, ``MAX_RECORDS_PER_USER_OP``),
#: with POLICY_VIOLATION for every topic of the request.
MAX_PARTITIONS_PER_REQUEST = 10_000


def controller_mutation_quota(ctx: Any, strict_since: int) -> Any:
    """The request's controller mutation quota (unlimited when the broker has no quotas)."""
    from ..quota_manager import ControllerMutationQuota

    quotas = ctx.broker.client_quotas
    if quotas is None:
        return ControllerMutationQuota(None, ctx.user, ctx.client_id, strict=False)
    return quotas.managers.mutation_quota(ctx, strict_since)
