"""AlterReplicaLogDirs (API key 34): move partitions to another log directory
(``kafka-reassign-partitions.sh --reassignment-json-file`` with ``log_dirs``).

This broker keeps every partition in one directory (the first of ``log.dirs``). So, as Kafka's
``ReplicaManager.alterReplicaLogDirs`` answers on a node with that one directory: the directory
itself is accepted and nothing moves (the partition is there already); any other path is
LOG_DIR_NOT_FOUND ("not found in the config"); a partition this node does not host is
REPLICA_NOT_AVAILABLE (Kafka remembers the preferred directory for a partition created later:
with one directory there is nothing to remember). ALTER on the cluster is required.
"""

from __future__ import annotations

import os
from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

ALTER_REPLICA_LOG_DIRS = 34


def _same_directory(path: str, data_dir: Any) -> bool:
    """Kafka compares absolute paths (``File.getAbsolutePath``); a symlink to the directory is
    the same directory here too."""
    if not os.path.isabs(path):
        return False
    try:
        return os.path.samefile(path, data_dir)
    except OSError:
        return False


@api_handler(ALTER_REPLICA_LOG_DIRS, 0, 2)
async def handle_alter_replica_log_dirs(ctx: RequestContext, body: Any) -> Any:
    module = response_module(ALTER_REPLICA_LOG_DIRS, ctx.api_version)
    lm = ctx.broker.log_manager
    allowed = ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER)
    # Kafka builds a map from partition to destination: a partition named twice ends up with
    # the last directory that names it.
    destinations: dict[tuple[str, int], str] = {}
    for directory in body.dirs:
        for topic in directory.topics:
            for partition in topic.partitions:
                destinations[(topic.name, int(partition))] = directory.path
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), path in destinations.items():
        if not allowed:
            code = ErrorCode.cluster_authorization_failed
        elif lm is None or not _same_directory(path, lm.data_dir):
            code = ErrorCode.log_dir_not_found
        elif lm.get_partition(topic, partition) is None:
            code = ErrorCode.replica_not_available
        else:
            code = ErrorCode.none
        by_topic.setdefault(topic, []).append(build(
            module.AlterReplicaLogDirPartitionResult, partition_index=partition, error_code=code))
    return build(module.AlterReplicaLogDirsResponse, throttle_time=throttle(ctx),
                 results=tuple(build(module.AlterReplicaLogDirTopicResult, topic_name=name,
                                     partitions=tuple(parts))
                               for name, parts in by_topic.items()))
