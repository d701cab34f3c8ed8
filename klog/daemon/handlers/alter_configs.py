"""AlterConfigs (v0-2): replace a topic's or broker's dynamic config overrides."""

from __future__ import annotations

from klog.daemon.admin_rules import ApiError
from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.handlers.describe_configs import config_refusal
from klog.protocol.acls import AclOperation


async def handle(ctx: RequestContext, request: Request) -> Response:
    resources = [(r.resource_type, r.resource_name, {c.name: c.value for c in r.configs})
                 for r in request.resources]
    refused = [config_refusal(ctx, AclOperation.ALTER_CONFIGS, r.resource_type,
                              r.resource_name) for r in request.resources]
    answers = iter(await ctx.services.admin.alter_configs(
        [r for r, error in zip(resources, refused, strict=True) if not error],
        validate_only=request.validate_only))
    results = [ApiError(error) if error else next(answers) for error in refused]
    return ctx.respond({
        "throttle_time": 0,
        "responses": [{
            "error_code": result.error_code,
            "error_message": result.error_message,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
        } for r, result in zip(request.resources, results, strict=True)],
    })
