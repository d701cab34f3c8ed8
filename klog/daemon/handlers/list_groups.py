"""ListGroups (v0-v5): the groups this broker coordinates (v4+: filtered by state,
case-insensitively; the state is in the answer; v5+: filtered by type and typed).

Every group klog coordinates is a "classic" one (the JoinGroup/SyncGroup protocol; no
KIP-848 consumer groups), so, as Kafka 3.9's GroupCoordinator in ZooKeeper mode, a type
filter that does not name "classic" (case-insensitively) lists none, and each group's
type is "classic".
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType

CLASSIC = "classic"


async def handle(ctx: RequestContext, request: Request) -> Response:
    error, groups = ctx.services.group_coordinator.list_groups(
        getattr(request, "states_filter", ()) or ())
    # Describe on the cluster lists every group; else those the caller may Describe.
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP,
                            [g.group_id for g in groups])
        groups = [g for g in groups if g.group_id not in hidden]
    types = getattr(request, "types_filter", ()) or ()
    if types and not any(t.lower() == CLASSIC for t in types):
        groups = []
    return ctx.respond({
        "throttle_time": 0,
        "error_code": int(error),
        "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type,
                    "group_state": g.state, "group_type": CLASSIC} for g in groups],
    })
