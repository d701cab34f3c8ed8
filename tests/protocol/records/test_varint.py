"""Tests for klog.protocol.records.varint."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.varint import (
    read_unsigned_varint,
    read_unsigned_varlong,
    read_varint,
    read_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    write_unsigned_varint,
    write_unsigned_varlong,
    write_varint,
    write_varlong,
    zigzag_decode,
    zigzag_encode,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)


# Values from Kafka's ByteUtilsTest / the protobuf spec.
@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-64, b"\x7f"),
        (63, b"\x7e"),
        (64, b"\x80\x01"),
        (-65, b"\x81\x01"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert write_varint(value) == encoded
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert size_of_varint(value) == len(encoded)


def test_varlong_extremes_take_ten_bytes() -> None:
    for value in (2**63 - 1, -(2**63)):
        encoded = write_varlong(value)
        assert len(encoded) == 10
        assert read_varlong(encoded, 0) == (value, 10)


def test_unsigned_boundaries() -> None:
    for value in (0, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**32 - 1):
        encoded = write_unsigned_varint(value)
        assert len(encoded) == size_of_unsigned_varint(value)
        assert read_unsigned_varint(encoded, 0) == (value, len(encoded))
    assert read_unsigned_varlong(write_unsigned_varlong(2**64 - 1), 0) == (2**64 - 1, 10)


def test_zigzag() -> None:
    assert [zigzag_encode(v) for v in (0, -1, 1, -2, 2)] == [0, 1, 2, 3, 4]
    assert [zigzag_decode(v) for v in (0, 1, 2, 3, 4)] == [0, -1, 1, -2, 2]


def test_reads_at_an_offset_and_returns_the_next_position() -> None:
    buf = b"junk" + write_varint(300) + write_varlong(-5)
    value, pos = read_varint(buf, 4)
    assert value == 300
    assert read_varlong(buf, pos) == (-5, len(buf))


@pytest.mark.parametrize("reader", [read_varint, read_unsigned_varint, read_varlong])
def test_truncated_varint_is_corrupt(reader) -> None:
    with pytest.raises(CorruptRecordError, match="ends inside"):
        reader(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError):
        reader(b"", 0)
    with pytest.raises(CorruptRecordError):
        reader(b"\x05", 1)


def test_overlong_varint_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5"):
        read_varint(b"\x80\x80\x80\x80\x80\x01", 0)
    with pytest.raises(CorruptRecordError, match="longer than 10"):
        read_varlong(b"\x80" * 10 + b"\x01", 0)
    # Ten bytes is fine for a varlong, not for a varint.
    assert read_varlong(b"\x80" * 9 + b"\x01", 0)[1] == 10


def test_fifth_byte_overflow_is_truncated_like_kafka() -> None:
    # 5 bytes carry 35 bits; Java keeps the low 32. 0xff..0x7f -> all ones -> zigzag -> MIN.
    value, pos = read_varint(b"\xff\xff\xff\xff\x7f", 0)
    assert pos == 5
    assert value == -(2**31)


def test_out_of_range_writes_are_refused() -> None:
    with pytest.raises(ValueError):
        write_varint(2**31)
    with pytest.raises(ValueError):
        write_varlong(-(2**63) - 1)
    with pytest.raises(ValueError):
        write_unsigned_varint(-1)
    with pytest.raises(ValueError):
        write_unsigned_varlong(2**64)


@given(INT32)
def test_varint_round_trip(value: int) -> None:
    encoded = write_varint(value)
    assert read_varint(encoded, 0) == (value, len(encoded))
    assert len(encoded) == size_of_varint(value) <= 5


@given(INT64)
def test_varlong_round_trip(value: int) -> None:
    encoded = write_varlong(value)
    assert read_varlong(encoded, 0) == (value, len(encoded))
    assert len(encoded) <= 10


@given(st.integers(0, 2**64 - 1), st.binary(max_size=8))
def test_unsigned_varlong_round_trip_with_trailing_bytes(value: int, tail: bytes) -> None:
    encoded = write_unsigned_varlong(value)
    assert read_unsigned_varlong(encoded + tail, 0) == (value, len(encoded))


@given(st.binary(max_size=12))
def test_reader_never_crashes_on_garbage(data: bytes) -> None:
    for reader in (read_varint, read_varlong, read_unsigned_varint, read_unsigned_varlong):
        try:
            value, pos = reader(data, 0)
        except CorruptRecordError:
            continue
        assert 0 < pos <= len(data)
        assert isinstance(value, int)
