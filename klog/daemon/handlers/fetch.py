"""Fetch: record data for consumers (and, in cluster mode, followers), long-polled.

Reads go through ReplicaManager; the response is encoded by ``protocol.fetch`` with each
partition's record data left as the segment's file region, which the connection sends with
sendfile. When less than min_bytes is available the request waits in the fetch purgatory
(up to max_wait_ms) and is completed early by a produce that brings enough new data.

A fetch with a replica id >= 0 is a follower's (klog/daemon/replica_fetcher.py): it reads up
to the log end offset instead of the high watermark, and its fetch offset is recorded as that
follower's position on the leader (which may grow the ISR and move the high watermark). Only
the first and the final read record it; the long poll's re-checks just read. The leader epoch
a request names is checked first: FENCED_LEADER_EPOCH when older than the partition's,
UNKNOWN_LEADER_EPOCH when newer; then NOT_LEADER_OR_FOLLOWER off the leader.

Replication throttles (klog/daemon/replication_quota.py, Kafka's shouldLeaderThrottle): for
a follower out of the ISR, a partition the leader quota throttles gets no records while that
quota is exceeded (the follower's position is still recorded), and it does not count
towards min_bytes while the fetch waits (which ends as soon as the quota allows them
again, at most max_wait); the throttled partitions' bytes of the final
response are recorded against the quota. Consumers' fetches never look at the quota, and a
follower's only test ``quota.throttled`` (empty unless a topic is throttled) once per read.

Fetch sessions (KIP-227) are declined, which the protocol allows: every response carries
session id 0, so clients keep sending full fetch requests; an incremental fetch naming a
session gets FETCH_SESSION_ID_NOT_FOUND, which makes clients start over with a full one.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from klog.daemon.delayed import DelayedFetch
from klog.daemon.handlers import RequestContext
from klog.daemon.replica_manager import FetchResult
from klog.daemon.replication_quota import ReplicationQuotaManager
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode
from klog.protocol.fetch import FetchPartitionData, FetchTopicData, encode_fetch_response

FetchKey = tuple[str, int, int, int, int]  # topic, partition, offset, max bytes, leader epoch


async def handle(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    session_id = getattr(request, "session_id", 0)
    if session_id != 0:
        return encode_fetch_response(version, [], error_code=int(
            ErrorCode.FETCH_SESSION_ID_NOT_FOUND), session_id=0)
    wanted: list[FetchKey] = []
    for topic in request.topics:
        for p in topic.partitions:
            wanted.append((topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                           getattr(p, "current_leader_epoch", -1)))
    broker = ctx.broker
    max_bytes = min(getattr(request, "max_bytes", 2**31 - 1), broker.config.fetch_max_bytes)
    committed = getattr(request, "isolation_level", 0) == 1
    replica_id = request.replica_id
    from_follower = replica_id >= 0
    quota: ReplicationQuotaManager | None = None
    if from_follower:
        quotas = getattr(broker, "replication_quotas", None)
        if quotas is not None and quotas.leader.throttled:
            quota = quotas.leader
    results = _read_all(broker, wanted, max_bytes, committed, from_follower, replica_id,
                        quota)
    max_wait = as_millis(request.max_wait)
    if quota is not None and max_wait > 0:
        max_wait = _throttled_wait(broker, quota, wanted, replica_id, max_wait)
    if max_wait > 0 and wanted and not _satisfied(results, request.min_bytes):
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def enough() -> bool:
            return _satisfied(_read_all(broker, wanted, max_bytes, committed, from_follower,
                                        -1, quota, replica_id), request.min_bytes)

        op = DelayedFetch(max_wait, enough, done)
        assert broker.fetch_purgatory is not None  # set in Broker.start(), before serving
        broker.fetch_purgatory.try_complete_else_watch(op, {(k[0], k[1]) for k in wanted})
        await done
        results = _read_all(broker, wanted, max_bytes, committed, from_follower, replica_id,
                            quota)
    if quota is not None:
        throttled_bytes = sum(r.size for k, r in zip(wanted, results, strict=True)
                              if r.size and quota.is_throttled(k[0], k[1]))
        quota.record(throttled_bytes)
    return _encode(version, wanted, results)


def _throttled_wait(broker: Any, quota: ReplicationQuotaManager, wanted: list[FetchKey],
                    replica_id: int, max_wait: int) -> int:
    """A follower fetch with partitions held back by the leader quota waits only until the
    quota allows them again (not the full max_wait, which would leave the link idle and the
    rate below the bound). Fetches holding nothing back (an in-sync follower's) keep their
    max_wait."""
    wait_s = quota.throttle_time()
    if wait_s <= 0:
        return max_wait
    partitions = broker.replica_manager.partitions
    for topic, partition, _o, _m, _e in wanted:
        if quota.is_throttled(topic, partition):
            p = partitions.get((topic, partition))
            if p is not None and replica_id not in p.isr:
                return max(1, min(max_wait, math.ceil(wait_s * 1000)))
    return max_wait


def _read_all(broker: Any, wanted: list[FetchKey], max_bytes: int, committed: bool,
              from_follower: bool, replica_id: int = -1,
              quota: ReplicationQuotaManager | None = None,
              follower_id: int = -1) -> list[FetchResult]:
    """Read every partition wanted, within max_bytes. ``quota`` (follower fetches, when a
    topic is throttled) holds back throttled partitions for an out-of-sync ``follower_id``
    (defaults to ``replica_id``; the long poll's re-checks pass it without recording)."""
    rm = broker.replica_manager
    remaining = max_bytes
    min_one = True
    out = []
    exceeded: bool | None = None  # asked once per read, when a throttled partition comes up
    if follower_id < 0:
        follower_id = replica_id
    for topic, partition, offset, part_max, epoch in wanted:
        limit = min(part_max, remaining) if remaining > 0 else 0
        held = False
        if quota is not None and quota.is_throttled(topic, partition):
            if exceeded is None:
                exceeded = quota.is_quota_exceeded()
            if exceeded:
                p = rm.partitions.get((topic, partition))
                # Kafka answers with no records; the follower's position still counts.
                held = p is None or follower_id not in p.isr
        if held or (limit <= 0 and not min_one):
            r = rm.read(topic, partition, offset, 0, isolation_committed=committed,
                        from_follower=from_follower, min_one_message=False,
                        current_leader_epoch=epoch, replica_id=replica_id)
        else:
            r = rm.read(topic, partition, offset, max(limit, 0), isolation_committed=committed,
                        from_follower=from_follower, min_one_message=min_one,
                        current_leader_epoch=epoch, replica_id=replica_id)
        if r.size:
            min_one = False
            remaining -= r.size
        out.append(r)
    return out


def _satisfied(results: list[FetchResult], min_bytes: int) -> bool:
    total = 0
    for r in results:
        if r.error_code:
            return True
        total += r.size
    return total >= max(min_bytes, 1)


def _encode(version: int, wanted: list[FetchKey], results: list[FetchResult]) -> list[Any]:
    topics: list[FetchTopicData] = []
    for (topic, partition, _o, _m, _e), r in zip(wanted, results, strict=True):
        if not topics or topics[-1].topic != topic:
            topics.append(FetchTopicData(topic))
        records: Any = r.data if r.size else b""
        topics[-1].partitions.append(FetchPartitionData(
            partition_index=partition,
            error_code=r.error_code,
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset,
            log_start_offset=r.log_start_offset,
            aborted_transactions=r.aborted_transactions,
            records=records,
        ))
    return encode_fetch_response(version, topics)
