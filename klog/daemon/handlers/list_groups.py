"""ListGroups (v0-v4): the groups this broker coordinates (v4+: filtered by state,
case-insensitively; the state is in the answer)."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType


async def handle(ctx: RequestContext, request: Request) -> Response:
    error, groups = ctx.services.group_coordinator.list_groups(
        getattr(request, "states_filter", ()) or ())
    # Describe on the cluster lists every group; else those the caller may Describe.
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP,
                            [g.group_id for g in groups])
        groups = [g for g in groups if g.group_id not in hidden]
    return ctx.respond({
        "throttle_time": 0,
        "error_code": int(error),
        "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type,
                    "group_state": g.state} for g in groups],
    })
