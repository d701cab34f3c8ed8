"""DeleteRecords (v0-2): move partitions' log start offsets forward (-1: to the high
watermark) and answer each partition's new low watermark. Delete on the topic is needed
(else TOPIC_AUTHORIZATION_FAILED), as Kafka's KafkaApis asks."""

from __future__ import annotations

from typing import Any

from klog.daemon.admin_rules import DeleteRecordsResult
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.errors import ErrorCode


async def handle(ctx: RequestContext, request: Request) -> Response:
    denied = ctx.denied(AclOperation.DELETE, ResourceType.TOPIC, [t.name for t in request.topics])
    offsets = {(t.name, p.partition_index): p.offset
               for t in request.topics if t.name not in denied for p in t.partitions}
    results = await ctx.services.admin.delete_records(offsets) if offsets else {}
    results.update({(t.name, p.partition_index): DeleteRecordsResult(
        -1, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        for t in request.topics if t.name in denied for p in t.partitions})
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), result in results.items():
        topics.setdefault(topic, []).append({
            "partition_index": partition,
            "low_watermark": result.low_watermark,
            "error_code": result.error_code,
        })
    return ctx.respond({
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    })
