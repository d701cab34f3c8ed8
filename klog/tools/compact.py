"""Offline log compaction: the logic behind ``klog compact`` (the broker's cleaner, at rest).

This module owns running ``klog.storage.cleaner`` over the partitions of a stopped broker's
log dirs: which partitions are compacted (the caller says, per topic, with a LogConfig or
None), in what order, from where (each dir's ``cleaner-offset-checkpoint``, as the broker
would), up to where (the high watermark in ``replication-offset-checkpoint``; the active
segment never, unless ``roll`` first closes it), and what is written after (the checkpoint,
so a broker started on the dir goes on from there). Kafka has no offline cleaner; the
cleaning itself is the broker's, byte for byte.

Safety: a log dir held by a running broker is refused (its ``.lock``, as ``klog recover``
checks it), and so is one not shut down cleanly (``.kafka_cleanshutdown`` absent: run
``klog recover`` first) -- loading such a log would run recovery as a side effect. A dry
run changes nothing in the log dir: each partition is loaded from a shadow copy (segments
hard-linked, small files copied) in a temporary directory and cleaned with ``dry_run``.

Not thread-safe; one run at a time per log dir (the lock sees to it).
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from klog.protocol.errors import CorruptRecordError, KafkaError
from klog.storage import checkpoints as cp
from klog.storage.audit import list_segments
from klog.storage.cleaner import (
    DEFAULT_DEDUPE_BUFFER_SIZE,
    Cleaner,
    CleanerCheckpoints,
    LogToClean,
    Throttler,
    cleanable_offsets,
)
from klog.storage.config import LogConfig
from klog.storage.files import INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX
from klog.storage.log import PartitionLog
from klog.tools.verify import (
    KIND_LOG_DIR,
    KIND_PARTITION,
    InspectError,
    PartitionDir,
    held_lock,
    resolve_target,
)

# Kafka's internal topics are compacted whatever their configs say.
INTERNAL_COMPACTED_TOPICS = ("__consumer_offsets", "__transaction_state")

TopicConfigs = Callable[[str], LogConfig | None]
Progress = Callable[[int], None]


class CompactError(Exception):
    """A log dir that cannot be compacted (not one, not cleanly shut down, ...)."""


@dataclass
class PartitionCompaction:
    """What compaction did (or, in a dry run, would do) to one partition."""

    partition: str
    log_dir: str
    bytes_before: int = 0
    bytes_after: int = 0
    records_read: int = 0
    records_kept: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    keyless_removed: int = 0
    aborted_removed: int = 0  # records of aborted transactions
    markers_removed: int = 0  # transaction markers past their delete horizon
    segments_before: int = 0
    segments_after: int = 0
    first_dirty_offset: int = 0
    next_dirty_offset: int = 0
    passes: int = 0
    rolled: bool = False
    skipped: str | None = None  # why nothing was done
    error: str | None = None  # why it failed (the partition is left as it was)


@dataclass
class CompactReport:
    dry_run: bool
    log_dirs: list[str]
    partitions: list[PartitionCompaction] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(p.error for p in self.partitions)

    def to_dict(self) -> dict[str, object]:
        done = [p for p in self.partitions if not p.skipped and not p.error]
        return {
            "dry_run": self.dry_run,
            "log_dirs": self.log_dirs,
            "partitions": [asdict(p) for p in self.partitions],
            "bytes_before": sum(p.bytes_before for p in done),
            "bytes_after": sum(p.bytes_after for p in done),
            "records_kept": sum(p.records_kept for p in done),
            "records_removed": sum(p.records_removed for p in done),
        }


def compaction_policy(
    topics: tuple[str, ...] = (), configs: dict[str, LogConfig] | None = None
) -> TopicConfigs:
    """The usual policy: a topic is compacted when its config says ``compact``, when it is
    one of ``topics`` (named by hand: compacted with its config, or Kafka's defaults), or
    when it is an internal compacted topic."""
    configs = configs or {}

    def policy(topic: str) -> LogConfig | None:
        config = configs.get(topic)
        if config is not None and config.compact:
            return config
        if topic in topics or topic in INTERNAL_COMPACTED_TOPICS:
            base = config or LogConfig()
            return LogConfig.from_properties({"cleanup.policy": "compact"}, base=base)
        return None

    return policy


class _ProgressThrottler(Throttler):
    """No throttle: reports the bytes the cleaner reads and writes as progress."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(float("inf"))
        self._progress = progress

    def maybe_throttle(self, observed: int) -> None:
        self._progress(observed)


def compact(
    paths: list[Path],
    topic_config: TopicConfigs,
    *,
    dry_run: bool = False,
    roll: bool = False,
    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE,
    now_ms: int | None = None,
    progress: Progress | None = None,
) -> CompactReport:
    """Compact every partition under ``paths`` (log dirs, or partition dirs) whose topic
    ``topic_config`` gives a compacting config for.

    Raises CompactError for a path that is not a log or partition dir or was not shut down
    cleanly, LogDirLockedError when a broker holds one. A partition that fails (a corrupt
    batch) is reported with its error and left as it was; the others go on.
    """
    report = CompactReport(dry_run, [str(p) for p in paths])
    now = int(time.time() * 1000) if now_ms is None else now_ms
    throttler = _ProgressThrottler(progress) if progress is not None else None
    cleaner = Cleaner(dedupe_buffer_size, throttler=throttler, clock=lambda: now)
    for log_dir, partitions in _targets(paths):
        with held_lock(log_dir):
            if not (log_dir / cp.CLEAN_SHUTDOWN_FILE).exists():
                raise CompactError(
                    f"{log_dir} was not shut down cleanly ({cp.CLEAN_SHUTDOWN_FILE} is "
                    "missing): run `klog recover` on it first"
                )
            high_watermarks = _checkpoint(log_dir / cp.REPLICATION_OFFSET_CHECKPOINT)
            checkpoints = CleanerCheckpoints()
            dirty_from = checkpoints.read(log_dir)
            for pdir in partitions:
                result = PartitionCompaction(pdir.name, str(log_dir))
                report.partitions.append(result)
                key = pdir.key
                config = topic_config(key[0]) if key is not None else None
                if key is None or config is None:
                    result.skipped = "not a compacted topic"
                    continue
                try:
                    end = _compact_partition(
                        pdir.path, config, cleaner, result, now,
                        checkpoint=dirty_from.get(key),
                        high_watermark=high_watermarks.get(key),
                        dry_run=dry_run, roll=roll,
                    )
                except (KafkaError, CorruptRecordError, OSError, ValueError) as exc:
                    result.error = str(exc) or type(exc).__name__
                    continue
                if end is not None and not dry_run:
                    checkpoints.update(log_dir, key, end)
    return report


def _targets(paths: list[Path]) -> Iterator[tuple[Path, list[PartitionDir]]]:
    for path in paths:
        try:
            target = resolve_target(path)
        except InspectError as exc:
            raise CompactError(str(exc)) from None
        if target.kind == KIND_LOG_DIR:
            yield target.path, sorted(target.partitions, key=lambda p: p.name)
        elif target.kind == KIND_PARTITION and target.log_dir is not None:
            yield target.log_dir, list(target.partitions)
        else:
            raise CompactError(
                f"{path}: give a log dir, or a partition dir inside one (its checkpoints and "
                "clean-shutdown marker are the log dir's)"
            )


def _checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        return cp.read_offset_checkpoint(path) if path.exists() else {}
    except cp.CheckpointError as exc:
        raise CompactError(str(exc)) from None


def _compact_partition(
    directory: Path,
    config: LogConfig,
    cleaner: Cleaner,
    result: PartitionCompaction,
    now: int,
    *,
    checkpoint: int | None,
    high_watermark: int | None,
    dry_run: bool,
    roll: bool,
) -> int | None:
    """Clean one partition until nothing cleanable is dirty; the next first dirty offset."""
    with _shadow(directory, dry_run) as where:
        log = PartitionLog(where, config, high_watermark=high_watermark)
        try:
            result.bytes_before = log.size
            result.segments_before = log.number_of_segments
            if roll and log.active_segment.size > 0:
                log.roll()
                result.rolled = True
            if high_watermark is None:
                log.update_high_watermark(log.log_end_offset)
            offsets = cleanable_offsets(log, checkpoint, now)
            result.first_dirty_offset = offsets.first_dirty_offset
            end = offsets.first_dirty_offset
            while offsets.first_dirty_offset < offsets.first_uncleanable_dirty_offset:
                stats = cleaner.clean(
                    LogToClean(log, offsets.first_dirty_offset,
                               offsets.first_uncleanable_dirty_offset),
                    now_ms=now,
                    dry_run=dry_run,
                )
                result.passes += 1
                result.records_read += stats.messages_read
                result.records_kept += stats.messages_written
                result.tombstones_removed += stats.tombstones_removed
                result.keyless_removed += stats.invalid_messages_read
                result.aborted_removed += stats.aborted_messages_removed
                result.markers_removed += stats.markers_removed
                end = stats.end_offset
                if dry_run:
                    # Nothing changed: what a second pass would see is not known.
                    result.bytes_after = result.bytes_before - stats.bytes_read + (
                        stats.bytes_written
                    )
                    break
                offsets = cleanable_offsets(log, end, now)
            result.records_removed = result.records_read - result.records_kept
            result.next_dirty_offset = end
            if not dry_run:
                log.delete_pending(now + 2**40)  # offline: no reader can still need them
                result.bytes_after = log.size
            result.segments_after = log.number_of_segments
            if result.passes == 0:
                result.skipped = "nothing dirty to clean"
                return None
            return end
        finally:
            log.close()


@contextmanager
def _shadow(directory: Path, dry_run: bool) -> Iterator[Path]:
    """The partition dir itself, or for a dry run a throwaway copy of it: every file
    copied except the segments that have both their indexes, which are hard-linked (across
    file systems, copied). Loading a log writes only into a segment without (valid)
    indexes -- recovery may cut its damaged tail -- so those are copies."""
    if not dry_run:
        yield directory
        return
    base = Path(tempfile.mkdtemp(prefix="klog-compact-"))
    try:
        shadow = base / directory.name
        shadow.mkdir()
        names = {e.name for e in os.scandir(directory) if e.is_file()}
        for entry in os.scandir(directory):
            if not entry.is_file():
                continue
            target = shadow / entry.name
            stem = entry.name[: -len(LOG_FILE_SUFFIX)]
            if entry.name.endswith(LOG_FILE_SUFFIX) and {
                stem + INDEX_FILE_SUFFIX, stem + TIME_INDEX_FILE_SUFFIX
            } <= names:
                try:
                    os.link(entry.path, target)
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                        raise
            shutil.copy2(entry.path, target)
        yield shadow
    finally:
        shutil.rmtree(base, ignore_errors=True)


def log_bytes(paths: list[Path]) -> int:
    """Bytes of every segment under ``paths`` (for a progress total)."""
    total = 0
    for _log_dir, partitions in _targets(paths):
        for pdir in partitions:
            for _base, log in list_segments(pdir.path):
                total += log.stat().st_size
    return total
