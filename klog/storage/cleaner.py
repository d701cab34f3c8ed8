"""Log compaction: the cleaning of one log.

This module owns the storage half of Kafka's log cleaner (LogCleaner.scala's ``Cleaner``),
with the offset map in offset_map.py (``OffsetMap``, Kafka's SkimpyOffsetMap) and what may
be cleaned in cleanable.py (``LogToClean``, LogCleanerManager's pure offset arithmetic,
the cleaner checkpoint); it exports their names too. It cleans one log at a time when
asked; it has no threads, no schedule and no broker config: the broker's cleaner
manager (klog/daemon/) picks the dirtiest log, calls ``Cleaner.clean`` from its own
threads and keeps the ``cleaner-offset-checkpoint`` through ``CleanerCheckpoints``;
``klog compact`` (klog/tools/compact.py) calls the same ``Cleaner`` offline.

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

Transactions (Kafka's ``CleanedTransactionMetadata``): the cleaner never passes the last
stable offset, so every transaction it meets is decided, and the aborted ones are known
ahead from the segments' transaction indexes (``.txnindex``). Records of an aborted
transaction are removed whatever their keys and never enter the offset map (so they cannot
shadow an older committed value); committed transactional records are cleaned like any
others. A COMMIT or ABORT marker stays while any batch of its transaction remains before it;
once a cleaning finds none, the marker gets a delete horizon as a tombstone does (KIP-534)
and a cleaning after that time removes it. Each cleaned segment's transaction index is
rewritten with the aborted transactions whose marker and data it still holds.

The heavy loops (walking records, hashing keys, filtering) run in ``_cleaner.c`` with the
GIL released; the Python twins below give identical results without the extension.

Locking: a ``Cleaner`` is used by one thread at a time (it owns its buffers and map). It
reads segments without the log's lock (segments below the active one never change in
place) and takes the log's lock only to swap segments in.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import NamedTuple

from klog.protocol.errors import CorruptRecordError
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_FLAG_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PRODUCER_ID,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    crc32c,
)
from klog.protocol.records.compression import DEFAULT_MAX_DECOMPRESSED_SIZE, compress, decompress
from klog.protocol.records.control import ControlRecordType, parse_control_key
from klog.protocol.records.legacy import build_legacy_message, iter_legacy_records
from klog.protocol.records.v2 import iter_records
from klog.protocol.records.varint import read_varint, read_varlong
from klog.storage.checkpoints import (
    TopicPartition,
)
from klog.storage.cleanable import (
    CleanerCheckpoints,
    LogToClean,
    OffsetsToClean,
    cleanable_offsets,
    cleaner_checkpoint_path,
    max_compaction_delay,
)
from klog.storage.files import CLEANED_FILE_SUFFIX
from klog.storage.index import (
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
)
from klog.storage.log import PartitionLog, SegmentsChangedError
from klog.storage.offset_map import BYTES_PER_ENTRY, OffsetMap, key_hash
from klog.storage.segment import LogSegment
from klog.storage.walk import BatchWalk

INT32_MAX = 2**31 - 1

# Kafka's defaults (KafkaConfig / CleanerConfig).
DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
DEFAULT_IO_BUFFER_SIZE = 512 * 1024  # log.cleaner.io.buffer.size
DEFAULT_IO_BUFFER_LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024 + 12  # message.max.bytes: where buffers stop growing

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")  # the v2 batch header (batch.py's layout)
_CRC = struct.Struct(">I")



class LogCleaningAbortedError(Exception):
    """The cleaning of a log was aborted (the manager's ``is_aborted`` said so).

    Nothing of the log changed: ``.cleaned`` files of the unfinished group are removed;
    groups already swapped in stay (they are complete and correct).
    """


# ==============================================================================================
# the offset map
# ==============================================================================================










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
    aborted_messages_removed: int = 0  # records of aborted transactions
    markers_removed: int = 0  # COMMIT/ABORT markers past their delete horizon
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
        values: dict[str, object] = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("start_ms", "map_done_ms", "end_ms")
        }
        values["messages_removed"] = self.messages_removed
        values["elapsed_secs"] = round(self.elapsed_secs, 6)
        values["elapsed_index_secs"] = round(self.elapsed_index_secs, 6)
        return values

    def summary(self, name: str) -> str:
        """Kafka's log-cleaner.log figures in one line."""
        mb = 1024 * 1024
        elapsed = self.elapsed_secs or 1e-9
        return (
            f"Cleaned log {name}{' (dry run)' if self.dry_run else ''}: "
            f"{self.bytes_read / mb:.1f} MB of log processed in {elapsed:.3f} seconds "
            f"({self.bytes_read / mb / elapsed:.1f} MB/sec); indexed "
            f"{self.map_bytes_read / mb:.1f} MB in {self.elapsed_index_secs:.3f} s, "
            f"buffer utilization {100 * self.buffer_utilization:.1f}%; "
            f"{self.bytes_read} bytes -> {self.bytes_written} bytes, "
            f"{self.messages_read} messages read, {self.messages_written} kept "
            f"({self.tombstones_removed} tombstones, {self.aborted_messages_removed} aborted "
            f"transactional messages, {self.markers_removed} transaction markers and "
            f"{self.invalid_messages_read} messages without a key removed); next dirty "
            f"offset {self.end_offset}"
        )


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
        self.throttled_secs = 0.0  # total time slept (Kafka's cleaner-io throttle figure)

    def set_rate(self, desired_rate: float) -> None:
        self.desired_rate = desired_rate

    def maybe_throttle(self, observed: int) -> None:
        """Count ``observed`` bytes and sleep if the rate over the last period is too high."""
        rate = self.desired_rate
        if rate == float("inf") or rate <= 0:
            return
        with self._lock:
            # Sleeping with the lock held is on purpose (Kafka's too): the cleaner threads
            # share the budget, so all of them wait while one catches up.
            self._observed += observed
            now = self._clock()
            elapsed = now - self._period_start
            if elapsed * 1000 > self.check_interval_ms and self._observed > 0:
                sleep = self._observed / rate - elapsed
                if sleep > 0:
                    self.throttled_secs += sleep
                    self._sleep(sleep)
                self._period_start = self._clock()
                self._observed = 0.0


# ==============================================================================================
# what may be cleaned (LogCleanerManager's arithmetic)
# ==============================================================================================


















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
        self.io_buffer_size = max(io_buffer_size, RECORD_BATCH_OVERHEAD)
        self.dedupe_buffer_load_factor = dedupe_buffer_load_factor
        self.max_message_size = max_message_size
        self.throttler = throttler or Throttler(max_io_bytes_per_second)
        self.is_aborted = is_aborted
        self.clock = clock or _wall_clock_ms

    # -- one cleaning ------------------------------------------------------------------------

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
        log = to_clean.log
        now = self.clock() if now_ms is None else now_ms
        retention = log.config.delete_retention_ms if delete_retention_ms is None else (
            delete_retention_ms
        )
        first_dirty = to_clean.first_dirty_offset
        first_uncleanable = to_clean.first_uncleanable_offset
        stats = CleanerStats(first_dirty_offset=first_dirty, end_offset=first_dirty,
                             dry_run=dry_run)
        views, aborted = _open_views(log, first_uncleanable)
        try:
            run = _Run(self, log, stats, now, retention, dry_run, aborted)
            # v0/v1 data only: tombstones go once their segment was last modified more than
            # delete.retention.ms before the last clean segment (v2 batches carry their own
            # delete horizon, see _Run.filter_batch).
            clean = [v for v in views if v.base_offset < first_dirty]
            run.legacy_delete_horizon = (
                clean[-1].last_modified_ms - retention if clean else 0
            )
            dirty = [
                v for v in views if v.next_base > first_dirty and v.base_offset < first_uncleanable
            ]
            run.build_offset_map(dirty, first_dirty, first_uncleanable)
            stats.map_done_ms = time.monotonic() * 1000
            end_offset = max(self.offset_map.latest_offset + 1, first_dirty)
            stats.end_offset = end_offset
            stats.map_entries = self.offset_map.size
            stats.buffer_utilization = self.offset_map.utilization
            if end_offset > first_dirty:
                to_rewrite = [v for v in views if v.base_offset < end_offset]
                with log._lock:
                    # Index sizes are read under the lock (their mappings are shared).
                    groups = group_segments_by_size(
                        [v.segment for v in to_rewrite],
                        log.config.segment_bytes,
                        log.config.max_index_size,
                        first_uncleanable,
                    )
                by_segment = {id(v.segment): v for v in to_rewrite}
                for group in groups:
                    run.clean_group([by_segment[id(s)] for s in group])
        finally:
            for view in views:
                os.close(view.fd)
        stats.end_ms = time.monotonic() * 1000
        return stats

    def check_done(self, topic_partition: TopicPartition) -> None:
        """Kafka's checkDone: stop here if the manager aborted this log's cleaning."""
        if self.is_aborted is not None and self.is_aborted(topic_partition):
            raise LogCleaningAbortedError(
                f"cleaning of {topic_partition[0]}-{topic_partition[1]} was aborted"
            )


class _View(NamedTuple):
    """A segment as a cleaning saw it when it started: its own descriptor (a ``dup``, so
    that retention closing the segment's cannot pull the file from under the cleaner) and
    the size and modification time of that moment."""

    segment: LogSegment
    base_offset: int
    size: int
    fd: int
    last_modified_ms: int
    next_base: int  # the base offset of the segment after it (LONG_MAX for the last one)


def _open_views(log: PartitionLog, first_uncleanable: int) -> tuple[list[_View], list[AbortedTxn]]:
    """The cleanable segments' views, and the aborted transactions that began below
    ``first_uncleanable`` (Kafka's collectAbortedTransactions). These are read from every
    segment's transaction index: an entry lives with its marker, which may lie past the
    cleanable section (in the active segment, say) while its data is in it."""
    views: list[_View] = []
    aborted: list[AbortedTxn] = []
    with log._lock:
        segments = log.segments
        try:
            for segment in segments:
                aborted.extend(
                    t for t in segment.txn_index.iter_entries()
                    if t.first_offset < first_uncleanable
                )
            for i, segment in enumerate(segments):
                if segment.base_offset >= first_uncleanable or i == len(segments) - 1:
                    break  # the active segment is never cleaned
                next_base = segments[i + 1].base_offset
                views.append(
                    _View(segment, segment.base_offset, segment.size, os.dup(segment.fd),
                          segment.last_modified_ms, next_base)
                )
        except BaseException:
            for view in views:
                os.close(view.fd)
            raise
    return views, aborted


class _OngoingAbortedTxn:
    """An aborted transaction the cleaner has entered and whose marker it has not reached:
    whether it has seen a batch of it (then its marker must stay)."""

    __slots__ = ("observed", "txn")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.observed = False


class CleanedTransactionMetadata:
    """The transactions a pass of the cleaner is inside, batch by batch (Kafka's
    CleanedTransactionMetadata): which batches belong to an aborted transaction (to be
    removed) and which markers may go (no batch of their transaction seen before them in
    this pass). A pass reads the log in offset order and calls ``on_batch`` or
    ``on_control_batch`` for every v2 batch. ``cleaned_index``: where the aborted
    transactions whose marker stays are written again (the cleaned segment's index).

    ``aborted``: the aborted transactions the pass may meet, in any order; they become
    ongoing when the pass reaches their first offset. Not thread-safe (one pass).
    """

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._aborted = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self.ongoing_committed: set[int] = set()
        self.ongoing_aborted: dict[int, _OngoingAbortedTxn] = {}
        self.cleaned_index: TransactionIndex | None = None

    def _enter_aborted_up_to(self, offset: int) -> None:
        aborted = self._aborted
        while self._next < len(aborted) and aborted[self._next].first_offset <= offset:
            txn = aborted[self._next]
            self._next += 1
            self.ongoing_aborted.setdefault(txn.producer_id, _OngoingAbortedTxn(txn))

    def on_control_batch(self, header: BatchHeader, control_type: ControlRecordType | None) -> bool:
        """A marker (``control_type`` of its record; None for a batch emptied by an earlier
        cleaning): True when it may be discarded (once past its delete horizon)."""
        self._enter_aborted_up_to(header.last_offset)
        if control_type is None:
            return True
        producer_id = header.producer_id
        if control_type is ControlRecordType.ABORT:
            ongoing = self.ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing.observed:
                # Data of the transaction remains (until this pass removes it): the marker
                # stays, and so does its index entry, which read_committed fetches need.
                if self.cleaned_index is not None:
                    self.cleaned_index.append(ongoing.txn)
                return False
            return True
        if control_type is ControlRecordType.COMMIT:
            if producer_id in self.ongoing_committed:
                self.ongoing_committed.discard(producer_id)
                return False
            return True
        return False  # other control records (KRaft's) are not the cleaner's to remove

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: True when it belongs to an aborted transaction."""
        self._enter_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self.ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing.observed = True
            return True
        self.ongoing_committed.add(header.producer_id)
        return False


class _Run:
    """The state of one cleaning: the log, its stats, the clock and the horizons."""

    def __init__(
        self, cleaner: Cleaner, log: PartitionLog, stats: CleanerStats, now: int,
        delete_retention_ms: int, dry_run: bool, aborted: list[AbortedTxn],
    ) -> None:
        self.cleaner = cleaner
        self.map = cleaner.offset_map
        self.log = log
        self.tp: TopicPartition = (log.topic, log.partition)
        self.stats = stats
        self.now = now
        self.delete_retention_ms = delete_retention_ms
        self.dry_run = dry_run
        self.legacy_delete_horizon = 0
        self.aborted = aborted
        # The rewriting pass's transactions, carried from group to group.
        self.txns = CleanedTransactionMetadata(aborted)
        self.max_batch_size = max(cleaner.max_message_size, log.config.max_message_bytes)
        self.max_decompressed = max(DEFAULT_MAX_DECOMPRESSED_SIZE, 4 * self.max_batch_size)
        with log._lock:
            # Kafka's lastRecordsOfActiveProducers: the batch holding a live producer's last
            # sequence (or its last marker) stays, even emptied, so its next produce is
            # not refused as out of sequence.
            self.last_of_producer = {
                pid: (entry.last_data_offset, entry.producer_epoch)
                for pid, entry in log.producer_state.active_producers().items()
            }

    def _walk(self, view: _View, start: int) -> BatchWalk:
        return BatchWalk(
            view.fd,
            start,
            view.size,
            max_batch_size=self.max_batch_size,
            chunk_size=self.cleaner.io_buffer_size,
            reuse_buffer=True,
            progress=self.cleaner.throttler.maybe_throttle,
        )

    def _walk_failed(self, walk: BatchWalk, view: _View) -> None:
        stop = walk.stop
        if stop is not None:
            raise CorruptRecordError(
                f"cannot clean {view.segment.log_path}: {stop.reason} at position "
                f"{stop.position}"
            )

    def _records_data(self, header: BatchHeader, buf: memoryview) -> bytes | memoryview:
        section = header.records_view(buf)
        codec = header.compression_id
        if codec:
            return decompress(codec, section, max_size=self.max_decompressed)
        return section

    # -- the offset map ---------------------------------------------------------------------

    def build_offset_map(self, dirty: list[_View], start: int, end: int) -> None:
        """Kafka's buildOffsetMap: map the dirty segments' keys, as many as fit."""
        offset_map = self.map
        offset_map.clear()
        max_size = int(offset_map.slots * self.cleaner.dedupe_buffer_load_factor)
        txns = CleanedTransactionMetadata(self.aborted)
        for i, view in enumerate(dirty):
            self.cleaner.check_done(self.tp)
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            if self._map_segment(view, start, max_size, txns):
                return  # full: this segment is mapped in part
            # Gaps at the end of the segment (removed by an earlier cleaning) are covered.
            offset_map.update_latest_offset(next_start - 1)

    def _map_segment(
        self, view: _View, start: int, max_size: int, txns: CleanedTransactionMetadata
    ) -> bool:
        position = 0
        if view.base_offset < start:
            with self.log._lock:
                found = view.segment.translate_offset(start)
            if found is None:
                return False
            position = found.position
        stats, offset_map = self.stats, self.map
        walk = self._walk(view, position)
        for pos, header, buf in walk:
            assert buf is not None  # no hold_bound: every entry comes with its bytes
            if header.magic < MAGIC_V2:
                if self._map_legacy(header, buf, start, max_size):
                    return True
            elif header.is_control:
                txns.on_control_batch(header, self._control_type(header, buf))
                stats.map_messages_read += 1
            elif txns.on_batch(header):
                # Aborted: its keys must not shadow older committed values.
                stats.map_messages_read += header.records_count or 0
            else:
                count = header.records_count or 0
                data = self._records_data(header, buf)
                try:
                    read, full = offset_map.put_records(
                        data, count, header.base_offset or 0, start, max_size, pos
                    )
                except CorruptRecordError as exc:
                    raise CorruptRecordError(f"{view.segment.log_path}: {exc}") from None
                stats.map_messages_read += read
                if full:
                    return True
            if header.last_offset >= start:
                offset_map.update_latest_offset(header.last_offset)
            stats.map_bytes_read += header.size
        self._walk_failed(walk, view)
        return False

    def _map_legacy(self, header: BatchHeader, buf: memoryview, start: int, max_size: int) -> bool:
        offset_map = self.map
        for record in iter_legacy_records(buf, header, max_decompressed_size=self.max_decompressed):
            if record.key is not None and record.offset >= start:
                if offset_map.size >= max_size:
                    return True
                offset_map.put(record.key, record.offset)
            self.stats.map_messages_read += 1
        return False

    # -- rewriting ------------------------------------------------------------------------

    def clean_group(self, group: list[_View]) -> None:
        """Rewrite ``group`` into one ``.cleaned`` segment and swap it in (Kafka's
        cleanSegments)."""
        log, stats = self.log, self.stats
        base = group[0].base_offset
        cleaned: LogSegment | None = None
        if not self.dry_run:
            for stale in log.dir.glob(f"{base:020d}.*{CLEANED_FILE_SUFFIX}"):
                stale.unlink()
            cleaned = LogSegment.open(
                log.dir, base, log.config, file_suffix=CLEANED_FILE_SUFFIX, now_ms=self.now
            )
        self.txns.cleaned_index = None if cleaned is None else cleaned.txn_index
        try:
            for view in group:
                self.cleaner.check_done(self.tp)
                retain_legacy_deletes = view.last_modified_ms > self.legacy_delete_horizon
                self._clean_into(view, cleaned, retain_legacy_deletes)
            stats.segments_before += len(group)
            stats.segments_after += 1
            if cleaned is None:
                return
            cleaned.on_become_inactive_segment()
            cleaned.flush()
            # The cleaned segment keeps the age of what it replaces: retention by time and
            # the legacy tombstone horizon read it.
            cleaned.set_last_modified(group[-1].last_modified_ms)
            self.cleaner.check_done(self.tp)
        except Exception:
            # (Not BaseException: a process going down leaves .cleaned files, which the
            # next load removes.)
            if cleaned is not None:
                cleaned.delete_if_exists()
            raise
        assert cleaned is not None
        try:
            log.replace_segments(cleaned, [(v.segment, v.size) for v in group])
        except SegmentsChangedError as exc:
            raise LogCleaningAbortedError(str(exc)) from exc

    def _clean_into(
        self, view: _View, dest: LogSegment | None, retain_legacy_deletes: bool
    ) -> None:
        stats = self.stats
        check_done, tp = self.cleaner.check_done, self.tp
        throttle = self.cleaner.throttler.maybe_throttle
        walk = self._walk(view, 0)
        for pos, header, buf in walk:
            assert buf is not None
            check_done(tp)
            stats.batches_read += 1
            stats.bytes_read += header.size
            try:
                if header.magic < MAGIC_V2:
                    out = self._filter_legacy(header, buf, retain_legacy_deletes)
                else:
                    out = self._filter_batch(header, buf, pos)
            except CorruptRecordError as exc:
                raise CorruptRecordError(f"{view.segment.log_path}: {exc}") from None
            if out is None:
                continue
            data, max_timestamp, offset_of_max_timestamp = out
            stats.batches_written += 1
            stats.bytes_written += len(data)
            if dest is not None:
                dest.append(header.last_offset, max_timestamp, offset_of_max_timestamp, data,
                            single_batch=True)
                throttle(len(data))
        self._walk_failed(walk, view)

    def _filter_batch(
        self, header: BatchHeader, buf: memoryview, position: int
    ) -> tuple[bytes | memoryview, int, int] | None:
        """What of one v2 batch is kept: (bytes, max timestamp, its offset), or None."""
        if header.is_control:
            return self._filter_control_batch(header, buf, position)
        stats = self.stats
        count = header.records_count or 0
        if self.txns.on_batch(header):
            # Aborted: removed whatever its keys (Kafka's shouldDiscardBatch).
            stats.messages_read += count
            stats.aborted_messages_removed += count
            return self._emptied(header)
        base_offset = header.base_offset or 0
        horizon_set = header.has_delete_horizon
        retain_deletes = not horizon_set or self.now < header.base_timestamp
        data = self._records_data(header, buf)
        result = self.map.filter_records(
            data, count, base_offset, header.base_timestamp, retain_deletes, position
        )
        stats.messages_read += count
        stats.messages_written += result.kept_count
        stats.invalid_messages_read += result.invalid
        stats.tombstones_removed += result.tombstones_removed
        log_append = bool(header.attributes & TIMESTAMP_TYPE_MASK)
        if result.kept_count == 0:
            return self._emptied(header)
        need_horizon = result.tombstones_kept > 0 and not horizon_set
        if result.kept is None and not need_horizon:
            if log_append:
                return header.payload(buf), header.max_timestamp, header.last_offset
            return header.payload(buf), result.max_timestamp, result.offset_of_max_timestamp
        records: bytes | memoryview = data if result.kept is None else result.kept
        if log_append:
            max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
        else:
            max_timestamp, offset_of_max = result.max_timestamp, result.offset_of_max_timestamp
        batch = self._rebuilt(header, records, result.kept_count, need_horizon, max_timestamp,
                              position)
        return batch, max_timestamp, offset_of_max

    def _filter_control_batch(
        self, header: BatchHeader, buf: memoryview, position: int
    ) -> tuple[bytes | memoryview, int, int] | None:
        """A transaction marker: kept while data of its transaction remains before it; once
        none does, it gets a delete horizon (KIP-534, as tombstones do) and goes with the
        first cleaning past it (Kafka's checkBatchRetention for control batches)."""
        stats = self.stats
        count = header.records_count or 0
        may_discard = self.txns.on_control_batch(header, self._control_type(header, buf))
        horizon_set = header.has_delete_horizon
        stats.messages_read += count
        if count == 0 or (may_discard and horizon_set and header.base_timestamp <= self.now):
            stats.markers_removed += count
            return self._emptied(header)
        stats.messages_written += count
        if may_discard and not horizon_set:
            data = self._records_data(header, buf)
            batch = self._rebuilt(header, data, count, True, header.max_timestamp, position)
            return batch, header.max_timestamp, header.last_offset
        return header.payload(buf), header.max_timestamp, header.last_offset

    def _emptied(self, header: BatchHeader) -> tuple[bytes, int, int] | None:
        """A batch with nothing left: gone, or kept empty when it holds the last sequence
        (or marker) of an active producer."""
        if self._is_last_of_producer(header):
            return _empty_batch(header), header.max_timestamp, header.last_offset
        return None

    def _rebuilt(
        self, header: BatchHeader, records: bytes | memoryview, count: int, need_horizon: bool,
        max_timestamp: int, position: int,
    ) -> bytes:
        """``header``'s batch around ``records`` (decompressed; recompressed here with the
        batch's codec), given a delete horizon when ``need_horizon``."""
        base_timestamp = header.base_timestamp
        attributes = header.attributes
        if not need_horizon and count:
            # As Kafka's MemoryRecordsBuilder: the base timestamp is the first retained
            # record's (its delta 0), not the first record's of the original batch.
            _length, at = read_varint(records, 0)
            first_delta, _ = read_varlong(records, at + 1)  # after the attributes byte
            if first_delta:
                records = self.map._ops.rebase_timestamps(records, count, -first_delta,
                                                          position)
                base_timestamp += first_delta
        if need_horizon:
            # KIP-534: the batch remembers when its tombstones (or its marker) may go; its
            # records' timestamps move to the new base unchanged.
            horizon = self.now + self.delete_retention_ms
            records = self.map._ops.rebase_timestamps(
                records, count, base_timestamp - horizon, position
            )
            base_timestamp = horizon
            attributes |= DELETE_HORIZON_FLAG_MASK
        codec = header.compression_id
        if codec:
            records = compress(codec, records)
        return _v2_batch(header, attributes, base_timestamp, max_timestamp, count, records)

    def _control_type(self, header: BatchHeader, buf: memoryview) -> ControlRecordType | None:
        """The type of a control batch's (first) record; None for an emptied batch."""
        if not header.records_count:
            return None
        for record in iter_records(buf, header, max_decompressed_size=self.max_decompressed):
            return parse_control_key(record.key)[1]
        return None

    def _is_last_of_producer(self, header: BatchHeader) -> bool:
        if header.producer_id == NO_PRODUCER_ID:
            return False
        last = self.last_of_producer.get(header.producer_id)
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset >= 0:
            return header.last_offset == last_data_offset
        return header.is_control and header.producer_epoch == epoch

    def _filter_legacy(
        self, header: BatchHeader, buf: memoryview, retain_deletes: bool
    ) -> tuple[bytes | memoryview, int, int] | None:
        """A v0/v1 entry: a message kept or not, a compressed wrapper rebuilt with the
        inner messages kept (absolute inner offsets, the wrapper at the last one)."""
        stats, offset_map = self.stats, self.map
        records = list(
            iter_legacy_records(buf, header, max_decompressed_size=self.max_decompressed)
        )
        kept = []
        for record in records:
            keep = True
            if record.offset <= offset_map.latest_offset:
                if record.key is None:
                    stats.invalid_messages_read += 1
                    keep = False
                else:
                    latest = record.offset >= offset_map.get(record.key)
                    if latest and record.value is None and not retain_deletes:
                        stats.tombstones_removed += 1
                    keep = latest and (record.value is not None or retain_deletes)
            if keep:
                kept.append(record)
        stats.messages_read += len(records)
        stats.messages_written += len(kept)
        if not kept:
            return None
        max_timestamp = max(r.timestamp for r in kept)
        offset_of_max = next(r.offset for r in kept if r.timestamp == max_timestamp)
        if len(kept) == len(records):
            return header.payload(buf), max_timestamp, offset_of_max
        codec = header.compression_id
        inner = b"".join(
            build_legacy_message(r.offset, header.magic, r.key, r.value, timestamp=r.timestamp)
            for r in kept
        )
        wrapper = build_legacy_message(
            kept[-1].offset,
            header.magic,
            None,
            compress(codec, inner, magic=header.magic),
            timestamp=header.max_timestamp,
            attributes=header.attributes,
        )
        return wrapper, max_timestamp, offset_of_max


def _v2_batch(
    header: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int, count: int,
    records: bytes | bytearray | memoryview,
) -> bytes:
    """A v2 batch with ``header``'s offsets, producer fields and leader epoch (Kafka keeps
    the last offset delta so the producer's last sequence survives), a correct CRC."""
    batch = bytearray(RECORD_BATCH_OVERHEAD + len(records))
    _V2_HEADER.pack_into(
        batch, 0, header.base_offset or 0, len(batch) - LOG_OVERHEAD,
        header.partition_leader_epoch, MAGIC_V2, 0, attributes, header.last_offset_delta,
        base_timestamp, max_timestamp, header.producer_id, header.producer_epoch,
        header.base_sequence, count,
    )
    batch[RECORD_BATCH_OVERHEAD:] = records
    _CRC.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def _empty_batch(header: BatchHeader) -> bytes:
    """Kafka's writeEmptyHeader: no records, the batch's offsets and producer fields kept,
    uncompressed, both timestamps its max timestamp."""
    attributes = header.attributes & (
        TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK
    )
    return _v2_batch(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


# ==============================================================================================
# cleaner-offset-checkpoint
# ==============================================================================================






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
