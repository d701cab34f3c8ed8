"""OffsetFetch (v0-v8): a group's committed offsets, read from the GroupMetadataManager cache.

``topics`` null (v2+) asks for every partition the group has an offset for. A partition
without a committed offset answers offset -1, leader epoch -1, metadata "" and NONE, as
Kafka does (also for a group that does not exist: the classic protocol's OffsetFetch has
no GROUP_ID_NOT_FOUND -- Kafka only returns that for v9+ requests naming a member of a
KIP-848 consumer group, which klog does not advertise).

The coordinator errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE) are the group's error from v2 (a top-level error_code; v8 one
per group, several groups per request); v1 has no top-level error, so, as Kafka, every
requested partition carries it. ``require_stable`` (v7+) makes a requested partition with a
transactional commit still pending (no marker yet) answer UNSTABLE_OFFSET_COMMIT and offset
-1, as Kafka; without it the last committed offset is answered (a pending one is invisible).
v0 is v1's layout; Kafka 3.x answered it from ZooKeeper-stored offsets, klog from the
one offsets store (where its v0 commits go too).
"""

from __future__ import annotations

from typing import Any

from klog.daemon.group.metadata_manager import GroupMetadataManager
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


def _partition(index: int, offset: int = -1, leader_epoch: int = -1, metadata: str = "",
               error: ErrorCode = ErrorCode.NONE) -> dict[str, Any]:
    return {"partition_index": index, "committed_offset": offset,
            "committed_leader_epoch": leader_epoch, "metadata": metadata,
            "error_code": int(error)}


def _fetch_group(ctx: RequestContext, manager: GroupMetadataManager, group_id: str,
                 topics: Any, version: int, require_stable: bool = False
                 ) -> tuple[ErrorCode, list[dict[str, Any]]]:
    """(group error, response topics) for one group."""
    error = (manager.coordinator_error(group_id)
             if ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id)
             else ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if error is not None:
        if version >= 2 or topics is None:
            return error, []
        # v1: no top-level error field; the requested partitions carry it.
        return error, [{"name": t.name,
                        "partitions": [_partition(p, error=error) for p in t.partition_indexes]}
                       for t in topics]
    if topics is None:
        committed = manager.fetch_offsets(group_id, None)
        # All topics: those the caller may not Describe are left out, as Kafka does.
        hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC,
                            {t for t, _ in committed})
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, index), om in sorted(committed.items()):
            if topic in hidden:
                continue
            by_topic.setdefault(topic, []).append(
                _partition(index, om.offset, om.leader_epoch, om.metadata))
        return ErrorCode.NONE, [{"name": t, "partitions": parts}
                                for t, parts in by_topic.items()]
    denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, [t.name for t in topics])
    wanted = [(t.name, p) for t in topics if t.name not in denied for p in t.partition_indexes]
    committed = manager.fetch_offsets(group_id, wanted)
    out = []
    for t in topics:
        parts = []
        for p in t.partition_indexes:
            if t.name in denied:
                parts.append(_partition(p, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if require_stable and manager.has_pending_txn_offset(group_id, (t.name, p)):
                parts.append(_partition(p, error=ErrorCode.UNSTABLE_OFFSET_COMMIT))
                continue
            found = committed.get((t.name, p))
            parts.append(_partition(p) if found is None
                         else _partition(p, found.offset, found.leader_epoch, found.metadata))
        out.append({"name": t.name, "partitions": parts})
    return ErrorCode.NONE, out


async def handle(ctx: RequestContext, request: Request) -> Response:
    manager = ctx.services.group_manager
    version = ctx.api_version
    if version >= 8:
        groups = []
        for group in request.groups:
            error, topics = _fetch_group(ctx, manager, group.group_id, group.topics,
                                         version, request.require_stable)
            groups.append({"group_id": group.group_id, "topics": topics,
                           "error_code": int(error)})
        return ctx.respond({"throttle_time": 0, "groups": groups})
    error, topics = _fetch_group(ctx, manager, request.group_id, request.topics, version,
                                 getattr(request, "require_stable", False))
    return ctx.respond({"throttle_time": 0, "topics": topics, "error_code": int(error)})
