"""Tests for klog.protocol.records.legacy (v0/v1 message sets)."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog.protocol.errors import CorruptRecordError, RecordTooLargeError
from klog.protocol.records.batch import (
    CompressionType,
    TimestampType,
    iter_batch_headers,
    read_batch_header,
)
from klog.protocol.records.compression import compress, compress_lz4, xxh32
from klog.protocol.records.legacy import (
    build_legacy_message,
    build_legacy_message_set,
    iter_legacy_records,
)
from klog.protocol.records.record import Record

LEGACY_CODECS = [
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
]


def decode_all(buf: bytes, **kwargs) -> list[Record]:
    return [r for h in iter_batch_headers(buf) for r in iter_legacy_records(buf, h, **kwargs)]


def wrapper(
    inner: bytes, *, offset: int, magic: int = 1, codec: int = 1, timestamp: int = 0,
    log_append_time: bool = False,
) -> bytes:
    attributes = codec | (0x08 if log_append_time else 0)
    return build_legacy_message(
        offset, magic, None, compress(codec, inner, magic=magic), timestamp=timestamp,
        attributes=attributes,
    )


def test_uncompressed_v1_message() -> None:
    buf = build_legacy_message(42, 1, b"key", b"value", timestamp=1_234)
    (record,) = decode_all(buf)
    assert (record.offset, record.timestamp, record.key, record.value) == (42, 1_234, b"key",
                                                                            b"value")
    assert record.magic == 1
    assert record.timestamp_type is TimestampType.CREATE_TIME
    assert record.crc == zlib.crc32(buf[16:])
    assert record.is_valid
    assert record.size_in_bytes == len(buf)
    assert record.headers == () and record.sequence == -1 and record.attributes == 0


def test_uncompressed_v0_message_with_nulls() -> None:
    buf = build_legacy_message(3, 0, None, None)
    (record,) = decode_all(buf)
    assert (record.offset, record.key, record.value) == (3, None, None)
    assert record.key_size == record.value_size == -1
    assert record.timestamp == -1
    assert record.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE
    assert record.magic == 0 and record.is_valid


def test_uncompressed_v1_log_append_time_bit() -> None:
    buf = build_legacy_message(0, 1, None, b"v", timestamp=9, attributes=0x08)
    (record,) = decode_all(buf)
    assert record.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert record.attributes == 0x08


def test_bad_crc_is_reported_not_raised() -> None:
    buf = bytearray(build_legacy_message(0, 1, b"k", b"value", timestamp=1))
    buf[-1] ^= 0x01
    (record,) = decode_all(bytes(buf))
    assert not record.is_valid
    assert record.value == b"valud"


def test_v1_wrapper_relative_offsets_with_gaps() -> None:
    inner = b"".join(
        build_legacy_message(rel, 1, b"k%d" % rel, b"v", timestamp=100 + rel) for rel in (0, 2, 5)
    )
    buf = wrapper(inner, offset=1005, timestamp=105)
    header = read_batch_header(buf)
    assert header.last_offset == 1005 and header.base_offset is None
    records = decode_all(buf)
    assert [r.offset for r in records] == [1000, 1002, 1005]
    assert [r.timestamp for r in records] == [100, 102, 105]
    assert all(r.timestamp_type is TimestampType.CREATE_TIME and r.is_valid for r in records)
    assert [r.size_in_bytes for r in records] == [12 + 22 + 2 + 1] * 3


def test_v1_wrapper_with_offset_zero_keeps_inner_offsets() -> None:
    # Some librdkafka versions produced wrapper offset 0; Kafka then uses inner offsets as-is.
    inner = b"".join(build_legacy_message(rel, 1, None, b"v", timestamp=1) for rel in (0, 1))
    assert [r.offset for r in decode_all(wrapper(inner, offset=0))] == [0, 1]


def test_v1_wrapper_offset_below_last_inner_is_corrupt() -> None:
    inner = b"".join(build_legacy_message(rel, 1, None, b"v", timestamp=1) for rel in (0, 9))
    with pytest.raises(CorruptRecordError, match="less than the last inner"):
        decode_all(wrapper(inner, offset=5))


def test_v0_wrapper_absolute_offsets() -> None:
    inner = b"".join(build_legacy_message(off, 0, None, b"v") for off in (70, 71, 75))
    records = decode_all(wrapper(inner, offset=75, magic=0, codec=2))
    assert [r.offset for r in records] == [70, 71, 75]
    assert all(r.timestamp == -1 for r in records)


def test_v1_log_append_time_wrapper_overrides_inner_timestamps() -> None:
    inner = b"".join(build_legacy_message(rel, 1, None, b"v", timestamp=rel) for rel in (0, 1))
    records = decode_all(wrapper(inner, offset=11, timestamp=777, log_append_time=True))
    assert [r.timestamp for r in records] == [777, 777]
    assert all(r.timestamp_type is TimestampType.LOG_APPEND_TIME for r in records)


def test_inner_crc_checked_per_message() -> None:
    good = build_legacy_message(0, 1, None, b"good", timestamp=1)
    bad = bytearray(build_legacy_message(1, 1, None, b"bad!", timestamp=1))
    bad[-1] ^= 0x20
    records = decode_all(wrapper(good + bytes(bad), offset=1))
    assert [r.is_valid for r in records] == [True, False]
    assert records[1].crc == struct.unpack(">I", bad[12:16])[0]


def test_wrapper_crc_is_the_headers_business() -> None:
    buf = bytearray(wrapper(build_legacy_message(0, 1, None, b"v", timestamp=1), offset=0))
    buf[17] ^= 0x00  # untouched
    header = read_batch_header(buf)
    assert header.is_valid(buf)
    buf[20] ^= 0x01  # wrapper timestamp byte: wrapper CRC now wrong
    header = read_batch_header(buf)
    assert not header.is_valid(buf)
    assert [r.is_valid for r in iter_legacy_records(buf, header)] == [True]


def test_nested_compression_is_corrupt() -> None:
    inner_wrapper = wrapper(build_legacy_message(0, 1, None, b"v", timestamp=1), offset=0)
    with pytest.raises(CorruptRecordError, match="must not be compressed"):
        decode_all(wrapper(inner_wrapper, offset=0))


def test_null_wrapper_value_is_corrupt() -> None:
    buf = build_legacy_message(0, 1, None, None, timestamp=1, attributes=1)
    with pytest.raises(CorruptRecordError, match="null value"):
        decode_all(buf)


def test_zstd_wrapper_is_corrupt() -> None:
    buf = build_legacy_message(
        0, 1, None, compress(4, build_legacy_message(0, 1, None, b"v", timestamp=1)),
        timestamp=1, attributes=4,
    )
    with pytest.raises(CorruptRecordError, match="zstd"):
        decode_all(buf)


def test_empty_wrapper_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError, match="no inner"):
        decode_all(wrapper(b"", offset=0))


@pytest.mark.parametrize(
    "inner",
    [
        b"\x00" * 11,  # less than a log overhead
        b"\x00" * 40,  # zero-filled: size 0 is impossible
        struct.pack(">qi", 0, 2**31 - 1) + b"\x00" * 30,  # huge size
        struct.pack(">qi", 0, 30) + b"\x00\x00\x00\x00\x07" + b"\x00" * 25,  # magic 7
        struct.pack(">qi", 0, 16) + b"\x00\x00\x00\x00\x01" + b"\x00" * 11,  # v1 too short
        build_legacy_message(0, 1, b"k", b"v", timestamp=1)[:-2],  # truncated
    ],
    ids=["tiny", "zeros", "huge-size", "magic", "short-v1", "truncated"],
)
def test_malformed_inner_message_sets(inner: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_all(wrapper(inner, offset=0))


@pytest.mark.parametrize("field", ["key", "value"])
def test_huge_key_or_value_length_in_a_message(field: str) -> None:
    buf = bytearray(build_legacy_message(0, 1, b"k", b"v", timestamp=1))
    # log overhead 12, crc 4, magic 1, attributes 1, timestamp 8 -> key length at 26
    position = 26 if field == "key" else 26 + 4 + 1
    struct.pack_into(">i", buf, position, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match=field):
        decode_all(bytes(buf))


def test_garbage_compressed_value_is_corrupt() -> None:
    buf = build_legacy_message(0, 1, None, b"not gzip at all", timestamp=1, attributes=1)
    with pytest.raises(CorruptRecordError):
        decode_all(buf)


def test_decompression_bomb() -> None:
    buf = build_legacy_message(
        0, 1, None, compress(1, bytes(4 * 1024 * 1024)), timestamp=1, attributes=1
    )
    with pytest.raises(RecordTooLargeError):
        decode_all(buf, max_decompressed_size=64 * 1024)


def test_lz4_v0_wrapper_with_kafka_3160_checksum_reads_fine() -> None:
    buf = build_legacy_message_set(
        [(0, b"a", b"b"), (0, b"c", b"d")], magic=0, compression=CompressionType.LZ4,
        base_offset=5,
    )
    header = read_batch_header(buf)
    value = buf[12 + 6 + 4 + 4 :]  # after log overhead, crc, magic, attr, key -1, value length
    assert value[6] == (xxh32(value[:6]) >> 8) & 0xFF  # the broken HC
    assert [(r.offset, r.key) for r in iter_legacy_records(buf, header)] == [(5, b"a"), (6, b"c")]


def test_lz4_v1_wrapper_must_have_the_correct_checksum() -> None:
    inner = build_legacy_message(0, 1, None, b"v", timestamp=1)
    broken = compress_lz4(inner, broken_header_checksum=True)
    buf = build_legacy_message(0, 1, None, broken, timestamp=1, attributes=3)
    with pytest.raises(CorruptRecordError):
        decode_all(buf)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_builder_layout(magic: int, codec: CompressionType) -> None:
    rows = [(1_000 + i, b"k%d" % i, b"v%d" % i) for i in range(4)]
    buf = build_legacy_message_set(rows, magic=magic, compression=codec, base_offset=20)
    headers = list(iter_batch_headers(buf))
    assert len(headers) == (4 if codec is CompressionType.NONE else 1)
    assert headers[-1].last_offset == 23
    assert all(h.is_valid(buf) and h.magic == magic for h in headers)
    records = decode_all(buf)
    assert [r.offset for r in records] == [20, 21, 22, 23]
    expected_ts = [1_000, 1_001, 1_002, 1_003] if magic == 1 else [-1] * 4
    assert [r.timestamp for r in records] == expected_ts
    if codec is not CompressionType.NONE and magic == 1:
        assert headers[0].max_timestamp == 1_003


@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_builder_log_append_time(codec: CompressionType) -> None:
    buf = build_legacy_message_set(
        [(1, None, b"a"), (2, None, b"b")], magic=1, compression=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=4_242,
    )
    records = decode_all(buf)
    assert [r.timestamp for r in records] == [4_242, 4_242]
    assert all(r.timestamp_type is TimestampType.LOG_APPEND_TIME for r in records)


def test_builder_refusals() -> None:
    with pytest.raises(ValueError):
        build_legacy_message_set([(1, None, b"a")], magic=1, compression=CompressionType.ZSTD)
    with pytest.raises(ValueError):
        build_legacy_message_set([(1, None, b"a", [("h", b"v")])], magic=1)
    with pytest.raises(ValueError):
        build_legacy_message_set([(1, None, b"a")], magic=2)
    with pytest.raises(ValueError):
        build_legacy_message(0, 2, None, b"a")
    assert build_legacy_message_set([], magic=1) == b""


def test_iter_legacy_records_rejects_v2() -> None:
    from klog.protocol.records.v2 import build_batch

    buf = build_batch([(1, None, b"x", ())])
    with pytest.raises(ValueError):
        iter_legacy_records(buf, read_batch_header(buf))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**42),
            st.one_of(st.none(), st.binary(max_size=30)),
            st.one_of(st.none(), st.binary(max_size=200)),
        ),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from([0, 1]),
    st.sampled_from(LEGACY_CODECS),
    st.integers(0, 2**40),
)
def test_round_trip_property(rows, magic, codec, base_offset) -> None:
    buf = build_legacy_message_set(rows, magic=magic, compression=codec, base_offset=base_offset)
    records = decode_all(buf)
    assert [r.offset for r in records] == [base_offset + i for i in range(len(rows))]
    assert [(r.key, r.value) for r in records] == [(k, v) for _t, k, v in rows]
    if magic == 1:
        assert [r.timestamp for r in records] == [t for t, _k, _v in rows]
    assert all(r.is_valid and r.magic == magic for r in records)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_random_damage_raises_only_corrupt(data) -> None:
    codec = data.draw(st.sampled_from(LEGACY_CODECS))
    magic = data.draw(st.sampled_from([0, 1]))
    buf = bytearray(
        build_legacy_message_set(
            [(i, b"k%d" % i, b"v" * i) for i in range(5)], magic=magic, compression=codec
        )
    )
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(17, len(buf) - 1))  # keep offset/size/magic intact
        buf[index] = data.draw(st.integers(0, 255))
    try:
        headers = list(iter_batch_headers(bytes(buf)))
        records = [r for h in headers for r in iter_legacy_records(bytes(buf), h)]
    except (CorruptRecordError, RecordTooLargeError):
        return
    assert all(isinstance(r, Record) for r in records)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_id_is_corrupt(codec: int) -> None:
    buf = build_legacy_message(0, 1, None, b"whatever", timestamp=1, attributes=codec)
    with pytest.raises(CorruptRecordError, match="unknown compression"):
        decode_all(buf)
