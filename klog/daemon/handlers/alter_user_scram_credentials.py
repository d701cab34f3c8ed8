"""AlterUserScramCredentials (v0): upsert or delete users' SCRAM credentials, stored salted
in /config/users/<name> with a change notification (klog/daemon/security/credentials.py).
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.security.credentials import Deletion, Upsertion
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    deletions = [Deletion(d.name, int(d.mechanism)) for d in request.deletions]
    upsertions = [Upsertion(u.name, int(u.mechanism), int(u.iterations), bytes(u.salt),
                            bytes(u.salted_password)) for u in request.upsertions]
    users = dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions])
    # As Kafka: Alter on the cluster, else every user gets CLUSTER_AUTHORIZATION_FAILED.
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.respond({"throttle_time": 0, "results": [
            {"user": u, "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
             "error_message": None} for u in users]})
    manager = ctx.services.scram_credentials
    if manager is None:
        return ctx.respond({"throttle_time": 0, "results": [
            {"user": u, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
             "error_message": "SCRAM credentials are not available"} for u in users]})
    results = await manager.alter(deletions, upsertions)
    return ctx.respond({"throttle_time": 0, "results": [
        {"user": r.user, "error_code": r.error_code, "error_message": r.error_message}
        for r in results]})
