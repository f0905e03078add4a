"""ApiVersions (key 18): what this broker speaks, derived from the handler registry; from v3 also
the node's supported and finalized features (KIP-584, ``..features``)."""

from __future__ import annotations

import datetime
from functools import lru_cache
from types import ModuleType
from typing import Any

from kio.schema.api_versions.v0 import response as v0
from kio.schema.api_versions.v1 import response as v1
from kio.schema.api_versions.v2 import response as v2
from kio.schema.api_versions.v3 import response as v3
from kio.schema.api_versions.v4 import response as v4
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32Timedelta, i64

from ...protocol.codec import API_VERSIONS_KEY, encode_body, valid_client_software
from ..context import EncodedBody, RequestContext
from ..features import FeatureState, consumer_protocol_enabled, supported_ranges
from ..registry import api_handler, supported_versions

_RESPONSES: tuple[ModuleType, ...] = (v0, v1, v2, v3, v4)
_NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


@api_handler(API_VERSIONS_KEY, 0, 4, inline=True)
async def handle_api_versions(ctx: RequestContext, body: Any) -> Any:
    """Kafka's rules: an unsupported version is answered as v0 with UNSUPPORTED_VERSION and the
    ApiVersions range; v3+ requests with an invalid client name or version get INVALID_REQUEST."""
    if ctx.request.unsupported_version:
        return _encoded(0, ErrorCode.unsupported_version, only_api_versions=True)
    # Kafka advertises the KIP-848 APIs only when the consumer rebalance protocol is enabled
    # and ``group.version`` is finalized at 1 or above.
    features = ctx.broker.features.state
    consumer = (ctx.broker.group_coordinator.consumer_groups.enabled
                and consumer_protocol_enabled(features))
    error = ErrorCode.none
    if ctx.api_version < 3:
        return _encoded(ctx.api_version, error, consumer_protocol=consumer)
    if not (valid_client_software(body.client_software_name)
            and valid_client_software(body.client_software_version)):
        # Kafka's error answer (``getErrorResponse``) carries no features.
        return _encoded(ctx.api_version, ErrorCode.invalid_request, consumer_protocol=consumer)
    return _encoded(ctx.api_version, error, consumer_protocol=consumer, features=features)


#: The APIs of the consumer group protocol (KIP-848): ConsumerGroupHeartbeat, ConsumerGroupDescribe.
CONSUMER_PROTOCOL_APIS = (68, 69)


@lru_cache(maxsize=256)
def _encoded(version: int, error: ErrorCode, *, only_api_versions: bool = False,
             consumer_protocol: bool = True, features: FeatureState | None = None
             ) -> EncodedBody:
    """Every client starts with ApiVersions and the answer changes only with the (rarely
    updated) feature state, which is part of the cache key: encode it once per state."""
    table = supported_versions()
    if not consumer_protocol:
        table = {k: v for k, v in table.items() if k not in CONSUMER_PROTOCOL_APIS}
    if only_api_versions:
        table = {API_VERSIONS_KEY: table[API_VERSIONS_KEY]}
    body = _response(version, error, table, features)
    return EncodedBody(encode_body(body), error.name.upper())


def _response(version: int, error: ErrorCode, table: dict[int, tuple[int, int]],
              features: FeatureState | None = None) -> Any:
    module = _RESPONSES[version]
    keys = tuple(
        module.ApiVersion(api_key=i16(key), min_version=i16(low), max_version=i16(high))
        for key, (low, high) in table.items()
    )
    fields: dict[str, Any] = {"error_code": error, "api_keys": keys}
    if version >= 1:
        fields["throttle_time"] = _NO_THROTTLE
    if version >= 3 and features is not None:
        # Kafka's ``ApiVersionsResponse.createApiVersionsResponse``: min and max of a finalized
        # feature are both its level (KIP-778 dropped the minimum).
        fields["supported_features"] = tuple(
            module.SupportedFeatureKey(name=name, min_version=i16(low), max_version=i16(high))
            for name, low, high in supported_ranges())
        fields["finalized_features_epoch"] = i64(features.epoch)
        fields["finalized_features"] = tuple(
            module.FinalizedFeatureKey(name=name, max_version_level=i16(level),
                                       min_version_level=i16(level))
            for name, level in features.finalized())
    return module.ApiVersionsResponse(**fields)
