"""Produce requests and responses, v3-v11, coded by hand for the broker's hot path.

Owns the wire layout of ProduceRequest and ProduceResponse versions 3 through 11 (what the
broker advertises from v3 on). kio decodes the same bytes, but on the path of every
produced batch it costs a schema walk (apis' pre-check) plus kio's reader, and hands the
records back as a copy. Here one pass reads the request, checking every length and count
against the bytes that remain before using it, and each partition's records come back as
a memoryview slice of the caller's buffer: writable when the frame is, so the log patches
offsets and leader epoch into the receive buffer itself (as Kafka does). The entities
built are kio's own classes for the version, so nothing downstream can tell which decoder
ran.

klog/protocol/_produce.c is the C twin of the decoder and the response encoder: it does
every well-formed request and every response, record errors and KIP-951's fields
included, and declines anything else (a malformed request, a value out of range). The
Python code here is the reference, what runs where the C code declines (raising the
precise error), and the whole path without a C compiler or with KLOG_PURE_PYTHON=1.

Grammar (ProduceRequest.json / ProduceResponse.json; v9 is the first flexible version;
v10 adds KIP-951's tagged fields to the response and nothing to the request; v11 only
allows TRANSACTION_ABORTABLE among the errors, KIP-890):

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
                            error_message:nullable_string (v8+)
                            TAGS [tag 0 (v10+): CurrentLeader => leader_id:int32
                                                 leader_epoch:int32 TAGS]
    response TAGS (v10+)     [tag 0: NodeEndpoints => [node_id:int32 host:string port:int32
                                                       rack:nullable_string TAGS]]

    v3-v8: strings are int16 length + UTF-8 (-1 = null), arrays an int32 count (-1 = null),
           records an int32 length (-1 = null); no TAGS.
    v9+:   compact forms: uvarint (length + 1) for strings, arrays and records (0 = null),
           and TAGS (uvarint count, then per field uvarint tag, uvarint size, bytes) ending
           every struct. A tagged field at its default (CurrentLeader -1/-1, no
           NodeEndpoints) is left out, as Kafka's writer leaves it out.

Rejected as InvalidRequestError, exactly where kio (behind apis' checks) rejects: a
truncated body, a length or count beyond what remains, negative lengths other than -1, a
null topic name or array, malformed UTF-8, a varint longer than 5 bytes, and any tagged
field (no version of ProduceRequest defines one, and kio refuses unknown tags). Trailing
bytes after the body are ignored, as in Kafka.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import os
import struct
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.index import schema_name_map
from kio.static.constants import EntityType

from klog.protocol.errors import InvalidRequestError, RecordError
from klog.protocol.fetch import NodeEndpoint, node_endpoints_tags

# The C twins of decode_produce_request and encode_produce_response
# (klog/protocol/_produce.c): they do the well-formed common case and decline the rest,
# which the Python code below then does. None when klog was built without a C compiler or
# with KLOG_PURE_PYTHON=1 in the environment (for comparisons).
_native: types.ModuleType | None = None
if not os.environ.get("KLOG_PURE_PYTHON"):
    with contextlib.suppress(ImportError):
        from klog.protocol import _produce as _native

MIN_VERSION = 3
MAX_VERSION = 11
FLEXIBLE_FROM = 9
RECORD_ERRORS_FROM = 8  # KIP-467
CURRENT_LEADER_FROM = 10  # KIP-951: CurrentLeader and NodeEndpoints
TRANSACTION_ABORTABLE_FROM = 11  # KIP-890: older producers get INVALID_TXN_STATE instead

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
_LEGACY_HEAD = struct.Struct(">hii")  # acks, timeout_ms, topic count
_PARTITION_HEAD_LEGACY = struct.Struct(">ii")  # index, records length
_PARTITION_HEAD = struct.Struct(">ihq")  # index, error_code, base_offset
_I64 = struct.Struct(">q")
_LEADER = struct.Struct(">ii")  # CurrentLeader: leader id, leader epoch
_NO_LEADER = (-1, -1)
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


def _maker(cls: type, names: tuple[str, ...]) -> Callable[..., Any]:
    """A constructor of kio's entity ``cls`` taking its fields ``names`` positionally.

    kio's entities are frozen, slotted dataclasses whose generated ``__init__`` takes
    keywords and sets each field through ``object.__setattr__``; setting the slots
    directly builds the same object about five times faster, which counts on the path of
    every produce request. Used only when ``cls`` is shaped exactly so (these fields, in
    this order, each a slot, no ``__post_init__``); otherwise the class is called.
    """
    shaped = (
        dataclasses.is_dataclass(cls)
        and tuple(f.name for f in dataclasses.fields(cls)) == names
        and all(isinstance(cls.__dict__.get(n), types.MemberDescriptorType) for n in names)
        and not hasattr(cls, "__post_init__")
    )
    if not shaped:
        return lambda *values: cls(**dict(zip(names, values, strict=True)))
    new = object.__new__
    setters = tuple(cls.__dict__[n].__set__ for n in names)
    if len(setters) == 2:
        set0, set1 = setters

        def make2(a: Any, b: Any) -> Any:
            entity: object = new(cls)
            set0(entity, a)
            set1(entity, b)
            return entity

        return make2

    def make(*values: Any) -> Any:
        entity: object = new(cls)
        for setter, value in zip(setters, values, strict=True):
            setter(entity, value)
        return entity

    return make


@functools.cache
def _makers(version: int) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
    request_cls, topic_cls, partition_cls = _request_classes(version)
    return (_maker(request_cls, ("transactional_id", "acks", "timeout", "topic_data")),
            _maker(topic_cls, ("name", "partition_data")),
            _maker(partition_cls, ("index", "records")))


@functools.cache
def _native_ready(version: int) -> bool:
    """Whether the C codec handles ``version``: it needs kio's classes for it shaped as
    ``_maker`` expects (their fields object slots), and PartitionResponse's."""
    if _native is None:
        return False
    try:
        _native.configure(version, *_request_classes(version), _timeout, PartitionResponse)
    except TypeError:
        return False
    return True


_TIMEOUTS: dict[int, datetime.timedelta] = {}


def _timeout(ms: int) -> datetime.timedelta:
    # A producer sends the same timeout every time: keep the few values seen (bounded).
    td = _TIMEOUTS.get(ms)
    if td is None:
        td = datetime.timedelta(milliseconds=ms)
        if len(_TIMEOUTS) < 256:
            _TIMEOUTS[ms] = td
    return td


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


def _utf8(view: memoryview, pos: int, length: int, end: int, what: str) -> str:
    if length > end - pos:
        raise _truncated(what)
    try:
        return str(view[pos : pos + length], "utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(f"{what} is not valid UTF-8: {exc}") from None


def _check_count(count: int, pos: int, end: int, min_item: int, what: str) -> None:
    if count < 0:
        if count == -1:
            raise InvalidRequestError(f"null {what}, which is not nullable")
        raise InvalidRequestError(f"negative count {count} of {what}")
    if count > (end - pos) // min_item:
        raise _truncated(f"{count} {what}")


def _check_tags(count: int, where: str) -> None:
    if count:
        raise InvalidRequestError(f"tagged field in {where}: none is defined")


def _as_bytes_view(body: bytes | bytearray | memoryview) -> memoryview:
    view = body if type(body) is memoryview else memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


# Any: kio's ProduceRequest class for ``version`` (chosen at runtime).
def decode_produce_request(version: int, body: bytes | bytearray | memoryview) -> Any:
    """The ProduceRequest (kio's class for ``version``) in ``body``, the bytes after the
    request header. Records are memoryview slices of ``body`` (None when null)."""
    if not handles(version):
        raise ValueError(f"Produce v{version} is not decoded here (v{MIN_VERSION}-"
                         f"v{MAX_VERSION})")
    view = _as_bytes_view(body)
    if _native is not None and _native_ready(version):
        request = _native.decode(version, view)
        if request is not None:
            return request
    return python_decode(version, view)


def python_decode(version: int, view: memoryview) -> Any:  # Any: as decode_produce_request
    """decode_produce_request in Python: the reference, and what runs where the C decoder
    declines (anything malformed, to raise the precise error) or is not built."""
    if version >= FLEXIBLE_FROM:
        return _decode_flexible(_makers(version), view)
    return _decode_legacy(_makers(version), view)


def _decode_legacy(makers: tuple[Callable[..., Any], ...], view: memoryview) -> Any:
    """v3-v8: int16 string lengths, int32 counts and records lengths, -1 for null."""
    make_request, make_topic, make_partition = makers
    end = len(view)
    if end < 2:
        raise _truncated("transactional_id")
    length = _I16.unpack_from(view, 0)[0]
    pos = 2
    transactional_id = None
    if length >= 0:
        transactional_id = _utf8(view, pos, length, end, "transactional_id")
        pos += length
    elif length != -1:
        raise InvalidRequestError(f"negative length {length} of transactional_id")
    if end - pos < 10:
        raise _truncated("acks, timeout and topic count")
    acks, timeout_ms, topic_count = _LEGACY_HEAD.unpack_from(view, pos)
    pos += 10
    _check_count(topic_count, pos, end, _MIN_TOPIC[False], "topic_data")
    topics = []
    for _ in range(topic_count):
        if end - pos < 2:
            raise _truncated("topic name")
        length = _I16.unpack_from(view, pos)[0]
        pos += 2
        if length < 0:
            raise InvalidRequestError("null topic name, which is not nullable" if length == -1
                                      else f"negative length {length} of topic name")
        name = _utf8(view, pos, length, end, "topic name")
        pos += length
        if end - pos < 4:
            raise _truncated("partition count")
        partition_count = _I32.unpack_from(view, pos)[0]
        pos += 4
        _check_count(partition_count, pos, end, _MIN_PARTITION[False], "partition_data")
        partitions = []
        for _ in range(partition_count):
            if end - pos < 8:
                raise _truncated("partition index and records length")
            index, size = _PARTITION_HEAD_LEGACY.unpack_from(view, pos)
            pos += 8
            if size < 0:
                if size != -1:
                    raise InvalidRequestError(f"negative records length {size}")
                records = None
            elif size > end - pos:
                raise _truncated("records")
            else:
                records = view[pos : pos + size]
                pos += size
            partitions.append(make_partition(index, records))
        topics.append(make_topic(name, tuple(partitions)))
    return make_request(transactional_id, acks, _timeout(timeout_ms), tuple(topics))


def _decode_flexible(makers: tuple[Callable[..., Any], ...], view: memoryview) -> Any:
    """v9+: uvarint (length + 1) for strings, counts and records (0 = null), and a tagged-
    field section closing each struct. Each uvarint's one-byte case is read inline."""
    make_request, make_topic, make_partition = makers
    end = len(view)
    if end and view[0] < 0x80:
        raw, pos = view[0], 1
    else:
        raw, pos = _uvarint(view, 0, end)
    transactional_id = None
    if raw:
        transactional_id = _utf8(view, pos, raw - 1, end, "transactional_id")
        pos += raw - 1
    if end - pos < 6:
        raise _truncated("acks and timeout")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(view, pos)
    pos += 6
    if pos < end and view[pos] < 0x80:
        raw = view[pos]
        pos += 1
    else:
        raw, pos = _uvarint(view, pos, end)
    topic_count = raw - 1
    _check_count(topic_count, pos, end, _MIN_TOPIC[True], "topic_data")
    topics = []
    for _ in range(topic_count):
        if pos < end and view[pos] < 0x80:
            raw = view[pos]
            pos += 1
        else:
            raw, pos = _uvarint(view, pos, end)
        if not raw:
            raise InvalidRequestError("null topic name, which is not nullable")
        name = _utf8(view, pos, raw - 1, end, "topic name")
        pos += raw - 1
        if pos < end and view[pos] < 0x80:
            raw = view[pos]
            pos += 1
        else:
            raw, pos = _uvarint(view, pos, end)
        partition_count = raw - 1
        _check_count(partition_count, pos, end, _MIN_PARTITION[True], "partition_data")
        partitions = []
        for _ in range(partition_count):
            if end - pos < 4:
                raise _truncated("partition index")
            index = _I32.unpack_from(view, pos)[0]
            pos += 4
            if pos < end and view[pos] < 0x80:
                raw = view[pos]
                pos += 1
            else:
                raw, pos = _uvarint(view, pos, end)
            if not raw:
                records = None
            elif raw - 1 > end - pos:
                raise _truncated("records")
            else:
                records = view[pos : pos + raw - 1]
                pos += raw - 1
            if pos < end and view[pos] == 0:  # no tagged fields: the usual case
                pos += 1
            else:
                raw, pos = _uvarint(view, pos, end)
                _check_tags(raw, "PartitionProduceData")
            partitions.append(make_partition(index, records))
        raw, pos = _uvarint(view, pos, end)
        _check_tags(raw, "TopicProduceData")
        topics.append(make_topic(name, tuple(partitions)))
    raw, pos = _uvarint(view, pos, end)
    _check_tags(raw, "ProduceRequest")
    return make_request(transactional_id, acks, _timeout(timeout_ms), tuple(topics))


# --- response -----------------------------------------------------------------------------


@dataclass(slots=True)
class PartitionResponse:
    """One partition's outcome, in plain values (-1 where there is nothing to say).

    ``record_errors`` (v8+): the records that made the batch fail, as (batch index,
    message) in index order; ``current_leader`` (v10+): (leader id, leader epoch) for a
    partition answered NOT_LEADER_OR_FOLLOWER, None (or -1, -1) to leave it out.
    """

    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: Sequence[RecordError] = ()
    current_leader: tuple[int, int] | None = None


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
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> bytes:
    """The ProduceResponse body (no header) for ``version``: ``topics`` is a sequence of
    (topic name, partition responses) in the order the request named them;
    ``node_endpoints`` (v10+) the brokers the partitions' CurrentLeader fields name."""
    if not handles(version):
        raise ValueError(f"Produce v{version} is not encoded here (v{MIN_VERSION}-"
                         f"v{MAX_VERSION})")
    if _native is not None and _native_ready(version):
        body: bytes | None = _native.encode(
            version, topics, throttle_time_ms,
            [(n.node_id, n.host, n.port, n.rack) for n in node_endpoints]
            if node_endpoints else None)
        if body is not None:
            return body
    return python_encode(version, topics, throttle_time_ms, node_endpoints)


def python_encode(
    version: int,
    topics: Sequence[tuple[str, Sequence[PartitionResponse]]],
    throttle_time_ms: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> bytes:
    """encode_produce_response in Python: the reference, and what runs where the C encoder
    declines (values out of range or of another type) or is not built."""
    flexible = version >= FLEXIBLE_FROM
    with_log_start = version >= 5
    with_errors = version >= RECORD_ERRORS_FROM
    with_leaders = version >= CURRENT_LEADER_FROM
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
                leader = p.current_leader
                if with_leaders and leader is not None and tuple(leader) != _NO_LEADER:
                    # one tagged field, tag 0 of 9 bytes: id, epoch, its own (no) tags
                    out += b"\x01\x00\x09" + _LEADER.pack(*leader) + _NO_TAGS
                else:
                    out += _NO_TAGS
        if flexible:
            out += _NO_TAGS
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out += node_endpoints_tags(node_endpoints) if with_leaders and node_endpoints \
            else _NO_TAGS
    return bytes(out)


# --- the client's side: request encoder, response decoder ---------------------------------


def encode_produce_request(
    version: int,
    acks: int,
    timeout_ms: int,
    topics: Sequence[tuple[str, Sequence[tuple[int, bytes | bytearray | memoryview]]]],
    transactional_id: str | None = None,
) -> list[bytes | bytearray | memoryview]:
    """The ProduceRequest body (no header) for ``version`` as a list of pieces: the record
    batches are pieces of their own, never copied. ``topics`` is a sequence of (topic,
    [(partition index, records)]), written in that order."""
    if not handles(version):
        raise ValueError(f"Produce v{version} is not encoded here (v{MIN_VERSION}-"
                         f"v{MAX_VERSION})")
    flexible = version >= FLEXIBLE_FROM
    pieces: list[bytes | bytearray | memoryview] = []
    out = bytearray()
    _encode_string(out, transactional_id, flexible)
    out += _ACKS_TIMEOUT.pack(acks, timeout_ms)
    _encode_count(out, len(topics), flexible)
    for name, partitions in topics:
        _encode_string(out, name, flexible)
        _encode_count(out, len(partitions), flexible)
        for index, records in partitions:
            out += _I32.pack(index)
            if flexible:
                _encode_uvarint(out, len(records) + 1)
            else:
                out += _I32.pack(len(records))
            pieces.append(out)
            pieces.append(records)
            out = bytearray(_NO_TAGS) if flexible else bytearray()
        if flexible:
            out += _NO_TAGS
    if flexible:
        out += _NO_TAGS
    pieces.append(out)
    return pieces


class InvalidResponseError(InvalidRequestError):
    """A produce response whose bytes do not follow the grammar."""


_RESPONSE_PARTITION_MIN = {False: 4 + 2 + 8 + 8, True: 4 + 2 + 8 + 8 + 1}


def decode_produce_response(
    version: int, body: bytes | bytearray | memoryview
) -> tuple[list[tuple[str, list[PartitionResponse]]], int]:
    """A ProduceResponse body -> ([(topic, [PartitionResponse, ...]), ...], throttle_time_ms).

    The bytes come from the network: every length and count is checked against what
    remains first; anything that does not fit the grammar raises InvalidResponseError.
    A partition's CurrentLeader (v10+) is read; other tagged fields, NodeEndpoints among
    them, are skipped.
    """
    if not handles(version):
        raise ValueError(f"Produce v{version} is not decoded here (v{MIN_VERSION}-"
                         f"v{MAX_VERSION})")
    view = _as_bytes_view(body)
    end = len(view)
    flexible = version >= FLEXIBLE_FROM
    with_log_start = version >= 5
    with_errors = version >= RECORD_ERRORS_FROM
    with_leaders = version >= CURRENT_LEADER_FROM
    try:
        pos = 0

        def count(what: str, min_item: int) -> int:
            nonlocal pos
            if flexible:
                n, pos = _uvarint(view, pos, end)
                n -= 1
            else:
                if end - pos < 4:
                    raise _truncated(what)
                (n,) = _I32.unpack_from(view, pos)
                pos += 4
            if n < 0 or n > (end - pos) // min_item:
                raise _truncated(f"{n} {what}")
            return n

        def string(what: str) -> str | None:
            nonlocal pos
            if flexible:
                n, pos = _uvarint(view, pos, end)
                n -= 1
            else:
                if end - pos < 2:
                    raise _truncated(what)
                (n,) = _I16.unpack_from(view, pos)
                pos += 2
            if n < 0:
                return None
            text = _utf8(view, pos, n, end, what)
            pos += n
            return text

        def skip_tags(where: str, leader: list[tuple[int, int]] | None = None) -> None:
            """Step over a tagged-field section; with ``leader``, keep tag 0 there (a
            partition's CurrentLeader, v10+)."""
            nonlocal pos
            if not flexible:
                return
            tags, pos = _uvarint(view, pos, end)
            for _ in range(tags):
                tag, pos = _uvarint(view, pos, end)
                size, pos = _uvarint(view, pos, end)
                if size > end - pos:
                    raise _truncated(f"tagged field in {where}")
                if leader is not None and tag == 0:
                    if size < _LEADER.size:
                        raise InvalidResponseError(f"a CurrentLeader of {size} bytes")
                    leader.append(_LEADER.unpack_from(view, pos))
                pos += size

        topics: list[tuple[str, list[PartitionResponse]]] = []
        for _ in range(count("topics", _MIN_TOPIC[flexible])):
            name = string("topic name")
            if name is None:
                raise InvalidResponseError("null topic name in a produce response")
            partitions: list[PartitionResponse] = []
            for _ in range(count("partitions", _RESPONSE_PARTITION_MIN[flexible])):
                if end - pos < 22:
                    raise _truncated("partition response")
                index, error_code, base_offset = _PARTITION_HEAD.unpack_from(view, pos)
                (log_append_time,) = _I64.unpack_from(view, pos + 14)
                pos += 22
                log_start_offset = -1
                if with_log_start:
                    if end - pos < 8:
                        raise _truncated("log start offset")
                    (log_start_offset,) = _I64.unpack_from(view, pos)
                    pos += 8
                record_errors: list[tuple[int, str | None]] = []
                message = None
                if with_errors:
                    for _ in range(count("record errors", 5 if flexible else 6)):
                        if end - pos < 4:
                            raise _truncated("record error")
                        (batch_index,) = _I32.unpack_from(view, pos)
                        pos += 4
                        record_errors.append((batch_index, string("record error message")))
                        skip_tags("record error")
                    message = string("error message")
                leader: list[tuple[int, int]] = []
                skip_tags("partition response", leader if with_leaders else None)
                partitions.append(PartitionResponse(index, error_code, base_offset,
                                                    log_append_time, log_start_offset,
                                                    message, record_errors,
                                                    leader[-1] if leader else None))
            skip_tags("topic response")
            topics.append((name, partitions))
        if end - pos < 4:
            raise _truncated("throttle time")
        (throttle_time_ms,) = _I32.unpack_from(view, pos)
        pos += 4
        skip_tags("produce response")
    except InvalidResponseError:
        raise
    except InvalidRequestError as exc:  # the shared helpers speak of requests
        raise InvalidResponseError(str(exc).replace("request", "response")) from None
    return topics, throttle_time_ms
