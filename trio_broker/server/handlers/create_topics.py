"""CreateTopics (API key 19): validate each topic as Kafka's controller does, then create it.

A single node can hold one replica of each partition, so a replication factor above 1 is refused
with INVALID_REPLICATION_FACTOR, and a manual assignment may name only this node.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..quota_manager import CONTROLLER_MUTATION
from ..registry import api_handler
from ._admin import (
    MAX_PARTITIONS_PER_REQUEST,
    NO_STORAGE,
    THROTTLING_QUOTA_EXCEEDED,
    build,
    controller_mutation_quota,
    duplicates,
    error_of,
    response_module,
    throttle,
    topic_name_problem,
)
from .describe_configs import config_source_code

CREATE_TOPICS = 19
MIN_VERSION = 0  # v0-v1: Kafka 3.9 (legacy_schemas)
MAX_VERSION = 7
#: KIP-599: from this version a topic over the controller mutation quota is refused.
STRICT_QUOTA_SINCE = 6


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


def _partition_count(ctx: RequestContext, topic: Any) -> int:
    """Partitions to create, from the count, the assignment or ``num.partitions``."""
    node = ctx.broker.node_id
    assignments = tuple(topic.assignments or ())
    if assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _Refused(ErrorCode.invalid_request,
                           "Both numPartitions or replicationFactor and replicasAssignments were "
                           "set. Both cannot be used at the same time.")
        indexes = sorted(a.partition_index for a in assignments)
        if indexes != list(range(len(indexes))):
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           "Partitions should be a consecutive 0-based integer sequence, but got "
                           f"{indexes}")
        for assignment in assignments:
            replicas = list(assignment.broker_ids)
            if not replicas:
                raise _Refused(ErrorCode.invalid_replica_assignment,
                               f"The manual partition assignment of partition "
                               f"{assignment.partition_index} is empty.")
            if replicas != [node]:
                raise _Refused(ErrorCode.invalid_replica_assignment,
                               f"The manual partition assignment of partition "
                               f"{assignment.partition_index} includes broker(s) {replicas}; "
                               f"only broker {node} is registered and it may appear once.")
        return len(indexes)
    count = int(topic.num_partitions)
    if count == -1:
        count = ctx.broker.config.num_partitions
    elif count <= 0:
        raise _Refused(ErrorCode.invalid_partitions,
                       "Number of partitions was set to an invalid non-positive value.")
    factor = int(topic.replication_factor)
    if factor != -1 and factor <= 0:
        raise _Refused(ErrorCode.invalid_replication_factor,
                       "Replication factor must be larger than 0, or -1 to use the default value.")
    if factor > 1:
        raise _Refused(ErrorCode.invalid_replication_factor,
                       f"Unable to replicate the partition {factor} time(s): The target "
                       f"replication factor of {factor} cannot be reached because only 1 "
                       "broker(s) are registered.")
    return count


def _requested_partitions(ctx: RequestContext, topics: Any) -> int:
    """The most partitions the request could create (Kafka's
    ``validateTotalNumberOfPartitions``, checked before any topic is looked at)."""
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += ctx.broker.config.num_partitions
        elif topic.num_partitions > 0:
            total += int(topic.num_partitions)
    return total


def _configs(topic: Any) -> dict[str, str]:
    configs: dict[str, str] = {}
    for entry in topic.configs or ():
        if entry.value is None:
            raise _Refused(ErrorCode.invalid_config,
                           f"Null value not supported for topic configs: {entry.name}")
        if entry.name in configs:
            raise _Refused(ErrorCode.invalid_request, f"Duplicate topic config {entry.name}")
        configs[entry.name] = entry.value
    return configs


def _collision(name: str, existing: Any) -> str | None:
    """An existing topic that differs from ``name`` only by '.' versus '_' (Kafka refuses it)."""
    key = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == key:
            return str(other)
    return None


@api_handler(CREATE_TOPICS, MIN_VERSION, MAX_VERSION)
async def handle_create_topics(ctx: RequestContext, body: Any) -> Any:
    """Create each requested topic; one result per topic, in request order."""
    module = response_module(CREATE_TOPICS, ctx.api_version)
    lm = ctx.broker.log_manager
    repeated = duplicates(t.name for t in body.topics)
    results: list[Any] = []
    reported: set[str] = set()
    mutations = controller_mutation_quota(ctx, STRICT_QUOTA_SINCE)
    # ControllerApis.createTopics: CREATE on the cluster, else CREATE on each topic.
    cluster_create = ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER,
                                   log_if_denied=False)

    def result(name: str, code: ErrorCode, message: str | None, info: Any = None) -> Any:
        fields: dict[str, Any] = {"name": name, "error_code": code, "error_message": message,
                                  "topic_id": None, "configs": ()}
        if info is not None:
            fields.update(topic_id=info.topic_id, num_partitions=info.num_partitions,
                          replication_factor=1)
            # Kafka returns the configs only with DESCRIBE_CONFIGS on the topic.
            if ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name,
                             log_if_denied=False):
                fields["configs"] = _described(lm, module, info.name)
            else:
                fields["topic_config_error_code"] = i16(ErrorCode.topic_authorization_failed)
        return build(module.CreatableTopicResult, **fields)

    if _requested_partitions(ctx, body.topics) > MAX_PARTITIONS_PER_REQUEST:
        names = dict.fromkeys(topic.name for topic in body.topics)
        return build(module.CreateTopicsResponse, throttle_time=throttle(ctx), topics=tuple(
            result(name, ErrorCode.policy_violation,
                   "Excessively large number of partitions per request.") for name in names))
    for topic in body.topics:
        name = topic.name
        if name in repeated:
            # Kafka answers a repeated name once, with INVALID_REQUEST.
            if name not in reported:
                reported.add(name)
                results.append(result(name, ErrorCode.invalid_request,
                                      f"Create topics request contains multiple entries for "
                                      f"the topic {name}."))
            continue
        if not cluster_create and not ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC,
                                                    name):
            results.append(result(name, ErrorCode.topic_authorization_failed,
                                  "Authorization failed."))
            continue
        problem = topic_name_problem(name)
        if problem is not None:
            results.append(result(name, ErrorCode.invalid_topic_exception, problem))
            continue
        if lm is None:
            results.append(result(name, *NO_STORAGE))
            continue
        if name in lm.topics:
            results.append(result(name, ErrorCode.topic_already_exists,
                                  f"Topic '{name}' already exists."))
            continue
        collides = _collision(name, lm.topics)
        if collides is not None:
            results.append(result(name, ErrorCode.invalid_topic_exception,
                                  f"Topic '{name}' collides with existing topic: {collides}"))
            continue
        try:
            count = _partition_count(ctx, topic)
            configs = _configs(topic)
        except _Refused as refused:
            results.append(result(name, refused.code, refused.message))
            continue
        if not mutations.record(count):
            results.append(result(name, ErrorCode.throttling_quota_exceeded,
                                  THROTTLING_QUOTA_EXCEEDED))
            continue
        try:
            info = await lm.create_topic_async(name, count, configs,
                                               validate_only=bool(getattr(body, "validate_only", False)))
        except Exception as exc:  # StorageError: its code; anything else: UNKNOWN_SERVER_ERROR
            code, message = error_of(exc)
            results.append(result(name, code, message))
            continue
        results.append(result(name, ErrorCode.none, None, info))

    ctx.throttle(mutations.throttle_time(), CONTROLLER_MUTATION)
    return build(module.CreateTopicsResponse, throttle_time=throttle(ctx), topics=tuple(results))


def _described(lm: Any, module: Any, name: str) -> tuple[Any, ...]:
    """The topic's full configuration for v5+ results (empty if it cannot be described)."""
    if not hasattr(module, "CreatableTopicConfigs") or name not in lm.topics:
        return ()
    try:
        entries = lm.describe_topic_config(name)
    except Exception:  # validate_only: the topic does not exist; describe what was asked
        return ()
    return tuple(
        build(module.CreatableTopicConfigs, name=e.name, value=e.value,
              read_only=bool(e.read_only), config_source=config_source_code(e.source),
              is_sensitive=bool(e.sensitive))
        for e in entries
    )
