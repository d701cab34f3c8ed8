"""One decoded record: a v2 record or a v0/v1 message, as Kafka's ``Record`` interface sees it.

This module owns the ``Record`` value object. Decoders (``v2``, ``legacy``) build it through
``make_record``, a fast path: a frozen dataclass's generated ``__init__`` sets each of the
twelve fields through ``object.__setattr__`` and costs ~3 µs, which alone would cap a dump
at ~300k records/s. ``make_record`` fills a mutable twin with the identical slot layout and
then retypes it (``__class__`` assignment, allowed between classes with the same slots),
which costs a third of that. The result is an ordinary, immutable ``Record``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from klog.protocol.records.batch import TimestampType

Header = tuple[str, bytes | None]

_Bytes = bytes | bytearray | memoryview
# What the batch builders take per record: (timestamp, key, value[, headers]).
RecordTuple = (
    tuple[int, _Bytes | None, _Bytes | None]
    | tuple[int, _Bytes | None, _Bytes | None, Sequence[tuple[str, bytes | None]]]
)


@dataclass(frozen=True, slots=True)
class Record:
    """A record with its absolute offset.

    ``sequence`` is the v2 producer sequence of this record (baseSequence + offsetDelta,
    wrapping at 2**31) or -1. ``attributes`` are the record's own attributes (v2: the
    unused int8; v0/v1: the message's attributes byte). ``crc`` and ``is_valid`` are
    meaningful for v0/v1 messages, each of which carries its own CRC-32; for v2 the CRC
    belongs to the batch and these are None / True.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = -1
    attributes: int = 0
    size_in_bytes: int = 0
    magic: int = 2
    crc: int | None = None
    is_valid: bool = True
    timestamp_type: TimestampType = TimestampType.CREATE_TIME

    @property
    def key_size(self) -> int:
        """Kafka's keySize: -1 for a null key."""
        return -1 if self.key is None else len(self.key)

    @property
    def value_size(self) -> int:
        """Kafka's valueSize: -1 for a null value."""
        return -1 if self.value is None else len(self.value)

    @property
    def has_key(self) -> bool:
        return self.key is not None

    @property
    def has_value(self) -> bool:
        return self.value is not None


class _MutableRecord:
    """Same slots as Record, without the frozen __setattr__; only used by make_record."""

    __slots__ = Record.__slots__

    # Record's fields, declared for the type checker only: annotations without values add
    # no class attributes, so the slots above stay the only storage.
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    sequence: int
    attributes: int
    size_in_bytes: int
    magic: int
    crc: int | None
    is_valid: bool
    timestamp_type: TimestampType


assert tuple(f.name for f in fields(Record)) == Record.__slots__

_new = object.__new__


def make_record(
    offset: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[Header, ...],
    sequence: int,
    attributes: int,
    size_in_bytes: int,
    magic: int,
    crc: int | None,
    is_valid: bool,
    timestamp_type: TimestampType,
) -> Record:
    """Build a Record quickly (all fields positional, no defaults)."""
    r = _new(_MutableRecord)
    r.offset = offset
    r.timestamp = timestamp
    r.key = key
    r.value = value
    r.headers = headers
    r.sequence = sequence
    r.attributes = attributes
    r.size_in_bytes = size_in_bytes
    r.magic = magic
    r.crc = crc
    r.is_valid = is_valid
    r.timestamp_type = timestamp_type
    # The retyping is the point (module docstring); mypy cannot follow a __class__ change,
    # and typing.cast would cost a call per record on this path.
    r.__class__ = Record  # type: ignore[assignment]
    return r  # type: ignore[return-value]
