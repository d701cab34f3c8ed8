"""Tests for klog.storage.log_manager.LogManager."""

from __future__ import annotations

from pathlib import Path

import pytest

from klog.storage.checkpoints import read_meta_properties, read_offset_checkpoint
from klog.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LogDirError,
    LogDirLockedError,
    LogManager,
)

from .batches import build_batch

T0 = 1_600_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def test_lock_refuses_a_second_manager(tmp_path: Path) -> None:
    first = LogManager([tmp_path / "a"]).startup()
    with pytest.raises(LogDirLockedError, match="in another process or thread"):
        LogManager([tmp_path / "a"]).startup()
    first.close()
    LogManager([tmp_path / "a"]).startup().close()  # released on close


def test_new_partitions_go_to_the_least_loaded_dir(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    with LogManager(dirs) as manager:
        for p in range(6):
            manager.get_or_create_log("t", p)
        counts = [len(list(d.glob("t-*"))) for d in dirs]
        assert counts == [2, 2, 2]
        assert manager.get_or_create_log("t", 0) is manager.get_log("t", 0)


def test_clean_shutdown_marker_and_checkpoints(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    with LogManager([log_dir]) as manager:
        log = manager.get_or_create_log("t", 0)
        log.append_as_leader(build_batch(0, count=5), 0)
        assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert read_offset_checkpoint(log_dir / "recovery-point-offset-checkpoint") == {("t", 0): 5}
    assert read_offset_checkpoint(log_dir / "log-start-offset-checkpoint") == {}
    manager = LogManager([log_dir]).startup()
    assert manager.load_summaries[0].had_clean_shutdown
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()  # removed once loaded
    log = manager.get_log("t", 0)
    assert log is not None and log.log_end_offset == 5
    log.append_as_leader(build_batch(0, count=2), 0)
    # Simulate a crash: no close, so no marker; the unflushed tail is recovered.
    manager._unlock_all()
    crashed = LogManager([log_dir]).startup()
    assert not crashed.load_summaries[0].had_clean_shutdown
    recovered = crashed.get_log("t", 0)
    assert recovered is not None and recovered.log_end_offset == 7
    crashed.close()


def test_delete_log_renames_then_removes(tmp_path: Path) -> None:
    clock = Clock()
    log_dir = tmp_path / "logs"
    with LogManager([log_dir], clock=clock) as manager:
        manager.get_or_create_log("t", 0).append_as_leader(build_batch(0), 0)
        moved = manager.delete_log("t", 0)
        assert moved is not None and moved.exists() and moved.name.endswith("-delete")
        assert manager.get_log("t", 0) is None
        manager.cleanup_logs(clock.now)
        assert moved.exists()
        clock.now += 60_000
        manager.cleanup_logs(clock.now)
        assert not moved.exists()


def test_unknown_directories_are_skipped_not_deleted(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    (log_dir / "not a partition").mkdir(parents=True)
    with LogManager([log_dir]) as manager:
        assert manager.all_logs() == {}
        assert manager.load_summaries[0].skipped
    assert (log_dir / "not a partition").exists()


def test_duplicate_partition_across_dirs(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name / "t-0").mkdir(parents=True)
    with pytest.raises(LogDirError, match="duplicate"):
        LogManager([tmp_path / "a", tmp_path / "b"]).startup()
    LogManager([tmp_path / "a"]).startup().close()  # the failed start released its locks


def test_meta_properties(tmp_path: Path) -> None:
    with LogManager([tmp_path / "a"]) as manager:
        manager.ensure_meta_properties(3, "cluster-x")
        meta = read_meta_properties(tmp_path / "a" / "meta.properties")
        assert (meta.broker_id, meta.cluster_id) == (3, "cluster-x")
        with pytest.raises(LogDirError, match=r"broker\.id"):
            manager.ensure_meta_properties(4, "cluster-x")


def test_retention_and_flush_through_manager(tmp_path: Path) -> None:
    from klog.storage.config import LogConfig

    clock = Clock()
    config = LogConfig(segment_bytes=500, retention_ms=1000, flush_ms=100)
    with LogManager([tmp_path / "a"], config, clock=clock) as manager:
        log = manager.get_or_create_log("t", 0)
        for i in range(8):
            log.append_as_leader(build_batch(0, count=2, value_size=80, base_timestamp=T0 + i), 0)
        clock.now += 200
        assert manager.flush_dirty_logs() == 1 and log.recovery_point == 16
        manager.update_high_watermark("t", 0, 16)
        clock.now += 5000
        assert manager.cleanup_logs() > 0
        assert log.log_start_offset > 0
        manager.checkpoint_recovery_points_and_log_start_offsets()
        starts = read_offset_checkpoint(tmp_path / "a" / "log-start-offset-checkpoint")
        assert starts == {}  # equal to the first segment's base offset: not recorded
        manager.checkpoint_high_watermarks()
        hws = read_offset_checkpoint(tmp_path / "a" / "replication-offset-checkpoint")
        assert hws == {("t", 0): 16}


def test_high_watermark_on_load_is_the_checkpointed_one_or_the_log_start(
        tmp_path: Path) -> None:
    """A log with no entry in replication-offset-checkpoint (created after the last
    checkpoint, then a crash) starts at its log start offset, as in Kafka
    (Partition.createLog: the checkpoint, else 0), not at its log end: that tail may be on
    no other replica, and a leader would have served it as committed at once."""
    log_dir = tmp_path / "logs"
    manager = LogManager([log_dir]).startup()
    checkpointed = manager.get_or_create_log("t", 0)
    checkpointed.append_as_leader(build_batch(0, count=5), 0)
    manager.update_high_watermark("t", 0, 3)
    manager.checkpoint_high_watermarks()
    manager.get_or_create_log("t", 1).append_as_leader(build_batch(0, count=4), 0)
    started_later = manager.get_or_create_log("t", 2)
    started_later.append_as_leader(build_batch(0, count=6), 0)
    started_later.update_high_watermark(6)
    started_later.maybe_increment_log_start_offset(2)  # DeleteRecords, say
    manager.checkpoint_recovery_points_and_log_start_offsets()
    manager._unlock_all()  # a crash: no close, no new checkpoint
    reloaded = LogManager([log_dir]).startup()
    try:
        hws = {p: log.high_watermark for (_t, p), log in reloaded.all_logs().items()}
        ends = {p: log.log_end_offset for (_t, p), log in reloaded.all_logs().items()}
        assert ends == {0: 5, 1: 4, 2: 6}
        assert hws == {0: 3, 1: 0, 2: 2}  # clamped to the log start offset
    finally:
        reloaded.close()
