"""Tests for klog.protocol.records.control."""

from __future__ import annotations

import struct
import time

import pytest

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import read_batch_header
from klog.protocol.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_control_batch,
    control_key,
    parse_control_key,
)
from klog.protocol.records.record import Record
from klog.protocol.records.v2 import iter_records


def test_type_ids_are_kafkas() -> None:
    assert [(t.name, t.value) for t in ControlRecordType] == [
        ("ABORT", 0),
        ("COMMIT", 1),
        ("LEADER_CHANGE", 2),
        ("SNAPSHOT_HEADER", 3),
        ("SNAPSHOT_FOOTER", 4),
        ("KRAFT_VERSION", 5),
        ("KRAFT_VOTERS", 6),
        ("UNKNOWN", -1),
    ]


def test_key_encoding() -> None:
    assert control_key(ControlRecordType.ABORT) == b"\x00\x00\x00\x00"
    assert control_key(ControlRecordType.COMMIT) == b"\x00\x00\x00\x01"
    with pytest.raises(ValueError):
        control_key(ControlRecordType.UNKNOWN)


def test_parse_key() -> None:
    assert parse_control_key(b"\x00\x00\x00\x01") == (0, ControlRecordType.COMMIT)
    assert parse_control_key(bytearray(b"\x00\x00\x00\x02")) == (0, ControlRecordType.LEADER_CHANGE)
    # Unknown types are reported, not rejected; newer key versions read as version 0.
    assert parse_control_key(struct.pack(">hh", 0, 99)) == (0, ControlRecordType.UNKNOWN)
    assert parse_control_key(struct.pack(">hhh", 3, 0, 7)) == (3, ControlRecordType.ABORT)


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00", struct.pack(">hh", -1, 0)])
def test_parse_bad_keys(key) -> None:
    with pytest.raises(CorruptRecordError):
        parse_control_key(key)


def test_marker_value_encoding() -> None:
    marker = EndTransactionMarker(ControlRecordType.ABORT, coordinator_epoch=0x01020304)
    assert marker.key() == b"\x00\x00\x00\x00"
    assert marker.value() == b"\x00\x00\x01\x02\x03\x04"
    with pytest.raises(ValueError):
        EndTransactionMarker(ControlRecordType.LEADER_CHANGE, 1)


def test_control_batch_round_trip() -> None:
    marker = EndTransactionMarker(ControlRecordType.COMMIT, coordinator_epoch=12)
    buf = build_control_batch(
        marker, producer_id=99, producer_epoch=4, base_offset=500, timestamp=1_700
    )
    header = read_batch_header(buf)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_offset) == (99, 4, 500)
    assert header.records_count == 1 and header.is_valid(buf)
    (record,) = iter_records(buf, header)
    assert (record.offset, record.timestamp) == (500, 1_700)
    assert EndTransactionMarker.from_record(record) == marker


def test_control_batch_timestamp_defaults_to_now() -> None:
    before = int(time.time() * 1000)
    marker = EndTransactionMarker(ControlRecordType.ABORT, coordinator_epoch=1)
    buf = build_control_batch(marker, producer_id=1, producer_epoch=0)
    (record,) = iter_records(buf, read_batch_header(buf))
    assert before <= record.timestamp <= int(time.time() * 1000)


def _record(key: bytes | None, value: bytes | None) -> Record:
    return Record(offset=3, timestamp=0, key=key, value=value)


def test_marker_from_newer_value_version_keeps_known_prefix() -> None:
    record = _record(b"\x00\x00\x00\x00", struct.pack(">hi", 1, 8) + b"extra")
    marker = EndTransactionMarker.from_record(record)
    assert (marker.control_type, marker.coordinator_epoch, marker.version) == (
        ControlRecordType.ABORT, 8, 1,
    )


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (b"\x00\x00\x00\x02", b"\x00" * 6, "LEADER_CHANGE"),
        (b"\x00\x00\x00\x01", None, "null"),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00", "at least 6"),
        (b"\x00\x00\x00\x01", struct.pack(">hi", -2, 0), "version"),
        (b"\x00\x01", b"\x00" * 6, "at least 4"),
    ],
)
def test_marker_from_bad_records(key, value, match) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        EndTransactionMarker.from_record(_record(key, value))
