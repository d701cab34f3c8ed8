"""What a consumer makes of one partition's fetched record data: ConsumerRecords.

This module owns the client-side reading of a Fetch response's ``records`` field (Kafka's
CompletedFetch): walking its entries (v2 batches of every codec, v0/v1 messages and
compressed wrappers), checking CRCs when asked, dropping records before the fetch offset
(a broker returns whole batches, so the first one may start earlier), ignoring a partial
entry at the end (the broker cuts the response at the size limit), skipping control
batches, and for read_committed the batches of aborted transactions (from the response's
aborted-transactions list and the ABORT markers). Pure functions; no I/O, no state.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from klog.protocol.errors import CorruptRecordError, KafkaError, RecordTooLargeError
from klog.protocol.records.batch import (
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    BatchHeader,
    iter_batch_headers,
)
from klog.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from klog.protocol.records.control import ControlRecordType, parse_control_key
from klog.protocol.records.decode import iter_records

#: Any: a deserializer makes whatever the application wants of the bytes.
Deserializer = Callable[[bytes | None], Any]

_LENGTH_END = LOG_OVERHEAD  # offset(8) + length(4)


@dataclass(slots=True)
class ConsumerRecord:
    """One record as the consumer hands it out (Kafka's ConsumerRecord).

    ``timestamp_type`` is Kafka's id: -1 none (v0), 0 CreateTime, 1 LogAppendTime.
    ``headers`` is a list of (key, value) with a None value for a null header value.
    ``leader_epoch`` is the batch's partition leader epoch, None when unknown (v0/v1).
    Key and value are what the deserializers made of the bytes; the sizes are of the
    bytes on the wire, -1 for null.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: Any  # Any: what the key deserializer made (bytes without one)
    value: Any  # Any: what the value deserializer made (bytes without one)
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    leader_epoch: int | None = None
    serialized_key_size: int = -1
    serialized_value_size: int = -1


@dataclass(slots=True)
class DecodedFetch:
    """The records of one partition's fetch, in offset order.

    ``next_offset``: where the consumer's position goes once every record here has been
    handed out (past skipped control/aborted batches and compacted-away tails).
    ``error``: a failure met after ``records`` (corrupt entry, bad CRC); the records before
    it are good and are delivered first, the error is raised when the consumer reaches it.
    """

    records: list[ConsumerRecord]
    next_offset: int
    error: KafkaError | None = None


def decode_fetched(
    data: bytes | bytearray | memoryview | None,
    *,
    topic: str,
    partition: int,
    fetch_offset: int,
    read_committed: bool = False,
    aborted_transactions: Iterable[tuple[int, int]] | None = None,
    check_crcs: bool = True,
    key_deserializer: Deserializer | None = None,
    value_deserializer: Deserializer | None = None,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> DecodedFetch:
    """Decode one partition's ``records`` bytes fetched from ``fetch_offset``.

    ``aborted_transactions`` is the response's list of (producer_id, first_offset), used
    only when ``read_committed``. Never raises: a failure is the result's ``error``
    (CorruptRecordError, RecordTooLargeError when the data is not empty but holds not one
    whole entry -- brokers since Fetch v3 return the first one whole, so that is a broken
    response -- or a KafkaError wrapping a deserializer's exception).
    """
    records: list[ConsumerRecord] = []
    next_offset = fetch_offset
    if not data:
        return DecodedFetch(records, next_offset)
    # Kafka's consumer keeps aborted transactions in a queue by first offset and the set
    # of producers whose aborted transaction is open at the current batch.
    aborted_queue: list[tuple[int, int]] = []
    if read_committed and aborted_transactions:
        aborted_queue = [(first, pid) for pid, first in aborted_transactions]
        heapq.heapify(aborted_queue)
    aborted_producers: set[int] = set()
    append = records.append
    seen_entry = False
    try:
        for header in iter_batch_headers(data):
            seen_entry = True
            if header.last_offset < next_offset:
                continue  # wholly before the fetch offset
            if check_crcs:
                header.ensure_valid(data)
            if read_committed and header.has_producer_id:
                while aborted_queue and aborted_queue[0][0] <= header.last_offset:
                    aborted_producers.add(heapq.heappop(aborted_queue)[1])
                if header.is_control:
                    if _is_abort_marker(data, header, max_decompressed_size):
                        aborted_producers.discard(header.producer_id)
                elif header.is_transactional and header.producer_id in aborted_producers:
                    next_offset = header.next_offset
                    continue
            if header.is_control:
                next_offset = max(next_offset, header.next_offset)
                continue
            _append_records(
                append, data, header, topic, partition, next_offset, check_crcs,
                key_deserializer, value_deserializer, max_decompressed_size,
            )
            # v2 keeps its last offset even when compaction removed the last records:
            # moving past the whole batch avoids fetching it again.
            next_offset = max(next_offset, header.next_offset)
    except Exception as exc:  # corrupt data, or a deserializer that failed
        if records:
            next_offset = max(next_offset, records[-1].offset + 1)
        return DecodedFetch(records, next_offset, _as_kafka_error(exc, topic, partition))
    if not seen_entry:
        size = _declared_size(data)
        error = RecordTooLargeError(
            f"{topic}-{partition} at offset {fetch_offset}: the fetched data holds no whole "
            f"batch ({len(data)} bytes, the first one declares {size}); raise "
            "max_partition_fetch_bytes"
        )
        return DecodedFetch(records, next_offset, error)
    return DecodedFetch(records, next_offset)


def _as_kafka_error(exc: Exception, topic: str, partition: int) -> KafkaError:
    if isinstance(exc, KafkaError):
        return exc
    error = KafkaError(f"{topic}-{partition}: cannot deserialize a record: {exc!r}")
    error.__cause__ = exc
    return error


def _declared_size(data: bytes | bytearray | memoryview) -> int:
    if len(data) < _LENGTH_END:
        return -1
    return int.from_bytes(bytes(data[8:12]), "big", signed=True) + LOG_OVERHEAD


def _is_abort_marker(
    data: bytes | bytearray | memoryview, header: BatchHeader, max_decompressed_size: int
) -> bool:
    for record in iter_records(data, header, max_decompressed_size=max_decompressed_size):
        try:
            _version, control_type = parse_control_key(record.key)
        except CorruptRecordError:
            return False
        return control_type is ControlRecordType.ABORT
    return False


def _append_records(
    append: Callable[[ConsumerRecord], None],
    data: bytes | bytearray | memoryview,
    header: BatchHeader,
    topic: str,
    partition: int,
    fetch_offset: int,
    check_crcs: bool,
    key_deserializer: Deserializer | None,
    value_deserializer: Deserializer | None,
    max_decompressed_size: int,
) -> None:
    epoch = header.partition_leader_epoch
    leader_epoch = None if epoch == NO_PARTITION_LEADER_EPOCH else epoch
    # One timestamp type per entry (a v1 wrapper's applies to its inner messages).
    timestamp_type = int(header.timestamp_type)
    legacy = header.magic != MAGIC_V2
    record_type = ConsumerRecord
    for r in iter_records(data, header, max_decompressed_size=max_decompressed_size):
        offset = r.offset
        if offset < fetch_offset:
            continue
        if legacy and check_crcs and not r.is_valid:
            raise CorruptRecordError(
                f"{topic}-{partition}: message at offset {offset} fails its CRC check"
            )
        key = r.key
        value = r.value
        headers = r.headers
        append(record_type(
            topic,
            partition,
            offset,
            r.timestamp,
            timestamp_type,
            key if key_deserializer is None else key_deserializer(key),
            value if value_deserializer is None else value_deserializer(value),
            list(headers) if headers else [],
            leader_epoch,
            -1 if key is None else len(key),
            -1 if value is None else len(value),
        ))
