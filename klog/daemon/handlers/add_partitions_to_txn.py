"""AddPartitionsToTxn (v0-v3): partitions join a producer's transaction.

As Kafka's KafkaApis: a partition the metadata does not know fails the whole request
(UNKNOWN_TOPIC_OR_PARTITION for it, OPERATION_NOT_ATTEMPTED for the others); otherwise one
call, ``TransactionCoordinator.add_partitions``, whose one error answers every partition.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2. (v4+, KIP-890's batched broker
verification, is not advertised.)
"""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    txn_id = request.v3_and_below_transactional_id
    wanted: dict[tuple[str, int], None] = {}
    for topic in request.v3_and_below_topics:
        for partition in topic.partitions:
            wanted[(topic.name, int(partition))] = None
    cache = ctx.services.metadata_cache
    unknown = {tp for tp in wanted if cache.partition_state(*tp) is None}
    if unknown:
        errors = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                  else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted}
    else:
        error = await ctx.services.transaction_coordinator.add_partitions(
            txn_id, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
            wanted)
        if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
            error = ErrorCode.INVALID_PRODUCER_EPOCH
        errors = dict.fromkeys(wanted, error)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": int(code)})
    return ctx.respond({
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {"name": topic, "results_by_partition": parts} for topic, parts in by_topic.items()
        ],
    })
