"""ListConfigResources v0 (API key 74; Kafka 3.9's ListClientMetricsResources, KIP-714): the
client-metrics configuration resources, for ``kafka-client-metrics.sh --list``.

This broker has no client-metrics resources (the ``CLIENT_METRICS`` config resource type is not
implemented, and Kafka 3.9 receives client telemetry only with a telemetry plugin configured),
so the list is empty, as Kafka's is before any resource is defined. DESCRIBE_CONFIGS on the
cluster is required. v1 (Kafka 4.1, every resource type) is not served: Kafka 4.0 serves v0.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

LIST_CONFIG_RESOURCES = 74


@api_handler(LIST_CONFIG_RESOURCES, 0, 0)
async def handle_list_config_resources(ctx: RequestContext, body: Any) -> Any:
    module = response_module(LIST_CONFIG_RESOURCES, ctx.api_version)
    code = (ErrorCode.none if ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER)
            else ErrorCode.cluster_authorization_failed)
    return build(module.ListConfigResourcesResponse, throttle_time=throttle(ctx),
                 error_code=code, config_resources=())
