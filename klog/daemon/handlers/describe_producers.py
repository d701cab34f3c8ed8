"""DescribeProducers (v0): the producer state of partitions led here (KIP-664).

One call per partition to ``ReplicaManager.active_producers``: each producer's id, epoch,
last sequence, last timestamp, coordinator epoch and the first offset of its open
transaction (-1: none). As Kafka, any replica answers from its local log (the admin client
asks the leader unless told a broker); a partition not hosted here is
NOT_LEADER_OR_FOLLOWER when the metadata knows it (the client looks elsewhere), else
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.partition import ProducerStateInfo
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    rm = ctx.services.replica_manager
    cache = ctx.services.metadata_cache
    topics = []
    # As Kafka: Read on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions.
    denied = ctx.denied(AclOperation.READ, ResourceType.TOPIC, [t.name for t in request.topics])
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            producers: list[ProducerStateInfo] = []
            if topic.name in denied:
                error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                error, producers = rm.active_producers(topic.name, index)
            if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION \
                    and cache.partition_state(topic.name, index) is not None:
                error = ErrorCode.NOT_LEADER_OR_FOLLOWER
            partitions.append({
                "partition_index": index,
                "error_code": int(error),
                # As Kafka: a topic refused or unknown says so; a partition of a known
                # topic that is not here has no message.
                "error_message": f"cannot describe the producers of {topic.name}: "
                                 f"{error.name}" if error != ErrorCode.NONE and (
                    topic.name in denied or not cache.contains_topic(topic.name)) else None,
                "active_producers": [{
                    "producer_id": p.producer_id,
                    "producer_epoch": p.producer_epoch,
                    "last_sequence": p.last_sequence,
                    "last_timestamp": p.last_timestamp,
                    "coordinator_epoch": p.coordinator_epoch,
                    "current_txn_start_offset": p.current_txn_start_offset,
                } for p in producers],
            })
        topics.append({"name": topic.name, "partitions": partitions})
    return ctx.respond({"throttle_time": 0, "topics": topics})
