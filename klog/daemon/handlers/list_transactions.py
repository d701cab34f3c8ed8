"""ListTransactions (v0): the transactional ids this broker coordinates, filtered.

One call, ``TransactionCoordinator.list_transactions(states_filter, producer_ids_filter)``
(empty filters match everything; state names Kafka does not know come back in
``unknown_state_filters``); COORDINATOR_LOAD_IN_PROGRESS while a partition of
``__transaction_state`` loads.
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    found = ctx.services.transaction_coordinator.list_transactions(
        list(request.state_filters), list(request.producer_id_filters))
    return ctx.respond({
        "throttle_time": 0,
        "error_code": found.error_code,
        "unknown_state_filters": found.unknown_state_filters,
        "transaction_states": [{"transactional_id": t.transactional_id,
                                "producer_id": t.producer_id,
                                "transaction_state": t.state}
                               for t in found.transactions],
    })
