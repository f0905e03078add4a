"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31), as Kafka's ``AclApis`` answers them.

* DescribeAcls needs DESCRIBE on the cluster, Create/DeleteAcls ALTER: otherwise every entry
  (or the whole describe) gets CLUSTER_AUTHORIZATION_FAILED.
* Without an authorizer: SECURITY_DISABLED ("No Authorizer is configured.").
* A creation Kafka refuses gets INVALID_REQUEST with Kafka's message; the others are created.
  A filter with an UNKNOWN element gets INVALID_REQUEST.
* Changes apply to the index at once and are written to the data directory before the answer.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ..acl import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclProblem,
    PatternType,
    PermissionType,
    ResourceType,
    validate_new_acl,
)
from ..authorizer import Authorizer
from ..context import RequestContext
from ..registry import api_handler
from ._admin import build, response_module, throttle

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
MIN_VERSION = 0  # v0: Kafka 3.9 (legacy_schemas)
MAX_VERSION = 3

NO_AUTHORIZER = "No Authorizer is configured."
_CLUSTER_DENIED = "Cluster authorization failed."


#: v0 of the ACL APIs has no pattern type field: Kafka reads its default, LITERAL (3).
_LITERAL = 3


def _enum(cls: Any, code: int) -> Any:
    try:
        return cls(int(code))
    except ValueError:
        return cls.UNKNOWN


def _binding(item: Any) -> AclBinding:
    return AclBinding(_enum(ResourceType, item.resource_type), item.resource_name,
                      _enum(PatternType, getattr(item, "resource_pattern_type", _LITERAL)),
                      item.principal, item.host, _enum(AclOperation, item.operation),
                      _enum(PermissionType, item.permission_type))


def _filter(item: Any, prefix: str) -> AclFilter:
    """From DescribeAcls (``*_filter`` fields) or DeleteAcls (``*_filter`` fields too)."""
    return AclFilter(_enum(ResourceType, getattr(item, f"resource_type{prefix}")),
                     getattr(item, f"resource_name{prefix}"),
                     _enum(PatternType, getattr(item, f"pattern_type{prefix}", _LITERAL)),
                     item.principal_filter, item.host_filter,
                     _enum(AclOperation, item.operation),
                     _enum(PermissionType, item.permission_type))


def _authorizer_or_refusal(ctx: RequestContext, operation: AclOperation
                           ) -> Authorizer | tuple[ErrorCode, str]:
    """The authorizer for an ACL request that needs ``operation`` on the cluster, or the error
    every item of the request gets: cluster authorization is checked first, then whether an
    authorizer is configured at all. Serves DescribeAcls, CreateAcls and DeleteAcls."""
    if not ctx.authorize(operation, ResourceType.CLUSTER):
        return ErrorCode.cluster_authorization_failed, _CLUSTER_DENIED
    if ctx.broker.authorizer is None:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    return ctx.broker.authorizer


@api_handler(DESCRIBE_ACLS, MIN_VERSION, MAX_VERSION)
async def handle_describe_acls(ctx: RequestContext, body: Any) -> Any:
    module = response_module(DESCRIBE_ACLS, ctx.api_version)

    def answer(code: ErrorCode, message: str | None, resources: tuple[Any, ...] = ()) -> Any:
        return build(module.DescribeAclsResponse, throttle_time=throttle(ctx), error_code=code,
                     error_message=message, resources=resources)

    authorizer = _authorizer_or_refusal(ctx, AclOperation.DESCRIBE)
    if isinstance(authorizer, tuple):
        return answer(*authorizer)
    flt = _filter(body, "_filter")
    try:
        flt.validate()
    except AclProblem as problem:
        return answer(ErrorCode.invalid_request, str(problem))
    grouped: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for acl in authorizer.index.matching(flt):
        grouped.setdefault((acl.resource_type, acl.name, acl.pattern_type), []).append(acl)
    resources = tuple(
        build(module.DescribeAclsResource, resource_type=int(rt), resource_name=name,
              pattern_type=int(pt),
              acls=tuple(build(module.AclDescription, principal=a.principal, host=a.host,
                               operation=int(a.operation), permission_type=int(a.permission))
                         for a in acls))
        for (rt, name, pt), acls in grouped.items())
    return answer(ErrorCode.none, None, resources)


@api_handler(CREATE_ACLS, MIN_VERSION, MAX_VERSION)
async def handle_create_acls(ctx: RequestContext, body: Any) -> Any:
    module = response_module(CREATE_ACLS, ctx.api_version)

    def result(code: ErrorCode, message: str | None) -> Any:
        return build(module.AclCreationResult, error_code=code, error_message=message)

    def answer(results: list[Any]) -> Any:
        return build(module.CreateAclsResponse, throttle_time=throttle(ctx),
                     results=tuple(results))

    creations = list(body.creations)
    authorizer = _authorizer_or_refusal(ctx, AclOperation.ALTER)
    if isinstance(authorizer, tuple):
        return answer([result(*authorizer) for _ in creations])
    results: list[Any] = []
    valid: list[AclBinding] = []
    for item in creations:
        binding = _binding(item)
        try:
            validate_new_acl(binding)
        except AclProblem as problem:
            results.append(result(ErrorCode.invalid_request, str(problem)))
            continue
        valid.append(binding)
        results.append(result(ErrorCode.none, None))
    if valid:
        authorizer.add(valid, ctx.connection.principal)
        await authorizer.save()
    return answer(results)


@api_handler(DELETE_ACLS, MIN_VERSION, MAX_VERSION)
async def handle_delete_acls(ctx: RequestContext, body: Any) -> Any:
    module = response_module(DELETE_ACLS, ctx.api_version)

    def filter_result(code: ErrorCode, message: str | None, matching: tuple[Any, ...] = ()
                      ) -> Any:
        return build(module.DeleteAclsFilterResult, error_code=code, error_message=message,
                     matching_acls=matching)

    def answer(results: list[Any]) -> Any:
        return build(module.DeleteAclsResponse, throttle_time=throttle(ctx),
                     filter_results=tuple(results))

    filters = list(body.filters)
    authorizer = _authorizer_or_refusal(ctx, AclOperation.ALTER)
    if isinstance(authorizer, tuple):
        return answer([filter_result(*authorizer) for _ in filters])
    results: list[Any] = []
    removed: set[AclBinding] = set()
    for item in filters:
        flt = _filter(item, "_filter")
        try:
            flt.validate()
        except AclProblem as problem:
            results.append(filter_result(ErrorCode.invalid_request, str(problem)))
            continue
        # Every filter sees the ACLs as they were before the request (as Kafka's
        # AclControlManager.deleteAcls), so two filters may report the same ACL.
        matched = [acl for acl in authorizer.index.matching(flt)]
        removed.update(matched)
        results.append(filter_result(ErrorCode.none, None, tuple(
            build(module.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                  resource_type=int(a.resource_type), resource_name=a.name,
                  pattern_type=int(a.pattern_type), principal=a.principal, host=a.host,
                  operation=int(a.operation), permission_type=int(a.permission))
            for a in matched)))
    if removed:
        authorizer.remove(removed, ctx.connection.principal)
        await authorizer.save()
    return answer(results)
