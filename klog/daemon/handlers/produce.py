"""Produce: append each partition's record batches on its leader.

Decode, one call, encode: ``ReplicaManager.produce`` validates, appends and, for acks=-1,
waits in its produce purgatory until the ISR has the data (immediately when the ISR is the
leader alone) or the request timeout passes. acks must be 0, 1 or -1 (else
INVALID_REQUIRED_ACKS for every partition). acks=0 gets no response at all, as in Kafka.
While an acks=-1 produce waits for the ISR, the connection goes on with the producer's
next requests (a ``Deferred`` answer). The append itself may wait too, for a heavy record
check done off the event loop; the connection's next request waits for that.

Produce v0-v2 (clients of Kafka 0.9/0.10) carry v0/v1 message sets, which the replica
manager converts to the topic's v2 format as Kafka's LogValidator does. From v3 on a
request may hold only v2 batches: a partition whose records begin with a v0/v1 message
gets INVALID_RECORD (Kafka's ProduceRequest.validateRecords), the others are appended.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from klog.daemon.handlers import Deferred, Request, RequestContext, Response
from klog.protocol import produce
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode
from klog.protocol.produce import PartitionResponse
from klog.protocol.records.convert import is_legacy


async def handle(ctx: RequestContext, request: Request) -> Response:
    acks = request.acks
    entries: dict[tuple[str, int], Any] = {}
    order: list[tuple[str, list[int]]] = []
    for topic in request.topic_data:
        indexes = []
        for part in topic.partition_data:
            entries[(topic.name, part.index)] = part.records
            indexes.append(part.index)
        order.append((topic.name, indexes))
    if acks not in (0, 1, -1):
        results = {tp: (int(ErrorCode.INVALID_REQUIRED_ACKS), None) for tp in entries}
        return _response(ctx, order, results)
    if getattr(request, "transactional_id", None) is not None:  # v3+
        # Transactions arrive with the transaction coordinator; until then a transactional
        # produce is refused rather than half-honoured.
        results = {tp: (int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), None)
                   for tp in entries}
        return _response(ctx, order, results)
    refused: dict[tuple[str, int], Any] = {}
    if ctx.api_version >= 3:
        for tp, records in entries.items():
            if records is not None and is_legacy(records):
                refused[tp] = (int(ErrorCode.INVALID_RECORD), None)
        for tp in refused:
            del entries[tp]
    rm = ctx.services.replica_manager
    # The timeout matters to acks=-1 only (converting it costs as much as a small append).
    timeout_ms = as_millis(request.timeout) if acks == -1 else 0
    appended = await rm.produce(entries, acks, timeout_ms) if entries else {}
    if not isinstance(appended, dict):
        # acks=-1: answered once the ISR has it; meanwhile the connection reads the
        # producer's next request (responses still go out in request order).
        return Deferred(_after(ctx, order, appended, refused))
    if acks == 0:
        # Kafka closes the connection so that an acks=0 producer notices failures.
        if (refused or any(r.error_code for r in appended.values())) \
                and ctx.connection is not None:
            ctx.connection.close()
        return None
    return _response(ctx, order, {**refused,
                                  **{tp: (r.error_code, r) for tp, r in appended.items()}})


async def _after(ctx: RequestContext, order: list[tuple[str, list[int]]],
                 waiting: Awaitable[dict[tuple[str, int], Any]],
                 refused: dict[tuple[str, int], Any]) -> Any:
    appended = await waiting
    return _response(ctx, order, {**refused,
                                  **{tp: (r.error_code, r) for tp, r in appended.items()}})


def _response(ctx: RequestContext, order: list[tuple[str, list[int]]],
              results: dict[tuple[str, int], tuple[int, Any]]) -> Any:
    if produce.handles(ctx.api_version):
        # The hot path: encoded by hand into one chunk (no kio entity to build and write).
        topics = []
        for name, indexes in order:
            parts = []
            for index in indexes:
                error, r = results[(name, index)]
                parts.append(PartitionResponse(index, error) if r is None else PartitionResponse(
                    index, error, r.base_offset, r.log_append_time_ms, r.log_start_offset,
                    r.error_message if error else None))
            topics.append((name, parts))
        return [produce.encode_produce_response(ctx.api_version, topics)]
    responses = []
    for name, indexes in order:
        partition_responses: list[dict[str, Any]] = []
        for index in indexes:
            error, r = results[(name, index)]
            partition_responses.append({
                "index": index,
                "error_code": error,
                "base_offset": r.base_offset if r is not None else -1,
                "log_append_time": r.log_append_time_ms if r is not None else -1,
                "log_start_offset": r.log_start_offset if r is not None else -1,
                "record_errors": [],
                "error_message": r.error_message if r is not None and error else None,
            })
        responses.append({"name": name, "partition_responses": partition_responses})
    return ctx.respond({"responses": responses, "throttle_time": 0})
