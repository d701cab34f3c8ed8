"""Produce: append each partition's record batches on its leader.

Decode, one call, encode: ``ReplicaManager.produce`` validates, appends and, for acks=-1,
waits in its produce purgatory until the ISR has the data (immediately when the ISR is the
leader alone) or the request timeout passes. acks must be 0, 1 or -1 (else
INVALID_REQUIRED_ACKS for every partition). acks=0 gets no response at all, as in Kafka.
A transactional produce goes to the replica manager with its transactional id, which
first has the transaction coordinator confirm the partitions not yet in the producer's
ongoing transaction (KIP-890 part 1, transaction.partition.verification.enable): a
partition the coordinator did not add is INVALID_TXN_STATE (TRANSACTION_ABORTABLE for
Produce v11+), a coordinator that cannot answer NOT_ENOUGH_REPLICAS (retriable). As Kafka,
transactional records without a transactional id are refused as a whole
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED). With an authorizer: Write on the TransactionalId
and on each topic (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED).
While an acks=-1 produce waits for the ISR, the connection goes on with the producer's
next requests (a ``Deferred`` answer). The append itself may wait too, for a heavy record
check done off the event loop; the connection's next request waits for that.

Produce v0-v2 (clients of Kafka 0.9/0.10) carry v0/v1 message sets, which the log's
validator (klog/storage/validator.py) converts to the topic's v2 format as Kafka's
LogValidator does. From v3 on each
partition's records must be exactly one whole v2 batch (Kafka's
ProduceRequest.validateRecords): none (empty or cut short), a v0/v1 message or a second
batch is INVALID_RECORD, a length below any entry's CORRUPT_MESSAGE, zstd below v7
UNSUPPORTED_COMPRESSION_TYPE -- each without an error message, as Kafka answers them; the
other partitions are appended. A topic named with no partitions is left out of the
response, as Kafka leaves it.

With a producer_byte_rate quota on the client (klog/daemon/quotas.py), the request's
record bytes are metered first and the response carries the throttle time (KIP-219).

A batch refused for some of its records (a keyless record on a compacted topic, a
timestamp out of the topic's range, offset deltas out of order) is answered, from v8 on,
with the index of each of those records and why (KIP-467's record errors), so a producer
fails exactly those and the others with an error of their own. From v10 on (KIP-951), as
Kafka 3.9's handleProduceRequest, a partition answered NOT_LEADER_OR_FOLLOWER names the
leader and epoch this broker knows (its own replica's view, else the metadata cache's) and
the response the leaders' addresses on the request's listener, so the producer moves
without a metadata round trip.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from klog.daemon.handlers import Deferred, Request, RequestContext, Response
from klog.daemon.quotas import ClientQuotaManager
from klog.daemon.replica_results import ProduceResult
from klog.protocol import produce
from klog.protocol.acls import AclOperation, ResourceType
from klog.protocol.entities import as_millis
from klog.protocol.errors import ErrorCode
from klog.protocol.fetch import NodeEndpoint
from klog.protocol.produce import (
    CURRENT_LEADER_FROM,
    TRANSACTION_ABORTABLE_FROM,
    PartitionResponse,
)
from klog.protocol.records.batch import (
    LEGACY_RECORD_OVERHEAD_V0,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    CompressionType,
)

_TOPIC_AUTHORIZATION_FAILED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
_INVALID_RECORD = int(ErrorCode.INVALID_RECORD)
_CORRUPT_MESSAGE = int(ErrorCode.CORRUPT_MESSAGE)
_UNSUPPORTED_COMPRESSION_TYPE = int(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE)
#: Produce v7 brought zstd (KIP-110).
_FIRST_ZSTD_VERSION = 7
_ZSTD = int(CompressionType.ZSTD)
_COMPRESSION_MASK = 0x07
_NOT_LEADER_OR_FOLLOWER = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
# A v2 batch header: batchLength an int32 at byte 8, magic at 16, attributes an int16 at
# 21 (its flags in byte 22).
_LENGTH_AT, _MAGIC_AT, _ATTRIBUTES_LOW_AT = 8, 16, 22
# A log entry's bytes up to and including its magic byte (Kafka's HEADER_SIZE_UP_TO_MAGIC).
_UP_TO_MAGIC = _MAGIC_AT + 1
_TRANSACTIONAL = TRANSACTIONAL_FLAG_MASK
_NONE_REFUSED: dict[tuple[str, int], ProduceResult] = {}
# Module constants: an enum member read through its class costs more, once per request.
_WRITE, _TOPIC = AclOperation.WRITE, ResourceType.TOPIC


async def handle(ctx: RequestContext, request: Request) -> Response:
    quotas = ctx.services.quotas
    throttle_ms = 0
    if quotas is not None and quotas.produce.active:  # one test without a quota
        throttle_ms = _metered(ctx, request, quotas.produce)
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
        return _response(ctx, order, results, throttle_ms)
    transactional_id = getattr(request, "transactional_id", None)  # v3+
    if (transactional_id is not None and not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)) or (
            transactional_id is None and _has_transactional_batch(entries)):
        # Kafka's KafkaApis: transactional records need an authorized transactional id
        # (without one they would escape KIP-890's verification).
        results = {tp: (int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), None)
                   for tp in entries}
        return _response(ctx, order, results, throttle_ms)
    # Write on each topic (one dict probe per request without an authorizer).
    refused = _refused(ctx, entries, order)
    if ctx.api_version >= 3:
        misshapen = _misshapen(entries, ctx.api_version)
        if misshapen:
            refused = {**refused, **misshapen}
    if refused:
        entries = {tp: r for tp, r in entries.items() if tp not in refused}
    rm = ctx.services.replica_manager
    # The timeout matters to acks=-1 only (converting it costs as much as a small append).
    timeout_ms = as_millis(request.timeout) if acks == -1 else 0
    if transactional_id is None:
        appended = await rm.produce(entries, acks, timeout_ms) if entries else {}
    else:
        appended = await rm.produce(entries, acks, timeout_ms, transactional_id,
                                    ctx.api_version >= TRANSACTION_ABORTABLE_FROM
                                    ) if entries else {}
    if not isinstance(appended, dict):
        # acks=-1: answered once the ISR has it; meanwhile the connection reads the
        # producer's next request (responses still go out in request order).
        return Deferred(_after(ctx, order, appended, refused, throttle_ms))
    if refused:
        appended = {**appended, **refused}
    if acks == 0:
        # Kafka closes the connection so that an acks=0 producer notices failures.
        if any(r.error_code for r in appended.values()) and ctx.connection is not None:
            ctx.connection.close()
        return None
    return _response(ctx, order, {tp: (r.error_code, r) for tp, r in appended.items()},
                     throttle_ms)


def _metered(ctx: RequestContext, request: Request, quota: ClientQuotaManager) -> int:
    """producer_byte_rate (Kafka's ClientQuotaManager for produce): the request's record
    bytes count against the client's rate; over its quota, the response says how long it
    is throttled and the connection holds its next request that long (KIP-219). The
    records are appended all the same, as Kafka does."""
    size = 0
    for topic in request.topic_data:
        for part in topic.partition_data:
            if part.records is not None:
                size += len(part.records)
    throttle_ms = quota.record(ctx.principal.name, ctx.client_id, size)
    ctx.throttle(throttle_ms)
    return throttle_ms


def _refused(ctx: RequestContext, entries: dict[tuple[str, int], Any],
             order: list[tuple[str, list[int]]]) -> dict[tuple[str, int], ProduceResult]:
    """The partitions of topics the caller may not Write: TOPIC_AUTHORIZATION_FAILED."""
    if ctx.services.authorizer is None:  # the hot path builds nothing
        return _NONE_REFUSED
    denied = ctx.denied(_WRITE, _TOPIC, [name for name, _ in order])
    return {tp: ProduceResult(_TOPIC_AUTHORIZATION_FAILED) for tp in entries
            if tp[0] in denied} if denied else {}


def _misshapen(entries: dict[tuple[str, int], Any], version: int
               ) -> dict[tuple[str, int], ProduceResult]:
    """Kafka's ProduceRequest.validateRecords (v3+): the partitions whose records are not
    exactly one whole v2 batch (see the module docstring), with their error codes."""
    out: dict[tuple[str, int], ProduceResult] = {}
    for tp, records in entries.items():
        if records is not None:
            code = _shape_error(records, version)
            if code:
                out[tp] = ProduceResult(code)
    return out


def _entry_size(records: Any, position: int) -> int | None:
    """The size of the log entry at ``position`` with its overhead, None when the bytes
    hold no whole entry there (Kafka's batch iterator stops), -1 when its length is below
    any entry's (CORRUPT_MESSAGE)."""
    left = len(records) - position
    if left < LOG_OVERHEAD:
        return None
    length = int.from_bytes(records[position + _LENGTH_AT:position + _LENGTH_AT + 4], "big",
                            signed=True)
    if length < LEGACY_RECORD_OVERHEAD_V0:
        return -1
    if left < _UP_TO_MAGIC or left < length + LOG_OVERHEAD:
        return None
    return length + LOG_OVERHEAD


def _shape_error(records: Any, version: int) -> int:
    size = _entry_size(records, 0)
    if size is None:
        return _INVALID_RECORD  # "must have at least one record batch per partition"
    if size < 0:
        return _CORRUPT_MESSAGE
    if records[_MAGIC_AT] < 2:
        return _INVALID_RECORD  # "only allowed to contain record batches with magic version 2"
    if version < _FIRST_ZSTD_VERSION and \
            records[_ATTRIBUTES_LOW_AT] & _COMPRESSION_MASK == _ZSTD:
        return _UNSUPPORTED_COMPRESSION_TYPE
    second = _entry_size(records, size)
    if second is None:
        return 0
    return _CORRUPT_MESSAGE if second < 0 else _INVALID_RECORD  # "exactly one record batch"


def _has_transactional_batch(entries: dict[tuple[str, int], Any]) -> bool:
    """Does a partition's first batch carry the transactional flag? As Kafka's
    RequestUtils.hasTransactionalRecords, only a first batch whose length fits the bytes
    counts (garbage is the append's to refuse). A v2 header's magic and attributes bytes
    are read in place: asked of every produce without a transactional id."""
    for records in entries.values():
        if records is not None and len(records) >= RECORD_BATCH_OVERHEAD \
                and records[_MAGIC_AT] >= 2 and records[_ATTRIBUTES_LOW_AT] & _TRANSACTIONAL:
            length = int.from_bytes(records[_LENGTH_AT:_LENGTH_AT + 4], "big", signed=True)
            if RECORD_BATCH_OVERHEAD <= length + LOG_OVERHEAD <= len(records):
                return True
    return False


async def _after(ctx: RequestContext, order: list[tuple[str, list[int]]],
                 waiting: Awaitable[dict[tuple[str, int], Any]],
                 refused: dict[tuple[str, int], ProduceResult], throttle_ms: int) -> Any:
    appended = {**await waiting, **refused}
    return _response(ctx, order, {tp: (r.error_code, r) for tp, r in appended.items()},
                     throttle_ms)


def _response(ctx: RequestContext, order: list[tuple[str, list[int]]],
              results: dict[tuple[str, int], tuple[int, Any]], throttle_ms: int = 0) -> Any:
    version = ctx.api_version
    if produce.handles(version):
        # The hot path: encoded by hand into one chunk (no kio entity to build and write).
        topics = []
        moved = False
        for name, indexes in order:
            if not indexes:
                continue
            parts = []
            for index in indexes:
                error, r = results[(name, index)]
                if r is None:
                    parts.append(PartitionResponse(index, error))
                elif not error:
                    parts.append(PartitionResponse(index, error, r.base_offset,
                                                   r.log_append_time_ms, r.log_start_offset))
                else:
                    parts.append(PartitionResponse(
                        index, error, r.base_offset, r.log_append_time_ms, r.log_start_offset,
                        r.error_message, r.record_errors))
                    moved = moved or error == _NOT_LEADER_OR_FOLLOWER
            topics.append((name, parts))
        nodes = _current_leaders(ctx, topics) if moved and version >= CURRENT_LEADER_FROM \
            else ()
        return [produce.encode_produce_response(version, topics, throttle_ms, nodes)]
    responses = []
    for name, indexes in order:
        if not indexes:
            continue
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
    return ctx.respond({"responses": responses, "throttle_time": throttle_ms})


def _current_leaders(ctx: RequestContext, topics: list[tuple[str, list[PartitionResponse]]]
                     ) -> list[NodeEndpoint]:
    """KIP-951 (Kafka's getCurrentLeader): each partition answered NOT_LEADER_OR_FOLLOWER
    gets the leader and epoch of this broker's replica of it, or the metadata cache's when
    it hosts none (-1, -1 when neither knows); returns the leaders' endpoints on the
    request's listener (the brokers the cache knows alive)."""
    rm = ctx.services.replica_manager
    cache = ctx.services.metadata_cache
    nodes: dict[int, NodeEndpoint] = {}
    for name, parts in topics:
        for part in parts:
            if part.error_code != _NOT_LEADER_OR_FOLLOWER:
                continue
            hosted = rm.get_partition(name, part.index)
            if hosted is not None:
                leader, epoch = hosted.leader_id, hosted.leader_epoch
            else:
                state = cache.partition_state(name, part.index)
                leader, epoch = (-1, -1) if state is None else (state.leader, state.leader_epoch)
            part.current_leader = (leader, epoch)
            broker = cache.broker(leader) if leader >= 0 else None
            endpoint = None if broker is None else broker.endpoint(ctx.listener_name)
            if broker is not None and endpoint is not None:
                nodes[leader] = NodeEndpoint(leader, endpoint.host, endpoint.port, broker.rack)
    return list(nodes.values())
