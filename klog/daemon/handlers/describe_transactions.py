"""DescribeTransactions (v0): transactional ids' state, from the transaction coordinator.

One call, ``TransactionCoordinator.describe``, which answers each id in order with its
state, timeout, start time, producer id and epoch and partitions, or its error
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND, ...).
"""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.transaction.coordinator import TransactionDescription


def _state(d: TransactionDescription) -> dict[str, Any]:
    return {
        "error_code": d.error_code,
        "transactional_id": d.transactional_id,
        "transaction_state": d.state,
        "transaction_timeout": d.timeout_ms,
        "transaction_start_time": d.start_time_ms,
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "topics": [{"topic": topic, "partitions": partitions}
                   for topic, partitions in (d.topics or {}).items()],
    }


async def handle(ctx: RequestContext, request: Request) -> Response:
    found = ctx.services.transaction_coordinator.describe(list(request.transactional_ids))
    return ctx.respond({"throttle_time": 0, "transaction_states": [_state(d) for d in found]})
