"""Records inside a v2 RecordBatch (KIP-98): decoding them and building batches.

This module owns the record grammar of magic 2. The 61-byte batch header is ``batch``'s;
here we read what follows it, decompressing the records section first when the batch's
attributes name a codec::

    Record =>
      length: varint                bytes of the record after this field
      attributes: int8              unused, 0
      timestampDelta: varlong       timestamp - batch baseTimestamp
      offsetDelta: varint           offset - batch baseOffset
      keyLength: varint             -1 for a null key
      key: byte[keyLength]
      valueLength: varint           -1 for a null value
      value: byte[valueLength]
      headerCount: varint
      Header => headerKeyLength: varint, headerKey: utf-8 string,
                headerValueLength: varint (-1 null), headerValue: byte[]

The grammar is written once, in ``walk_records``: one tight loop with the common one- and
two-byte varints inlined and everything in locals, which checks each record whole and
gives its fields as positions and sizes. Every reader is built on it: ``iter_records``
(Records, for dump --deep-iteration, compaction, down-conversion, internal topics),
``record_columns`` (metadata only), ``decode_record_fields`` (Spark's export) and
validate.py's check of produced batches (where the C twin _records.c is absent). The C
twins follow it through one header, klog/_v2records.h. Every length is checked against the
end of the record before use and slicing never reads past the data, so a hostile length
cannot allocate more than the batch holds.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from operator import add, mod
from typing import Any, NamedTuple

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    CompressionType,
    TimestampType,
    crc32c,
)
from klog.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, compress, decompress
from klog.protocol.records.record import Header, Record, RecordTuple, _MutableRecord
from klog.protocol.records.varint import (
    read_unsigned_varint,
    read_unsigned_varlong,
    write_varint,
    write_varlong,
)

# length(1) + attributes(1) + timestampDelta(1) + offsetDelta(1) + keyLength(1) +
# valueLength(1) + headerCount(1): no record is smaller, so a count beyond bytes / 7 is a lie.
MIN_RECORD_SIZE = 7
_MIN_BODY_SIZE = MIN_RECORD_SIZE - 1

_SEQUENCE_MODULUS = 2**31

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")


def iter_records(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[Record]:
    """Yield the records of the v2 batch ``header`` describes (its bytes are in ``buf``).

    The batch CRC is not checked here (``header.ensure_valid(buf)`` does that); a
    corrupt record structure raises CorruptRecordError, a records section that inflates
    beyond ``max_decompressed_size`` raises RecordTooLargeError. Decompression and the
    count check happen when this is called, before the first record is yielded.
    """
    count = header.records_count
    if count is None:  # only a v0/v1 compressed wrapper has none: legacy.py reads those
        raise ValueError(f"not a v2 batch header (magic {header.magic})")
    data = records_data(buf, header, max_decompressed_size)
    timestamp_type = header.timestamp_type
    log_append_time = (
        header.max_timestamp if timestamp_type is TimestampType.LOG_APPEND_TIME else None
    )
    return _decode(
        data,
        count,
        header.base_offset or 0,
        header.base_timestamp,
        log_append_time,
        header.base_sequence,
        timestamp_type,
        header.position,
    )


def records_data(
    buf: bytes | bytearray | memoryview, header: BatchHeader, max_decompressed_size: int
) -> bytes:
    """The records section of a v2 batch, decompressed, after the checks every reader makes."""
    if header.magic != MAGIC_V2:
        raise ValueError(f"v2.iter_records needs a magic 2 batch, not magic {header.magic}")
    count = header.records_count
    if count is None or count < 0:
        raise CorruptRecordError(
            f"invalid record count {count} in batch at position {header.position}"
        )
    section = header.records_view(buf)
    codec = header.compression  # CorruptRecordError for ids 5-7
    data = (
        decompress(codec, section, max_size=max_decompressed_size) if codec else bytes(section)
    )
    if count * MIN_RECORD_SIZE > len(data):
        raise CorruptRecordError(
            f"batch at position {header.position} claims {count} records but its "
            f"{len(data)} bytes of records cannot hold them"
        )
    return data


def _decode(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    base_sequence: int,
    timestamp_type: TimestampType,
    batch_position: int,
) -> Iterator[Record]:
    # The walk first (a malformation is raised after the records before it are yielded, as
    # Kafka's dump prints them), then Record construction in locals: this loop is the cost
    # of every decoded record.
    rows: list[RecordFieldsRow] = []
    error: CorruptRecordError | None = None
    try:
        walk_records(data, count, batch_position, rows)
    except CorruptRecordError as exc:
        error = exc
    new = object.__new__
    mutable = _MutableRecord
    record_class = Record
    has_sequence = base_sequence >= 0
    seq_mod = _SEQUENCE_MODULUS
    record_start = 0
    for (timestamp_delta, offset_delta, key_pos, key_size, value_pos, value_size, headers,
         body, stop) in rows:
        r = new(mutable)
        r.offset = base_offset + offset_delta
        r.timestamp = (
            base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        )
        r.key = data[key_pos : key_pos + key_size] if key_size >= 0 else None
        r.value = data[value_pos : value_pos + value_size] if value_size >= 0 else None
        r.headers = headers
        r.sequence = (base_sequence + offset_delta) % seq_mod if has_sequence else -1
        r.attributes = data[body]
        r.size_in_bytes = stop - record_start
        record_start = stop
        r.magic = 2
        r.crc = None
        r.is_valid = True
        r.timestamp_type = timestamp_type
        # Retyped to Record (record.py's make_record says why); mypy cannot follow it.
        r.__class__ = record_class  # type: ignore[assignment]
        yield r  # type: ignore[misc]
    if error is not None:
        raise error


class RecordColumns(NamedTuple):
    """The metadata of a batch's records, one sequence per field (record i is index i):
    what `dump-segment --deep-iteration` shows of a record. Sizes are -1 for null."""

    offsets: list[int]
    timestamps: Sequence[int]
    key_sizes: Sequence[int]
    value_sizes: Sequence[int]
    sequences: Sequence[int]
    header_keys: Sequence[tuple[str, ...]]


# zigzag decoding of every one- and two-byte varint, so the hot loop does a tuple lookup.
_ZIGZAG = tuple((raw >> 1) ^ -(raw & 1) for raw in range(1 << 14))

#: What ``walk_records`` yields for each record: (timestampDelta, offsetDelta, key position,
#: key size, value position, value size, headers, position of the attributes byte, end of
#: the record). Sizes are -1 for null (any negative length is null, as in Java), positions
#: are in the records section. A plain tuple: a NamedTuple would cost a Python-level
#: ``__new__`` per record on the produce path's Python fallback.
RecordFieldsRow = tuple[int, int, int, int, int, int, tuple[Header, ...], int, int]


def walk_records(
    data: bytes,
    count: int,
    batch_position: int,
    rows: list[RecordFieldsRow],
    batch_unit: str = "position",
) -> None:
    """The v2 record grammar: append the fields of each of the ``count`` records of the
    (decompressed) records section ``data`` to ``rows``, a record once it is wholly checked.

    Every decoder of v2 records is built on this walk -- ``iter_records``,
    ``record_columns``, ``decode_record_fields`` and validate.py's check (the produce
    path's Python fallback) -- and the C twins (klog/_v2records.h, included by
    protocol/records/_records.c and spark/_columns.c) follow it read for read, message for
    message. The first malformation raises CorruptRecordError, naming the batch as "batch
    at {batch_unit} {batch_position}"; ``rows`` then holds the records before it (which
    ``iter_records`` yields before raising, as Kafka's dump prints them). Rows go to a list
    the caller owns rather than out of a generator: a resumption per record would cost the
    produce path's Python fallback a tenth of its time.
    """
    # Hot loop: locals only, zigzag by table, the one- and two-byte varints inlined (the
    # common case: lengths, offset deltas and timestamp deltas below 8192) with the full
    # readers as fallback, nothing sliced. Within a record the field checks are folded into
    # one: positions only grow, so a key or value that overruns the record leaves ``pos``
    # past ``stop`` and fails the check before the headers (or indexes past the section:
    # truncated). A record is yielded only after all its checks, so its slices are in it.
    end = len(data)
    pos = 0
    zz = _ZIGZAG
    read_uvarint = read_unsigned_varint
    read_uvarlong = read_unsigned_varlong
    no_headers: tuple[Header, ...] = ()
    append = rows.append
    index = 0
    try:
        for index in range(count):
            # length
            b = data[pos]
            if b < 0x80:
                pos += 1
                stop = pos + zz[b]
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    pos += 2
                    stop = pos + zz[(b & 0x7F) | (b2 << 7)]
                else:
                    b, pos = read_uvarint(data, pos)
                    stop = pos + ((b >> 1) ^ -(b & 1))
            if stop > end or stop - pos < _MIN_BODY_SIZE:
                raise CorruptRecordError(
                    f"record {index} of batch at {batch_unit} {batch_position} has a bad length"
                )
            body = pos
            # attributes (read by the caller that wants it), timestampDelta (varlong)
            b = data[pos + 1]
            if b < 0x80:
                pos += 2
                timestamp_delta = zz[b]
            else:
                b2 = data[pos + 2]
                if b2 < 0x80:
                    pos += 3
                    timestamp_delta = zz[(b & 0x7F) | (b2 << 7)]
                else:
                    b, pos = read_uvarlong(data, pos + 1)
                    timestamp_delta = (b >> 1) ^ -(b & 1)
            # offsetDelta
            b = data[pos]
            if b < 0x80:
                pos += 1
                offset_delta = zz[b]
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    pos += 2
                    offset_delta = zz[(b & 0x7F) | (b2 << 7)]
                else:
                    b, pos = read_uvarint(data, pos)
                    offset_delta = (b >> 1) ^ -(b & 1)
            # key: null is the common case (zigzag(-1) == 1)
            b = data[pos]
            if b == 1:
                pos += 1
                key_pos = pos
                key_size = -1
            else:
                if b < 0x80:
                    pos += 1
                    key_size = zz[b]
                else:
                    b2 = data[pos + 1]
                    if b2 < 0x80:
                        pos += 2
                        key_size = zz[(b & 0x7F) | (b2 << 7)]
                    else:
                        b, pos = read_uvarint(data, pos)
                        key_size = (b >> 1) ^ -(b & 1)
                key_pos = pos
                if key_size < 0:
                    key_size = -1
                else:
                    pos += key_size
            # value
            b = data[pos]
            if b < 0x80:
                pos += 1
                value_size = zz[b]
            else:
                b2 = data[pos + 1]
                if b2 < 0x80:
                    pos += 2
                    value_size = zz[(b & 0x7F) | (b2 << 7)]
                else:
                    b, pos = read_uvarint(data, pos)
                    value_size = (b >> 1) ^ -(b & 1)
            value_pos = pos
            if value_size < 0:
                value_size = -1
            else:
                pos += value_size
            # headers
            if pos >= stop:
                raise CorruptRecordError(
                    f"record {index} of batch at {batch_unit} {batch_position} overruns its "
                    "length"
                )
            if data[pos] == 0:
                pos += 1
                headers = no_headers
            else:
                headers, pos = _read_headers(data, pos, stop, index, batch_position, batch_unit)
            if pos != stop:
                raise CorruptRecordError(
                    f"record {index} of batch at {batch_unit} {batch_position} does not fill "
                    "its length"
                )
            append((timestamp_delta, offset_delta, key_pos, key_size, value_pos, value_size,
                    headers, body, stop))
    except IndexError:
        raise CorruptRecordError(
            f"record {index} of batch at {batch_unit} {batch_position} is truncated"
        ) from None
    if pos != end:
        raise CorruptRecordError(
            f"batch at {batch_unit} {batch_position} has {end - pos} bytes after its "
            f"{count} records (incorrect declared batch size)"
        )


def record_columns(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    *,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> RecordColumns:
    """The metadata of every record of the v2 batch ``header`` describes, without Records.

    The same walk as ``iter_records`` with the same checks (a batch it rejects, this
    rejects with CorruptRecordError or RecordTooLargeError), but keys and values are
    skipped rather than copied, no Record is built, and the per-batch arithmetic (base
    offset, base timestamp, sequence) is done column-wise in C. All or nothing: on a
    corrupt record nothing is returned; ``iter_records`` yields the records before it.
    """
    data = records_data(buf, header, max_decompressed_size)
    count = header.records_count or 0
    rows: list[RecordFieldsRow] = []
    walk_records(data, count, header.position, rows)
    if not rows:
        return RecordColumns([], [], [], [], [], [])
    timestamp_deltas, offset_deltas, _, key_sizes, _, value_sizes, headers, _, _ = zip(
        *rows, strict=True
    )
    # Records without headers share one empty tuple, which is also their keys.
    header_keys = (
        tuple([tuple([h[0] for h in hs]) if hs else () for hs in headers])
        if any(headers) else headers
    )
    base_offset = header.base_offset or 0
    offsets = list(map(add, offset_deltas, repeat(base_offset, count)))
    if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
        timestamps: Sequence[int] = [header.max_timestamp] * count
    else:
        timestamps = list(map(add, timestamp_deltas, repeat(header.base_timestamp, count)))
    base_sequence = header.base_sequence
    if base_sequence >= 0:
        sequences: Sequence[int] = list(
            map(
                mod,
                map(add, offset_deltas, repeat(base_sequence, count)),
                repeat(_SEQUENCE_MODULUS, count),
            )
        )
    else:
        sequences = [-1] * count
    return RecordColumns(offsets, timestamps, key_sizes, value_sizes, sequences, header_keys)


class RecordFields(NamedTuple):
    """The records of a v2 records section as columns (record i is index i)."""

    keys: list[bytes | None]
    values: list[bytes | None]
    offsets: list[int]
    timestamps: list[int]
    #: Each record's headers; empty unless asked for.
    headers: list[tuple[Header, ...]]
    #: An offset >= ``end`` was met: decoding stopped there.
    past_end: bool


def decode_record_fields(
    data: bytes, count: int, base_offset: int, log_append: bool, base_ts: int, *,
    start: int, end: int, last_offset: int, include_headers: bool = False,
) -> RecordFields:
    """Keys, values, offsets and timestamps of the records with offsets in [start, end)
    of a decompressed v2 records section (``records_data``), as columns, with no Record.

    ``base_ts`` is the batch's base timestamp, or with ``log_append`` (LogAppendTime) its
    max timestamp, which every record then takes. Decoding stops at the first record whose
    offset reaches ``end`` (that record is checked, those after it are not read). The
    checks are ``walk_records``'; CorruptRecordError names the batch by ``base_offset``.
    The Python reference of klog/spark/_columns.c's ``decode_v2`` (Spark's export).
    """
    whole = base_offset >= start and last_offset < end
    rows: list[RecordFieldsRow] = []
    try:
        walk_records(data, count, base_offset, rows, "offset")
    except CorruptRecordError:
        # Reading stops at the first record at or past ``end`` (and ``start``): a
        # malformation after it (or bytes after the last record) is not met.
        limit = max(start, end) - base_offset
        if whole or all(row[1] < limit for row in rows):
            raise
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    offsets: list[int] = []
    timestamps: list[int] = []
    headers: list[tuple[Header, ...]] = []
    k_append, v_append, o_append, t_append = (
        keys.append, values.append, offsets.append, timestamps.append)
    past_end = False
    # One loop appending to four lists (measured faster than columns by zip here).
    for (ts_delta, offset_delta, key_pos, key_size, value_pos, value_size, record_headers,
         _, _) in rows:
        offset = base_offset + offset_delta
        if not whole:
            if offset < start:
                continue
            if offset >= end:
                past_end = True
                break
        k_append(data[key_pos : key_pos + key_size] if key_size >= 0 else None)
        v_append(data[value_pos : value_pos + value_size] if value_size >= 0 else None)
        o_append(offset)
        t_append(base_ts if log_append else base_ts + ts_delta)
        if include_headers:
            headers.append(record_headers)
    return RecordFields(keys, values, offsets, timestamps, headers, past_end)


def _read_headers(
    data: bytes, pos: int, stop: int, index: int, batch_position: int, batch_unit: str
) -> tuple[tuple[Header, ...], int]:
    raw, pos = read_unsigned_varint(data, pos)
    count = (raw >> 1) ^ -(raw & 1)
    # Each header takes at least two bytes (two lengths), which bounds the loop.
    if count < 0 or count * 2 > stop - pos:
        raise CorruptRecordError(
            f"invalid header count {count} in record {index} of batch at {batch_unit} "
            f"{batch_position}"
        )
    headers = []
    for _ in range(count):
        raw, pos = read_unsigned_varint(data, pos)
        key_length = (raw >> 1) ^ -(raw & 1)
        if key_length < 0 or pos + key_length > stop:
            raise CorruptRecordError(
                f"invalid header key length {key_length} in record {index} of batch at "
                f"{batch_unit} {batch_position}"
            )
        # Java decodes header keys leniently (malformed UTF-8 becomes U+FFFD); so do we,
        # so that a dump shows what Kafka would show instead of failing.
        header_key = data[pos : pos + key_length].decode("utf-8", "replace")
        pos += key_length
        raw, pos = read_unsigned_varint(data, pos)
        value_length = (raw >> 1) ^ -(raw & 1)
        if value_length >= 0:
            if pos + value_length > stop:
                raise CorruptRecordError(
                    f"header value of {value_length} bytes overruns record {index} of "
                    f"batch at {batch_unit} {batch_position}"
                )
            header_value: bytes | None = data[pos : pos + value_length]
            pos += value_length
        else:
            header_value = None
        headers.append((header_key, header_value))
    return tuple(headers), pos


# ---------------------------------------------------------------------------------------
# building


def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
    attributes: int = 0,
) -> bytes:
    """One record in the v2 grammar, length prefix included."""
    parts = [
        bytes((attributes & 0xFF,)),
        write_varlong(timestamp_delta),
        write_varint(offset_delta),
    ]
    for field in (key, value):
        if field is None:
            parts.append(b"\x01")  # zigzag(-1)
        else:
            parts.append(write_varint(len(field)))
            parts.append(bytes(field))
    parts.append(write_varint(len(headers)))
    for header_key, header_value in headers:
        encoded_key = header_key.encode("utf-8")
        parts.append(write_varint(len(encoded_key)))
        parts.append(encoded_key)
        if header_value is None:
            parts.append(b"\x01")
        else:
            parts.append(write_varint(len(header_value)))
            parts.append(bytes(header_value))
    body = b"".join(parts)
    return write_varint(len(body)) + body


class BatchBuilder:
    """Builds one v2 RecordBatch, as a producer (or a broker re-writing one) would.

    Not thread-safe; one builder per batch. Records are encoded as they are appended;
    ``build`` compresses the records section when asked and computes the CRC-32C.
    """

    def __init__(
        self,
        *,
        magic: int = MAGIC_V2,
        compression: int | CompressionType = CompressionType.NONE,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        base_offset: int = 0,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        log_append_time: int | None = None,
        compression_level: int | None = None,
    ) -> None:
        if magic != MAGIC_V2:
            raise ValueError(
                f"BatchBuilder writes magic 2 only; use legacy.build_legacy_message_set "
                f"for magic {magic}"
            )
        if timestamp_type is TimestampType.NO_TIMESTAMP_TYPE:
            raise ValueError("a v2 batch has CreateTime or LogAppendTime")
        self.compression = CompressionType(compression)
        self.timestamp_type = TimestampType(timestamp_type)
        self.base_offset = base_offset
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.log_append_time = log_append_time
        self.compression_level = compression_level
        self._records: list[bytes] = []
        self._base_timestamp: int | None = None
        self._max_timestamp = NO_TIMESTAMP
        self._last_offset_delta = -1

    def __len__(self) -> int:
        return len(self._records)

    def append(
        self,
        timestamp: int,
        key: bytes | bytearray | memoryview | None,
        value: bytes | bytearray | memoryview | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        *,
        offset: int | None = None,
    ) -> int:
        """Add a record; returns its offsetDelta.

        ``offset`` (absolute) leaves gaps, as compaction does; by default records take
        consecutive offsets.
        """
        if offset is None:
            offset_delta = self._last_offset_delta + 1
        else:
            offset_delta = offset - self.base_offset
            if offset_delta <= self._last_offset_delta:
                raise ValueError(f"offset {offset} is not above the previous record's")
        if self._base_timestamp is None:
            # Kafka's baseTimestamp is the first record's timestamp.
            self._base_timestamp = timestamp
        self._records.append(
            encode_record(offset_delta, timestamp - self._base_timestamp, key, value, headers)
        )
        self._max_timestamp = max(self._max_timestamp, timestamp)
        self._last_offset_delta = offset_delta
        return offset_delta

    def build(self) -> bytes:
        """The whole batch, LOG_OVERHEAD included, with a correct CRC-32C."""
        records = b"".join(self._records)
        if self.compression is not CompressionType.NONE:
            records = compress(self.compression, records, level=self.compression_level)
        attributes = int(self.compression)
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            attributes |= TIMESTAMP_TYPE_MASK
        if self.is_transactional:
            attributes |= TRANSACTIONAL_FLAG_MASK
        if self.is_control:
            attributes |= CONTROL_FLAG_MASK
        base_timestamp = NO_TIMESTAMP if self._base_timestamp is None else self._base_timestamp
        max_timestamp = self._max_timestamp
        if self.timestamp_type is TimestampType.LOG_APPEND_TIME:
            max_timestamp = (
                int(time.time() * 1000) if self.log_append_time is None else self.log_append_time
            )
        batch = bytearray(RECORD_BATCH_OVERHEAD + len(records))
        _V2_HEADER.pack_into(
            batch,
            0,
            self.base_offset,
            len(batch) - LOG_OVERHEAD,
            self.partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            max(self._last_offset_delta, 0),
            base_timestamp,
            max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            len(self._records),
        )
        batch[RECORD_BATCH_OVERHEAD:] = records
        crc = crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])
        struct.pack_into(">I", batch, CRC_OFFSET, crc)
        return bytes(batch)


def build_batch(
    records: Iterable[RecordTuple],
    **kwargs: Any,  # Any: BatchBuilder's keyword arguments, passed through (it checks them)
) -> bytes:
    """Build one v2 batch from ``(timestamp, key, value[, headers])`` tuples.

    Keyword arguments are BatchBuilder's.
    """
    builder = BatchBuilder(**kwargs)
    for record in records:
        builder.append(*record)
    return builder.build()
