"""Converting between message formats: v0/v1 message sets up to a v2 batch (produce), and
v2 batches down to v0/v1 message sets (fetch by old consumers).

Owns what Kafka's LogValidator does with a v0/v1 produce (convertAndAssignOffsetsNonCompressed
and the compressed path: every message's CRC checked, all records rewritten into one v2
batch with no producer id, v0 records without a timestamp (-1), the topic's timestamp type
on the batch) and what RecordsUtil.downConvert does for Fetch v0-v3 (each v2 batch rewritten
as messages of magic 0 or 1 with the batch's codec, control batches and records before the
fetch offset left out; entries already at or below the wanted magic kept as they are,
v1 entries of an old log rewritten as v0 for a v0 reader).

Kafka 3.x writes only magic 2 once inter.broker.protocol.version is 3.0 or higher (its
default; message.format.version is then ignored), so the topic's format is always v2 here.
"""

from __future__ import annotations

from collections.abc import Iterator

from klog.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    UnsupportedCompressionError,
)
from klog.protocol.records.batch import (
    MAGIC_V0,
    MAGIC_V1,
    MAGIC_V2,
    NO_TIMESTAMP,
    CompressionType,
    TimestampType,
    iter_batch_headers,
)
from klog.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from klog.protocol.records.decode import iter_records as iter_any_records
from klog.protocol.records.legacy import build_legacy_message_set, iter_legacy_records
from klog.protocol.records.v2 import build_batch


def is_legacy(records: bytes | bytearray | memoryview) -> bool:
    """True when the first entry of ``records`` is a v0/v1 message (its magic byte)."""
    return len(records) > 16 and records[16] < MAGIC_V2


def up_convert(
    records: bytes | bytearray | memoryview,
    *,
    timestamp_type: TimestampType,
    compression: CompressionType | None,
    now: int,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """A v0/v1 message set as one v2 batch (offsets from 0: the log assigns them).

    ``compression`` None keeps the producer's codec (compression.type=producer); a
    LogAppendTime topic stamps ``now``. A damaged message (its CRC-32) is CORRUPT_MESSAGE,
    a v2 batch among v0/v1 messages INVALID_RECORD, as Kafka refuses both.
    """
    view = memoryview(records)
    items: list[tuple[int, bytes | None, bytes | None]] = []
    source = CompressionType.NONE
    end = 0
    for h in iter_batch_headers(view):
        end = h.end
        if h.magic == MAGIC_V2:
            raise InvalidRecordError("a produce request mixes v2 batches with v0/v1 messages")
        h.ensure_valid(view)
        if h.compression is not CompressionType.NONE:
            source = h.compression
        for record in iter_legacy_records(view, h, max_decompressed_size=max_decompressed_size):
            if not record.is_valid:
                raise CorruptRecordError(
                    f"message at offset {record.offset} fails its CRC-32 check")
            items.append((record.timestamp, record.key, record.value))
    if end != len(view):
        raise CorruptRecordError(f"a partial message at position {end} of a produce request")
    if not items:
        raise InvalidRecordError("a produce request with no messages")
    target = source if compression is None else compression
    log_append = timestamp_type is TimestampType.LOG_APPEND_TIME
    return build_batch(
        [(now if log_append else ts, k, v) for ts, k, v in items],
        compression=target,
        timestamp_type=timestamp_type,
        log_append_time=now if log_append else None,
    )


def down_convert_magic(fetch_version: int) -> int | None:
    """The magic a Fetch ``fetch_version`` consumer reads: 0 for v0-v1, 1 for v2-v3, None
    (no conversion) from v4 on, as Kafka's KafkaApis picks it."""
    if fetch_version <= 1:
        return MAGIC_V0
    if fetch_version <= 3:
        return MAGIC_V1
    return None


def down_convert(
    records: bytes | bytearray | memoryview,
    magic: int,
    fetch_offset: int,
    *,
    max_bytes: int,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> bytes:
    """The entries of ``records`` as a message set of ``magic`` (0 or 1).

    Converted entry by entry, and stopped before the output would pass ``max_bytes``,
    except that the first converted entry is always whole (Kafka's lazy down-conversion
    also guarantees one batch); the consumer fetches the rest next. So at most one input
    entry's conversion is held beyond ``max_bytes``. Only whole entries of the input are
    read (a partial one at the end of a fetch stays out).
    """
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"down-conversion is to magic 0 or 1, not {magic}")
    view = memoryview(records)
    out: list[bytes] = []
    size = 0
    for piece in _converted(view, magic, fetch_offset, max_decompressed_size):
        if out and size + len(piece) > max_bytes:
            break
        out.append(piece)
        size += len(piece)
    return b"".join(out)


def _converted(view: memoryview, magic: int, fetch_offset: int,
               max_decompressed_size: int) -> Iterator[bytes]:
    # whole entries only: a partial one at the end of a read stays out
    headers = list(iter_batch_headers(view))
    for h in headers:
        if h.magic <= magic:
            yield bytes(view[h.position:h.end])
            continue
        if h.is_control:
            continue  # control batches mean nothing to a pre-0.11 consumer
        if h.compression is CompressionType.ZSTD:
            raise UnsupportedCompressionError(
                "zstd batches cannot be down-converted to message format v0/v1")
        # a v2 batch, or a v1 entry (a log Kafka wrote before 0.11) for a v0 reader
        records = [r for r in iter_any_records(view, h,
                                               max_decompressed_size=max_decompressed_size)
                   if r.offset >= fetch_offset]
        if not records:
            continue
        timestamp_type = h.timestamp_type
        if magic == MAGIC_V0:
            timestamp_type = TimestampType.CREATE_TIME
        first = records[0].offset
        if h.compression is CompressionType.NONE:
            # one message per record, each at its own offset
            yield b"".join(
                build_legacy_message_set(
                    [(r.timestamp if magic == MAGIC_V1 else NO_TIMESTAMP, r.key, r.value)],
                    magic=magic, base_offset=r.offset, timestamp_type=timestamp_type,
                    log_append_time=h.max_timestamp
                    if timestamp_type is TimestampType.LOG_APPEND_TIME else None)
                for r in records)
            continue
        if records[-1].offset - first != len(records) - 1:
            # offsets with gaps (a compacted batch): a wrapper's inner offsets must be
            # consecutive from ours, so each record goes as its own message
            yield b"".join(
                build_legacy_message_set(
                    [(r.timestamp, r.key, r.value)], magic=magic, base_offset=r.offset,
                    timestamp_type=timestamp_type,
                    log_append_time=h.max_timestamp
                    if timestamp_type is TimestampType.LOG_APPEND_TIME else None)
                for r in records)
            continue
        yield build_legacy_message_set(
            [(r.timestamp, r.key, r.value) for r in records],
            magic=magic, compression=h.compression, base_offset=first,
            timestamp_type=timestamp_type,
            log_append_time=h.max_timestamp
            if timestamp_type is TimestampType.LOG_APPEND_TIME else None)

