"""LogValidator: what a leader checks of the record batches it is asked to append, once.

This module owns the rules a partition's leader applies to records before its log stores
them (Kafka's LogValidator with UnifiedLog's analyzeAndValidateRecords), and the rewrites
those rules call for. ``validate_records`` takes a produce request's (or the broker's own)
bytes for one partition, the topic's LogConfig, who wrote them (``AppendOrigin``) and the
time, and returns ``ValidatedRecords``: the bytes to append, in a writable buffer the log
patches offsets into, with what the log needs of each batch. Each batch is validated once,
in one pass:

- framing: whole batches, nothing left over, at least one (CorruptRecordError,
  InvalidRecordError); from a client only magic 2 (a Produce v0-v2 client's v0/v1 message
  set is first converted to one v2 batch in the topic's codec and timestamp type);
- size: each batch within max.message.bytes (RecordTooLargeError), again after a rewrite;
- the records: every record of a v2 batch walked (klog/protocol/records/validate.py, in C
  where built): the count rules for a client's batch, the offset deltas, keys on a
  compacted topic, each CreateTime timestamp within the topic's limits (KIP-467: the
  refusal names the offending records), and the header's base and max timestamps;
- the CRC (CORRUPT_MESSAGE; a batch whose records fail is judged by its CRC first, so
  damage in transit is reported as such);
- a client may not write control batches; a compressed v0/v1 wrapper cannot get offsets;
- recompression when the topic's compression.type names a codec other than the batch's.

The common produce -- one uncompressed v2 batch, no broker-side compression, no timestamp
limit -- is judged from one unpack of its header fields, one CRC and one walk of its
records (the same checks with the same outcome), and when it has no producer id the log
appends it from those fields without building a header (``ValidatedRecords.plain``).

Pure and thread-safe: it reads only its arguments, so the broker runs the heavy cases
(inflating, recompressing, converting) in worker threads; ``inline_weight`` tells which
those are. ``check_batch_headers`` is the sizes-and-CRC half alone, for a follower's
append of batches its leader validated.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from klog.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    RecordTooLargeError,
    UnsupportedForMessageFormatError,
)
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PRODUCER_ID,
    RECORD_BATCH_OVERHEAD,
    V2_PRODUCE_FIELDS,
    BatchHeader,
    CompressionType,
    TimestampType,
    crc32c,
    iter_batch_headers,
    read_batch_header,
)
from klog.protocol.records.convert import is_legacy, up_convert
from klog.protocol.records.v2 import MIN_RECORD_SIZE
from klog.protocol.records.validate import check_batch, check_records, recompressed
from klog.storage.config import LogConfig

#: A partition's record batches as a produce request or a follower fetch carries them.
RecordsBuffer = bytes | bytearray | memoryview

_new_tuple = tuple.__new__  # builds a NamedTuple without its Python-level __new__
_unpack_produce_fields = V2_PRODUCE_FIELDS.unpack_from

CODEC_BY_NAME = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


class AppendOrigin(enum.Enum):
    """Who asks for an append (Kafka's AppendOrigin): a producer (Produce), the broker's
    own coordinators (offsets, transaction state, transaction markers), or a follower
    copying its leader's batches."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


_CLIENT = AppendOrigin.CLIENT  # read once per produce: a module constant is cheaper


class ValidatedRecords(NamedTuple):
    """Records ``validate_records`` passed, as the log appends them.

    ``records`` is writable (the producer's buffer itself when it was, else one copy, or
    the rewritten batches). ``plain`` holds the header fields ``V2_PRODUCE_FIELDS`` reads
    (batchLength, magic, crc, attributes, lastOffsetDelta, maxTimestamp, producerId,
    recordsCount) when the records are one v2 batch without a producer id and not a control
    batch: the log's one-pass append. ``headers``: each batch's header (None when ``plain``
    was all the validation needed). ``config`` is the LogConfig they were validated
    against: a log whose config changed since validates them again.
    """

    records: bytearray | memoryview
    headers: list[BatchHeader] | None
    plain: tuple[int, ...] | None
    origin: AppendOrigin
    config: LogConfig


def target_codec(config: LogConfig) -> CompressionType | None:
    """The codec compression.type asks the broker to write, or None (``producer``)."""
    name = config.compression_type
    return None if name == "producer" else CODEC_BY_NAME[name]


def _writable(records: RecordsBuffer) -> bytearray | memoryview:
    """``records`` itself when it can be patched in place, else one copy of it."""
    if type(records) is bytearray:
        return records
    if type(records) is memoryview and not records.readonly:
        return records
    return bytearray(records)


def validate_records(records: RecordsBuffer, config: LogConfig, origin: AppendOrigin,
                     now: int) -> ValidatedRecords:
    """Validate one partition's ``records`` as a leader appends them (see the module
    docstring); raises the KafkaError a producer is answered with. ``now`` is the broker's
    time in ms (the timestamp limits are relative to it; up-conversion stamps it)."""
    n = len(records)
    if (n >= RECORD_BATCH_OVERHEAD and config.compression_type == "producer"
            and config.timestamp_limits is None):
        # The common case: nothing is rewritten, one batch, uncompressed. Its header
        # fields are read in place rather than through a BatchHeader.
        fields = _unpack_produce_fields(records, 0)
        length, magic, crc, attributes, delta, _max_ts, producer_id, count = fields
        if (length + LOG_OVERHEAD == n and magic == MAGIC_V2 and delta >= 0
                and count == delta + 1 and not attributes & COMPRESSION_CODEC_MASK
                and n <= config.max_message_bytes
                and count * MIN_RECORD_SIZE <= n - RECORD_BATCH_OVERHEAD):
            view = records if type(records) is memoryview else memoryview(records)
            if crc32c(view[ATTRIBUTES_OFFSET:]) != crc:
                read_batch_header(view).ensure_valid(view)  # raises with Kafka's message
            control = attributes & CONTROL_FLAG_MASK
            # every record, by position (see check_records)
            check_records(view[RECORD_BATCH_OVERHEAD:], count, not control and config.compact)
            if control:
                if origin is _CLIENT:
                    raise InvalidRecordError("clients are not allowed to write control records")
            elif producer_id == NO_PRODUCER_ID:
                return _new_tuple(ValidatedRecords,
                                  (_writable(records), None, fields, origin, config))
            return _new_tuple(ValidatedRecords, (_writable(records), [read_batch_header(view)],
                                                 None, origin, config))
    return _validate_batches(records, config, origin, now)


def _validate_batches(records: RecordsBuffer, config: LogConfig, origin: AppendOrigin,
                      now: int) -> ValidatedRecords:
    """``validate_records`` batch by batch: anything but the common case."""
    view = memoryview(records)
    from_client = origin is _CLIENT
    if from_client and is_legacy(view):
        # Produce v0-v2 from a pre-0.11 client: its v0/v1 message set becomes one v2
        # batch (LogValidator's conversion; Produce v3+ never gets here with one: the
        # handler refuses it), then is checked as any v2 batch is.
        return _validate_batches(_up_convert(view, config, now), config, origin, now)
    target = target_codec(config)
    limits = config.timestamp_limits
    require_keys = config.compact
    max_bytes = config.max_message_bytes
    # The range a CreateTime timestamp must lie in (Kafka's validateTimestamp): each
    # record's is judged by the walk (offenders named, KIP-467), the header's base and
    # max timestamps here (the log keeps the producer's max timestamp, which a time
    # index and time retention then go by).
    window = None if limits is None else (now - limits[0], now + limits[1])
    # Recompressed batches are written out as each is checked, so that one inflated
    # section at a time is held, never a whole request's.
    out = bytearray() if target is not None else None
    rewritten = False
    headers: list[BatchHeader] = []
    consumed = 0
    for h in iter_batch_headers(view):
        if from_client and h.magic != MAGIC_V2:
            raise InvalidRecordError(
                "produce requests v3+ may only contain record batches of magic 2"
            )
        if h.size > max_bytes:
            raise _too_large(h, max_bytes)  # before anything is inflated
        batch = None
        if h.magic == MAGIC_V2:
            batch = check_batch(view, h, from_client=from_client,
                                require_keys=require_keys, timestamp_range=window)
        if window is not None and h.timestamp_type is TimestampType.CREATE_TIME:
            for ts in (h.base_timestamp, h.max_timestamp):
                if ts is not None and ts >= 0 and not window[0] <= ts <= window[1]:
                    raise InvalidTimestampError(
                        f"timestamp {ts} of the batch at position {h.position} is out of "
                        f"range: the topic's timestamp limits allow [{window[0]}, "
                        f"{window[1]}] now"
                    )
        _ensure_crc(view, h)
        if h.is_control and from_client:
            raise InvalidRecordError("clients are not allowed to write control records")
        if h.magic < MAGIC_V2 and h.attributes & COMPRESSION_CODEC_MASK:
            raise UnsupportedForMessageFormatError(
                "compressed v0/v1 message sets are not supported: their inner offsets "
                "need recompression (produce with magic v2)"
            )
        if out is not None:
            assert target is not None
            if batch is None or h.is_control or h.compression is target:
                out += view[h.position:h.end]  # v0/v1 entries (never a client's) too
            else:
                # Its CRC was checked above: the rewrite computes a new one, which must
                # not launder bytes damaged in transit.
                out += recompressed(view, batch, target)
                rewritten = True
        headers.append(h)
        consumed = h.end
    _ensure_whole(view, consumed, headers)
    if rewritten:
        assert out is not None
        # New positions, lengths and CRCs; a batch may even have grown past the limit
        # (Kafka checks the sizes again when recompression may have changed them).
        headers = list(iter_batch_headers(out))
        for h in headers:
            if h.size > max_bytes:
                raise _too_large(h, max_bytes)
        buf: bytearray | memoryview = out
    else:
        buf = _writable(records)
    return _new_tuple(ValidatedRecords, (buf, headers, _plain(buf, headers), origin, config))


def _plain(buf: bytearray | memoryview, headers: list[BatchHeader]) -> tuple[int, ...] | None:
    """``ValidatedRecords.plain`` for ``headers``, or None."""
    if len(headers) != 1:
        return None
    h = headers[0]
    if h.magic != MAGIC_V2 or h.has_producer_id or h.is_control:
        return None
    return _unpack_produce_fields(buf, 0)


def check_batch_headers(records: RecordsBuffer, max_message_bytes: int) -> list[BatchHeader]:
    """The sizes and CRCs of ``records``, batch by batch (Kafka's
    analyzeAndValidateRecords): what a follower checks of its leader's batches, whose
    records the leader validated. Returns the headers."""
    view = memoryview(records)
    headers: list[BatchHeader] = []
    consumed = 0
    for h in iter_batch_headers(view):
        if h.size > max_message_bytes:
            raise _too_large(h, max_message_bytes)
        _ensure_crc(view, h)
        headers.append(h)
        consumed = h.end
    _ensure_whole(view, consumed, headers)
    return headers


def _ensure_crc(view: memoryview, h: BatchHeader) -> None:
    if h.magic >= MAGIC_V2:
        # Inline BatchHeader.ensure_valid: this runs once per appended batch.
        if crc32c(view[h.position + ATTRIBUTES_OFFSET : h.end]) != h.crc:
            h.ensure_valid(view)  # raises with Kafka's message
    else:
        h.ensure_valid(view)


def _ensure_whole(view: memoryview, consumed: int, headers: list[BatchHeader]) -> None:
    if consumed != len(view):
        raise CorruptRecordError(
            f"{len(view) - consumed} trailing bytes after the last whole batch "
            f"(a truncated batch at position {consumed})"
        )
    if not headers:
        raise InvalidRecordError("no record batch to append")


def _too_large(h: BatchHeader, max_bytes: int) -> RecordTooLargeError:
    return RecordTooLargeError(
        f"the record batch at position {h.position} is {h.size} bytes, larger than "
        f"max.message.bytes ({max_bytes})"
    )


def _up_convert(view: memoryview, config: LogConfig, now: int) -> bytearray:
    """A client's v0/v1 message set as one v2 batch in the topic's compression and
    timestamp type (records.convert.up_convert), in a writable buffer (the log patches
    offsets in place)."""
    if view.nbytes > config.max_message_bytes:
        raise RecordTooLargeError(
            f"a message set of {view.nbytes} bytes is larger than max.message.bytes "
            f"({config.max_message_bytes})")
    return bytearray(up_convert(
        view,
        timestamp_type=TimestampType.LOG_APPEND_TIME if config.log_append_time
        else TimestampType.CREATE_TIME,
        compression=target_codec(config),
        now=now))


def inline_weight(records: RecordsBuffer, config: LogConfig) -> int | None:
    """Bytes ``validate_records`` walks for ``records``, or None when its cost is not
    bounded by their size: a compressed batch (inflating costs what the producer's ratio
    says, up to the decompression bound), one to recompress, a v0/v1 message set to
    convert. Reads the headers only; a payload whose headers do not parse weighs nothing
    (refused at once)."""
    n = len(records)
    target = None if config.compression_type == "producer" else int(
        CODEC_BY_NAME[config.compression_type])
    if n >= RECORD_BATCH_OVERHEAD:
        length, magic, _crc, attributes, _delta, _max_ts, _pid, _count = \
            _unpack_produce_fields(records, 0)
        if magic < MAGIC_V2:
            return None
        if length + LOG_OVERHEAD == n:  # one batch: the common case
            codec = attributes & COMPRESSION_CODEC_MASK
            if codec or (target is not None and codec != target
                         and not attributes & CONTROL_FLAG_MASK):
                return None
            return n
    try:
        for h in iter_batch_headers(memoryview(records)):
            if h.magic == MAGIC_V2 and (h.compression_id or (
                    target is not None and h.compression_id != target and not h.is_control)):
                return None
    except KafkaError:
        return 0
    return n
