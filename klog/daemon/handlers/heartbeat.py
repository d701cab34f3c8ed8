"""Heartbeat (v0-v4): keep a member's session alive; learn of a rebalance."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.respond({"throttle_time": 0,
                            "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)})
    error = ctx.services.group_coordinator.heartbeat(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        request.generation_id)
    return ctx.respond({"throttle_time": 0, "error_code": int(error)})
