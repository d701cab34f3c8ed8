"""AlterConfigs (v0-2): replace a topic's or broker's dynamic config overrides."""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    resources = [(r.resource_type, r.resource_name, {c.name: c.value for c in r.configs})
                 for r in request.resources]
    results = await ctx.services.admin.alter_configs(resources,
                                                   validate_only=request.validate_only)
    return ctx.respond({
        "throttle_time": 0,
        "responses": [{
            "error_code": result.error_code,
            "error_message": result.error_message,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
        } for r, result in zip(request.resources, results, strict=True)],
    })
