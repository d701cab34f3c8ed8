"""OffsetForLeaderEpoch (api 23): where a leader epoch ends on this partition's leader.

For each partition: the largest leader epoch <= the requested one that the leader's
leader-epoch-checkpoint knows, and its end offset (the start of the next epoch, or the log
end offset for the latest) -- undefined (-1, -1) when the leader knows no such epoch.
Followers ask it before truncating (klog/daemon/replica_fetcher.py); consumers ask it to
detect log truncation after a leader change (KIP-320). As Kafka, the answer comes from the
leader only: the current leader epoch the request names is checked first (FENCED_ /
UNKNOWN_LEADER_EPOCH), then leadership (NOT_LEADER_OR_FOLLOWER), and an unknown partition
is UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from klog.daemon.handlers import CLUSTER_ACTION, Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    rm = ctx.services.replica_manager
    # Followers have ClusterAction; consumers (KIP-320) need Describe on the topic.
    denied = set() if ctx.authorize(*CLUSTER_ACTION) else ctx.denied(
        AclOperation.DESCRIBE, ResourceType.TOPIC, [t.topic for t in request.topics])
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            if topic.topic in denied:
                error, epoch, end = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), -1, -1
            else:
                error, epoch, end = rm.last_offset_for_leader_epoch(
                    topic.topic, p.partition, getattr(p, "current_leader_epoch", -1),
                    p.leader_epoch)
            parts.append({"error_code": error, "partition": p.partition,
                          "leader_epoch": epoch, "end_offset": end})
        topics.append({"topic": topic.topic, "partitions": parts})
    return ctx.respond({"throttle_time": 0, "topics": topics})
