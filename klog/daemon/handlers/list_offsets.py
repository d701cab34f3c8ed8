"""ListOffsets: earliest (-2), latest (-1), max timestamp (-3), or by timestamp.

"Latest" is the high watermark for read_uncommitted and the last stable offset for
read_committed, as consumers expect; a timestamp is looked up through the time index and
answered with the exact record (``Partition.fetch_offset_for_timestamp``).

As Kafka's ReplicaManager.fetchOffset: a partition named twice in one request is answered
once, INVALID_REQUEST; a special timestamp the request's version does not know (max
timestamp below v7, tiered storage's -4 and -5, any other negative) is UNSUPPORTED_VERSION;
a current leader epoch other than -1 is checked (a negative one is fenced).
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.partition import NotLeaderOrFollowerError
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode, KafkaError

EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3
#: The special timestamps and the first version that knows each (Kafka's
#: timestampMinSupportedVersion): -4 earliest local and -5 latest tiered are tiered
#: storage's, which klog does not serve at v7.
_FIRST_VERSION = {EARLIEST: 0, LATEST: 0, MAX_TIMESTAMP: 7, -4: 8, -5: 9}


def _unsupported(timestamp: int, version: int) -> bool:
    return timestamp < 0 and version < _FIRST_VERSION.get(timestamp, 1 << 15)


async def handle(ctx: RequestContext, request: Request) -> Response:
    rm = ctx.services.replica_manager
    committed = getattr(request, "isolation_level", 0) == 1
    from_follower = request.replica_id >= 0
    denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC,
                        [t.name for t in request.topics])
    seen: set[tuple[str, int]] = set()
    duplicates = {(t.name, p.partition_index) for t in request.topics for p in t.partitions
                  if (t.name, p.partition_index) in seen
                  or seen.add((t.name, p.partition_index))}  # type: ignore[func-returns-value]
    answered: set[tuple[str, int]] = set()
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            out = {"partition_index": p.partition_index, "error_code": 0,
                   "timestamp": -1, "offset": -1, "leader_epoch": -1}
            if ctx.api_version == 0:
                out["old_style_offsets"] = []
            if (topic.name, p.partition_index) in duplicates:
                if (topic.name, p.partition_index) not in answered:
                    answered.add((topic.name, p.partition_index))
                    parts.append({**out, "error_code": int(ErrorCode.INVALID_REQUEST)})
                continue
            if topic.name in denied:
                parts.append({**out, "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)})
                continue
            if _unsupported(p.timestamp, ctx.api_version):
                parts.append({**out, "error_code": int(ErrorCode.UNSUPPORTED_VERSION)})
                continue
            try:
                partition = rm.leader_partition(topic.name, p.partition_index)
                partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1),
                                             only_minus_one_absent=True)
                ts = p.timestamp
                if ts == LATEST:
                    if from_follower:
                        offset = partition.log_end_offset
                    elif committed:
                        offset = partition.last_stable_offset
                    else:
                        offset = partition.high_watermark
                    # As Kafka: the partition's current leader epoch.
                    out.update(offset=offset, leader_epoch=partition.leader_epoch)
                else:
                    found = partition.fetch_offset_for_timestamp(ts)
                    hw = partition.high_watermark
                    if found is not None and (found.offset < hw or ts == EARLIEST
                                              or from_follower):
                        out.update(timestamp=found.timestamp if ts != EARLIEST else -1,
                                   offset=found.offset,
                                   leader_epoch=found.leader_epoch
                                   if found.leader_epoch is not None else -1)
                if ctx.api_version == 0:
                    # v0 asks for up to max_num_offsets offsets (Kafka's legacy
                    # fetchOffsetsBefore, which also listed segment bases); klog answers
                    # the one offset later versions answer, or none if 0 were asked for.
                    out["old_style_offsets"] = [out["offset"]] if out["offset"] >= 0 \
                        and p.max_num_offsets > 0 else []
            except NotLeaderOrFollowerError as exc:
                out["error_code"] = int(exc.error_code)
            except KafkaError as exc:
                out["error_code"] = int(exc.error_code)
            if out["error_code"] == 0 and rm.get_partition(topic.name, p.partition_index) \
                    is None:
                out["error_code"] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            parts.append(out)
        topics.append({"name": topic.name, "partitions": parts})
    return ctx.respond({"throttle_time": 0, "topics": topics})
