"""Tests for klog.protocol.records.compression."""

from __future__ import annotations

import gc
import gzip
import struct
import time
import tracemalloc

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from klog.protocol.errors import (
    CorruptRecordError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from klog.protocol.records.batch import CompressionType
from klog.protocol.records.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    XERIAL_MAGIC,
    compress,
    compress_lz4,
    compress_snappy_raw,
    compress_snappy_xerial,
    decompress,
    xxh32,
)

CODECS = [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD]
SAMPLE = b"".join(b"record-%06d:" % i + bytes(range(i % 50)) for i in range(3000))
MiB = 1024 * 1024


def test_default_bound_applies() -> None:
    bomb = compress(CompressionType.GZIP, bytes(DEFAULT_MAX_DECOMPRESSED_SIZE + 1))
    with pytest.raises(RecordTooLargeError):
        decompress(CompressionType.GZIP, bomb)


@pytest.mark.parametrize("codec", [CompressionType.NONE, *CODECS])
def test_round_trip(codec: CompressionType) -> None:
    compressed = compress(codec, SAMPLE)
    if codec is not CompressionType.NONE:
        assert len(compressed) < len(SAMPLE)
    assert decompress(codec, compressed) == SAMPLE
    assert decompress(int(codec), memoryview(compressed)) == SAMPLE


@pytest.mark.parametrize("codec", CODECS)
def test_empty_input_round_trips(codec: CompressionType) -> None:
    assert decompress(codec, compress(codec, b"")) == b""


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("level", [1, 5])
def test_levels(codec: CompressionType, level: int) -> None:
    if codec is CompressionType.SNAPPY:
        level = 0  # snappy has no levels; the argument is ignored
    assert decompress(codec, compress(codec, SAMPLE, level=level)) == SAMPLE


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=5000), st.sampled_from([0, 1, 2]))
def test_round_trip_property(codec: CompressionType, data: bytes, magic: int) -> None:
    assert decompress(codec, compress(codec, data, magic=magic), magic=magic) == data


def test_unknown_codec_ids() -> None:
    for codec in (5, 6, 7, -1):
        with pytest.raises(UnsupportedCompressionError):
            decompress(codec, b"abc")
        with pytest.raises(UnsupportedCompressionError):
            compress(codec, b"abc")


# --- snappy ------------------------------------------------------------------------------


def test_snappy_writes_the_xerial_framing_java_writes() -> None:
    data = SAMPLE * 3  # more than one 32 KiB block
    framed = compress(CompressionType.SNAPPY, data)
    assert framed[:8] == XERIAL_MAGIC
    assert struct.unpack(">ii", framed[8:16]) == (1, 1)
    first_block_length = struct.unpack(">i", framed[16:20])[0]
    first_block = framed[20 : 20 + first_block_length]
    assert bytes(cramjam.snappy.decompress_raw(first_block)) == data[: 32 * 1024]
    assert compress_snappy_xerial(data) == framed


def test_snappy_reads_raw_blocks() -> None:
    raw = compress_snappy_raw(SAMPLE)
    assert not raw.startswith(XERIAL_MAGIC)
    assert decompress(CompressionType.SNAPPY, raw) == SAMPLE


def test_xerial_version_fields_are_not_checked() -> None:
    # Some producers write version/compat little-endian; snappy-java ignores them.
    framed = compress_snappy_xerial(SAMPLE)
    odd = framed[:8] + struct.pack("<ii", 1, 1) + framed[16:]
    assert decompress(CompressionType.SNAPPY, odd) == SAMPLE


def test_xerial_header_only_is_empty() -> None:
    assert decompress(CompressionType.SNAPPY, XERIAL_MAGIC + struct.pack(">ii", 1, 1)) == b""


@pytest.mark.parametrize(
    "tail",
    [struct.pack(">i", -5) + b"abc", struct.pack(">i", 1000) + b"abc", b"\x00\x00"],
)
def test_xerial_bad_block_lengths(tail: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.SNAPPY, XERIAL_MAGIC + struct.pack(">ii", 1, 1) + tail)


def test_snappy_preamble_lies_are_caught_before_allocating() -> None:
    # Claims 4 GiB - 1 from a few bytes: over the bound -> too large, no allocation.
    liar = b"\xff\xff\xff\xff\x0f" + b"\x00" * 10
    with pytest.raises(RecordTooLargeError):
        decompress(CompressionType.SNAPPY, liar)
    # Within the bound but impossible for the input size -> corrupt.
    liar = b"\x80\x80\x80\x01" + b"\x00" * 10  # 2 MiB from 14 bytes
    with pytest.raises(CorruptRecordError, match="claims"):
        decompress(CompressionType.SNAPPY, liar)


# --- lz4 ---------------------------------------------------------------------------------


def test_xxh32_matches_reference_values() -> None:
    # Reference digests of the xxHash spec (seed 0).
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_lz4_frame_is_what_kafka_writes() -> None:
    frame = compress(CompressionType.LZ4, SAMPLE)
    assert frame[:4] == b"\x04\x22\x4d\x18"
    flg, bd = frame[4], frame[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks
    assert not flg & 0x08  # no content size
    assert not flg & 0x04  # no content checksum
    assert (bd >> 4) & 0x7 == 4  # 64 KiB blocks
    assert frame[6] == (xxh32(frame[4:6]) >> 8) & 0xFF


def test_lz4_v0_writes_the_kafka_3160_checksum_and_reads_it_back() -> None:
    frame = compress(CompressionType.LZ4, SAMPLE, magic=0)
    assert frame[6] == (xxh32(frame[:6]) >> 8) & 0xFF
    assert frame[6] != (xxh32(frame[4:6]) >> 8) & 0xFF
    assert decompress(CompressionType.LZ4, frame, magic=0) == SAMPLE
    # Kafka checks the HC for magic >= 1, so do we.
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.LZ4, frame, magic=1)


def test_lz4_v0_accepts_correct_checksum_and_content_size_frames() -> None:
    assert decompress(CompressionType.LZ4, compress_lz4(SAMPLE), magic=0) == SAMPLE
    with_size = lz4.frame.compress(SAMPLE, store_size=True, block_linked=False)
    header_end = 4 + 2 + 8  # magic, FLG, BD, content size
    broken = (xxh32(with_size[:header_end]) >> 8) & 0xFF
    frame = with_size[:header_end] + bytes((broken,)) + with_size[header_end + 1 :]
    assert decompress(CompressionType.LZ4, frame, magic=0) == SAMPLE


def test_lz4_reads_frames_of_other_writers() -> None:
    # Linked blocks, content checksum, content size: the lz4 library defaults.
    assert decompress(CompressionType.LZ4, lz4.frame.compress(SAMPLE)) == SAMPLE


@pytest.mark.parametrize(
    "frame",
    [b"", b"\x04\x22\x4d", b"\x00\x00\x00\x00\x60\x40\x82", b"\x04\x22\x4d\x18\xc0\x40\x00"],
)
def test_lz4_bad_headers(frame: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.LZ4, frame)


# --- gzip / zstd -------------------------------------------------------------------------


def test_gzip_reads_concatenated_members_and_ignores_trailing_bytes() -> None:
    data = gzip.compress(b"one") + gzip.compress(b"two") + b"\x00\x00junk"
    assert decompress(CompressionType.GZIP, data) == b"onetwo"


def test_zstd_without_content_size_and_several_frames() -> None:
    streaming = zstandard.ZstdCompressor(write_content_size=False)
    frame = streaming.compress(SAMPLE)
    assert zstandard.frame_content_size(frame) == -1
    assert decompress(CompressionType.ZSTD, frame) == SAMPLE
    assert decompress(CompressionType.ZSTD, frame + frame) == SAMPLE + SAMPLE


def test_zstd_trailing_garbage_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.ZSTD, compress(CompressionType.ZSTD, SAMPLE) + b"garbage!")


# --- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "garbage",
    [b"", b"\x00", b"\x00" * 64, b"this is not compressed at all" * 4, bytes(range(256))],
)
def test_garbage_is_corrupt(codec: CompressionType, garbage: bytes) -> None:
    if codec is CompressionType.SNAPPY and garbage == b"\x00":
        # A raw snappy block of length 0 is exactly b"\x00": valid and empty.
        assert decompress(codec, garbage) == b""
        return
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_streams_are_corrupt(codec: CompressionType) -> None:
    compressed = compress(codec, SAMPLE)
    for cut in (len(compressed) // 2, len(compressed) - 3, 10):
        with pytest.raises(CorruptRecordError):
            decompress(codec, compressed[:cut])


@pytest.mark.parametrize("codec", CODECS)
def test_flipped_bytes_never_crash(codec: CompressionType) -> None:
    compressed = bytearray(compress(codec, SAMPLE))
    for i in range(0, len(compressed), max(1, len(compressed) // 40)):
        damaged = bytearray(compressed)
        damaged[i] ^= 0xFF
        try:
            out = decompress(codec, bytes(damaged), max_size=len(SAMPLE) * 2)
        except (CorruptRecordError, RecordTooLargeError):
            continue
        assert len(out) <= len(SAMPLE) * 2


@pytest.fixture(scope="module")
def bombs() -> dict[CompressionType, bytes]:
    zeros = bytes(48 * MiB)
    return {
        CompressionType.GZIP: gzip.compress(zeros, compresslevel=1),
        CompressionType.SNAPPY: compress(CompressionType.SNAPPY, zeros),
        CompressionType.LZ4: compress_lz4(zeros, level=1),
        CompressionType.ZSTD: zstandard.ZstdCompressor(level=1).compress(zeros),
    }


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_bomb_stops_at_the_bound(codec, bombs) -> None:
    bomb = bombs[codec]
    assert len(bomb) < 4 * MiB
    limit = 1 * MiB
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(RecordTooLargeError):
            decompress(codec, bomb, max_size=limit)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 5
    # Output is bounded: nowhere near the 48 MiB the bomb would inflate to.
    assert peak < len(bomb) + 8 * MiB


@pytest.mark.parametrize("codec", CODECS)
def test_exactly_the_bound_is_allowed(codec: CompressionType) -> None:
    data = b"x" * 10_000
    assert decompress(codec, compress(codec, data), max_size=10_000) == data
    with pytest.raises(RecordTooLargeError):
        decompress(codec, compress(codec, data), max_size=9_999)


def test_zstd_checksummed_and_skippable_frames() -> None:
    checked = zstandard.ZstdCompressor(write_checksum=True).compress(SAMPLE)
    skippable = struct.pack("<II", 0x184D2A50, 3) + b"abc"
    assert decompress(CompressionType.ZSTD, skippable + checked) == SAMPLE
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.ZSTD, checked[:-2])
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.ZSTD, skippable[:-1])


def test_zstd_window_beyond_the_bound_is_refused_before_allocating() -> None:
    params = zstandard.ZstdCompressionParameters.from_level(
        3, window_log=27, write_content_size=False
    )
    # Streaming: the compressor does not know the input size, so keeps the 128 MiB window.
    streaming = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = streaming.compress(SAMPLE) + streaming.flush()
    assert zstandard.get_frame_parameters(frame).window_size == 128 * MiB
    with pytest.raises(RecordTooLargeError, match="window"):
        decompress(CompressionType.ZSTD, frame)
    assert decompress(CompressionType.ZSTD, frame, max_size=128 * MiB) == SAMPLE


@pytest.mark.parametrize("codec", CODECS)
def test_a_refused_bomb_leaves_nothing_inflated_behind_its_exception(codec, bombs) -> None:
    # The broker answers a refused batch after its check (in a worker thread) returned the
    # exception: the frames of that exception's traceback must not keep the bytes inflated
    # so far alive. They would until a cyclic collection, which bytes never trigger: a
    # client sending bombs grew a broker to 1 GiB this way.
    limit = 16 * MiB
    gc.disable()
    tracemalloc.start()
    try:
        try:
            decompress(codec, bombs[codec], max_size=limit)
        except RecordTooLargeError as exc:
            kept: BaseException | None = exc
        else:
            kept = None
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        gc.enable()
    assert kept is not None
    assert held < 2 * MiB, f"{held} bytes still held after the refusal"
