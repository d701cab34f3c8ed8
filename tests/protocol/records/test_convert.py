"""Tests for klog.protocol.records.convert: v0/v1 message sets up to one v2 batch (produce)
and v2 batches down to v0/v1 (Fetch v0-v3), read back through the decoders."""

from __future__ import annotations

import pytest

from klog.protocol.errors import CorruptRecordError, InvalidRecordError, KafkaError
from klog.protocol.records.batch import (
    CompressionType,
    TimestampType,
    iter_batch_headers,
    read_batch_header,
)
from klog.protocol.records.convert import down_convert, down_convert_magic, is_legacy, up_convert
from klog.protocol.records.decode import iter_records
from klog.protocol.records.legacy import build_legacy_message_set
from klog.protocol.records.v2 import build_batch

LEGACY_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY,
                 CompressionType.LZ4]
ITEMS = [(1000 + i, b"k%d" % i, b"v%d" % i) for i in range(5)]


def _read(data: bytes) -> list[tuple[int, int, bytes | None, int]]:
    out = []
    for h in iter_batch_headers(data):
        h.ensure_valid(data)
        out += [(r.magic, r.offset, r.value, r.timestamp) for r in iter_records(data, h)]
    return out


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_up_convert_keeps_records_and_the_producers_codec(magic: int,
                                                          codec: CompressionType) -> None:
    message_set = build_legacy_message_set(ITEMS, magic=magic, compression=codec)
    assert is_legacy(message_set)
    batch = up_convert(message_set, timestamp_type=TimestampType.CREATE_TIME,
                       compression=None, now=5)
    header = read_batch_header(batch)
    assert not is_legacy(batch)
    assert header.compression is codec and header.producer_id == -1
    expected_ts = [t for t, _k, _v in ITEMS] if magic == 1 else [-1] * 5
    assert _read(batch) == [(2, i, b"v%d" % i, expected_ts[i]) for i in range(5)]


def test_up_convert_to_the_topics_codec_and_log_append_time() -> None:
    message_set = build_legacy_message_set(ITEMS, magic=1)
    batch = up_convert(message_set, timestamp_type=TimestampType.LOG_APPEND_TIME,
                       compression=CompressionType.GZIP, now=777)
    header = read_batch_header(batch)
    assert header.compression is CompressionType.GZIP
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert {ts for _m, _o, _v, ts in _read(batch)} == {777}


def test_up_convert_refuses_damage_mixtures_and_partial_messages() -> None:
    message_set = bytearray(build_legacy_message_set(ITEMS[:1], magic=0))
    message_set[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        up_convert(message_set, timestamp_type=TimestampType.CREATE_TIME, compression=None,
                   now=0)
    mixed = build_legacy_message_set(ITEMS[:1], magic=1) + build_batch(ITEMS[:1])
    with pytest.raises(InvalidRecordError):
        up_convert(mixed, timestamp_type=TimestampType.CREATE_TIME, compression=None, now=0)
    partial = build_legacy_message_set(ITEMS[:2], magic=1)[:-3]
    with pytest.raises(CorruptRecordError):
        up_convert(partial, timestamp_type=TimestampType.CREATE_TIME, compression=None, now=0)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_down_convert_from_the_fetch_offset(magic: int, codec: CompressionType) -> None:
    data = build_batch(ITEMS, compression=codec, base_offset=10) + build_batch(
        [(2000, None, b"last")], base_offset=15)
    out = down_convert(data, magic, 12, max_bytes=1 << 20)
    got = _read(out)
    assert [(m, o, v) for m, o, v, _t in got] == [
        (magic, 12, b"v2"), (magic, 13, b"v3"), (magic, 14, b"v4"), (magic, 15, b"last")]
    assert [t for *_r, t in got] == ([1002, 1003, 1004, 2000] if magic else [-1] * 4)


def test_down_convert_keeps_old_entries_skips_control_and_refuses_zstd() -> None:
    old = build_legacy_message_set(ITEMS[:2], magic=0, base_offset=0)
    assert down_convert(old, 1, 0, max_bytes=1 << 20) == old
    control = build_batch([(1, b"\0\0\0\0", b"\0\0\0\0\0\0")], is_control=True,
                          producer_id=1, producer_epoch=0, is_transactional=True,
                          base_offset=2)
    assert down_convert(control, 1, 0, max_bytes=1 << 20) == b""
    zstd = build_batch(ITEMS, compression=CompressionType.ZSTD)
    with pytest.raises(KafkaError) as caught:
        down_convert(zstd, 1, 0, max_bytes=1 << 20)
    assert int(caught.value.error_code) == 76  # UNSUPPORTED_COMPRESSION_TYPE


def test_down_convert_is_bounded_but_gives_the_first_entry_whole() -> None:
    data = b"".join(build_batch([(1, None, b"x" * 100)], base_offset=i) for i in range(10))
    assert [o for _m, o, _v, _t in _read(down_convert(data, 1, 0, max_bytes=1))] == [0]
    some = down_convert(data, 1, 0, max_bytes=400)
    assert len(some) <= 400 and len(_read(some)) == 2


def test_which_magic_each_fetch_version_reads() -> None:
    assert [down_convert_magic(v) for v in range(6)] == [0, 0, 1, 1, None, None]


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_down_convert_v1_entries_to_v0(codec: CompressionType) -> None:
    # a log Kafka wrote in message format v1, read by a Fetch v0-v1 consumer
    v1 = build_legacy_message_set(ITEMS, magic=1, compression=codec, base_offset=3)
    got = _read(down_convert(v1, 0, 4, max_bytes=1 << 20))
    assert [(m, o, v) for m, o, v, _t in got] == [(0, 4 + i, b"v%d" % (i + 1))
                                                  for i in range(4)]
