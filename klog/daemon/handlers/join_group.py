"""JoinGroup (v0-v9): join (or rejoin) a classic group; the answer waits for the rebalance.

Version differences, as Kafka's KafkaApis applies them: v0 has no rebalance timeout (the
session timeout serves as both); v4+ members must first learn their member id
(MEMBER_ID_REQUIRED); v5+ carry ``group.instance.id``; before v7 a missing protocol name
is sent as ""; v9 may tell a restarted static leader to skip the assignment. The client
host is the peer address as Kafka prints it ("/127.0.0.1").
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode


def client_host(ctx: RequestContext) -> str:
    peer = ctx.connection.peer if ctx.connection is not None else "?"
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host


async def handle(ctx: RequestContext, request: Request) -> Response:
    version = ctx.api_version
    coordinator = ctx.services.group_coordinator
    session_timeout_ms = as_millis(request.session_timeout)
    rebalance = getattr(request, "rebalance_timeout", None)
    rebalance_timeout_ms = session_timeout_ms if rebalance is None else as_millis(rebalance)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.respond({"throttle_time": 0, "error_code": int(
            ErrorCode.GROUP_AUTHORIZATION_FAILED), "generation_id": -1, "protocol_type": None,
            "protocol_name": None if version >= 7 else "", "leader": "",
            "skip_assignment": False, "member_id": "", "members": []})
    result = await coordinator.join_group(
        request.group_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        version >= 4,
        version >= 9,
        ctx.header.client_id or "",
        client_host(ctx),
        rebalance_timeout_ms,
        session_timeout_ms,
        request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols],
        getattr(request, "reason", None),
    )
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    return ctx.respond({
        "throttle_time": 0,
        "error_code": int(result.error),
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": protocol_name,
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {"member_id": m, "group_instance_id": i, "metadata": md}
            for m, i, md in result.members
        ],
    })
