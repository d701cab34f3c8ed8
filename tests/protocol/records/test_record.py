"""Tests for klog.protocol.records.record."""

from __future__ import annotations

import dataclasses

import pytest

from klog.protocol.records.batch import TimestampType
from klog.protocol.records.record import Record, make_record


def test_defaults_and_sizes() -> None:
    record = Record(offset=1, timestamp=2, key=None, value=b"abc")
    assert record.headers == () and record.sequence == -1 and record.magic == 2
    assert record.crc is None and record.is_valid
    assert record.timestamp_type is TimestampType.CREATE_TIME
    assert (record.key_size, record.value_size) == (-1, 3)
    assert not record.has_key and record.has_value


def test_fast_constructor_builds_an_equal_frozen_record() -> None:
    args = (5, 6, b"k", None, (("h", b"v"),), 7, 0, 30, 1, 1234, False,
            TimestampType.LOG_APPEND_TIME)
    fast = make_record(*args)
    assert type(fast) is Record
    assert fast == Record(*args)
    assert hash(fast) == hash(Record(*args))
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.offset = 9  # type: ignore[misc]
    assert dataclasses.replace(fast, offset=9).offset == 9
    assert not hasattr(fast, "__dict__")
