"""Tests for klog.storage.scan: scan_segment and rebuild_indexes."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from klog.storage import scan as scan_module
from klog.storage.files import log_file_path, offset_index_file_path, time_index_file_path
from klog.storage.index import (
    OffsetIndex,
    TimeIndex,
    read_offset_index_entries,
    read_time_index_entries,
)
from klog.storage.scan import rebuild_indexes, scan_segment

from .batches import build_batch, sequential_batches


def write_log(tmp_path: Path, data: bytes, base_offset: int = 0) -> Path:
    path = log_file_path(tmp_path, base_offset)
    path.write_bytes(data)
    return path


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
    monkeypatch.setattr(scan_module, "SCAN_CHUNK_SIZE", 100)
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
    entries = read_offset_index_entries(offset_index_file_path(tmp_path, 0), 0)
    assert entries == expected
    assert result.offset_index_entries == len(expected) > 0
    times = read_time_index_entries(time_index_file_path(tmp_path, 0), 0)
    assert result.time_index_entries == len(times) == len(expected) + 1
    assert times[-1] == (1_600_000_000_000 + 99_000 + 4, 499)
    assert result.valid_bytes == len(data) and result.batches == 100
    assert not list(tmp_path.glob("*.tmp"))
    # The files are trimmed and pass the sanity checks.
    assert offset_index_file_path(tmp_path, 0).stat().st_size == 8 * len(expected)
    idx = OffsetIndex(offset_index_file_path(tmp_path, 0), 0)
    idx.sanity_check(log_size=len(data))
    tidx = TimeIndex(time_index_file_path(tmp_path, 0), 0)
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
            monkeypatch.setattr(scan_module, "SCAN_CHUNK_SIZE", chunk)
            assert scan_segment(path) == reference, (cut, chunk)
        monkeypatch.setattr(scan_module, "SCAN_CHUNK_SIZE", 8 * 1024 * 1024)
