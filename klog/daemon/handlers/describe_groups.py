"""DescribeGroups (v0-v5): state, protocol and members of groups.

A group nobody knows is answered as Kafka does: error NONE, state "Dead". Member metadata
and assignments are shown only for a Stable group. authorized_operations (v3+) is
INT32_MIN unless asked for; asked for, it is what Kafka reports without an authorizer
(READ, DELETE, DESCRIBE), and, as Kafka's KafkaApis, only for a group described without
error (a NOT_COORDINATOR group keeps INT32_MIN).
"""

from __future__ import annotations

from klog.daemon.group.coordinator import (
    AUTHORIZED_OPERATIONS_OMITTED,
    GROUP_AUTHORIZED_OPERATIONS,
)
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    operations = (GROUP_AUTHORIZED_OPERATIONS
                  if getattr(request, "include_authorized_operations", False)
                  else AUTHORIZED_OPERATIONS_OMITTED)
    groups = [{
        "error_code": int(d.error), "group_id": d.group_id, "group_state": d.state,
        "protocol_type": d.protocol_type, "protocol_data": d.protocol_data,
        "members": list(d.members),
        "authorized_operations": (operations if d.error == ErrorCode.NONE
                                  else AUTHORIZED_OPERATIONS_OMITTED),
    } for d in ctx.services.group_coordinator.describe_groups(request.groups)]
    return ctx.respond({"throttle_time": 0, "groups": groups})
