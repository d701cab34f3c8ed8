"""AlterReplicaLogDirs (v0-2): move replicas to other log dirs of this broker (JBOD).

Decode, one call (``LogDirMover.alter_replica_log_dirs``, klog/daemon/log_dir_mover.py),
encode. As Kafka's KafkaApis: Alter on the cluster is needed, else every partition is
answered CLUSTER_AUTHORIZATION_FAILED; a partition named under two dirs goes to the last;
the results are grouped by topic.
"""

from __future__ import annotations

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    wanted: dict[tuple[str, int], str] = {}
    for log_dir in request.dirs:
        for topic in log_dir.topics:
            for partition in topic.partitions:
                wanted[(topic.name, int(partition))] = log_dir.path
    mover = ctx.services.log_dir_mover
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        errors = dict.fromkeys(wanted, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    elif mover is None:
        errors = dict.fromkeys(wanted, ErrorCode.KAFKA_STORAGE_ERROR)
    else:
        errors = await mover.alter_replica_log_dirs(wanted)
    by_topic: dict[str, list[dict[str, int]]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition,
                                               "error_code": int(error)})
    return ctx.respond({"throttle_time": 0, "results": [
        {"topic_name": topic, "partitions": partitions}
        for topic, partitions in by_topic.items()]})
