"""DescribeLogDirs (v0-4): per log dir, the partitions it holds with their sizes, and (v4)
the file system's total and usable bytes.

As Kafka: offset_lag is how far the log end offset trails the high watermark (0 for a
hosted replica, -1 for a log no replica serves); a replica being moved to another dir
(AlterReplicaLogDirs) is listed there too with is_future_key true and, as offset_lag, how
far its future log is behind; a requested topic listed in a dir without any of the
requested partitions still appears, with none.
"""

from __future__ import annotations

import asyncio

from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # As Kafka: no log dirs (and, from v3, the error that says why).
        return ctx.respond({"throttle_time": 0, "results": [],
                            "error_code": int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)})
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    dirs = await asyncio.to_thread(ctx.services.replica_manager.describe_log_dirs, wanted)
    return ctx.respond({"throttle_time": 0, "error_code": 0, "results": [
        {"error_code": d.error_code, "log_dir": d.log_dir, "total_bytes": d.total_bytes,
         "usable_bytes": d.usable_bytes, "topics": [
             {"name": t, "partitions": [
                 {"partition_index": r.partition, "partition_size": r.size,
                  "offset_lag": r.offset_lag, "is_future_key": r.is_future} for r in replicas]}
             for t, replicas in (d.topics or {}).items()]}
        for d in dirs]})
