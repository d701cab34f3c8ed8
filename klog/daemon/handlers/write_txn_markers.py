"""WriteTxnMarkers (v1): a transaction coordinator's COMMIT/ABORT markers for partitions
this broker leads (a standalone broker's coordinator writes its markers in-process; the
admin tools' abort of a hanging transaction sends this in both modes).

Per marker one call, ``MarkerWriter.write`` (control batches appended with acks=all;
markers for ``__consumer_offsets`` complete the transactional offset commits); a partition
not hosted here is UNKNOWN_TOPIC_OR_PARTITION, as Kafka's handleWriteTxnMarkersRequest.
"""

from __future__ import annotations

from typing import Any

from klog.daemon.handlers import Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    writer = ctx.services.txn_marker_writer
    results = []
    for marker in request.markers:
        partitions = [(topic.name, int(p)) for topic in marker.topics
                      for p in topic.partition_indexes]
        errors = await writer.write(marker.producer_id, marker.producer_epoch,
                                    marker.coordinator_epoch, bool(marker.transaction_result),
                                    partitions)
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), code in errors.items():
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "error_code": code})
        results.append({
            "producer_id": marker.producer_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        })
    return ctx.respond({"markers": results})
