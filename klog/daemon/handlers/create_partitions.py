"""CreatePartitions (v0-3): grow topics to a new partition count, optionally with the
replicas of each new partition; validate_only checks without changing anything."""

from __future__ import annotations

from klog.daemon.admin import ApiError, PartitionsSpec
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    admin = ctx.services.admin
    names = list(dict.fromkeys(t.name for t in request.topics))
    if not admin.is_controller:
        results = {n: ApiError.of(ErrorCode.NOT_CONTROLLER) for n in names}
    else:
        denied = ctx.denied(AclOperation.ALTER, ResourceType.TOPIC, names)
        specs = [
            PartitionsSpec(
                t.name, t.count,
                None if t.assignments is None else [list(a.broker_ids) for a in t.assignments],
            )
            for t in request.topics if t.name not in denied
        ]
        results = await admin.create_partitions(specs, timeout_ms=as_millis(request.timeout),
                                                validate_only=request.validate_only)
        results.update(dict.fromkeys(denied, ApiError.of(ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
    return ctx.respond({
        "throttle_time": 0,
        "results": [{"name": n, "error_code": results[n].error_code,
                     "error_message": results[n].error_message} for n in names],
    })
