"""AlterPartitionReassignments (v0-1, KIP-455): start, replace or cancel (null replicas)
partition reassignments. Only the active controller answers (NOT_CONTROLLER otherwise, at
the top level, as Kafka); the work is the controller's
(klog/daemon/controller/reassignment.py). v1's allow_replication_factor_change=false
refuses targets of another length (INVALID_REPLICATION_FACTOR)."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    controller = ctx.services.controller
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.respond({"throttle_time": 0, "responses": [], "error_message": None,
                            "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)})
    if not controller.active:
        return ctx.respond({"throttle_time": 0, "error_code": int(ErrorCode.NOT_CONTROLLER),
                            "error_message": None, "responses": []})
    targets: dict[tuple[str, int], list[int] | None] = {}
    order: dict[str, list[int]] = {}
    for t in request.topics:
        for p in t.partitions:
            tp = (t.name, int(p.partition_index))
            targets[tp] = None if p.replicas is None else [int(r) for r in p.replicas]
            order.setdefault(t.name, [])
            if tp[1] not in order[t.name]:
                order[t.name].append(tp[1])
    allow = bool(getattr(request, "allow_replication_factor_change", True))
    results = await controller.alter_partition_reassignments(targets, allow) if targets else {}
    return ctx.respond({
        "throttle_time": 0, "error_code": 0, "error_message": None,
        "responses": [
            {"name": name, "partitions": [
                {"partition_index": p, "error_code": results[(name, p)][0],
                 "error_message": results[(name, p)][1]} for p in parts]}
            for name, parts in order.items()
        ],
    })
