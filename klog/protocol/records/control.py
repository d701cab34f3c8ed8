"""Control records: the markers a transaction coordinator writes into partitions.

This module owns the key/value schemas of control records (records of a v2 batch with the
control flag set, Kafka's ControlRecordType and EndTransactionMarker)::

    key   => version: int16 (0), type: int16
    value => version: int16 (0), coordinatorEpoch: int32        (ABORT and COMMIT only)

Types known to Kafka 3.x: ABORT 0, COMMIT 1, and the KRaft quorum ones LEADER_CHANGE 2,
SNAPSHOT_HEADER 3, SNAPSHOT_FOOTER 4, KRAFT_VERSION 5, KRAFT_VOTERS 6. Anything else reads as
UNKNOWN, which consumers skip, as Kafka's do. A key version other than 0 is read as
version 0 (the schema may only grow); a negative one is corruption.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
from enum import IntEnum

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import TimestampType
from klog.protocol.records.record import Record
from klog.protocol.records.v2 import BatchBuilder

CURRENT_CONTROL_RECORD_KEY_VERSION = 0
CONTROL_RECORD_KEY_SIZE = 4
CURRENT_END_TXN_MARKER_VERSION = 0
END_TXN_MARKER_VALUE_SIZE = 6

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1

    @classmethod
    def from_type_id(cls, type_id: int) -> ControlRecordType:
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN


def parse_control_key(key: bytes | bytearray | memoryview | None) -> tuple[int, ControlRecordType]:
    """(version, type) of a control record key; CorruptRecordError if it is unreadable."""
    if key is None or len(key) < CONTROL_RECORD_KEY_SIZE:
        size = "null" if key is None else len(key)
        raise CorruptRecordError(
            f"control record key must have at least {CONTROL_RECORD_KEY_SIZE} bytes, "
            f"found {size}"
        )
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"invalid control record key version {version}")
    return version, ControlRecordType.from_type_id(type_id)


def control_key(control_type: ControlRecordType) -> bytes:
    """The key of a control record of ``control_type`` (version 0)."""
    if control_type is ControlRecordType.UNKNOWN:
        raise ValueError("cannot write an UNKNOWN control record")
    return _KEY.pack(CURRENT_CONTROL_RECORD_KEY_VERSION, int(control_type))


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A COMMIT or ABORT marker and the coordinator epoch that wrote it."""

    control_type: ControlRecordType
    coordinator_epoch: int
    version: int = CURRENT_END_TXN_MARKER_VERSION

    def __post_init__(self) -> None:
        if self.control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise ValueError(f"end transaction marker of type {self.control_type!r}")

    def key(self) -> bytes:
        return control_key(self.control_type)

    def value(self) -> bytes:
        return _VALUE.pack(self.version, self.coordinator_epoch)

    @classmethod
    def from_record(cls, record: Record) -> EndTransactionMarker:
        """Decode the marker of a control record; CorruptRecordError if it is not one."""
        _version, control_type = parse_control_key(record.key)
        if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            raise CorruptRecordError(
                f"control record at offset {record.offset} is {control_type.name}, "
                "not an end transaction marker"
            )
        value = record.value
        if value is None or len(value) < END_TXN_MARKER_VALUE_SIZE:
            size = "null" if value is None else len(value)
            raise CorruptRecordError(
                f"end transaction marker value at offset {record.offset} must have at least "
                f"{END_TXN_MARKER_VALUE_SIZE} bytes, found {size}"
            )
        version, coordinator_epoch = _VALUE.unpack_from(value, 0)
        if version < 0:
            raise CorruptRecordError(f"invalid end transaction marker version {version}")
        # Newer versions may append fields; version 0's prefix is what we know.
        return cls(control_type, coordinator_epoch, version)


def build_control_batch(
    marker: EndTransactionMarker,
    *,
    producer_id: int,
    producer_epoch: int,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A one-record control batch carrying ``marker`` (transactional and control set).

    ``timestamp`` defaults to now, as the coordinator stamps markers when it writes them.
    """
    if timestamp is None:
        timestamp = int(time.time() * 1000)
    builder = BatchBuilder(
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
        timestamp_type=TimestampType.CREATE_TIME,
    )
    builder.append(timestamp, marker.key(), marker.value())
    return builder.build()
