"""Tests for klog.protocol.records.batch (headers, CRCs, scanning, patching)."""

from __future__ import annotations

import struct
import zlib

import pytest

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    CompressionType,
    TimestampType,
    crc32c,
    iter_batch_headers,
    patch_base_offset,
    patch_legacy_offset,
    patch_partition_leader_epoch,
    read_batch_header,
)
from klog.protocol.records.legacy import build_legacy_message, build_legacy_message_set
from klog.protocol.records.v2 import BatchBuilder, build_batch


def _batch(**kwargs) -> bytes:
    builder = BatchBuilder(
        base_offset=kwargs.pop("base_offset", 100),
        producer_id=kwargs.pop("producer_id", 4242),
        producer_epoch=kwargs.pop("producer_epoch", 3),
        base_sequence=kwargs.pop("base_sequence", 17),
        partition_leader_epoch=kwargs.pop("partition_leader_epoch", 9),
        **kwargs,
    )
    builder.append(1_000, b"k1", b"v1")
    builder.append(1_500, None, b"v2", [("h", b"x")])
    builder.append(1_200, b"k3", None)
    return builder.build()


def test_v2_header_fields() -> None:
    buf = _batch()
    h = read_batch_header(buf)
    assert h.position == 0
    assert h.base_offset == 100
    assert h.last_offset == 102
    assert h.next_offset == 103
    assert h.last_offset_delta == 2
    assert h.batch_length == len(buf) - LOG_OVERHEAD
    assert h.size == h.end == len(buf)
    assert h.partition_leader_epoch == 9
    assert h.magic == 2
    assert h.base_timestamp == 1_000
    assert h.max_timestamp == 1_500
    assert h.producer_id == 4242
    assert h.has_producer_id
    assert h.producer_epoch == 3
    assert h.base_sequence == 17
    assert h.last_sequence == 19
    assert h.records_count == 3
    assert h.compression is CompressionType.NONE
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert not h.is_transactional and not h.is_control and not h.has_delete_horizon
    assert h.is_valid(buf)
    h.ensure_valid(buf)


def test_v2_attribute_flags() -> None:
    buf = _batch(
        compression=CompressionType.ZSTD,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=5_000,
        is_transactional=True,
        is_control=True,
    )
    h = read_batch_header(buf)
    assert h.compression is CompressionType.ZSTD
    assert h.compression_id == 4
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert h.max_timestamp == 5_000
    assert h.is_transactional and h.is_control
    assert h.is_valid(buf)


def test_last_sequence_wraps_at_int_max() -> None:
    h = read_batch_header(_batch(base_sequence=2**31 - 2))
    assert h.last_sequence == 0
    assert read_batch_header(_batch(base_sequence=-1)).last_sequence == -1


def test_crc_is_crc32c_of_attributes_to_end() -> None:
    buf = _batch()
    (stored,) = struct.unpack_from(">I", buf, CRC_OFFSET)
    assert stored == crc32c(buf[ATTRIBUTES_OFFSET:])
    h = read_batch_header(buf)
    assert h.crc == stored == h.compute_crc(buf)
    assert h.crc_span() == (ATTRIBUTES_OFFSET, len(buf))


@pytest.mark.parametrize("index", [ATTRIBUTES_OFFSET, 30, RECORD_BATCH_OVERHEAD + 2, -1])
def test_flipped_byte_under_the_crc_is_detected(index: int) -> None:
    damaged = bytearray(_batch())
    damaged[index] ^= 0x01
    h = read_batch_header(damaged)
    assert not h.is_valid(damaged)
    with pytest.raises(CorruptRecordError, match="corrupt"):
        h.ensure_valid(damaged)


def test_patching_offset_and_epoch_keeps_the_crc() -> None:
    buf = bytearray(_batch())
    patch_base_offset(buf, 0, 5_000)
    patch_partition_leader_epoch(buf, 0, 77)
    h = read_batch_header(buf)
    assert (h.base_offset, h.last_offset, h.partition_leader_epoch) == (5_000, 5_002, 77)
    assert h.is_valid(buf)


def test_legacy_header_fields_and_crc() -> None:
    buf = build_legacy_message(7, 1, b"key", b"value", timestamp=123)
    h = read_batch_header(buf)
    assert (h.magic, h.base_offset, h.last_offset, h.records_count) == (1, 7, 7, 1)
    assert h.base_timestamp == h.max_timestamp == 123
    assert h.timestamp_type is TimestampType.CREATE_TIME
    assert h.crc == zlib.crc32(buf[16:])
    assert h.is_valid(buf)
    h0 = read_batch_header(build_legacy_message(7, 0, None, b"v"))
    assert h0.timestamp_type is TimestampType.NO_TIMESTAMP_TYPE
    assert h0.base_timestamp == -1


def test_legacy_wrapper_has_no_base_offset() -> None:
    buf = build_legacy_message_set(
        [(1, b"a", b"b"), (2, b"c", b"d")], magic=1, compression=CompressionType.GZIP,
        base_offset=10,
    )
    h = read_batch_header(buf)
    assert h.base_offset is None and h.records_count is None
    assert h.last_offset == 11
    assert h.compression is CompressionType.GZIP


def test_legacy_flipped_byte_and_offset_patch() -> None:
    buf = bytearray(build_legacy_message(7, 1, b"key", b"value", timestamp=123))
    patch_legacy_offset(buf, 0, 99)
    h = read_batch_header(buf)
    assert h.last_offset == 99 and h.is_valid(buf)
    buf[-1] ^= 0x40
    assert not read_batch_header(buf).is_valid(buf)


def test_scanning_several_entries_of_mixed_magic() -> None:
    parts = [
        build_legacy_message(0, 0, b"a", b"b"),
        build_legacy_message(1, 1, b"a", b"b", timestamp=5),
        build_batch([(10, b"k", b"v", ())], base_offset=2),
    ]
    buf = b"".join(parts)
    headers = list(iter_batch_headers(buf))
    assert [h.magic for h in headers] == [0, 1, 2]
    assert [h.position for h in headers] == [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    assert headers[-1].end == len(buf)
    assert list(iter_batch_headers(buf, headers[1].position)) == headers[1:]


def test_torn_tail_stops_scanning_quietly() -> None:
    one = _batch()
    buf = one + one[:-5]
    headers = list(iter_batch_headers(buf))
    assert len(headers) == 1 and headers[0].end == len(one)
    # A tail shorter than the log overhead too.
    assert len(list(iter_batch_headers(one + one[:7]))) == 1
    with pytest.raises(CorruptRecordError, match="only"):
        read_batch_header(buf, len(one))


def test_end_argument_limits_the_scan() -> None:
    one = _batch()
    buf = one + one
    assert len(list(iter_batch_headers(buf, 0, len(one)))) == 1
    with pytest.raises(ValueError):
        list(iter_batch_headers(buf, 0, len(buf) + 1))


@pytest.mark.parametrize("length", [-1, 0, 13, 2**31 - 1])
def test_impossible_length_fields(length: int) -> None:
    buf = bytearray(_batch())
    struct.pack_into(">i", buf, 8, length)
    with pytest.raises(CorruptRecordError) as info:
        read_batch_header(buf)
    assert info.value.position == 0
    if length < 14:
        with pytest.raises(CorruptRecordError):
            list(iter_batch_headers(buf))


def test_length_above_the_configured_maximum() -> None:
    buf = _batch()
    with pytest.raises(CorruptRecordError, match="largest allowable"):
        read_batch_header(buf, max_batch_size=20)
    with pytest.raises(CorruptRecordError):
        list(iter_batch_headers(buf, max_batch_size=20))


def test_v2_length_smaller_than_its_header() -> None:
    buf = bytearray(_batch())
    struct.pack_into(">i", buf, 8, 30)
    with pytest.raises(CorruptRecordError, match="smaller than the header"):
        read_batch_header(buf)


def test_legacy_length_smaller_than_its_overhead() -> None:
    buf = bytearray(build_legacy_message(0, 1, None, None, timestamp=1))
    struct.pack_into(">i", buf, 8, 15)  # >= 14 but < 22 for v1
    with pytest.raises(CorruptRecordError, match="less than"):
        read_batch_header(buf)


def test_negative_last_offset_delta() -> None:
    buf = bytearray(_batch())
    struct.pack_into(">i", buf, 23, -4)
    with pytest.raises(CorruptRecordError, match="lastOffsetDelta"):
        read_batch_header(buf)


@pytest.mark.parametrize("magic", [3, 7, 255])
def test_unknown_magic(magic: int) -> None:
    buf = bytearray(_batch())
    buf[16] = magic
    with pytest.raises(CorruptRecordError, match="unknown magic"):
        read_batch_header(buf)
    with pytest.raises(CorruptRecordError, match="unknown magic"):
        list(iter_batch_headers(buf))


def test_zero_filled_buffer_is_corrupt() -> None:
    zeros = bytes(4096)
    with pytest.raises(CorruptRecordError):
        read_batch_header(zeros)
    with pytest.raises(CorruptRecordError) as info:
        list(iter_batch_headers(_batch() + zeros))
    assert info.value.position == len(_batch())


def test_empty_buffer_yields_nothing() -> None:
    assert list(iter_batch_headers(b"")) == []


def test_unknown_codec_in_attributes() -> None:
    buf = bytearray(_batch())
    struct.pack_into(">h", buf, ATTRIBUTES_OFFSET, 6)
    h = read_batch_header(buf)
    assert h.compression_id == 6
    with pytest.raises(CorruptRecordError, match="unknown compression"):
        _ = h.compression


def test_payload_and_records_views_do_not_copy() -> None:
    buf = bytearray(_batch())
    h = read_batch_header(buf)
    view = h.payload(buf)
    assert view.obj is buf and len(view) == h.size
    assert len(h.records_view(buf)) == h.size - RECORD_BATCH_OVERHEAD
    with pytest.raises(ValueError):
        read_batch_header(build_legacy_message(0, 1, None, b"v")).records_view(b"")
