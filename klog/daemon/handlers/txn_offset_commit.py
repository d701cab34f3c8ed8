"""TxnOffsetCommit (v0-v4): a transaction's offset commits for a consumer group.

As Kafka's KafkaApis: a partition of a topic this broker's metadata does not know gets
UNKNOWN_TOPIC_OR_PARTITION; the rest go to the group coordinator
(``GroupCoordinator.commit_txn_offsets``), which keeps them pending until the transaction's
marker reaches the group's ``__consumer_offsets`` partition. The commit timestamp is now;
v2+ carry the leader epoch, v3+ the member id, generation and group instance id (KIP-447:
checked when given). A null metadata string is stored as "". While the broker verifies
transactions (KIP-890), the group's offsets partition must be in the producer's ongoing
transaction (its AddOffsetsToTxn): a late commit of an ended transaction is
INVALID_TXN_STATE, TRANSACTION_ABORTABLE from v4 (whose clients understand it).

Authorization, as Kafka: Write on the TransactionalId (else every partition answers
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then Read on the group (else
GROUP_AUTHORIZATION_FAILED), then Read on each topic (TOPIC_AUTHORIZATION_FAILED for its
partitions).
"""

from __future__ import annotations

import time
from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.handlers.offset_commit import offsets_to_commit
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode

#: TxnOffsetCommit v4 (KIP-890): the client understands TRANSACTION_ABORTABLE.
FIRST_ABORTABLE_VERSION = 4


async def handle(ctx: RequestContext, request: Request) -> Response:
    now = int(time.time() * 1000)
    refusal: ErrorCode | None = None
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                         request.transactional_id):
        refusal = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        refusal = ErrorCode.GROUP_AUTHORIZATION_FAILED
    order, errors, offsets = offsets_to_commit(ctx, request, refusal, now, None)
    if offsets:
        errors.update(await ctx.services.group_coordinator.commit_txn_offsets(
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            getattr(request, "generation_id", -1),
            getattr(request, "member_id", ""),
            getattr(request, "group_instance_id", None),
            offsets,
            request.transactional_id,
            ctx.api_version >= FIRST_ABORTABLE_VERSION,
        ))
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in dict.fromkeys(order):
        topics.setdefault(tp[0], []).append(
            {"partition_index": tp[1], "error_code": int(errors[tp])})
    return ctx.respond({"throttle_time": 0, "topics": [
        {"name": name, "partitions": parts} for name, parts in topics.items()]})
