"""Tests for klog.storage.index: offset, time and transaction indexes."""

from __future__ import annotations

import bisect
import os
import socket
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klog.storage.index import (
    AbortedTxn,
    CorruptIndexError,
    IndexOffsetOverflowError,
    InvalidIndexAppendError,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    TransactionIndex,
    read_offset_index_entries,
    read_time_index_entries,
    read_txn_index_entries,
)

BASE = 1000


def make_offset_index(path: Path, entries: list[tuple[int, int]], size: int = 4096) -> OffsetIndex:
    index = OffsetIndex(path, BASE, max_index_size=size)
    for offset, position in entries:
        index.append(offset, position)
    return index


def test_new_offset_index_is_preallocated_and_trimmed_on_close(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    index = OffsetIndex(path, BASE, max_index_size=1003)
    assert path.stat().st_size == 1000  # rounded down to 8-byte entries
    assert index.max_entries == 125 and index.entries == 0
    index.append(BASE + 3, 0)
    index.append(BASE + 9, 4200)
    index.close()
    assert path.read_bytes() == struct.pack(">iiii", 3, 0, 9, 4200)
    reopened = OffsetIndex(path, BASE)
    assert reopened.entries == 2 and reopened.last_offset == BASE + 9
    assert reopened.entry(1) == OffsetPosition(BASE + 9, 4200)
    reopened.sanity_check()
    reopened.close()


def test_offset_index_append_rules(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", BASE, max_index_size=16)
    index.append(BASE + 1, 10)
    with pytest.raises(InvalidIndexAppendError):
        index.append(BASE + 1, 20)
    index.append(BASE + 2, 20)
    assert index.is_full
    with pytest.raises(InvalidIndexAppendError, match="full"):
        index.append(BASE + 3, 30)
    with pytest.raises(IndexOffsetOverflowError):
        OffsetIndex(tmp_path / "1.index", BASE).append(BASE + 2**31, 0)
    assert index.can_append_offset(BASE + 2**31 - 1)
    assert not index.can_append_offset(BASE + 2**31)
    assert not index.can_append_offset(BASE - 1)


def test_offset_index_lookup_edges(tmp_path: Path) -> None:
    index = make_offset_index(tmp_path / "0.index", [(BASE + 5, 100), (BASE + 10, 200)])
    assert index.lookup(BASE) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 4) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 5) == OffsetPosition(BASE + 5, 100)
    assert index.lookup(BASE + 9) == OffsetPosition(BASE + 5, 100)
    assert index.lookup(BASE + 10**6) == OffsetPosition(BASE + 10, 200)
    empty = OffsetIndex(tmp_path / "1.index", BASE)
    assert empty.lookup(BASE + 7) == OffsetPosition(BASE, 0)


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.integers(1, 50), min_size=0, max_size=2500),
    targets=st.lists(st.integers(-10, 130_000), min_size=1, max_size=30),
)
def test_offset_index_lookup_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[int], targets: list[int]
) -> None:
    # Up to 2500 entries: more than the 1024-entry warm section, so both halves are used.
    path = tmp_path_factory.mktemp("idx") / "0.index"
    offsets, position = [], 0
    offset = BASE
    for gap in gaps:
        offset += gap
        position += gap * 7
        offsets.append((offset, position))
    index = make_offset_index(path, offsets, size=8 * 3000)
    keys = [o for o, _ in offsets]
    for target in targets:
        target += BASE
        i = bisect.bisect_right(keys, target) - 1
        expected = OffsetPosition(*offsets[i]) if i >= 0 else OffsetPosition(BASE, 0)
        assert index.lookup(target) == expected
    index.close()
    path.unlink()


def test_warm_section_search_finds_entries_on_both_sides(tmp_path: Path) -> None:
    entries = [(BASE + 2 * i + 1, 16 * i) for i in range(5000)]
    index = make_offset_index(tmp_path / "0.index", entries, size=8 * 5000)
    warm = 8192 // 8
    cold_target = entries[5000 - warm - 100][0]
    hot_target = entries[5000 - 10][0] + 1
    assert index.lookup(cold_target) == OffsetPosition(*entries[5000 - warm - 100])
    assert index.lookup(hot_target) == OffsetPosition(*entries[5000 - 10])
    # The slot boundary between warm and cold.
    boundary = 5000 - 1 - warm
    assert index.lookup(entries[boundary][0]) == OffsetPosition(*entries[boundary])
    assert index.lookup(entries[boundary][0] + 1) == OffsetPosition(*entries[boundary])


def test_offset_index_truncate_to(tmp_path: Path) -> None:
    entries = [(BASE + 10 * i, 100 * i) for i in range(1, 11)]
    index = make_offset_index(tmp_path / "0.index", entries)
    index.truncate_to(BASE + 55)  # between entries: keep those < 55
    assert index.entries == 5 and index.last_offset == BASE + 50
    index.truncate_to(BASE + 50)  # exact: drop the entry itself
    assert index.entries == 4 and index.last_offset == BASE + 40
    index.append(BASE + 41, 450)  # appends continue after truncation
    index.truncate_to(BASE)
    assert index.entries == 0 and index.last_offset == BASE


def test_zero_filled_offset_index_fails_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    index = make_offset_index(path, [(BASE + 5, 100), (BASE + 9, 300)], size=800)
    index.flush()
    index.close_handler()  # a crash: the file stays preallocated
    reopened = OffsetIndex(path, BASE)
    assert reopened.entries == 100  # Kafka counts every slot of an existing file
    with pytest.raises(CorruptIndexError, match="do not increase"):
        reopened.sanity_check()
    reopened.close_handler()
    # Raw entries are all there for the dump tool, zeros included.
    raw = read_offset_index_entries(path, BASE)
    assert raw[:3] == [(BASE + 5, 100), (BASE + 9, 300), (BASE, 0)] and len(raw) == 100


def test_offset_index_sanity_checks(tmp_path: Path) -> None:
    odd = tmp_path / "odd.index"
    odd.write_bytes(bytes(12))
    index = OffsetIndex(odd, BASE)
    with pytest.raises(CorruptIndexError, match="multiple of 8"):
        index.sanity_check()
    index.close_handler()
    beyond = tmp_path / "beyond.index"
    beyond.write_bytes(struct.pack(">ii", 4, 9000))
    index = OffsetIndex(beyond, BASE)
    index.sanity_check()
    with pytest.raises(CorruptIndexError, match="past the end of the log"):
        index.sanity_check(log_size=500)
    index.close_handler()
    negative = tmp_path / "negative.index"
    negative.write_bytes(struct.pack(">ii", -4, 0))
    index = OffsetIndex(negative, BASE)
    with pytest.raises(CorruptIndexError, match="less than the base offset"):
        index.sanity_check()
    index.close_handler()


def test_empty_existing_index_file(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    path.write_bytes(b"")
    index = OffsetIndex(path, BASE, max_index_size=80)
    assert index.entries == 0 and index.is_full  # no room until resized
    index.sanity_check()
    index.resize(80)
    index.append(BASE + 1, 0)
    assert index.lookup(BASE + 1) == OffsetPosition(BASE + 1, 0)
    index.close()
    assert path.stat().st_size == 8


def test_read_only_index(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    make_offset_index(path, [(BASE + 1, 0)]).close()
    index = OffsetIndex(path, BASE, writable=False)
    assert index.lookup(BASE + 3) == OffsetPosition(BASE + 1, 0)
    with pytest.raises(PermissionError):
        index.append(BASE + 5, 10)
    index.close()
    with pytest.raises(FileNotFoundError):
        OffsetIndex(tmp_path / "missing.index", BASE, writable=False)


# -- time index ---------------------------------------------------------------------------


def test_time_index_maybe_append_and_lookup(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    index = TimeIndex(path, BASE, max_index_size=12 * 10)
    assert index.last_entry == TimestampOffset(-1, BASE)
    assert index.maybe_append(100, BASE + 2)
    assert not index.maybe_append(100, BASE + 5)  # not larger: skipped
    assert index.maybe_append(200, BASE + 9)
    with pytest.raises(InvalidIndexAppendError):
        index.maybe_append(300, BASE + 3)  # offset going back
    with pytest.raises(InvalidIndexAppendError):
        index.maybe_append(150, BASE + 12)  # timestamp going back
    assert index.lookup(50) == TimestampOffset(-1, BASE)
    assert index.lookup(100) == TimestampOffset(100, BASE + 2)
    assert index.lookup(199) == TimestampOffset(100, BASE + 2)
    assert index.lookup(10**15) == TimestampOffset(200, BASE + 9)
    index.close()
    assert read_time_index_entries(path, BASE) == [(100, BASE + 2), (200, BASE + 9)]
    reopened = TimeIndex(path, BASE)
    assert reopened.last_entry == TimestampOffset(200, BASE + 9)
    reopened.sanity_check()
    reopened.close()


def test_time_index_keeps_a_slot_for_the_final_entry(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", BASE, max_index_size=36)
    index.maybe_append(1, BASE + 1)
    index.maybe_append(2, BASE + 2)
    assert index.is_full
    with pytest.raises(InvalidIndexAppendError):
        index.maybe_append(3, BASE + 3)
    assert index.maybe_append(3, BASE + 3, skip_full_check=True)
    assert index.entries == 3


def test_time_index_truncate_and_zero_tail(tmp_path: Path) -> None:
    path = tmp_path / "0.timeindex"
    index = TimeIndex(path, BASE, max_index_size=12 * 20)
    for i in range(1, 6):
        index.maybe_append(1000 * i, BASE + 10 * i)
    index.truncate_to(BASE + 30)
    assert index.entries == 2 and index.last_entry == TimestampOffset(2000, BASE + 20)
    index.flush()
    index.close_handler()  # crash: preallocated zeros remain
    crashed = TimeIndex(path, BASE)
    with pytest.raises(CorruptIndexError):
        crashed.sanity_check()
    crashed.close_handler()


@settings(max_examples=40, deadline=None)
@given(
    gaps=st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 5)), max_size=1500),
    targets=st.lists(st.integers(-5, 2_000_000), min_size=1, max_size=20),
)
def test_time_index_lookup_matches_brute_force(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[tuple[int, int]], targets: list[int]
) -> None:
    path = tmp_path_factory.mktemp("tidx") / "0.timeindex"
    index = TimeIndex(path, BASE, max_index_size=12 * 1600)
    entries, ts, offset = [], 0, BASE
    for dt, do in gaps:
        ts += dt
        offset += do
        index.maybe_append(ts, offset)
        entries.append((ts, offset))
    keys = [t for t, _ in entries]
    for target in targets:
        i = bisect.bisect_right(keys, target) - 1
        expected = TimestampOffset(*entries[i]) if i >= 0 else TimestampOffset(-1, BASE)
        assert index.lookup(target) == expected
    index.close()
    path.unlink()


# -- transaction index --------------------------------------------------------------------


def test_txn_index_round_trip_and_collect(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    index = TransactionIndex(path, 0)
    assert not path.exists()  # created on first append
    txns = [
        AbortedTxn(producer_id=1, first_offset=0, last_offset=10, last_stable_offset=11),
        AbortedTxn(producer_id=2, first_offset=5, last_offset=20, last_stable_offset=21),
        AbortedTxn(producer_id=3, first_offset=30, last_offset=40, last_stable_offset=50),
    ]
    for txn in txns:
        index.append(txn)
    assert path.stat().st_size == 3 * 34
    assert read_txn_index_entries(path) == txns
    with pytest.raises(InvalidIndexAppendError):
        index.append(AbortedTxn(4, 1, 30, 31))
    result = index.collect_aborted_txns(12, 25)
    assert result.aborted_txns == [txns[1]] and result.is_complete
    result = index.collect_aborted_txns(0, 100)
    assert result.aborted_txns == txns and not result.is_complete
    index.truncate_to(20)
    assert TransactionIndex(path, 0).all_aborted_txns() == txns[:1]
    index.sanity_check()
    index.reset()
    assert path.stat().st_size == 0


def test_txn_index_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "0.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 5, 6).to_bytes() + b"\x00" * 7)
    with pytest.raises(CorruptIndexError, match="multiple of 34"):
        TransactionIndex(path, 0).sanity_check()
    path.write_bytes(AbortedTxn(1, 0, 5, 6).to_bytes())
    with pytest.raises(CorruptIndexError, match="below the segment's base offset 100"):
        TransactionIndex(path, 100).sanity_check()


# -- the read path's searches (C bisect over column views) ---------------------------------


def test_position_searches_match_brute_force(tmp_path: Path) -> None:
    # 3000 entries: beyond the 1024-entry warm section; positions with uneven gaps.
    entries, offset, position = [], BASE, 0
    for i in range(3000):
        offset += 1 + i % 7
        position += 100 + (i * 37) % 900
        entries.append((offset, position))
    index = make_offset_index(tmp_path / "0.index", entries, size=8 * 3200)
    positions = [p for _, p in entries]
    probes = [-1, 0, positions[0] - 1, positions[-1], positions[-1] + 10**6]
    probes += [p + d for p in positions[::97] for d in (-1, 0, 1)]
    for target in probes:
        expected = bisect.bisect_right(positions, target) - 1
        assert index.slot_for_position(target) == expected
        want = OffsetPosition(*entries[expected]) if expected >= 0 else OffsetPosition(BASE, 0)
        assert index.lookup_by_position(target) == want
    keys = [o for o, _ in entries]
    for target in [BASE - 1, BASE, *keys[::101], keys[-1] + 1, *(k + 1 for k in keys[::89])]:
        expected = bisect.bisect_right(keys, target) - 1
        assert index.slot_for_offset(target) == expected
        if expected >= 0:
            assert index.position_at(expected) == entries[expected][1]
    offset_column, position_column = index.columns()
    assert [socket.ntohl(w) + BASE for w in offset_column[:3000]] == keys
    assert [socket.ntohl(w) for w in position_column[:3000]] == positions
    index.close()


def test_column_views_are_released_before_remapping(tmp_path: Path) -> None:
    entries = [(BASE + i, 64 * i) for i in range(1, 50)]
    index = make_offset_index(tmp_path / "0.index", entries, size=8 * 100)
    assert index.slot_for_position(64 * 10) == 9  # maps the column views
    index.resize(8 * 200)  # remaps: the views must not pin the old mapping
    assert index.slot_for_position(64 * 10) == 9
    index.append(BASE + 60, 64 * 60)
    assert index.slot_for_position(10**6) == 49 and index.position_at(49) == 64 * 60
    index.trim_to_valid_size()
    assert index.lookup(BASE + 60) == OffsetPosition(BASE + 60, 64 * 60)
    index.close()  # would raise BufferError if a view still pinned the map
    empty = OffsetIndex(tmp_path / "1.index", BASE, 8 * 10)
    assert empty.slot_for_position(5) == -1 and empty.slot_for_offset(BASE) == -1
    empty.close()


def test_fast_appends_keep_the_checks(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", BASE, 8 * 2)
    index.append(BASE + 1, 10)
    with pytest.raises(InvalidIndexAppendError):
        index.append(BASE + 1, 20)  # not increasing
    with pytest.raises(IndexOffsetOverflowError):
        index.append(BASE + 2**31, 20)
    index.append(BASE + 2, 20)
    with pytest.raises(InvalidIndexAppendError):
        index.append(BASE + 3, 30)  # full
    index.close()
    times = TimeIndex(tmp_path / "0.timeindex", BASE, 12 * 3)
    assert times.maybe_append(100, BASE + 1)
    assert not times.maybe_append(100, BASE + 2)  # not a larger timestamp
    with pytest.raises(InvalidIndexAppendError):
        times.maybe_append(99, BASE + 3)
    with pytest.raises(InvalidIndexAppendError):
        times.maybe_append(101, BASE)  # offset going back
    with pytest.raises(IndexOffsetOverflowError):
        times.maybe_append(101, BASE + 2**31)
    assert times.maybe_append(101, BASE + 2)
    with pytest.raises(InvalidIndexAppendError):
        times.maybe_append(102, BASE + 3)  # the last slot is kept for the roll
    assert times.maybe_append(102, BASE + 3, skip_full_check=True)
    times.close()


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_mapped_indexes_hold_no_descriptor(tmp_path: Path) -> None:
    # Kafka's mapped indexes keep no file open; a broker with thousands of partitions must
    # not spend a descriptor per index (three per partition ran out at 20,000).
    before = _open_descriptors()
    indexes: list[OffsetIndex | TimeIndex] = []
    for n in range(20):
        offsets = make_offset_index(tmp_path / f"{n}.index", [(BASE + 1, 0), (BASE + 5, 80)])
        times = TimeIndex(tmp_path / f"{n}.timeindex", BASE, max_index_size=1200)
        times.maybe_append(7, BASE + 5)
        indexes += [offsets, times]
    assert _open_descriptors() == before
    # ...and they still work: written through the mapping, flushed, resized, read again.
    offsets, times = indexes[0], indexes[1]
    assert isinstance(offsets, OffsetIndex) and isinstance(times, TimeIndex)
    offsets.append(BASE + 9, 160)
    offsets.flush()
    offsets.resize(64)
    assert offsets.lookup(BASE + 6) == OffsetPosition(BASE + 5, 80)
    assert _open_descriptors() == before
    for index in indexes:
        index.close()
    assert read_offset_index_entries(tmp_path / "0.index", BASE) == [
        (BASE + 1, 0), (BASE + 5, 80), (BASE + 9, 160)]
    assert read_time_index_entries(tmp_path / "0.timeindex", BASE) == [(7, BASE + 5)]
    assert _open_descriptors() == before
