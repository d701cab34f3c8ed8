"""LogLoader: a partition's log directory made ready to serve, as Kafka's LogLoader.

It owns the rules of loading, nothing after: leftover ``.deleted`` and temporary files are
removed; an interrupted cleaning's ``.cleaned`` files are dropped (its originals are
intact) and its completed ``.swap`` files put in place of the segments they cover; index
files without a ``.log`` are removed; each segment is opened and its indexes sanity
checked, rebuilt from the log when missing or failing (never trusted); after an unclean
shutdown every segment from the recovery point on is recovered (validated, cut at the
first invalid byte; what follows a cut is scheduled for deletion, so the log stays
contiguous); then the log start offset, recovery point and log end offset are settled,
the leader epoch cache is trimmed to them and the producer state rebuilt (the latest
snapshot, then the batch headers after it).

It fills the segment containers it is handed (the PartitionLog's, which klog/storage/
_fastread.c reads) and returns ``LoadedLogOffsets``. ``replay_producer_state`` is also the
log's after a truncation. Not thread-safe: the log calls it from its constructor, or
under its lock.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from klog.protocol.records.batch import DEFAULT_MAX_BATCH_SIZE, MAGIC_V2, BatchHeader
from klog.storage.config import LogConfig
from klog.storage.files import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    INDEX_FILE_SUFFIX,
    INDEX_FILE_SUFFIXES,
    LOG_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    TMP_FILE_SUFFIX,
    TXN_INDEX_FILE_SUFFIX,
    offset_from_filename_or_none,
)
from klog.storage.index import CorruptIndexError
from klog.storage.leader_epoch import LeaderEpochFileCache
from klog.storage.producer_state import ProducerStateManager
from klog.storage.scan import _iter_file_batches, _ScanState, scan_segment
from klog.storage.segment import LogSegment


class LoadedLogOffsets(NamedTuple):
    """What loading settled (Kafka's LoadedLogOffsets), and what it cut and set aside."""

    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    bytes_truncated: int
    #: Segments recovery removed after a cut: the log schedules their deletion.
    removed: list[LogSegment]


class LogLoader:
    """Loads the directory ``dir`` into ``base_offsets`` (sorted) and ``segments`` (by
    base offset), both empty on entry. ``new_segment`` makes the first segment of an
    empty log."""

    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int],
                 base_offsets: list[int], segments: dict[int, LogSegment],
                 producer_state: ProducerStateManager,
                 leader_epoch_cache: LeaderEpochFileCache,
                 new_segment: Callable[[int], LogSegment]) -> None:
        self.dir = directory
        self.config = config
        self.clock = clock
        self.base_offsets = base_offsets
        self.segments = segments
        self.producer_state = producer_state
        self.leader_epoch_cache = leader_epoch_cache
        self.new_segment = new_segment
        self.bytes_truncated = 0
        self.removed: list[LogSegment] = []

    def load(self, had_clean_shutdown: bool, log_start_offset: int,
             recovery_point: int) -> LoadedLogOffsets:
        self._remove_temp_files_and_resolve_swaps()
        self._load_segment_files()
        if not had_clean_shutdown:
            recovery_point = self._recover_log(log_start_offset, recovery_point)
        if not self.base_offsets:
            self._add(self.new_segment(log_start_offset))
        active = self.segments[self.base_offsets[-1]]
        # Checked (or rebuilt) above: the inactive segments' indexes are mapped again only
        # when a read needs them, so a log dir of thousands of segments loads mapping few.
        for base in self.base_offsets[:-1]:
            self.segments[base].release_indexes()
        active.resize_indexes(self.config.segment_index_bytes)
        log_end_offset = active.read_next_offset()
        log_start_offset = max(log_start_offset, self.base_offsets[0])
        log_start_offset = min(log_start_offset, log_end_offset)
        recovery_point = min(max(recovery_point, 0), log_end_offset)
        if had_clean_shutdown:
            # A clean shutdown flushed everything.
            recovery_point = log_end_offset
        self.leader_epoch_cache.truncate_from_end(log_end_offset)
        self.leader_epoch_cache.truncate_from_start(log_start_offset)
        self._rebuild_producer_state(log_start_offset, log_end_offset)
        return LoadedLogOffsets(log_start_offset, recovery_point, log_end_offset,
                                self.bytes_truncated, self.removed)

    def _add(self, segment: LogSegment) -> None:
        if segment.base_offset not in self.segments:
            bisect.insort(self.base_offsets, segment.base_offset)
        self.segments[segment.base_offset] = segment

    def _remove_temp_files_and_resolve_swaps(self) -> None:
        """Kafka's removeTempFilesAndCollectSwapFiles + swap completion."""
        swap_logs: list[Path] = []
        min_cleaned: int | None = None
        for entry in sorted(self.dir.iterdir()):
            name = entry.name
            if not entry.is_file():
                continue
            if name.endswith(DELETED_FILE_SUFFIX) or name.endswith(TMP_FILE_SUFFIX):
                entry.unlink()  # scheduled deletions and half-written temporaries
            elif name.endswith(CLEANED_FILE_SUFFIX):
                base = offset_from_filename_or_none(name)
                if base is not None:
                    min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
                entry.unlink()  # an interrupted cleaning: the originals are intact
            elif name.endswith(SWAP_FILE_SUFFIX):
                if name.endswith(LOG_FILE_SUFFIX + SWAP_FILE_SUFFIX):
                    swap_logs.append(entry)
                else:
                    entry.unlink()  # index swap files are rebuilt from the log
        for swap in swap_logs:
            base = offset_from_filename_or_none(swap.name)
            if base is None:
                continue
            if min_cleaned is not None and base >= min_cleaned:
                # Cleaning did not finish writing this group: the originals stay.
                swap.unlink()
                continue
            scan = scan_segment(swap, verify_crc=False)
            next_offset = base if scan.last_offset is None else scan.last_offset + 1
            # The swap replaces every segment whose base offset it covers.
            for log_file in self.dir.glob(f"*{LOG_FILE_SUFFIX}"):
                other = offset_from_filename_or_none(log_file.name)
                if other is not None and base <= other < max(next_offset, base + 1):
                    for suffix in (
                        LOG_FILE_SUFFIX,
                        INDEX_FILE_SUFFIX,
                        TIME_INDEX_FILE_SUFFIX,
                        TXN_INDEX_FILE_SUFFIX,
                    ):
                        (self.dir / f"{log_file.name[:20]}{suffix}").unlink(missing_ok=True)
            os.replace(swap, swap.with_name(swap.name[: -len(SWAP_FILE_SUFFIX)]))

    def _load_segment_files(self) -> None:
        # Orphaned index files (no .log) are removed, as Kafka does.
        logs = {offset_from_filename_or_none(p.name) for p in self.dir.glob(f"*{LOG_FILE_SUFFIX}")}
        for suffix in INDEX_FILE_SUFFIXES:
            for index_file in self.dir.glob(f"*{suffix}"):
                if offset_from_filename_or_none(index_file.name) not in logs:
                    index_file.unlink()
        for base in sorted(b for b in logs if b is not None):
            segment = LogSegment.open(self.dir, base, self.config, file_already_exists=True)
            try:
                segment.sanity_check()
            except (FileNotFoundError, CorruptIndexError):
                # Indexes are accelerators: rebuild them from the log (and validate it).
                self.bytes_truncated += segment.recover(DEFAULT_MAX_BATCH_SIZE)
            self._add(segment)

    def _recover_log(self, log_start_offset: int, recovery_point: int) -> int:
        """After an unclean shutdown: recover every segment from the recovery point on.
        Returns the new recovery point."""
        if not self.base_offsets:
            return recovery_point
        i = max(0, bisect.bisect_right(self.base_offsets, recovery_point) - 1)
        unflushed = self.base_offsets[i:]
        first = unflushed[0]
        state = ProducerStateManager(self.dir, self.producer_state.producer_id_expiration_ms)
        state.truncate_and_reload(log_start_offset, first, self.clock())
        replay_producer_state(self.base_offsets, self.segments, state, state.map_end_offset,
                              first)
        for n, base in enumerate(unflushed):
            segment = self.segments[base]
            truncated = segment.recover(DEFAULT_MAX_BATCH_SIZE, state, self.leader_epoch_cache)
            self.bytes_truncated += truncated
            if truncated > 0:
                # The log must stay contiguous: what follows a cut is scheduled for
                # deletion, exactly like Kafka's recovery.
                for later in unflushed[n + 1 :]:
                    self.removed.append(self.segments.pop(later))
                    self.base_offsets.remove(later)
                break
        return self.segments[self.base_offsets[-1]].read_next_offset()

    def _rebuild_producer_state(self, log_start_offset: int, last_offset: int) -> None:
        """Kafka's rebuildProducerState: latest snapshot, then replay batch headers."""
        state = self.producer_state
        state.truncate_and_reload(log_start_offset, last_offset, self.clock())
        if last_offset > state.map_end_offset:
            replay_producer_state(self.base_offsets, self.segments, state,
                                  state.map_end_offset, last_offset)
            state.update_map_end_offset(last_offset)
            state.take_snapshot()


def replay_producer_state(base_offsets: list[int], segments: dict[int, LogSegment],
                          state: ProducerStateManager, start: int, end: int) -> None:
    """Apply the batches with offsets in [start, end) of the segments to ``state``
    (headers only)."""
    if start >= end:
        return
    i = max(0, bisect.bisect_right(base_offsets, start) - 1)
    for base in base_offsets[i:]:
        if base >= end:
            break
        segment = segments[base]
        position = 0
        if base <= start:
            found = segment.translate_offset(start)
            if found is None:
                continue
            position = found.position
        for header, entry in _iter_segment_batches(segment, position):
            if header.base_offset is not None and header.base_offset >= end:
                return
            if header.magic >= MAGIC_V2 and header.last_offset >= start:
                completed = state.update_from_batch(header, entry)
                if completed is not None:
                    # The .txnindex already holds it: only the state moves on.
                    state.complete_txn(completed)
            state.update_map_end_offset(header.last_offset + 1)


def _iter_segment_batches(segment: LogSegment, position: int
                          ) -> Iterator[tuple[BatchHeader, memoryview]]:
    state = _ScanState(position=position)
    for _pos, header, entry in _iter_file_batches(
        segment.fd,
        state,
        segment.size,
        max_batch_size=DEFAULT_MAX_BATCH_SIZE,
        verify_crc=False,
        expected_min_offset=None,
    ):
        yield header, entry
