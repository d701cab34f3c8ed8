"""DescribeTransactions (v0): transactional ids' state, from the transaction coordinator.

One call, ``TransactionCoordinator.describe``, which answers each id in order with its
state, timeout, start time, producer id and epoch and partitions, or its error
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, TRANSACTIONAL_ID_NOT_FOUND, ...).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.transaction.coordinator import TransactionDescription
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


def _state(d: TransactionDescription) -> dict[str, Any]:
    if d.error_code:
        # Kafka leaves an error's other fields at its schema's defaults: zeros.
        return {"error_code": d.error_code, "transactional_id": d.transactional_id,
                "transaction_state": "", "transaction_timeout": 0,
                "transaction_start_time": 0, "producer_id": 0, "producer_epoch": 0,
                "topics": []}
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
    # As Kafka: Describe on each TransactionalId (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # for it), and a transaction's topics the caller may not Describe are left out.
    ids = list(request.transactional_ids)
    refused = ctx.denied(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, ids)
    found = {d.transactional_id: d for d in ctx.services.transaction_coordinator.describe(
        [i for i in ids if i not in refused])}
    states = []
    for i in ids:
        if i in refused:
            states.append(_state(TransactionDescription(
                i, int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))))
            continue
        d = found[i]
        if d.topics:
            hidden = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, list(d.topics))
            if hidden:
                d = dataclasses.replace(d, topics={t: ps for t, ps in d.topics.items()
                                                   if t not in hidden})
        states.append(_state(d))
    return ctx.respond({"throttle_time": 0, "transaction_states": states})
