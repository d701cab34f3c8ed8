"""Tests for klog/storage/index_entries.py: the one rule set of a sound index file."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from klog.storage.index import AbortedTxn, OffsetIndex, TimeIndex
from klog.storage.index_entries import (
    IndexShape,
    offset_index_shape,
    time_index_shape,
    txn_index_shape,
)


def offsets(*entries: tuple[int, int], base: int = 0) -> bytes:
    return b"".join(struct.pack(">ii", o - base, p) for o, p in entries)


def times(*entries: tuple[int, int], base: int = 0) -> bytes:
    return b"".join(struct.pack(">qi", t, o - base) for t, o in entries)


def test_offset_index_shapes() -> None:
    good = [(10, 100), (12, 300)]
    assert offset_index_shape(offsets(*good), 0) == IndexShape(2, 2, 2)
    # Entry 0 may be zero (Kafka prints it); a file of zero entries holds none.
    found = offset_index_shape(offsets((0, 0), (0, 0)), 0)
    assert (found.usable, found.written, found.preallocated, found.problem) == (1, 0, 2, None)
    # A zero tail ends the entries quietly: a preallocated index.
    found = offset_index_shape(offsets(*good, (0, 0), (0, 0)), 0)
    assert (found.usable, found.written, found.preallocated, found.sound) == (2, 2, 2, False)
    # Garbage after a zero tail is named where it is.
    found = offset_index_shape(offsets(*good, (0, 0), (7, 1)), 0)
    assert (found.usable, found.entry, found.byte, found.dropped) == (2, 3, 24, 2)
    assert "follows the zero-filled tail that starts at entry 2" in (found.problem or "")
    found = offset_index_shape(offsets(*good, (11, 400)), 0)
    assert found.entry == 2 and found.bad == (11, 400)
    assert "offset 11 is not above entry 1's offset 12" in (found.problem or "")
    found = offset_index_shape(offsets((99, 5), base=100), 100)
    assert "offset 99 is below the segment's base offset 100" in (found.problem or "")
    found = offset_index_shape(offsets(*good) + b"\x00\x01\x02", 0)
    assert (found.usable, found.entry, found.byte) == (2, None, 16)


def test_time_index_shapes() -> None:
    # Timestamps that tie are Kafka's "out of order" report, not a fault.
    found = time_index_shape(times((5, 3), (5, 4), (0, 0)), 0)
    assert (found.usable, found.unordered, found.preallocated, found.problem) == (2, 1, 1, None)
    assert "offset 2 is below entry 0's offset 3" in (
        time_index_shape(times((5, 3), (6, 2)), 0).problem or ""
    )
    assert "repeats the base offset" in (time_index_shape(times((5, 0), (6, 0)), 0).problem or "")


def test_txn_index_shapes() -> None:
    data = AbortedTxn(5, 10, 20, 30).to_bytes() + AbortedTxn(6, 21, 15, 40).to_bytes()
    found = txn_index_shape(data, 0)
    assert found.entry == 1 and "first offset 21 is negative or after its last offset 15" in (
        found.problem or ""
    )
    assert "below the segment's base offset 50" in (
        txn_index_shape(AbortedTxn(5, 10, 20, 30).to_bytes(), 50).problem or ""
    )
    # A .txnindex is never preallocated: a zero entry is judged as any other.
    assert txn_index_shape(bytes(34), None).problem is None


@pytest.mark.parametrize("chunk", [1, 3, 65536])
def test_a_sound_index_is_judged_the_same_across_chunks(
    chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The C-level fast path judges chunk by chunk; a chunk border must not change a verdict.
    import klog.storage.index_entries as ie

    monkeypatch.setattr(ie, "_CHUNK_ENTRIES", chunk)
    entries = [(n * 3 + 1, n * 100) for n in range(10)]
    assert offset_index_shape(offsets(*entries), 0) == IndexShape(10, 10, 10)
    bad = [*entries[:6], (2, 700), *entries[7:]]
    assert offset_index_shape(offsets(*bad), 0).entry == 6
    tail = offset_index_shape(offsets(*entries, *[(0, 0)] * 5), 0)
    assert (tail.written, tail.preallocated) == (10, 5)


def test_the_index_classes_judge_by_the_same_rules(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(offsets((110, 0), (120, 500), base=100) + bytes(8 * 4))
    index = OffsetIndex(path, 100, writable=False)
    try:
        assert index.shape() == offset_index_shape(path.read_bytes(), 100)
        assert index.shape().preallocated == 4
    finally:
        index.close_handler()
    tpath = tmp_path / "00000000000000000100.timeindex"
    tpath.write_bytes(times((7, 110), (9, 120), base=100))
    tindex = TimeIndex(tpath, 100, writable=False)
    try:
        assert tindex.shape() == IndexShape(2, 2, 2)
    finally:
        tindex.close_handler()


def test_a_writable_index_is_judged_by_its_entries_not_its_room(tmp_path: Path) -> None:
    # An active segment's index: preallocated to segment.index.bytes, two entries in it.
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, max_index_size=4096)
    try:
        index.append(5, 100)
        index.append(9, 300)
        assert index.shape() == IndexShape(2, 2, 2)
        index.sanity_check(log_size=400)
    finally:
        index.close()
