"""ListGroups (v0-v4): the groups this broker coordinates (v4+: filtered by state,
case-insensitively; the state is in the answer)."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    error, groups = ctx.services.group_coordinator.list_groups(
        getattr(request, "states_filter", ()) or ())
    return ctx.respond({
        "throttle_time": 0,
        "error_code": int(error),
        "groups": [{"group_id": g.group_id, "protocol_type": g.protocol_type,
                    "group_state": g.state} for g in groups],
    })
