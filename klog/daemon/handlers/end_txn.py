"""EndTxn (v0-v3): commit or abort a producer's transaction.

One call, ``TransactionCoordinator.end_transaction``: answered once PrepareCommit or
PrepareAbort is written to ``__transaction_state``; the markers follow. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2 (Kafka's KafkaApis).
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    error = await ctx.services.transaction_coordinator.end_transaction(
        request.transactional_id, request.producer_id, request.producer_epoch,
        bool(request.committed))
    if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return ctx.respond({"throttle_time": 0, "error_code": int(error)})
