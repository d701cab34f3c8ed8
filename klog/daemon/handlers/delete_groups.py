"""DeleteGroups (v0-v2): delete empty groups (their metadata and offsets get tombstones).

A group with members is NON_EMPTY_GROUP; one nobody knows is GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    names = list(request.groups_names)
    results = await ctx.services.group_coordinator.delete_groups(names)
    return ctx.respond({
        "throttle_time": 0,
        "results": [{"group_id": g, "error_code": int(results[g])}
                    for g in dict.fromkeys(names)],
    })
