"""Log compaction: the offset map, what may be cleaned, and the cleaning of one log.

This module owns the storage half of Kafka's log cleaner (LogCleaner.scala's ``Cleaner``,
``OffsetMap``/``SkimpyOffsetMap``, ``LogToClean`` and LogCleanerManager's pure offset
arithmetic). It cleans one log at a time when asked; it has no threads, no schedule and no
broker config: the broker's cleaner manager (klog/daemon/) picks the dirtiest log, calls
``Cleaner.clean`` from its own threads and keeps the ``cleaner-offset-checkpoint``
through ``CleanerCheckpoints``; ``klog compact`` (klog/tools/compact.py) calls the same
``Cleaner`` offline.

A compacted log has a *clean* section (already cleaned: at most one record per key) and a
*dirty* section after it (from the checkpointed first dirty offset). Cleaning:

1. builds an ``OffsetMap`` (key hash -> latest offset) over the dirty section, as much of
   it as fits in the dedupe buffer (24 bytes per entry: a 16-byte MD5 and an 8-byte
   offset, like Kafka's SkimpyOffsetMap);
2. groups the segments below the end of what was mapped (clean ones and mapped dirty ones)
   so that each group fits one segment (segment.bytes, index size, 2^31 relative offsets);
3. rewrites each group into a ``.cleaned`` segment keeping a record when it has a key, its
   offset is the latest for that key (or past the map's latest offset), and it is not a
   tombstone whose delete horizon has passed; batches keep their base offset, last offset,
   producer id/epoch/sequence, partition leader epoch, attributes and codec; the last
   batch of each active producer is kept even when empty (its sequence numbers); indexes
   are rebuilt;
4. swaps each group in crash-safely: ``.cleaned`` -> ``.swap``, then the log replaces the
   old segments (renamed ``.deleted``) under its lock, then ``.swap`` loses its suffix.
   ``PartitionLog`` completes or rolls back an interrupted swap when it is opened.

Tombstones (Kafka 3.x, KIP-534): a v2 batch holding a tombstone gets a delete horizon
(``now + delete.retention.ms``, stored as its base timestamp with the delete-horizon
attribute bit) the first time it is cleaned; a later cleaning after that time removes the
tombstone. v0/v1 data uses the older rule: tombstones go once the segment holding them was
last modified more than delete.retention.ms before the last clean segment.

Transactions are not implemented in klog yet (issue 21): control batches are kept as they
are, and aborted transactional data is not removed.

The heavy loops (walking records, hashing keys, filtering) run in ``_cleaner.c`` with the
GIL released; the Python twins below give identical results without the extension.

Locking: a ``Cleaner`` is used by one thread at a time (it owns its buffers and map). It
reads segments without the log's lock (segments below the active one never change in
place) and takes the log's lock only to swap segments in.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from klog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    TopicPartition,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from klog.storage.index import OFFSET_INDEX_ENTRY_SIZE, TIME_INDEX_ENTRY_SIZE

if TYPE_CHECKING:
    from klog.storage.log import PartitionLog
    from klog.storage.segment import LogSegment

INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

# Kafka's defaults (KafkaConfig / CleanerConfig).
DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
DEFAULT_IO_BUFFER_SIZE = 512 * 1024  # log.cleaner.io.buffer.size
DEFAULT_IO_BUFFER_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024 + 12  # message.max.bytes: where buffers stop growing

HASH_SIZE = 16  # MD5, as Kafka's SkimpyOffsetMap (log.cleaner.hash.algorithm=MD5)
BYTES_PER_ENTRY = HASH_SIZE + 8  # Kafka's 24 bytes per offset map entry


class LogCleaningAbortedError(Exception):
    """The cleaning of a log was aborted (the manager's ``is_aborted`` said so).

    Nothing of the log changed: ``.cleaned`` files of the unfinished group are removed;
    groups already swapped in stay (they are complete and correct).
    """


# ==============================================================================================
# the offset map
# ==============================================================================================


class OffsetMap:
    """Key hash -> offset of its latest record, in a fixed byte budget (Kafka's SkimpyOffsetMap).

    Open addressing over ``memory // 24`` slots of 24 bytes (16-byte MD5 of the key, 8-byte
    offset); a slot whose bytes are all zero is empty. Two keys with the same MD5 are the
    same key, as in Kafka. Not thread-safe.

    ``use_c``: None takes the C extension when it is built, False forces the Python twin
    (same slots, same probing, same results), True requires the extension.
    """

    bytes_per_entry = BYTES_PER_ENTRY

    def __init__(self, memory: int, *, use_c: bool | None = None) -> None:
        if memory < BYTES_PER_ENTRY:
            raise ValueError(f"an offset map needs at least {BYTES_PER_ENTRY} bytes, not {memory}")
        self.memory = memory
        self.slots = memory // BYTES_PER_ENTRY
        raise NotImplementedError

    @property
    def size(self) -> int:
        """Entries in the map (distinct key hashes)."""
        raise NotImplementedError

    @property
    def utilization(self) -> float:
        """size / slots."""
        return self.size / self.slots

    @property
    def latest_offset(self) -> int:
        """The highest offset put (or set by ``update_latest_offset``); -1 when empty."""
        raise NotImplementedError

    def update_latest_offset(self, offset: int) -> None:
        """Say that the map covers the log up to ``offset`` (records without keys, gaps)."""
        raise NotImplementedError

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Map ``key`` to ``offset``; raises ValueError when a new key finds the map full."""
        raise NotImplementedError

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The offset mapped for ``key``, or -1."""
        raise NotImplementedError

    def clear(self) -> None:
        """Empty the map (size 0, latest offset -1) keeping its memory."""
        raise NotImplementedError

    @property
    def is_c(self) -> bool:
        """Whether the C extension does this map's work."""
        raise NotImplementedError


def key_hash(key: bytes | bytearray | memoryview) -> bytes:
    """The 16 bytes a key is mapped by (MD5, as Kafka's default log.cleaner.hash.algorithm)."""
    return hashlib.md5(key).digest()


# ==============================================================================================
# statistics and throttling
# ==============================================================================================


@dataclass
class CleanerStats:
    """What one cleaning did (Kafka's CleanerStats), for the log line and ``klog compact``.

    ``end_offset``: the first offset not covered by this cleaning; the manager checkpoints
    it as the new first dirty offset.
    """

    bytes_read: int = 0  # bytes of the segments rewritten (clean and dirty)
    bytes_written: int = 0  # bytes of the segments written in their place
    map_bytes_read: int = 0  # bytes read building the offset map
    map_messages_read: int = 0
    messages_read: int = 0  # records read while rewriting
    messages_written: int = 0  # records kept
    invalid_messages_read: int = 0  # records without a key (dropped, as Kafka does)
    tombstones_removed: int = 0
    batches_read: int = 0
    batches_written: int = 0
    segments_before: int = 0
    segments_after: int = 0
    buffer_utilization: float = 0.0  # offset map size / slots
    map_entries: int = 0
    map_bytes_per_entry: int = BYTES_PER_ENTRY
    first_dirty_offset: int = 0
    end_offset: int = 0
    start_ms: float = field(default_factory=lambda: time.monotonic() * 1000)
    map_done_ms: float = 0.0
    end_ms: float = 0.0
    dry_run: bool = False

    @property
    def messages_removed(self) -> int:
        return self.messages_read - self.messages_written

    @property
    def elapsed_secs(self) -> float:
        return max(self.end_ms - self.start_ms, 0.0) / 1000

    @property
    def elapsed_index_secs(self) -> float:
        return max(self.map_done_ms - self.start_ms, 0.0) / 1000

    def as_dict(self) -> dict[str, object]:
        """Plain values for --json and logs."""
        raise NotImplementedError


class Throttler:
    """Kafka's Throttler: sleeps so that bytes observed stay under ``desired_rate`` per second.

    Thread-safe (the cleaner threads share one, as Kafka's do). ``desired_rate`` of
    ``float('inf')`` (Kafka's default Double.MaxValue) never sleeps. ``set_rate`` applies a
    dynamic log.cleaner.io.max.bytes.per.second.
    """

    def __init__(
        self,
        desired_rate: float,
        *,
        check_interval_ms: int = 300,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.desired_rate = desired_rate
        self.check_interval_ms = check_interval_ms
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0

    def set_rate(self, desired_rate: float) -> None:
        self.desired_rate = desired_rate

    def maybe_throttle(self, observed: int) -> None:
        """Count ``observed`` bytes and sleep if the rate over the last period is too high."""
        raise NotImplementedError


# ==============================================================================================
# what may be cleaned (LogCleanerManager's arithmetic)
# ==============================================================================================


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
    stable offset (``last_stable_offset``, the partition's high watermark / LSO; None takes
    the log's high watermark); the first dirty segment holding a record newer than
    ``now_ms - min.compaction.lag.ms`` (the log's config).
    """
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
    ``offset`` (the floor segment) on."""
    inactive = segments[:-1]
    if not segments or offset >= segments[-1].base_offset:
        return []  # Kafka: from the active segment on, nothing is inactive
    start = 0
    for i, segment in enumerate(inactive):
        if segment.base_offset <= offset:
            start = i
        else:
            break
    return list(inactive[start:])


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


def group_segments_by_size(
    segments: Sequence[LogSegment],
    max_size: int,
    max_index_size: int,
    first_uncleanable_offset: int,
) -> list[list[LogSegment]]:
    """Adjacent segments grouped so that each group can be rewritten as one segment.

    Kafka's groupSegmentsBySize: a group grows while the sum of .log sizes stays within
    ``max_size`` (segment.bytes), the sums of offset and time index bytes within
    ``max_index_size`` (segment.index.bytes), and its offsets within 2^31 of its base.
    """
    groups: list[list[LogSegment]] = []
    i, n = 0, len(segments)
    while i < n:
        group = [segments[i]]
        log_size = segments[i].size
        index_size = _offset_index_bytes(segments[i])
        time_index_size = _time_index_bytes(segments[i])
        i += 1
        while i < n:
            nxt = segments[i]
            # The last offset the next segment may hold: up to the one after it, or to the
            # end of cleaning. An empty segment adds no offsets (Kafka: no empty segment
            # left every 2^31 offsets).
            last = segments[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable_offset - 1
            if (
                log_size + nxt.size > max_size
                or index_size + _offset_index_bytes(nxt) > max_index_size
                or time_index_size + _time_index_bytes(nxt) > max_index_size
                or (nxt.size != 0 and last - group[-1].base_offset > INT32_MAX)
            ):
                break
            group.append(nxt)
            log_size += nxt.size
            index_size += _offset_index_bytes(nxt)
            time_index_size += _time_index_bytes(nxt)
            i += 1
        groups.append(group)
    return groups


def _offset_index_bytes(segment: LogSegment) -> int:
    return segment.offset_index.entries * OFFSET_INDEX_ENTRY_SIZE


def _time_index_bytes(segment: LogSegment) -> int:
    return segment.time_index.entries * TIME_INDEX_ENTRY_SIZE


# ==============================================================================================
# the cleaner
# ==============================================================================================


class Cleaner:
    """Cleans one log at a time (Kafka's LogCleaner.Cleaner); owns an offset map and buffers.

    ``dedupe_buffer_size``: bytes of this cleaner's offset map (the manager divides
    log.cleaner.dedupe.buffer.size between its threads, as Kafka does);
    ``io_buffer_size``: the read and write buffers' starting size
    (log.cleaner.io.buffer.size / 2 each in Kafka; here the read chunk), grown up to
    ``max_message_size`` for a large batch; ``throttler`` (shared between cleaners) or
    ``max_io_bytes_per_second`` (a Throttler of its own); ``is_aborted(topic_partition)``
    is called between chunks and groups: True stops the cleaning with
    LogCleaningAbortedError (Kafka's checkDone). ``clock`` gives milliseconds (tombstone
    horizons). ``use_c`` as for OffsetMap.
    """

    def __init__(
        self,
        dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE,
        io_buffer_size: int = DEFAULT_IO_BUFFER_SIZE,
        max_io_bytes_per_second: float = float("inf"),
        *,
        dedupe_buffer_load_factor: float = DEFAULT_IO_BUFFER_LOAD_FACTOR,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        throttler: Throttler | None = None,
        is_aborted: Callable[[TopicPartition], bool] | None = None,
        clock: Callable[[], int] | None = None,
        use_c: bool | None = None,
    ) -> None:
        self.offset_map = OffsetMap(dedupe_buffer_size, use_c=use_c)
        self.io_buffer_size = io_buffer_size
        self.dedupe_buffer_load_factor = dedupe_buffer_load_factor
        self.max_message_size = max_message_size
        self.throttler = throttler or Throttler(max_io_bytes_per_second)
        self.is_aborted = is_aborted
        self.clock = clock
        raise NotImplementedError

    def clean(
        self,
        to_clean: LogToClean,
        *,
        delete_retention_ms: int | None = None,
        now_ms: int | None = None,
        dry_run: bool = False,
    ) -> CleanerStats:
        """Clean ``to_clean``'s log; the stats' ``end_offset`` is the next first dirty offset.

        ``delete_retention_ms``: None takes the log config's delete.retention.ms.
        ``dry_run``: read and filter everything, count what would be kept and removed,
        write nothing (no ``.cleaned`` file, no swap). Raises LogCleaningAbortedError when
        aborted (the log is intact and readable either way). Readers and appenders of the
        log may run meanwhile; the log's lock is held only for each swap.
        """
        raise NotImplementedError


# ==============================================================================================
# cleaner-offset-checkpoint
# ==============================================================================================


class CleanerCheckpoints:
    """The ``cleaner-offset-checkpoint`` file of each log dir (first dirty offset per partition).

    Thread-safe (one lock for all dirs): the cleaner threads update it after each
    cleaning, the broker removes partitions it deletes or moves. Written atomically
    (temporary file, fsync, rename) in Kafka's offset checkpoint format.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

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


__all__ = [
    "BYTES_PER_ENTRY",
    "Cleaner",
    "CleanerCheckpoints",
    "CleanerStats",
    "LogCleaningAbortedError",
    "LogToClean",
    "OffsetMap",
    "OffsetsToClean",
    "Throttler",
    "cleanable_offsets",
    "cleaner_checkpoint_path",
    "group_segments_by_size",
    "key_hash",
    "max_compaction_delay",
]
