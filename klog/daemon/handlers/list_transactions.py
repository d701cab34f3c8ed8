"""ListTransactions (v0-v1): the transactional ids this broker coordinates, filtered.

One call, ``TransactionCoordinator.list_transactions(states_filter, producer_ids_filter,
duration_filter_ms)`` (empty filters match everything; state names Kafka does not know
come back in ``unknown_state_filters``; v1's duration filter, KIP-994: only ids whose
transaction started more than that many ms ago, -1 for all); COORDINATOR_LOAD_IN_PROGRESS
while a partition of ``__transaction_state`` loads.
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType


async def handle(ctx: RequestContext, request: Request) -> Response:
    found = ctx.services.transaction_coordinator.list_transactions(
        list(request.state_filters), list(request.producer_id_filters),
        int(getattr(request, "duration_filter", -1)))  # v1+
    hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                        [t.transactional_id for t in found.transactions])
    return ctx.respond({
        "throttle_time": 0,
        "error_code": found.error_code,
        "unknown_state_filters": found.unknown_state_filters,
        # As Kafka: only the transactional ids the caller may Describe are listed.
        "transaction_states": [{"transactional_id": t.transactional_id,
                                "producer_id": t.producer_id,
                                "transaction_state": t.state}
                               for t in found.transactions if t.transactional_id not in
                               hidden],
    })
