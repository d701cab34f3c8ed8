"""Tests for klog/storage/audit.py: storage's checks of a log dir at rest, and its lock."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from klog.storage import audit
from klog.storage.scan import rebuild_indexes
from tests.storage.inspect_batches import write_segment


def _segment(tmp_path: Path) -> tuple[Path, audit.SegmentAudit]:
    log, _layout = write_segment(tmp_path / "t-0", 0, [3] * 8)
    rebuild_indexes(log, 0, index_interval_bytes=200)
    return log, audit.audit_segment(log, 0, max_batch_size=1 << 20, partition="t-0")


def test_an_active_segments_preallocated_index_is_no_finding(tmp_path: Path) -> None:
    log, seen = _segment(tmp_path)
    scan = seen.scan
    index = log.with_suffix(".index")
    index.write_bytes(index.read_bytes() + bytes(8 * 100))
    timeindex = log.with_suffix(".timeindex")
    timeindex.write_bytes(timeindex.read_bytes() + bytes(12 * 100))
    args = (log, 0, scan.valid_bytes, scan.last_offset, scan.max_timestamp)
    # After an unclean shutdown: rebuildable. While a broker appends to it: its room.
    idle = audit.audit_indexes(*args, max_batch_size=1 << 20, batch_ends=seen.batch_ends)
    assert [f.severity for f in idle] == [audit.REBUILDABLE, audit.REBUILDABLE]
    assert audit.audit_indexes(*args, max_batch_size=1 << 20, active=True) == []


def test_an_index_with_nothing_written_yet_is_not_damage(tmp_path: Path) -> None:
    # A segment smaller than index.interval.bytes: its preallocated index is all zero
    # entries, entry 0 included; it names no batch.
    log, seen = _segment(tmp_path)
    log.with_suffix(".index").write_bytes(bytes(8 * 1000))
    scan = seen.scan
    found = audit.audit_offset_index(log, 0, scan.valid_bytes, scan.last_offset,
                                     max_batch_size=1 << 20)
    assert found is not None and found.severity == audit.REBUILDABLE
    assert audit.audit_offset_index(log, 0, scan.valid_bytes, scan.last_offset,
                                    max_batch_size=1 << 20, active=True) is None


def test_the_segment_walk_notes_the_batches_its_index_names(tmp_path: Path) -> None:
    log, seen = _segment(tmp_path)
    raw = log.with_suffix(".index").read_bytes()
    named = {p for _o, p in struct.iter_unpack(">ii", raw)}
    assert named and set(seen.batch_ends) == named
    scan = seen.scan
    # The index check from the walk's notes says what reading each batch again says.
    with_notes = audit.audit_offset_index(log, 0, scan.valid_bytes, scan.last_offset,
                                          max_batch_size=1 << 20, batch_ends=seen.batch_ends)
    read_again = audit.audit_offset_index(log, 0, scan.valid_bytes, scan.last_offset,
                                          max_batch_size=1 << 20)
    assert with_notes is None and read_again is None
    bad = bytearray(raw)
    struct.pack_into(">i", bad, 4, struct.unpack_from(">i", bad, 4)[0] + 1)
    log.with_suffix(".index").write_bytes(bytes(bad))
    again = audit.audit_segment(log, 0, max_batch_size=1 << 20)
    found = audit.audit_offset_index(log, 0, scan.valid_bytes, scan.last_offset,
                                     max_batch_size=1 << 20, batch_ends=again.batch_ends)
    assert found is not None and "not the start of a valid batch" in found.message


def test_a_brokers_lock_is_seen_by_a_tool_in_the_same_process(tmp_path: Path) -> None:
    lock = audit.lock_log_dir(tmp_path)
    try:
        with (
            pytest.raises(audit.LogDirLockedError, match="broker is running"),
            audit.log_dir_lock_held(tmp_path),
        ):
            pass
        # Closing another descriptor of the file (a tool's check) keeps the broker's lock:
        # a record lock of the open file description, not of the process.
        os.close(os.open(tmp_path / ".lock", os.O_RDONLY))
        assert audit.log_dir_is_locked(tmp_path)
        with pytest.raises(audit.LogDirLockedError, match="another process or thread"):
            audit.lock_log_dir(tmp_path)
    finally:
        lock.release()
    assert not audit.log_dir_is_locked(tmp_path)
    audit.lock_log_dir(tmp_path).release()


def test_a_tool_creates_no_lock_file(tmp_path: Path) -> None:
    with audit.log_dir_lock_held(tmp_path):
        pass
    assert not (tmp_path / ".lock").exists()


def test_producer_snapshots_a_broker_would_delete(tmp_path: Path) -> None:
    from klog.storage.producer_state import ProducerSnapshotEntry, write_snapshot

    pdir = tmp_path / "t-0"
    pdir.mkdir()
    assert audit.audit_producer_snapshots(pdir, 10) == []
    entry = ProducerSnapshotEntry(7, 0, 5, 3, 0, 1_600_000_000_000, -1, -1)
    write_snapshot(pdir / "00000000000000000010.snapshot", [entry])
    write_snapshot(pdir / "00000000000000000020.snapshot", [entry])
    (pdir / "00000000000000000005.snapshot").write_bytes(b"\x00\x01garbage")
    found = audit.audit_producer_snapshots(pdir, 10, partition="t-0")
    assert [(f.severity, f.offset) for f in found] == [(audit.WARNING, 5), (audit.WARNING, 20)]
    assert "unreadable producer state snapshot" in found[0].message
    assert "beyond the log end offset 10" in found[1].message
