"""DescribeCluster (v0-1): cluster id, controller, and the live brokers' endpoints on the
listener the request came in on. A broker serves endpoint type BROKER (1) only: v1
requests asking for another get UNSUPPORTED_ENDPOINT_TYPE / MISMATCHED_ENDPOINT_TYPE.
cluster_authorized_operations (KIP-430), when asked: what the caller may do on the cluster
(all 7 of its operations without an authorizer, as Kafka; 0 without Describe on it)."""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode

ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
# Kafka error codes klog's ErrorCode enum does not carry yet.
MISMATCHED_ENDPOINT_TYPE = 114
UNSUPPORTED_ENDPOINT_TYPE = 115

_UNSET = -2**31


def _cluster_operations(ctx: RequestContext) -> int:
    """KIP-430: what the caller may do on the cluster; 0 without Describe on it."""
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


async def handle(ctx: RequestContext, request: Request) -> Response:
    cache = ctx.services.metadata_cache
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKER)
    base: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": ENDPOINT_BROKER,
        "cluster_id": cache.cluster_id or "",
        "controller_id": -1,
        "brokers": [],
        "cluster_authorized_operations": _UNSET,
    }
    if endpoint_type not in (ENDPOINT_BROKER, ENDPOINT_CONTROLLER):
        # (Kafka's error answers leave the cluster id empty)
        return ctx.respond({**base, "cluster_id": "",
                            "error_code": UNSUPPORTED_ENDPOINT_TYPE if ctx.api_version
                            else int(ErrorCode.INVALID_REQUEST),
                            "error_message": f"Unsupported endpoint type {endpoint_type}"})
    if endpoint_type != ENDPOINT_BROKER:
        return ctx.respond({**base, "cluster_id": "",
                            "error_code": MISMATCHED_ENDPOINT_TYPE if ctx.api_version
                            else int(ErrorCode.INVALID_REQUEST),
                            "error_message": "The request was sent to an endpoint of type "
                                             "BROKER, but we wanted an endpoint of type "
                                             "CONTROLLER"})
    brokers = []
    for broker_id in cache.alive_broker_ids():
        info = cache.broker(broker_id)
        ep = info.endpoint(ctx.listener_name) if info else None
        if info is None or ep is None:
            continue
        brokers.append({"broker_id": broker_id, "host": ep.host, "port": ep.port,
                        "rack": info.rack})
    controller_id = cache.controller_id
    if controller_id not in {b["broker_id"] for b in brokers}:
        controller_id = -1
    return ctx.respond({
        **base,
        "controller_id": controller_id,
        "brokers": brokers,
        "cluster_authorized_operations": _cluster_operations(ctx)
        if request.include_cluster_authorized_operations else _UNSET,
    })
