"""DeleteRecords (v0-2): move partitions' log start offsets forward (-1: to the high
watermark) and answer each partition's new low watermark."""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    offsets = {(t.name, p.partition_index): p.offset
               for t in request.topics for p in t.partitions}
    results = await ctx.services.admin.delete_records(offsets)
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
