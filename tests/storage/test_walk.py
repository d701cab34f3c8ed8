"""Tests for klog/storage/walk.py: the one log-file batch walker (framing, windows, stops)."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from klog.protocol.records.batch import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, BatchHeader
from klog.storage.walk import CORRUPT, SHORT, TORN, BatchWalk
from tests.storage.batches import build_batch, sequential_batches


@contextmanager
def opened(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def walk_all(
    path: Path, end: int | None = None, **options: object
) -> tuple[list[tuple[int, BatchHeader, bytes | None]], BatchWalk]:
    """Every entry as (position, header, its own bytes), and the finished walk."""
    with opened(path) as fd:
        size = os.fstat(fd).st_size if end is None else end
        walk = BatchWalk(fd, 0, size, **options)  # type: ignore[arg-type]
        out = [
            (pos, h, None if buf is None else bytes(buf[h.position : h.end]))
            for pos, h, buf in walk
        ]
    return out, walk


@pytest.mark.parametrize("chunk", [RECORD_BATCH_OVERHEAD, 100, 333, 8 << 20])
@pytest.mark.parametrize("reuse", [False, True])
def test_every_entry_whatever_the_window(tmp_path: Path, chunk: int, reuse: bool) -> None:
    # Batches of several sizes, some bigger than the window (read into a buffer of their own).
    batches = [build_batch(i * 10, count=1 + i % 4, value_size=5 + 40 * (i % 5)) for i in range(30)]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    read: list[int] = []
    entries, walk = walk_all(path, chunk_size=chunk, reuse_buffer=reuse, progress=read.append)
    assert [e[2] for e in entries] == batches
    positions = [sum(map(len, batches[:i])) for i in range(len(batches))]
    assert [e[0] for e in entries] == positions
    assert walk.stop is None and walk.position == path.stat().st_size
    assert sum(read) == path.stat().st_size


def test_fresh_buffers_stay_valid_and_reused_ones_do_not(tmp_path: Path) -> None:
    batches = sequential_batches(20)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    for reuse in (False, True):
        with opened(path) as fd:
            kept = [
                (h, buf)
                for _pos, h, buf in BatchWalk(fd, 0, len(b"".join(batches)), chunk_size=200,
                                              reuse_buffer=reuse)
            ]
        same = [bytes(buf[h.position : h.end]) for h, buf in kept] == batches  # type: ignore[index]
        assert same is not reuse


def test_a_torn_tail_and_a_walk_end_inside_an_entry_stop_as_torn(tmp_path: Path) -> None:
    batches = sequential_batches(3)
    data = b"".join(batches)
    path = tmp_path / "00000000000000000000.log"
    for cut, reason in [
        (len(data) - 5, f"truncated batch: {len(batches[2]) - 5} bytes of {len(batches[2])}"),
        (len(data) - len(batches[2]) + 7, "truncated batch: 7 bytes of at least 12"),
    ]:
        path.write_bytes(data[:cut])
        entries, walk = walk_all(path, chunk_size=100)
        assert len(entries) == 2
        assert walk.stop is not None
        assert (walk.stop.kind, walk.stop.reason) == (TORN, reason)
        assert walk.stop.position == walk.position == len(batches[0]) + len(batches[1])
    # An end chosen by the caller inside an entry is the same: the entry is not whole.
    path.write_bytes(data)
    entries, walk = walk_all(path, end=len(data) - 1)
    assert len(entries) == 2 and walk.stop is not None and walk.stop.kind == TORN


def test_a_file_shorter_than_the_walk_end_stops_as_short(tmp_path: Path) -> None:
    batches = sequential_batches(3)
    data = b"".join(batches)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data[:-5])
    # The caller believes the file is whole (its size was taken before it shrank).
    entries, walk = walk_all(path, end=len(data), chunk_size=100)
    assert len(entries) == 2
    assert walk.stop is not None and walk.stop.kind == SHORT
    assert walk.stop.reason == f"truncated batch: {len(batches[2]) - 5} bytes of {len(batches[2])}"
    # Ended at an entry boundary: no stop, the position tells.
    path.write_bytes(data[: len(batches[0])])
    entries, walk = walk_all(path, end=len(data), chunk_size=len(batches[0]))
    assert len(entries) == 1 and walk.stop is None and walk.position == len(batches[0])


def test_an_impossible_length_stops_as_corrupt_with_the_file_position(tmp_path: Path) -> None:
    batches = sequential_batches(3)
    bad = bytearray(batches[1])
    struct.pack_into(">i", bad, 8, 3)  # below the minimum entry size
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batches[0] + bytes(bad) + batches[2])
    entries, walk = walk_all(path, chunk_size=100)
    assert len(entries) == 1
    assert walk.stop is not None and walk.stop.kind == CORRUPT
    assert walk.stop.position == walk.position == len(batches[0])
    assert walk.stop.offset_field == 3  # sequential_batches: 3 records per batch
    assert "at position" not in walk.stop.reason
    # max_batch_size bounds what is believed (and allocated).
    path.write_bytes(b"".join(batches))
    entries, walk = walk_all(path, max_batch_size=len(batches[0]) - LOG_OVERHEAD - 1)
    assert entries == [] and walk.stop is not None and walk.stop.kind == CORRUPT


def test_entries_above_the_hold_bound_are_streamed_with_their_crc(tmp_path: Path) -> None:
    small = build_batch(0, count=1, value_size=10)
    big = build_batch(1, count=20, value_size=100)
    damaged = bytearray(build_batch(21, count=20, value_size=100))
    damaged[-1] ^= 0xFF
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(small + big + bytes(damaged))
    with opened(path) as fd:
        walk = BatchWalk(fd, 0, path.stat().st_size, chunk_size=64, hold_bound=len(small))
        seen = [(pos, h.last_offset, buf is None, walk.streamed_crc_ok) for pos, h, buf in walk]
    assert seen == [
        (0, 0, False, False),
        (len(small), 20, True, True),
        (len(small) + len(big), 40, True, False),
    ]
    assert walk.stop is None


def test_a_caller_that_refuses_an_entry_leaves_the_position_at_its_start(tmp_path: Path) -> None:
    batches = sequential_batches(5)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    with opened(path) as fd:
        walk = BatchWalk(fd, 0, path.stat().st_size, reuse_buffer=True)
        for _pos, header, _buf in walk:
            if header.base_offset == 9:
                break
    assert walk.position == sum(map(len, batches[:3]))
    assert walk.stop is None
