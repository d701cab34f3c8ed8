"""The broker's log cleaner (klog/daemon/log_cleaner.py): choosing work, the state table,
aborts and pauses, the threads, checkpoints, and the LogManager's hooks.

Real logs on disk; the storage cleaner is replaced by fakes that record what they were
asked to clean, and can hold a clean open until told to go on (or until it is aborted).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from klog.daemon.log_cleaner import (
    CleanerConfig,
    CleaningState,
    LogCleaner,
    format_clean_stats,
    storage_cleaner,
    validate_reconfiguration,
)
from klog.protocol.records.batch import TRANSACTIONAL_FLAG_MASK, iter_batch_headers
from klog.protocol.records.decode import iter_records
from klog.storage.checkpoints import read_offset_checkpoint
from klog.storage.cleaner import CleanerStats, LogCleaningAbortedError, LogToClean, Throttler
from klog.storage.config import LogConfig
from klog.storage.log import PartitionLog
from klog.storage.log_manager import CLEANER_OFFSET_CHECKPOINT_FILE, LogManager
from tests.storage.batches import build_batch

COMPACT = LogConfig(cleanup_policy=("compact",))
NOW = 1_700_000_000_000
WAIT = 10.0  # seconds: a bound on waits for threads, never an assertion on speed


class FakeCleaner:
    """Records each clean. With ``hold`` set, a clean waits until ``release`` is set or
    its partition is aborted; the abort is noticed only after ``linger`` seconds, so that
    a caller returning early from an abort would be seen."""

    def __init__(self, is_aborted: Callable[[tuple[str, int]], bool], hold: bool = False,
                 linger: float = 0.0) -> None:
        self.is_aborted = is_aborted
        self.hold = hold
        self.linger = linger
        self.cleaned: list[tuple[str, int]] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.finished: list[tuple[str, int]] = []

    def clean(self, to_clean: LogToClean) -> CleanerStats:
        tp = to_clean.topic_partition
        self.started.set()
        try:
            while self.hold and not self.release.is_set():
                if self.is_aborted(tp):
                    time.sleep(self.linger)
                    raise LogCleaningAbortedError(f"{tp} aborted")
                time.sleep(0.005)
            self.cleaned.append(tp)
            return CleanerStats(bytes_read=to_clean.dirty_bytes, bytes_written=10,
                                messages_read=10, messages_written=1,
                                first_dirty_offset=to_clean.first_dirty_offset,
                                end_offset=to_clean.first_uncleanable_offset)
        finally:
            self.finished.append(tp)


class Fakes:
    def __init__(self, **kw: object) -> None:
        self.kw = kw
        self.made: list[FakeCleaner] = []

    def __call__(self, thread_id: int, config: CleanerConfig, throttler: Throttler,
                 is_aborted: Callable[[tuple[str, int]], bool]) -> FakeCleaner:
        cleaner = FakeCleaner(is_aborted, **self.kw)  # type: ignore[arg-type]
        self.made.append(cleaner)
        return cleaner


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    lm = LogManager([tmp_path / "d0"], COMPACT, clock=lambda: NOW).startup()
    try:
        yield lm
    finally:
        cleaner = lm.cleaner
        if isinstance(cleaner, LogCleaner):
            cleaner.shutdown()
        lm.close()


def fill(lm: LogManager, topic: str, segments: int, *, config: LogConfig = COMPACT,
         timestamp: int = NOW - 1000, records: int = 5) -> PartitionLog:
    """A log of ``segments`` closed segments (plus an empty active one), all committed."""
    plog = lm.get_or_create_log(topic, 0, config)
    for _ in range(segments):
        batch = build_batch(values=[b"v" * 20] * records, keys=[b"k"] * records,
                            base_timestamp=timestamp)
        plog.append_as_leader(batch, 0)
        plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    return plog


def make_cleaner(lm: LogManager, fakes: Fakes | None = None, **config: object) -> LogCleaner:
    settings: dict[str, object] = {"backoff_ms": 10, **config}
    cleaner = LogCleaner(lm, CleanerConfig(**settings),  # type: ignore[arg-type]
                         cleaner_factory=fakes or Fakes(), clock=lambda: NOW)
    lm.cleaner = cleaner
    return cleaner


def write_checkpoint(lm: LogManager, cleaner: LogCleaner, topic: str, offset: int) -> None:
    cleaner.checkpoints.update(lm.log_dirs[0], (topic, 0), offset)


def checkpoint_file(lm: LogManager) -> dict[tuple[str, int], int]:
    path = lm.log_dirs[0] / CLEANER_OFFSET_CHECKPOINT_FILE
    return read_offset_checkpoint(path) if path.exists() else {}


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


# -- choosing work -----------------------------------------------------------------------------


def test_the_dirtiest_log_is_cleaned_first(manager: LogManager) -> None:
    fill(manager, "half", 4)
    fill(manager, "all", 4)
    cleaner = make_cleaner(manager)
    write_checkpoint(manager, cleaner, "half", 10)  # 2 of 4 segments dirty: ratio 0.5
    # "all" has no checkpoint: everything is dirty (ratio 1.0).
    first = cleaner.grab_filthiest_log()
    assert first is not None and first.topic_partition == ("all", 0)
    assert first.cleanable_ratio == 1.0
    assert cleaner.cleaning_state(("all", 0)) == (CleaningState.IN_PROGRESS, 0)
    # "half" is at 0.5, not above the default min.cleanable.dirty.ratio of 0.5.
    assert cleaner.grab_filthiest_log() is None
    manager.get_log("half", 0).update_config(  # type: ignore[union-attr]
        LogConfig(cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.4))
    second = cleaner.grab_filthiest_log()
    assert second is not None and second.topic_partition == ("half", 0)
    assert second.first_dirty_offset == 10 and second.first_uncleanable_offset == 20


def test_a_log_past_max_compaction_lag_goes_first(manager: LogManager) -> None:
    fill(manager, "dirty", 4)
    overdue = LogConfig(cleanup_policy=("compact",), max_compaction_lag_ms=60_000)
    fill(manager, "overdue", 4, config=overdue, timestamp=NOW - 3_600_000)
    cleaner = make_cleaner(manager)
    write_checkpoint(manager, cleaner, "overdue", 15)  # ratio 0.25: below the threshold
    first = cleaner.grab_filthiest_log()
    assert first is not None and first.topic_partition == ("overdue", 0)
    assert first.needs_compaction_now and first.cleanable_ratio < 0.5
    second = cleaner.grab_filthiest_log()
    assert second is not None and second.topic_partition == ("dirty", 0)


def test_only_compacted_logs_with_closed_segments_are_chosen(manager: LogManager) -> None:
    fill(manager, "deleted", 3, config=LogConfig(cleanup_policy=("delete",)))
    active_only = manager.get_or_create_log("active", 0, COMPACT)
    active_only.append_as_leader(build_batch(keys=[b"k"]), 0)
    active_only.update_high_watermark(active_only.log_end_offset)
    cleaner = make_cleaner(manager)
    assert cleaner.grab_filthiest_log() is None


def test_the_last_stable_offset_bounds_the_dirty_section(manager: LogManager) -> None:
    plog = fill(manager, "t", 4, config=LogConfig(cleanup_policy=("compact",),
                                                  min_cleanable_dirty_ratio=0.1))
    plog.update_high_watermark(12)  # the followers have 0-11
    cleaner = make_cleaner(manager)
    ltc = cleaner.grab_filthiest_log()
    # Cleaning stops at the segment holding offset 12 (whole segments only).
    assert ltc is not None and (ltc.uncleanable_offset, ltc.first_uncleanable_offset) == (12, 10)


def test_an_open_transaction_bounds_the_dirty_section(manager: LogManager) -> None:
    """The last stable offset, not the high watermark: an undecided transaction (begun at
    offset 12) is never cleaned, so aborted data can always be told from committed."""
    config = LogConfig(cleanup_policy=("compact",), min_cleanable_dirty_ratio=0.1)
    plog = fill(manager, "t", 2, config=config)
    plog.append_as_leader(build_batch(values=[b"v"] * 5, keys=[b"k"] * 5, producer_id=7,
                                      producer_epoch=0, base_sequence=0,
                                      attributes=TRANSACTIONAL_FLAG_MASK), 0)
    plog.roll()
    fill(manager, "t", 2, config=config)
    assert plog.high_watermark == plog.log_end_offset == 25
    cleaner = make_cleaner(manager)
    ltc = cleaner.grab_filthiest_log()
    assert ltc is not None and (ltc.uncleanable_offset, ltc.first_uncleanable_offset) == (10, 10)


# -- the state table -----------------------------------------------------------------------------


def test_pauses_nest_and_resume_undoes_one(manager: LogManager) -> None:
    fill(manager, "t", 2)
    cleaner = make_cleaner(manager)
    tp = ("t", 0)
    cleaner.abort_and_pause(tp)
    cleaner.abort_and_pause(tp)
    assert cleaner.cleaning_state(tp) == (CleaningState.PAUSED, 2)
    assert cleaner.grab_filthiest_log() is None  # paused: never chosen
    assert not cleaner.try_pause(tp)  # retention leaves it alone
    cleaner.resume(tp)
    assert cleaner.cleaning_state(tp) == (CleaningState.PAUSED, 1)
    cleaner.resume(tp)
    assert cleaner.cleaning_state(tp) is None
    with pytest.raises(RuntimeError, match="cannot take event 'resume' in no state"):
        cleaner.resume(tp)
    assert cleaner.try_pause(tp)
    assert cleaner.cleaning_state(tp) == (CleaningState.PAUSED, 1)


def test_an_aborted_clean_becomes_paused_and_writes_no_checkpoint(manager: LogManager) -> None:
    fill(manager, "t", 2)
    cleaner = make_cleaner(manager)
    tp = ("t", 0)
    assert cleaner.grab_filthiest_log() is not None
    assert not cleaner.try_pause(tp)
    done = threading.Event()

    def pause() -> None:
        cleaner.abort_and_pause(tp)
        done.set()

    worker = threading.Thread(target=pause)
    worker.start()
    wait_for(lambda: cleaner.cleaning_state(tp) == (CleaningState.ABORTED, 0), "the abort")
    assert cleaner.is_aborted(tp)
    assert not done.is_set()  # waits for the cleaning thread
    cleaner.done_cleaning(tp, manager.log_dirs[0], 2)
    worker.join(WAIT)
    assert done.is_set()
    assert cleaner.cleaning_state(tp) == (CleaningState.PAUSED, 1)
    assert checkpoint_file(manager) == {}


# -- the threads ---------------------------------------------------------------------------------


def test_a_thread_cleans_and_checkpoints(manager: LogManager, caplog: pytest.LogCaptureFixture
                                         ) -> None:
    fill(manager, "t", 3)
    fakes = Fakes()
    cleaner = make_cleaner(manager, fakes)
    with caplog.at_level(logging.INFO, logger="klog.log_cleaner"):
        cleaner.startup()
        wait_for(lambda: checkpoint_file(manager).get(("t", 0)) == 15, "the checkpoint")
        cleaner.shutdown()
    assert fakes.made[0].cleaned == [("t", 0)]  # once: after it, the log is clean
    assert cleaner.cleaning_state(("t", 0)) is None
    assert "Log cleaner thread 0 cleaned log t-0 (dirty section = [0, 15])" in caplog.text
    [status] = cleaner.status()
    assert (status.topic, status.state) == ("t", "idle")
    assert status.last_clean is not None and status.last_clean.next_dirty_offset == 15


def test_abort_blocks_until_the_clean_in_progress_stops(manager: LogManager) -> None:
    fill(manager, "t", 3)
    fakes = Fakes(hold=True, linger=0.2)
    cleaner = make_cleaner(manager, fakes)
    cleaner.startup()
    wait_for(lambda: bool(fakes.made), "the thread's cleaner")
    fake = fakes.made[0]
    assert fake.started.wait(WAIT)
    cleaner.abort(("t", 0))
    # abort returned only after the clean had ended (the fake lingers before it stops).
    assert fake.finished == [("t", 0)]
    assert fake.cleaned == []
    assert ("t", 0) not in checkpoint_file(manager)
    cleaner.shutdown()


def test_shutdown_stops_every_thread_even_mid_clean(manager: LogManager) -> None:
    fill(manager, "a", 3)
    fill(manager, "b", 3)
    fakes = Fakes(hold=True)
    cleaner = make_cleaner(manager, fakes, threads=2)
    cleaner.startup()
    threads = cleaner.threads
    assert len(threads) == 2
    wait_for(lambda: len(fakes.made) == 2 and all(f.started.is_set() for f in fakes.made),
             "both cleans")
    cleaner.shutdown()
    assert not any(t.is_alive() for t in threads)
    assert sorted(tp for f in fakes.made for tp in f.finished) == [("a", 0), ("b", 0)]
    assert all(f.cleaned == [] for f in fakes.made)
    assert cleaner.cleaning_state(("a", 0)) is None  # left free, no checkpoint
    assert checkpoint_file(manager) == {}


def test_a_failing_clean_marks_the_partition_uncleanable(manager: LogManager) -> None:
    fill(manager, "t", 3)

    class Broken:
        def clean(self, to_clean: LogToClean) -> CleanerStats:
            raise OSError("disk on fire")

    calls: list[int] = []

    def factory(*args: object) -> Broken:
        calls.append(1)
        return Broken()

    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=10), cleaner_factory=factory,
                         clock=lambda: NOW)
    cleaner.startup()
    wait_for(lambda: ("t", 0) in cleaner.uncleanable_partitions(), "the failure")
    cleaner.shutdown()
    assert cleaner.cleaning_state(("t", 0)) is None
    assert cleaner.grab_filthiest_log() is None  # never picked again
    assert len(calls) == 1


def test_reconfigure_replaces_the_threads(manager: LogManager) -> None:
    cleaner = make_cleaner(manager)
    cleaner.startup()
    before = cleaner.threads
    cleaner.reconfigure(CleanerConfig(backoff_ms=10, threads=2, io_max_bytes_per_second=1e6))
    after = cleaner.threads
    assert len(after) == 2 and not any(t.is_alive() for t in before)
    assert cleaner.throttler.desired_rate == 1e6
    cleaner.shutdown()


@pytest.mark.parametrize(("now", "new", "message"), [
    (2, 0, "at least 1"),
    (4, 1, "less than half the current value 4"),
    (2, 5, "more than double the current value 2"),
])
def test_thread_count_changes_are_bounded_as_kafka_bounds_them(now: int, new: int,
                                                               message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_reconfiguration(CleanerConfig(threads=now), CleanerConfig(threads=new))
    validate_reconfiguration(CleanerConfig(threads=now), CleanerConfig(threads=now))


# -- the LogManager's hooks ------------------------------------------------------------------


def test_deleting_a_log_aborts_its_clean_and_drops_its_checkpoint(manager: LogManager) -> None:
    fill(manager, "gone", 3)
    fill(manager, "kept", 3)
    fakes = Fakes(hold=True, linger=0.1)
    cleaner = make_cleaner(manager, fakes)
    write_checkpoint(manager, cleaner, "kept", 1)
    write_checkpoint(manager, cleaner, "gone", 1)
    manager.get_log("kept", 0).update_config(  # type: ignore[union-attr]
        LogConfig(cleanup_policy=("delete",)))
    cleaner.startup()
    wait_for(lambda: bool(fakes.made), "the thread's cleaner")
    fake = fakes.made[0]
    assert fake.started.wait(WAIT)
    manager.delete_log("gone", 0)
    assert fake.finished == [("gone", 0)] and fake.cleaned == []
    assert checkpoint_file(manager) == {("kept", 0): 1}
    assert cleaner.cleaning_state(("gone", 0)) is None
    cleaner.shutdown()


def test_truncation_pauses_the_cleaner_and_lowers_the_checkpoint(manager: LogManager) -> None:
    fill(manager, "t", 4)
    cleaner = make_cleaner(manager)
    write_checkpoint(manager, cleaner, "t", 20)
    seen: list[object] = []
    original = PartitionLog.truncate_to

    def spy(self: PartitionLog, offset: int) -> bool:
        seen.append(cleaner.cleaning_state(("t", 0)))
        return original(self, offset)

    PartitionLog.truncate_to = spy  # type: ignore[method-assign]
    try:
        assert manager.truncate_to("t", 0, 12)
    finally:
        PartitionLog.truncate_to = original  # type: ignore[method-assign]
    assert seen == [(CleaningState.PAUSED, 1)]
    assert cleaner.cleaning_state(("t", 0)) is None
    assert checkpoint_file(manager) == {("t", 0): 10}  # the new active segment's base
    manager.truncate_fully_and_start_at("t", 0, 100)
    assert cleaner.cleaning_state(("t", 0)) is None
    # Only lowered by a truncation; a checkpoint below the log start is reset when read.
    assert checkpoint_file(manager) == {("t", 0): 10}
    assert cleaner.grab_filthiest_log() is None  # empty now
    assert checkpoint_file(manager) == {("t", 0): 100}


def test_retention_skips_a_log_being_cleaned(manager: LogManager) -> None:
    both = LogConfig(cleanup_policy=("compact", "delete"), retention_ms=1000)
    fill(manager, "t", 3, config=both, timestamp=NOW - 3_600_000)
    cleaner = make_cleaner(manager)
    assert cleaner.grab_filthiest_log() is not None
    assert manager.cleanup_logs(NOW) == 0  # the cleaner holds it
    assert cleaner.cleaning_state(("t", 0)) == (CleaningState.IN_PROGRESS, 0)
    cleaner.done_cleaning(("t", 0), manager.log_dirs[0], 3)
    assert manager.cleanup_logs(NOW) == 3  # compact,delete: retention applies too
    assert cleaner.cleaning_state(("t", 0)) is None


def test_compact_only_logs_get_no_time_or_size_retention(manager: LogManager) -> None:
    config = LogConfig(cleanup_policy=("compact",), retention_ms=1000, retention_bytes=1)
    fill(manager, "t", 3, config=config, timestamp=NOW - 3_600_000)
    make_cleaner(manager)
    assert manager.cleanup_logs(NOW) == 0
    assert manager.get_log("t", 0).number_of_segments == 4  # type: ignore[union-attr]


# -- the log line ----------------------------------------------------------------------------


def test_the_log_line_has_kafkas_figures() -> None:
    stats = CleanerStats(bytes_read=2 * 1024 * 1024, bytes_written=512 * 1024,
                         map_bytes_read=1024 * 1024, messages_read=1000, messages_written=250,
                         buffer_utilization=0.125, start_ms=0, map_done_ms=500, end_ms=2000)
    text = format_clean_stats(1, "t-0", 10, 90, stats)
    assert text.splitlines() == [
        "",
        "\tLog cleaner thread 1 cleaned log t-0 (dirty section = [10, 90])",
        "\t2.0 MB of log processed in 2.0 seconds (1.0 MB/sec).",
        "\tIndexed 1.0 MB in 0.5 seconds (2.0 Mb/sec, 25.0% of total time)",
        "\tBuffer utilization: 12.5%",
        "\tCleaned 2.0 MB in 1.5 seconds (1.3 Mb/sec, 75.0% of total time)",
        "\tStart size: 2.0 MB (1,000 messages)",
        "\tEnd size: 0.5 MB (250 messages)",
        "\t75.0% size reduction (75.0% fewer messages)",
    ]


def test_cleaner_config_from_the_broker_config() -> None:
    from klog.daemon.config import BrokerConfig

    config = CleanerConfig.from_broker_config(BrokerConfig.from_dict({
        "log.cleaner.threads": "2", "log.cleaner.backoff.ms": "7",
        "log.cleaner.dedupe.buffer.size": "8388608"}))
    assert config == CleanerConfig(threads=2, backoff_ms=7, dedupe_buffer_size=8_388_608,
                                   io_max_bytes_per_second=1.7976931348623157e308)
    assert config.dedupe_buffer_per_thread == 4_194_304
    assert config.io_buffer_per_thread == 524_288 // 2 // 2


def test_a_thread_whose_cleaner_cannot_be_built_dies_alone(manager: LogManager) -> None:
    def factory(*args: object) -> FakeCleaner:
        raise MemoryError("no room for the offset map")

    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=10), cleaner_factory=factory)
    cleaner.startup()  # does not raise: the broker starts
    time.sleep(0.05)
    assert cleaner.dead_thread_count == 0  # no work yet: no offset map built
    fill(manager, "t", 2)
    wait_for(lambda: cleaner.dead_thread_count == 1, "the thread to give up")
    assert cleaner.cleaning_state(("t", 0)) is None  # the log it had picked is free
    cleaner.abort(("t", 0))  # the hooks still work
    cleaner.shutdown()


def test_the_status_line_names_the_dirtiest_partitions(manager: LogManager,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    for i in range(7):
        fill(manager, f"t{i}", 4)
    fill(manager, "plain", 2, config=LogConfig(cleanup_policy=("delete",)))
    clock = [NOW]
    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=10), cleaner_factory=Fakes(),
                         clock=lambda: clock[0])
    for i in range(7):
        cleaner.checkpoints.update(manager.log_dirs[0], (f"t{i}", 0), 5 * i if i < 4 else 20)
    ltc = cleaner.grab_filthiest_log()
    assert ltc is not None and ltc.topic_partition == ("t0", 0)
    stats = CleanerStats(first_dirty_offset=0, end_offset=20)
    cleaner.record_clean(0, ltc, stats)
    with caplog.at_level(logging.INFO, logger="klog.log_cleaner"):
        cleaner.maybe_log_status()  # not yet: at most every 5 minutes
        assert "Log cleaner status" not in caplog.text
        clock[0] += 300_000
        cleaner.maybe_log_status()
    assert ("Log cleaner status: 7 compacted partitions; t0-0 dirty 100.0% (last cleaned "
            "300 s ago, in progress), t1-0 dirty 75.0% (not cleaned since start), t2-0 dirty "
            "50.0% (not cleaned since start), t3-0 dirty 25.0% (not cleaned since start), "
            "t4-0 dirty 0.0% (not cleaned since start), and 2 more") in caplog.text


def test_two_aborts_of_one_clean_both_wait_and_both_pause(manager: LogManager) -> None:
    fill(manager, "t", 2)
    cleaner = make_cleaner(manager)
    tp = ("t", 0)
    assert cleaner.grab_filthiest_log() is not None
    workers = [threading.Thread(target=cleaner.abort_and_pause, args=(tp,)) for _ in range(2)]
    for worker in workers:
        worker.start()
    wait_for(lambda: cleaner.cleaning_state(tp) == (CleaningState.ABORTED, 0), "the abort")
    cleaner.done_cleaning(tp, manager.log_dirs[0], None)
    for worker in workers:
        worker.join(WAIT)
    assert cleaner.cleaning_state(tp) == (CleaningState.PAUSED, 2)


# -- with the real storage cleaner -------------------------------------------------------------


def read_records(plog: PartitionLog) -> dict[bytes, tuple[int, bytes]]:
    """key -> (offset, value) of the latest record of each key, read back from the log."""
    latest: dict[bytes, tuple[int, bytes]] = {}
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:  # a read returns one segment's batches at most
        data = plog.read(offset, 1 << 30).read_bytes()
        for header in iter_batch_headers(data):
            for record in iter_records(data, header):
                assert record.key is not None and record.value is not None
                latest[record.key] = (record.offset, record.value)
            offset = header.last_offset + 1
    return latest


def keyed_log(lm: LogManager, topic: str, segments: int, keys: int = 50,
              rounds: int = 4) -> dict[bytes, bytes]:
    plog = lm.get_or_create_log(topic, 0, COMPACT)
    latest: dict[bytes, bytes] = {}
    for s in range(segments):
        for r in range(rounds):
            names = [f"k{i}".encode() for i in range(keys)]
            values = [f"v{s}-{r}-{i}".encode() * 20 for i in range(keys)]
            plog.append_as_leader(build_batch(values=values, keys=names,
                                              base_timestamp=NOW - 1000), 0)
            latest.update(zip(names, values, strict=True))
        plog.roll()
    plog.update_high_watermark(plog.log_end_offset)
    return latest


def test_the_storage_cleaner_keeps_the_latest_value_of_each_key(tmp_path: Path) -> None:
    lm = LogManager([tmp_path / "d0"], COMPACT).startup()
    try:
        latest = keyed_log(lm, "t", 6)
        plog = lm.get_log("t", 0)
        assert plog is not None
        before = plog.size
        cleaner = LogCleaner(lm, CleanerConfig(backoff_ms=10, dedupe_buffer_size=4 << 20))
        lm.cleaner = cleaner
        cleaner.startup()
        end = plog.active_segment.base_offset
        wait_for(lambda: checkpoint_file(lm).get(("t", 0)) == end, "the clean")
        cleaner.shutdown()
        assert plog.size < before / 4
        seen = {key: value for key, (_offset, value) in read_records(plog).items()}
        assert seen == latest
    finally:
        lm.close()


def test_an_abort_stops_the_storage_cleaner_mid_clean_and_loses_nothing(tmp_path: Path
                                                                          ) -> None:
    lm = LogManager([tmp_path / "d0"], COMPACT).startup()
    try:
        latest = keyed_log(lm, "t", 8)
        plog = lm.get_log("t", 0)
        assert plog is not None
        plog.update_config(LogConfig(cleanup_policy=("compact",), segment_bytes=30_000))
        offsets_before = {k: o for k, (o, _v) in read_records(plog).items()}
        size_before = plog.size
        tp = ("t", 0)
        cleaner: LogCleaner
        asked = 0

        def factory(thread_id: int, config: CleanerConfig, throttler: Throttler,
                    is_aborted: Callable[[tuple[str, int]], bool]) -> object:
            def gated(tp: tuple[str, int]) -> bool:
                # The clean's 20th check (of ~50, several groups swapped in by then) waits
                # for the abort to be asked, then answers as the manager does.
                nonlocal asked
                asked += 1
                if asked == 20:
                    wait_for(lambda: cleaner.cleaning_state(tp) == (CleaningState.ABORTED, 0),
                             "the abort")
                return is_aborted(tp)
            return storage_cleaner(thread_id, config, throttler, gated)

        cleaner = LogCleaner(lm, CleanerConfig(backoff_ms=10, dedupe_buffer_size=4 << 20),
                             cleaner_factory=factory)  # type: ignore[arg-type]
        lm.cleaner = cleaner
        cleaner.startup()
        wait_for(lambda: asked >= 20, "the clean to be under way")
        cleaner.abort_and_pause(tp)
        assert asked == 20  # it stopped at the first check after the abort
        assert cleaner.cleaning_state(tp) == (CleaningState.PAUSED, 1)
        assert tp not in checkpoint_file(lm)
        assert plog.size < size_before  # some groups were swapped in before the abort
        # Those are complete: every key's latest value is there, at its original offset.
        after = read_records(plog)
        assert {key: value for key, (_o, value) in after.items()} == latest
        assert {key: offset for key, (offset, _v) in after.items()} == offsets_before
        cleaner.resume(tp)  # and a later clean finishes the job
        end = plog.active_segment.base_offset
        wait_for(lambda: checkpoint_file(lm).get(tp) == end, "the next clean")
        assert {key: value for key, (_o, value) in read_records(plog).items()} == latest
        cleaner.shutdown()
    finally:
        lm.close()
