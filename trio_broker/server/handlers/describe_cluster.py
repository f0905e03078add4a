"""DescribeCluster (API key 60): the cluster id, the controller and the (single) broker."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..context import RequestContext
from ..registry import api_handler
from ._admin import CLUSTER_OPERATIONS, OPERATIONS_OMITTED, build, response_module, throttle

DESCRIBE_CLUSTER = 60
MIN_VERSION = 0
MAX_VERSION = 2

#: ``DescribeClusterRequest.EndpointType`` codes.
ENDPOINT_BROKERS = 1
ENDPOINT_CONTROLLERS = 2


@api_handler(DESCRIBE_CLUSTER, MIN_VERSION, MAX_VERSION)
async def handle_describe_cluster(ctx: RequestContext, body: Any) -> Any:
    """Describe this single-node cluster as seen from the request's listener."""
    module = response_module(DESCRIBE_CLUSTER, ctx.api_version)
    endpoint_type = int(getattr(body, "endpoint_type", ENDPOINT_BROKERS))
    code, message = ErrorCode.none, None
    brokers: tuple[Any, ...] = ()
    if endpoint_type == ENDPOINT_BROKERS:
        endpoint = ctx.broker.advertised_endpoint(ctx.connection.listener)
        brokers = (build(module.DescribeClusterBroker, broker_id=ctx.broker.node_id,
                         host=endpoint.host, port=endpoint.port, rack=None, is_fenced=False),)
    elif endpoint_type == ENDPOINT_CONTROLLERS:
        # As a Kafka broker answers: controllers are described by a controller listener,
        # and this broker has none.
        code = ErrorCode.unsupported_endpoint_type
        message = "The broker does not support DescribeCluster with endpoint type 2 (controllers)"
    else:
        code, message = ErrorCode.invalid_request, f"Unknown endpoint type {endpoint_type}"
    with_ops = bool(getattr(body, "include_cluster_authorized_operations", False))
    return build(
        module.DescribeClusterResponse, throttle_time=throttle(ctx), error_code=code,
        error_message=message, endpoint_type=endpoint_type, cluster_id=ctx.broker.cluster_id,
        controller_id=ctx.broker.node_id, brokers=brokers,
        cluster_authorized_operations=ctx.cluster_authorized_operations(CLUSTER_OPERATIONS)
        if with_ops else OPERATIONS_OMITTED,
    )
