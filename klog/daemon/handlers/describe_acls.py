"""DescribeAcls (v0-3): the ACLs a filter selects, grouped by resource pattern.

As Kafka's AclApis: without an authorizer SECURITY_DISABLED; the caller needs Describe on
the cluster (else CLUSTER_AUTHORIZATION_FAILED); a filter with UNKNOWN elements is
INVALID_REQUEST. The selection is the authorizer's (klog/daemon/security/authorizer.py).
v0 predates prefixed patterns: its patterns and filters are LITERAL."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    coerce_enum,
)
from klog.protocol.errors import ErrorCode


def binding_filter(f: Any, prefix: str = "") -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as an AclBindingFilter."""
    return AclBindingFilter(
        resource_type=ResourceType(coerce_enum(ResourceType, f.resource_type_filter)),
        name=f.resource_name_filter,
        pattern_type=PatternType(coerce_enum(PatternType, getattr(
            f, "pattern_type_filter", PatternType.LITERAL))),
        principal=f.principal_filter, host=f.host_filter,
        operation=AclOperation(coerce_enum(AclOperation, f.operation)),
        permission_type=AclPermissionType(coerce_enum(AclPermissionType, f.permission_type)))


async def handle(ctx: RequestContext, request: Request) -> Response:
    authorizer = ctx.services.authorizer

    def error(code: ErrorCode, message: str) -> Response:
        return ctx.respond({"throttle_time": 0, "error_code": int(code),
                            "error_message": message, "resources": []})

    if authorizer is None:
        return error(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker")
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                     "Cluster authorization failed.")
    acl_filter = binding_filter(request)
    reason = acl_filter.invalid_reason()
    if reason is not None:
        return error(ErrorCode.INVALID_REQUEST, reason)
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = defaultdict(list)
    for binding in authorizer.acls(acl_filter):
        grouped[binding.pattern].append(binding.entry)
    return ctx.respond({"throttle_time": 0, "error_code": 0, "error_message": None,
                        "resources": [
        {"resource_type": int(p.resource_type), "resource_name": p.name,
         "pattern_type": int(p.pattern_type),
         "acls": [{"principal": e.principal, "host": e.host, "operation": int(e.operation),
                   "permission_type": int(e.permission_type)} for e in entries]}
        for p, entries in grouped.items()]})
