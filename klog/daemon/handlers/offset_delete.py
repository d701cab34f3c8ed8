"""OffsetDelete (v0): delete a group's committed offsets for some partitions.

Partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION; a non-empty consumer group
refuses topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC); a group error
(GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, coordinator errors) answers with no topics.
"""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    coordinator = ctx.services.group_coordinator
    cache = ctx.services.metadata_cache
    errors: dict[tuple[str, int], ErrorCode] = {}
    wanted: list[tuple[str, int]] = []
    order: list[tuple[str, int]] = []
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return ctx.respond({"error_code": int(ErrorCode.GROUP_AUTHORIZATION_FAILED),
                            "throttle_time": 0, "topics": []})
    denied = ctx.denied(AclOperation.READ, ResourceType.TOPIC, [t.name for t in request.topics])
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            order.append(tp)
            if topic.name in denied:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif cache.partition_state(topic.name, p.partition_index) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(tp)
    group_error, deleted = await coordinator.delete_offsets(request.group_id, wanted)
    errors.update(deleted)
    if group_error != ErrorCode.NONE:
        return ctx.respond({"error_code": int(group_error), "throttle_time": 0, "topics": []})
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in dict.fromkeys(order):
        topics.setdefault(tp[0], []).append(
            {"partition_index": tp[1], "error_code": int(errors.get(tp, ErrorCode.NONE))})
    return ctx.respond({
        "error_code": 0,
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    })
