"""v0/v1 messages (the pre-0.11 MessageSet): decoding one shallow entry, and builders.

This module owns the message grammar of magic 0 and 1 (the entry header is ``batch``'s)::

    offset: int64, messageSize: int32,
    crc: uint32 (CRC-32 of magic .. end), magic: int8, attributes: int8,
    timestamp: int64 (v1 only), key: int32 length + bytes, value: int32 length + bytes

A "shallow entry" is either one uncompressed message, or a compressed *wrapper* whose
value is a whole message set compressed with the codec in its attributes. Kafka's rules
for wrappers, which ``iter_legacy_records`` follows:

- the wrapper's offset is the offset of its last inner message;
- v1 inner offsets are relative: absolute = wrapper offset - last inner offset + inner
  offset (and a wrapper offset of 0, which some librdkafka versions produced, means the
  inner offsets are taken as they are); v0 inner offsets are absolute;
- if a v1 wrapper says LogAppendTime, every v1 inner message takes the wrapper's timestamp;
- inner messages must not be compressed, a wrapper must hold at least one, zstd is not
  allowed below magic 2, and a wrapper's value must not be null.

Each message's own CRC-32 is computed and reported as ``Record.is_valid``; a structure
that cannot be parsed raises CorruptRecordError.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import (
    COMPRESSION_CODEC_MASK,
    LEGACY_RECORD_OVERHEAD_V0,
    LEGACY_RECORD_OVERHEAD_V1,
    LEGACY_TIMESTAMP_TYPE_MASK,
    LOG_OVERHEAD,
    MAGIC_V0,
    MAGIC_V1,
    NO_TIMESTAMP,
    BatchHeader,
    CompressionType,
    TimestampType,
)
from klog.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, compress, decompress
from klog.protocol.records.record import Record, RecordTuple, make_record

_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_KEY_OFFSET_V0 = LOG_OVERHEAD + 6
_KEY_OFFSET_V1 = LOG_OVERHEAD + 14


class _Message:
    """One parsed v0/v1 message (internal; callers get Records)."""

    __slots__ = ("attributes", "crc", "is_valid", "key", "magic", "offset", "size", "timestamp",
                 "value")
    # The slots' types, for the checker (struct's unpack gives them untyped).
    attributes: int
    crc: int
    is_valid: bool
    key: bytes | None
    magic: int
    offset: int
    size: int
    timestamp: int
    value: bytes | None

    def __init__(self, buf: bytes | memoryview, position: int, end: int) -> None:
        """Parse the entry at ``position``; it must end at or before ``end``."""
        self.offset, size, self.crc, self.magic, self.attributes = _HEAD.unpack_from(buf, position)
        self.size = size + LOG_OVERHEAD
        if self.magic == MAGIC_V0:
            self.timestamp = NO_TIMESTAMP
            pos = position + _KEY_OFFSET_V0
        elif self.magic == MAGIC_V1:
            (self.timestamp,) = _INT64.unpack_from(buf, position + LOG_OVERHEAD + 6)
            pos = position + _KEY_OFFSET_V1
        else:
            raise CorruptRecordError(f"unknown magic {self.magic} in message at {position}")
        stop = position + self.size
        if stop > end:
            raise CorruptRecordError(f"message at {position} runs past its message set")
        self.key, pos = _read_bytes(buf, pos, stop, "key", position)
        self.value, pos = _read_bytes(buf, pos, stop, "value", position)
        # Bytes after the value are covered by the CRC and ignored, as Kafka does.
        self.is_valid = zlib.crc32(buf[position + LOG_OVERHEAD + 4 : stop]) == self.crc

    @property
    def codec(self) -> int:
        return self.attributes & COMPRESSION_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == MAGIC_V0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & LEGACY_TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME


def _read_bytes(
    buf: bytes | memoryview, pos: int, stop: int, what: str, position: int
) -> tuple[bytes | None, int]:
    if stop - pos < 4:
        raise CorruptRecordError(f"{what} length of message at {position} is truncated")
    (length,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if length < 0:
        # Kafka reads any negative length as null.
        return None, pos
    if length > stop - pos:
        raise CorruptRecordError(
            f"{what} of {length} bytes in message at {position} but only {stop - pos} left"
        )
    return bytes(buf[pos : pos + length]), pos + length


def iter_legacy_records(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[Record]:
    """Yield the records of the v0/v1 shallow entry ``header`` describes.

    An uncompressed message yields itself; a wrapper yields its inner messages with
    absolute offsets. The wrapper's own CRC is not checked here (``header.ensure_valid``);
    each yielded record's ``is_valid`` is its own message's CRC check.
    """
    if header.magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"iter_legacy_records needs a magic 0/1 entry, not {header.magic}")
    view = memoryview(buf)
    outer = _Message(view, header.position, header.end)
    if not outer.codec:
        return iter((_to_record(outer, outer.offset, outer.timestamp, outer.timestamp_type),))
    return iter(_inner_records(outer, max_decompressed_size))


def _to_record(
    message: _Message, offset: int, timestamp: int, timestamp_type: TimestampType
) -> Record:
    return make_record(
        offset,
        timestamp,
        message.key,
        message.value,
        (),
        -1,
        message.attributes,
        message.size,
        message.magic,
        message.crc,
        message.is_valid,
        timestamp_type,
    )


def _inner_records(wrapper: _Message, max_decompressed_size: int) -> list[Record]:
    where = f"compressed message set at offset {wrapper.offset}"
    if wrapper.codec > CompressionType.ZSTD:
        raise CorruptRecordError(f"unknown compression codec {wrapper.codec} ({where})")
    if wrapper.codec == CompressionType.ZSTD:
        raise CorruptRecordError(f"zstd is not allowed below magic 2 ({where})")
    if wrapper.value is None:
        raise CorruptRecordError(f"{where} has a null value")
    data = decompress(
        wrapper.codec, wrapper.value, max_size=max_decompressed_size, magic=wrapper.magic
    )
    inner: list[_Message] = []
    pos = 0
    end = len(data)
    # Whole set first: v1 offsets are relative to the last inner message.
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise CorruptRecordError(f"{where}: {end - pos} trailing bytes after message {pos}")
        (size,) = _INT32.unpack_from(data, pos + 8)
        if size < LEGACY_RECORD_OVERHEAD_V0 or size > end - pos - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"{where}: inner message at {pos} has size {size} with {end - pos} bytes left"
            )
        magic = data[pos + 16]
        if magic == MAGIC_V1 and size < LEGACY_RECORD_OVERHEAD_V1:
            raise CorruptRecordError(f"{where}: v1 inner message at {pos} is too short")
        message = _Message(data, pos, end)
        if message.codec:
            raise CorruptRecordError(f"{where}: inner messages must not be compressed")
        inner.append(message)
        pos += message.size
    if not inner:
        raise CorruptRecordError(f"{where} holds no inner messages")
    if wrapper.magic == MAGIC_V1 and wrapper.offset != 0:
        last_inner = inner[-1].offset
        if wrapper.offset < last_inner:
            raise CorruptRecordError(
                f"{where}: wrapper offset is less than the last inner offset {last_inner}"
            )
        base = wrapper.offset - last_inner
    else:
        base = 0
    wrapper_type = wrapper.timestamp_type
    records = []
    for message in inner:
        if message.magic == MAGIC_V0:
            timestamp, timestamp_type = NO_TIMESTAMP, TimestampType.NO_TIMESTAMP_TYPE
        elif wrapper_type is TimestampType.LOG_APPEND_TIME:
            timestamp, timestamp_type = wrapper.timestamp, wrapper_type
        elif wrapper_type is TimestampType.CREATE_TIME:
            timestamp, timestamp_type = message.timestamp, wrapper_type
        else:
            # A v1 message inside a v0 wrapper keeps its own timestamp and type.
            timestamp, timestamp_type = message.timestamp, message.timestamp_type
        offset = base + message.offset if wrapper.magic == MAGIC_V1 else message.offset
        records.append(_to_record(message, offset, timestamp, timestamp_type))
    return records


# ---------------------------------------------------------------------------------------
# building (tests and tools: brokers never write v0/v1 in klog)


def build_legacy_message(
    offset: int,
    magic: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    *,
    timestamp: int = NO_TIMESTAMP,
    attributes: int = 0,
) -> bytes:
    """One v0/v1 message with its log overhead and a correct CRC-32."""
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"legacy messages have magic 0 or 1, not {magic}")
    parts = [bytes((magic, attributes & 0xFF))]
    if magic == MAGIC_V1:
        parts.append(_INT64.pack(timestamp))
    for field in (key, value):
        if field is None:
            parts.append(_INT32.pack(-1))
        else:
            parts.append(_INT32.pack(len(field)))
            parts.append(bytes(field))
    body = b"".join(parts)
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def build_legacy_message_set(
    records: Iterable[RecordTuple],
    *,
    magic: int,
    compression: int | CompressionType = CompressionType.NONE,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """A v0/v1 message set from ``(timestamp, key, value[, headers])`` tuples.

    Uncompressed: one message per record at base_offset, base_offset + 1, ... Compressed:
    one wrapper whose offset is the last inner offset, holding the inner messages (v1:
    relative offsets 0..n-1, v0: absolute). With LogAppendTime (v1 only) the timestamps
    become ``log_append_time`` (default: the largest record timestamp) the way a broker
    rewrites them: each uncompressed message, or only the wrapper.
    """
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise ValueError(f"legacy message sets have magic 0 or 1, not {magic}")
    codec = CompressionType(compression)
    if codec is CompressionType.ZSTD:
        raise ValueError("zstd needs magic 2")
    items: list[tuple[int, bytes | bytearray | memoryview | None,
                      bytes | bytearray | memoryview | None]] = []
    for record in records:
        timestamp, key, value = record[0], record[1], record[2]
        if len(record) > 3 and record[3]:
            raise ValueError("v0/v1 messages have no headers")
        items.append((timestamp, key, value))
    if not items:
        return b""
    log_append = magic == MAGIC_V1 and timestamp_type is TimestampType.LOG_APPEND_TIME
    max_timestamp = max(int(t) for t, _k, _v in items) if magic == MAGIC_V1 else NO_TIMESTAMP
    append_time = max_timestamp if log_append_time is None else log_append_time
    type_bit = LEGACY_TIMESTAMP_TYPE_MASK if log_append else 0
    if codec is CompressionType.NONE:
        return b"".join(
            build_legacy_message(
                base_offset + i,
                magic,
                key,
                value,
                timestamp=(append_time if log_append else int(ts))
                if magic == MAGIC_V1
                else NO_TIMESTAMP,
                attributes=type_bit,
            )
            for i, (ts, key, value) in enumerate(items)
        )
    inner = b"".join(
        build_legacy_message(
            i if magic == MAGIC_V1 else base_offset + i,
            magic,
            key,
            value,
            timestamp=int(ts) if magic == MAGIC_V1 else NO_TIMESTAMP,
        )
        for i, (ts, key, value) in enumerate(items)
    )
    payload = compress(codec, inner, level=compression_level, magic=magic)
    return build_legacy_message(
        base_offset + len(items) - 1,
        magic,
        None,
        payload,
        timestamp=(append_time if log_append else max_timestamp),
        attributes=int(codec) | type_bit,
    )
