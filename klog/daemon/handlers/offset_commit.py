"""OffsetCommit (v0-v8): commit a group's offsets, checked against its membership.

As Kafka's KafkaApis: a partition of a topic this broker's metadata does not know gets
UNKNOWN_TOPIC_OR_PARTITION; the commit timestamp is now; v2-v4's retention_time (-1 =
the broker's default) sets an explicit expire timestamp; v6+ carry the leader epoch (-1 =
none); a null metadata string is stored as "". v0 has no generation or member (a
simple commit, as generation -1 and member ""; Kafka 3.x stored v0 commits in ZooKeeper,
klog keeps them with the others, so every version reads them); v1 may name a commit
timestamp per partition (-1: now). Metadata longer than
offset.metadata.max.bytes is OFFSET_METADATA_TOO_LARGE (the coordinator checks it).
The response is encoded by hand (klog/protocol/offset_commit.py): for the common
one-partition commit kio's schema walk cost more than the commit.
"""

from __future__ import annotations

import time

from klog.daemon.group.metadata_manager import OffsetAndMetadata
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode
from klog.protocol.offset_commit import encode_offset_commit_response

DEFAULT_RETENTION_TIME = -1

TopicPartition = tuple[str, int]


async def handle(ctx: RequestContext, request: Request) -> Response:
    coordinator = ctx.services.group_coordinator
    now = int(time.time() * 1000)
    retention = getattr(request, "retention_time", None)
    retention_ms = DEFAULT_RETENTION_TIME if retention is None else as_millis(retention)
    expire = None if retention_ms == DEFAULT_RETENTION_TIME else now + retention_ms
    group_denied = not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id)
    order, errors, offsets = offsets_to_commit(
        ctx, request, ErrorCode.GROUP_AUTHORIZATION_FAILED if group_denied else None, now,
        expire)
    if offsets:
        errors.update(await coordinator.commit_offsets(
            request.group_id,
            getattr(request, "generation_id_or_member_epoch", -1),  # v1+
            getattr(request, "member_id", ""),  # v1+
            getattr(request, "group_instance_id", None),
            offsets,
        ))
    topics: dict[str, list[tuple[int, int]]] = {}
    for tp in dict.fromkeys(order):
        topics.setdefault(tp[0], []).append((tp[1], int(errors[tp])))
    return [encode_offset_commit_response(ctx.api_version, list(topics.items()))]


def offsets_to_commit(ctx: RequestContext, request: Request, refusal: ErrorCode | None,
                      now: int, expire: int | None
                      ) -> tuple[list[TopicPartition], dict[TopicPartition, ErrorCode],
                                 dict[TopicPartition, OffsetAndMetadata]]:
    """The partitions of an OffsetCommit or TxnOffsetCommit ``request`` in order, the
    errors of those refused (``refusal`` for all, when given, else Read on the topic, then
    a partition this broker's metadata does not know) and the offsets of the others."""
    cache = ctx.services.metadata_cache
    errors: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    order: list[TopicPartition] = []
    denied = ctx.denied(AclOperation.READ, ResourceType.TOPIC, [t.name for t in request.topics])
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            order.append(tp)
            if refusal is not None:
                errors[tp] = refusal
                continue
            if topic.name in denied:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            if cache.partition_state(topic.name, p.partition_index) is None:
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offsets[tp] = OffsetAndMetadata(
                offset=p.committed_offset,
                leader_epoch=getattr(p, "committed_leader_epoch", -1),
                metadata=p.committed_metadata or "",
                commit_timestamp=_commit_timestamp(p, now),
                expire_timestamp=expire,
            )
    return order, errors, offsets


def _commit_timestamp(partition: object, now: int) -> int:
    """v1's own commit timestamp when the client gave one (-1: none), else now (a
    TxnOffsetCommit's partitions carry none)."""
    given: int = getattr(partition, "commit_timestamp", -1)
    return now if given == -1 else given
