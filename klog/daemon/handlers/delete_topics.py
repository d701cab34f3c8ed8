"""DeleteTopics (v0-6): by name, or by topic id (v6).

The controller-only rule, TOPIC_DELETION_DISABLED (INVALID_REQUEST before v3) when
delete.topic.enable is false, and per-entry errors for malformed v6 entries (name and id
both given, neither given, duplicates) with Kafka 3.x's messages. The deletion itself is
the AdminManager's: mark the topic, wait until it is gone or the timeout passes. Each
topic's partitions count against the client's controller_mutation_rate (KIP-599).
"""

from __future__ import annotations

import uuid
from typing import Any

from klog.daemon.admin_rules import ZERO_UUID, ApiError
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    services = ctx.services
    version = ctx.api_version
    # (name or None, topic id or None, error or None), in request order
    entries: list[list[Any]] = []
    if version < 6:
        entries = [[name, None, None] for name in dict.fromkeys(request.topic_names)]
    else:
        entries = _resolve(ctx, request.topics)
    error: ApiError | None = None
    if not services.admin.is_controller:
        error = ApiError.of(ErrorCode.NOT_CONTROLLER)
    elif not services.config.current.delete_topic_enable:
        error = ApiError.of(ErrorCode.TOPIC_DELETION_DISABLED if version >= 3
                            else ErrorCode.INVALID_REQUEST,
                            "Topic deletion is disabled.")
    cache = services.metadata_cache
    for e in entries:  # answered with the id the topic had, known only before it goes
        if e[1] is None and e[0] is not None:
            e[1] = cache.topic_id(e[0])
    if error is None:
        denied = ctx.denied(AclOperation.DELETE, ResourceType.TOPIC,
                            [e[0] for e in entries if e[2] is None])
        for e in entries:
            if e[2] is None and e[0] in denied:
                e[2] = ApiError.of(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if error is None:
        # controller_mutation_rate (KIP-599): v5+ refuse over the quota.
        for e in entries:
            if e[2] is None and not ctx.mutations_allowed(
                    len(cache.partitions(e[0])), version >= 5):
                e[2] = ApiError.of(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                   "The throttling quota has been exceeded.")
    to_delete = [e[0] for e in entries if e[2] is None]
    if error is not None:
        for e in entries:
            if e[2] is None:
                e[2] = error
    elif to_delete:
        results = await services.admin.delete_topics(to_delete, as_millis(request.timeout))
        for e in entries:
            if e[2] is None:
                e[2] = results[e[0]]
    responses = []
    for name, topic_id, err in entries:
        responses.append({
            "name": name,
            "topic_id": topic_id or ZERO_UUID,
            "error_code": err.error_code,
            "error_message": err.error_message,
        })
    return ctx.respond({"throttle_time": ctx.mutation_throttle_ms, "responses": responses})


def _resolve(ctx: RequestContext, topics: Any) -> list[list[Any]]:
    cache = ctx.services.metadata_cache
    entries: list[list[Any]] = []
    names_seen: dict[str, list[Any]] = {}
    ids_seen: dict[uuid.UUID, list[Any]] = {}
    invalid = ErrorCode.INVALID_REQUEST
    for t in topics:
        topic_id = t.topic_id if t.topic_id not in (None, ZERO_UUID) else None
        if t.name is not None and topic_id is not None:
            entries.append([t.name, topic_id, ApiError.of(
                invalid, "You may not specify both topic name and topic id.")])
        elif t.name is None and topic_id is None:
            entries.append([None, None, ApiError.of(
                invalid, "Neither topic name nor id were specified.")])
        elif topic_id is not None:
            if topic_id in ids_seen:
                ids_seen[topic_id][2] = ApiError.of(invalid, "Duplicate topic id.")
                continue
            name = cache.topic_by_id(topic_id)
            entry = [name, topic_id, None]
            if name is None:
                entry[2] = ApiError.of(ErrorCode.UNKNOWN_TOPIC_ID,
                                       "This server does not host this topic ID.")
            ids_seen[topic_id] = entry
            entries.append(entry)
        else:
            if t.name in names_seen:
                names_seen[t.name][2] = ApiError.of(invalid, "Duplicate topic name.")
                continue
            entry = [t.name, None, None]
            names_seen[t.name] = entry
            entries.append(entry)
    # A name whose id another entry carries would delete one topic twice.
    for name, entry in names_seen.items():
        tid = cache.topic_id(name)
        if entry[2] is None and tid is not None and tid in ids_seen:
            entry[1] = tid
            entry[2] = ApiError.of(
                invalid, "The provided topic name maps to an ID that was already supplied.")
    return entries
