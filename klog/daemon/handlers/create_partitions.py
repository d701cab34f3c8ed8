"""CreatePartitions (v0-3): grow topics to a new partition count, optionally with the
replicas of each new partition; validate_only checks without changing anything. The new
partitions count against the client's controller_mutation_rate (KIP-599)."""

from __future__ import annotations

from klog.daemon.admin_rules import ApiError, PartitionsSpec
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode

_THROTTLED = "The throttling quota has been exceeded."


async def handle(ctx: RequestContext, request: Request) -> Response:
    admin = ctx.services.admin
    names = list(dict.fromkeys(t.name for t in request.topics))
    if not admin.is_controller:
        results = {n: ApiError.of(ErrorCode.NOT_CONTROLLER) for n in names}
    else:
        denied = ctx.denied(AclOperation.ALTER, ResourceType.TOPIC, names)
        throttled: dict[str, ApiError] = {}
        if not request.validate_only:
            # controller_mutation_rate (KIP-599): v3+ refuse over the quota.
            cache = ctx.services.metadata_cache
            for t in request.topics:
                if t.name not in denied and not ctx.mutations_allowed(
                        max(0, t.count - len(cache.partitions(t.name))), ctx.api_version >= 3):
                    throttled[t.name] = ApiError.of(ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                                                    _THROTTLED)
            denied = denied | set(throttled)
        specs = [
            PartitionsSpec(
                t.name, t.count,
                None if t.assignments is None else [list(a.broker_ids) for a in t.assignments],
            )
            for t in request.topics if t.name not in denied
        ]
        results = await admin.create_partitions(specs, timeout_ms=as_millis(request.timeout),
                                                validate_only=request.validate_only)
        results.update(dict.fromkeys(denied, ApiError.of(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                         "Not authorized to alter the topic.")))
        results.update(throttled)
    return ctx.respond({
        "throttle_time": ctx.mutation_throttle_ms,
        "results": [{"name": n, "error_code": results[n].error_code,
                     "error_message": results[n].error_message} for n in names],
    })
