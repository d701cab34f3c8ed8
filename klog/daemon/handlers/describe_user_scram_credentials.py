"""DescribeUserScramCredentials (v0): each user's SCRAM mechanisms and iterations, never
the keys (klog/daemon/security/credentials.py). No users named: every user with one."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    # As Kafka: Describe on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.respond({"throttle_time": 0,
                            "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                            "error_message": None, "results": []})
    manager = ctx.services.scram_credentials
    if manager is None:
        return ctx.respond({"throttle_time": 0, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
                            "error_message": "SCRAM credentials are not available",
                            "results": []})
    users = None if request.users is None else [u.name for u in request.users]
    results = await manager.describe(users)
    return ctx.respond({"throttle_time": 0, "error_code": 0, "error_message": None,
                        "results": [
                            {"user": r.user, "error_code": r.error_code,
                             "error_message": r.error_message,
                             "credential_infos": [{"mechanism": m, "iterations": i}
                                                  for m, i in r.credentials]}
                            for r in results]})
