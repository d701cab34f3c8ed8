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
  bytes past the log start) exceeds min.cleanable.dirty.ratio, or when it holds records
  older than max.compaction.lag.ms. Those overdue logs go first (issue 20; Kafka only
  makes them eligible), then the highest ratio.
- ``cleaner-offset-checkpoint`` in each log dir: written after every clean (Kafka's
  ``doneCleaning``), an entry dropped when its log is deleted, lowered after truncation.
- ``log.cleaner.threads`` real threads (the storage cleaner's heavy loop is C that
  releases the GIL), sleeping ``log.cleaner.backoff.ms`` when no log is eligible, sharing
  ``log.cleaner.dedupe.buffer.size`` and one throttle of
  ``log.cleaner.io.max.bytes.per.second``. ``reconfigure`` applies the dynamic
  ``log.cleaner.*`` configs as Kafka does: new rate, then the threads restarted.
- the coordination entry points the LogManager calls through its ``CleanerHooks``
  (klog/storage/log_manager.py): ``abort_and_pause`` / ``resume`` around truncation,
  ``abort`` before a log is deleted, ``try_pause`` around retention.
- one INFO record per clean on the ``klog.log_cleaner`` logger, with the figures of
  Kafka's log-cleaner.log, and ``status()``: each compacted partition's dirty ratio and
  last clean (Kafka has no wire API for these; see ``status``).

Locking: one condition variable guards the state table, the checkpoints and the figures.
It is never held while calling into a log's cleaning, and the LogManager calls the hooks
without holding its own lock, so the two never wait on each other.
"""

from __future__ import annotations

import enum
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from klog.storage.checkpoints import write_offset_checkpoint
from klog.storage.config import LogConfig
from klog.storage.log import PartitionLog
from klog.storage.log_manager import CLEANER_OFFSET_CHECKPOINT_FILE, LogManager

log = logging.getLogger("klog.log_cleaner")

TopicPartition = tuple[str, int]

INT_MAX = 2**31 - 1

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


class CleaningAbortedError(Exception):
    """Raised by ``check_done`` inside a clean: the partition's cleaning was aborted, or
    the thread is shutting down (Kafka's LogCleaningAbortedException /
    ThreadShutdownException). The storage cleaner lets it propagate, leaving the log as
    it was (its ``.cleaned`` files are removed)."""


@dataclass(frozen=True, slots=True)
class LogToClean:
    """One compacted log and its cleanable section (Kafka's LogToClean).

    ``first_dirty_offset`` .. ``first_uncleanable_offset`` is the section to clean;
    ``clean_bytes`` the bytes before it, ``cleanable_bytes`` the bytes of the whole
    segments in it. ``compaction_delay_ms`` > 0 when records older than
    max.compaction.lag.ms wait in it."""

    tp: TopicPartition
    log: PartitionLog
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    compaction_delay_ms: int = 0

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0

    @property
    def need_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0


class CleanResult(Protocol):
    """What one clean returns: the figures Kafka's CleanerStats keeps."""

    bytes_read: int
    bytes_written: int
    map_bytes_read: int
    messages_read: int
    messages_written: int
    invalid_messages_read: int
    buffer_utilization: float
    elapsed_secs: float
    elapsed_index_secs: float


class LogCleanerWorker(Protocol):
    """One thread's cleaner (klog.storage.cleaner.Cleaner): cleans ``ltc`` and returns
    the next dirty offset (the new checkpoint) and its figures. Calls ``check_done(tp)``
    between units of work, which raises CleaningAbortedError to stop."""

    def clean(self, ltc: LogToClean) -> tuple[int, CleanResult]: ...


class Throttle(Protocol):
    def update_rate(self, bytes_per_second: float) -> None: ...


#: Builds one thread's cleaner: (thread id, config, shared throttle, check_done).
CleanerFactory = Callable[[int, CleanerConfig, Any, Callable[[TopicPartition], None]],
                          LogCleanerWorker]


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

    ``log_config(tp, log)`` gives a partition's LogConfig (default: the one the log
    obeys); ``last_stable_offset(tp, log)`` the offset cleaning must stay below (default:
    the log's high watermark, lowered to its first unstable offset); ``cleaner_factory``
    builds each thread's storage cleaner (default: klog.storage.cleaner's)."""

    def __init__(
        self,
        log_manager: LogManager,
        config: CleanerConfig,
        *,
        log_config: Callable[[TopicPartition, PartitionLog], LogConfig] | None = None,
        last_stable_offset: Callable[[TopicPartition, PartitionLog], int] | None = None,
        cleaner_factory: CleanerFactory | None = None,
        throttle: Any = None,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.log_manager = log_manager
        self.config = config
        self._log_config = log_config or (lambda _tp, plog: plog.config)
        self._last_stable_offset = last_stable_offset or _log_last_stable_offset
        self._factory = cleaner_factory or _storage_cleaner_factory
        self.throttle = throttle if throttle is not None else _default_throttle(config)
        self.clock = clock
        self._cond = threading.Condition(threading.RLock())
        self._states: dict[TopicPartition, _State] = {}
        self._uncleanable: set[TopicPartition] = set()
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {
            Path(d): dict(offsets) for d, offsets in log_manager.cleaner_offsets.items()}
        self._threads: list[_CleanerThread] = []
        self._dirty_ratios: dict[TopicPartition, tuple[float, int]] = {}
        self._last_clean: dict[TopicPartition, LastClean] = {}
        self.dirtiest_ratio = 0.0
        self.time_of_last_run_ms = clock()

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
        as it was) and is joined."""
        log.info("Shutting down the log cleaner.")
        with self._cond:
            threads, self._threads = self._threads, []
            for thread in threads:
                thread.stopping.set()
            self._cond.notify_all()
        for thread in threads:
            thread.join()

    @property
    def thread_count(self) -> int:
        return sum(1 for t in self._threads if t.is_alive())

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
            self.throttle.update_rate(new.io_max_bytes_per_second)
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
        """(state, pause count) of ``tp``, None when it has none (for tests and status)."""
        with self._cond:
            state = self._states.get(tp)
            return None if state is None else (state.kind, state.paused)

    def abort_and_pause(self, tp: TopicPartition) -> None:
        """Stop a clean of ``tp`` in progress and keep the cleaner away until ``resume``.
        Blocks until the cleaning thread has stopped (Kafka's abortAndPauseCleaning);
        nested calls count."""
        with self._cond:
            self._transition(tp, "abort_and_pause")
            while not self._is_paused(tp):
                self._cond.wait(0.1)
        log.info("The cleaning for partition %s-%d is aborted and paused", *tp)

    def _is_paused(self, tp: TopicPartition) -> bool:
        state = self._states.get(tp)
        return state is not None and state.kind is CleaningState.PAUSED

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
        alone (False: a clean or another pause holds it; retention tries again next
        round). Kafka's pauseCleaningForNonCompactedPartitions / deletableLogs."""
        with self._cond:
            if tp in self._states:
                return False
            self._states[tp] = _PAUSED_ONCE
            return True

    def check_done(self, tp: TopicPartition, thread: _CleanerThread | None = None) -> None:
        """Called inside a clean: raise CleaningAbortedError if it must stop."""
        if thread is not None and thread.stopping.is_set():
            raise CleaningAbortedError(f"the cleaner thread {thread.name} is shutting down")
        with self._cond:
            state = self._states.get(tp)
            if state is not None and state.kind is CleaningState.ABORTED:
                raise CleaningAbortedError(f"the cleaning of {tp[0]}-{tp[1]} was aborted")

    # -- checkpoints ------------------------------------------------------------------------------

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        with self._cond:
            out: dict[TopicPartition, int] = {}
            for offsets in self._checkpoints.values():
                out.update(offsets)
            return out

    def _write_checkpoint(self, log_dir: Path) -> None:
        """The caller holds the lock. Entries of logs no longer in the dir are dropped, as
        Kafka's updateCheckpoints does."""
        here = {tp for tp, plog in self.log_manager.all_logs().items()
                if self.log_manager.log_dir_of(*tp) == log_dir}
        offsets = {tp: o for tp, o in self._checkpoints.get(log_dir, {}).items() if tp in here}
        self._checkpoints[log_dir] = offsets
        try:
            write_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT_FILE, offsets)
        except OSError as exc:
            log.error("Failed to write %s in %s: %s", CLEANER_OFFSET_CHECKPOINT_FILE,
                      log_dir, exc)

    def _update_checkpoint(self, log_dir: Path, tp: TopicPartition, offset: int | None) -> None:
        with self._cond:
            offsets = self._checkpoints.setdefault(log_dir, {})
            if offset is None:
                offsets.pop(tp, None)
            else:
                offsets[tp] = offset
            self._write_checkpoint(log_dir)

    def remove_checkpoint(self, tp: TopicPartition, log_dir: Path) -> None:
        """The log of ``tp`` left ``log_dir`` (deleted): forget its entry."""
        with self._cond:
            self._dirty_ratios.pop(tp, None)
            self._last_clean.pop(tp, None)
            self._uncleanable.discard(tp)
        self._update_checkpoint(Path(log_dir), tp, None)

    def truncate_checkpoint(self, tp: TopicPartition, log_dir: Path, offset: int) -> None:
        """After a truncation: no checkpoint above ``offset`` (Kafka's
        maybeTruncateCheckpoint, given the active segment's base offset)."""
        with self._cond:
            current = self._checkpoints.get(Path(log_dir), {}).get(tp)
            if current is not None and current > offset:
                self._update_checkpoint(Path(log_dir), tp, offset)

    # -- choosing work ------------------------------------------------------------------------

    def log_to_clean(self, tp: TopicPartition, plog: PartitionLog, now_ms: int
                     ) -> LogToClean:
        """The cleanable section of one log, from the checkpoint (Kafka's
        cleanableOffsets + LogToClean). A checkpoint outside the log is reset to the log
        start offset and written back."""
        config = self._log_config(tp, plog)
        log_dir = self.log_manager.log_dir_of(*tp)
        with self._cond:
            checkpoint = self._checkpoints.get(log_dir, {}).get(tp) if log_dir else None
        lso = self._last_stable_offset(tp, plog)
        ltc = compute_log_to_clean(tp, plog, config, checkpoint, lso, now_ms)
        if log_dir is not None and checkpoint is not None \
                and checkpoint != ltc.first_dirty_offset:
            if not (config.compact and config.delete):
                log.warning("Resetting first dirty offset of %s-%d to log start offset %d "
                            "since the checkpointed offset %d is invalid.", tp[0], tp[1],
                            ltc.first_dirty_offset, checkpoint)
            self._update_checkpoint(log_dir, tp, ltc.first_dirty_offset)
        return ltc

    def grab_filthiest_log(self) -> LogToClean | None:
        """Pick the log to clean next and mark it IN_PROGRESS (Kafka's
        grabFilthiestCompactedLog): overdue logs (past max.compaction.lag.ms) first, then
        the highest cleanable ratio above min.cleanable.dirty.ratio. None when no log
        qualifies."""
        with self._cond:
            now = self.clock()
            self.time_of_last_run_ms = now
            candidates: list[tuple[LogToClean, LogConfig]] = []
            for tp, plog in self.log_manager.all_logs().items():
                config = self._log_config(tp, plog)
                if not config.compact or tp in self._states or tp in self._uncleanable:
                    continue
                try:
                    ltc = self.log_to_clean(tp, plog, now)
                except Exception:
                    log.warning("Failed to calculate log cleaning stats for partition %s-%d;"
                                " marking it uncleanable", tp[0], tp[1], exc_info=True)
                    self._uncleanable.add(tp)
                    continue
                self._dirty_ratios[tp] = (ltc.cleanable_ratio, ltc.first_dirty_offset)
                if ltc.total_bytes > 0:
                    candidates.append((ltc, config))
            self.dirtiest_ratio = max((c.cleanable_ratio for c, _ in candidates), default=0.0)
            eligible = [
                ltc for ltc, config in candidates
                if (ltc.need_compaction_now and ltc.cleanable_bytes > 0)
                or ltc.cleanable_ratio > config.min_cleanable_dirty_ratio
            ]
            if not eligible:
                return None
            chosen = max(eligible, key=lambda c: (c.need_compaction_now, c.cleanable_ratio))
            self._transition(chosen.tp, "grab")
            return chosen

    def done_cleaning(self, tp: TopicPartition, log_dir: Path | None, end_offset: int | None,
                      ) -> None:
        """After a clean (or its abort): record the new checkpoint unless it was aborted,
        and leave IN_PROGRESS (Kafka's doneCleaning)."""
        with self._cond:
            state = self._states.get(tp)
            if (state is not None and state.kind is CleaningState.IN_PROGRESS
                    and log_dir is not None and end_offset is not None
                    and self.log_manager.get_log(*tp) is not None):
                self._checkpoints.setdefault(log_dir, {})[tp] = end_offset
                self._write_checkpoint(log_dir)
            self._transition(tp, "done")

    def mark_uncleanable(self, tp: TopicPartition) -> None:
        with self._cond:
            self._uncleanable.add(tp)

    # -- observability ----------------------------------------------------------------------------

    def record_clean(self, thread_id: int, ltc: LogToClean, end_offset: int,
                     stats: CleanResult) -> None:
        """Log one clean as Kafka's log-cleaner.log does and keep its figures."""
        now = self.clock()
        with self._cond:
            self._last_clean[ltc.tp] = LastClean(
                now, ltc.first_dirty_offset, end_offset, stats.bytes_read,
                stats.bytes_written, stats.messages_read, stats.messages_written,
                stats.elapsed_secs)
        log.info("%s", format_clean_stats(thread_id, f"{ltc.tp[0]}-{ltc.tp[1]}",
                                          ltc.first_dirty_offset, end_offset, stats))
        if stats.invalid_messages_read > 0:
            log.warning("\tFound %d invalid messages during compaction.",
                        stats.invalid_messages_read)

    def status(self) -> list[PartitionCleaningStatus]:
        """Each compacted partition's dirty ratio (as of the last selection round) and last
        clean. Kafka exposes only broker-wide gauges (max-dirty-percent,
        time-since-last-run-ms); klog keeps this per partition for its status line."""
        out = []
        with self._cond:
            for tp, plog in sorted(self.log_manager.all_logs().items()):
                if not self._log_config(tp, plog).compact:
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
        config = manager.config
        if config.dedupe_buffer_size // max(config.threads, 1) > INT_MAX:
            log.warning("Cannot use more than 2G of cleaner buffer space per cleaner thread, "
                        "ignoring excess buffer space...")
        self.cleaner = manager._factory(
            thread_id, config, manager.throttle,
            lambda tp: manager.check_done(tp, self))
        self.last_stats: CleanResult | None = None

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                cleaned = self.clean_filthiest_log()
            except Exception:  # a bug must not kill the thread silently
                log.exception("Log cleaner thread %d failed", self.thread_id)
                cleaned = False
            if not cleaned:
                self.stopping.wait(self.manager.config.backoff_ms / 1000)

    def clean_filthiest_log(self) -> bool:
        manager = self.manager
        ltc = manager.grab_filthiest_log()
        if ltc is None:
            return False
        log_dir = manager.log_manager.log_dir_of(*ltc.tp)
        end_offset: int | None = None
        try:
            end_offset, stats = self.cleaner.clean(ltc)
            self.last_stats = stats
            manager.record_clean(self.thread_id, ltc, end_offset, stats)
        except CleaningAbortedError:
            pass  # aborted or shutting down: the log is as it was
        except Exception:
            log.warning("Unexpected exception thrown when cleaning log %s-%d. Marking it as "
                        "uncleanable", ltc.tp[0], ltc.tp[1], exc_info=True)
            manager.mark_uncleanable(ltc.tp)
            end_offset = None
        finally:
            manager.done_cleaning(ltc.tp, log_dir, end_offset)
        return True


# -- computing the cleanable section ---------------------------------------------------------


def compute_log_to_clean(tp: TopicPartition, plog: PartitionLog, config: LogConfig,
                         checkpoint: int | None, last_stable_offset: int, now_ms: int
                         ) -> LogToClean:
    """Kafka's LogCleanerManager.cleanableOffsets, maxCompactionDelay and
    calculateCleanableBytes over one log's segments."""
    segments = plog.segments
    active = segments[-1]
    # (segment, its exclusive end: the next segment's base offset) for inactive segments
    inactive = [(s, segments[i + 1].base_offset) for i, s in enumerate(segments[:-1])]
    log_start = plog.log_start_offset
    first_dirty = log_start if checkpoint is None else checkpoint
    if first_dirty < log_start or first_dirty > plog.log_end_offset:
        first_dirty = log_start
    dirty_inactive = [s for s, end in inactive if end > first_dirty]
    # Never past the last stable offset, never into the active segment, never into a
    # segment holding records newer than min.compaction.lag.ms.
    uncleanable = min(last_stable_offset, active.base_offset)
    min_lag = max(config.min_compaction_lag_ms, 0)
    if min_lag > 0:
        for seg in dirty_inactive:
            if seg.largest_timestamp > now_ms - min_lag:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    uncleanable = max(first_dirty, uncleanable)
    # calculateCleanableBytes: whole segments, up to the one holding the uncleanable offset.
    first_uncleanable = next((s.base_offset for s, end in inactive if end > uncleanable),
                             active.base_offset)
    low = min(first_dirty, first_uncleanable)
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    cleanable_bytes = sum(s.size for s, end in inactive
                          if s.base_offset < first_uncleanable and end > low)
    # maxCompactionDelay: how long ago the oldest dirty record passed max.compaction.lag.ms.
    max_lag = max(config.max_compaction_lag_ms, 0)
    first_timestamps = [t for s in dirty_inactive
                        if (t := s.first_batch_timestamp()) is not None and t > 0]
    delay = 0
    if first_timestamps and min(first_timestamps) < now_ms - max_lag:
        delay = now_ms - max_lag - min(first_timestamps)
    return LogToClean(tp, plog, first_dirty, uncleanable, clean_bytes, cleanable_bytes, delay)


def _log_last_stable_offset(_tp: TopicPartition, plog: PartitionLog) -> int:
    first_unstable = plog.producer_state.first_unstable_offset
    hw = plog.high_watermark
    return hw if first_unstable is None else min(hw, first_unstable)


def format_clean_stats(thread_id: int, name: str, start: int, end: int,
                       stats: CleanResult) -> str:
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


# -- the storage cleaner (klog/storage/cleaner.py) ------------------------------------------


class _NoThrottle:
    def update_rate(self, bytes_per_second: float) -> None:
        pass


def _default_throttle(config: CleanerConfig) -> Any:
    return _NoThrottle()


def _storage_cleaner_factory(thread_id: int, config: CleanerConfig, throttle: Any,
                             check_done: Callable[[TopicPartition], None]) -> LogCleanerWorker:
    raise NotImplementedError("klog.storage.cleaner is not merged yet")


__all__ = [
    "RECONFIGURABLE_CONFIGS",
    "CleanerConfig",
    "CleaningAbortedError",
    "CleaningState",
    "LastClean",
    "LogCleaner",
    "LogToClean",
    "PartitionCleaningStatus",
    "compute_log_to_clean",
    "format_clean_stats",
    "validate_reconfiguration",
]
