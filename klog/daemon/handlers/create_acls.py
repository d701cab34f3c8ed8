"""CreateAcls (v0-3): store ACL bindings; one result per creation, in order.

As Kafka's AclApis: without an authorizer SECURITY_DISABLED; the caller needs Alter on
the cluster (else CLUSTER_AUTHORIZATION_FAILED for every creation); a binding Kafka would
not store (unknown or ANY elements, an empty name, a cluster not named kafka-cluster, a
principal without a type) is INVALID_REQUEST alone. The work is the authorizer's.
v0 predates prefixed patterns: its patterns and filters are LITERAL."""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    coerce_enum,
)
from klog.protocol.errors import ErrorCode


def _binding(c: Any) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType(coerce_enum(ResourceType, c.resource_type)),
                        c.resource_name,
                        PatternType(coerce_enum(PatternType, getattr(
                            c, "resource_pattern_type", PatternType.LITERAL)))),
        AccessControlEntry(c.principal, c.host,
                           AclOperation(coerce_enum(AclOperation, c.operation)),
                           AclPermissionType(coerce_enum(AclPermissionType,
                                                         c.permission_type))))


async def handle(ctx: RequestContext, request: Request) -> Response:
    authorizer = ctx.services.authorizer
    creations = list(request.creations)
    results: list[tuple[int, str | None]]
    if authorizer is None:
        results = [(int(ErrorCode.SECURITY_DISABLED),
                    "No Authorizer is configured on the broker")] * len(creations)
    elif not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        results = [(int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                    "Cluster authorization failed.")] * len(creations)
    else:
        results = await authorizer.create_acls([_binding(c) for c in creations])
    return ctx.respond({"throttle_time": 0, "results": [
        {"error_code": code, "error_message": message} for code, message in results]})
