"""StopReplica (v0-3): stop hosting (and optionally delete) replicas here. Fencing lives
in klog/daemon/controller/receiver.py."""

from __future__ import annotations

from typing import Any

from klog.daemon.controller import receiver
from klog.daemon.handlers import RequestContext


async def handle(ctx: RequestContext, request: Any) -> Any:
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
    error, errors = receiver.stop_replica(
        ctx.broker, int(request.controller_epoch), int(getattr(request, "broker_epoch", -1)),
        partitions)
    return ctx.respond({"error_code": error, "partition_errors": [
        {"topic_name": t, "partition_index": p, "error_code": code}
        for (t, p), code in errors.items()]})
