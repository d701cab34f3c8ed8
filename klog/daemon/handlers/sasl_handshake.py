"""SaslHandshake (v0-1): the client names its SASL mechanism (klog/daemon/security/sasl.py).

On a listener without SASL, or after authentication without re-authentication, Kafka
answers ILLEGAL_SASL_STATE; so does klog. An unsupported mechanism is answered
UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the connection then closes.
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    auth = None if ctx.connection is None else ctx.connection.authenticator
    if auth is None:
        return ctx.respond({"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []})
    code, mechanisms = auth.handshake(request.mechanism, ctx.api_version)
    return ctx.respond({"error_code": code, "mechanisms": mechanisms})
