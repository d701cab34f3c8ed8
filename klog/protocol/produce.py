"""Produce requests and responses, v3-v9, coded by hand for the broker's hot path.

Owns the wire layout of ProduceRequest and ProduceResponse versions 3 through 9 (what the
broker advertises). kio decodes the same bytes, but on the path of every produced batch it
costs a schema walk (apis' pre-check) plus kio's reader, and hands the records back as a
copy. Here one pass reads the request, checking every length and count against the bytes
that remain before using it, and each partition's records come back as a memoryview slice
of the caller's buffer: writable when the frame is, so the log patches offsets and leader
epoch into the receive buffer itself (as Kafka does). The entities built are kio's own
classes for the version, so nothing downstream can tell which decoder ran.

Grammar (ProduceRequest.json / ProduceResponse.json; v9 is the first flexible version):

    ProduceRequest       => transactional_id:nullable_string acks:int16 timeout_ms:int32
                            topic_data:[TopicProduceData] TAGS
    TopicProduceData     => name:string partition_data:[PartitionProduceData] TAGS
    PartitionProduceData => index:int32 records:nullable_records TAGS

    ProduceResponse      => responses:[TopicProduceResponse] throttle_time_ms:int32 TAGS
    TopicProduceResponse => name:string partition_responses:[PartitionProduceResponse] TAGS
    PartitionProduceResponse => index:int32 error_code:int16 base_offset:int64
                            log_append_time_ms:int64 log_start_offset:int64 (v5+)
                            record_errors:[batch_index:int32
                                           batch_index_error_message:nullable_string] (v8+)
                            error_message:nullable_string (v8+) TAGS

    v3-v8: strings are int16 length + UTF-8 (-1 = null), arrays an int32 count (-1 = null),
           records an int32 length (-1 = null); no TAGS.
    v9:    compact forms: uvarint (length + 1) for strings, arrays and records (0 = null),
           and TAGS (uvarint count, then per field uvarint tag, uvarint size, bytes) ending
           every struct.

Rejected as InvalidRequestError, exactly where kio (behind apis' checks) rejects: a
truncated body, a length or count beyond what remains, negative lengths other than -1, a
null topic name or array, malformed UTF-8, a varint longer than 5 bytes, and any tagged
field (no version of ProduceRequest defines one, and kio refuses unknown tags). Trailing
bytes after the body are ignored, as in Kafka.
"""

from __future__ import annotations

import datetime
import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.index import schema_name_map
from kio.static.constants import EntityType

from klog.protocol.errors import InvalidRequestError

MIN_VERSION = 3
MAX_VERSION = 9
FLEXIBLE_FROM = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error_code, base_offset
_I64 = struct.Struct(">q")
_NO_TAGS = b"\x00"

# The fewest bytes a topic / partition entry can take: bounds what an array count may claim
# before any item is read (name length + partitions count; index + records length [+ tags]).
_MIN_TOPIC = {False: 2 + 4, True: 1 + 1 + 1}
_MIN_PARTITION = {False: 4 + 4, True: 4 + 1 + 1}


def handles(version: int) -> bool:
    """True when this module decodes and encodes Produce ``version``."""
    return MIN_VERSION <= version <= MAX_VERSION


@functools.cache
def _request_classes(version: int) -> tuple[type, type, type]:
    """kio's (ProduceRequest, TopicProduceData, PartitionProduceData) for ``version``."""
    module_name, _, class_name = schema_name_map["produce"][version][EntityType.request] \
        .partition(":")
    module = __import__(module_name, fromlist=[class_name])
    return (getattr(module, class_name), module.TopicProduceData,
            module.PartitionProduceData)


# --- request ------------------------------------------------------------------------------


def _truncated(what: str) -> InvalidRequestError:
    return InvalidRequestError(f"produce request truncated or claiming more than it holds: "
                               f"{what}")


def _uvarint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = 0
    for shift in (0, 7, 14, 21, 28):
        if pos >= end:
            raise _truncated("varint")
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
    raise InvalidRequestError("varint longer than 5 bytes")


def _length(view: memoryview, pos: int, end: int, flexible: bool, size: int
            ) -> tuple[int, int]:
    """A length or count prefix -> (value, -1 for null; position after it)."""
    if flexible:
        raw, pos = _uvarint(view, pos, end)
        return raw - 1, pos
    if end - pos < size:
        raise _truncated("length")
    if size == 2:
        return _I16.unpack_from(view, pos)[0], pos + 2
    return _I32.unpack_from(view, pos)[0], pos + 4


def _string(view: memoryview, pos: int, end: int, flexible: bool, what: str
            ) -> tuple[str | None, int]:
    length, pos = _length(view, pos, end, flexible, 2)
    if length < 0:
        if length == -1:
            return None, pos
        raise InvalidRequestError(f"negative length {length} of {what}")
    if length > end - pos:
        raise _truncated(what)
    try:
        return str(view[pos : pos + length], "utf-8"), pos + length
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"{what} is not valid UTF-8: {exc}") from None


def _count(view: memoryview, pos: int, end: int, flexible: bool, min_item: int,
           what: str) -> tuple[int, int]:
    count, pos = _length(view, pos, end, flexible, 4)
    if count < 0:
        if count == -1:
            raise InvalidRequestError(f"null {what}, which is not nullable")
        raise InvalidRequestError(f"negative count {count} of {what}")
    if count > (end - pos) // min_item:
        raise _truncated(f"{count} {what}")
    return count, pos


def _no_tags(view: memoryview, pos: int, end: int, where: str) -> int:
    count, pos = _uvarint(view, pos, end)
    if count:
        raise InvalidRequestError(f"tagged field in {where}: none is defined")
    return pos


def decode_produce_request(version: int, body: bytes | bytearray | memoryview) -> Any:
    """The ProduceRequest (kio's class for ``version``) in ``body``, the bytes after the
    request header. Records are memoryview slices of ``body`` (None when null)."""
    if not handles(version):
        raise ValueError(f"Produce v{version} is not decoded here (v{MIN_VERSION}-"
                         f"v{MAX_VERSION})")
    request_cls, topic_cls, partition_cls = _request_classes(version)
    flexible = version >= FLEXIBLE_FROM
    view = body if type(body) is memoryview else memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    end = len(view)
    transactional_id, pos = _string(view, 0, end, flexible, "transactional_id")
    if end - pos < 6:
        raise _truncated("acks and timeout")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(view, pos)
    pos += 6
    topic_count, pos = _count(view, pos, end, flexible, _MIN_TOPIC[flexible], "topic_data")
    topics = []
    min_partition = _MIN_PARTITION[flexible]
    for _ in range(topic_count):
        name, pos = _string(view, pos, end, flexible, "topic name")
        if name is None:
            raise InvalidRequestError("null topic name, which is not nullable")
        partition_count, pos = _count(view, pos, end, flexible, min_partition,
                                      "partition_data")
        partitions = []
        for _ in range(partition_count):
            if end - pos < 4:
                raise _truncated("partition index")
            index = _I32.unpack_from(view, pos)[0]
            size, pos = _length(view, pos + 4, end, flexible, 4)
            if size < 0:
                if size != -1:
                    raise InvalidRequestError(f"negative records length {size}")
                records = None
            elif size > end - pos:
                raise _truncated("records")
            else:
                records = view[pos : pos + size]
                pos += size
            if flexible:
                pos = _no_tags(view, pos, end, "PartitionProduceData")
            partitions.append(partition_cls(index=index, records=records))
        if flexible:
            pos = _no_tags(view, pos, end, "TopicProduceData")
        topics.append(topic_cls(name=name, partition_data=tuple(partitions)))
    if flexible:
        _no_tags(view, pos, end, "ProduceRequest")
    return request_cls(
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(topics),
    )


# --- response -----------------------------------------------------------------------------


@dataclass(slots=True)
class PartitionResponse:
    """One partition's outcome, in plain values (-1 where there is nothing to say)."""

    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: Sequence[tuple[int, str | None]] = ()  # (batch index, message)


def _encode_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
        return
    raw = value.encode()
    if flexible:
        _encode_uvarint(out, len(raw) + 1)
    else:
        if len(raw) > 0x7FFF:
            raise ValueError(f"string of {len(raw)} bytes is too long for an int16 length")
        out += _I16.pack(len(raw))
    out += raw


def _encode_uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _encode_count(out: bytearray, count: int, flexible: bool) -> None:
    if flexible:
        _encode_uvarint(out, count + 1)
    else:
        out += _I32.pack(count)


def encode_produce_response(
    version: int,
    topics: Sequence[tuple[str, Sequence[PartitionResponse]]],
    throttle_time_ms: int = 0,
) -> bytes:
    """The ProduceResponse body (no header) for ``version``: ``topics`` is a sequence of
    (topic name, partition responses) in the order the request named them."""
    if not handles(version):
        raise ValueError(f"Produce v{version} is not encoded here (v{MIN_VERSION}-"
                         f"v{MAX_VERSION})")
    flexible = version >= FLEXIBLE_FROM
    with_log_start = version >= 5
    with_errors = version >= 8
    out = bytearray()
    _encode_count(out, len(topics), flexible)
    for name, partitions in topics:
        _encode_string(out, name, flexible)
        _encode_count(out, len(partitions), flexible)
        for p in partitions:
            out += _PARTITION_HEAD.pack(p.index, p.error_code, p.base_offset)
            out += _I64.pack(p.log_append_time_ms)
            if with_log_start:
                out += _I64.pack(p.log_start_offset)
            if with_errors:
                _encode_count(out, len(p.record_errors), flexible)
                for batch_index, message in p.record_errors:
                    out += _I32.pack(batch_index)
                    _encode_string(out, message, flexible)
                    if flexible:
                        out += _NO_TAGS
                _encode_string(out, p.error_message, flexible)
            if flexible:
                out += _NO_TAGS
        if flexible:
            out += _NO_TAGS
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out += _NO_TAGS
    return bytes(out)
