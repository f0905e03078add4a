"""DescribeConfigs (API key 32): topic configs from storage and this broker's own settings.

Topic resources are described by the storage layer (overrides with source TOPIC_CONFIG, the
rest with the broker-level value they inherit). The broker resource lists every key of
:class:`~trio_broker.config.BrokerConfig` with its value and Kafka's ``ConfigHelper`` rules for
its source and synonyms: each synonym key (``log.retention.ms``, ``.minutes``, ``.hours``) is
looked up in the dynamic per-broker configs (DYNAMIC_BROKER_CONFIG), then the dynamic cluster
defaults (DYNAMIC_DEFAULT_BROKER_CONFIG), then the static config (STATIC_BROKER_CONFIG when it
differs from the default: the properties file or an override) and the defaults
(DEFAULT_CONFIG); the entry's source is the first synonym's. Keys that cannot change at run
time are read-only. The cluster-default resource ("") lists the dynamic default configs only.
"""

from __future__ import annotations

from typing import Any

import attrs
from kio.schema.errors import ErrorCode

from ...config import BrokerConfig
from ...config.dynamic import DYNAMIC_KEYS, DynamicBrokerConfigs, broker_synonyms
from ...offload import Steps
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import NO_STORAGE, build, error_of, response_module, throttle

DESCRIBE_CONFIGS = 32
MIN_VERSION = 0  # v0: Kafka 3.9 (legacy_schemas)
MAX_VERSION = 4

#: ``ConfigResource.Type`` codes.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
BROKER_LOGGER_RESOURCE = 8

#: ``DescribeConfigsResponse.ConfigSource`` codes.
CONFIG_SOURCES = {
    "UNKNOWN": 0,
    "TOPIC_CONFIG": 1,
    "DYNAMIC_TOPIC_CONFIG": 1,
    "DYNAMIC_BROKER_CONFIG": 2,
    "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
    "STATIC_BROKER_CONFIG": 4,
    "DEFAULT_CONFIG": 5,
    "DYNAMIC_BROKER_LOGGER_CONFIG": 6,
}

#: ``DescribeConfigsResponse.ConfigType`` codes, by our config type names.
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
                "list": 7, "class": 8, "password": 9}

#: Types of the topic-level configs (Kafka's ``TopicConfig``), for the v3+ ``config_type`` field.
TOPIC_CONFIG_TYPES = {
    "cleanup.policy": "list", "compression.type": "string", "delete.retention.ms": "long",
    "file.delete.delay.ms": "long", "flush.messages": "long", "flush.ms": "long",
    "follower.replication.throttled.replicas": "list", "index.interval.bytes": "int",
    "leader.replication.throttled.replicas": "list", "local.retention.bytes": "long",
    "local.retention.ms": "long", "max.compaction.lag.ms": "long", "max.message.bytes": "int",
    "message.downconversion.enable": "boolean", "message.timestamp.type": "string",
    "message.timestamp.difference.max.ms": "long", "message.timestamp.before.max.ms": "long",
    "message.timestamp.after.max.ms": "long", "min.cleanable.dirty.ratio": "double",
    "min.compaction.lag.ms": "long", "min.insync.replicas": "int", "preallocate": "boolean",
    "retention.bytes": "long", "retention.ms": "long", "segment.bytes": "int",
    "segment.index.bytes": "int", "segment.jitter.ms": "long", "segment.ms": "long",
    "unclean.leader.election.enable": "boolean", "remote.storage.enable": "boolean",
}


def config_source_code(source: str | int) -> int:
    """The wire code of a config source given by name (as storage reports it)."""
    if isinstance(source, int):
        return source
    return CONFIG_SOURCES.get(source.upper(), 0)


def _text(value: Any) -> str | None:
    """A config value as Kafka prints it (booleans lower-case, unset as null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


#: Broker keys of Kafka's PASSWORD type: described with no value (synonyms included) and
#: ``is_sensitive``, as Kafka does: a password, a private key or inline certificates are
#: never sent back to a client.
SENSITIVE_BROKER_KEYS = frozenset({
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "ssl.keystore.key",
    "ssl.keystore.certificate.chain", "ssl.truststore.certificates"})


@attrs.frozen
class BrokerConfigEntry:
    """One broker setting as DescribeConfigs reports it."""

    name: str
    value: str | None
    source: str
    type_name: str
    doc: str


def broker_config_entries(config: BrokerConfig) -> list[BrokerConfigEntry]:
    """Every declared broker setting, with its value and where the value came from."""
    entries = []
    for field in attrs.fields(BrokerConfig):
        key = field.metadata.get("key")
        if key is None:
            continue
        value = getattr(config, field.name)
        source = "DEFAULT_CONFIG" if value == field.default else "STATIC_BROKER_CONFIG"
        entries.append(BrokerConfigEntry(key, _text(value), source, field.metadata["type_name"],
                                         field.metadata["doc"]))
    return entries


def broker_resource_problem(ctx: RequestContext, name: str) -> str | None:
    """Why a BROKER resource name does not name this broker (Kafka's message), or None."""
    if name == "":
        return None
    try:
        node = int(name)
    except ValueError:
        return f"Broker id must be an integer, but it is: {name}"
    if node != ctx.broker.node_id:
        return f"Unexpected broker id, expected {ctx.broker.node_id} or empty string, " \
               f"but received {name}"
    return None


def _entry(module: Any, body: Any, *, name: str, value: str | None, source: int,
           read_only: bool, sensitive: bool, type_name: str | None, doc: str | None,
           synonym_pairs: tuple[tuple[str, str | None, int], ...] = ()) -> Any:
    synonyms: tuple[Any, ...] = ()
    if getattr(body, "include_synonyms", False) and hasattr(module, "DescribeConfigsSynonym"):
        pairs = synonym_pairs or ((name, value, source),)
        synonyms = tuple(build(module.DescribeConfigsSynonym, name=n,
                               value=None if sensitive else v, source=s)
                         for n, v, s in pairs)
    return build(
        module.DescribeConfigsResourceResult, name=name,
        value=None if sensitive else value, read_only=read_only, config_source=source,
        is_sensitive=sensitive, is_default=source == CONFIG_SOURCES["DEFAULT_CONFIG"],
        synonyms=synonyms, config_type=CONFIG_TYPES.get(type_name or "", 0),
        documentation=doc if getattr(body, "include_documentation", False) else None,
    )


Synonym = tuple[str, str | None, int]


class _SynonymSource:
    """Kafka's ``ConfigHelper.configSynonyms``: the values of a list of synonym keys, source
    by source (dynamic per-broker, dynamic default, static, default)."""

    def __init__(self, dynamic: DynamicBrokerConfigs) -> None:
        self._maps: list[tuple[int, dict[str, str | None]]] = [
            (CONFIG_SOURCES["DYNAMIC_BROKER_CONFIG"], dict(dynamic.per_broker)),
            (CONFIG_SOURCES["DYNAMIC_DEFAULT_BROKER_CONFIG"], dict(dynamic.defaults))]
        static: dict[str, str | None] = {
            e.name: e.value for e in broker_config_entries(dynamic.static)
            if e.value is not None and e.source == "STATIC_BROKER_CONFIG"}
        default: dict[str, str | None] = {
            f.metadata["key"]: _text(f.default) for f in attrs.fields(BrokerConfig)
            if "key" in f.metadata and f.default is not None}
        self._maps += [(CONFIG_SOURCES["STATIC_BROKER_CONFIG"], static),
                       (CONFIG_SOURCES["DEFAULT_CONFIG"], default)]

    def chain(self, names: tuple[str, ...], *, per_broker: bool = True) -> list[Synonym]:
        return [(name, values[name], code) for code, values in self._maps
                if per_broker or code != CONFIG_SOURCES["DYNAMIC_BROKER_CONFIG"]
                for name in names if name in values]

    def of(self, key: str, *, per_broker: bool = True) -> list[Synonym]:
        """The synonyms of broker key ``key``, from the first one named ``key`` (Kafka drops
        the finer keys' entries when describing a coarser one)."""
        pairs = self.chain(broker_synonyms(key), per_broker=per_broker)
        while pairs and pairs[0][0] != key:
            pairs.pop(0)
        return pairs


def _describe_broker(ctx: RequestContext, module: Any, body: Any,
                     wanted: set[str] | None) -> tuple[Any, ...]:
    synonyms = _SynonymSource(ctx.broker.dynamic_configs)
    results = []
    for e in broker_config_entries(ctx.broker.config):
        if wanted is not None and e.name not in wanted:
            continue
        pairs = synonyms.of(e.name)
        source = pairs[0][2] if pairs else CONFIG_SOURCES["DEFAULT_CONFIG"]
        results.append(_entry(
            module, body, name=e.name, value=e.value, source=source,
            read_only=e.name not in DYNAMIC_KEYS, sensitive=e.name in SENSITIVE_BROKER_KEYS,
            type_name=e.type_name, doc=e.doc, synonym_pairs=tuple(pairs)))
    return tuple(results)


def _describe_broker_defaults(ctx: RequestContext, module: Any, body: Any,
                              wanted: set[str] | None) -> tuple[Any, ...]:
    """The cluster-wide dynamic defaults (Kafka describes only those for the "" resource)."""
    dynamic = ctx.broker.dynamic_configs
    synonyms = _SynonymSource(dynamic)
    types = {e.name: e for e in broker_config_entries(dynamic.static)}
    results = []
    for name, value in sorted(dynamic.defaults.items()):
        if wanted is not None and name not in wanted:
            continue
        entry = types.get(name)
        pairs = synonyms.of(name, per_broker=False)
        results.append(_entry(
            module, body, name=name, value=value,
            source=CONFIG_SOURCES["DYNAMIC_DEFAULT_BROKER_CONFIG"],
            read_only=name not in DYNAMIC_KEYS, sensitive=name in SENSITIVE_BROKER_KEYS,
            type_name=entry.type_name if entry else None, doc=entry.doc if entry else None,
            synonym_pairs=tuple(pairs)))
    return tuple(results)


def _topic_synonyms(entry: Any, synonyms: _SynonymSource) -> tuple[Synonym, ...]:
    """Kafka's synonym chain: the topic override, then each broker key it would inherit from
    that has a value (``log.retention.ms``, ``log.retention.minutes``, ``log.retention.hours``),
    dynamic ones first."""
    source = config_source_code(entry.source)
    pairs: list[Synonym] = []
    if source == CONFIG_SOURCES["TOPIC_CONFIG"]:
        pairs.append((entry.name, entry.value, source))
    first = getattr(entry, "broker_key", None)
    if first:
        pairs += synonyms.chain(broker_synonyms(first))
    if not pairs:
        pairs.append((entry.name, entry.value, source))
    return tuple(pairs)


def _describe_topic(ctx: RequestContext, module: Any, body: Any, name: str,
                    wanted: set[str] | None, synonyms: _SynonymSource) -> tuple[Any, ...]:
    entries = ctx.broker.log_manager.describe_topic_config(name)
    results = []
    for e in entries:
        if wanted is not None and e.name not in wanted:
            continue
        pairs = _topic_synonyms(e, synonyms)
        # Kafka: the entry's source is its first synonym's (a dynamic broker default shows).
        results.append(_entry(
            module, body, name=e.name, value=e.value, source=pairs[0][2],
            read_only=bool(e.read_only), sensitive=bool(e.sensitive),
            type_name=TOPIC_CONFIG_TYPES.get(e.name), doc=None, synonym_pairs=pairs))
    return tuple(results)


def config_authorization_error(ctx: RequestContext, kind: int, name: str, op: AclOperation
                               ) -> ErrorCode | None:
    """Kafka's ``ConfigHelper``/``ConfigAdminManager`` check: ``op`` (DESCRIBE_CONFIGS or
    ALTER_CONFIGS) on the topic, or on the cluster for broker and broker-logger resources."""
    if kind == TOPIC_RESOURCE:
        return None if ctx.authorize(op, ResourceType.TOPIC, name) \
            else ErrorCode.topic_authorization_failed
    if kind in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE):
        return None if ctx.authorize(op, ResourceType.CLUSTER) \
            else ErrorCode.cluster_authorization_failed
    return None


@api_handler(DESCRIBE_CONFIGS, MIN_VERSION, MAX_VERSION)
async def handle_describe_configs(ctx: RequestContext, body: Any) -> Any:
    """Describe each requested resource; errors are per resource."""
    module = response_module(DESCRIBE_CONFIGS, ctx.api_version)
    results = []
    steps = Steps()
    synonyms = _SynonymSource(ctx.broker.dynamic_configs)
    for resource in body.resources:
        await steps.tick()  # thousands of resources: other connections get their turns
        kind = int(resource.resource_type)
        name = resource.resource_name
        keys = resource.configuration_keys
        wanted = set(keys) if keys else None
        code, message, configs = ErrorCode.none, None, ()
        denied = config_authorization_error(ctx, kind, name, AclOperation.DESCRIBE_CONFIGS)
        try:
            if denied is not None:
                code = denied
            elif kind == TOPIC_RESOURCE:
                if ctx.broker.log_manager is None:
                    code, message = NO_STORAGE
                else:
                    configs = _describe_topic(ctx, module, body, name, wanted, synonyms)
            elif kind == BROKER_RESOURCE:
                problem = broker_resource_problem(ctx, name)
                if problem is not None:
                    code, message = ErrorCode.invalid_request, problem
                elif name == "":
                    configs = _describe_broker_defaults(ctx, module, body, wanted)
                else:
                    configs = _describe_broker(ctx, module, body, wanted)
            else:
                code = ErrorCode.invalid_request
                message = f"Unsupported resource type {kind} for DescribeConfigs"
        except Exception as exc:  # StorageError (UNKNOWN_TOPIC_OR_PARTITION ...) per resource
            code, message = error_of(exc)
            configs = ()
        results.append(build(module.DescribeConfigsResult, error_code=code, error_message=message,
                             resource_type=kind, resource_name=name, configs=configs))
    return build(module.DescribeConfigsResponse, throttle_time=throttle(ctx),
                 results=tuple(results))
