"""ApiVersions: the versions of every API this broker has implemented and tested.

The table is ``apis.ADVERTISED``; an ApiVersions request at a version the broker does not
speak never reaches here (the connection answers it in v0 with UNSUPPORTED_VERSION).
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    advertised = ctx.services.api_versions
    return ctx.respond({
        "error_code": 0,
        "api_keys": [
            {"api_key": key, "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(advertised.items())
        ],
        "throttle_time": 0,
        "supported_features": [],
        "finalized_features_epoch": -1,
        "finalized_features": [],
        "zk_migration_ready": False,
    })
