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

From v12 topics may be asked for by topic id (Kafka's admin client describes and deletes
topics by id this way): the ids known answer their topics, names included; an unknown id
answers UNKNOWN_TOPIC_ID, a topic the caller may not Describe TOPIC_AUTHORIZATION_FAILED,
both with the id and no name (ids are not secret, as Kafka says); nothing is auto-created.

Authorization, as Kafka's KafkaApis: topics the caller may not Describe are left out of an
all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs
Create on the cluster or on the topic. v8+ answer the topic and cluster authorized
operations (KIP-430) when asked: every supported operation without an authorizer, as
Kafka does; the cluster's is 0 for a caller without Describe on it.

The controller is named only when it is among the brokers answered (else -1), as
DescribeCluster answers it. A broker that has not had the controller's first
UpdateMetadata (just started, in cluster mode) holds the request for it, at most
FIRST_METADATA_WAIT_MS: until then it knows only itself.
"""

from __future__ import annotations

import uuid
from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response
from klog.daemon.metadata_cache import MetadataCache
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode

_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
#: KIP-430's "not asked for" (INT32_MIN).
_OMITTED = -2147483648
_ZERO_UUID = uuid.UUID(int=0)

#: Longest a broker that has not had the controller's first UpdateMetadata holds a
#: Metadata request for it (a broker just started; the controller reaches it within
#: milliseconds, as it listens before it registers).
FIRST_METADATA_WAIT_MS = 5000


async def handle(ctx: RequestContext, request: Request) -> Response:
    services = ctx.services
    cache = services.metadata_cache
    if not cache.from_controller:
        # Answered from this broker's own registration alone, a client learns one broker
        # and no controller, and librdkafka does not ask again for 30 s and more: an
        # admin request sent to a cluster just started timed out.
        await services.admin.wait_for_cluster_metadata(FIRST_METADATA_WAIT_MS)
    version = ctx.api_version
    topics_req = request.topics
    topic_ids = [t.topic_id for t in topics_req or () if version >= 12
                 and t.topic_id is not None and t.topic_id != _ZERO_UUID]
    if topic_ids:
        return _respond(ctx, request, _by_topic_ids(ctx, request,
                                                    list(dict.fromkeys(topic_ids))))
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
    return _respond(ctx, request, topics)


def _respond(ctx: RequestContext, request: Request, topics: list[dict[str, Any]]) -> Response:
    cache = ctx.services.metadata_cache
    cluster_operations = _OMITTED
    if ctx.api_version >= 8 and getattr(request, "include_cluster_authorized_operations",
                                         False):
        cluster_operations = (
            ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME) else 0)
    brokers = _brokers(cache, ctx.listener_name)
    # The controller only among the brokers answered (as DescribeCluster): a broker that
    # has not had its first UpdateMetadata knows the controller's id (from ZooKeeper) but
    # not its address, and librdkafka, told of a controller it cannot find, waits for it
    # without asking again -- an admin request then timed out after 30 s. Kafka's cache
    # learns both from the same UpdateMetadata; -1 makes the client look again.
    controller_id = cache.controller_id
    if controller_id not in {b["node_id"] for b in brokers}:
        controller_id = -1
    return ctx.respond({
        "throttle_time": 0,
        "brokers": brokers,
        "cluster_id": cache.cluster_id,
        "controller_id": controller_id,
        "topics": topics,
        "cluster_authorized_operations": cluster_operations,
    })


def _by_topic_ids(ctx: RequestContext, request: Request,
                  topic_ids: list[uuid.UUID]) -> list[dict[str, Any]]:
    """The topics of a v12+ request that names them by id (see the module docstring)."""
    cache = ctx.services.metadata_cache
    names = {tid: cache.topic_by_id(tid) for tid in topic_ids}
    denied = ctx.denied(AclOperation.DESCRIBE, ResourceType.TOPIC,
                        [n for n in names.values() if n is not None])
    with_operations = getattr(request, "include_topic_authorized_operations", False)
    topics: list[dict[str, Any]] = []
    for tid, name in names.items():
        if name is None or name in denied:
            error = ErrorCode.UNKNOWN_TOPIC_ID if name is None \
                else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            topics.append({"error_code": int(error), "name": None, "topic_id": tid,
                           "is_internal": False, "topic_authorized_operations": _OMITTED,
                           "partitions": []})
            continue
        topic = _topic(cache, name, 0, ctx.listener_name, ctx.api_version)
        if with_operations:
            topic["topic_authorized_operations"] = ctx.authorized_operations(
                ResourceType.TOPIC, name)
        topics.append(topic)
    return topics


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
            # Dead brokers' replicas, and those the controller knows on failed log dirs.
            "offline_replicas": [r for r in state.replicas
                                 if r not in alive or r in state.offline_replicas],
        })
    return {**base, "error_code": 0, "partitions": parts}


def _reachable(cache: MetadataCache, broker_id: int, listener: str) -> bool:
    info = cache.broker(broker_id)
    return info is not None and info.endpoint(listener) is not None
