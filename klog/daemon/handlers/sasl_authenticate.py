"""SaslAuthenticate (v0-2): one SASL token each way (klog/daemon/security/sasl.py).

A failure answers SASL_AUTHENTICATION_FAILED with the reason, and the connection closes
after connection.failed.authentication.delay.ms; v1+ answers carry the session lifetime
(connections.max.reauth.ms) once authentication completes. Without SASL on the listener:
ILLEGAL_SASL_STATE, as Kafka.
"""

from __future__ import annotations

import datetime

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    auth = None if ctx.connection is None else ctx.connection.authenticator
    if auth is None:
        return ctx.respond({"error_code": ErrorCode.ILLEGAL_SASL_STATE,
                            "error_message": "SASL is not enabled on this listener",
                            "auth_bytes": b"", "session_lifetime": _ms(0)})
    result = auth.authenticate(bytes(request.auth_bytes), ctx.api_version)
    return ctx.respond({"error_code": result.error_code, "error_message": result.error_message,
                        "auth_bytes": result.auth_bytes,
                        "session_lifetime": _ms(result.session_lifetime_ms)})


def _ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)
