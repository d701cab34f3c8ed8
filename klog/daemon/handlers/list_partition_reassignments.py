"""ListPartitionReassignments (v0, KIP-455): the ongoing reassignments (replicas, adding
and removing replicas) of the partitions asked for, or of all when topics is null. Only
the active controller answers (NOT_CONTROLLER otherwise); partitions that are not being
reassigned (or do not exist) are left out, as Kafka."""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    controller = ctx.services.controller
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.respond({"throttle_time": 0, "topics": [], "error_message": None,
                            "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)})
    if not controller.active:
        return ctx.respond({"throttle_time": 0, "error_code": int(ErrorCode.NOT_CONTROLLER),
                            "error_message": None, "topics": []})
    tps = None
    if request.topics is not None:
        tps = [(t.name, int(p)) for t in request.topics for p in t.partition_indexes]
    ongoing = controller.list_partition_reassignments(tps)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (replicas, adding, removing) in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "replicas": replicas,
            "adding_replicas": adding, "removing_replicas": removing})
    return ctx.respond({
        "throttle_time": 0, "error_code": 0, "error_message": None,
        "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    })
