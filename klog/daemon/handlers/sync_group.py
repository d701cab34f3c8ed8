"""SyncGroup (v0-v5): the leader hands in the assignment; every member gets its part.

From v5 the request must name the protocol type and name (else INCONSISTENT_GROUP_PROTOCOL,
as Kafka), and they are checked against the group's; the answer carries them.
"""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    coordinator = ctx.services.group_coordinator
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    if ctx.api_version >= 5 and (protocol_type is None or protocol_name is None):
        return _respond(ctx, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _respond(ctx, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    result = await coordinator.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        protocol_type,
        protocol_name,
        {a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return ctx.respond({
        "throttle_time": 0,
        "error_code": int(result.error),
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    })


def _respond(ctx: RequestContext, error: ErrorCode) -> Any:
    return ctx.respond({"throttle_time": 0, "error_code": int(error), "protocol_type": None,
                        "protocol_name": None, "assignment": b""})
