"""ControlledShutdown (v0-3): a stopping broker asks the controller to move its
leaderships away first; the answer lists the partitions it still leads. Cluster mode only
(a standalone broker has no peer to ask it: CLUSTER_AUTHORIZATION_FAILED, and its
listeners do not accept it at all); only the active controller answers (NOT_CONTROLLER
otherwise), and only for a registered broker at its current broker epoch (the work and
that check are the controller's, Controller.controlled_shutdown)."""

from __future__ import annotations

from klog.daemon.handlers import CLUSTER_ACTION, Request, RequestContext, Response
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    if not ctx.services.controller_identity.cluster_action_allowed(
            ctx.authorize(*CLUSTER_ACTION)):
        return ctx.respond({"error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                            "remaining_partitions": []})
    controller = ctx.services.controller
    if not controller.active:
        return ctx.respond({"error_code": int(ErrorCode.NOT_CONTROLLER),
                            "remaining_partitions": []})
    error, remaining = await controller.controlled_shutdown(
        int(request.broker_id), int(getattr(request, "broker_epoch", -1)))
    return ctx.respond({"error_code": error, "remaining_partitions": [
        {"topic_name": t, "partition_index": p} for t, p in remaining]})
