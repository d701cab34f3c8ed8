"""AddPartitionsToTxn: partitions join a producer's transaction (v0-v3, producers), or
a batch of transactions is added to or verified (v4-v5, brokers: KIP-890).

v0-v3, as Kafka's KafkaApis: Write on the transactional id, then on each topic; a
partition the metadata does not know fails the whole request (UNKNOWN_TOPIC_OR_PARTITION
for it, OPERATION_NOT_ATTEMPTED for the others); otherwise one call,
``TransactionCoordinator.add_partitions``, whose one error answers every partition.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v2.

v4-v5 come from brokers only (ClusterAction, else a top-level
CLUSTER_AUTHORIZATION_FAILED and nothing done): per transaction, unknown partitions fail
it as above; with ``verify_only`` the coordinator says of each partition whether it is in
the producer's ongoing transaction (``verify_partitions_in_transaction``: NONE or
TRANSACTION_ABORTABLE, or one error for all), else the partitions are added. v5 differs
only in that its callers understand TRANSACTION_ABORTABLE, which Kafka 3.9 answers a
verification with in both.
"""

from __future__ import annotations

import asyncio
from typing import Any

from klog.daemon.handlers import CLUSTER_ACTION, Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]
#: The first version of the brokers' batched form (KIP-890).
FIRST_BROKER_VERSION = 4


async def handle(ctx: RequestContext, request: Request) -> Response:
    if ctx.api_version >= FIRST_BROKER_VERSION:
        return await _from_broker(ctx, request)
    txn_id = request.v3_and_below_transactional_id
    wanted = _partitions(request.v3_and_below_topics)
    # As Kafka's KafkaApis: Write on the transactional id, then on each topic.
    denied = ctx.denied(AclOperation.WRITE, ResourceType.TOPIC, {t for t, _ in wanted})
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        errors = dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        errors = _unknown(ctx, wanted, denied) or {}
        if not errors:
            error = await ctx.services.transaction_coordinator.add_partitions(
                txn_id, request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch, wanted)
            if error is ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
                error = ErrorCode.INVALID_PRODUCER_EPOCH
            errors = dict.fromkeys(wanted, error)
    return ctx.respond({"throttle_time": 0, "results_by_topic_v3_and_below": _results(errors)})


async def _from_broker(ctx: RequestContext, request: Request) -> Response:
    if not ctx.authorize(*CLUSTER_ACTION):
        return ctx.respond({"throttle_time": 0, "results_by_transaction": [],
                            "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)})
    coordinator = ctx.services.transaction_coordinator

    async def one(txn: Any) -> dict[str, Any]:
        wanted = _partitions(txn.topics)
        errors = _unknown(ctx, wanted, set())
        if errors is None:
            if txn.verify_only:
                errors = coordinator.verify_partitions_in_transaction(
                    txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted)
            else:
                errors = dict.fromkeys(wanted, await coordinator.add_partitions(
                    txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted))
        return {"transactional_id": txn.transactional_id, "topic_results": _results(errors)}

    results = await asyncio.gather(*(one(txn) for txn in request.transactions))
    return ctx.respond({"throttle_time": 0, "error_code": 0,
                        "results_by_transaction": list(results)})


def _partitions(topics: Any) -> dict[TopicPartition, None]:
    return {(topic.name, int(partition)): None
            for topic in topics for partition in topic.partitions}


def _unknown(ctx: RequestContext, wanted: dict[TopicPartition, None], denied: set[str]
             ) -> dict[TopicPartition, ErrorCode] | None:
    """Kafka's refusal of the whole transaction when a topic is denied or a partition
    unknown (OPERATION_NOT_ATTEMPTED for the rest); None when every one may go on."""
    cache = ctx.services.metadata_cache
    unknown = {tp for tp in wanted if cache.partition_state(*tp) is None}
    if not denied and not unknown:
        return None
    return {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
            else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted}


def _results(errors: dict[TopicPartition, ErrorCode]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in errors.items():
        by_topic.setdefault(topic, []).append(
            {"partition_index": partition, "partition_error_code": int(code)})
    return [{"name": topic, "results_by_partition": parts} for topic, parts in by_topic.items()]
