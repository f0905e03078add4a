"""DescribeLogDirs (API key 35): the one log directory and each partition's size in it
(``kafka-log-dirs.sh --describe``)."""

from __future__ import annotations

import os
from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

DESCRIBE_LOG_DIRS = 35
MIN_VERSION = 0  # v0: Kafka 3.9 (legacy_schemas)
#: v5 (KIP-1066) adds ``is_cordoned``: a directory taking no new partitions. Kafka's
#: ``cordoned.log.dirs`` is empty by default, and there is no such key here: never cordoned.
MAX_VERSION = 5


@api_handler(DESCRIBE_LOG_DIRS, MIN_VERSION, MAX_VERSION)
async def handle_describe_log_dirs(ctx: RequestContext, body: Any) -> Any:
    """Every partition (``topics`` null) or the requested ones that exist; Kafka leaves unknown
    partitions out rather than reporting an error for them."""
    module = response_module(DESCRIBE_LOG_DIRS, ctx.api_version)
    lm = ctx.broker.log_manager
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER):
        # KafkaApis.handleDescribeLogDirsRequest: no results (v3+: the error code too).
        return build(module.DescribeLogDirsResponse, throttle_time=throttle(ctx),
                     error_code=ErrorCode.cluster_authorization_failed, results=())
    if lm is None:
        return build(module.DescribeLogDirsResponse, throttle_time=throttle(ctx),
                     error_code=ErrorCode.none, results=())
    wanted: dict[str, set[int]] | None = None
    if body.topics is not None:
        wanted = {}
        for topic in body.topics:
            wanted.setdefault(topic.topic, set()).update(int(p) for p in topic.partitions)
    by_topic: dict[str, list[Any]] = {}
    for log in sorted(lm.all_partitions(), key=lambda log: (log.topic, log.partition)):
        if wanted is not None and log.partition not in wanted.get(log.topic, ()):
            continue
        # offset_lag: LEO minus HW, always 0 with one replica.
        by_topic.setdefault(log.topic, []).append(build(
            module.DescribeLogDirsPartition, partition_index=log.partition,
            partition_size=log.size_bytes, offset_lag=log.log_end_offset - log.high_watermark,
            is_future_key=False))
    total = usable = -1
    try:
        stats = os.statvfs(lm.data_dir)
        total, usable = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
    except OSError:
        pass
    result = build(
        module.DescribeLogDirsResult, error_code=ErrorCode.none,
        log_dir=str(lm.data_dir.resolve()),
        topics=tuple(build(module.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
                     for name, parts in by_topic.items()),
        total_bytes=total, usable_bytes=usable, is_cordoned=False)
    return build(module.DescribeLogDirsResponse, throttle_time=throttle(ctx),
                 error_code=ErrorCode.none, results=(result,))
