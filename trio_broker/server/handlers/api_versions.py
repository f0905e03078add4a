"""ApiVersions (key 18): what this broker speaks, derived from the handler registry."""

from __future__ import annotations

import datetime
from functools import cache
from types import ModuleType
from typing import Any

from kio.schema.api_versions.v0 import response as v0
from kio.schema.api_versions.v1 import response as v1
from kio.schema.api_versions.v2 import response as v2
from kio.schema.api_versions.v3 import response as v3
from kio.schema.api_versions.v4 import response as v4
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta

from ...protocol.codec import API_VERSIONS_KEY, encode_body, valid_client_software
from ..context import EncodedBody, RequestContext
from ..registry import api_handler, supported_versions

_RESPONSES: tuple[ModuleType, ...] = (v0, v1, v2, v3, v4)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


@api_handler(API_VERSIONS_KEY, 0, 4, inline=True)
async def handle_api_versions(ctx: RequestContext, body: Any) -> Any:
    """Kafka's rules: an unsupported version is answered as v0 with UNSUPPORTED_VERSION and the
    ApiVersions range; v3+ requests with an invalid client name or version get INVALID_REQUEST."""
    if ctx.request.unsupported_version:
        return _encoded(0, ErrorCode.unsupported_version, only_api_versions=True)
    # Kafka advertises the KIP-848 APIs only when the consumer rebalance protocol is enabled.
    consumer = ctx.broker.group_coordinator.consumer_groups.enabled
    error = ErrorCode.none
    if ctx.api_version >= 3 and not (valid_client_software(body.client_software_name)
                                     and valid_client_software(body.client_software_version)):
        error = ErrorCode.invalid_request
    return _encoded(ctx.api_version, error, consumer_protocol=consumer)


#: The APIs of the consumer group protocol (KIP-848): ConsumerGroupHeartbeat, ConsumerGroupDescribe.
CONSUMER_PROTOCOL_APIS = (68, 69)


@cache
def _encoded(version: int, error: ErrorCode, *, only_api_versions: bool = False,
             consumer_protocol: bool = True) -> EncodedBody:
    """Every client starts with ApiVersions and the answer never changes: encode it once."""
    table = supported_versions()
    if not consumer_protocol:
        table = {k: v for k, v in table.items() if k not in CONSUMER_PROTOCOL_APIS}
    if only_api_versions:
        table = {API_VERSIONS_KEY: table[API_VERSIONS_KEY]}
    body = _response(version, error, table)
    return EncodedBody(encode_body(body), error.name.upper())


def _response(version: int, error: ErrorCode, table: dict[int, tuple[int, int]]) -> Any:
    module = _RESPONSES[version]
    keys = tuple(
        module.ApiVersion(api_key=i16(key), min_version=i16(low), max_version=i16(high))
        for key, (low, high) in table.items()
    )
    fields: dict[str, Any] = {"error_code": error, "api_keys": keys}
    if version >= 1:
        fields["throttle_time"] = _NO_THROTTLE
    return module.ApiVersionsResponse(**fields)
