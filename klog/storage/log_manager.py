"""The broker's log directories: locking, loading, creating, checkpointing, closing.

This module owns Kafka's LogManager for ``log.dirs``: it locks each directory (``.lock``,
fcntl.flock, so a second broker or tool on the same dirs fails with a clear error), loads
every partition directory into a ``PartitionLog`` (recovering from the recovery points
when ``.kafka_cleanshutdown`` is absent, trusting them when it is present), places new
partitions in the directory with the fewest partitions, and keeps the broker-level
checkpoint files (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``;
``replication-offset-checkpoint`` is read and kept; ``cleaner-offset-checkpoint`` is read at
load and written through ``cleaner_checkpoints``, which drops a deleted partition's entry).
On a clean ``close`` every log is flushed and the clean-shutdown marker written.

No threads are started here: the daemon calls ``flush_dirty_logs``, ``cleanup_logs`` and
``checkpoint_*`` from its own workers, off the event loop.

Future logs (Kafka's JBOD moves, AlterReplicaLogDirs): a partition may have, besides its
log, a *future* log in another dir of this broker (``<topic>-<partition>.<uuid>-future``),
which ``copy_to_future`` fills from the current log, batch by batch as they were written,
while the current log goes on serving; truncations of the current log cut the future one
too. Once the future log has caught up, ``replace_current_with_future_log`` swaps them as
Kafka does: the future dir is renamed to the partition's name, the current one to its
``-delete`` name (removed after file.delete.delay.ms). Future logs are loaded at start-up
(a move interrupted by a restart goes on when the partition is hosted again) and count in
their dir's checkpoints. A crash between the two renames leaves the partition's name in
two dirs, which start-up refuses, as Kafka does, naming both. ``preferred_log_dir`` places
a partition not created yet in the dir a move asked for.

Failed dirs (Kafka's LogDirFailureChannel and LogManager.handleLogDirFailure): an I/O error
(OSError) met by the manager's own work -- loading at start-up, flushing, retention,
checkpoints -- is reported to ``failure_listener`` (the daemon's
klog/daemon/log_dir_failure.py, which the append and read paths report to as well) with
the dir it happened in; without a listener it is raised as before. A dir that fails to
load at start-up is left offline and the others load, as in Kafka (all of them failing is
an error). ``handle_log_dir_failure`` takes a dir offline: its logs and future logs leave
the tables (their files closed, nothing deleted), no new log goes there, and its
checkpoints and clean-shutdown marker are no longer written; ``live_log_dirs`` are the
others.

The log cleaner (klog/daemon/log_cleaner.py) lives in the daemon; it plugs in as
``cleaner`` (``CleanerHooks``), which the LogManager tells, as Kafka's LogManager tells its
LogCleaner, before a log is deleted (abort the clean in progress), around a truncation
below the active segment (abort and pause, then resume) and around retention (skip a log
the cleaner holds). Hooks are called without the manager's lock held: an abort waits for
a cleaner thread that may itself need that lock.

Locking: the manager's lock guards the partition table (create / delete / lookup); each
PartitionLog has its own lock, so work on different partitions runs in parallel. All
public methods are thread-safe.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from klog.protocol.errors import KafkaStorageError
from klog.storage.checkpoints import (
    CheckpointError,
    MetaProperties,
    fsync_dir,
    read_meta_properties,
    read_offset_checkpoint,
    write_meta_properties,
    write_offset_checkpoint,
)
from klog.storage.cleaner import CleanerCheckpoints
from klog.storage.config import LogConfig
from klog.storage.log import (
    PartitionLog,
    log_delete_dir_name,
    log_dir_name,
    log_future_dir_name,
    parse_partition_dir_name,
)

logger = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
META_PROPERTIES_FILE = "meta.properties"

TopicPartition = tuple[str, int]


class LogDirLockedError(RuntimeError):
    """Another process (or another LogManager here) holds a log dir's ``.lock``."""


class LogDirError(RuntimeError):
    """A log directory that cannot be used (unreadable checkpoints, duplicate partitions)."""


class LogDirNotFoundError(ValueError):
    """Kafka's LogDirNotFoundException: a path that is not one of log.dirs."""


class NoLiveLogDirError(LogDirError):
    """Every log dir is offline: nowhere to put a log."""


class FutureLogError(RuntimeError):
    """A future log that cannot be made or swapped in (no current log, same dir, ...)."""


@dataclass(frozen=True, slots=True)
class LoadSummary:
    """What loading one log dir found."""

    log_dir: Path
    had_clean_shutdown: bool
    partitions: int
    bytes_truncated: int
    skipped: tuple[str, ...]  # directory names that are not partitions, with the reason


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class CleanerHooks(Protocol):
    """What the log cleaner hears from the LogManager (Kafka's LogCleaner calls in
    LogManager). ``abort`` and ``abort_and_pause`` block until a clean in progress of that
    partition has stopped."""

    def abort(self, tp: TopicPartition) -> None: ...

    def abort_and_pause(self, tp: TopicPartition) -> None: ...

    def resume(self, tp: TopicPartition) -> None: ...

    def try_pause(self, tp: TopicPartition) -> bool: ...

    def forget(self, tp: TopicPartition) -> None: ...

    def truncate_checkpoint(self, tp: TopicPartition, log_dir: Path, offset: int) -> None: ...


class LogManager:
    """Kafka's LogManager over one or more log dirs (thread-safe; see module docstring)."""

    def __init__(
        self,
        log_dirs: Iterable[Path | str],
        default_config: LogConfig | None = None,
        *,
        topic_config: Callable[[str], LogConfig] | None = None,
        clock: Callable[[], int] = _wall_clock_ms,
        producer_id_expiration_ms: int = 86_400_000,
        recovery_threads: int = 8,
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("at least one log dir is needed")
        if len({d.resolve() for d in self.log_dirs}) != len(self.log_dirs):
            raise LogDirError(f"duplicate log directory found: {self.log_dirs}")
        self.default_config = default_config or LogConfig()
        self._topic_config = topic_config
        self.clock = clock
        self.producer_id_expiration_ms = producer_id_expiration_ms
        # Threads for loading and closing logs (fsync-bound work, which releases the GIL).
        self.recovery_threads = recovery_threads
        self._lock = threading.RLock()
        self._lock_fds: dict[Path, int] = {}
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._log_dir_of: dict[TopicPartition, Path] = {}
        self._logs_to_delete: list[tuple[int, Path]] = []
        # Future logs (see the module docstring): the log, its dir, and the lock that keeps
        # a copy step and a truncation of the future log apart.
        self._future_logs: dict[TopicPartition, PartitionLog] = {}
        self._future_dir_of: dict[TopicPartition, Path] = {}
        self._future_locks: dict[TopicPartition, threading.Lock] = {}
        # Dirs asked for partitions not created here yet (Kafka's preferredLogDirs).
        self._preferred_log_dirs: dict[TopicPartition, Path] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}
        # As loaded at startup; the cleaner reads and writes the files through
        # cleaner_checkpoints (one lock for every writer of them in the process).
        self.cleaner_offsets: dict[Path, dict[TopicPartition, int]] = {}
        self.cleaner_checkpoints = CleanerCheckpoints()
        self.load_summaries: list[LoadSummary] = []
        # Dirs taken offline after an I/O error (start-up included), and who hears of
        # I/O errors met here: (the dir, the error). None: they are raised.
        self.offline_dirs: set[Path] = set()
        self.failure_listener: Callable[[Path, OSError], None] | None = None
        # Partitions whose log was in an offline dir: never made again elsewhere (that
        # would be an empty replica claiming to be the old one); and whether an offline
        # dir could not even be listed (then no log is made at all, Kafka's rule for a
        # partition that is not new while a dir is offline).
        self.offline_partitions: set[TopicPartition] = set()
        self._unlisted_offline_dir = False
        # The log cleaner, when the daemon runs one (klog/daemon/log_cleaner.py).
        self.cleaner: CleanerHooks | None = None
        self._closed = False

    # -- opening -------------------------------------------------------------------------

    def startup(self) -> LogManager:
        """Create missing dirs, lock them all, and load every partition. Returns self."""
        with self._lock:
            try:
                failed: dict[Path, OSError] = {}
                for log_dir in self.log_dirs:
                    try:
                        log_dir.mkdir(parents=True, exist_ok=True)
                    except OSError as mkdir_error:
                        failed[log_dir] = mkdir_error
                        continue
                    self._lock_dir(log_dir)
                for log_dir in self.log_dirs:
                    if log_dir in failed:
                        continue
                    try:
                        self._load_dir(log_dir)
                    except OSError as load_error:
                        # As Kafka's loadLogs: the dir goes offline, the others load.
                        failed[log_dir] = load_error
                        self._drop_dir_logs(log_dir)
                if failed and len(failed) == len(self.log_dirs):
                    raise NoLiveLogDirError(
                        "Shutdown broker because all log dirs in "
                        f"{', '.join(map(str, self.log_dirs))} have failed: "
                        + "; ".join(f"{d}: {e}" for d, e in failed.items()))
                for log_dir, error in failed.items():
                    self.offline_dirs.add(log_dir)
                    self._remember_partitions_of(log_dir)
                    self._report(log_dir, error)
            except BaseException:
                self._close_all_quietly()
                self._unlock_all()
                raise
        return self

    # -- failed dirs -------------------------------------------------------------------------

    @property
    def live_log_dirs(self) -> list[Path]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def is_offline(self, log_dir: Path) -> bool:
        return log_dir in self.offline_dirs

    def log_dir_containing(self, path: Path | str) -> Path | None:
        """The configured log dir ``path`` is in (or is), or None."""
        target = os.path.abspath(path)
        for log_dir in self.log_dirs:
            root = os.path.abspath(log_dir)
            if target == root or target.startswith(root + os.sep):
                return log_dir
        return None

    def _report(self, log_dir: Path, exc: OSError) -> None:
        """An I/O error met in ``log_dir``: to the failure listener, else raised."""
        listener = self.failure_listener
        if listener is None:
            raise exc
        listener(log_dir, exc)

    def _io_error(self, where: Path, exc: OSError) -> None:
        self._report(self.log_dir_containing(where) or where, exc)

    def handle_log_dir_failure(self, log_dir: Path
                               ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """Take ``log_dir`` offline (Kafka's LogManager.handleLogDirFailure): its logs and
        future logs leave the tables, their files are closed (quietly: the disk failed),
        nothing is deleted. Returns (the partitions whose log was there, those whose future
        log was). Idempotent. Blocking (closing files): a worker thread."""
        with self._lock:
            if log_dir in self.offline_dirs and not self._dir_has_logs(log_dir):
                return [], []
            self.offline_dirs.add(log_dir)
            return self._drop_dir_logs(log_dir)

    def _remember_partitions_of(self, log_dir: Path) -> None:
        """The partitions a dir that failed at start-up held, from its entries' names."""
        try:
            names = [e.name for e in log_dir.iterdir() if e.is_dir()]
        except OSError:
            self._unlisted_offline_dir = True
            return
        for name in names:
            with contextlib.suppress(ValueError):
                parsed = parse_partition_dir_name(name)
                if not parsed.kind:
                    self.offline_partitions.add((parsed.topic, parsed.partition))

    def _check_creatable(self, tp: TopicPartition) -> None:
        if tp in self.offline_partitions:
            raise KafkaStorageError(f"the log of {tp[0]}-{tp[1]} is in an offline log "
                                    "directory")
        if self._unlisted_offline_dir:
            raise KafkaStorageError(
                f"Can not create log for {tp[0]}-{tp[1]} because log directories "
                f"{','.join(map(str, sorted(self.offline_dirs)))} are offline")

    def _dir_has_logs(self, log_dir: Path) -> bool:
        return log_dir in self._log_dir_of.values() or log_dir in self._future_dir_of.values()

    def _drop_dir_logs(self, log_dir: Path
                       ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        current = sorted(tp for tp, d in self._log_dir_of.items() if d == log_dir)
        futures = sorted(tp for tp, d in self._future_dir_of.items() if d == log_dir)
        self.offline_partitions.update(current)
        for tp in current:
            log = self._logs.pop(tp)
            del self._log_dir_of[tp]
            self.high_watermarks.pop(tp, None)
            _close_quietly(log)
        for tp in futures:
            log = self._future_logs.pop(tp)
            del self._future_dir_of[tp]
            self._future_locks.pop(tp, None)
            _close_quietly(log)
        self._preferred_log_dirs = {tp: d for tp, d in self._preferred_log_dirs.items()
                                    if d != log_dir}
        return current, futures

    def __enter__(self) -> LogManager:
        return self.startup()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lock_dir(self, log_dir: Path) -> None:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(
                f"failed to acquire lock on file {LOCK_FILE} in {log_dir}: a Kafka or klog "
                "instance in another process or thread is using this directory"
            ) from None
        self._lock_fds[log_dir] = fd

    def _unlock_all(self) -> None:
        for fd in self._lock_fds.values():
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._lock_fds.clear()

    def config_for(self, topic: str) -> LogConfig:
        if self._topic_config is not None:
            return self._topic_config(topic)
        return self.default_config

    def _read_checkpoint(self, path: Path) -> dict[TopicPartition, int]:
        if not path.exists():
            return {}
        try:
            return read_offset_checkpoint(path)
        except (CheckpointError, OSError, ValueError):
            # Kafka resets an unreadable checkpoint: recovery then starts from 0, which is
            # slower but safe; the file is rewritten at the next checkpoint.
            return {}

    def _load_dir(self, log_dir: Path) -> None:
        clean_marker = log_dir / CLEAN_SHUTDOWN_FILE
        had_clean_shutdown = clean_marker.exists()
        recovery_points = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT_FILE)
        log_start_offsets = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT_FILE)
        high_watermarks = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE)
        self.cleaner_offsets[log_dir] = self._read_checkpoint(
            log_dir / CLEANER_OFFSET_CHECKPOINT_FILE
        )
        skipped: list[str] = []
        truncated = 0
        loaded = 0
        to_load: list[tuple[Path, TopicPartition]] = []
        futures: list[tuple[Path, TopicPartition]] = []
        for entry in sorted(log_dir.iterdir()):
            # Dot-directories are never partitions (Kafka's topic names cannot start a
            # directory name with "."); klog keeps its standalone metastore in one.
            if not entry.is_dir() or entry.name.startswith("."):
                continue
            try:
                name = parse_partition_dir_name(entry.name)
            except ValueError as exc:
                skipped.append(f"{entry.name}: {exc}")
                continue
            if name.kind == "delete":
                # A topic deletion that did not finish: finish it after the usual delay.
                due = self.clock() + self.default_config.file_delete_delay_ms
                self._logs_to_delete.append((due, entry))
                continue
            if name.kind == "future":
                tp = (name.topic, name.partition)
                if tp in self._future_logs or any(tp == t for _e, t in futures):
                    raise LogDirError(
                        f"duplicate future log directories for {tp[0]}-{tp[1]} are found in "
                        f"{self._future_dir_of.get(tp, log_dir)} and {log_dir}")
                futures.append((entry, tp))
                continue
            if name.kind:
                skipped.append(f"{entry.name}: {name.kind} logs are not supported")
                continue
            tp = (name.topic, name.partition)
            if tp in self._logs or any(tp == t for _e, t in to_load):
                # As Kafka: a crash between the two renames of a future log's swap.
                raise LogDirError(
                    f"duplicate log directories for {entry.name} are found in both "
                    f"{self._log_dir_of.get(tp, log_dir)} and {log_dir}. It is likely "
                    "because log directory failure happened while broker was replacing "
                    "current replica with future replica. Recover broker from this failure "
                    "by manually deleting one of the two directories for this partition. "
                    "It is recommended to delete the partition in the log directory that "
                    "is known to have failed recently."
                )
            to_load.append((entry, tp))

        def load(item: tuple[Path, TopicPartition]) -> PartitionLog:
            entry, tp = item
            return PartitionLog(
                entry,
                self.config_for(tp[0]),
                log_start_offset=log_start_offsets.get(tp, 0),
                recovery_point=recovery_points.get(tp, 0),
                # As Kafka's Partition.createLog: the checkpointed high watermark, or 0
                # (clamped to the log start) when there is none. Never the log end: the
                # tail past the last checkpoint may be on no other ISR member, and a
                # leader that loaded it as committed would serve it at once; the high
                # watermark moves up as the followers fetch (a one-replica ISR: at once).
                high_watermark=high_watermarks.get(tp, 0),
                had_clean_shutdown=had_clean_shutdown,
                clock=self.clock,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
            )

        # Loading is dominated by fsyncs (recovery rewrites indexes, snapshots and epoch
        # files), which release the GIL: partitions load in parallel, as Kafka's
        # num.recovery.threads.per.data.dir does.
        everything = to_load + futures
        with ThreadPoolExecutor(max_workers=max(1, min(self.recovery_threads,
                                                       len(everything)))) as pool:
            submitted = [pool.submit(load, item) for item in everything]
            errors = [error for f in submitted if (error := f.exception()) is not None]
            if errors:
                for f in submitted:  # don't leak the descriptors of the logs that did load
                    if f.exception() is None:
                        with contextlib.suppress(Exception):
                            f.result().close()
                raise errors[0]
            logs = [f.result() for f in submitted]
        for (_entry, tp), log in zip(to_load, logs[:len(to_load)], strict=True):
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir
            if tp in high_watermarks:
                self.high_watermarks[tp] = log.high_watermark
            truncated += log.bytes_truncated_on_load
            loaded += 1
        for (_entry, tp), log in zip(futures, logs[len(to_load):], strict=True):
            self._future_logs[tp] = log
            self._future_dir_of[tp] = log_dir
            self._future_locks[tp] = threading.Lock()
            truncated += log.bytes_truncated_on_load
        # Loaded: the marker has done its job. A crash from now on must recover.
        clean_marker.unlink(missing_ok=True)
        self.load_summaries.append(
            LoadSummary(log_dir, had_clean_shutdown, loaded, truncated, tuple(skipped))
        )

    # -- partitions ----------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        with self._lock:
            return self._logs.get((topic, partition))

    def all_logs(self) -> dict[TopicPartition, PartitionLog]:
        with self._lock:
            return dict(self._logs)

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        with self._lock:
            return self._log_dir_of.get((topic, partition))

    def _next_log_dir(self, tp: TopicPartition | None = None) -> Path:
        preferred = self._preferred_log_dirs.pop(tp, None) if tp is not None else None
        if preferred is not None and preferred not in self.offline_dirs:
            return preferred  # a move asked for it before the partition came here
        live = self.live_log_dirs
        if not live:
            raise NoLiveLogDirError("no log dir is online to create a log in")
        counts = {d: 0 for d in live}
        for log_dir in self._log_dir_of.values():
            if log_dir in counts:
                counts[log_dir] += 1
        # Fewest partitions first; ties go to the first configured dir.
        return min(live, key=lambda d: counts[d])

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None
    ) -> PartitionLog:
        """The partition's log, created (empty, at offset 0) in the least loaded dir."""
        with self._lock:
            self._check_open()
            tp = (topic, partition)
            log = self._logs.get(tp)
            if log is not None:
                return log
            self._check_creatable(tp)
            log_dir = self._next_log_dir(tp)
            # An OSError here is the caller's to answer (KAFKA_STORAGE_ERROR for that
            # partition); unlike Kafka, it does not take the dir offline: creation also
            # fails for reasons that are not the disk's (no descriptors left).
            log = PartitionLog(
                log_dir / log_dir_name(topic, partition),
                config or self.config_for(topic),
                clock=self.clock,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
            )
            self._logs[tp] = log
            self._log_dir_of[tp] = log_dir
            return log

    def delete_log(self, topic: str, partition: int) -> Path | None:
        """Rename the partition dir to its ``-delete`` name now; ``cleanup_logs`` removes it
        after file.delete.delay.ms. Returns the new path (None if there was no log).

        The log leaves the table first, so the cleaner cannot pick it again; a clean in
        progress is then aborted (waiting for it to stop) before the files move."""
        tp = (topic, partition)
        self.remove_future_log(topic, partition)
        with self._lock:
            # A deleted partition whose log was in a failed dir may be made anew later.
            self.offline_partitions.discard(tp)
            log = self._logs.pop(tp, None)
            log_dir = self._log_dir_of.pop(tp, None)
            self.high_watermarks.pop(tp, None)
            self._preferred_log_dirs.pop(tp, None)
        if log is None or log_dir is None:
            return None
        cleaner = self.cleaner
        if cleaner is not None:
            cleaner.abort(tp)
            cleaner.forget(tp)
        with self._lock:
            log.rename_dir(log_delete_dir_name(topic, partition))
            log.close()
            due = self.clock() + log.config.file_delete_delay_ms
            self._logs_to_delete.append((due, log.dir))
            self._checkpoint_dir(log_dir)
            # Kafka's LogManager.asyncDelete: a partition created again starts dirty.
            self.cleaner_offsets.get(log_dir, {}).pop(tp, None)
            if tp in self.cleaner_checkpoints.read(log_dir):
                self.cleaner_checkpoints.remove(log_dir, tp)
            return log.dir

    def truncate_to(self, topic: str, partition: int, target_offset: int) -> bool:
        """Truncate a log to ``target_offset`` (a follower diverged from its leader), with
        the cleaner kept off it when the cut reaches below the active segment, and its
        checkpoint lowered to the new active segment (Kafka's LogManager.truncateTo).
        Returns whether anything was removed."""
        log = self.get_log(topic, partition)
        if log is None:
            return False
        tp = (topic, partition)
        cleaner = self.cleaner if target_offset < log.active_segment.base_offset else None
        if cleaner is None:
            truncated = log.truncate_to(target_offset)
            self._truncate_future(tp, target_offset)
            return truncated
        cleaner.abort_and_pause(tp)
        try:
            truncated = log.truncate_to(target_offset)
            self._truncate_future(tp, target_offset)
            cleaner.truncate_checkpoint(tp, self._log_dir_of.get(tp, log.dir.parent),
                                        log.active_segment.base_offset)
            return truncated
        finally:
            cleaner.resume(tp)

    def truncate_fully_and_start_at(self, topic: str, partition: int, new_offset: int) -> None:
        """Empty a log and start it at ``new_offset``, the cleaner kept off it meanwhile
        (Kafka's LogManager.truncateFullyAndStartAt)."""
        log = self.get_log(topic, partition)
        if log is None:
            return
        tp = (topic, partition)
        cleaner = self.cleaner
        if cleaner is None:
            log.truncate_fully_and_start_at(new_offset)
            self._truncate_future(tp, new_offset, fully=True)
            return
        cleaner.abort_and_pause(tp)
        try:
            log.truncate_fully_and_start_at(new_offset)
            self._truncate_future(tp, new_offset, fully=True)
            cleaner.truncate_checkpoint(tp, self._log_dir_of.get(tp, log.dir.parent),
                                        log.active_segment.base_offset)
        finally:
            cleaner.resume(tp)

    # -- future logs (moves between log dirs) ----------------------------------------------

    def log_dir_path(self, path: str) -> Path:
        """The configured log dir that ``path`` names (Kafka compares absolute paths);
        LogDirNotFoundError with Kafka's message when none does."""
        for log_dir in self.log_dirs:
            if os.path.abspath(log_dir) == path:
                return log_dir
        raise LogDirNotFoundError(f"Log dir {path} is not found in the config.")

    def future_log(self, topic: str, partition: int) -> PartitionLog | None:
        with self._lock:
            return self._future_logs.get((topic, partition))

    def all_future_logs(self) -> dict[TopicPartition, PartitionLog]:
        with self._lock:
            return dict(self._future_logs)

    def future_log_dir_of(self, topic: str, partition: int) -> Path | None:
        with self._lock:
            return self._future_dir_of.get((topic, partition))

    def maybe_update_preferred_log_dir(self, topic: str, partition: int, log_dir: Path) -> None:
        """Remember where the partition's log goes when it is created here later, unless
        its log or future log is in that dir already (Kafka's maybeUpdatePreferredLogDir)."""
        tp = (topic, partition)
        with self._lock:
            if self._log_dir_of.get(tp) != log_dir and self._future_dir_of.get(tp) != log_dir:
                self._preferred_log_dirs[tp] = log_dir

    def create_future_log(self, topic: str, partition: int, log_dir: Path,
                          config: LogConfig | None = None) -> PartitionLog:
        """An empty future log of the partition in ``log_dir`` (another dir than its log's),
        starting at the current log's start offset; the existing one if it is there."""
        tp = (topic, partition)
        with self._lock:
            self._check_open()
            current_dir = self._log_dir_of.get(tp)
            if current_dir is None:
                raise FutureLogError(f"{topic}-{partition} has no log on this broker")
            if current_dir == log_dir:
                raise FutureLogError(f"the log of {topic}-{partition} is in {log_dir} already")
            future = self._future_logs.get(tp)
            if future is not None:
                if self._future_dir_of[tp] != log_dir:
                    raise FutureLogError(
                        f"the future log of {topic}-{partition} is in "
                        f"{self._future_dir_of[tp]}, not {log_dir}")
                return future
            current = self._logs[tp]
            future = PartitionLog(
                log_dir / log_future_dir_name(topic, partition),
                config or current.config,
                clock=self.clock,
                producer_id_expiration_ms=self.producer_id_expiration_ms,
            )
            if current.log_start_offset > 0:
                future.truncate_fully_and_start_at(current.log_start_offset)
            self._future_logs[tp] = future
            self._future_dir_of[tp] = log_dir
            self._future_locks[tp] = threading.Lock()
            self._preferred_log_dirs.pop(tp, None)
            return future

    def remove_future_log(self, topic: str, partition: int) -> Path | None:
        """Give up a move: the future log leaves the table, its dir is renamed to its
        ``-delete`` name and removed after file.delete.delay.ms. Returns the new path."""
        tp = (topic, partition)
        with self._lock:
            future = self._future_logs.pop(tp, None)
            log_dir = self._future_dir_of.pop(tp, None)
            lock = self._future_locks.pop(tp, None)
        if future is None or log_dir is None:
            return None
        with lock or contextlib.nullcontext(), self._lock:
            future.rename_dir(log_delete_dir_name(topic, partition))
            future.close()
            self._logs_to_delete.append(
                (self.clock() + future.config.file_delete_delay_ms, future.dir))
            self._checkpoint_dir(log_dir)
        return future.dir

    def copy_to_future(self, topic: str, partition: int, max_bytes: int) -> int:
        """One step of a move: the current log's batches from the future log's end, up to
        ``max_bytes`` (at least one batch), appended to the future log as written; its high
        watermark and log start offset follow the current log's. Returns the bytes copied
        (0: nothing to copy now). Thread-safe; runs in a worker thread or on the loop."""
        tp = (topic, partition)
        with self._lock:
            current = self._logs.get(tp)
            future = self._future_logs.get(tp)
            lock = self._future_locks.get(tp)
        if current is None or future is None or lock is None:
            return 0
        with lock:
            if self._future_logs.get(tp) is not future:
                return 0  # removed or swapped meanwhile
            start = future.log_end_offset
            if start > current.log_end_offset:  # defensive: truncations cut both
                future.truncate_to(current.log_end_offset)
                start = future.log_end_offset
            if start < current.log_start_offset:
                # Retention or DeleteRecords passed the future log's end: start over there
                # (Kafka's out-of-range handling of a follower behind its leader's start).
                future.truncate_fully_and_start_at(current.log_start_offset)
                start = current.log_start_offset
            copied = 0
            if start < current.log_end_offset:
                data = current.read(start, max_bytes, None, True).read_bytes()
                if data:
                    first_base = int.from_bytes(data[:8], "big", signed=True)
                    if first_base < start and future.size == 0:
                        # The batch holding the log start offset begins before it.
                        future.truncate_fully_and_start_at(first_base)
                    future.append_as_follower(bytearray(data))
                    copied = len(data)
            future.update_high_watermark(min(current.high_watermark, future.log_end_offset))
            if future.log_start_offset < current.log_start_offset <= future.high_watermark:
                future.maybe_increment_log_start_offset(current.log_start_offset)
            return copied

    def future_caught_up(self, topic: str, partition: int) -> bool:
        """Whether the future log has everything the current log has (same log end)."""
        tp = (topic, partition)
        with self._lock:
            current = self._logs.get(tp)
            future = self._future_logs.get(tp)
        return (current is not None and future is not None
                and future.log_end_offset == current.log_end_offset)

    def replace_current_with_future_log(self, topic: str, partition: int) -> PartitionLog:
        """Swap in a caught-up future log (Kafka's replaceCurrentWithFutureLog): the future
        dir takes the partition's name, the current log is renamed for deletion, closed
        and removed after file.delete.delay.ms; both dirs' checkpoints are rewritten and
        the cleaner's checkpoint entry moves with the log. The caller keeps appends away
        meanwhile (the broker swaps on its event loop). Returns the new current log."""
        tp = (topic, partition)
        with self._lock:
            current = self._logs.get(tp)
            future = self._future_logs.get(tp)
            lock = self._future_locks.get(tp)
            source_dir = self._log_dir_of.get(tp)
            dest_dir = self._future_dir_of.get(tp)
        if current is None or future is None or lock is None or source_dir is None \
                or dest_dir is None:
            raise FutureLogError(f"{topic}-{partition} has no future log to swap in")
        with lock, self._lock:
            if future.log_end_offset != current.log_end_offset:
                raise FutureLogError(
                    f"the future log of {topic}-{partition} ends at "
                    f"{future.log_end_offset}, the log at {current.log_end_offset}")
            # Leader epochs the current log knows without a batch of theirs yet (a new
            # leadership's start) are the future log's too.
            for entry in current.leader_epoch_cache.entries:
                latest = future.leader_epoch_cache.latest_epoch
                if latest is None or entry.epoch > latest:
                    future.leader_epoch_cache.assign(entry.epoch, entry.start_offset)
            future.flush()
            future.rename_dir(log_dir_name(topic, partition))
            future.update_high_watermark(current.high_watermark)
            del self._future_logs[tp]
            del self._future_dir_of[tp]
            del self._future_locks[tp]
            self._logs[tp] = future
            self._log_dir_of[tp] = dest_dir
            self.high_watermarks[tp] = future.high_watermark
            checkpoint = self.cleaner_checkpoints.read(source_dir).get(tp)
            if checkpoint is not None:
                self.cleaner_checkpoints.update(dest_dir, tp, checkpoint)
                self.cleaner_checkpoints.remove(source_dir, tp)
            current.rename_dir(log_delete_dir_name(topic, partition))
            current.close()
            self._logs_to_delete.append(
                (self.clock() + current.config.file_delete_delay_ms, current.dir))
            self._checkpoint_dir(source_dir)
            self._checkpoint_dir(dest_dir)
            return future

    def _truncate_future(self, tp: TopicPartition, offset: int, fully: bool = False) -> None:
        """The current log was truncated (or emptied to start at ``offset``): the future
        log follows, under its lock, so a copy step in flight cannot leave stale batches."""
        with self._lock:
            future = self._future_logs.get(tp)
            lock = self._future_locks.get(tp)
        if future is None or lock is None:
            return
        with lock:
            if fully:
                future.truncate_fully_and_start_at(offset)
            elif offset < future.log_end_offset:
                future.truncate_to(offset)

    # -- periodic work (called by the daemon) ----------------------------------------------

    def flush_dirty_logs(self, now_ms: int | None = None) -> int:
        """Apply each log's flush policy; returns how many logs flushed."""
        now = self.clock() if now_ms is None else now_ms
        flushed = 0
        for log in [*self.all_logs().values(), *self.all_future_logs().values()]:
            try:
                flushed += log.maybe_flush(now)
            except OSError as exc:
                self._io_error(log.dir, exc)
        return flushed

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """Retention for every log, pending segment deletions, finished topic deletions.
        Returns the number of segments deleted by retention."""
        now = self.clock() if now_ms is None else now_ms
        deleted = 0
        cleaner = self.cleaner
        for tp, log in self.all_logs().items():
            # cleanup.policy=compact,delete gets retention here and compaction from the
            # cleaner, never both at once: a log the cleaner holds waits for the next round.
            if cleaner is not None and not cleaner.try_pause(tp):
                continue
            try:
                deleted += log.delete_old_segments(now)
                log.delete_pending(now)
            except OSError as exc:
                self._io_error(log.dir, exc)
            finally:
                if cleaner is not None:
                    cleaner.resume(tp)
        with self._lock:
            due = [p for t, p in self._logs_to_delete if t <= now]
            self._logs_to_delete = [(t, p) for t, p in self._logs_to_delete if t > now]
        for path in due:
            shutil.rmtree(path, ignore_errors=True)
        return deleted

    def update_high_watermark(self, topic: str, partition: int, high_watermark: int) -> None:
        with self._lock:
            log = self._logs.get((topic, partition))
            if log is not None:
                self.high_watermarks[(topic, partition)] = log.update_high_watermark(high_watermark)

    # -- checkpoints ---------------------------------------------------------------------

    def _logs_in(self, log_dir: Path) -> dict[TopicPartition, PartitionLog]:
        """The logs in ``log_dir``: current ones, and future ones (a dir never holds both
        of one partition)."""
        logs = {tp: log for tp, log in self._logs.items() if self._log_dir_of[tp] == log_dir}
        logs.update((tp, log) for tp, log in self._future_logs.items()
                    if self._future_dir_of[tp] == log_dir)
        return logs

    def _checkpoint_dir(self, log_dir: Path) -> None:
        logs = self._logs_in(log_dir)
        write_offset_checkpoint(
            log_dir / RECOVERY_POINT_CHECKPOINT_FILE,
            {tp: log.recovery_point for tp, log in logs.items()},
        )
        # Kafka records only log start offsets above the first segment's base offset.
        write_offset_checkpoint(
            log_dir / LOG_START_OFFSET_CHECKPOINT_FILE,
            {
                tp: log.log_start_offset
                for tp, log in logs.items()
                if log.log_start_offset > log.segments[0].base_offset
            },
        )

    def checkpoint_recovery_points_and_log_start_offsets(self) -> None:
        with self._lock:
            for log_dir in self.live_log_dirs:
                try:
                    self._checkpoint_dir(log_dir)
                except OSError as exc:
                    self._report(log_dir, exc)

    def checkpoint_high_watermarks(self) -> None:
        """Write replication-offset-checkpoint (the ReplicaManager's file in Kafka)."""
        with self._lock:
            for log_dir in self.live_log_dirs:
                logs = self._logs_in(log_dir)
                try:
                    write_offset_checkpoint(
                        log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE,
                        {tp: log.high_watermark for tp, log in logs.items()},
                    )
                except OSError as exc:
                    self._report(log_dir, exc)

    # -- meta.properties -----------------------------------------------------------------

    def read_meta_properties(self) -> dict[Path, MetaProperties | None]:
        out: dict[Path, MetaProperties | None] = {}
        for log_dir in self.live_log_dirs:
            path = log_dir / META_PROPERTIES_FILE
            out[log_dir] = read_meta_properties(path) if path.exists() else None
        return out

    def ensure_meta_properties(self, broker_id: int, cluster_id: str | None) -> None:
        """Write meta.properties where missing; refuse a dir of another broker or cluster."""
        for log_dir, meta in self.read_meta_properties().items():
            if meta is None:
                write_meta_properties(
                    log_dir / META_PROPERTIES_FILE,
                    MetaProperties(version=0, node_id=broker_id, cluster_id=cluster_id),
                )
                continue
            if meta.node_id is not None and meta.node_id != broker_id:
                raise LogDirError(
                    f"stored broker.id {meta.node_id} in {log_dir / META_PROPERTIES_FILE} "
                    f"doesn't match configured broker.id {broker_id}"
                )
            if cluster_id is not None and meta.cluster_id not in (None, cluster_id):
                raise LogDirError(
                    f"the cluster id {cluster_id} doesn't match the stored cluster.id "
                    f"{meta.cluster_id} in {log_dir / META_PROPERTIES_FILE}"
                )

    # -- closing -------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the log manager is closed")

    def _close_all_quietly(self) -> None:
        for log in [*self._logs.values(), *self._future_logs.values()]:
            with contextlib.suppress(Exception):  # after a failed load: best effort
                log.close()
        self._logs.clear()
        self._log_dir_of.clear()
        self._future_logs.clear()
        self._future_dir_of.clear()

    def close(self) -> None:
        """Flush and close every log, write the checkpoints and the clean-shutdown marker
        in each dir, then release the locks."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            logs = [*self._logs.values(), *self._future_logs.values()]
            failed: set[Path] = set()
            with ThreadPoolExecutor(max_workers=max(1, min(self.recovery_threads,
                                                           len(logs)))) as pool:
                list(pool.map(lambda log: log.flush(), logs))
                for log_dir in self.live_log_dirs:
                    try:
                        self._checkpoint_dir(log_dir)
                    except OSError as exc:
                        logger.error("cannot write the checkpoints of %s at shutdown: %s",
                                     log_dir, exc)
                        failed.add(log_dir)
                list(pool.map(lambda log: log.close(), logs))
            # A dir that failed keeps no clean-shutdown marker: it is recovered at start.
            for log_dir in self.live_log_dirs:
                if log_dir not in failed:
                    (log_dir / CLEAN_SHUTDOWN_FILE).touch()
                    fsync_dir(log_dir)
            self._unlock_all()


def _close_quietly(log: PartitionLog) -> None:
    """Close a log of a failed dir: its descriptors go, whatever the disk answers."""
    with contextlib.suppress(Exception):
        log.close()
