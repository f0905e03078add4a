"""ListConfigResources (API key 74): the configuration resources an operator can describe or
alter, for ``kafka-configs.sh --list`` and ``kafka-client-metrics.sh --list``.

v0 is Kafka 3.9's ListClientMetricsResources (KIP-714): client-metrics resources only. v1
(Kafka 4.1, KIP-1142) takes a ``ResourceTypes`` filter and lists, as Kafka's
``KafkaApis.handleListConfigResources`` does, in this order:

* GROUP (32): the groups with dynamic group configs; this broker has no group configs (the
  GROUP config resource is not implemented), so none;
* CLIENT_METRICS (16): none (the client-metrics config resource is not implemented, and Kafka
  has none before one is defined);
* BROKER_LOGGER (8) and BROKER (4): this node, by its id;
* TOPIC (2): every topic, internal ones included (not filtered by topic ACLs).

An empty filter means every type the version supports (``ListConfigResourcesRequest.
supportedResourceTypes``: v0 client metrics only; v1 the five above); a type outside them fails
the whole request with UNSUPPORTED_VERSION and no resources. DESCRIBE_CONFIGS on the cluster is
required (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from ...offload import Steps
from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

LIST_CONFIG_RESOURCES = 74

#: ``ConfigResource.Type`` codes.
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32

#: The types each version lists (Kafka's ``supportedResourceTypes``), in the order Kafka
#: lists them.
SUPPORTED_TYPES = {0: (CLIENT_METRICS,),
                   1: (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)}


@api_handler(LIST_CONFIG_RESOURCES, 0, 1)
async def handle_list_config_resources(ctx: RequestContext, body: Any) -> Any:
    module = response_module(LIST_CONFIG_RESOURCES, ctx.api_version)

    def answer(code: ErrorCode, resources: Iterable[Any] = ()) -> Any:
        return build(module.ListConfigResourcesResponse, throttle_time=throttle(ctx),
                     error_code=code, config_resources=tuple(resources))

    if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return answer(ErrorCode.cluster_authorization_failed)
    supported = SUPPORTED_TYPES[ctx.api_version]
    asked = {int(t) for t in getattr(body, "resource_types", ())}
    if not asked <= set(supported):
        return answer(ErrorCode.unsupported_version)
    wanted = [t for t in supported if not asked or t in asked]
    resources: list[Any] = []
    for kind in wanted:
        if kind in (BROKER_LOGGER, BROKER):
            resources.append(_resource(module, str(ctx.broker.node_id), kind))
        elif kind == TOPIC and ctx.broker.log_manager is not None:
            steps = Steps()
            for name in sorted(ctx.broker.log_manager.topics):
                await steps.tick()  # thousands of topics: other connections get their turns
                resources.append(_resource(module, name, kind))
    return answer(ErrorCode.none, resources)


def _resource(module: Any, name: str, kind: int) -> Any:
    # v0 has no type on the wire (client metrics): ``build`` leaves it out.
    return build(module.ConfigResource, resource_name=name, resource_type=kind)
