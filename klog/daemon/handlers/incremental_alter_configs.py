"""IncrementalAlterConfigs (v0-1): SET, DELETE, APPEND, SUBTRACT on a topic's or
broker's dynamic config overrides; answered as AlterConfigs (``alter_resources``)."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.handlers.alter_configs import alter_resources


async def handle(ctx: RequestContext, request: Request) -> Response:
    return await alter_resources(
        ctx, request, lambda r: [(c.name, c.config_operation, c.value) for c in r.configs],
        ctx.services.admin.incremental_alter_configs)
