"""Tests for klog.storage.segment: scan_segment, rebuild_indexes and LogSegment."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from klog.storage import segment as seg
from klog.storage.index import (
    OffsetIndex,
    TimeIndex,
    read_offset_index_entries,
    read_time_index_entries,
)
from klog.storage.segment import rebuild_indexes, scan_segment

from .batches import build_batch, sequential_batches


def write_log(tmp_path: Path, data: bytes, base_offset: int = 0) -> Path:
    path = seg.log_file_path(tmp_path, base_offset)
    path.write_bytes(data)
    return path


# -- file names ---------------------------------------------------------------------------


def test_filename_prefix_round_trip() -> None:
    assert seg.filename_prefix_from_offset(42) == "00000000000000000042"
    assert seg.offset_from_filename("00000000000000000042.log") == 42
    assert seg.offset_from_filename("00000000000000000042.index.deleted") == 42
    with pytest.raises(ValueError):
        seg.offset_from_filename("leader-epoch-checkpoint")


# -- scan_segment -------------------------------------------------------------------------


def test_scan_clean_segment(tmp_path: Path) -> None:
    batches = sequential_batches(10, records_per_batch=3)
    path = write_log(tmp_path, b"".join(batches))
    seen: list[int] = []
    scan = scan_segment(path, expected_min_offset=0, progress=seen.append)
    assert scan.error is None and scan.is_clean
    assert scan.file_size == scan.valid_bytes == sum(map(len, batches))
    assert scan.truncated_bytes == 0
    assert (scan.batches, scan.records) == (10, 30)
    assert (scan.first_offset, scan.last_offset) == (0, 29)
    assert scan.max_timestamp == 1_600_000_000_000 + 9000 + 2
    assert scan.offset_of_max_timestamp == 29
    assert sum(seen) == scan.file_size


def test_scan_empty_file(tmp_path: Path) -> None:
    path = write_log(tmp_path, b"")
    scan = scan_segment(path)
    assert (scan.file_size, scan.valid_bytes, scan.batches, scan.error) == (0, 0, 0, None)
    assert scan.first_offset is None and scan.last_offset is None
    assert scan.max_timestamp == -1


@pytest.mark.parametrize("cut", [1, 5, 11, 12, 30, 60])
def test_scan_torn_tail(tmp_path: Path, cut: int) -> None:
    batches = sequential_batches(3)
    data = b"".join(batches)
    last = len(batches[-1])
    path = write_log(tmp_path, data[: len(data) - last + cut])
    scan = scan_segment(path)
    assert scan.valid_bytes == len(data) - last
    assert scan.truncated_bytes == cut
    assert scan.batches == 2
    assert scan.error is not None and scan.error.startswith("truncated batch")
    if cut >= 12:
        assert scan.error == f"truncated batch: {cut} bytes of {last}"
        assert scan.error_offset == 6
    assert scan.error_position == len(data) - last


def test_scan_flipped_byte(tmp_path: Path) -> None:
    batches = sequential_batches(4)
    data = bytearray(b"".join(batches))
    bad = len(batches[0]) + len(batches[1])
    data[bad + 70] ^= 0xFF  # inside the records of the third batch
    path = write_log(tmp_path, bytes(data))
    scan = scan_segment(path)
    assert scan.valid_bytes == bad
    assert scan.error is not None and scan.error.startswith("record is corrupt (stored crc")
    assert scan.error_position == bad and scan.error_offset == 6
    assert scan.batches == 2
    # Without CRC checks the flipped byte goes unnoticed.
    assert scan_segment(path, verify_crc=False).valid_bytes == len(data)


def test_scan_zero_filled_tail(tmp_path: Path) -> None:
    batches = sequential_batches(3)
    data = b"".join(batches)
    path = write_log(tmp_path, data + bytes(4096))
    scan = scan_segment(path)
    assert scan.valid_bytes == len(data)
    assert scan.truncated_bytes == 4096
    assert "less than the minimum record overhead" in (scan.error or "")
    assert scan.error_position == len(data) and scan.error_offset == 0


def test_scan_huge_length_field(tmp_path: Path) -> None:
    batch = bytearray(build_batch(0, count=2))
    struct.pack_into(">i", batch, 8, 2**31 - 1)
    path = write_log(tmp_path, bytes(batch))
    scan = scan_segment(path, max_batch_size=1_000_000)
    assert scan.valid_bytes == 0
    assert "exceeds the largest allowable message size" in (scan.error or "")
    # With the default bound the length is "allowed" but runs past the end of the file.
    scan = scan_segment(path)
    assert scan.valid_bytes == 0
    assert "exceeds the largest allowable message size" in (scan.error or "")
    # A length within the bound but past the end of the file is a torn batch (and is not
    # allocated).
    struct.pack_into(">i", batch, 8, 2**30)
    path.write_bytes(bytes(batch))
    scan = scan_segment(path)
    assert scan.error == f"truncated batch: {len(batch)} bytes of {2**30 + 12}"


def test_scan_garbage(tmp_path: Path) -> None:
    path = write_log(tmp_path, os.urandom(3000))
    scan = scan_segment(path)
    assert scan.valid_bytes == 0 and scan.error is not None
    assert scan.error_position == 0


def test_scan_offsets_must_increase(tmp_path: Path) -> None:
    data = build_batch(0, count=3) + build_batch(10, count=2) + build_batch(5, count=2)
    path = write_log(tmp_path, data)
    scan = scan_segment(path)
    assert scan.batches == 2 and scan.last_offset == 11
    assert "out of order offsets" in (scan.error or "")
    assert scan.error_offset == 5


def test_scan_expected_min_offset_and_overflow(tmp_path: Path) -> None:
    data = build_batch(100, count=2)
    path = write_log(tmp_path, data, base_offset=100)
    assert scan_segment(path, expected_min_offset=100).is_clean
    below = scan_segment(path, expected_min_offset=101)
    assert below.valid_bytes == 0 and "below the segment's base offset" in (below.error or "")
    far = write_log(tmp_path, build_batch(2**31 + 5, count=1), base_offset=1)
    over = scan_segment(far, expected_min_offset=1)
    assert "overflows" in (over.error or "")


def test_scan_batches_straddling_small_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny chunks force every refill path: straddling headers, and batches bigger than
    # the chunk read whole.
    monkeypatch.setattr(seg, "SCAN_CHUNK_SIZE", 100)
    batches = sequential_batches(20, records_per_batch=4, value_size=17)
    batches.append(build_batch(80, count=1, value_size=5000))
    batches.append(build_batch(81, count=1))
    data = b"".join(batches)
    path = write_log(tmp_path, data)
    scan = scan_segment(path)
    assert scan.is_clean and scan.valid_bytes == len(data)
    assert scan.batches == 22 and scan.last_offset == 81
    # A torn big batch is detected without reading past the file.
    path.write_bytes(data[: -len(batches[-1]) - 100])
    scan = scan_segment(path)
    assert scan.batches == 20
    assert scan.error == f"truncated batch: {len(batches[-2]) - 100} bytes of {len(batches[-2])}"


def test_scan_start_position(tmp_path: Path) -> None:
    batches = sequential_batches(5)
    path = write_log(tmp_path, b"".join(batches))
    scan = scan_segment(path, start_position=len(batches[0]) + len(batches[1]))
    assert scan.batches == 3 and scan.first_offset == 6
    assert scan.valid_bytes == scan.file_size


# -- rebuild_indexes ----------------------------------------------------------------------


def test_rebuild_indexes_matches_kafka_rule(tmp_path: Path) -> None:
    batches = sequential_batches(100, records_per_batch=5, value_size=100)
    data = b"".join(batches)
    path = write_log(tmp_path, data, base_offset=0)
    result = rebuild_indexes(path, 0, valid_bytes=len(data), index_interval_bytes=4096)
    # Recompute Kafka's rule by hand.
    expected = []
    position = last_entry = 0
    for i, batch in enumerate(batches):
        if position - last_entry > 4096:
            expected.append((i * 5 + 4, position))
            last_entry = position
        position += len(batch)
    entries = read_offset_index_entries(seg.offset_index_file_path(tmp_path, 0), 0)
    assert entries == expected
    assert result.offset_index_entries == len(expected) > 0
    times = read_time_index_entries(seg.time_index_file_path(tmp_path, 0), 0)
    assert result.time_index_entries == len(times) == len(expected) + 1
    assert times[-1] == (1_600_000_000_000 + 99_000 + 4, 499)
    assert result.valid_bytes == len(data) and result.batches == 100
    assert not list(tmp_path.glob("*.tmp"))
    # The files are trimmed and pass the sanity checks.
    assert seg.offset_index_file_path(tmp_path, 0).stat().st_size == 8 * len(expected)
    idx = OffsetIndex(seg.offset_index_file_path(tmp_path, 0), 0)
    idx.sanity_check(log_size=len(data))
    tidx = TimeIndex(seg.time_index_file_path(tmp_path, 0), 0)
    tidx.sanity_check()
    idx.close_handler()
    tidx.close_handler()


def test_rebuild_indexes_scans_when_valid_bytes_unknown(tmp_path: Path) -> None:
    batches = sequential_batches(30, value_size=200)
    data = b"".join(batches)
    path = write_log(tmp_path, data + b"\x00" * 50, base_offset=0)
    result = rebuild_indexes(path, 0)
    assert result.valid_bytes == len(data)
    assert result.last_offset == 89
    assert path.stat().st_size == len(data) + 50  # never truncates


def test_rebuild_indexes_rejects_invalid_prefix(tmp_path: Path) -> None:
    batches = sequential_batches(3)
    data = bytearray(b"".join(batches))
    first = len(batches[0])
    data[first : first + 20] = bytes(20)  # the second batch's header
    path = write_log(tmp_path, bytes(data))
    from klog.protocol.errors import CorruptRecordError

    with pytest.raises(CorruptRecordError):
        rebuild_indexes(path, 0, valid_bytes=len(data))
    assert not list(tmp_path.glob("*.tmp"))


def test_scan_result_does_not_depend_on_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = sequential_batches(15, records_per_batch=2, value_size=40)
    batches.insert(7, build_batch(14, count=1, value_size=700))
    # keep offsets increasing after the inserted batch
    batches = batches[:8] + sequential_batches(
        7, records_per_batch=2, value_size=40, start_offset=15
    )
    data = b"".join(batches)
    for cut in (0, 7, 33, 400):
        path = write_log(tmp_path, data[: len(data) - cut])
        reference = scan_segment(path)
        for chunk in (61, 62, 64, 97, 128, 333, 1000):
            monkeypatch.setattr(seg, "SCAN_CHUNK_SIZE", chunk)
            assert scan_segment(path) == reference, (cut, chunk)
        monkeypatch.setattr(seg, "SCAN_CHUNK_SIZE", 8 * 1024 * 1024)


# -- LogSegment ---------------------------------------------------------------------------


def make_segment(tmp_path: Path, base: int = 0, **kwargs: object) -> seg.LogSegment:
    return seg.LogSegment(tmp_path, base, **kwargs)


def fill(segment: seg.LogSegment, batches: list[bytes]) -> None:
    from klog.protocol.records.batch import read_batch_header

    for b in batches:
        h = read_batch_header(b, 0)
        segment.append(h.last_offset, h.max_timestamp, h.last_offset, b)


def test_segment_append_indexes_like_kafka(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=500)
    batches = sequential_batches(20, records_per_batch=2, value_size=100)
    fill(segment, batches)
    # Kafka's rule on append: an entry when more than 500 bytes were appended since the
    # last one, for the batch being appended (its last offset -> its position).
    expected, since, position = [], 0, 0
    for i, b in enumerate(batches):
        if since > 500:
            expected.append((2 * i + 1, position))
            since = 0
        since += len(b)
        position += len(b)
    assert list((e.offset, e.position) for e in segment.offset_index.iter_entries()) == expected
    # Recovery rebuilds the same index from the file.
    segment.close()
    reopened = make_segment(tmp_path, index_interval_bytes=500)
    assert reopened.recover() == 0
    got = [(e.offset, e.position) for e in reopened.offset_index.iter_entries()]
    assert got == expected
    assert reopened.read_next_offset() == 40
    reopened.close()


def test_segment_read_translate_and_timestamps(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, base=100, index_interval_bytes=200)
    batches = sequential_batches(10, records_per_batch=3, value_size=50, start_offset=100)
    fill(segment, batches)
    size = len(batches[0])
    found = segment.translate_offset(104)
    assert found == seg.LogOffsetPosition(105, size, size)
    assert segment.translate_offset(130) is None
    info = segment.read(104, size * 3 - 1)
    assert info is not None and info.size == size * 2
    assert info.read_bytes() == batches[1] + batches[2]
    assert info.fetch_offset_metadata == seg.LogOffsetMetadata(104, 100, size)
    assert segment.read(104, 1).size == size  # at least one batch
    assert segment.read(104, size * 5, max_position=size * 3).size == size * 2
    assert segment.read(200, 100) is None
    hit = segment.find_offset_by_timestamp(1_600_000_000_000 + 3000)
    assert hit is not None and hit.offset == 109
    assert segment.find_offset_by_timestamp(1_600_000_000_000 + 10**6) is None

    # With a record locator the exact record is found.
    def locator(data: bytes):
        from klog.protocol.records.batch import read_batch_header
        from klog.protocol.records.v2 import iter_records

        h = read_batch_header(data, 0)
        for r in iter_records(data, h):
            yield r.offset, r.timestamp

    exact = segment.find_offset_by_timestamp(1_600_000_000_000 + 3001, record_locator=locator)
    assert exact is not None and (exact.offset, exact.timestamp) == (110, 1_600_000_000_000 + 3001)
    segment.close()


def test_segment_truncate_to(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=100)
    batches = sequential_batches(10)
    fill(segment, batches)
    removed = segment.truncate_to(13)  # inside the 5th batch (12..14): it goes whole
    assert removed == sum(map(len, batches[4:]))
    assert segment.size == sum(map(len, batches[:4]))
    assert segment.read_next_offset() == 12
    assert segment.offset_index.last_offset < 12
    assert segment.truncate_to(100) == 0
    segment.close()


@pytest.mark.parametrize(
    "damage",
    ["torn", "flipped", "zeros", "huge_length", "garbage"],
)
def test_segment_recover_truncates_only_at_the_first_invalid_byte(
    tmp_path: Path, damage: str
) -> None:
    batches = sequential_batches(8, value_size=100)
    good = b"".join(batches[:5])
    tail = b"".join(batches[5:])
    if damage == "torn":
        bad = tail[: len(batches[5]) - 7]
    elif damage == "flipped":
        bad = bytes([tail[0]]) + tail[1:70] + bytes([tail[70] ^ 0x40]) + tail[71:]
    elif damage == "zeros":
        bad = bytes(3000)
    elif damage == "huge_length":
        bad = tail[:8] + struct.pack(">i", 2**31 - 20) + tail[12:]
    else:
        bad = os.urandom(500)
    path = seg.log_file_path(tmp_path, 0)
    path.write_bytes(good + bad)
    segment = make_segment(tmp_path)
    assert segment.recover() == len(bad)
    assert path.read_bytes() == good
    assert segment.read_next_offset() == 15
    segment.close()


def test_segment_recover_empty_file(tmp_path: Path) -> None:
    seg.log_file_path(tmp_path, 7).write_bytes(b"")
    segment = make_segment(tmp_path, base=7)
    assert segment.recover() == 0
    assert segment.read_next_offset() == 7
    assert seg.log_file_path(tmp_path, 7).exists()
    segment.close()


def test_segment_recover_refuses_offset_overflow(tmp_path: Path) -> None:
    data = build_batch(0, count=1) + build_batch(2**31 + 1, count=1)
    seg.log_file_path(tmp_path, 0).write_bytes(data)
    segment = make_segment(tmp_path)
    with pytest.raises(seg.LogSegmentOffsetOverflowError):
        segment.recover()
    assert seg.log_file_path(tmp_path, 0).read_bytes() == data  # nothing truncated
    segment.close()


def test_segment_roll_conditions(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, base=10)
    fill(segment, sequential_batches(2, start_offset=10))

    def params(**kw: int) -> seg.RollParams:
        base = dict(
            max_segment_ms=10**9,
            max_segment_bytes=10**9,
            max_timestamp_in_messages=1_600_000_000_000,
            max_offset_in_messages=20,
            messages_size=10,
            now_ms=0,
        )
        base.update(kw)
        return seg.RollParams(**base)

    assert not segment.should_roll(params())
    assert segment.should_roll(params(max_segment_bytes=segment.size + 5))
    assert segment.should_roll(
        params(max_segment_ms=10, max_timestamp_in_messages=1_600_000_001_000)
    )
    assert segment.should_roll(params(max_offset_in_messages=10 + 2**31))
    segment.close()


def test_segment_close_trims_and_suffixes(tmp_path: Path) -> None:
    segment = make_segment(tmp_path, index_interval_bytes=10)
    fill(segment, sequential_batches(5))
    assert segment.offset_index_path.stat().st_size == 10 * 1024 * 1024
    segment.change_file_suffixes("", ".deleted")
    assert segment.has_suffix(".deleted")
    assert segment.log_path.name == "00000000000000000000.log.deleted"
    assert segment.read(0, 10**6).size == segment.size  # still readable after the rename
    segment.close()
    assert segment.offset_index_path.stat().st_size == 8 * 4
    segment.delete_if_exists()
    assert segment.deleted and not list(tmp_path.iterdir())
