"""Metadata: brokers, controller, topics with partition leaders, replicas and ISR.

Unknown topics are created when auto.create.topics.enable is on and the request allows it
(v4+; always for older versions), as Kafka does. Kafka answers a topic it just created
with LEADER_NOT_AVAILABLE and lets the client retry; klog waits briefly for the in-process
controller to elect the leaders, so most clients get a usable answer at once.

A partition whose leader is not alive answers LEADER_NOT_AVAILABLE (leader -1); one whose
leader is alive but has no endpoint on the request's listener answers, as Kafka,
LEADER_NOT_AVAILABLE before v6 and LISTENER_NOT_FOUND from v6 (to make the listener
misconfiguration visible). v0 lists only the replicas and ISR members reachable on the
listener and, with a leader, flags any it left out as REPLICA_NOT_AVAILABLE; v1+ list them
all (dead ones in offline_replicas from v5).

A broker in a cluster accepts connections before the controller's first UpdateMetadata
has told it who the brokers and topics are; a Metadata request that comes then waits for
it (up to ``UNINITIALIZED_WAIT_S``), as a Kafka KRaft broker serves no request before it
has caught up with the metadata. Answered from the empty cache instead (Kafka's ZooKeeper
mode does that), librdkafka 2.10+ drops every broker the answer does not name and takes
the topics asked for as deleted: a producer then fails what it has in flight and every
message after.

Authorization, as Kafka's KafkaApis: topics the caller may not Describe are left out of an
all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs
Create on the cluster or on the topic. v8+ answer the topic and cluster authorized
operations (KIP-430) when asked: every supported operation without an authorizer, as
Kafka does; the cluster's is 0 for a caller without Describe on it.
"""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.metadata_cache import MetadataCache
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode

_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
#: KIP-430's "not asked for" (INT32_MIN).
_OMITTED = -2147483648
#: How long a Metadata request waits for the controller's first UpdateMetadata; then it is
#: answered from what the broker knows (nothing: no brokers, no topics).
UNINITIALIZED_WAIT_S = 10.0


async def handle(ctx: RequestContext, request: Request) -> Response:
    services = ctx.services
    cache = services.metadata_cache
    if not cache.initialized:
        await cache.wait_initialized(UNINITIALIZED_WAIT_S)
    version = ctx.api_version
    topics_req = request.topics
    if topics_req is None or (version == 0 and not topics_req):
        names = cache.topic_names()
        requested = False
    else:
        names = [t.name for t in topics_req if t.name is not None]
        requested = True
    allow_auto = getattr(request, "allow_auto_topic_creation", True)
    errors: dict[str, int] = {}
    # Topics the caller may not Describe: hidden from "all topics", refused when named
    # (their existence is not told: not even auto-creation is tried).
    denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    if denied and not requested:
        names = [n for n in names if n not in denied]
    errors = dict.fromkeys(denied, _TOPIC_AUTHORIZATION_FAILED)
    if requested:
        missing = [n for n in dict.fromkeys(names)
                   if n not in denied and not cache.contains_topic(n)]
        auto = allow_auto and services.config.current.auto_create_topics_enable
        if missing and auto and not ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER,
                                                  CLUSTER_NAME):
            # Create on the cluster, or on each topic, as Kafka asks for auto-creation.
            no_create = ctx.denied(AclOperation.CREATE, ResourceType.TOPIC, missing)
            errors.update(dict.fromkeys(no_create, _TOPIC_AUTHORIZATION_FAILED))
            missing = [n for n in missing if n not in no_create]
        if missing:
            errors.update(await services.admin.auto_create_topics(missing, allowed=auto))
    with_operations = version >= 8 and getattr(
        request, "include_topic_authorized_operations", False)
    topics = [_topic(cache, name, errors.get(name, 0), ctx.listener_name, version)
              for name in dict.fromkeys(names)]
    for topic in topics:
        if topic["error_code"] == _TOPIC_AUTHORIZATION_FAILED:
            topic["topic_id"] = None  # told nothing
        elif with_operations:
            topic["topic_authorized_operations"] = ctx.authorized_operations(
                ResourceType.TOPIC, topic["name"])
    cluster_operations = _OMITTED
    if version >= 8 and getattr(request, "include_cluster_authorized_operations", False):
        cluster_operations = (
            ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME) else 0)
    return ctx.respond({
        "throttle_time": 0,
        "brokers": _brokers(cache, ctx.listener_name),
        "cluster_id": cache.cluster_id,
        "controller_id": cache.controller_id,
        "topics": topics,
        "cluster_authorized_operations": cluster_operations,
    })


def _brokers(cache: MetadataCache, listener: str) -> list[dict[str, Any]]:
    out = []
    for broker_id in cache.alive_broker_ids():
        info = cache.broker(broker_id)
        ep = info.endpoint(listener) if info else None
        if info is None or ep is None:
            continue
        out.append({"node_id": broker_id, "host": ep.host, "port": ep.port, "rack": info.rack})
    return out


def _topic(cache: MetadataCache, name: str, error: int, listener: str,
           version: int) -> dict[str, Any]:
    topic_id = cache.topic_id(name)
    base: dict[str, Any] = {
        "name": name,
        "topic_id": topic_id,
        "is_internal": name in _INTERNAL_TOPICS,
        "topic_authorized_operations": _OMITTED,
        "partitions": [],
    }
    if error:
        return {**base, "error_code": error}
    partitions = cache.partitions(name)
    if not partitions:
        return {**base, "error_code": int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
    parts = []
    for index in sorted(partitions):
        state = partitions[index]
        alive = [r for r in state.replicas if cache.broker(r) is not None]
        replicas, isr = list(state.replicas), list(state.isr)
        if version == 0:
            replicas = [r for r in replicas if _reachable(cache, r, listener)]
            isr = [r for r in isr if _reachable(cache, r, listener)]
        leader_ok = _reachable(cache, state.leader, listener)
        # Kafka 3.x reports dead replicas in offline_replicas, not as an error code (v1+).
        if leader_ok:
            left_out = len(replicas) < len(state.replicas) or len(isr) < len(state.isr)
            error_code = ErrorCode.REPLICA_NOT_AVAILABLE if left_out else ErrorCode.NONE
        elif cache.broker(state.leader) is not None and version >= 6:
            error_code = ErrorCode.LISTENER_NOT_FOUND
        else:
            error_code = ErrorCode.LEADER_NOT_AVAILABLE
        parts.append({
            "error_code": int(error_code),
            "partition_index": index,
            "leader_id": state.leader if leader_ok else -1,
            "leader_epoch": state.leader_epoch,
            "replica_nodes": replicas,
            "isr_nodes": isr,
            "offline_replicas": [r for r in state.replicas if r not in alive],
        })
    return {**base, "error_code": 0, "partitions": parts}


def _reachable(cache: MetadataCache, broker_id: int, listener: str) -> bool:
    info = cache.broker(broker_id)
    return info is not None and info.endpoint(listener) is not None
