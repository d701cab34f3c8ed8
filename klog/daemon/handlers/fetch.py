"""Fetch: record data for consumers (and, in cluster mode, followers), long-polled.

Decode, one call, encode: ``ReplicaManager.fetch_messages`` reads, records a follower's
position, applies the replication throttle and, with less than min_bytes, waits in its
fetch purgatory (up to max_wait_ms) for enough data (klog/daemon/replica_manager.py,
klog/daemon/delayed.py). The response is encoded by ``protocol.fetch`` with each
partition's record data left as the segment's file region, which the connection sends
with sendfile. The request's max_bytes is bounded by the broker's fetch.max.bytes.

A fetch with a replica id >= 0 is a follower's (klog/daemon/replica_fetcher.py): it reads
up to the log end offset instead of the high watermark (the last stable offset under
read_committed, for consumers).

Fetch v0-v3 come from consumers that cannot read message format v2 (Kafka 0.9/0.10): their
records are down-converted to v0 (Fetch v0-v1) or v1 (v2-v3) by
``ReplicaManager.down_convert``; from v4 on the file regions go out as they are (sendfile).

Fetch sessions (KIP-227, v7+): a request with session epoch -1 and no session (klog's
replica fetcher and most clients) is a plain full fetch and skips the session cache; any
other goes through ``FetchSessionCache.new_context`` (klog/daemon/fetch_session.py), which
creates, continues or closes the session, names the partitions to read (for an
incremental fetch: all of the session's) and, after the read, which of them the response
includes and the session id it carries. Session errors (FETCH_SESSION_ID_NOT_FOUND,
INVALID_FETCH_SESSION_EPOCH) answer with no partitions, as Kafka.

A consumer with a consumer_byte_rate quota (klog/daemon/quotas.py) is metered by the bytes
of its responses; over the quota it gets Kafka's throttled response -- no partitions, the
throttle time -- and the connection holds its next request for that time (KIP-219); its
max_bytes is bounded by what the quota allows in a whole window, as Kafka bounds it.
"""

from __future__ import annotations

from typing import Any

from klog.daemon.delayed import FetchKey, FetchParams
from klog.daemon.handlers import CLUSTER_ACTION, Request, RequestContext, Response
from klog.daemon.partition import FetchIsolation
from klog.daemon.quotas import ClientQuotaManager
from klog.daemon.replica_manager import FetchResult
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode
from klog.protocol.fetch import FetchPartitionData, FetchTopicData, encode_fetch_response
from klog.protocol.records.convert import down_convert_magic

# Module constants: an enum member read through its class costs more, once per fetch.
_LOG_END = FetchIsolation.LOG_END
_HW = FetchIsolation.HIGH_WATERMARK
_TXN_COMMITTED = FetchIsolation.TXN_COMMITTED
_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
_NONE_DENIED: frozenset[str] = frozenset()
# Fetch v0-v3: the message format each reads (0 or 1), as Kafka picks it.
LEGACY_MAGIC = {v: down_convert_magic(v) or 0 for v in range(4)}


async def handle(ctx: RequestContext, request: Request) -> Response:
    version = ctx.api_version
    wanted: list[FetchKey] = []
    for topic in request.topics:
        for p in topic.partitions:
            wanted.append((topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes,
                           getattr(p, "current_leader_epoch", -1)))
    services = ctx.services
    replica_id = request.replica_id
    session = None
    if version >= 7 and (request.session_epoch != -1 or request.session_id != 0):
        session = services.fetch_sessions.new_context(
            request.session_id, request.session_epoch, wanted,
            [(t.topic, p) for t in request.forgotten_topics_data for p in t.partitions],
            privileged=replica_id >= 0)
        if session.error_code:
            return encode_fetch_response(version, [], error_code=session.error_code,
                                         session_id=0)
        wanted = session.wanted
    if replica_id >= 0:
        isolation = _LOG_END
    else:
        isolation = _TXN_COMMITTED if getattr(request, "isolation_level", 0) == 1 else _HW
    max_bytes = min(getattr(request, "max_bytes", 2**31 - 1),
                    services.config.current.fetch_max_bytes)
    quotas = services.quotas
    if quotas is not None and quotas.fetch.active and replica_id < 0:
        # Kafka: a consumer's fetch takes at most what its quota allows in a whole window.
        window_bytes = quotas.fetch.max_value_in_window(ctx.principal.name, ctx.client_id)
        if window_bytes is not None:
            max_bytes = min(max_bytes, max(1, int(window_bytes)))
    # Positional: a third of the keyword call's cost, once per fetch.
    params = FetchParams(
        replica_id,
        as_millis(request.max_wait),
        request.min_bytes,
        max_bytes,
        isolation,
    )
    rm = services.replica_manager
    denied = _denied(ctx, request)
    if denied:
        allowed = [key for key in wanted if key[0] not in denied]
        got = dict(zip(allowed, await rm.fetch_messages(params, allowed), strict=True)
                   ) if allowed else {}
        results = [got.get(key) or FetchResult(_TOPIC_AUTHORIZATION_FAILED) for key in wanted]
    else:
        results = await rm.fetch_messages(params, wanted)
    if quotas is not None and quotas.fetch.active and replica_id < 0:
        throttle_ms = _metered(ctx, quotas.fetch, results)
        if throttle_ms:
            return encode_fetch_response(version, [], throttle_time_ms=throttle_ms)
    if session is not None:
        session_id, keep = session.respond(
            [(r.error_code, r.high_watermark, r.log_start_offset, r.size) for r in results])
        return _encode(version, [wanted[i] for i in keep], [results[i] for i in keep],
                       session_id=session_id)
    if version <= 3 and replica_id < 0:
        converted = await rm.down_convert(wanted, results, LEGACY_MAGIC[version])
        return _encode(version, wanted, results, converted)
    return _encode(version, wanted, results)


def _metered(ctx: RequestContext, quota: ClientQuotaManager, results: list[FetchResult]
             ) -> int:
    """consumer_byte_rate (Kafka's handleFetchRequest): the response's record bytes count
    against the consumer's rate; over its quota they are taken back and the consumer gets
    an empty response saying how long it is throttled, and the connection holds its next
    request that long (KIP-219). Returns the throttle time (0: answer as usual)."""
    size = sum(r.size for r in results)
    user, client_id = ctx.principal.name, ctx.client_id
    throttle_ms = quota.record(user, client_id, size)
    if throttle_ms:
        quota.unrecord(user, client_id, size)
        ctx.throttle(throttle_ms)
    return throttle_ms


def _denied(ctx: RequestContext, request: Request) -> set[str] | frozenset[str]:
    """The topics this fetch may not read, as Kafka's KafkaApis: a follower's fetch (a
    replica id) needs ClusterAction, or every partition is TOPIC_AUTHORIZATION_FAILED --
    a client forging a replica id reads nothing and moves no follower position; a
    consumer needs Read on each topic."""
    if ctx.services.authorizer is None:  # the common case: nothing to build
        return _NONE_DENIED
    if request.replica_id >= 0:
        return set() if ctx.authorize(*CLUSTER_ACTION) else {t.topic for t in request.topics}
    return ctx.denied(AclOperation.READ, ResourceType.TOPIC, [t.topic for t in request.topics])


def _encode(version: int, wanted: list[FetchKey], results: list[FetchResult],
            converted: dict[int, bytes] | None = None, session_id: int = 0) -> list[Any]:
    """The response; ``converted``: down-converted records by index into ``results``
    (Fetch v0-v3), which replace the regions."""
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
    if converted is not None:
        parts = [p for t in topics for p in t.partitions]
        for i, part in enumerate(parts):
            part.records = converted.get(i, b"")
    return encode_fetch_response(version, topics, session_id=session_id)
