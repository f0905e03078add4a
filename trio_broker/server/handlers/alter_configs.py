"""AlterConfigs (API key 33) and IncrementalAlterConfigs (API key 44) for topic resources.

AlterConfigs replaces a topic's overrides with the given set; IncrementalAlterConfigs applies
SET / DELETE / APPEND / SUBTRACT to single keys, APPEND and SUBTRACT only to list-valued keys
(Kafka's rule), computed against the current effective value.

Broker resources are refused with INVALID_REQUEST: every broker setting is static (read at
start-up), which is what Kafka answers for a key that cannot be updated dynamically.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

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
    if kind in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE):
        problem = broker_resource_problem(ctx, name)
        raise _Refused(ErrorCode.invalid_request, problem or (
            "Broker configs cannot be updated dynamically: trio_broker reads every broker "
            "setting at start-up; change the properties file or --override and restart."))
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
    """Replace the overrides of each topic resource."""
    return await _alter(ctx, body, ALTER_CONFIGS, incremental=False)


@api_handler(INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def handle_incremental_alter_configs(ctx: RequestContext, body: Any) -> Any:
    """Apply SET / DELETE / APPEND / SUBTRACT to each topic resource."""
    return await _alter(ctx, body, INCREMENTAL_ALTER_CONFIGS, incremental=True)
