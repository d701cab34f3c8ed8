"""DescribeGroups (v0-v5): state, protocol and members of groups.

A group nobody knows is answered as Kafka does: error NONE, state "Dead". Member metadata
and assignments are shown only for a Stable group. authorized_operations (v3+) is
INT32_MIN unless asked for; asked for, the operations the caller may perform on the group
(``RequestContext.authorized_operations``: READ, DELETE, DESCRIBE without an authorizer,
as Kafka), and, as Kafka's KafkaApis, only for a group described without error (a
NOT_COORDINATOR group keeps INT32_MIN). With an authorizer, a group the caller may not
Describe is GROUP_AUTHORIZATION_FAILED and nothing else about it is told.
"""

from __future__ import annotations

from klog.daemon.group.coordinator import AUTHORIZED_OPERATIONS_OMITTED, DescribedGroup
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    with_operations = getattr(request, "include_authorized_operations", False)
    denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.GROUP, request.groups)
    described = {d.group_id: d for d in ctx.services.group_coordinator.describe_groups(
        [g for g in request.groups if g not in denied])}
    groups = []
    for group_id in request.groups:
        d = described.get(group_id)
        if d is None:  # denied: nothing about the group is told
            d = DescribedGroup(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        groups.append({
            "error_code": int(d.error), "group_id": d.group_id, "group_state": d.state,
            "protocol_type": d.protocol_type, "protocol_data": d.protocol_data,
            "members": list(d.members),
            "authorized_operations": (
                ctx.authorized_operations(ResourceType.GROUP, group_id)
                if with_operations and d.error == ErrorCode.NONE
                else AUTHORIZED_OPERATIONS_OMITTED),
        })
    return ctx.respond({"throttle_time": 0, "groups": groups})
