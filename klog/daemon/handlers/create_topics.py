"""CreateTopics (v0-7): validate_only, configs, replica assignments, broker defaults (-1).

Only the controller creates topics in Kafka's ZooKeeper mode (others answer NOT_CONTROLLER
and the client retries there). v5+ answers with the new topic's partition count,
replication factor and every topic config with its source; v7 with the topic id.
Each topic's partitions count against the client's controller_mutation_rate (KIP-599).
"""

from __future__ import annotations

from typing import Any

from klog.daemon.admin_rules import ZERO_UUID, TopicResult, TopicSpec
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode

_THROTTLED = "The throttling quota has been exceeded."


async def handle(ctx: RequestContext, request: Request) -> Response:
    admin = ctx.services.admin
    names = list(dict.fromkeys(t.name for t in request.topics))
    # controller_mutation_rate: v6+ refuse over the quota, older versions are throttled.
    strict = ctx.api_version >= 6
    if not admin.is_controller:
        results = {n: TopicResult(int(ErrorCode.NOT_CONTROLLER)) for n in names}
    else:
        specs = []
        # Create on the cluster, else on each topic (Kafka's order: after NOT_CONTROLLER).
        bad: dict[str, TopicResult] = {
            n: TopicResult(int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), "Authorization failed.")
            for n in (set() if ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER,
                                             CLUSTER_NAME)
                      else ctx.denied(AclOperation.CREATE, ResourceType.TOPIC, names))}
        for topic in request.topics:
            assignments = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
            if topic.name in bad:
                continue
            if len(assignments) != len(topic.assignments):
                bad[topic.name] = TopicResult(int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                                              "partitions should be a consecutive 0-based "
                                              "integer sequence")
            elif not getattr(request, "validate_only", False) and not ctx.mutations_allowed(
                    _partitions(ctx, topic.num_partitions, assignments), strict):
                bad[topic.name] = TopicResult(int(ErrorCode.THROTTLING_QUOTA_EXCEEDED),
                                              _THROTTLED)
                continue
            specs.append(TopicSpec(topic.name, topic.num_partitions, topic.replication_factor,
                                   assignments, {c.name: c.value for c in topic.configs}))
        results = await admin.create_topics(
            [s for s in specs if s.name not in bad],
            validate_only=getattr(request, "validate_only", False),  # v1+
            timeout_ms=as_millis(request.timeout))
        results.update(bad)
    return ctx.respond({
        "throttle_time": ctx.mutation_throttle_ms,
        "topics": [_topic(name, results[name], ctx.authorize(
            AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name)) for name in names],
    })


def _partitions(ctx: RequestContext, num_partitions: int,
                assignments: dict[int, list[int]]) -> int:
    """The partitions a topic creation makes (its mutations)."""
    if assignments:
        return len(assignments)
    if num_partitions > 0:
        return num_partitions
    return int(ctx.services.config.current.num_partitions)


def _topic(name: str, result: TopicResult, configs_allowed: bool = True) -> dict[str, Any]:
    """``configs_allowed``: DescribeConfigs on the topic; without it, as Kafka, the created
    topic's configs are not told (topic_config_error_code TOPIC_AUTHORIZATION_FAILED)."""
    ok = result.error_code == 0
    if ok and not configs_allowed:
        return {"name": name, "topic_id": result.topic_id or ZERO_UUID, "error_code": 0,
                "error_message": None, "num_partitions": -1, "replication_factor": -1,
                "configs": [], "topic_config_error_code": int(
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED)}
    return {
        "name": name,
        "topic_id": result.topic_id if ok and result.topic_id is not None else ZERO_UUID,
        "error_code": result.error_code,
        "error_message": result.error_message,
        "num_partitions": result.num_partitions if ok else -1,
        "replication_factor": result.replication_factor if ok else -1,
        "configs": [{
            "name": e.name,
            "value": e.value,
            "read_only": e.read_only,
            "config_source": int(e.source),
            "is_sensitive": e.is_sensitive,
        } for e in result.config_entries] if ok else [],
    }
