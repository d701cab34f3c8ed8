"""The broker's log cleaner: which compacted log to clean next, the cleaner threads, and the
coordination of cleaning with retention, truncation and deletion.

This module owns Kafka's ``LogCleaner`` and ``LogCleanerManager`` (core/.../log/), the
daemon half of compaction; the cleaning itself (offset map, rewriting segments, the
crash-safe swap) is klog/storage/cleaner.py's ``Cleaner``. It owns:

- the cleaning state of each partition, Kafka's table (``_TRANSITIONS`` below): none ->
  IN_PROGRESS (a thread cleans it) -> none when done; IN_PROGRESS -> ABORTED when someone
  asks the clean to stop; ABORTED -> PAUSED(1) when the thread has stopped; PAUSED(n)
  counts nested pauses, each ``resume`` undoes one. A partition in any state is never
  picked, so at most one thread cleans a partition, and nothing cleans a paused one.
- the choice of work (``grab_filthiest_log``): among the compacted logs not in any state,
  the cleanable section runs from the cleaner checkpoint (the first dirty offset) to the
  first uncleanable offset (the active segment, the last stable offset, segments newer
  than min.compaction.lag.ms); a log is eligible when its cleanable ratio (dirty bytes /
  clean + dirty bytes) exceeds min.cleanable.dirty.ratio, or when it holds records
  older than max.compaction.lag.ms. Those overdue logs go first (issue 20; Kafka only
  makes them eligible), then the highest ratio.
- when ``cleaner-offset-checkpoint`` (each log dir's first dirty offsets, written through
  the LogManager's ``CleanerCheckpoints``) moves: after every clean (Kafka's
  ``doneCleaning``), reset when outside its log, lowered after truncation.
- ``log.cleaner.threads`` real threads (the storage cleaner's heavy loop is C that
  releases the GIL), sleeping ``log.cleaner.backoff.ms`` when no log is eligible, sharing
  ``log.cleaner.dedupe.buffer.size`` and one throttle of
  ``log.cleaner.io.max.bytes.per.second``. ``reconfigure`` applies the dynamic
  ``log.cleaner.*`` configs as Kafka does: new rate, then the threads restarted.
- the coordination entry points the LogManager calls through its ``CleanerHooks``
  (klog/storage/log_manager.py): ``abort_and_pause`` / ``resume`` around truncation,
  ``abort`` before a log is deleted, ``try_pause`` around retention.
- one INFO record per clean on the ``klog.log_cleaner`` logger, with the figures of
  Kafka's log-cleaner.log; ``status()`` (each compacted partition's dirty ratio and last
  clean) and, at most every 5 minutes, a status line of the dirtiest: Kafka's protocol
  carries neither, so no client can show them (see ``status_line``).

Locking: one condition variable guards the state table, the checkpoint updates and the
figures.
It is never held while calling into a log's cleaning, and the LogManager calls the hooks
without holding its own lock, so the two never wait on each other.
"""

from __future__ import annotations

import enum
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from klog.daemon.metrics.collectors import gauge
from klog.storage.cleaner import (
    Cleaner,
    CleanerStats,
    LogCleaningAbortedError,
    LogToClean,
    Throttler,
    cleanable_offsets,
    max_compaction_delay,
)
from klog.storage.log import PartitionLog
from klog.storage.log_manager import LogManager

log = logging.getLogger("klog.log_cleaner")

TopicPartition = tuple[str, int]

INT_MAX = 2**31 - 1

#: How often the cleaner logs its status line (each compacted partition's dirty ratio and
#: last clean), at most: Kafka's 5-minute retention check interval.
STATUS_INTERVAL_MS = 300_000
#: Partitions named in the status line, dirtiest first; the rest are counted.
STATUS_PARTITIONS = 5

#: The broker configs Kafka's LogCleaner reconfigures at run time (LogCleaner.scala's
#: ReconfigurableConfigs): a change to any of them restarts the cleaner threads.
RECONFIGURABLE_CONFIGS = frozenset({
    "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size",
    "message.max.bytes",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
})


# -- configuration ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """Kafka's CleanerConfig: the broker-level settings of the cleaner threads, with Kafka
    3.x defaults. Topic-level settings (min.cleanable.dirty.ratio, the compaction lags,
    delete.retention.ms) come from each log's LogConfig."""

    enable: bool = True
    threads: int = 1
    dedupe_buffer_size: int = 134_217_728
    io_buffer_load_factor: float = 0.9
    io_buffer_size: int = 524_288
    max_message_bytes: int = 1_048_588
    io_max_bytes_per_second: float = sys.float_info.max
    backoff_ms: int = 15_000

    @classmethod
    def from_broker_config(cls, config: Any) -> CleanerConfig:
        """From a klog.daemon.config.BrokerConfig (anything with ``get(name)``)."""
        get = config.get
        return cls(
            enable=bool(get("log.cleaner.enable")),
            threads=int(get("log.cleaner.threads")),
            dedupe_buffer_size=int(get("log.cleaner.dedupe.buffer.size")),
            io_buffer_load_factor=float(get("log.cleaner.io.buffer.load.factor")),
            io_buffer_size=int(get("log.cleaner.io.buffer.size")),
            max_message_bytes=int(get("message.max.bytes")),
            io_max_bytes_per_second=float(get("log.cleaner.io.max.bytes.per.second")),
            backoff_ms=int(get("log.cleaner.backoff.ms")),
        )

    @property
    def dedupe_buffer_per_thread(self) -> int:
        # Kafka: an offset map is at most 2 GiB; the excess is ignored (with a warning).
        return min(self.dedupe_buffer_size // max(self.threads, 1), INT_MAX)

    @property
    def io_buffer_per_thread(self) -> int:
        # Kafka: half of each thread's share reads, half writes.
        return self.io_buffer_size // max(self.threads, 1) // 2


def validate_reconfiguration(current: CleanerConfig, new: CleanerConfig) -> None:
    """Kafka's LogCleaner.validateReconfiguration: the thread count may change at run time
    only to between half and double the current one, and never below 1. Raises
    ValueError with Kafka's message."""
    threads, now = new.threads, current.threads
    if threads == now:
        # Kafka checks whenever a cleaner config changes, so a broker started with 0
        # threads could change none of them; klog checks only a change of the count.
        return
    if threads < 1:
        raise ValueError("Log cleaner threads should be at least 1")
    if threads < now // 2:
        raise ValueError(
            f"Log cleaner threads cannot be reduced to less than half the current value {now}")
    if threads > now * 2:
        raise ValueError(
            f"Log cleaner threads cannot be increased to more than double the current value "
            f"{now}")


# -- the storage cleaner, as this module uses it -------------------------------------------------


class LogCleanerWorker(Protocol):
    """One thread's cleaner: klog.storage.cleaner.Cleaner, or a fake in tests. ``clean``
    returns the stats, whose ``end_offset`` is the new first dirty offset, and raises
    LogCleaningAbortedError when its ``is_aborted`` callback says so."""

    def clean(self, to_clean: LogToClean) -> CleanerStats: ...


#: Builds one thread's cleaner: (thread id, config, shared throttler, is_aborted).
CleanerFactory = Callable[[int, "CleanerConfig", Throttler, Callable[[TopicPartition], bool]],
                          LogCleanerWorker]


def storage_cleaner(thread_id: int, config: CleanerConfig, throttler: Throttler,
                    is_aborted: Callable[[TopicPartition], bool]) -> LogCleanerWorker:
    """klog.storage.cleaner.Cleaner with this thread's share of the buffers (Kafka's
    CleanerThread: dedupe buffer / threads, io buffer / threads / 2)."""
    return Cleaner(
        config.dedupe_buffer_per_thread,
        config.io_buffer_per_thread,
        dedupe_buffer_load_factor=config.io_buffer_load_factor,
        max_message_size=config.max_message_bytes,
        throttler=throttler,
        is_aborted=is_aborted,
    )


# -- the state table ---------------------------------------------------------------------------


class CleaningState(enum.Enum):
    IN_PROGRESS = "in progress"
    ABORTED = "aborted"
    PAUSED = "paused"


@dataclass(frozen=True, slots=True)
class _State:
    kind: CleaningState
    paused: int = 0  # PAUSED only: how many pauses are outstanding


_IN_PROGRESS = _State(CleaningState.IN_PROGRESS)
_ABORTED = _State(CleaningState.ABORTED)
_PAUSED_ONCE = _State(CleaningState.PAUSED, 1)

# (event, current kind or None) -> next state; None = the partition leaves the table.
# A pair not listed is an illegal transition (Kafka's IllegalStateException). PAUSED's
# count is adjusted in _transition.
_TRANSITIONS: dict[tuple[str, CleaningState | None], _State | None] = {
    ("grab", None): _IN_PROGRESS,
    ("done", CleaningState.IN_PROGRESS): None,
    ("done", CleaningState.ABORTED): _PAUSED_ONCE,
    ("abort_and_pause", None): _PAUSED_ONCE,
    ("abort_and_pause", CleaningState.IN_PROGRESS): _ABORTED,
    ("abort_and_pause", CleaningState.PAUSED): _PAUSED_ONCE,  # count + 1
    ("resume", CleaningState.PAUSED): None,  # or count - 1
}


@dataclass(frozen=True, slots=True)
class LastClean:
    """The figures of a partition's last clean."""

    at_ms: int
    first_dirty_offset: int
    next_dirty_offset: int
    bytes_read: int
    bytes_written: int
    messages_read: int
    messages_written: int
    elapsed_secs: float


@dataclass(frozen=True, slots=True)
class PartitionCleaningStatus:
    """One compacted partition as the cleaner last saw it (``LogCleaner.status``)."""

    topic: str
    partition: int
    log_dir: str
    dirty_ratio: float
    first_dirty_offset: int
    state: str  # "idle", "in progress", "aborted", "paused"
    last_clean: LastClean | None


# -- the cleaner ---------------------------------------------------------------------------------


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class LogCleaner:
    """The broker's log cleaner (see the module docstring). Thread-safe.

    Each log is cleaned by the LogConfig it obeys (``PartitionLog.config``, which the
    replica manager and dynamic config changes keep current), as the storage cleaner
    reads it. ``last_stable_offset(tp, log)`` is where cleaning must stop (default: the
    log's high watermark lowered to its first unstable offset, Kafka's
    UnifiedLog.lastStableOffset); ``cleaner_factory`` builds each thread's cleaner
    (default: klog.storage.cleaner's ``Cleaner``)."""

    def __init__(
        self,
        log_manager: LogManager,
        config: CleanerConfig,
        *,
        last_stable_offset: Callable[[TopicPartition, PartitionLog], int] | None = None,
        cleaner_factory: CleanerFactory | None = None,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.log_manager = log_manager
        self.config = config
        self._last_stable_offset = last_stable_offset
        self._factory = cleaner_factory or storage_cleaner
        # One throttle for all threads, as Kafka's: the configured rate is the broker's.
        self.throttler = Throttler(config.io_max_bytes_per_second)
        # The LogManager's: one writer of the files, which it also updates on deletion.
        self.checkpoints = log_manager.cleaner_checkpoints
        self.clock = clock
        self._cond = threading.Condition(threading.RLock())
        self._states: dict[TopicPartition, _State] = {}
        self._uncleanable: set[TopicPartition] = set()
        self._threads: list[_CleanerThread] = []
        self._dirty_ratios: dict[TopicPartition, tuple[float, int]] = {}
        self._last_clean: dict[TopicPartition, LastClean] = {}
        self.dirtiest_ratio = 0.0
        self.time_of_last_run_ms = clock()
        self.status_interval_ms = STATUS_INTERVAL_MS
        self._last_status_ms = clock()

    # -- lifecycle ---------------------------------------------------------------------------

    def startup(self) -> None:
        """Start ``log.cleaner.threads`` cleaner threads."""
        log.info("Starting the log cleaner")
        with self._cond:
            for i in range(self.config.threads):
                thread = _CleanerThread(self, i)
                self._threads.append(thread)
                thread.start()

    def shutdown(self) -> None:
        """Stop the threads; a clean in progress stops at its next check (its log is left
        as it was: groups already swapped in are complete) and is joined."""
        log.info("Shutting down the log cleaner.")
        with self._cond:
            threads, self._threads = self._threads, []
            for thread in threads:
                thread.stopping.set()
            self._cond.notify_all()
        for thread in threads:
            thread.join()

    @property
    def threads(self) -> list[threading.Thread]:
        with self._cond:
            return list(self._threads)

    @property
    def dead_thread_count(self) -> int:
        """Threads that ended other than by shutdown (Kafka's DeadThreadCount)."""
        with self._cond:
            return sum(1 for t in self._threads if not t.is_alive() or t.failed)

    def validate_reconfiguration(self, new: CleanerConfig) -> None:
        validate_reconfiguration(self.config, new)

    def reconfigure(self, new: CleanerConfig) -> None:
        """Apply new dynamic cleaner configs (Kafka's LogCleaner.reconfigure): the throttle
        takes the new rate, then the threads are replaced (each new thread's offset map is
        sized from the new config, and a thread that died is replaced too)."""
        old = self.config
        if new == old:
            return
        self.config = new
        if new.io_max_bytes_per_second != old.io_max_bytes_per_second:
            log.info("Updating logCleanerIoMaxBytesPerSecond: %s", new.io_max_bytes_per_second)
            self.throttler.set_rate(new.io_max_bytes_per_second)
        self.shutdown()
        self.startup()

    # -- coordination (klog.storage.log_manager.CleanerHooks) -----------------------------------

    def _transition(self, tp: TopicPartition, event: str) -> None:
        """Move ``tp`` along _TRANSITIONS; the caller holds the lock."""
        current = self._states.get(tp)
        key = (event, current.kind if current is not None else None)
        if key not in _TRANSITIONS:
            state = current.kind.value if current is not None else "no"
            raise RuntimeError(
                f"compaction of {tp[0]}-{tp[1]} cannot take event {event!r} in {state} state")
        nxt = _TRANSITIONS[key]
        if current is not None and current.kind is CleaningState.PAUSED:
            count = current.paused + (1 if event == "abort_and_pause" else -1)
            nxt = _State(CleaningState.PAUSED, count) if count > 0 else None
        if nxt is None:
            self._states.pop(tp, None)
        else:
            self._states[tp] = nxt
        self._cond.notify_all()

    def cleaning_state(self, tp: TopicPartition) -> tuple[CleaningState, int] | None:
        """(state, pause count) of ``tp``; None when it has none."""
        with self._cond:
            state = self._states.get(tp)
            return None if state is None else (state.kind, state.paused)

    def _is_paused(self, tp: TopicPartition) -> bool:
        state = self._states.get(tp)
        return state is not None and state.kind is CleaningState.PAUSED

    def abort_and_pause(self, tp: TopicPartition) -> None:
        """Stop a clean of ``tp`` in progress and keep the cleaner away until ``resume``.
        Blocks until the cleaning thread has stopped (Kafka's abortAndPauseCleaning);
        nested calls count."""
        with self._cond:
            # Another caller's abort of the same clean: wait for it, then pause once more
            # (Kafka throws IllegalStateException here).
            while self._states.get(tp, _PAUSED_ONCE).kind is CleaningState.ABORTED:
                self._cond.wait(0.1)
            self._transition(tp, "abort_and_pause")
            while not self._is_paused(tp):
                self._cond.wait(0.1)
        log.info("The cleaning for partition %s-%d is aborted and paused", *tp)

    def resume(self, tp: TopicPartition) -> None:
        """Undo one pause of ``tp``."""
        with self._cond:
            self._transition(tp, "resume")

    def abort(self, tp: TopicPartition) -> None:
        """Stop a clean of ``tp`` in progress, blocking until it has stopped, and leave the
        partition free (Kafka's abortCleaning)."""
        with self._cond:
            self.abort_and_pause(tp)
            self.resume(tp)

    def try_pause(self, tp: TopicPartition) -> bool:
        """For retention: pause ``tp`` if it has no cleaning state (True), or leave it
        alone (False: a clean or another pause holds it; retention comes back next round).
        Kafka's pauseCleaningForNonCompactedPartitions and deletableLogs."""
        with self._cond:
            if tp in self._states:
                return False
            self._states[tp] = _PAUSED_ONCE
            return True

    def is_aborted(self, tp: TopicPartition, thread: _CleanerThread | None = None) -> bool:
        """Asked by the storage cleaner between units of work (Kafka's checkDone): the
        partition's cleaning was aborted, or the thread is shutting down."""
        if thread is not None and thread.stopping.is_set():
            return True
        with self._cond:
            state = self._states.get(tp)
            return state is not None and state.kind is CleaningState.ABORTED

    # -- checkpoints ------------------------------------------------------------------------------

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for log_dir in self.log_manager.log_dirs:
            out.update(self._read_checkpoint(log_dir))
        return out

    def _read_checkpoint(self, log_dir: Path) -> dict[TopicPartition, int]:
        try:
            return self.checkpoints.read(log_dir)
        except (OSError, ValueError) as exc:
            # Kafka logs it and carries on as if empty: everything is dirty again.
            log.error("Failed to access checkpoint file in dir %s: %s", log_dir, exc)
            return {}

    def _update_checkpoint(self, log_dir: Path, tp: TopicPartition, offset: int | None) -> None:
        try:
            if offset is None:
                self.checkpoints.remove(log_dir, tp)
            else:
                self.checkpoints.update(log_dir, tp, offset)
        except (OSError, ValueError) as exc:
            log.error("Failed to access checkpoint file in dir %s: %s", log_dir, exc)

    def forget(self, tp: TopicPartition) -> None:
        """The log of ``tp`` was deleted: forget its figures (LogManager.delete_log drops
        its checkpoint entry)."""
        with self._cond:
            self._dirty_ratios.pop(tp, None)
            self._last_clean.pop(tp, None)
            self._uncleanable.discard(tp)

    def truncate_checkpoint(self, tp: TopicPartition, log_dir: Path, offset: int) -> None:
        """After a truncation: no checkpoint above ``offset``, the new active segment's
        base offset (Kafka's maybeTruncateCheckpoint)."""
        with self._cond:
            current = self._read_checkpoint(Path(log_dir)).get(tp)
            if current is not None and current > offset:
                self._update_checkpoint(Path(log_dir), tp, offset)

    # -- choosing work ------------------------------------------------------------------------

    def log_to_clean(self, tp: TopicPartition, plog: PartitionLog, checkpoint: int | None,
                     now_ms: int) -> LogToClean:
        """The cleanable section of one log from its checkpoint (Kafka's cleanableOffsets
        and LogToClean). A checkpoint outside the log is reset to the log start offset and
        written back."""
        lso = self._last_stable_offset(tp, plog) if self._last_stable_offset else None
        offsets = cleanable_offsets(plog, checkpoint, now_ms, last_stable_offset=lso)
        if offsets.force_update_checkpoint:
            config = plog.config
            if not (config.compact and config.delete):
                log.warning("Resetting first dirty offset of %s-%d to log start offset %d "
                            "since the checkpointed offset %s is invalid.", tp[0], tp[1],
                            offsets.first_dirty_offset, checkpoint)
            log_dir = self.log_manager.log_dir_of(*tp)
            if log_dir is not None:
                self._update_checkpoint(log_dir, tp, offsets.first_dirty_offset)
        delay = max_compaction_delay(plog, offsets.first_dirty_offset, now_ms)
        return LogToClean(plog, offsets.first_dirty_offset,
                          offsets.first_uncleanable_dirty_offset,
                          needs_compaction_now=delay > 0)

    def grab_filthiest_log(self) -> LogToClean | None:
        """Pick the log to clean next and mark it IN_PROGRESS (Kafka's
        grabFilthiestCompactedLog): overdue logs (past max.compaction.lag.ms, with bytes
        to clean) first, then the highest cleanable ratio above min.cleanable.dirty.ratio.
        None when no log qualifies."""
        with self._cond:
            now = self.clock()
            self.time_of_last_run_ms = now
            checkpoints = self.all_cleaner_checkpoints()
            candidates: list[LogToClean] = []
            for tp, plog in self.log_manager.all_logs().items():
                if not plog.config.compact or tp in self._states or tp in self._uncleanable:
                    continue
                try:
                    ltc = self.log_to_clean(tp, plog, checkpoints.get(tp), now)
                except Exception:
                    log.warning("Failed to calculate log cleaning stats for partition %s-%d;"
                                " marking it uncleanable", tp[0], tp[1], exc_info=True)
                    self._uncleanable.add(tp)
                    continue
                self._dirty_ratios[tp] = (ltc.cleanable_ratio, ltc.first_dirty_offset)
                if ltc.total_bytes > 0:  # skip empty logs
                    candidates.append(ltc)
            self.dirtiest_ratio = max((c.cleanable_ratio for c in candidates), default=0.0)
            eligible = [
                ltc for ltc in candidates
                if (ltc.needs_compaction_now and ltc.dirty_bytes > 0)
                or ltc.cleanable_ratio > ltc.log.config.min_cleanable_dirty_ratio
            ]
            if not eligible:
                return None
            chosen = max(eligible, key=lambda c: (c.needs_compaction_now, c.cleanable_ratio))
            self._transition(chosen.topic_partition, "grab")
            return chosen

    def done_cleaning(self, tp: TopicPartition, log_dir: Path | None, end_offset: int | None,
                      ) -> None:
        """After a clean (or its abort, or its failure: ``end_offset`` None): record the
        new first dirty offset unless it was aborted, and leave IN_PROGRESS (Kafka's
        doneCleaning)."""
        with self._cond:
            state = self._states.get(tp)
            if (state is not None and state.kind is CleaningState.IN_PROGRESS
                    and log_dir is not None and end_offset is not None
                    and self.log_manager.get_log(*tp) is not None):
                self._update_checkpoint(log_dir, tp, end_offset)
            self._transition(tp, "done")

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        with self._cond:
            self._uncleanable.add(tp)

    def uncleanable_partitions(self) -> set[TopicPartition]:
        """Partitions whose cleaning failed unexpectedly: never picked again until their
        log is deleted (Kafka's uncleanable-partitions-count)."""
        with self._cond:
            return set(self._uncleanable)

    # -- observability ----------------------------------------------------------------------------

    def record_clean(self, thread_id: int, ltc: LogToClean, stats: CleanerStats) -> None:
        """Log one clean as Kafka's log-cleaner.log does and keep its figures."""
        tp = ltc.topic_partition
        with self._cond:
            self._last_clean[tp] = LastClean(
                self.clock(), ltc.first_dirty_offset, stats.end_offset, stats.bytes_read,
                stats.bytes_written, stats.messages_read, stats.messages_written,
                stats.elapsed_secs)
        log.info("%s", format_clean_stats(thread_id, f"{tp[0]}-{tp[1]}",
                                          ltc.first_dirty_offset, stats.end_offset, stats))
        if stats.invalid_messages_read > 0:
            log.warning("\tFound %d invalid messages during compaction.",
                        stats.invalid_messages_read)

    def maybe_log_status(self) -> None:
        """At most every ``status_interval_ms``: one INFO line with the dirtiest compacted
        partitions' dirty ratios and last cleans (see ``status_line``)."""
        now = self.clock()
        with self._cond:
            if now - self._last_status_ms < self.status_interval_ms:
                return
            self._last_status_ms = now
        line = status_line(self.status(), now)
        if line:
            log.info("%s", line)

    def status(self) -> list[PartitionCleaningStatus]:
        """Each compacted partition's dirty ratio (as of the last selection round) and last
        clean. Kafka exposes only broker-wide gauges (max-dirty-percent,
        time-since-last-run-ms)."""
        out = []
        with self._cond:
            for tp, plog in sorted(self.log_manager.all_logs().items()):
                if not plog.config.compact:
                    continue
                ratio, first_dirty = self._dirty_ratios.get(tp, (0.0, plog.log_start_offset))
                state = self._states.get(tp)
                out.append(PartitionCleaningStatus(
                    tp[0], tp[1], str(self.log_manager.log_dir_of(*tp)), ratio, first_dirty,
                    "idle" if state is None else state.kind.value,
                    self._last_clean.get(tp)))
        return out


# -- the threads ---------------------------------------------------------------------------------


class _CleanerThread(threading.Thread):
    """One cleaner thread: clean the filthiest log, or sleep log.cleaner.backoff.ms."""

    def __init__(self, manager: LogCleaner, thread_id: int) -> None:
        super().__init__(name=f"kafka-log-cleaner-thread-{thread_id}", daemon=True)
        self.manager = manager
        self.thread_id = thread_id
        self.stopping = threading.Event()
        self.config = manager.config
        self.cleaner: LogCleanerWorker | None = None
        self.last_stats: CleanerStats | None = None
        self.failed = False

    def run(self) -> None:
        while not self.stopping.is_set() and not self.failed:
            try:
                cleaned = self.clean_filthiest_log()
            except Exception:  # a bug must not end the thread
                log.exception("Log cleaner thread %d failed", self.thread_id)
                cleaned = False
            self.manager.maybe_log_status()
            if not cleaned:
                self.stopping.wait(self.manager.config.backoff_ms / 1000)

    def _build_cleaner(self) -> LogCleanerWorker | None:
        """This thread's storage cleaner, built when it first has work: its offset map is
        the thread's share of log.cleaner.dedupe.buffer.size (128 MiB by default), which
        a broker without compacted data never needs (Kafka allocates it at start). A
        failure costs this thread, not the broker (Kafka's DeadThreadCount)."""
        if self.cleaner is None:
            config = self.config
            if config.dedupe_buffer_size // max(config.threads, 1) > INT_MAX:
                log.warning("Cannot use more than 2G of cleaner buffer space per cleaner "
                            "thread, ignoring excess buffer space...")
            try:
                self.cleaner = self.manager._factory(
                    self.thread_id, config, self.manager.throttler,
                    lambda tp: self.manager.is_aborted(tp, self))
            except Exception:
                log.exception("Log cleaner thread %d cannot start", self.thread_id)
                self.failed = True
        return self.cleaner

    def clean_filthiest_log(self) -> bool:
        manager = self.manager
        ltc = manager.grab_filthiest_log()
        if ltc is None:
            return False
        tp = ltc.topic_partition
        log_dir = manager.log_manager.log_dir_of(*tp)
        end_offset: int | None = None
        try:
            cleaner = self._build_cleaner()
            if cleaner is None:
                return False
            stats = cleaner.clean(ltc)
            end_offset = stats.end_offset
            self.last_stats = stats
            manager.record_clean(self.thread_id, ltc, stats)
        except LogCleaningAbortedError:
            pass  # aborted or shutting down: the log is intact
        except Exception:
            log.warning("Unexpected exception thrown when cleaning log %s-%d. Marking its "
                        "partition as uncleanable", tp[0], tp[1], exc_info=True)
            manager.mark_uncleanable(tp)
        finally:
            manager.done_cleaning(tp, log_dir, end_offset)
        return True


def status_line(statuses: list[PartitionCleaningStatus], now_ms: int) -> str:
    """``Log cleaner status: 3 compacted partitions; t-0 dirty 73.0% (last cleaned 12 s
    ago), ...``: the dirtiest STATUS_PARTITIONS first; "" without compacted partitions.

    Kafka has no wire API for a partition's dirty ratio (DescribeLogDirs carries sizes
    only) and logs nothing between cleans; klog logs this line so that an operator can see
    why a compacted topic is or is not being cleaned."""
    if not statuses:
        return ""
    ranked = sorted(statuses, key=lambda s: -s.dirty_ratio)
    parts = []
    for st in ranked[:STATUS_PARTITIONS]:
        last = ("not cleaned since start" if st.last_clean is None
                else f"last cleaned {(now_ms - st.last_clean.at_ms) / 1000:.0f} s ago")
        state = "" if st.state == "idle" else f", {st.state}"
        parts.append(f"{st.topic}-{st.partition} dirty {100 * st.dirty_ratio:.1f}% "
                     f"({last}{state})")
    more = len(ranked) - STATUS_PARTITIONS
    tail = f", and {more} more" if more > 0 else ""
    return (f"Log cleaner status: {len(ranked)} compacted partitions; "
            f"{', '.join(parts)}{tail}")


def format_clean_stats(thread_id: int, name: str, start: int, end: int,
                       stats: CleanerStats) -> str:
    """Kafka's LogCleaner.recordStats message, figure for figure."""

    def mb(n: float) -> float:
        return n / (1024 * 1024)

    def per(n: float, secs: float) -> float:
        return n / secs if secs > 0 else 0.0

    def pct(n: float, of: float) -> float:
        return 100 * n / of if of > 0 else 0.0

    def reduction(after: float, before: float) -> float:
        return 100.0 * (1.0 - after / before) if before > 0 else 0.0

    elapsed, index_secs = stats.elapsed_secs, stats.elapsed_index_secs
    read, written = stats.bytes_read, stats.bytes_written
    clean_secs = elapsed - index_secs
    return (
        f"\n\tLog cleaner thread {thread_id} cleaned log {name} "
        f"(dirty section = [{start}, {end}])\n"
        f"\t{mb(read):,.1f} MB of log processed in {elapsed:,.1f} seconds "
        f"({mb(per(read, elapsed)):,.1f} MB/sec).\n"
        f"\tIndexed {mb(stats.map_bytes_read):,.1f} MB in {index_secs:.1f} seconds "
        f"({per(mb(stats.map_bytes_read), index_secs):,.1f} Mb/sec, "
        f"{pct(index_secs, elapsed):.1f}% of total time)\n"
        f"\tBuffer utilization: {100 * stats.buffer_utilization:.1f}%\n"
        f"\tCleaned {mb(read):,.1f} MB in {clean_secs:.1f} seconds "
        f"({per(mb(read), clean_secs):,.1f} Mb/sec, {pct(clean_secs, elapsed):.1f}% of "
        f"total time)\n"
        f"\tStart size: {mb(read):,.1f} MB ({stats.messages_read:,d} messages)\n"
        f"\tEnd size: {mb(written):,.1f} MB ({stats.messages_written:,d} messages)\n"
        f"\t{reduction(written, read):.1f}% size reduction "
        f"({reduction(stats.messages_written, stats.messages_read):.1f}% fewer messages)\n"
    )


__all__ = [
    "RECONFIGURABLE_CONFIGS",
    "CleanerConfig",
    "CleaningState",
    "LastClean",
    "LogCleaner",
    "PartitionCleaningStatus",
    "format_clean_stats",
    "status_line",
    "storage_cleaner",
    "validate_reconfiguration",
]


class LogCleanerCollector:
    """The log cleaner (klog/daemon/log_cleaner.py): Kafka's LogCleanerManager gauges
    max-dirty-percent and uncleanable-partitions-count and LogCleaner's
    time-since-last-run-ms (as the JMX exporter names them), plus, per compacted partition,
    klog's own ``klog_log_cleaner_dirty_ratio`` and ``klog_log_cleaner_last_clean_timestamp_ms``
    (Kafka exposes no per-partition figure; the issue asks for one)."""

    def __init__(self, cleaner: LogCleaner, clock: Callable[[], int]) -> None:
        self.cleaner = cleaner
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        statuses = self.cleaner.status()
        now = self.clock()
        yield gauge("kafka_log_logcleanermanager_max_dirty_percent",
                     "kafka.log:type=LogCleanerManager,name=max-dirty-percent",
                     int(100 * max((s.dirty_ratio for s in statuses), default=0.0)))
        yield gauge("kafka_log_logcleanermanager_uncleanable_partitions_count",
                     "kafka.log:type=LogCleanerManager,name=uncleanable-partitions-count",
                     len(self.cleaner.uncleanable_partitions()))
        last = max((s.last_clean.at_ms for s in statuses if s.last_clean is not None),
                   default=None)
        yield gauge("kafka_log_logcleaner_time_since_last_run_ms",
                     "kafka.log:type=LogCleaner,name=time-since-last-run-ms",
                     0 if last is None else max(0, now - last))
        ratio = GaugeMetricFamily("klog_log_cleaner_dirty_ratio",
                                  "Dirty bytes over all bytes past the cleaner checkpoint, as "
                                  "of the cleaner's last selection round",
                                  labels=["topic", "partition"])
        cleaned = GaugeMetricFamily("klog_log_cleaner_last_clean_timestamp_ms",
                                    "When the partition was last cleaned (ms since the epoch)",
                                    labels=["topic", "partition"])
        for s in statuses:
            ratio.add_metric([s.topic, str(s.partition)], s.dirty_ratio)
            if s.last_clean is not None:
                cleaned.add_metric([s.topic, str(s.partition)], s.last_clean.at_ms)
        yield ratio
        yield cleaned
