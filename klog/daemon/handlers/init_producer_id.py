"""InitProducerId: a producer id and epoch for an idempotent producer.

What Kafka 3.x answers, and so what klog answers:

- ``producer_id`` and ``producer_epoch`` (v3+) must both be -1 or both be set, else
  INVALID_REQUEST (Kafka's KafkaApis checks this before anything else).
- No transactional id (an idempotent, non-transactional producer): a NEW producer id from
  the broker's ProducerIdManager, with epoch 0. Kafka's transaction coordinator "blindly
  accepts" such a request: a producer id and epoch given in it (the KIP-360 bump that
  librdkafka sends after a sequence error) are not checked against anything and not
  bumped; the producer simply starts over with a fresh id, whose sequences begin at 0.
  Epoch bumps and fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH from InitProducerId)
  happen only for transactional ids, whose epochs the transaction coordinator keeps; for
  idempotent producers the partition leaders enforce epochs on produce (see
  klog.storage.producer_state).
- A transactional id: the transaction coordinator's ``init_producer_id`` (epoch bump,
  fencing, KIP-360 recovery with the producer id and epoch of v3+, the timeout checked
  against transaction.max.timeout.ms). An empty id is INVALID_REQUEST. PRODUCER_FENCED is
  answered as INVALID_PRODUCER_EPOCH before v4, which predates it (Kafka's KafkaApis).

Errors answer producer_id -1 and producer_epoch -1, as Kafka's initTransactionError.
When no block of ids can be had (metastore unreachable) the answer is the retriable
COORDINATOR_LOAD_IN_PROGRESS, as Kafka's KRaft-mode manager answers without a block.
"""

from __future__ import annotations

import logging
from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


async def handle(ctx: RequestContext, request: Request) -> Response:
    producer_id = getattr(request, "producer_id", NO_PRODUCER_ID)  # v3+
    producer_epoch = getattr(request, "producer_epoch", NO_PRODUCER_EPOCH)
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return _error(ctx, ErrorCode.INVALID_REQUEST)
    transactional_id = request.transactional_id
    if transactional_id is not None:
        if transactional_id == "":
            return _error(ctx, ErrorCode.INVALID_REQUEST)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        result = await ctx.services.transaction_coordinator.init_producer_id(
            transactional_id, as_millis(request.transaction_timeout), expected)
        if result.error is not ErrorCode.NONE:
            error = result.error
            if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
                error = ErrorCode.INVALID_PRODUCER_EPOCH
            return _error(ctx, error)
        return ctx.respond({
            "throttle_time": 0,
            "error_code": 0,
            "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch,
        })
    try:
        new_id = await ctx.services.producer_ids.generate_producer_id()
    except KafkaError as exc:
        log.warning("InitProducerId from %s: %s", ctx.header.client_id, exc)
        return _error(ctx, exc.error_code)
    return ctx.respond({
        "throttle_time": 0,
        "error_code": 0,
        "producer_id": new_id,
        "producer_epoch": 0,
    })


def _error(ctx: RequestContext, code: ErrorCode) -> Any:
    return ctx.respond({
        "throttle_time": 0,
        "error_code": int(code),
        "producer_id": NO_PRODUCER_ID,
        "producer_epoch": NO_PRODUCER_EPOCH,
    })
