"""LogValidator's record checks for a v2 batch: what a broker verifies inside a batch.

This module owns the rules the records of a produced v2 batch must follow before a broker
stores them (Kafka's LogValidator, magic 2), and the rewrite of a checked batch into
another codec (broker-side recompression). A batch header and CRC say nothing about the
records: a record length of 2^40, an unknown codec or gzip garbage all pass them, and a
consumer then stalls on the batch forever. So every record is walked:

- the records section decodes in v2.py's grammar (``walk_records``): every length is
  consistent with the batch, every varint well formed, the header structure sound (a
  header key is never null), and nothing is left over -- else CorruptRecordError
  (CORRUPT_MESSAGE);
- from a client (Kafka's validateBatch): lastOffsetDelta >= 0, recordsCount > 0 and
  recordsCount == lastOffsetDelta + 1; and for every batch, the records' offset deltas are
  0, 1, 2, ... in order (Kafka's "inner record doesn't have the expected offset"), and on a
  compacted topic every record has a key ("Compacted topic cannot accept message without
  key") -- else InvalidRecordError (INVALID_RECORD);
- the records' smallest and largest timestamps are returned for the caller's time check
  (it knows the clock and message.timestamp.difference.max.ms).

A compressed section is inflated to be checked, never beyond ``max_decompressed_size``
(RecordTooLargeError; a bomb stops within one chunk of the bound), and an unknown codec id is
CorruptRecordError. When a check fails the CRC is looked at first: a batch damaged in
transit gets Kafka's CRC message, as Kafka's ensureValid runs before the records are read.

The walk is ``check_records``: the Python reference, and its C twin
(klog/protocol/records/_records.c, same grammar, same messages, no GIL held) used when it
was built and KLOG_PURE_PYTHON is not set. Tests compare both on the same inputs.
"""

from __future__ import annotations

import contextlib
import os
import struct
import types
from dataclasses import dataclass
from operator import itemgetter

from klog.protocol.errors import CorruptRecordError, InvalidRecordError, KafkaError
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CRC_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CompressionType,
    TimestampType,
    crc32c,
)
from klog.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, compress, decompress
from klog.protocol.records.v2 import MIN_RECORD_SIZE, RecordFieldsRow, walk_records

# The C twin of check_records; None without a C compiler at build time or with
# KLOG_PURE_PYTHON=1 in the environment (for comparisons).
native: types.ModuleType | None = None
if not os.environ.get("KLOG_PURE_PYTHON"):
    with contextlib.suppress(ImportError):
        from klog.protocol.records import _records as native

# Columns of walk_records' rows, read in C by map() (faster than a comprehension).
_TIMESTAMP_DELTA, _OFFSET_DELTA, _KEY_SIZE = itemgetter(0), itemgetter(1), itemgetter(3)

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_UINT32 = struct.Struct(">I")


@dataclass(slots=True)
class CheckedBatch:
    """A v2 batch whose records passed ``check_batch``.

    ``records`` is the records section, inflated when the batch is compressed (a view of
    the caller's buffer otherwise); the timestamps are the records' smallest and largest
    (CreateTime; None for a batch without records).
    """

    header: BatchHeader
    records: bytes | memoryview
    min_timestamp: int | None
    max_timestamp: int | None


def check_records(
    data: bytes | bytearray | memoryview,
    count: int,
    *,
    require_keys: bool = False,
    batch_position: int = 0,
) -> tuple[int, int]:
    """Walk the ``count`` records of a (decompressed) v2 records section and apply the
    per-record rules; return the smallest and largest timestamp delta ((0, 0) for none).

    CorruptRecordError for a section that does not decode (the first malformation met);
    InvalidRecordError, only for a section that decodes, for the first record with an
    offset delta other than its index or, with ``require_keys``, without a key.
    """
    if native is not None:
        kind, message, low, high = native.check_v2(data, count, require_keys, batch_position)
        if kind == 1:
            raise CorruptRecordError(message)
        if kind == 2:
            raise InvalidRecordError(message)
        return low, high
    return check_records_reference(data, count, require_keys=require_keys,
                                   batch_position=batch_position)


def check_records_reference(
    data: bytes | bytearray | memoryview,
    count: int,
    *,
    require_keys: bool = False,
    batch_position: int = 0,
) -> tuple[int, int]:
    """``check_records`` in Python: v2.py's ``walk_records``, then the rules on its rows."""
    rows: list[RecordFieldsRow] = []
    walk_records(bytes(data), count, batch_position, rows)  # decodes whole, or raises
    if not rows:
        return 0, 0
    # The rules column-wise (two C-level comparisons for a valid batch), then, only when one
    # is broken, the record-by-record search for the first offender, which is what is told.
    if list(map(_OFFSET_DELTA, rows)) != list(range(len(rows))) or (
        require_keys and min(map(_KEY_SIZE, rows)) < 0
    ):
        for index, row in enumerate(rows):
            if row[1] != index:
                raise InvalidRecordError(
                    f"record {index} of batch at position {batch_position} has offset delta "
                    f"{row[1]}: the records of a batch must have offset deltas 0, 1, 2, "
                    "... in order"
                )
            if require_keys and row[3] < 0:
                raise InvalidRecordError(
                    f"record {index} of batch at position {batch_position} has no key: a "
                    "compacted topic cannot accept a record without a key"
                )
    return min(map(_TIMESTAMP_DELTA, rows)), max(map(_TIMESTAMP_DELTA, rows))


def check_batch(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    from_client: bool = True,
    require_keys: bool = False,
    offset_rule: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    position: int | None = None,
) -> CheckedBatch:
    """Check the records of the v2 batch ``header`` describes (its bytes are in ``buf``).

    ``from_client`` adds Kafka's count rules for produced batches; ``require_keys`` is a
    compacted topic's rule (never applied to control batches, whose keys are the marker
    type). Without ``offset_rule`` only the grammar is checked (a batch at rest may have
    lost records to compaction, so its offset deltas may have gaps). Raises as the module
    docstring says; the batch's CRC is looked at only when a check fails. ``position``
    is the batch's position for messages when not ``header.position`` (a batch read
    alone from a file).
    """
    try:
        return _check_batch(buf, header, from_client, require_keys and not header.is_control,
                            offset_rule, max_decompressed_size,
                            header.position if position is None else position)
    except KafkaError:
        header.ensure_valid(buf)  # damage in transit is reported as such
        raise


def _check_batch(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    from_client: bool,
    require_keys: bool,
    offset_rule: bool,
    max_decompressed_size: int,
    position: int,
) -> CheckedBatch:
    if header.magic != MAGIC_V2:
        raise ValueError(f"check_batch needs a magic 2 batch, not magic {header.magic}")
    count = header.records_count or 0
    if from_client:
        # Kafka's LogValidator.validateBatch, in its order.
        if header.last_offset_delta < 0:
            raise InvalidRecordError(
                f"batch at position {position} has an invalid offset range (lastOffsetDelta "
                f"{header.last_offset_delta})"
            )
        if count <= 0:
            raise InvalidRecordError(
                f"invalid reported count {count} for the record batch at position {position}"
            )
        if count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"inconsistent batch offset range and record count in batch at position "
                f"{position}: lastOffsetDelta {header.last_offset_delta}, {count} records"
            )
    elif count < 0:
        raise CorruptRecordError(f"invalid record count {count} in batch at position {position}")
    section = header.records_view(buf)
    codec = header.compression  # CorruptRecordError for ids 5-7
    data: bytes | memoryview = (
        decompress(codec, section, max_size=max_decompressed_size) if codec else section
    )
    if count * MIN_RECORD_SIZE > len(data):
        raise CorruptRecordError(
            f"batch at position {position} claims {count} records but its {len(data)} bytes "
            "of records cannot hold them"
        )
    try:
        low, high = check_records(data, count, require_keys=require_keys,
                                  batch_position=position)
    except InvalidRecordError:
        if offset_rule or require_keys:
            raise
        # The walk judges the rules only after the whole section decoded: it did.
        return CheckedBatch(header, data, None, None)
    if not count or header.timestamp_type is not TimestampType.CREATE_TIME:
        return CheckedBatch(header, data, None, None)
    return CheckedBatch(header, data, header.base_timestamp + low, header.base_timestamp + high)


def recompressed(buf: bytes | bytearray | memoryview, checked: CheckedBatch,
                 target: CompressionType) -> bytes:
    """The checked batch rewritten with the ``target`` codec (Kafka's broker-side
    recompression). The records are the producer's bytes, unchanged (their offset deltas
    are 0..n-1, checked), so only the section is recompressed and the header keeps every
    field but the codec bits, the length and the CRC: producer id, epoch, sequence,
    transactional flag, timestamps and their type are kept."""
    header = checked.header
    section = compress(target, checked.records)
    out = bytearray(RECORD_BATCH_OVERHEAD + len(section))
    out[:RECORD_BATCH_OVERHEAD] = memoryview(buf)[header.position:
                                                  header.position + RECORD_BATCH_OVERHEAD]
    out[RECORD_BATCH_OVERHEAD:] = section
    _INT32.pack_into(out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    attributes = (header.attributes & ~COMPRESSION_CODEC_MASK) | int(target)
    _INT16.pack_into(out, ATTRIBUTES_OFFSET, attributes)
    _UINT32.pack_into(out, CRC_OFFSET, crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
