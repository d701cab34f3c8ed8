"""LogValidator's record checks for a v2 batch: what a broker verifies inside a batch.

This module owns the rules the records of a produced v2 batch must follow before a broker
stores them (Kafka's LogValidator, magic 2), and the rewrite of a checked batch into
another codec (broker-side recompression). A batch header and CRC say nothing about the
records: a record length of 2^40, an unknown codec or gzip garbage all pass them, and a
consumer then stalls on the batch forever. So every record is walked:

- the records section decodes in v2.py's grammar (``walk_records``): every length is
  consistent with the batch, every varint well formed, the header structure sound (a
  header key is never null), and nothing is left over -- else CorruptRecordError
  (CORRUPT_MESSAGE), for the whole batch;
- from a client (Kafka's validateBatch): lastOffsetDelta >= 0, recordsCount > 0 and
  recordsCount == lastOffsetDelta + 1 -- else InvalidRecordError, for the whole batch;
- the per-record rules, judged only for a section that decodes: the records' offset deltas
  are 0, 1, 2, ... in order (Kafka's "inner record doesn't have the expected offset"), on a
  compacted topic every record has a key ("Compacted topic cannot accept message without
  key"), and, when the caller gives the range the topic's timestamp limits allow now,
  every record's CreateTime timestamp lies in it (-1, no timestamp, excepted). Every
  record is judged (the first rule it breaks, in that order), and the refusal names each
  offender by its index in the batch (``KafkaError.record_errors``, KIP-467: Produce v8+
  answers them, so a client fails exactly those records): InvalidTimestampError
  (INVALID_TIMESTAMP) when any timestamp is out of range, else InvalidRecordError
  (INVALID_RECORD), as Kafka's processRecordErrors decides;
- the records' smallest and largest timestamp deltas are returned.

A compressed section is inflated to be checked, never beyond ``max_decompressed_size``
(RecordTooLargeError; a bomb stops within one chunk of the bound), and an unknown codec id is
CorruptRecordError. When a check fails the CRC is looked at first: a batch damaged in
transit gets Kafka's CRC message, as Kafka's ensureValid runs before the records are read.

The walk is ``check_records``: the Python reference, and its C twin
(klog/protocol/records/_records.c, same grammar, same rules, same record errors and
messages, no GIL held) used when it was built and KLOG_PURE_PYTHON is not set. A valid
section costs the reference a few column-wise comparisons (no per-record Python) and the C
twin two more integer comparisons per record; the record-by-record search for offenders
runs only when a rule is broken. Tests compare both on the same inputs.
"""

from __future__ import annotations

import contextlib
import os
import struct
import types
from dataclasses import dataclass
from operator import itemgetter

from klog.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    RecordError,
)
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

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NO_TIMESTAMP = -1  # a record without a timestamp: no limit applies to it

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
    require_keys: bool = False,
    offset_rule: bool = True,
    batch_position: int = 0,
    base_timestamp: int = 0,
    timestamp_range: tuple[int, int] | None = None,
    python: bool = False,
) -> tuple[int, int]:
    """Walk the ``count`` records of a (decompressed) v2 records section and apply the
    per-record rules; return the smallest and largest timestamp delta ((0, 0) for none).
    (Its arguments may be given by position: keywords cost the produce path of every
    small batch a few hundred instructions in CPython 3.11's argument binding.)

    The rules: offset deltas 0..n-1 in order (``offset_rule``), a key on every record
    (``require_keys``), and with ``timestamp_range`` (low, high) every record's timestamp
    (``base_timestamp`` + its delta, as an int64) within it unless it is -1.
    CorruptRecordError for a section that does not decode (the first malformation met);
    for one that decodes and breaks a rule, InvalidTimestampError if some timestamp is out
    of range, else InvalidRecordError, with ``record_errors`` naming every offender.

    The C twin (``_records.c``) does the walk when it is built, unless ``python`` asks for
    the reference in Python: v2.py's ``walk_records``, then the rules on its rows.
    """
    if timestamp_range is not None and not (
            timestamp_range[0] >= _INT64_MIN and timestamp_range[1] <= _INT64_MAX):
        # both sides compare int64 values
        timestamp_range = (max(timestamp_range[0], _INT64_MIN),
                           min(timestamp_range[1], _INT64_MAX))
    if native is not None and not python:
        answer = native.check_v2(data, count, offset_rule, require_keys, batch_position,
                                 base_timestamp, timestamp_range)
        if len(answer) == 2:  # valid: the timestamp deltas
            deltas: tuple[int, int] = answer
            return deltas
        raise _refusal(*answer)
    rows: list[RecordFieldsRow] = []
    walk_records(bytes(data), count, batch_position, rows)  # decodes whole, or raises
    if not rows:
        return 0, 0
    low = min(map(_TIMESTAMP_DELTA, rows))
    high = max(map(_TIMESTAMP_DELTA, rows))
    # The rules column-wise (a few C-level comparisons for a valid batch); only when one is
    # broken, the record-by-record search for every offender, which is what is told.
    if (offset_rule and list(map(_OFFSET_DELTA, rows)) != list(range(len(rows)))) or (
        require_keys and min(map(_KEY_SIZE, rows)) < 0
    ) or (timestamp_range is not None and not (
        # no int64 wrap-around between these, so every timestamp lies between them too
        timestamp_range[0] <= base_timestamp + low
        and base_timestamp + high <= timestamp_range[1]
    )):
        errors = _record_errors(rows, offset_rule, require_keys, base_timestamp,
                                timestamp_range, batch_position)
        if errors:
            raise _rejected(errors, len(rows), batch_position)
    return low, high


def _refusal(kind: int, message: str, errors: list[RecordError] | None) -> KafkaError:
    """The C twin's refusal as the exception the reference raises."""
    if kind == 1:
        return CorruptRecordError(message)
    exc: KafkaError = InvalidTimestampError(message) if kind == 3 else InvalidRecordError(message)
    exc.record_errors = tuple(errors or ())
    return exc


def _record_errors(
    rows: list[RecordFieldsRow],
    offset_rule: bool,
    require_keys: bool,
    base_timestamp: int,
    timestamp_range: tuple[int, int] | None,
    batch_position: int,
) -> list[tuple[int, bool, str]]:
    """Every record that breaks a rule, with the first rule it breaks: (index, whether it
    is the timestamp rule, message)."""
    errors: list[tuple[int, bool, str]] = []
    for index, row in enumerate(rows):
        where = f"record {index} of batch at position {batch_position}"
        if offset_rule and row[1] != index:
            errors.append((index, False, f"{where} has offset delta {row[1]}: the records "
                                         "of a batch must have offset deltas 0, 1, 2, ... "
                                         "in order"))
        elif require_keys and row[3] < 0:
            errors.append((index, False, f"{where} has no key: a compacted topic cannot "
                                         "accept a record without a key"))
        elif timestamp_range is not None:
            # Java's long arithmetic: the sum wraps around
            timestamp = (base_timestamp + row[0] - _INT64_MIN) % 2**64 + _INT64_MIN
            low, high = timestamp_range
            if timestamp != _NO_TIMESTAMP and not low <= timestamp <= high:
                errors.append((index, True, f"{where} has timestamp {timestamp}, outside "
                                            f"[{low}, {high}], the range the topic's "
                                            "timestamp limits allow now"))
    return errors


def _rejected(errors: list[tuple[int, bool, str]], count: int, batch_position: int
              ) -> KafkaError:
    """The refusal of a batch for its records' ``errors``: INVALID_TIMESTAMP if one of them
    is a timestamp's, else INVALID_RECORD (Kafka's processRecordErrors)."""
    message = (f"{len(errors)} of the {count} records of batch at position {batch_position} "
               f"were refused; the first: {errors[0][2]}")
    exc: KafkaError = InvalidTimestampError(message) if any(e[1] for e in errors) \
        else InvalidRecordError(message)
    exc.record_errors = tuple((index, text) for index, _, text in errors)
    return exc


def check_batch(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    from_client: bool = True,
    require_keys: bool = False,
    offset_rule: bool = True,
    timestamp_range: tuple[int, int] | None = None,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    position: int | None = None,
) -> CheckedBatch:
    """Check the records of the v2 batch ``header`` describes (its bytes are in ``buf``).

    ``from_client`` adds Kafka's count rules for produced batches; ``require_keys`` is a
    compacted topic's rule (never applied to control batches, whose keys are the marker
    type); ``timestamp_range`` (low, high) the topic's timestamp limits, applied to the
    records of a CreateTime batch. Without ``offset_rule`` the offset deltas are not judged
    (a batch at rest may have lost records to compaction, so they may have gaps). Raises as
    the module docstring says; the batch's CRC is looked at only when a check fails.
    ``position`` is the batch's position for messages when not ``header.position`` (a
    batch read alone from a file).
    """
    try:
        return _check_batch(buf, header, from_client, require_keys and not header.is_control,
                            offset_rule, timestamp_range, max_decompressed_size,
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
    timestamp_range: tuple[int, int] | None,
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
    create_time = header.timestamp_type is TimestampType.CREATE_TIME
    low, high = check_records(data, count, require_keys, offset_rule, position,
                              header.base_timestamp,
                              timestamp_range if create_time else None)
    if not count or not create_time:
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
