"""User and client-id quotas enforced per request: Kafka's ``ClientQuotaManager`` (produce and
fetch byte rates), ``ClientRequestQuotaManager`` (request percentage) and
``ControllerMutationQuotaManager`` (KIP-599), with Kafka's default quota callback.

Each quota type has its own manager. A request is charged to one *sensor*, chosen by the most
specific quota entity of that type that matches the connection's user and the request's client
id (Kafka's eight levels, :func:`resolve`); the sensor's tags say whom it counts: ``(user,
client-id)``, ``(user, "")`` shared by every client of the user, or ``("", client-id)``. As in
Kafka a type records nothing until some quota of that type exists, and a change of the quota
applies to the next request with the rate measured so far.

Throttle times are Kafka's: ``(rate - quota) / quota x window`` for byte rates and request time
(the latter capped at one window), ``-tokens / rate`` for controller mutations.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import trio

from ..network.quotas import Rate, SampledStat, TokenBucket, to_ms

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from .context import RequestContext

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
CONTROLLER_MUTATION = "controller_mutation_rate"
QUOTA_TYPES = (PRODUCE, FETCH, REQUEST, CONTROLLER_MUTATION)

#: Kafka's ``QuotaType`` of each key, as the metric group is named.
KAFKA_QUOTA_TYPE = {PRODUCE: "Produce", FETCH: "Fetch", REQUEST: "Request",
                    CONTROLLER_MUTATION: "ControllerMutation"}
#: ``ClientRequestQuotaManager.NanosToPercentagePerSecond``.
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9
#: Kafka expires a client's sensors after an hour without a recording.
INACTIVE_SENSOR_SECONDS = 3600.0
#: Kafka's default ``MetricConfig`` (2 samples of 30 s), used by the throttle-time ``Avg``.
_THROTTLE_AVG_WINDOW, _THROTTLE_AVG_SAMPLES = 30.0, 2

_USER, _CLIENT = "user", "client-id"
Tags = tuple[str, str]


def resolve(values: Mapping[Any, float], user: str, client_id: str) -> tuple[Tags, float | None]:
    """Kafka's ``DefaultQuotaCallback``: the sensor tags and the quota of the most specific
    entity that has a quota of this type, in Kafka's order:

    1. user + client-id, 2. user + default client-id, 3. user, 4. default user + client-id,
    5. default user + default client-id, 6. default user, 7. client-id, 8. default client-id.
    """
    both = (user, client_id)
    for entity, tags in (
        (((_CLIENT, client_id), (_USER, user)), both),
        (((_CLIENT, None), (_USER, user)), both),
        (((_USER, user),), (user, "")),
        (((_CLIENT, client_id), (_USER, None)), both),
        (((_CLIENT, None), (_USER, None)), both),
        (((_USER, None),), (user, "")),
        (((_CLIENT, client_id),), ("", client_id)),
        (((_CLIENT, None),), ("", client_id)),
    ):
        quota = values.get(entity)
        if quota is not None:
            return tags, quota
    return ("", client_id), None


class ClientSensors:
    """What one quota sensor measures: Kafka's quota metric (a Rate, or the TokenBucket of
    controller mutations) and the ``throttle-time`` Avg."""

    __slots__ = ("rate", "bucket", "throttle_time", "last_used")

    def __init__(self, window_seconds: float, num_windows: int, tokens: bool) -> None:
        self.rate = Rate(window_seconds, num_windows)
        self.bucket = TokenBucket(window_seconds, num_windows) if tokens else None
        self.throttle_time = SampledStat(_THROTTLE_AVG_WINDOW, _THROTTLE_AVG_SAMPLES)
        self.last_used = 0.0


class QuotaManager:
    """The sensors of one quota type."""

    def __init__(self, key: str, window_seconds: float, num_windows: int,
                 max_throttle_ms: int | None = None) -> None:
        self.key = key
        self.window_seconds = window_seconds
        self.num_windows = num_windows
        self._max_throttle_ms = max_throttle_ms
        self._values: dict[Any, float] = {}
        self.sensors: dict[Tags, ClientSensors] = {}
        self._next_expiry = 0.0

    @property
    def enabled(self) -> bool:
        """Kafka's ``quotasEnabled``: some user or client-id quota of this type exists."""
        return bool(self._values)

    def update(self, values: dict[Any, float]) -> None:
        self._values = values

    def resolve(self, user: str, client_id: str) -> tuple[Tags, float | None]:
        return resolve(self._values, user, client_id)

    def sensors_for(self, tags: Tags, now: float) -> ClientSensors:
        sensors = self.sensors.get(tags)
        if sensors is None:
            sensors = self.sensors[tags] = ClientSensors(
                self.window_seconds, self.num_windows, self.key == CONTROLLER_MUTATION)
        sensors.last_used = now
        if now >= self._next_expiry:
            self._next_expiry = now + 60
            for stale in [t for t, s in self.sensors.items()
                          if now - s.last_used > INACTIVE_SENSOR_SECONDS]:
                del self.sensors[stale]
        return sensors

    def record(self, user: str, client_id: str, value: float, now: float, *,
               check: bool = True) -> int:
        """Record ``value``; the throttle time in ms if that puts the sensor over its quota
        (Kafka's ``recordAndGetThrottleTimeMs``), else 0. Nothing is recorded while no quota
        of this type exists."""
        if not self._values:
            return 0
        tags, quota = self.resolve(user, client_id)
        sensors = self.sensors_for(tags, now)
        sensors.rate.record(now, value)
        if not check or quota is None:
            return 0
        throttle = sensors.rate.throttle_ms(quota, now)
        if self._max_throttle_ms is not None:
            throttle = min(throttle, self._max_throttle_ms)
        return throttle

    def unrecord(self, user: str, client_id: str, value: float, now: float) -> None:
        """Kafka's ``unrecordQuotaSensor``: a throttled fetch's bytes are not sent."""
        if self._values:
            tags, _ = self.resolve(user, client_id)
            self.sensors_for(tags, now).rate.unrecord(now, value)

    def record_throttle(self, user: str, client_id: str, throttle_ms: int, now: float) -> None:
        """Kafka's ``throttle()``: the throttle-time sensor of the client."""
        tags, _ = self.resolve(user, client_id)
        self.sensors_for(tags, now).throttle_time.record_ms(float(throttle_ms), to_ms(now))

    def max_value_in_window(self, user: str, client_id: str) -> float:
        """Kafka's ``getMaxValueInQuotaWindow``: what fits in ``num - 1`` windows at the quota
        (a fetch asking for more would be throttled for sure), or infinity."""
        if not self._values:
            return math.inf
        _, quota = self.resolve(user, client_id)
        if quota is None:
            return math.inf
        return quota * (self.num_windows - 1) * self.window_seconds


class ControllerMutationQuota:
    """One request's controller mutation quota (Kafka's Strict- and
    PermissiveControllerMutationQuota). Strict (CreateTopics v6+, CreatePartitions v3+,
    DeleteTopics v5+): a topic is refused with THROTTLING_QUOTA_EXCEEDED while the bucket is
    negative; the topic that empties it is accepted. Permissive (older versions): every topic
    is accepted, and the response is throttled."""

    def __init__(self, manager: QuotaManager | None, user: str, client_id: str,
                 strict: bool) -> None:
        self._manager = manager
        self._user = user
        self._client_id = client_id
        self.strict = strict
        self._throttle_ms = 0
        self._recorded_at = 0.0

    def record(self, permits: float) -> bool:
        """Charge ``permits`` partition mutations; False when a strict quota refuses them."""
        manager = self._manager
        if manager is None or not manager.enabled:
            return True
        now = trio.current_time()
        tags, quota = manager.resolve(self._user, self._client_id)
        sensors = manager.sensors_for(tags, now)
        if quota is None:
            sensors.rate.record(now, permits)
            return True
        assert sensors.bucket is not None
        if self.strict:
            tokens = sensors.bucket.measure(quota, now)
            if tokens < 0:
                self._violation(tokens, quota, now)
                return False
            sensors.bucket.record(quota, permits, now)
            sensors.rate.record(now, permits)
            return True
        sensors.bucket.record(quota, permits, now)
        sensors.rate.record(now, permits)
        tokens = sensors.bucket.measure(quota, now)
        if tokens < 0:
            self._violation(tokens, quota, now)
        return True

    def _violation(self, tokens: float, quota: float, now: float) -> None:
        # ControllerMutationQuotaManager.throttleTimeMs: time to refill to zero.
        self._throttle_ms = round(-tokens / quota * 1000)
        self._recorded_at = now

    def throttle_time(self) -> int:
        """The throttle time, less what passed since it was measured (Kafka adjusts it so)."""
        if self._throttle_ms <= 0:
            return 0
        elapsed_ms = to_ms(trio.current_time()) - to_ms(self._recorded_at)
        return max(0, self._throttle_ms - elapsed_ms)


class QuotaManagers:
    """The four managers of one broker, fed with the stored quotas by ``ClientQuotas``."""

    def __init__(self, config: BrokerConfig) -> None:
        window = float(config.quota_window_size_seconds)
        num = config.quota_window_num
        self.produce = QuotaManager(PRODUCE, window, num)
        self.fetch = QuotaManager(FETCH, window, num)
        # ClientRequestQuotaManager bounds its throttle time to one window.
        self.request = QuotaManager(REQUEST, window, num, max_throttle_ms=round(window * 1000))
        self.controller_mutation = QuotaManager(
            CONTROLLER_MUTATION, float(config.controller_quota_window_size_seconds),
            config.controller_quota_window_num)
        self.by_type = {PRODUCE: self.produce, FETCH: self.fetch, REQUEST: self.request,
                        CONTROLLER_MUTATION: self.controller_mutation}

    def __iter__(self) -> Iterator[QuotaManager]:
        return iter(self.by_type.values())

    def update(self, entities: Mapping[Any, Mapping[str, float]]) -> None:
        """New quota values: each manager gets ``{entity: value}`` of its own key."""
        for key, manager in self.by_type.items():
            manager.update({entity: values[key] for entity, values in entities.items()
                            if key in values})

    # ---------------------------------------------------------------- per request
    def record_produce(self, ctx: RequestContext) -> None:
        """Charge a produce request's size to its producer_byte_rate quota (never dropped)."""
        if self.produce.enabled:
            throttle = self.produce.record(ctx.user, ctx.client_id, float(ctx.size),
                                           trio.current_time())
            ctx.throttle(throttle, PRODUCE)

    def record_request_time(self, ctx: RequestContext) -> int:
        """Charge the handler time so far (Kafka's ``requestThreadTimeNanos``) to the
        request_percentage quota, once per request; the throttle time (ms) it asks for."""
        if ctx.request_quota_recorded or not self.request.enabled:
            return 0
        ctx.request_quota_recorded = True
        percent = ctx.handler_nanos() * NANOS_TO_PERCENTAGE_PER_SECOND
        return self.request.record(ctx.user, ctx.client_id, percent, trio.current_time())

    def mutation_quota(self, ctx: RequestContext, strict_since: int) -> ControllerMutationQuota:
        """The controller mutation quota of one CreateTopics / CreatePartitions / DeleteTopics
        request: strict from ``strict_since``, permissive before (KIP-599)."""
        manager = self.controller_mutation if self.controller_mutation.enabled else None
        return ControllerMutationQuota(manager, ctx.user, ctx.client_id,
                                       ctx.api_version >= strict_since)

    def throttled(self, ctx: RequestContext) -> None:
        """Record the throttle a response carries in its quota type's throttle-time sensor."""
        manager = self.by_type.get(ctx.throttle_quota)
        if manager is not None and ctx.throttle_ms > 0 and manager.enabled:
            manager.record_throttle(ctx.user, ctx.client_id, ctx.throttle_ms,
                                    trio.current_time())
