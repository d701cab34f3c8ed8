"""DeleteAcls (v0-3): delete the ACLs each filter selects; per filter, what it deleted.

As Kafka's AclApis: without an authorizer SECURITY_DISABLED; the caller needs Alter on
the cluster (else CLUSTER_AUTHORIZATION_FAILED for every filter); a filter with UNKNOWN
elements is INVALID_REQUEST alone. The work is the authorizer's.
v0 predates prefixed patterns: its patterns and filters are LITERAL."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.handlers.describe_acls import binding_filter
from klog.protocol.acls import CLUSTER_NAME, AclBinding, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    authorizer = ctx.services.authorizer
    filters = [binding_filter(f) for f in request.filters]
    results: list[tuple[int, str | None, list[AclBinding]]]
    if authorizer is None:
        results = [(int(ErrorCode.SECURITY_DISABLED),
                    "No Authorizer is configured on the broker", [])] * len(filters)
    elif not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        results = [(int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                    "Cluster authorization failed.", [])] * len(filters)
    else:
        results = await authorizer.delete_acls(filters)
    return ctx.respond({"throttle_time": 0, "filter_results": [
        {"error_code": code, "error_message": message, "matching_acls": [
            {"error_code": 0, "error_message": None,
             "resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
             "pattern_type": int(b.pattern.pattern_type), "principal": b.entry.principal,
             "host": b.entry.host, "operation": int(b.entry.operation),
             "permission_type": int(b.entry.permission_type)} for b in deleted]}
        for code, message, deleted in results]})
