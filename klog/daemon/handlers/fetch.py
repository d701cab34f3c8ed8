"""Fetch: record data for consumers (and, in cluster mode, followers), long-polled.

Decode, one call, encode: ``ReplicaManager.fetch_messages`` reads, records a follower's
position, applies the replication throttle and, with less than min_bytes, waits in its
fetch purgatory (up to max_wait_ms) for enough data (klog/daemon/replica_manager.py,
klog/daemon/delayed.py). The response is encoded by ``protocol.fetch`` with each
partition's record data left as the segment's file region, which the connection sends
with sendfile. The request's max_bytes is bounded by the broker's fetch.max.bytes.

A fetch with a replica id >= 0 is a follower's (klog/daemon/replica_fetcher.py): it reads
up to the log end offset instead of the high watermark (the last stable offset under
read_committed, for consumers); its log start offsets (v5+) are kept by the leader. v15+
carry the replica id in ReplicaState (KIP-903); ``protocol.fetch.request_replica_id`` reads
either, so a forged id needs ClusterAction whichever field carries it.

Follower fetching (KIP-392): a consumer's v11+ fetch carries its rack (``rack_id``) and may
be answered by a follower, up to the follower's high watermark; a leader with
replica.selector.class set answers a partition whose preferred read replica is another
broker with no records and that broker's id (klog/daemon/replica_selector.py). Fetch v0-v10
from consumers are answered by leaders only, as in Kafka.

Fetch v13+ name topics by id (Kafka 3.9 serves up to v17): the ids are resolved to names
with the metadata cache; an id it does not know answers UNKNOWN_TOPIC_ID for its
partitions (nothing read), and the response names the topics by the ids the request
used. v16+ answers of NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH carry the leader the
metadata cache knows and its endpoint (KIP-951), as Kafka 3.9 does in ZooKeeper mode.

Fetch v0-v3 come from consumers that cannot read message format v2 (Kafka 0.9/0.10): their
records are down-converted to v0 (Fetch v0-v1) or v1 (v2-v3) by
klog/daemon/down_conversion.py, after the read; from v4 on the file regions go out as they
are (sendfile).

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

import uuid
from typing import Any, cast

from klog.daemon.delayed import FetchKey, FetchParams
from klog.daemon.down_conversion import down_convert_fetched
from klog.daemon.fetch_session import SessionKey
from klog.daemon.handlers import CLUSTER_ACTION, Request, RequestContext, Response
from klog.daemon.partition import FetchIsolation
from klog.daemon.quotas import ClientQuotaManager
from klog.daemon.replica_results import FetchResult
from klog.daemon.replica_selector import ClientMetadata
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode
from klog.protocol.fetch import (
    NODE_ENDPOINTS_FROM,
    TOPIC_IDS_FROM,
    ZERO_UUID,
    FetchPartitionData,
    FetchTopicData,
    NodeEndpoint,
    encode_fetch_response,
    request_replica_id,
)
from klog.protocol.records.convert import down_convert_magic

# Module constants: an enum member read through its class costs more, once per fetch.
_LOG_END = FetchIsolation.LOG_END
_HW = FetchIsolation.HIGH_WATERMARK
_TXN_COMMITTED = FetchIsolation.TXN_COMMITTED
_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
_UNKNOWN_TOPIC_ID = int(ErrorCode.UNKNOWN_TOPIC_ID)
_LEADER_MOVED = frozenset({int(ErrorCode.NOT_LEADER_OR_FOLLOWER),
                           int(ErrorCode.FENCED_LEADER_EPOCH)})
# Fetch v5 adds the fetcher's log start offset; v11 the consumer's rack (KIP-392).
LOG_START_OFFSET_FROM = 5
CLIENT_METADATA_FROM = 11
# Fetch v0-v3: the message format each reads (0 or 1), as Kafka picks it.
LEGACY_MAGIC = {v: down_convert_magic(v) or 0 for v in range(4)}


async def handle(ctx: RequestContext, request: Request) -> Response:
    version = ctx.api_version
    by_id = version >= TOPIC_IDS_FROM
    keys: list[SessionKey] = []
    for topic in request.topics:
        # kio reads the zero UUID as None; the zero id names no topic (UNKNOWN_TOPIC_ID)
        name = (topic.topic_id or ZERO_UUID) if by_id else topic.topic
        for p in topic.partitions:
            keys.append((name, p.partition, p.fetch_offset, p.partition_max_bytes,
                         getattr(p, "current_leader_epoch", -1)))
    services = ctx.services
    replica_id = request_replica_id(request)
    client = None
    starts = None
    if replica_id >= 0:
        if version >= LOG_START_OFFSET_FROM:
            # The follower's log start offsets, which the leader keeps for KIP-392.
            starts = _follower_log_starts(ctx, request, by_id)
    elif version >= CLIENT_METADATA_FROM:
        # KIP-392: a consumer's v11+ fetch may be answered by a follower, and its rack
        # picks its preferred read replica.
        client = ClientMetadata(request.rack_id or "", ctx.listener_name)
    session = None
    if version >= 7 and (request.session_epoch != -1 or request.session_id != 0):
        session = services.fetch_sessions.new_context(
            request.session_id, request.session_epoch, keys,
            [((t.topic_id or ZERO_UUID) if by_id else t.topic, p)
             for t in request.forgotten_topics_data for p in t.partitions],
            privileged=replica_id >= 0, uses_topic_ids=by_id)
        if session.error_code:
            return encode_fetch_response(version, [], error_code=session.error_code,
                                         session_id=0)
        keys = session.wanted
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
        client,
        starts,
    )
    rm = services.replica_manager
    # v13+: the topics' names, from the ids (None: an id this broker does not know)
    names = _names(ctx, keys) if by_id else None
    wanted = cast("list[FetchKey]", keys) if names is None else [
        (name or "", *key[1:]) for name, key in zip(names, keys, strict=True)]
    refused = _refused(ctx, replica_id, wanted, names)
    if refused:
        allowed = [key for i, key in enumerate(wanted) if i not in refused]
        got = rm.fetch_messages(params, allowed) if allowed else None
        read = iter(await got if got is not None else ())
        # Kafka answers these before any read: aborted transactions an empty list (v4+)
        results = [FetchResult(refused[i], aborted_transactions=[]) if i in refused
                   else next(read)
                   for i in range(len(wanted))]
    else:
        results = await rm.fetch_messages(params, wanted)
    if quotas is not None and quotas.fetch.active and replica_id < 0:
        throttle_ms = _metered(ctx, quotas.fetch, results)
        if throttle_ms:
            return encode_fetch_response(version, [], throttle_time_ms=throttle_ms)
    leaders = _current_leaders(ctx, wanted, results) if version >= NODE_ENDPOINTS_FROM \
        else None
    if session is not None:
        session_id, keep = session.respond(
            [(r.error_code, r.high_watermark, r.log_start_offset, r.size) for r in results])
        if leaders is not None:
            leaders = ({new: leaders[0][old] for new, old in enumerate(keep)
                        if old in leaders[0]}, leaders[1])
        return _encode(version, [keys[i] for i in keep], [results[i] for i in keep],
                       session_id=session_id, leaders=leaders)
    if version <= 3 and replica_id < 0:
        converted = await down_convert_fetched(wanted, results, LEGACY_MAGIC[version],
                                               rm.topic_config)
        return _encode(version, keys, results, converted)
    return _encode(version, keys, results, leaders=leaders)


def _current_leaders(ctx: RequestContext, wanted: list[FetchKey], results: list[FetchResult]
                     ) -> tuple[dict[int, tuple[int, int]], list[NodeEndpoint]] | None:
    """Fetch v16+ (KIP-951), as Kafka 3.9's handleFetchRequest, ZooKeeper mode too: a
    partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the leader
    and epoch the metadata cache knows (by index into ``results``), and NodeEndpoints
    the leaders' addresses on the request's listener, so the consumer can move without
    a metadata round trip. None when no partition has those errors (the usual case)."""
    moved = [i for i, r in enumerate(results) if r.error_code in _LEADER_MOVED]
    if not moved:
        return None
    cache = ctx.services.metadata_cache
    leaders: dict[int, tuple[int, int]] = {}
    nodes: dict[int, NodeEndpoint] = {}
    for i in moved:
        state = cache.partition_state(wanted[i][0], wanted[i][1])
        leader, epoch = (-1, -1) if state is None else (state.leader, state.leader_epoch)
        leaders[i] = (leader, epoch)
        broker = cache.broker(leader) if leader >= 0 else None
        endpoint = None if broker is None else broker.endpoint(ctx.listener_name)
        if broker is not None and endpoint is not None:
            nodes[leader] = NodeEndpoint(leader, endpoint.host, endpoint.port, broker.rack)
    return leaders, list(nodes.values())


def _follower_log_starts(ctx: RequestContext, request: Request, by_id: bool
                         ) -> dict[tuple[str, int], int]:
    """A follower's log start offset per partition (Fetch v5+), by topic name."""
    out: dict[tuple[str, int], int] = {}
    for topic in request.topics:
        if by_id:
            name = ctx.services.metadata_cache.topic_by_id(topic.topic_id) \
                if topic.topic_id else None
        else:
            name = topic.topic
        if name:
            for p in topic.partitions:
                out[(name, p.partition)] = p.log_start_offset
    return out


def _names(ctx: RequestContext, keys: list[SessionKey]) -> list[str | None]:
    """Fetch v13+: each key's topic name from its id, as Kafka resolves them with the
    metadata cache's topicIdsToNames (an unknown or zero id: None)."""
    by_id = ctx.services.metadata_cache.topic_by_id
    known: dict[Any, str | None] = {}
    out: list[str | None] = []
    for key in keys:
        tid = key[0]
        if tid not in known:
            known[tid] = by_id(tid) if isinstance(tid, uuid.UUID) else None
        out.append(known[tid])
    return out


def _refused(ctx: RequestContext, replica_id: int, wanted: list[FetchKey],
             names: list[str | None] | None) -> dict[int, int]:
    """The partitions answered with an error without reading, by index into ``wanted``:
    as Kafka's handleFetchRequest, a follower's fetch (a replica id) needs ClusterAction,
    or every partition is TOPIC_AUTHORIZATION_FAILED -- a client forging a replica id
    (the old field or v15's ReplicaState alike) reads nothing and moves no follower
    position; otherwise a topic id the broker does not know is UNKNOWN_TOPIC_ID, and a
    consumer needs Read on each topic."""
    refused: dict[int, int] = {}
    if ctx.services.authorizer is not None and replica_id >= 0 \
            and not ctx.authorize(*CLUSTER_ACTION):
        return dict.fromkeys(range(len(wanted)), _TOPIC_AUTHORIZATION_FAILED)
    if names is not None:
        refused = {i: _UNKNOWN_TOPIC_ID for i, name in enumerate(names) if name is None}
    if ctx.services.authorizer is None or replica_id >= 0:  # the common case: no more
        return refused
    topics = list(dict.fromkeys(key[0] for i, key in enumerate(wanted) if i not in refused))
    denied = ctx.denied(AclOperation.READ, ResourceType.TOPIC, topics)
    if denied:
        refused.update((i, _TOPIC_AUTHORIZATION_FAILED) for i, key in enumerate(wanted)
                       if i not in refused and key[0] in denied)
    return refused


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


def _encode(version: int, keys: list[SessionKey], results: list[FetchResult],
            converted: dict[int, bytes] | None = None, session_id: int = 0,
            leaders: tuple[dict[int, tuple[int, int]], list[NodeEndpoint]] | None = None
            ) -> list[Any]:
    """The response, topics named as the request named them (v13+: by id);
    ``converted``: down-converted records by index into ``results`` (Fetch v0-v3), which
    replace the regions; ``leaders``: v16+'s CurrentLeader fields by index into
    ``results``, and the NodeEndpoints."""
    topics: list[FetchTopicData] = []
    last: Any = None
    for (topic, partition, _o, _m, _e), r in zip(keys, results, strict=True):
        if not topics or last != topic:
            last = topic
            topics.append(FetchTopicData("", topic_id=topic)
                          if isinstance(topic, uuid.UUID) else FetchTopicData(topic))
        records: Any = r.data if r.size else b""
        topics[-1].partitions.append(FetchPartitionData(
            partition_index=partition,
            error_code=r.error_code,
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset,
            log_start_offset=r.log_start_offset,
            aborted_transactions=r.aborted_transactions,
            preferred_read_replica=r.preferred_read_replica,
            records=records,
        ))
    if converted is not None:
        parts = [p for t in topics for p in t.partitions]
        for i, part in enumerate(parts):
            part.records = converted.get(i, b"")
    if leaders is None:
        return encode_fetch_response(version, topics, session_id=session_id)
    parts = [p for t in topics for p in t.partitions]
    for i, leader in leaders[0].items():
        parts[i].current_leader = leader
    return encode_fetch_response(version, topics, session_id=session_id,
                                 node_endpoints=leaders[1])
