"""AlterConfigs (v0-2): replace a topic's or broker's dynamic config overrides.

``alter_resources`` is the one answer of AlterConfigs and IncrementalAlterConfigs (which
differ only in how a resource's changes are given): each resource refused by
``config_refusal`` answers its error, the rest go to the admin service in order."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from klog.daemon.admin_rules import ApiError
from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.handlers.describe_configs import config_refusal
from klog.protocol.acls import AclOperation


async def handle(ctx: RequestContext, request: Request) -> Response:
    return await alter_resources(
        ctx, request, lambda r: {c.name: c.value for c in r.configs},
        ctx.services.admin.alter_configs)


async def alter_resources(
    ctx: RequestContext, request: Request, changes: Callable[[Any], object],
    alter: Callable[..., Awaitable[list[ApiError]]],
) -> Response:
    """The response to ``request``'s resources, each with its ``changes`` given to
    ``alter`` (the admin service's call) unless refused."""
    resources = [(r.resource_type, r.resource_name, changes(r)) for r in request.resources]
    refused = [config_refusal(ctx, AclOperation.ALTER_CONFIGS, r.resource_type,
                              r.resource_name) for r in request.resources]
    answers = iter(await alter(
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
