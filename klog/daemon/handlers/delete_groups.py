"""DeleteGroups (v0-v2): delete empty groups (their metadata and offsets get tombstones).

A group with members is NON_EMPTY_GROUP; one nobody knows is GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    names = list(request.groups_names)
    denied = ctx.denied(AclOperation.DELETE, ResourceType.GROUP, names)
    results: dict[str, Any] = dict.fromkeys(denied, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    results.update(await ctx.services.group_coordinator.delete_groups(
        [n for n in names if n not in denied]))
    return ctx.respond({
        "throttle_time": 0,
        "results": [{"group_id": g, "error_code": int(results[g])}
                    for g in dict.fromkeys(names)],
    })
