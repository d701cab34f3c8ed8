"""LeaderAndIsr (v0-6): the controller tells this broker which partitions it leads or
follows. Only the controller ZooKeeper names may send it (klog/daemon/controller/
identity.py; a refused request applies nothing). Fencing and applying live in
klog/daemon/controller/receiver.py (shared with the controller's in-process path); this
module translates the wire entities."""

from __future__ import annotations

from typing import Any

from klog.daemon.controller import receiver
from klog.daemon.controller.identity import UnverifiableRequest
from klog.daemon.handlers import CLUSTER_ACTION, Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    services = ctx.services
    states, topic_ids = receiver.request_partition_states(request)
    try:
        refused = await services.controller_identity.check(int(request.controller_id),
                                                         int(request.controller_epoch),
                                                         ctx.authorize(*CLUSTER_ACTION))
    except UnverifiableRequest as exc:
        return ctx.close_connection(f"LeaderAndIsr: {exc}")
    if refused:
        error, errors = refused, {(s.topic, s.partition): refused for s in states}
    else:
        error, errors = await services.control_requests.handle_leader_and_isr(
            int(request.controller_id), int(request.controller_epoch),
            int(getattr(request, "broker_epoch", -1)), states, topic_ids)
    if ctx.api_version < 5:
        return ctx.respond({"error_code": error, "partition_errors": [
            {"topic_name": t, "partition_index": p, "error_code": code}
            for (t, p), code in errors.items()]})
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (t, p), code in errors.items():
        by_topic.setdefault(t, []).append({"partition_index": p, "error_code": code})
    ids = {**services.metadata_cache.topic_ids, **topic_ids}
    return ctx.respond({"error_code": error, "topics": [
        {"topic_id": ids.get(t), "partition_errors": parts} for t, parts in by_topic.items()]})
