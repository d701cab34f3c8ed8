"""DescribeClientQuotas (v0-1): the quota entities matching a filter, with their quotas
(klog/daemon/quota_store.py, Kafka's ZkAdminManager.describeClientQuotas)."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.quota_store import FilterComponent, QuotaRequestError
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


def _error(ctx: RequestContext, error: ErrorCode, message: str | None) -> Response:
    return ctx.respond({"throttle_time": 0, "error_code": int(error), "error_message": message,
                        "entries": None})


async def handle(ctx: RequestContext, request: Request) -> Response:
    # As Kafka: DescribeConfigs on the cluster.
    if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return _error(ctx, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    admin = ctx.services.client_quota_admin
    if admin is None:
        return _error(ctx, ErrorCode.UNKNOWN_SERVER_ERROR, "client quotas are not available")
    components = [FilterComponent(c.entity_type, c.match_type, c.match)
                  for c in request.components]
    try:
        found = await admin.describe(components, request.strict)
    except QuotaRequestError as exc:
        return _error(ctx, exc.error, str(exc))
    return ctx.respond({"throttle_time": 0, "error_code": 0, "error_message": None,
                        "entries": [
                            {"entity": [{"entity_type": t, "entity_name": n} for t, n in parts],
                             "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
                            for parts, values in found]})
