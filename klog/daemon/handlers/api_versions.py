"""ApiVersions: the versions of every API this broker has implemented and tested.

The table is ``apis.ADVERTISED``; an ApiVersions request at a version the broker does not
speak never reaches here (the connection answers it in v0 with UNSUPPORTED_VERSION).
From v3 the client names its software (KIP-511): a name or version that is empty or not
letters, digits, '-' and '.' between a letter or digit at each end is INVALID_REQUEST with
no API listed, as Kafka's ApiVersionsRequest.isValid has it.
"""

from __future__ import annotations

import re

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.errors import ErrorCode

_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


async def handle(ctx: RequestContext, request: Request) -> Response:
    advertised = ctx.services.api_versions
    if ctx.api_version >= 3 and not (
            _SOFTWARE.fullmatch(request.client_software_name or "")
            and _SOFTWARE.fullmatch(request.client_software_version or "")):
        return ctx.respond({"error_code": int(ErrorCode.INVALID_REQUEST), "api_keys": [],
                            "throttle_time": 0, "supported_features": [],
                            "finalized_features_epoch": -1, "finalized_features": [],
                            "zk_migration_ready": False})
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
