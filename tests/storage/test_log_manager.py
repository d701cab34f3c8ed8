"""Tests for klog.storage.log_manager.LogManager."""

from __future__ import annotations

from pathlib import Path

import pytest

from klog.protocol.errors import KafkaStorageError
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


# -- future logs: moving a partition to another log dir ------------------------------------


def _batches_of(log: object) -> bytes:
    return log.read(log.log_start_offset, 1 << 30, None, True).read_bytes()  # type: ignore[attr-defined]


def test_a_future_log_copies_while_the_log_is_written_then_swaps(tmp_path: Path) -> None:
    clock = Clock()
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b], clock=clock) as manager:
        log = manager.get_or_create_log("t", 0)
        assert manager.log_dir_of("t", 0) == a
        for _ in range(10):
            log.append_as_leader(build_batch(0, count=5), 3)
        log.update_high_watermark(log.log_end_offset)
        future = manager.create_future_log("t", 0, b)
        assert future.dir.parent == b and future.dir.name.endswith("-future")
        assert manager.create_future_log("t", 0, b) is future  # asked again: the same one
        copied = manager.copy_to_future("t", 0, 200)
        assert copied > 0 and not manager.future_caught_up("t", 0)
        log.append_as_leader(build_batch(0, count=5), 4)  # written meanwhile
        while manager.copy_to_future("t", 0, 200):
            pass
        assert manager.future_caught_up("t", 0)
        assert _batches_of(future) == _batches_of(log)
        swapped = manager.replace_current_with_future_log("t", 0)
        assert swapped is future and manager.get_log("t", 0) is future
        assert manager.future_log("t", 0) is None and manager.log_dir_of("t", 0) == b
        assert future.dir == b / "t-0" and future.high_watermark == 50
        assert future.leader_epoch_cache.latest_epoch == 4
        old = [p for p in a.iterdir() if p.name.startswith("t-0")]
        assert len(old) == 1 and old[0].name.endswith("-delete")
        clock.now += 60_000
        manager.cleanup_logs(clock.now)
        assert not old[0].exists()
    assert read_offset_checkpoint(b / "recovery-point-offset-checkpoint") == {("t", 0): 55}
    assert read_offset_checkpoint(a / "recovery-point-offset-checkpoint") == {}
    with LogManager([a, b]) as manager:
        assert manager.log_dir_of("t", 0) == b and manager.get_log("t", 0).log_end_offset == 55


def test_truncating_the_log_truncates_its_future_log(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b]) as manager:
        log = manager.get_or_create_log("t", 0)
        for _ in range(4):
            log.append_as_leader(build_batch(0, count=5), 0)
        manager.create_future_log("t", 0, b)
        while manager.copy_to_future("t", 0, 1 << 20):
            pass
        manager.truncate_to("t", 0, 10)
        assert manager.future_log("t", 0).log_end_offset == 10  # type: ignore[union-attr]
        log.append_as_leader(build_batch(0, count=3), 1)
        manager.copy_to_future("t", 0, 1 << 20)
        assert _batches_of(manager.future_log("t", 0)) == _batches_of(log)
        manager.truncate_fully_and_start_at("t", 0, 40)
        future = manager.future_log("t", 0)
        assert future is not None and future.log_start_offset == future.log_end_offset == 40


def test_a_move_survives_a_restart_and_can_be_given_up(tmp_path: Path) -> None:
    clock = Clock()
    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b], clock=clock) as manager:
        log = manager.get_or_create_log("t", 0)
        for _ in range(4):
            log.append_as_leader(build_batch(0, count=5), 0)
        manager.create_future_log("t", 0, b)
        manager.copy_to_future("t", 0, 100)
        copied_to = manager.future_log("t", 0).log_end_offset  # type: ignore[union-attr]
        assert 0 < copied_to < 20
    with LogManager([a, b], clock=clock) as manager:
        future = manager.future_log("t", 0)
        assert future is not None and manager.future_log_dir_of("t", 0) == b
        assert future.log_end_offset == copied_to  # loaded where the copy stopped
        while manager.copy_to_future("t", 0, 100):
            pass
        assert manager.future_caught_up("t", 0)
        gone = manager.remove_future_log("t", 0)
        assert gone is not None and gone.name.endswith("-delete")
        assert manager.future_log("t", 0) is None
        assert manager.copy_to_future("t", 0, 100) == 0
        assert manager.get_log("t", 0).log_end_offset == 20  # type: ignore[union-attr]


def test_future_log_refusals_and_the_preferred_dir(tmp_path: Path) -> None:
    from klog.storage.log_manager import FutureLogError, LogDirNotFoundError

    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    with LogManager([a, b, c]) as manager:
        assert manager.log_dir_path(str(b)) == b
        with pytest.raises(LogDirNotFoundError, match="is not found in the config"):
            manager.log_dir_path(str(tmp_path / "d"))
        with pytest.raises(FutureLogError, match="has no log"):
            manager.create_future_log("t", 0, b)
        # Not created yet: the partition will be made in the dir asked for.
        manager.maybe_update_preferred_log_dir("t", 0, b)
        assert manager.get_or_create_log("t", 0).dir.parent == b
        with pytest.raises(FutureLogError, match="already"):
            manager.create_future_log("t", 0, b)
        manager.create_future_log("t", 0, a)
        with pytest.raises(FutureLogError, match="not"):
            manager.create_future_log("t", 0, c)
        # Deleting the partition deletes its future log too.
        manager.delete_log("t", 0)
        assert manager.future_log("t", 0) is None
        assert [p.name.endswith("-delete") for p in a.iterdir() if p.name.startswith("t-0")] \
            == [True]


def test_a_crash_between_the_swaps_renames_is_refused_at_start(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name / "t-0").mkdir(parents=True)
    with pytest.raises(LogDirError, match="replacing current replica with future replica"):
        LogManager([tmp_path / "a", tmp_path / "b"]).startup()


# -- failed log dirs ------------------------------------------------------------------------


def test_a_dir_that_fails_at_start_goes_offline_and_the_others_load(tmp_path: Path) -> None:
    from klog.storage.log_manager import NoLiveLogDirError

    a, b = tmp_path / "a", tmp_path / "b"
    with LogManager([a, b]) as manager:
        manager.get_or_create_log("t", 0).append_as_leader(build_batch(0, count=3), 0)
    import shutil

    shutil.rmtree(b)
    b.write_text("not a directory any more")  # b cannot be made or read
    heard: list[tuple[Path, OSError]] = []
    manager = LogManager([a, b])
    manager.failure_listener = lambda d, e: heard.append((d, e))
    with manager:
        assert manager.offline_dirs == {b} and manager.live_log_dirs == [a]
        assert [d for d, _e in heard] == [b]
        assert manager.get_log("t", 0) is not None
        # What b held is unknown: no log is made (Kafka's rule for a partition that is
        # not new while a dir is offline), rather than an empty one standing for an old.
        with pytest.raises(KafkaStorageError, match=r"log directories .* are offline"):
            manager.get_or_create_log("u", 0)
    # Without a listener, or with every dir failed, start-up refuses.
    with pytest.raises(OSError):
        LogManager([a, b]).startup()
    with pytest.raises(NoLiveLogDirError, match="all log dirs in"):
        LogManager([b]).startup()


def test_handle_log_dir_failure_takes_its_logs_away(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    heard: list[Path] = []
    with LogManager([a, b]) as manager:
        manager.failure_listener = lambda d, e: heard.append(d)
        manager.get_or_create_log("t", 0).append_as_leader(build_batch(0, count=3), 0)
        manager.get_or_create_log("t", 1)
        manager.create_future_log("t", 0, b)
        assert manager.handle_log_dir_failure(b) == ([("t", 1)], [("t", 0)])
        assert manager.handle_log_dir_failure(b) == ([], [])  # once
        assert manager.get_log("t", 1) is None and manager.future_log("t", 0) is None
        # t-1's log was in b: it is not made again elsewhere (it would be empty).
        with pytest.raises(KafkaStorageError, match="offline log directory"):
            manager.get_or_create_log("t", 1)
        assert manager.get_or_create_log("u", 0).dir.parent == a  # live dirs only
        assert manager.get_log("t", 0) is not None and manager.live_log_dirs == [a]
        manager.checkpoint_high_watermarks()
        manager.checkpoint_recovery_points_and_log_start_offsets()
        assert heard == []  # the offline dir is not written to
    assert (a / CLEAN_SHUTDOWN_FILE).exists() and not (b / CLEAN_SHUTDOWN_FILE).exists()


def test_an_io_error_of_a_periodic_task_is_reported(tmp_path: Path) -> None:
    import errno

    heard: list[tuple[Path, int | None]] = []
    with LogManager([tmp_path / "a"]) as manager:
        manager.failure_listener = lambda d, e: heard.append((d, e.errno))
        log = manager.get_or_create_log("t", 0)
        log.append_as_leader(build_batch(0, count=3), 0)

        def broken(*_a: object, **_k: object) -> bool:
            raise OSError(errno.EIO, "Input/output error")

        log.maybe_flush = broken  # type: ignore[method-assign]
        assert manager.flush_dirty_logs() == 0
        assert heard == [(tmp_path / "a", errno.EIO)]
        del log.maybe_flush
