"""AlterClientQuotas (v0-1): set or remove quotas of user / client-id entities, each entry
answered on its own (klog/daemon/quota_store.py, Kafka's ZkAdminManager.alterClientQuotas)."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.quota_store import QuotaOp
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    # An entity is a map of type to name in Kafka (ClientQuotaEntity): a type named twice
    # keeps its last name, and the answer names the entity so.
    entries = [(list(dict((e.entity_type, e.entity_name) for e in entry.entity).items()),
                [QuotaOp(op.key, float(op.value), op.remove) for op in entry.ops])
               for entry in request.entries]
    admin = ctx.services.client_quota_admin
    # As Kafka: AlterConfigs on the cluster, else every entry CLUSTER_AUTHORIZATION_FAILED.
    refusal: tuple[ErrorCode, str | None] | None = None
    if not ctx.authorize(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        refusal = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    elif admin is None:
        refusal = (ErrorCode.UNKNOWN_SERVER_ERROR, "client quotas are not available")
    if refusal is not None or admin is None:
        error, message = refusal or (ErrorCode.UNKNOWN_SERVER_ERROR, None)
        return ctx.respond({"throttle_time": 0, "entries": [
            {"error_code": int(error), "error_message": message,
             "entity": [{"entity_type": t, "entity_name": n} for t, n in parts]}
            for parts, _ops in entries]})
    results = await admin.alter(entries, request.validate_only)
    return ctx.respond({"throttle_time": 0, "entries": [
        {"error_code": int(r.error), "error_message": r.message,
         "entity": [{"entity_type": t, "entity_name": n} for t, n in r.entity]}
        for r in results]})
