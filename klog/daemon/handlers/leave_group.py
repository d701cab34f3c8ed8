"""LeaveGroup (v0-v5): members leave a group (v3+: a batch, each by member id and/or
group.instance.id).

v0-v2 name one member and answer only a top-level error: as Kafka, the first member error
when the request as a whole succeeded.
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    if ctx.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.respond({"throttle_time": 0, "members": [],
                            "error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED)})
    top, errors = ctx.services.group_coordinator.leave_group(request.group_id, members)
    if ctx.api_version < 3 and top == ErrorCode.NONE:
        top = next((e for e in errors if e != ErrorCode.NONE), ErrorCode.NONE)
    return ctx.respond({
        "throttle_time": 0,
        "error_code": int(top),
        "members": [
            {"member_id": m, "group_instance_id": i, "error_code": int(e)}
            for (m, i), e in zip(members, errors, strict=False)
        ],
    })
