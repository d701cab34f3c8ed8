"""AddOffsetsToTxn (v0-v3): a consumer group's offsets join a producer's transaction.

As Kafka: the group's ``__consumer_offsets`` partition is added to the transaction
(``TransactionCoordinator.add_partitions``), so that the markers reach it and its
transactional offset commits become visible (or are dropped) with them. PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH before v2.
"""

from __future__ import annotations

from klog.daemon.group.metadata_manager import OFFSETS_TOPIC
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    services = ctx.services
    partition = services.group_manager.partition_for(request.group_id)
    error = await services.transaction_coordinator.add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch,
        {(OFFSETS_TOPIC, partition)})
    if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        error = ErrorCode.INVALID_PRODUCER_EPOCH
    return ctx.respond({"throttle_time": 0, "error_code": int(error)})
