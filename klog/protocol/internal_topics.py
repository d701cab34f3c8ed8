"""Key/value schemas of Kafka's internal topics ``__consumer_offsets`` and ``__transaction_state``.

This module owns the byte layout of the records the group and transaction coordinators write
to their internal topics, and of the consumer protocol's subscription/assignment blobs that
group-metadata records carry. It does no I/O: bytes in, frozen dataclasses out, and back.

Every key and value starts with an int16 version. In ``__consumer_offsets`` the *key*
version says which record it is (Kafka calls it the record type)::

    key v0, v1   OffsetCommitKey     group: string, topic: string, partition: int32
                 -> OffsetCommitValue v0..v4 (v4 is the first flexible version)
    key v2       GroupMetadataKey    group: string
                 -> GroupMetadataValue v0..v4 (v4 is the first flexible version)

``__transaction_state``::

    key v0       TransactionLogKey   transactionalId: string
                 -> TransactionLogValue v0, v1 (v1 is the first flexible version)

The field lists, versions and flexible versions are Kafka's message definitions
(``OffsetCommitKey.json`` ... ``TransactionLogValue.json``,
``ConsumerProtocolSubscription.json``, ``ConsumerProtocolAssignment.json``). Schemas are data
(``_Field`` tables on each class); one reader and one writer walk them. In a flexible version
strings, bytes and arrays use compact (unsigned-varint length + 1) encodings and every struct
ends with a tagged-field section; unknown tagged fields are kept raw so they round-trip.

The bytes are untrusted: every length is checked against what remains before anything is
allocated, and an impossible length, a short buffer or an unknown version raises
``InternalTopicError`` (or its subclass ``UnknownVersionError``) with a clear message.
``to_kafka_json`` gives the dict Kafka's generated JsonConverter writes (field names in
camelCase, bytes in base64), which is what Kafka's tools print.
"""

from __future__ import annotations

import base64
import contextlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.varint import append_unsigned, read_unsigned


class InternalTopicError(CorruptRecordError):
    """Bytes of an internal-topic key or value that cannot be decoded."""


class UnknownVersionError(InternalTopicError):
    """A key or value version this module does not know (``version`` says which)."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


# ---------------------------------------------------------------------------------------------
# Primitive codecs

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Reader:
    """A cursor over untrusted bytes; every read is bounds-checked first."""

    __slots__ = ("_buf", "_end", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview) -> None:
        self._buf = buf
        self._end = len(buf)
        self.pos = 0

    @property
    def remaining(self) -> int:
        return self._end - self.pos

    def _need(self, n: int, what: str) -> None:
        if n > self._end - self.pos:
            raise InternalTopicError(
                f"{what} needs {n} byte(s) but only {self._end - self.pos} remain "
                f"at position {self.pos}"
            )

    def _fixed(self, st: struct.Struct, what: str) -> int:
        self._need(st.size, what)
        value: int
        (value,) = st.unpack_from(self._buf, self.pos)
        self.pos += st.size
        return value

    def int8(self) -> int:
        return self._fixed(_I8, "int8")

    def int16(self) -> int:
        return self._fixed(_I16, "int16")

    def int32(self) -> int:
        return self._fixed(_I32, "int32")

    def int64(self) -> int:
        return self._fixed(_I64, "int64")

    def uvarint(self) -> int:
        # Kafka's readUnsignedVarint: at most 5 bytes for a 32-bit value.
        value, self.pos = read_unsigned(self._buf, self.pos, self._end, error=InternalTopicError)
        return value

    def _length(self, compact: bool, nullable: bool, what: str) -> int | None:
        n = self.uvarint() - 1 if compact else (self.int16() if what == "string" else self.int32())
        if n < 0:
            if n == -1 and nullable:
                return None
            raise InternalTopicError(f"invalid {what} length {n} at position {self.pos}")
        return n

    def raw(self, n: int, what: str) -> bytes:
        self._need(n, what)
        data = bytes(self._buf[self.pos : self.pos + n])
        self.pos += n
        return data

    def string(self, compact: bool, nullable: bool) -> str | None:
        n = self._length(compact, nullable, "string")
        if n is None:
            return None
        # Java's new String(bytes, UTF_8) replaces malformed input; so do we.
        return self.raw(n, "string").decode("utf-8", "replace")

    def bytes_(self, compact: bool, nullable: bool) -> bytes | None:
        n = self._length(compact, nullable, "bytes")
        if n is None:
            return None
        return self.raw(n, "bytes")

    def array_length(self, compact: bool, nullable: bool, min_item_size: int) -> int | None:
        n = self._length(compact, nullable, "array")
        if n is None:
            return None
        # Bound the loop by what the buffer could possibly hold: a huge count in a small
        # buffer fails here, before anything is allocated.
        if n * min_item_size > self.remaining:
            raise InternalTopicError(
                f"array of {n} element(s) cannot fit in the {self.remaining} byte(s) left "
                f"at position {self.pos}"
            )
        return n

    def tagged_fields(self) -> tuple[tuple[int, bytes], ...]:
        count = self.uvarint()
        if count > self.remaining:
            raise InternalTopicError(f"{count} tagged fields cannot fit in {self.remaining} bytes")
        fields = []
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            fields.append((tag, self.raw(size, "tagged field")))
        return tuple(fields)


class _Writer:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def fixed(self, st: struct.Struct, value: int) -> None:
        self.buf += st.pack(value)

    def uvarint(self, value: int) -> None:
        append_unsigned(self.buf, value)

    def length(self, n: int | None, compact: bool, short: bool) -> None:
        if compact:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.fixed(_I16 if short else _I32, -1 if n is None else n)

    def string(self, value: str | None, compact: bool) -> None:
        if value is None:
            self.length(None, compact, short=True)
            return
        data = value.encode("utf-8")
        if not compact and len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
        self.length(len(data), compact, short=True)
        self.buf += data

    def bytes_(self, value: bytes | None, compact: bool) -> None:
        self.length(None if value is None else len(value), compact, short=False)
        if value is not None:
            self.buf += value

    def tagged_fields(self, fields: tuple[tuple[int, bytes], ...]) -> None:
        self.uvarint(len(fields))
        for tag, data in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(data))
            self.buf += data


# ---------------------------------------------------------------------------------------------
# Schemas as data

INT8 = "int8"
INT16 = "int16"
INT32 = "int32"
INT64 = "int64"
STRING = "string"
BYTES = "bytes"
ARRAY_INT32 = "[]int32"
ARRAY_STRING = "[]string"
ARRAY_STRUCT = "[]struct"

_FIXED = {INT8: _I8, INT16: _I16, INT32: _I32, INT64: _I64}
# Smallest encoding of one array element, to bound element counts by the bytes left.
_MIN_ITEM_SIZE = {ARRAY_INT32: 4, ARRAY_STRING: 1, ARRAY_STRUCT: 1}


@dataclass(frozen=True, slots=True)
class _Field:
    """One field of a message definition: Kafka's JSON name, our attribute, its versions."""

    json_name: str
    attr: str
    kind: str
    since: int = 0
    until: int | None = None
    nullable: bool = False
    struct: type[_Struct] | None = None

    def present_in(self, version: int) -> bool:
        return self.since <= version and (self.until is None or version <= self.until)


@dataclass(frozen=True, slots=True)
class _Schema:
    name: str
    lowest: int
    highest: int
    flexible_from: int | None
    fields: tuple[_Field, ...]

    def flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from


S = TypeVar("S", bound="_Struct")
M = TypeVar("M", bound="_VersionedMessage")


class _Struct:
    """Reader, writer and JSON view shared by every schema-declared dataclass."""

    __slots__ = ()
    SCHEMA: ClassVar[_Schema]

    @classmethod
    def _read(cls: type[S], r: _Reader, version: int, flexible: bool) -> S:
        values: dict[str, Any] = {}
        for f in cls.SCHEMA.fields:
            if f.present_in(version):
                values[f.attr] = _read_field(r, f, version, flexible)
        if flexible:
            values["tagged_fields"] = r.tagged_fields()
        return cls(**values)

    def _write(self, w: _Writer, version: int, flexible: bool) -> None:
        for f in self.SCHEMA.fields:
            if f.present_in(version):
                _write_field(w, f, getattr(self, f.attr), version, flexible)
        if flexible:
            w.tagged_fields(getattr(self, "tagged_fields", ()))

    def _json(self, version: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in self.SCHEMA.fields:
            if f.present_in(version):
                out[f.json_name] = _json_value(f, getattr(self, f.attr), version)
        return out


def _read_field(r: _Reader, f: _Field, version: int, flexible: bool) -> Any:
    kind = f.kind
    st = _FIXED.get(kind)
    if st is not None:
        return r._fixed(st, f.json_name)
    if kind == STRING:
        return r.string(flexible, f.nullable)
    if kind == BYTES:
        return r.bytes_(flexible, f.nullable)
    n = r.array_length(flexible, f.nullable, _MIN_ITEM_SIZE[kind])
    if n is None:
        return None
    if kind == ARRAY_INT32:
        return tuple(r.int32() for _ in range(n))
    if kind == ARRAY_STRING:
        return tuple(r.string(flexible, False) for _ in range(n))
    assert f.struct is not None
    struct_cls = f.struct
    return tuple(struct_cls._read(r, version, flexible) for _ in range(n))


def _write_field(w: _Writer, f: _Field, value: Any, version: int, flexible: bool) -> None:
    kind = f.kind
    if value is None and not f.nullable:
        raise ValueError(f"{f.json_name} is not nullable")
    st = _FIXED.get(kind)
    if st is not None:
        w.fixed(st, value)
    elif kind == STRING:
        w.string(value, flexible)
    elif kind == BYTES:
        w.bytes_(value, flexible)
    else:
        w.length(None if value is None else len(value), flexible, short=False)
        if value is None:
            return
        for item in value:
            if kind == ARRAY_INT32:
                w.fixed(_I32, item)
            elif kind == ARRAY_STRING:
                w.string(item, flexible)
            else:
                item._write(w, version, flexible)


def _json_value(f: _Field, value: Any, version: int) -> Any:
    if value is None:
        return None
    if f.kind == BYTES:
        return base64.b64encode(value).decode("ascii")
    if f.kind == ARRAY_STRUCT:
        return [item._json(version) for item in value]
    if f.kind in (ARRAY_INT32, ARRAY_STRING):
        return list(value)
    return value


class _VersionedMessage(_Struct):
    """A top-level key or value: an int16 version, then the struct in that version."""

    __slots__ = ()
    version: int

    @classmethod
    def decode(cls: type[M], buf: bytes | bytearray | memoryview) -> M:
        """Parse version-prefixed bytes; raises InternalTopicError on bad input."""
        r = _Reader(buf)
        version = r.int16()
        return cls._decode_body(r, version)

    @classmethod
    def _decode_body(cls: type[M], r: _Reader, version: int) -> M:
        schema = cls.SCHEMA
        if not schema.lowest <= version <= schema.highest:
            raise UnknownVersionError(
                f"unknown {schema.name} version {version} "
                f"(known: {schema.lowest}..{schema.highest})",
                version,
            )
        values: dict[str, Any] = {"version": version}
        flexible = schema.flexible(version)
        for f in schema.fields:
            if f.present_in(version):
                values[f.attr] = _read_field(r, f, version, flexible)
        if flexible:
            values["tagged_fields"] = r.tagged_fields()
        return cls(**values)

    def encode(self) -> bytes:
        """Version-prefixed bytes of this key or value, as Kafka writes them."""
        schema = self.SCHEMA
        if not schema.lowest <= self.version <= schema.highest:
            raise ValueError(f"cannot encode {schema.name} version {self.version}")
        w = _Writer()
        w.fixed(_I16, self.version)
        self._write(w, self.version, schema.flexible(self.version))
        return bytes(w.buf)

    def to_kafka_json(self) -> dict[str, Any]:  # Any: a JSON document's values
        """The ``data`` object Kafka's JsonConverter writes for this message and version."""
        return self._json(self.version)


TaggedFields = tuple[tuple[int, bytes], ...]

# ---------------------------------------------------------------------------------------------
# __consumer_offsets


@dataclass(frozen=True, slots=True)
class OffsetCommitKey(_VersionedMessage):
    """Key of an offset commit (key versions 0 and 1 have the same fields)."""

    group: str
    topic: str
    partition: int
    version: int = 1

    SCHEMA: ClassVar[_Schema] = _Schema(
        "OffsetCommitKey",
        0,
        1,
        None,
        (
            _Field("group", "group", STRING),
            _Field("topic", "topic", STRING),
            _Field("partition", "partition", INT32),
        ),
    )


@dataclass(frozen=True, slots=True)
class GroupMetadataKey(_VersionedMessage):
    """Key of a group's metadata record (key version 2)."""

    group: str
    version: int = 2

    SCHEMA: ClassVar[_Schema] = _Schema(
        "GroupMetadataKey", 2, 2, None, (_Field("group", "group", STRING, 2),)
    )


@dataclass(frozen=True, slots=True)
class OffsetCommitValue(_VersionedMessage):
    """A committed offset; leader_epoch exists from v3, expire_timestamp in v1 only."""

    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1
    version: int = 3
    tagged_fields: TaggedFields = ()

    SCHEMA: ClassVar[_Schema] = _Schema(
        "OffsetCommitValue",
        0,
        4,
        4,
        (
            _Field("offset", "offset", INT64),
            _Field("leaderEpoch", "leader_epoch", INT32, 3),
            _Field("metadata", "metadata", STRING),
            _Field("commitTimestamp", "commit_timestamp", INT64),
            _Field("expireTimestamp", "expire_timestamp", INT64, 1, 1),
        ),
    )


@dataclass(frozen=True, slots=True)
class MemberMetadata(_Struct):
    """One member of a classic group, inside GroupMetadataValue."""

    member_id: str
    client_id: str = ""
    client_host: str = ""
    session_timeout: int = 0
    rebalance_timeout: int = 0
    subscription: bytes = b""
    assignment: bytes = b""
    group_instance_id: str | None = None
    tagged_fields: TaggedFields = ()

    SCHEMA: ClassVar[_Schema] = _Schema(
        "MemberMetadata",
        0,
        4,
        4,
        (
            _Field("memberId", "member_id", STRING),
            _Field("groupInstanceId", "group_instance_id", STRING, 3, nullable=True),
            _Field("clientId", "client_id", STRING),
            _Field("clientHost", "client_host", STRING),
            _Field("rebalanceTimeout", "rebalance_timeout", INT32, 1),
            _Field("sessionTimeout", "session_timeout", INT32),
            _Field("subscription", "subscription", BYTES),
            _Field("assignment", "assignment", BYTES),
        ),
    )


@dataclass(frozen=True, slots=True)
class GroupMetadataValue(_VersionedMessage):
    """A classic group's state: protocol, generation, leader and members."""

    protocol_type: str
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()
    version: int = 3
    tagged_fields: TaggedFields = ()

    SCHEMA: ClassVar[_Schema] = _Schema(
        "GroupMetadataValue",
        0,
        4,
        4,
        (
            _Field("protocolType", "protocol_type", STRING),
            _Field("generation", "generation", INT32),
            _Field("protocol", "protocol", STRING, nullable=True),
            _Field("leader", "leader", STRING, nullable=True),
            _Field("currentStateTimestamp", "current_state_timestamp", INT64, 2),
            _Field("members", "members", ARRAY_STRUCT, struct=MemberMetadata),
        ),
    )

    def to_kafka_json(self) -> dict[str, Any]:  # Any: a JSON document's values
        """Like Kafka's dump tool: consumer-protocol members show decoded blobs when valid."""
        data = self._json(self.version)
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return data
        for member, member_json in zip(self.members, data["members"], strict=True):
            # A blob that does not parse keeps its base64 form, as in Kafka's tool.
            with contextlib.suppress(InternalTopicError):
                member_json["subscription"] = ConsumerProtocolSubscription.decode(
                    member.subscription
                ).to_kafka_json()
            with contextlib.suppress(InternalTopicError):
                member_json["assignment"] = ConsumerProtocolAssignment.decode(
                    member.assignment
                ).to_kafka_json()
        return data


# ---------------------------------------------------------------------------------------------
# The consumer protocol's embedded subscription and assignment

CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True, slots=True)
class TopicPartitions(_Struct):
    """A topic and some of its partitions (consumer protocol)."""

    topic: str
    partitions: tuple[int, ...] = ()

    SCHEMA: ClassVar[_Schema] = _Schema(
        "TopicPartition",
        0,
        3,
        None,
        (_Field("topic", "topic", STRING), _Field("partitions", "partitions", ARRAY_INT32)),
    )


class _ConsumerProtocolMessage(_VersionedMessage):
    __slots__ = ()

    @classmethod
    def decode(cls: type[M], buf: bytes | bytearray | memoryview) -> M:
        # Kafka's ConsumerProtocol reads a newer version with the newest format it knows
        # (new versions may only append fields); keep the real version for the JSON view.
        r = _Reader(buf)
        version = r.int16()
        if version < 0:
            raise UnknownVersionError(f"negative {cls.SCHEMA.name} version {version}", version)
        known = min(version, cls.SCHEMA.highest)
        parsed = cls._decode_body(r, known)
        if known != version:
            parsed = _replace_version(parsed, version)
        return parsed

    def encode(self) -> bytes:
        w = _Writer()
        w.fixed(_I16, self.version)
        self._write(w, min(self.version, self.SCHEMA.highest), False)
        return bytes(w.buf)

    def to_kafka_json(self) -> dict[str, Any]:  # Any: a JSON document's values
        return self._json(min(self.version, self.SCHEMA.highest))


def _replace_version(message: Any, version: int) -> Any:
    from dataclasses import replace

    return replace(message, version=version)


@dataclass(frozen=True, slots=True)
class ConsumerProtocolSubscription(_ConsumerProtocolMessage):
    """A member's subscription: topics, user data, owned partitions (v1+), generation
    (v2+), rack (v3+)."""

    topics: tuple[str, ...] = ()
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartitions, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 3

    SCHEMA: ClassVar[_Schema] = _Schema(
        "ConsumerProtocolSubscription",
        0,
        3,
        None,
        (
            _Field("topics", "topics", ARRAY_STRING),
            _Field("userData", "user_data", BYTES, nullable=True),
            _Field("ownedPartitions", "owned_partitions", ARRAY_STRUCT, 1, struct=TopicPartitions),
            _Field("generationId", "generation_id", INT32, 2),
            _Field("rackId", "rack_id", STRING, 3, nullable=True),
        ),
    )


@dataclass(frozen=True, slots=True)
class ConsumerProtocolAssignment(_ConsumerProtocolMessage):
    """A member's assignment: topic partitions and user data."""

    assigned_partitions: tuple[TopicPartitions, ...] = ()
    user_data: bytes | None = None
    version: int = 3

    SCHEMA: ClassVar[_Schema] = _Schema(
        "ConsumerProtocolAssignment",
        0,
        3,
        None,
        (
            _Field(
                "assignedPartitions", "assigned_partitions", ARRAY_STRUCT, struct=TopicPartitions
            ),
            _Field("userData", "user_data", BYTES, nullable=True),
        ),
    )


# ---------------------------------------------------------------------------------------------
# __transaction_state


class TransactionState:
    """TransactionStatus ids and the names Kafka 3.x prints for them."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    NAMES: ClassVar[dict[int, str]] = {
        0: "Empty",
        1: "Ongoing",
        2: "PrepareCommit",
        3: "PrepareAbort",
        4: "CompleteCommit",
        5: "CompleteAbort",
        6: "Dead",
        7: "PrepareEpochFence",
    }

    @classmethod
    def name_of(cls, status: int) -> str:
        try:
            return cls.NAMES[status]
        except KeyError:
            raise InternalTopicError(f"unknown transaction status {status}") from None


@dataclass(frozen=True, slots=True)
class TransactionLogKey(_VersionedMessage):
    """Key of a transactional id's state record (key version 0)."""

    transactional_id: str
    version: int = 0

    SCHEMA: ClassVar[_Schema] = _Schema(
        "TransactionLogKey",
        0,
        0,
        None,
        (_Field("transactionalId", "transactional_id", STRING),),
    )


@dataclass(frozen=True, slots=True)
class TxnPartitions(_Struct):
    """A topic and the partitions of it a transaction has written to."""

    topic: str
    partition_ids: tuple[int, ...] = ()
    tagged_fields: TaggedFields = ()

    SCHEMA: ClassVar[_Schema] = _Schema(
        "PartitionsSchema",
        0,
        1,
        1,
        (_Field("topic", "topic", STRING), _Field("partitionIds", "partition_ids", ARRAY_INT32)),
    )


@dataclass(frozen=True, slots=True)
class TransactionLogValue(_VersionedMessage):
    """A transactional id's state; transaction_partitions is None when there are none."""

    producer_id: int
    producer_epoch: int = -1
    transaction_timeout_ms: int = 0
    transaction_status: int = TransactionState.EMPTY
    transaction_partitions: tuple[TxnPartitions, ...] | None = None
    transaction_last_update_timestamp_ms: int = -1
    transaction_start_timestamp_ms: int = -1
    version: int = 0
    tagged_fields: TaggedFields = ()

    SCHEMA: ClassVar[_Schema] = _Schema(
        "TransactionLogValue",
        0,
        1,
        1,
        (
            _Field("producerId", "producer_id", INT64),
            _Field("producerEpoch", "producer_epoch", INT16),
            _Field("transactionTimeoutMs", "transaction_timeout_ms", INT32),
            _Field("transactionStatus", "transaction_status", INT8),
            _Field(
                "transactionPartitions",
                "transaction_partitions",
                ARRAY_STRUCT,
                nullable=True,
                struct=TxnPartitions,
            ),
            _Field(
                "transactionLastUpdateTimestampMs", "transaction_last_update_timestamp_ms", INT64
            ),
            _Field("transactionStartTimestampMs", "transaction_start_timestamp_ms", INT64),
        ),
    )

    @property
    def state_name(self) -> str:
        return TransactionState.name_of(self.transaction_status)


# ---------------------------------------------------------------------------------------------
# Dispatch by key version

OffsetsKey = OffsetCommitKey | GroupMetadataKey
OffsetsValue = OffsetCommitValue | GroupMetadataValue


def _peek_version(buf: bytes | bytearray | memoryview, what: str) -> int:
    if len(buf) < 2:
        raise InternalTopicError(f"{what} of {len(buf)} byte(s) has no version")
    version: int = _I16.unpack_from(buf, 0)[0]
    return version


_OFFSETS_KEYS: dict[int, Callable[[bytes | bytearray | memoryview], OffsetsKey]] = {
    0: OffsetCommitKey.decode,
    1: OffsetCommitKey.decode,
    2: GroupMetadataKey.decode,
}


def read_offsets_key(buf: bytes | bytearray | memoryview) -> OffsetsKey:
    """Decode a ``__consumer_offsets`` key; UnknownVersionError for other record types
    (e.g. the KIP-848 consumer-group records of newer brokers)."""
    version = _peek_version(buf, "key")
    decoder = _OFFSETS_KEYS.get(version)
    if decoder is None:
        raise UnknownVersionError(f"unknown __consumer_offsets record type {version}", version)
    return decoder(buf)


def read_offsets_value(
    key: OffsetsKey, buf: bytes | bytearray | memoryview | None
) -> OffsetsValue | None:
    """Decode the value that goes with ``key``; None for a tombstone."""
    if buf is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return OffsetCommitValue.decode(buf)
    return GroupMetadataValue.decode(buf)


def read_transaction_log_key(buf: bytes | bytearray | memoryview) -> TransactionLogKey:
    return TransactionLogKey.decode(buf)


def read_transaction_log_value(
    buf: bytes | bytearray | memoryview | None,
) -> TransactionLogValue | None:
    """Decode a ``__transaction_state`` value; None for a tombstone."""
    if buf is None:
        return None
    return TransactionLogValue.decode(buf)
