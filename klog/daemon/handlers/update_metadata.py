"""UpdateMetadata (v0-7): the controller's view of live brokers and partition states, for
this broker's metadata cache. Only the controller ZooKeeper names may send it
(klog/daemon/controller/identity.py); fencing lives in klog/daemon/controller/receiver.py."""

from __future__ import annotations

from typing import Any

from klog.daemon.controller import receiver
from klog.daemon.controller.identity import UnverifiableRequest
from klog.daemon.handlers import CLUSTER_ACTION, Request, RequestContext, Response
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo


async def handle(ctx: RequestContext, request: Request) -> Response:
    try:
        error = await ctx.services.controller_identity.check(int(request.controller_id),
                                                             int(request.controller_epoch),
                                                             ctx.authorize(*CLUSTER_ACTION))
    except UnverifiableRequest as exc:
        return ctx.close_connection(f"UpdateMetadata: {exc}")
    if not error:
        states, topic_ids = receiver.request_partition_states(request)
        error = ctx.services.control_requests.update_metadata(
            int(request.controller_id), int(request.controller_epoch),
            int(getattr(request, "broker_epoch", -1)), live_brokers(request), states,
            topic_ids)
    return ctx.respond({"error_code": error})


def live_brokers(request: Any) -> list[BrokerInfo]:
    out = []
    for b in request.live_brokers:
        if hasattr(b, "endpoints"):
            endpoints = []
            for e in b.endpoints:
                protocol = receiver.SECURITY_PROTOCOLS.get(int(e.security_protocol), "PLAINTEXT")
                # v1-2 have no listener names: the security protocol names the listener.
                name = getattr(e, "listener", None) or protocol
                endpoints.append(BrokerEndpoint(name, e.host, int(e.port), protocol))
        else:
            endpoints = [BrokerEndpoint("PLAINTEXT", b.v0_host, int(b.v0_port))]
        out.append(BrokerInfo(int(b.id), tuple(endpoints), getattr(b, "rack", None)))
    return out
