"""Topic names, topic-level configs (Kafka's ``LogConfig``) and their broker defaults."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..config import LONG_MAX, BrokerConfig
from .errors import InvalidConfig, InvalidTopic

MAX_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def validate_topic_name(name: str) -> None:
    """Raise :class:`InvalidTopic` unless Kafka would accept ``name`` (``Topic.validate``)."""
    if not name:
        raise InvalidTopic("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopic("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopic(
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"topic name: {name}")
    if not _LEGAL_NAME.match(name):
        raise InvalidTopic(
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'")


def collision_key(name: str) -> str:
    """Kafka forbids topics differing only by '.' vs '_' (their metric names would clash)."""
    return name.replace(".", "_")


@attrs.frozen
class ConfigEntry:
    """One topic config as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: str  # "TOPIC_CONFIG" | "DEFAULT_CONFIG" | "STATIC_BROKER_CONFIG"
    is_default: bool
    read_only: bool = False
    sensitive: bool = False
    #: The broker key the default comes from (for DescribeConfigs synonyms), if any.
    broker_key: str | None = None


@attrs.frozen
class _TopicKey:
    name: str
    kind: str  # long, int, boolean, string, list, double
    broker_attr: str | None  # BrokerConfig attribute (or property) giving the default
    broker_key: str | None
    default: Any
    check: Callable[[Any], str | None] | None = None


def _min(minimum: int) -> Callable[[Any], str | None]:
    return lambda v: None if v >= minimum else f"must be at least {minimum}"


def _choices(*allowed: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in allowed else "must be one of " + ", ".join(allowed)


def _cleanup(value: Any) -> str | None:
    # Every element counts, empty ones too: Kafka's list type splits "compact,,delete" into
    # three, and "" is not a policy.
    parts = [p.strip() for p in str(value).split(",")]
    if all(p in ("delete", "compact") for p in parts):
        return None
    return "must be a list of delete, compact"


_KEYS = [
    _TopicKey("cleanup.policy", "list", "log_cleanup_policy", "log.cleanup.policy", "delete",
              _cleanup),
    _TopicKey("compression.type", "string", None, "compression.type", "producer",
              _choices("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    _TopicKey("delete.retention.ms", "long", "log_cleaner_delete_retention_ms",
              "log.cleaner.delete.retention.ms", 86400000, _min(0)),
    _TopicKey("file.delete.delay.ms", "long", None, None, 60000, _min(0)),
    _TopicKey("flush.messages", "long", "log_flush_interval_messages",
              "log.flush.interval.messages", LONG_MAX, _min(1)),
    _TopicKey("flush.ms", "long", "log_flush_interval_ms", "log.flush.interval.ms", LONG_MAX,
              _min(0)),
    _TopicKey("index.interval.bytes", "int", "log_index_interval_bytes",
              "log.index.interval.bytes", 4096, _min(0)),
    _TopicKey("max.compaction.lag.ms", "long", "log_cleaner_max_compaction_lag_ms",
              "log.cleaner.max.compaction.lag.ms", LONG_MAX, _min(1)),
    _TopicKey("max.message.bytes", "int", "message_max_bytes", "message.max.bytes", 1048588,
              _min(0)),
    _TopicKey("message.downconversion.enable", "boolean", "log_message_downconversion_enable",
              "log.message.downconversion.enable", True),
    _TopicKey("message.timestamp.after.max.ms", "long", None, None, LONG_MAX, _min(0)),
    _TopicKey("message.timestamp.before.max.ms", "long", None, None, LONG_MAX, _min(0)),
    _TopicKey("message.timestamp.difference.max.ms", "long", None, None, LONG_MAX, _min(0)),
    _TopicKey("message.timestamp.type", "string", "log_message_timestamp_type",
              "log.message.timestamp.type", "CreateTime",
              _choices("CreateTime", "LogAppendTime")),
    _TopicKey("min.cleanable.dirty.ratio", "double", "log_cleaner_min_cleanable_ratio",
              "log.cleaner.min.cleanable.ratio", 0.5,
              lambda v: None if 0 <= v <= 1 else "must be between 0 and 1"),
    _TopicKey("min.compaction.lag.ms", "long", "log_cleaner_min_compaction_lag_ms",
              "log.cleaner.min.compaction.lag.ms", 0, _min(0)),
    _TopicKey("min.insync.replicas", "int", None, None, 1, _min(1)),
    _TopicKey("preallocate", "boolean", None, None, False),
    _TopicKey("retention.bytes", "long", "log_retention_bytes", "log.retention.bytes", -1),
    _TopicKey("retention.ms", "long", "log_retention_effective_ms", "log.retention.ms",
              604800000, _min(-1)),
    _TopicKey("segment.bytes", "int", "log_segment_bytes", "log.segment.bytes", 1073741824,
              _min(14)),
    _TopicKey("segment.index.bytes", "int", "log_index_size_max_bytes",
              "log.index.size.max.bytes", 10485760, _min(4)),
    _TopicKey("segment.jitter.ms", "long", None, None, 0, _min(0)),
    _TopicKey("segment.ms", "long", "log_roll_effective_ms", "log.roll.ms", 604800000, _min(1)),
    _TopicKey("unclean.leader.election.enable", "boolean", None, None, False),
]
TOPIC_KEYS: Mapping[str, _TopicKey] = {k.name: k for k in _KEYS}

_INT_LIMITS = {"int": 2**31 - 1, "long": LONG_MAX}


def _parse(key: _TopicKey, text: str) -> Any:
    raw = text.strip()
    try:
        if key.kind in _INT_LIMITS:
            value: Any = int(raw)
            if not -_INT_LIMITS[key.kind] - 1 <= value <= _INT_LIMITS[key.kind]:
                raise ValueError
        elif key.kind == "boolean":
            if raw.lower() not in ("true", "false"):
                raise ValueError
            value = raw.lower() == "true"
        elif key.kind == "double":
            value = float(raw)
        else:
            value = raw
    except ValueError:
        raise InvalidConfig(
            f"Invalid value {text} for configuration {key.name}: expected a {key.kind}") from None
    problem = key.check(value) if key.check is not None else None
    if problem:
        raise InvalidConfig(f"Invalid value {text} for configuration {key.name}: {problem}")
    return value


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic config overrides; return them normalised. Raises :class:`InvalidConfig`."""
    result: dict[str, str] = {}
    for name, value in configs.items():
        key = TOPIC_KEYS.get(name)
        if key is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if value is None:
            raise InvalidConfig(f"Null value not supported for topic configs: {name}")
        _parse(key, value)
        result[name] = value.strip()
    return result


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _broker_default(config: BrokerConfig, key: _TopicKey) -> tuple[Any, bool]:
    """The broker-level value of a topic key and whether the broker config set it explicitly."""
    if key.broker_attr is None:
        return key.default, False
    value = getattr(config, key.broker_attr)
    if value is None:
        value = key.default
    return value, _value_differs_from_default(config, key)


def _value_differs_from_default(config: BrokerConfig, key: _TopicKey) -> bool:
    # A key counts as set in the broker config when its effective value differs from Kafka's
    # default (the loaded config keeps no record of which keys the file named).
    return key.broker_attr is not None and _broker_value(config, key) != key.default


def _broker_value(config: BrokerConfig, key: _TopicKey) -> Any:
    value = getattr(config, key.broker_attr) if key.broker_attr else None
    return key.default if value is None else value


def describe_configs(config: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config with its effective value and source, sorted by name."""
    entries = []
    for key in _KEYS:
        if key.name in overrides:
            entries.append(ConfigEntry(key.name, overrides[key.name], "TOPIC_CONFIG", False,
                                       broker_key=key.broker_key))
            continue
        value, explicit = _broker_default(config, key)
        entries.append(ConfigEntry(
            key.name, _format(value), "STATIC_BROKER_CONFIG" if explicit else "DEFAULT_CONFIG",
            not explicit, broker_key=key.broker_key))
    return entries


@attrs.frozen
class LogConfig:
    """The effective settings of one topic's logs (broker defaults plus topic overrides)."""

    segment_bytes: int
    segment_ms: int
    segment_index_bytes: int
    index_interval_bytes: int
    retention_ms: int
    retention_bytes: int
    max_message_bytes: int
    log_append_time: bool
    delete_enabled: bool
    flush_messages: int
    flush_ms: int
    #: KIP-937 bounds on CreateTime record timestamps (LONG_MAX: unbounded).
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX
    #: ``cleanup.policy`` includes compact: the log cleaner dedupes it by key.
    compact: bool = False
    delete_retention_ms: int = 86400000
    min_cleanable_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    #: ``compression.type``: the codec old producers' messages are converted to (``producer``:
    #: their own).
    compression: str = "producer"
    #: ``message.downconversion.enable``: old fetchers (Fetch v0-v3) get converted records.
    downconversion_enable: bool = True

    @classmethod
    def build(cls, config: BrokerConfig, overrides: Mapping[str, str]) -> LogConfig:
        def get(name: str) -> Any:
            key = TOPIC_KEYS[name]
            if name in overrides:
                return _parse(key, overrides[name])
            return _broker_value(config, key)

        compact = "compact" in str(get("cleanup.policy"))
        max_lag = get("max.compaction.lag.ms")
        return cls(
            segment_bytes=get("segment.bytes"),
            # Kafka's LogConfig.maxSegmentMs: a compacted log rolls by max.compaction.lag.ms
            # too, or its active segment could hold dirty records past the lag forever.
            segment_ms=min(get("segment.ms"), max_lag) if compact else get("segment.ms"),
            segment_index_bytes=get("segment.index.bytes"),
            index_interval_bytes=get("index.interval.bytes"),
            retention_ms=get("retention.ms"),
            retention_bytes=get("retention.bytes"),
            max_message_bytes=get("max.message.bytes"),
            log_append_time=get("message.timestamp.type") == "LogAppendTime",
            delete_enabled="delete" in str(get("cleanup.policy")),
            flush_messages=get("flush.messages"),
            flush_ms=get("flush.ms"),
            # Kafka's LogConfig: the deprecated difference.max.ms stands in for either bound
            # left at its default.
            timestamp_before_max_ms=_or_difference(get("message.timestamp.before.max.ms"),
                                                   get("message.timestamp.difference.max.ms")),
            timestamp_after_max_ms=_or_difference(get("message.timestamp.after.max.ms"),
                                                  get("message.timestamp.difference.max.ms")),
            compact=compact,
            delete_retention_ms=get("delete.retention.ms"),
            min_cleanable_ratio=float(get("min.cleanable.dirty.ratio")),
            min_compaction_lag_ms=get("min.compaction.lag.ms"),
            max_compaction_lag_ms=max_lag,
            compression=str(get("compression.type")),
            downconversion_enable=bool(get("message.downconversion.enable")),
        )

    def check(self) -> None:
        """Kafka's ``LogConfig.validateValues`` across keys, for a creation or a change (never
        for topics loaded at start-up): raises :class:`InvalidConfig`."""
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfig(
                f"conflict topic config setting min.compaction.lag.ms "
                f"({self.min_compaction_lag_ms}) > max.compaction.lag.ms "
                f"({self.max_compaction_lag_ms})")


def _or_difference(bound: int, difference: int) -> int:
    return bound if bound != LONG_MAX else difference
