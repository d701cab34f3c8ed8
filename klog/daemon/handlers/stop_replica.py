"""StopReplica (v0-3): stop hosting (and optionally delete) replicas here. Only the
controller ZooKeeper names may send it (klog/daemon/controller/identity.py; a refused
request deletes and stops nothing). Fencing lives in klog/daemon/controller/receiver.py."""

from __future__ import annotations

from klog.daemon.controller.identity import UnverifiableRequest
from klog.daemon.handlers import CLUSTER_ACTION, Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    partitions: list[tuple[tuple[str, int], int, bool]] = []
    delete = bool(getattr(request, "delete_partitions", False))
    for p in getattr(request, "ungrouped_partitions", ()):
        partitions.append(((p.topic_name, int(p.partition_index)), -1, delete))
    for t in getattr(request, "topics", ()):
        for index in t.partition_indexes:
            partitions.append(((t.name, int(index)), -1, delete))
    for t in getattr(request, "topic_states", ()):
        for s in t.partition_states:
            partitions.append(((t.topic_name, int(s.partition_index)), int(s.leader_epoch),
                               bool(s.delete_partition)))
    try:
        refused = await ctx.services.controller_identity.check(int(request.controller_id),
                                                             int(request.controller_epoch),
                                                             ctx.authorize(*CLUSTER_ACTION))
    except UnverifiableRequest as exc:
        return ctx.close_connection(f"StopReplica: {exc}")
    if refused:
        error, errors = refused, {tp: refused for tp, _, _ in partitions}
    else:
        error, errors = ctx.services.control_requests.stop_replica(
            int(request.controller_epoch),
            int(getattr(request, "broker_epoch", -1)), partitions)
    return ctx.respond({"error_code": error, "partition_errors": [
        {"topic_name": t, "partition_index": p, "error_code": code}
        for (t, p), code in errors.items()]})
