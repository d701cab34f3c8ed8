"""What the log cleaner may clean, and where it stopped (Kafka's LogCleanerManager's offset
arithmetic and LogCleaner's LogToClean).

- ``cleanable_offsets``: the dirty section of a compacted log, from its first dirty offset
  (the checkpointed one, reset to the log start when out of range) to the first offset
  that may not be cleaned yet (the active segment, the last stable offset, segments
  younger than ``min.compaction.lag.ms``);
- ``max_compaction_delay``: how long past ``max.compaction.lag.ms`` a log's dirty data is;
- ``LogToClean``: a log's clean and dirty bytes and its cleanable ratio, how the cleaner
  picks the filthiest log;
- ``CleanerCheckpoints``: the ``cleaner-offset-checkpoint`` file of each log dir.

Pure reads of a log's segments and offsets, plus the checkpoint file.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from klog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    TopicPartition,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from klog.storage.log import PartitionLog
from klog.storage.segment import LogSegment

LONG_MAX = 2**63 - 1


class OffsetsToClean(NamedTuple):
    """Kafka's OffsetsToClean: [first_dirty_offset, first_uncleanable_dirty_offset).

    ``force_update_checkpoint``: the checkpointed offset was out of the log's range and was
    reset to the log start offset; the manager should write the checkpoint again.
    """

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool = False


def cleanable_offsets(
    log: PartitionLog,
    checkpoint_offset: int | None,
    now_ms: int,
    *,
    last_stable_offset: int | None = None,
) -> OffsetsToClean:
    """Where cleaning may start and where it must stop (LogCleanerManager.cleanableOffsets).

    Starts at the checkpointed first dirty offset (the log start offset when there is none,
    or when it is below the log start offset or past the log end offset: then
    ``force_update_checkpoint``). Stops before the first of: the active segment; the last
    stable offset (``last_stable_offset``; None takes the log's own: its high watermark
    lowered to the first offset of an undecided transaction, so that every transaction the
    cleaner meets is committed or aborted); the first dirty segment holding a record newer than
    ``now_ms - min.compaction.lag.ms`` (the log's config).

    Holds the log's lock while it reads segments (their indexes are mapped lazily).
    """
    with log._lock:
        return _cleanable_offsets(log, checkpoint_offset, now_ms, last_stable_offset)


def _cleanable_offsets(
    log: PartitionLog, checkpoint_offset: int | None, now_ms: int, last_stable_offset: int | None
) -> OffsetsToClean:
    segments = log.segments
    log_start = log.log_start_offset
    first_dirty = log_start if checkpoint_offset is None else checkpoint_offset
    force = False
    if first_dirty < log_start or first_dirty > log.log_end_offset:
        # A truncated log, or corruption at its end: the whole log is dirty again.
        first_dirty, force = log_start, True
    if last_stable_offset is None:
        last_stable_offset = _last_stable_offset(log)
    active_base = segments[-1].base_offset
    candidates = [last_stable_offset, active_base]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in _non_active_from(segments, first_dirty):
            if segment.largest_timestamp > now_ms - lag:
                candidates.append(segment.base_offset)
                break
    return OffsetsToClean(first_dirty, max(first_dirty, min(candidates)), force)


def _last_stable_offset(log: PartitionLog) -> int:
    """Kafka's UnifiedLog.lastStableOffset: the first unstable offset, capped by the HW."""
    unstable = log.producer_state.first_unstable_offset
    hw = log.high_watermark
    return hw if unstable is None else min(unstable, hw)


def _non_active_from(segments: Sequence[LogSegment], offset: int) -> list[LogSegment]:
    """Kafka's nonActiveLogSegmentsFrom: the inactive segments from the one holding
    ``offset`` (the floor segment) on; none when ``offset`` is in the active segment."""
    active_base = segments[-1].base_offset
    if offset > active_base:
        return []
    return _segments_between(segments, offset, active_base)


def _segments_between(segments: Sequence[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Kafka's logSegments(from, to): segments that may hold offsets in [start, end)."""
    chosen = []
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else LONG_MAX
        if next_base > start and segment.base_offset < end:
            chosen.append(segment)
    return chosen


def max_compaction_delay(log: PartitionLog, first_dirty_offset: int, now_ms: int) -> int:
    """How long past max.compaction.lag.ms the oldest dirty record is (0 if not past).

    Kafka's LogCleanerManager.maxCompactionDelay: the earliest first-batch timestamp of the
    dirty inactive segments against ``now_ms - max.compaction.lag.ms``. A positive delay
    makes the log due now, whatever its dirty ratio.
    """
    with log._lock:
        dirty = _non_active_from(log.segments, first_dirty_offset)
        timestamps = [ts for ts in (s.first_batch_timestamp() for s in dirty) if ts and ts > 0]
    earliest = min(timestamps) if timestamps else LONG_MAX
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


class LogToClean:
    """A log and the offsets of its dirty section (Kafka's LogToClean); ordered by ratio.

    ``clean_bytes``: bytes of the segments below ``first_dirty_offset``; ``dirty_bytes``
    (Kafka's cleanableBytes): bytes of the segments from the one holding the first dirty
    offset up to (excluding) the segment holding ``uncleanable_offset``;
    ``cleanable_ratio`` = dirty / (clean + dirty). ``first_uncleanable_offset`` is the base
    offset of that segment: cleaning stops there.
    """

    def __init__(
        self,
        log: PartitionLog,
        first_dirty_offset: int,
        uncleanable_offset: int,
        *,
        needs_compaction_now: bool = False,
    ) -> None:
        self.log = log
        self.first_dirty_offset = first_dirty_offset
        self.uncleanable_offset = uncleanable_offset
        self.needs_compaction_now = needs_compaction_now
        with log._lock:
            self._measure(log, first_dirty_offset, uncleanable_offset)

    def _measure(self, log: PartitionLog, first_dirty_offset: int, uncleanable_offset: int) -> None:
        segments = log.segments
        self.clean_bytes = sum(s.size for s in _segments_between(segments, -1, first_dirty_offset))
        uncleanable = _non_active_from(segments, uncleanable_offset)
        first_uncleanable = (uncleanable[0] if uncleanable else segments[-1]).base_offset
        self.first_uncleanable_offset = first_uncleanable
        self.dirty_bytes = sum(
            s.size
            for s in _segments_between(
                segments, min(first_dirty_offset, first_uncleanable), first_uncleanable
            )
        )

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.log.topic, self.log.partition)

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.dirty_bytes

    @property
    def cleanable_ratio(self) -> float:
        total = self.total_bytes
        return self.dirty_bytes / total if total else 0.0

    def __lt__(self, other: LogToClean) -> bool:
        return self.cleanable_ratio < other.cleanable_ratio

    def __repr__(self) -> str:
        return (
            f"LogToClean({self.log.topic}-{self.log.partition}, dirty "
            f"[{self.first_dirty_offset}, {self.first_uncleanable_offset}), "
            f"ratio {self.cleanable_ratio:.3f})"
        )


class CleanerCheckpoints:
    """The ``cleaner-offset-checkpoint`` file of each log dir (first dirty offset per partition).

    Thread-safe, across instances too (one lock in the process for all of them and all
    dirs): the cleaner threads update it after each cleaning, LogManager.delete_log removes
    partitions it deletes. Written atomically (temporary file, fsync, rename) in Kafka's
    offset checkpoint format.
    """

    _lock = threading.Lock()

    def read(self, log_dir: Path | str) -> dict[TopicPartition, int]:
        """The dir's checkpoint ({} when missing)."""
        with self._lock:
            path = Path(log_dir) / CLEANER_OFFSET_CHECKPOINT
            return read_offset_checkpoint(path) if path.exists() else {}

    def update(
        self,
        log_dir: Path | str,
        update: TopicPartition | None = None,
        offset: int | None = None,
        *,
        remove: Iterable[TopicPartition] = (),
    ) -> None:
        """Set ``update``'s first dirty offset and/or drop ``remove``; rewrite the file."""
        with self._lock:
            path = Path(log_dir) / CLEANER_OFFSET_CHECKPOINT
            offsets = read_offset_checkpoint(path) if path.exists() else {}
            for tp in remove:
                offsets.pop(tp, None)
            if update is not None:
                if offset is None:
                    raise ValueError("an update needs an offset")
                offsets[update] = offset
            write_offset_checkpoint(path, offsets)

    def remove(self, log_dir: Path | str, topic_partition: TopicPartition) -> None:
        """Drop one partition (deleted, or moved to another dir)."""
        self.update(log_dir, remove=(topic_partition,))


def cleaner_checkpoint_path(log_dir: Path | str) -> Path:
    return Path(log_dir) / CLEANER_OFFSET_CHECKPOINT
