"""AlterConfigs (API key 33) and IncrementalAlterConfigs (API key 44) for topic resources.

AlterConfigs replaces a topic's overrides with the given set; IncrementalAlterConfigs applies
SET / DELETE / APPEND / SUBTRACT to single keys, APPEND and SUBTRACT only to list-valued keys
(Kafka's rule), computed against the current effective value.

BROKER resources (this node's id, or "" for the cluster-wide default) change the dynamic broker
configs (:mod:`trio_broker.config.dynamic`), with Kafka's ``ConfigAdminManager`` rules: the name
must be this node's id ("Node id must be an integer, but it is: x", "Unexpected broker id,
expected 1, but received 2"); a null value other than a DELETE is INVALID_REQUEST; APPEND and
SUBTRACT only on list keys (INVALID_CONFIG), computed against the resource's current dynamic
value or else the key's default; a key that cannot change at run time is INVALID_REQUEST
"Cannot update these configs dynamically: Set(...)". The change is applied at once (topics
without an override take the new default), saved durably and logged as
``broker_config_changed``. AlterConfigs replaces all of the resource's dynamic configs.
BROKER_LOGGER resources are refused (log levels are not changed at run time here).
"""

from __future__ import annotations

import json
from typing import Any

from kio.schema.errors import ErrorCode

from ...config.dynamic import DynamicConfigError
from ...observability.log import emit
from ..acl import AclOperation
from ..context import RequestContext
from ..registry import api_handler
from ._admin import NO_STORAGE, build, duplicates, error_of, response_module, throttle
from .describe_configs import (
    BROKER_LOGGER_RESOURCE,
    BROKER_RESOURCE,
    TOPIC_CONFIG_TYPES,
    TOPIC_RESOURCE,
    broker_resource_problem,
    config_authorization_error,
)

ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44

#: ``AlterConfigOp.OpType`` codes.
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)


def _check_resource(ctx: RequestContext, kind: int, name: str) -> None:
    """Raise :class:`_Refused` unless ``kind``/``name`` is a topic this broker can alter."""
    if kind == TOPIC_RESOURCE:
        if ctx.broker.log_manager is None:
            raise _Refused(*NO_STORAGE)
        return
    if kind == BROKER_LOGGER_RESOURCE:
        problem = broker_resource_problem(ctx, name)
        raise _Refused(ErrorCode.invalid_request, problem or (
            "Broker logger levels cannot be changed at run time: set logging.level and "
            "restart."))
    raise _Refused(ErrorCode.invalid_request, f"Unsupported resource type {kind}")


def _list_items(value: str | None) -> list[str]:
    if not value:
        return []
    return [item.strip() for item in value.split(",") if item.strip()]


def _incremental_changes(ctx: RequestContext, name: str, configs: Any) -> dict[str, str | None]:
    """The key -> new value (None: remove the override) map of an incremental request."""
    repeated = duplicates(c.name for c in configs)
    if repeated:
        raise _Refused(ErrorCode.invalid_request,
                       f"Error due to duplicate config keys: {sorted(repeated)}")
    current: dict[str, str | None] | None = None
    changes: dict[str, str | None] = {}
    for config in configs:
        op = int(config.config_operation)
        if op == OP_SET:
            if config.value is None:
                raise _Refused(ErrorCode.invalid_config,
                               f"Null value not supported for : {config.name}")
            changes[config.name] = config.value
        elif op == OP_DELETE:
            changes[config.name] = None
        elif op in (OP_APPEND, OP_SUBTRACT):
            if TOPIC_CONFIG_TYPES.get(config.name) != "list":
                raise _Refused(ErrorCode.invalid_config,
                               f"Config value append is not allowed for config key: {config.name}"
                               if op == OP_APPEND else
                               f"Config value subtract is not allowed for config key: "
                               f"{config.name}")
            if current is None:
                entries = ctx.broker.log_manager.describe_topic_config(name)
                current = {e.name: e.value for e in entries}
            items = _list_items(current.get(config.name))
            given = _list_items(config.value)
            if op == OP_APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            changes[config.name] = ",".join(items)
        else:
            raise _Refused(ErrorCode.invalid_request,
                           f"Unknown alter configs operation {op} for {config.name}")
    return changes


def _replacement(configs: Any) -> dict[str, str | None]:
    repeated = duplicates(c.name for c in configs)
    if repeated:
        raise _Refused(ErrorCode.invalid_request,
                       f"Error due to duplicate config keys: {sorted(repeated)}")
    changes: dict[str, str | None] = {}
    for config in configs:
        if config.value is None:
            raise _Refused(ErrorCode.invalid_config,
                           f"Null value not supported for : {config.name}")
        changes[config.name] = config.value
    return changes


def _check_broker_name(ctx: RequestContext, name: str) -> None:
    """``ConfigAdminManager.validateResourceNameIsCurrentNodeId`` ("" is the cluster default)."""
    if name == "":
        return
    try:
        node = int(name)
    except ValueError:
        raise _Refused(ErrorCode.invalid_request,
                       f"Node id must be an integer, but it is: {name}") from None
    if node != ctx.broker.node_id:
        raise _Refused(ErrorCode.invalid_request,
                       f"Unexpected broker id, expected {ctx.broker.node_id}, but received "
                       f"{name}")


def _broker_props(ctx: RequestContext, name: str, configs: Any, *, incremental: bool
                  ) -> dict[str, str]:
    """The resource's dynamic configs after the request's operations (Kafka's
    ``ConfigAdminManager.preprocess`` and ``prepareIncrementalConfigs``)."""
    repeated = duplicates(c.name for c in configs)
    if repeated:
        raise _Refused(ErrorCode.invalid_request, "Error due to duplicate config keys")
    nulls = [c.name for c in configs if c.value is None
             and not (incremental and int(c.config_operation) == OP_DELETE)]
    if nulls:
        raise _Refused(ErrorCode.invalid_request,
                       "Null value not supported for : " + ", ".join(nulls))
    if not incremental:
        return {c.name: c.value for c in configs}
    props = ctx.broker.dynamic_configs.configs_of(name)
    static = ctx.broker.dynamic_configs.static
    for config in configs:
        op, key = int(config.config_operation), config.name
        if op == OP_SET:
            props[key] = config.value
        elif op == OP_DELETE:
            props.pop(key, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            if key not in LIST_BROKER_KEYS:
                verb = "append" if op == OP_APPEND else "subtract"
                raise _Refused(ErrorCode.invalid_config,
                               f"Config value {verb} is not allowed for config key: {key}")
            current = props.get(key)
            if current is None:
                current = str(getattr(static, LIST_BROKER_KEYS[key]))
            items, given = _list_items(current), _list_items(config.value)
            if op == OP_APPEND:
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            props[key] = ",".join(items)
        else:
            raise _Refused(ErrorCode.invalid_request, f"Unknown operations type {op}")
    return props


#: Broker keys of Kafka's LIST type that are dynamic here (APPEND / SUBTRACT), by attribute.
LIST_BROKER_KEYS = {"log.cleanup.policy": "log_cleanup_policy"}


async def _alter_broker(ctx: RequestContext, name: str, configs: Any, *, incremental: bool,
                        validate_only: bool) -> None:
    _check_broker_name(ctx, name)
    props = _broker_props(ctx, name, configs, incremental=incremental)
    dynamic = ctx.broker.dynamic_configs
    try:
        config = dynamic.prepare(name, props)
    except DynamicConfigError as exc:
        raise _Refused(ErrorCode[exc.error], exc.message) from None
    if validate_only:
        return
    dynamic.commit(name, props, config)
    ctx.broker.reconfigure(config)
    await dynamic.save()
    emit("broker_config_changed", resource=name, configs=json.dumps(props, sort_keys=True))


async def _alter(ctx: RequestContext, body: Any, api_key: int, *, incremental: bool) -> Any:
    module = response_module(api_key, ctx.api_version)
    response_name = ("IncrementalAlterConfigsResponse" if incremental
                     else "AlterConfigsResponse")
    repeated = duplicates((int(r.resource_type), r.resource_name) for r in body.resources)
    results = []
    for resource in body.resources:
        kind, name = int(resource.resource_type), resource.resource_name
        code, message = ErrorCode.none, None
        try:
            if (kind, name) in repeated:
                raise _Refused(ErrorCode.invalid_request,
                               f"Error due to duplicate resource {name} of type {kind}")
            denied = config_authorization_error(ctx, kind, name, AclOperation.ALTER_CONFIGS)
            if denied is not None:
                raise _Refused(denied, "Authorization failed.")
            if kind == BROKER_RESOURCE:
                await _alter_broker(ctx, name, resource.configs, incremental=incremental,
                                    validate_only=bool(body.validate_only))
                results.append(build(module.AlterConfigsResourceResponse,
                                     error_code=ErrorCode.none, error_message=None,
                                     resource_type=kind, resource_name=name))
                continue
            _check_resource(ctx, kind, name)
            if incremental:
                changes = _incremental_changes(ctx, name, resource.configs)
            else:
                changes = _replacement(resource.configs)
            ctx.broker.log_manager.alter_topic_config(
                name, changes, incremental=incremental, validate_only=bool(body.validate_only))
        except _Refused as refused:
            code, message = refused.code, refused.message
        except Exception as exc:  # StorageError: UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG ...
            code, message = error_of(exc)
        results.append(build(module.AlterConfigsResourceResponse, error_code=code,
                             error_message=message, resource_type=kind, resource_name=name))
    return build(getattr(module, response_name), throttle_time=throttle(ctx),
                 responses=tuple(results))


@api_handler(ALTER_CONFIGS, 0, 2)
async def handle_alter_configs(ctx: RequestContext, body: Any) -> Any:
    """Replace the overrides of each topic resource, or a broker resource's dynamic configs."""
    return await _alter(ctx, body, ALTER_CONFIGS, incremental=False)


@api_handler(INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle_incremental_alter_configs(ctx: RequestContext, body: Any) -> Any:
    """Apply SET / DELETE / APPEND / SUBTRACT to each topic or broker resource."""
    return await _alter(ctx, body, INCREMENTAL_ALTER_CONFIGS, incremental=True)
