"""Batch headers of Kafka's log: the v2 RecordBatch header and the v0/v1 message header.

This module owns the parts of the record formats that the hot path touches: it reads the
fixed-size header of each entry of a log (a v2 batch or a v0/v1 message), checks sizes and
CRCs, and patches the two fields a broker rewrites on append. It never decodes individual
records: that is ``records.v2`` / ``records.legacy`` territory.

Every entry of a Kafka log starts with the same 12 bytes (``LOG_OVERHEAD``)::

    offset: int64      v2: baseOffset; v0/v1: the message's offset (a wrapper's = last inner)
    length: int32      bytes that follow

then the magic byte sits at position 16 in all three formats.

v2 RecordBatch (KIP-98), all big-endian, 61 bytes before the records::

    baseOffset: int64                 0
    batchLength: int32                8   bytes after this field
    partitionLeaderEpoch: int32      12   not covered by the CRC
    magic: int8 (= 2)                16
    crc: uint32                      17   CRC-32C of attributes .. end of batch
    attributes: int16                21   bit 0-2 compression, 3 timestampType,
                                          4 isTransactional, 5 isControl, 6 hasDeleteHorizonMs
    lastOffsetDelta: int32           23
    baseTimestamp: int64             27
    maxTimestamp: int64              35
    producerId: int64                43
    producerEpoch: int16             51
    baseSequence: int32              53
    recordsCount: int32              57
    records                          61

v0/v1 message (a "shallow entry" of a MessageSet)::

    offset: int64                     0
    messageSize: int32                8
    crc: uint32                      12   CRC-32 (zlib) of magic .. end
    magic: int8 (0 or 1)             16
    attributes: int8                 17   bit 0-2 compression, bit 3 timestampType (v1)
    timestamp: int64                 18   v1 only
    key: bytes (int32 length), value: bytes (int32 length)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum

import crc32c as _crc32c

from klog.protocol.errors import CorruptRecordError

# Field positions, named as in Kafka's DefaultRecordBatch.
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

LOG_OVERHEAD = 12
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET
# Kafka's LegacyRecord.RECORD_OVERHEAD_V0: crc + magic + attributes + key len + value len.
# Any entry whose length field is smaller is corrupt, whatever its magic.
LEGACY_RECORD_OVERHEAD_V0 = 14
LEGACY_RECORD_OVERHEAD_V1 = 22
LEGACY_CRC_OFFSET = 12
LEGACY_ATTRIBUTES_OFFSET = 17
LEGACY_TIMESTAMP_OFFSET = 18

MAGIC_V0 = 0
MAGIC_V1 = 1
MAGIC_V2 = 2
CURRENT_MAGIC = MAGIC_V2

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40
LEGACY_TIMESTAMP_TYPE_MASK = 0x08

# Bigger than any batch Kafka accepts by default (message.max.bytes is ~1 MiB); a length
# field beyond this is treated as corruption by scanners unless the caller sets a bound.
DEFAULT_MAX_BATCH_SIZE = 2**31 - 1 - LOG_OVERHEAD

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
# Its fields as unpacked: BatchHeader's fields from base_offset to records_count.
_V2Fields = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]

# Partial views of the v2 header for the broker's hot paths, one (un)pack each:
# - the fields checked on produce (batchLength, magic, crc, attributes, lastOffsetDelta,
#   maxTimestamp, producerId, recordsCount; the others skipped);
# - baseOffset, batchLength, partitionLeaderEpoch: what a leader rewrites (outside the
#   CRC; batchLength is written back unchanged);
# - baseOffset, batchLength, lastOffsetDelta: what a read needs to step over a batch.
V2_PRODUCE_FIELDS = struct.Struct(">8xi4xbIhi8xqq6xi")
V2_BASE_LENGTH_EPOCH = struct.Struct(">qii")
V2_OFFSETS_HEAD = struct.Struct(">qi4x1x4x2xi")
assert V2_PRODUCE_FIELDS.size == RECORDS_OFFSET
assert V2_OFFSETS_HEAD.size == LAST_OFFSET_DELTA_OFFSET + 4
_LOG_OVERHEAD = struct.Struct(">qi")
_LEGACY_HEAD = struct.Struct(">qiIbb")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (``CompressionType.name``)."""
        return self.name.lower()


class TimestampType(IntEnum):
    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (``TimestampType.name``)."""
        return {
            TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
            TimestampType.CREATE_TIME: "CreateTime",
            TimestampType.LOG_APPEND_TIME: "LogAppendTime",
        }[self]


# CRC-32C (Castagnoli), the v2 batch checksum: the C extension's function itself, so the
# per-batch check costs no extra Python call.
crc32c = _crc32c.crc32c


# Not frozen on purpose: a frozen dataclass's __init__ costs ~8x more, and one header is
# built per batch on the produce path. Treat instances as values; never mutate one.
@dataclass(slots=True)
class BatchHeader:
    """The header of one log entry, parsed without touching its records.

    ``position`` is where the entry starts in the buffer it was read from. For v0/v1
    entries the v2-only fields hold Kafka's "none" values, ``base_offset`` is None for a
    compressed wrapper (knowing it needs decompression) and ``records_count`` is None
    likewise.
    """

    position: int
    base_offset: int | None
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int | None
    last_offset: int

    @property
    def size(self) -> int:
        """Bytes of the whole entry, LOG_OVERHEAD included (Kafka's sizeInBytes)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def end(self) -> int:
        """Position just past this entry."""
        return self.position + self.batch_length + LOG_OVERHEAD

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> CompressionType:
        codec = self.attributes & COMPRESSION_CODEC_MASK
        try:
            return CompressionType(codec)
        except ValueError:
            raise CorruptRecordError(
                f"unknown compression codec {codec} in batch at position {self.position}"
            ) from None

    @property
    def compression_id(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == MAGIC_V0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return self.magic >= MAGIC_V2 and bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic >= MAGIC_V2 and bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= MAGIC_V2 and bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    @property
    def last_sequence(self) -> int:
        """Kafka's DefaultRecordBatch.lastSequence: wraps at Integer.MAX_VALUE."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    def crc_span(self) -> tuple[int, int]:
        """(start, end) of the bytes the stored CRC covers, relative to the buffer."""
        if self.magic >= MAGIC_V2:
            return self.position + ATTRIBUTES_OFFSET, self.end
        return self.position + MAGIC_OFFSET, self.end

    def compute_crc(self, buf: bytes | bytearray | memoryview) -> int:
        """The CRC of this entry's bytes in ``buf`` (CRC-32C for v2, CRC-32 before)."""
        start, end = self.crc_span()
        view = memoryview(buf)[start:end]
        if self.magic >= MAGIC_V2:
            return _crc32c.crc32c(view)
        return zlib.crc32(view)

    def is_valid(self, buf: bytes | bytearray | memoryview) -> bool:
        """Kafka's isValid: the entry is long enough and its CRC matches."""
        return self.compute_crc(buf) == self.crc

    def ensure_valid(self, buf: bytes | bytearray | memoryview) -> None:
        """Raise CorruptRecordError unless the CRC matches (Kafka's ensureValid)."""
        computed = self.compute_crc(buf)
        if computed != self.crc:
            raise CorruptRecordError(
                f"record is corrupt (stored crc = {self.crc}, computed crc = {computed}) "
                f"in batch at position {self.position}"
            )

    def payload(self, buf: bytes | bytearray | memoryview) -> memoryview:
        """A view of the entry's bytes in ``buf`` (no copy)."""
        return memoryview(buf)[self.position : self.end]

    def records_view(self, buf: bytes | bytearray | memoryview) -> memoryview:
        """v2 only: a view of the (possibly compressed) records section."""
        if self.magic < MAGIC_V2:
            raise ValueError("records_view is for v2 batches; use records.legacy")
        return memoryview(buf)[self.position + RECORDS_OFFSET : self.end]


def _corrupt(position: int, message: str) -> CorruptRecordError:
    err = CorruptRecordError(f"{message} at position {position}")
    err.position = position
    return err


def read_batch_header(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> BatchHeader:
    """Parse the header of the entry at ``position``; the whole entry must be in ``buf``.

    Raises CorruptRecordError (with ``.position``) when the length field is out of
    bounds, the entry runs past the end of ``buf``, or the magic is unknown. The CRC is
    not checked here (see ``BatchHeader.ensure_valid``): scanning and checksumming are
    separate costs and callers choose.
    """
    available = len(buf) - position
    if available < LOG_OVERHEAD:
        raise _corrupt(position, f"only {available} bytes left, less than the log overhead")
    offset, length = _LOG_OVERHEAD.unpack_from(buf, position)
    _check_length(position, length, max_batch_size)
    if available < LOG_OVERHEAD + length:
        raise _corrupt(
            position, f"batch of {LOG_OVERHEAD + length} bytes but only {available} left"
        )
    return _parse_header(buf, position, offset, length)


def _check_length(position: int, length: int, max_batch_size: int) -> None:
    if length < LEGACY_RECORD_OVERHEAD_V0:
        raise _corrupt(
            position,
            f"record size {length} is less than the minimum record overhead "
            f"({LEGACY_RECORD_OVERHEAD_V0})",
        )
    if length > max_batch_size:
        raise _corrupt(
            position, f"record size {length} exceeds the largest allowable message size "
            f"({max_batch_size})"
        )


def _parse_header(
    buf: bytes | bytearray | memoryview, position: int, offset: int, length: int
) -> BatchHeader:
    magic = buf[position + MAGIC_OFFSET]
    if magic == MAGIC_V2:
        if length + LOG_OVERHEAD < RECORD_BATCH_OVERHEAD:
            raise _corrupt(
                position,
                f"v2 batch length {length} is smaller than the header "
                f"({RECORD_BATCH_OVERHEAD - LOG_OVERHEAD})",
            )
        # The header's fields in BatchHeader's order (its magic is the byte read above).
        fields: _V2Fields = _V2_HEADER.unpack_from(buf, position)
        last_offset_delta = fields[6]
        if last_offset_delta < 0:
            raise _corrupt(position, f"negative lastOffsetDelta {last_offset_delta}")
        return BatchHeader(position, *fields, fields[0] + last_offset_delta)
    if magic in (MAGIC_V0, MAGIC_V1):
        overhead = LEGACY_RECORD_OVERHEAD_V0 if magic == MAGIC_V0 else LEGACY_RECORD_OVERHEAD_V1
        if length < overhead:
            raise _corrupt(position, f"v{magic} message size {length} is less than {overhead}")
        _off, _len, crc, _m, attributes = _LEGACY_HEAD.unpack_from(buf, position)
        timestamp = (
            _INT64.unpack_from(buf, position + LEGACY_TIMESTAMP_OFFSET)[0]
            if magic == MAGIC_V1
            else NO_TIMESTAMP
        )
        compressed = attributes & COMPRESSION_CODEC_MASK != 0
        return BatchHeader(
            position,
            None if compressed else offset,
            length,
            NO_PARTITION_LEADER_EPOCH,
            magic,
            crc,
            attributes,
            0,
            timestamp,
            timestamp,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            None if compressed else 1,
            offset,
        )
    raise _corrupt(position, f"unknown magic value {magic}")


def iter_batch_headers(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    end: int | None = None,
    *,
    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
) -> Iterator[BatchHeader]:
    """Yield the header of each whole entry in ``buf[position:end]``.

    Stops quietly at a partial entry at the end (a torn write: fewer bytes than the length
    field promises); the caller sees that by comparing the last header's ``end`` with
    ``end``. Raises CorruptRecordError (with ``.position``) at the first entry whose
    length or magic is impossible. CRCs are not checked.
    """
    limit = len(buf) if end is None else end
    if limit > len(buf):
        raise ValueError("end is beyond the buffer")
    view = memoryview(buf)[:limit]
    while limit - position >= LOG_OVERHEAD:
        offset, length = _LOG_OVERHEAD.unpack_from(view, position)
        _check_length(position, length, max_batch_size)
        if limit - position < LOG_OVERHEAD + length:
            return
        header = _parse_header(view, position, offset, length)
        yield header
        position = header.end


def patch_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Write baseOffset of the v2 batch at ``position`` (outside the CRC)."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Write partitionLeaderEpoch of the v2 batch at ``position`` (outside the CRC)."""
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def patch_legacy_offset(buf: bytearray | memoryview, position: int, offset: int) -> None:
    """Write the offset of the v0/v1 entry at ``position`` (outside its CRC)."""
    _INT64.pack_into(buf, position, offset)
