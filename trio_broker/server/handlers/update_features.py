"""UpdateFeatures (API key 57): change the node's finalized feature levels (KIP-584, KIP-778).

The rules are Kafka 4.0's controller's (sans-IO, in ``..features``): ALTER on CLUSTER, the
updates keyed by feature and applied atomically, the first refused one failing the request
with a top-level INVALID_UPDATE_VERSION. An applied change is saved before the answer.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import AclOperation, ResourceType
from ..context import RequestContext
from ..features import FeatureUpdate, UpgradeType, judge_updates
from ..registry import api_handler
from ._admin import build, response_module, throttle

UPDATE_FEATURES = 57
MIN_VERSION = 0
MAX_VERSION = 2


def requested_updates(body: Any) -> list[FeatureUpdate]:
    """The request's updates: v0's ``allow_downgrade`` is a safe downgrade, as Kafka maps it."""
    updates = []
    for item in body.feature_updates:
        if hasattr(item, "upgrade_type"):
            kind = UpgradeType.of(int(item.upgrade_type))
        else:
            kind = UpgradeType.SAFE_DOWNGRADE if item.allow_downgrade else UpgradeType.UPGRADE
        updates.append(FeatureUpdate(item.feature, int(item.max_version_level), kind))
    return updates


@api_handler(UPDATE_FEATURES, MIN_VERSION, MAX_VERSION)
async def handle_update_features(ctx: RequestContext, body: Any) -> Any:
    """Validate, then (unless ``validate_only``) apply and persist the updates."""
    module = response_module(UPDATE_FEATURES, ctx.api_version)

    def answer(code: ErrorCode, message: str | None, names: tuple[str, ...] = ()) -> Any:
        # ``UpdateFeaturesResponse.createWithErrors``: one NONE row per feature on success
        # (v0-v1; v2 has no rows), none when the request failed.
        row = getattr(module, "UpdatableFeatureResult", None)
        rows = () if row is None else tuple(
            build(row, feature=name, error_code=ErrorCode.none, error_message=None)
            for name in names)
        return build(module.UpdateFeaturesResponse, throttle_time=throttle(ctx), error_code=code,
                     error_message=message, results=rows)

    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER):
        return answer(ErrorCode.cluster_authorization_failed, None)
    store = ctx.broker.features
    outcome = judge_updates(store.state, requested_updates(body), ctx.broker.node_id)
    if outcome.error_message is not None:
        return answer(ErrorCode.invalid_update_version, outcome.error_message)
    if outcome.updates and not getattr(body, "validate_only", False):
        await store.apply(outcome.updates)
    return answer(ErrorCode.none, None, tuple(u.feature for u in outcome.updates))
