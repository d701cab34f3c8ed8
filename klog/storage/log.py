"""One partition's log: its offsets, appends, reads, truncation and retention.

This module owns ``PartitionLog``, Kafka's UnifiedLog without the replication and
tiered-storage parts: on top of its segments in their directory (local_log.py, Kafka's
LocalLog: segments, log end offset, recovery point, flushing, directory names) it keeps the
log start offset and high watermark, the producer state and the leader epoch cache.
Loading is log_loader.py's (Kafka's LogLoader); validation validator.py's.

A leader's append takes records validated by validator.py (Kafka's LogValidator; raw
records are validated first, once) and assigns offsets by patching each v2 batch's
baseOffset and partitionLeaderEpoch (outside the CRC) in the request's buffer, or one copy
of it: records are not decoded here. A follower's append checks sizes and CRCs only (its
leader validated the records) and keeps the leader's offsets and epochs. Reads return
whole batches as a file region.

No scheduler lives here: the broker calls ``maybe_flush``, ``delete_old_segments`` and
``delete_pending`` periodically. The log cleaner (cleaner.py) rewrites segments outside the
lock and swaps each in with ``replace_segments`` (Kafka's replaceSegments), the one place
where segments other than the active one change. Time comes from ``clock``
(milliseconds), injectable.

Locking: every public method takes the log's own re-entrant lock, so a PartitionLog may be
used from several threads (the request path and the flusher/retention threads).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, ParamSpec, TypeVar

from klog.protocol.errors import (
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnsupportedForMessageFormatError,
)
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    V2_BASE_LENGTH_EPOCH,
    BatchHeader,
    crc32c,
    patch_base_offset,
    patch_legacy_offset,
    patch_partition_leader_epoch,
    read_batch_header,
)
from klog.storage.checkpoints import fsync_dir
from klog.storage.config import LogConfig
from klog.storage.files import (
    CLEANED_FILE_SUFFIX,
    DELETED_FILE_SUFFIX,
    PRODUCER_SNAPSHOT_FILE_SUFFIX,
    SWAP_FILE_SUFFIX,
)
from klog.storage.index import AbortedTxn
from klog.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT_FILENAME, LeaderEpochFileCache
from klog.storage.local_log import (
    LocalLog,
    PartitionDirName,
    locked,
    log_delete_dir_name,
    log_dir_name,
    log_future_dir_name,
    parse_partition_dir_name,
    wall_clock_ms,
)
from klog.storage.log_loader import LogLoader, replay_producer_state
from klog.storage.producer_state import (
    BatchMetadata,
    ProducerStateManager,
    VerificationGuard,
)
from klog.storage.segment import LogSegment, fastread
from klog.storage.validator import (
    AppendOrigin,
    ValidatedRecords,
    check_batch_headers,
    validate_records,
)
from klog.storage.values import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset

# ListOffsets special timestamps (Kafka's ListOffsetsRequest).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4

_INT64_STRUCT_MAX = 2**63 - 1

_new_tuple = tuple.__new__  # builds a NamedTuple without its Python-level __new__
_pack_base_length_epoch = V2_BASE_LENGTH_EPOCH.pack_into

T = TypeVar("T")
P = ParamSpec("P")


# -- errors ---------------------------------------------------------------------------------


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append that does not start at the log end offset."""

    error_code = ErrorCode.UNKNOWN_SERVER_ERROR


class SegmentsChangedError(RuntimeError):
    """``replace_segments`` found the segments it should replace changed (nothing done)."""


# -- values ---------------------------------------------------------------------------------


class LogAppendInfo(NamedTuple):
    """What an append did (Kafka's LogAppendInfo, the parts a produce response needs)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    batch_count: int
    valid_bytes: int
    last_leader_epoch: int = -1
    duplicate: bool = False

    # Kafka's LogAppendInfo calls it numMessages/count; a NamedTuple's own count() method
    # is shadowed on purpose (nothing counts items of this tuple).
    @property
    def count(self) -> int:  # type: ignore[override]
        return self.record_count


def _assigned(
    h: BatchHeader, base: int, last: int, epoch: int, now: int, log_append: bool
) -> BatchHeader:
    """``h`` as it reads after the leader patched offsets, epoch and (maybe) time in."""
    return BatchHeader(
        h.position,
        base,
        h.batch_length,
        epoch,
        h.magic,
        h.crc,
        h.attributes | TIMESTAMP_TYPE_MASK if log_append else h.attributes,
        h.last_offset_delta,
        h.base_timestamp,
        now if log_append else h.max_timestamp,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        h.records_count,
        last,
    )


class PartitionLog(LocalLog):
    """A partition's log (Kafka's UnifiedLog, local storage only).

    Thread-safe: each public method holds the log's lock for its duration.
    """

    def __init__(
        self,
        directory: Path | str,
        config: LogConfig | None = None,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        high_watermark: int | None = None,
        had_clean_shutdown: bool = True,
        clock: Callable[[], int] = wall_clock_ms,
        producer_id_expiration_ms: int = 86_400_000,
    ) -> None:
        super().__init__(directory, config, clock, recovery_point)
        self._log_start_offset = log_start_offset
        self.leader_epoch_cache = LeaderEpochFileCache(self.dir / LEADER_EPOCH_CHECKPOINT_FILENAME)
        self.producer_state = ProducerStateManager(self.dir, producer_id_expiration_ms)
        self.loaded_with_recovery = not had_clean_shutdown
        self.bytes_truncated_on_load = 0
        self._load(had_clean_shutdown)
        hw = self._log_end_offset if high_watermark is None else high_watermark
        self._high_watermark = min(max(hw, self._log_start_offset), self._log_end_offset)
        # Replaying the log on load completes every ended transaction as "unreplicated";
        # those below the high watermark are stable already. Without this, a committed
        # transaction replayed after a crash held the last stable offset back until the
        # high watermark next moved, which a quiet partition's never does.
        self.producer_state.on_high_watermark_updated(self._high_watermark)

    # ==========================================================================================
    # loading
    # ==========================================================================================

    def _load(self, had_clean_shutdown: bool) -> None:
        """Kafka's LogLoader (log_loader.py) fills the segments and settles the offsets."""
        loaded = LogLoader(self.dir, self.config, self.clock, self._base_offsets,
                           self._segments, self.producer_state, self.leader_epoch_cache,
                           self._new_segment).load(had_clean_shutdown, self._log_start_offset,
                                                   self._recovery_point)
        self._log_start_offset = loaded.log_start_offset
        self._recovery_point = loaded.recovery_point
        self._log_end_offset = loaded.log_end_offset
        self.bytes_truncated_on_load = loaded.bytes_truncated
        for segment in loaded.removed:
            self._schedule_delete(segment)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.dir}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self._log_end_offset})"
        )

    @locked
    def update_high_watermark(self, high_watermark: int) -> int:
        """Set the HW, clamped to [log_start_offset, log_end_offset]; return it."""
        hw = min(max(high_watermark, self._log_start_offset), self._log_end_offset)
        self._high_watermark = hw
        self.producer_state.on_high_watermark_updated(hw)
        return hw

    # ==========================================================================================
    # appends
    # ==========================================================================================

    def append_as_leader(
        self,
        records: bytes | bytearray | memoryview | ValidatedRecords,
        leader_epoch: int,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Append ``records`` as the leader: validated (storage/validator.py, Kafka's
        LogValidator) unless they come as ``ValidatedRecords`` already, offsets assigned
        from the log end offset, ``leader_epoch`` stamped. Records are not decoded here.

        ``origin`` says who wrote raw ``records`` (validated ones carry theirs): a client
        (no control batches; sequence checks) or a coordinator (transaction markers are
        checked against the producer's epochs). A duplicate of one of a producer's last 5
        batches is not appended: its original offsets come back with ``duplicate=True``.
        ``verification_guard`` (KIP-890): when the broker verifies transactions, the guard
        ``maybe_start_transaction_verification`` gave (or the sentinel); a transactional
        batch that neither continues an ongoing transaction here nor carries the
        producer's current guard is INVALID_TXN_STATE. None: not checked.

        The validated buffer is patched in place, as Kafka patches the request buffer (a
        writable input is that buffer; anything else was copied once by the validator).
        Records validated against another LogConfig than the log's current one (a config
        change while they were checked in a worker thread) are validated again.
        """
        validated = records if type(records) is ValidatedRecords else validate_records(
            records, self.config, origin, self.clock())  # type: ignore[arg-type]
        lock = self._lock
        lock.acquire()  # inline rather than @locked (or ``with``): once per produce request
        try:
            config = self.config
            if validated.config is not config:
                validated = validate_records(validated.records, config, validated.origin,
                                             self.clock())
            plain = validated.plain
            if plain is not None and config.message_timestamp_type == "CreateTime":
                return self._append_one_plain_batch(validated.records, plain, leader_epoch)
            return self._append_as_leader(validated, leader_epoch, verification_guard)
        finally:
            lock.release()

    def _append_one_plain_batch(
        self, buf: bytearray | memoryview, fields: tuple[int, ...], leader_epoch: int
    ) -> LogAppendInfo:
        """The produce path's common case in one pass: one validated v2 batch without a
        producer id (no idempotence state to check or update), CreateTime, described by
        its header fields (``ValidatedRecords.plain``).

        Same steps and results as the general path for such a batch: offsets and epoch
        patched in (outside the CRC); roll, write, index; leader epoch cache, map end
        offset, log end offset.
        """
        batch_length, _magic, _crc, _attributes, delta, max_ts, _pid, count = fields
        n = batch_length + LOG_OVERHEAD
        config = self.config
        first = self._log_end_offset
        last = first + delta
        if max_ts > NO_TIMESTAMP:
            offset_of_max = last
        else:
            max_ts, offset_of_max = NO_TIMESTAMP, first
        _pack_base_length_epoch(buf, 0, first, batch_length, leader_epoch)
        if not self._segments[self._base_offsets[-1]].append_unless_roll_due(
            last,
            max_ts,
            offset_of_max,
            buf,
            self.clock,
            config.segment_bytes,
            config.max_segment_ms,
            True,
        ):
            segment = self._maybe_roll(n, max_ts, last, first, self.clock())
            segment.append(last, max_ts, offset_of_max, buf, True)
        if leader_epoch >= 0:
            cache = self.leader_epoch_cache
            latest = cache.latest_epoch
            if latest is None or leader_epoch > latest:
                cache.assign(leader_epoch, first)
        end = last + 1
        self.producer_state.update_map_end_offset(end)
        self._log_end_offset = end
        if self._high_watermark > end:
            self._high_watermark = end
        info = _new_tuple(
            LogAppendInfo,
            (first, last, max_ts, offset_of_max, -1, self._log_start_offset, count, 1, n,
             leader_epoch, False),
        )
        if end - self._recovery_point >= config.flush_messages:
            self._flush(end)
        return info

    def _append_as_leader(
        self, validated: ValidatedRecords, leader_epoch: int,
        verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        buf = validated.records
        headers = validated.headers
        if headers is None:  # ``plain`` said it all, but a LogAppendTime log stamps it
            headers = [read_batch_header(buf)]
        now = self.clock()
        if validated.origin is AppendOrigin.CLIENT:
            for h in headers:
                if h.has_producer_id:
                    duplicate = self.producer_state.find_duplicate_batch(h)
                    if duplicate is not None:
                        return self._duplicate_info(duplicate, h)
                    self.producer_state.check_verified(h, verification_guard)
                    self.producer_state.check_append(h)
        else:
            for h in headers:
                if h.is_control and h.has_producer_id:
                    self.producer_state.check_marker(h, h.payload(buf))
                elif h.has_producer_id:
                    # A coordinator's transactional data (offset commits of a transaction).
                    self.producer_state.check_verified(h, verification_guard)
        log_append = self.config.log_append_time
        next_offset = self._log_end_offset
        assigned: list[BatchHeader] = []
        for h in headers:
            if h.magic >= MAGIC_V2:
                patch_base_offset(buf, h.position, next_offset)
                patch_partition_leader_epoch(buf, h.position, leader_epoch)
                if log_append:
                    self._stamp_log_append_time(buf, h, now)
                last = next_offset + h.last_offset_delta
                assigned.append(_assigned(h, next_offset, last, leader_epoch, now, log_append))
            else:
                patch_legacy_offset(buf, h.position, next_offset)
                last = next_offset
                assigned.append(_assigned(h, next_offset, next_offset, h.partition_leader_epoch,
                                          now, False))
            next_offset = last + 1
        return self._append(
            buf, assigned, leader_epoch, assign_epoch=True, now=now, log_append=log_append
        )

    @locked
    def maybe_start_transaction_verification(self, producer_id: int, sequence: int,
                                             epoch: int) -> VerificationGuard:
        """KIP-890: the sentinel when ``producer_id`` has an ongoing transaction here (its
        next batches need no verification), else the guard of its verification in
        progress, begun now if none is (Kafka's UnifiedLog.maybeStartTransactionVerification).
        The append that follows the coordinator's answer presents the guard."""
        state = self.producer_state
        if state.has_ongoing_transaction(producer_id):
            return VerificationGuard.SENTINEL
        return state.maybe_create_verification_state_entry(
            producer_id, sequence, epoch, self.clock()).guard

    @staticmethod
    def _stamp_log_append_time(buf: bytearray | memoryview, h: BatchHeader, now: int) -> None:
        # LogAppendTime changes CRC-covered bytes (attributes, maxTimestamp): recompute.
        attributes = int.from_bytes(buf[h.position + ATTRIBUTES_OFFSET : h.position + 23], "big")
        attributes |= TIMESTAMP_TYPE_MASK
        buf[h.position + ATTRIBUTES_OFFSET : h.position + 23] = attributes.to_bytes(2, "big")
        start = h.position + MAX_TIMESTAMP_OFFSET
        buf[start : start + 8] = now.to_bytes(8, "big", signed=True)
        crc = crc32c(memoryview(buf)[h.position + ATTRIBUTES_OFFSET : h.end])
        buf[h.position + CRC_OFFSET : h.position + CRC_OFFSET + 4] = crc.to_bytes(4, "big")

    def _duplicate_info(self, meta: BatchMetadata, h: BatchHeader) -> LogAppendInfo:
        return LogAppendInfo(
            first_offset=meta.first_offset,
            last_offset=meta.last_offset,
            max_timestamp=meta.timestamp,
            offset_of_max_timestamp=meta.last_offset,
            log_append_time=-1,
            log_start_offset=self._log_start_offset,
            record_count=h.records_count or 0,
            batch_count=1,
            valid_bytes=h.size,
            duplicate=True,
        )

    @locked
    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append a leader's batches as they are (offsets and epochs kept).

        The first offset must be the log end offset and offsets must increase; batches
        stamped with a newer leader epoch update the leader epoch cache.
        """
        headers = check_batch_headers(records, self.config.max_message_bytes)
        first = (
            headers[0].base_offset if headers[0].base_offset is not None else headers[0].last_offset
        )
        if first < self._log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"follower append starts at offset {first}, below the log end offset "
                f"{self._log_end_offset} of {self.dir.name}"
            )
        previous = self._log_end_offset - 1
        for h in headers:
            low = h.base_offset if h.base_offset is not None else h.last_offset
            if low <= previous:
                raise InvalidRecordError(
                    f"out of order offsets in follower append to {self.dir.name}: "
                    f"{low} after {previous}"
                )
            previous = h.last_offset
        return self._append(
            records, headers, -1, assign_epoch=False, now=self.clock(), log_append=False
        )

    def _append(
        self,
        buf: bytes | bytearray | memoryview,
        headers: list[BatchHeader],
        leader_epoch: int,
        *,
        assign_epoch: bool,
        now: int,
        log_append: bool,
    ) -> LogAppendInfo:
        # ``headers`` describe ``buf`` with its final offsets, epochs and timestamps.
        first_h = headers[0]
        first_offset = (
            first_h.base_offset if first_h.base_offset is not None else first_h.last_offset
        )
        last_offset = headers[-1].last_offset
        max_ts, offset_of_max = NO_TIMESTAMP, first_offset
        records = 0
        for h in headers:
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, h.last_offset
            records += h.records_count or 1
        if headers[-1].last_offset - self.active_segment.base_offset < 0:
            raise InvalidRecordError(f"offset {first_offset} is below the active segment")
        segment = self._maybe_roll(len(buf), max_ts, last_offset, first_offset, now)
        segment.append(last_offset, max_ts, offset_of_max, buf, len(headers) == 1)
        # Producer state, transactions and leader epochs, from the headers.
        epoch_seen = -1
        for h in headers:
            if h.magic < MAGIC_V2:
                continue
            epoch = h.partition_leader_epoch
            if epoch >= 0 and epoch != epoch_seen:
                latest = self.leader_epoch_cache.latest_epoch
                if latest is None or epoch > latest:
                    self.leader_epoch_cache.assign(epoch, h.base_offset or 0)
                epoch_seen = epoch
            if h.has_producer_id:
                completed = self.producer_state.update_from_batch(h, h.payload(buf))
                if completed is not None:
                    lso = self.producer_state.last_stable_offset(completed)
                    segment.update_txn_index(completed, lso)
                    self.producer_state.complete_txn(completed)
        self.producer_state.update_map_end_offset(last_offset + 1)
        self._log_end_offset = last_offset + 1
        if self._high_watermark > self._log_end_offset:
            self._high_watermark = self._log_end_offset
        info = LogAppendInfo(
            first_offset=first_offset,
            last_offset=last_offset,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max,
            log_append_time=now if log_append else -1,
            log_start_offset=self._log_start_offset,
            record_count=records,
            batch_count=len(headers),
            valid_bytes=len(buf),
            last_leader_epoch=leader_epoch if assign_epoch else epoch_seen,
        )
        self._flush_if_too_many_messages()
        return info

    def _flush_if_too_many_messages(self) -> None:
        if self._log_end_offset - self._recovery_point >= self.config.flush_messages:
            self._flush(self._log_end_offset)

    # ==========================================================================================
    # rolling
    # ==========================================================================================

    def _maybe_roll(
        self, size: int, max_ts: int, max_offset: int, first_offset: int, now: int
    ) -> LogSegment:
        segment = self.active_segment
        config = self.config
        if segment.should_roll_for(
            size, max_ts, max_offset, now, config.segment_bytes, config.max_segment_ms
        ):
            # Kafka rolls at the first offset of the append (or where it must, to keep
            # relative offsets in int32 when the append itself spans too much).
            roll_offset = first_offset
            if max_offset - first_offset > 2**31 - 1:
                roll_offset = max_offset - (2**31 - 1)
            return self._roll(roll_offset)
        return segment

    @locked
    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Start a new active segment at max(expected_next_offset, log end offset)."""
        return self._roll(expected_next_offset)

    def _roll(self, expected_next_offset: int | None = None) -> LogSegment:
        new_offset = max(expected_next_offset or 0, self._log_end_offset)
        active = self.active_segment
        if new_offset in self._segments:
            existing = self._segments[new_offset]
            if existing is active and existing.size == 0:
                return existing  # already rolled, nothing written yet
            raise KafkaStorageError(
                f"trying to roll a new log segment for {self.dir.name} with start offset "
                f"{new_offset} which already exists"
            )
        if active.size == 0 and active.base_offset < new_offset:
            # An empty active segment is simply replaced.
            self._remove_segment(active.base_offset).delete_if_exists()
        else:
            active.on_become_inactive_segment()
        segment = self._new_segment(new_offset)
        self._add_segment(segment)
        self.producer_state.update_map_end_offset(new_offset)
        self.producer_state.take_snapshot()
        return segment

    # ==========================================================================================
    # reads
    # ==========================================================================================

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
        include_aborted_txns: bool = False,
    ) -> FetchDataInfo:
        """Whole batches from ``start_offset``: at most ``max_bytes`` (but at least one batch
        with ``min_one_message``), none at or past ``max_offset`` (e.g. the high watermark).

        Raises OffsetOutOfRangeError outside [log_start_offset, log_end_offset].
        """
        lock = self._lock
        lock.acquire()  # inline rather than @locked (or ``with``): this runs once per fetch
        try:
            end = self._log_end_offset
            if start_offset == end:
                return FetchDataInfo(self.log_end_offset_metadata)
            if start_offset > end or start_offset < self._log_start_offset:
                raise OffsetOutOfRangeError(
                    f"received request for offset {start_offset} for partition "
                    f"{self.dir.name}, but we only have log segments in the range "
                    f"{self._log_start_offset} to {end}"
                )
            if max_offset is not None and max_offset >= end:
                max_offset = None  # nothing at or past the log end to hold back
            active_base = self._base_offsets[-1]
            if max_offset is None and start_offset >= active_base:
                # The common case: a follower or caught-up consumer reads the active segment.
                info = self._segments[active_base].read(
                    start_offset, max_bytes, None, min_one_message
                )
                if info is None:
                    return FetchDataInfo(self.log_end_offset_metadata)
            else:
                info = self._read_segments(start_offset, max_bytes, max_offset, min_one_message)
            if include_aborted_txns and info.size > 0:
                info.aborted_transactions = self._collect_aborted(start_offset, info)
            return info
        finally:
            lock.release()

    def _read_segments(
        self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_message: bool
    ) -> FetchDataInfo:
        limit_position: tuple[int, int] | None = None
        if max_offset is not None:
            if max_offset <= start_offset:
                seg = self._floor_segment(start_offset)
                assert seg is not None
                found = seg.translate_offset(start_offset)
                position = found.position if found else seg.size
                return FetchDataInfo(LogOffsetMetadata(start_offset, seg.base_offset, position))
            limit_position = self._position_of(max_offset)
        for base in self._segments_from(start_offset):
            segment = self._segments[base]
            max_position = None
            if limit_position is not None:
                if limit_position[0] < base:
                    break
                if limit_position[0] == base:
                    max_position = limit_position[1]
            info = segment.read(start_offset, max_bytes, max_position, min_one_message)
            if info is not None:
                return info
        return FetchDataInfo(self.log_end_offset_metadata)

    @locked
    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Where ``offset`` sits: the segment and file position of the batch holding it, the
        log end's for offsets at or past it (Kafka's convertToOffsetMetadataOrThrow, which
        gives the high watermark and the last stable offset their positions). Reads no
        records: the segment's boundary cache answers, else its index and batch headers."""
        if offset >= self._log_end_offset:
            return self.log_end_offset_metadata
        base, position = self._position_of(offset)
        return LogOffsetMetadata(offset, base, position)

    def _position_of(self, offset: int) -> tuple[int, int]:
        """(segment base, position) of the batch holding ``offset`` (or the end of log)."""
        segment = self._floor_segment(offset)
        if segment is None:
            return self._base_offsets[0], 0
        found = segment.translate_offset(offset)
        if found is None:
            return segment.base_offset, segment.size
        return segment.base_offset, found.position

    def _collect_aborted(self, fetch_offset: int, info: FetchDataInfo) -> list[AbortedTxn]:
        upper = self._log_end_offset
        out: list[AbortedTxn] = []
        for base in self._segments_from(fetch_offset):
            result = self._segments[base].collect_aborted_txns(fetch_offset, upper)
            out.extend(result.aborted_txns)
            if result.is_complete:
                break
        return out

    # ==========================================================================================
    # truncation and log start offset
    # ==========================================================================================

    @locked
    def truncate_to(self, target_offset: int) -> bool:
        """Remove everything at or past ``target_offset`` (a follower diverged). Returns
        False when there was nothing to remove."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate partition {self.dir.name} to a negative offset")
        if target_offset >= self._log_end_offset:
            return False
        if self._base_offsets[0] > target_offset:
            self._truncate_fully_and_start_at(target_offset)
            return True
        for base in [b for b in self._base_offsets if b > target_offset]:
            self._schedule_delete(self._remove_segment(base))
        active = self.active_segment
        active.truncate_to(target_offset)
        self._log_end_offset = active.read_next_offset()
        self._recovery_point = min(self._recovery_point, self._log_end_offset)
        self._high_watermark = min(self._high_watermark, self._log_end_offset)
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
        state = self.producer_state
        state.truncate_and_reload(self._log_start_offset, self._log_end_offset, self.clock())
        replay_producer_state(self._base_offsets, self._segments, state, state.map_end_offset,
                              self._log_end_offset)
        state.update_map_end_offset(self._log_end_offset)
        state.on_high_watermark_updated(self._high_watermark)
        return True

    @locked
    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Drop every segment and start empty at ``new_offset``."""
        self._truncate_fully_and_start_at(new_offset)

    def _truncate_fully_and_start_at(self, new_offset: int) -> None:
        for base in list(self._base_offsets):
            segment = self._remove_segment(base)
            if segment.base_offset == new_offset:
                segment.delete_if_exists()  # the new segment takes its file names
            else:
                self._schedule_delete(segment)
        self._add_segment(self._new_segment(new_offset))
        self._log_end_offset = self._log_start_offset = new_offset
        self._recovery_point = self._high_watermark = new_offset
        self.leader_epoch_cache.clear_and_flush()
        self.producer_state.truncate_fully_and_start_at(new_offset)

    @locked
    def maybe_increment_log_start_offset(self, new_log_start_offset: int) -> bool:
        """DeleteRecords: move the log start offset forward (never past the high watermark).

        Segments wholly below it are deleted by the next ``delete_old_segments``.
        """
        if new_log_start_offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot increment the log start offset to {new_log_start_offset} of partition "
                f"{self.dir.name} since it is larger than the high watermark "
                f"{self._high_watermark}"
            )
        if new_log_start_offset <= self._log_start_offset:
            return False
        self._log_start_offset = new_log_start_offset
        self.leader_epoch_cache.truncate_from_start(new_log_start_offset)
        self.producer_state.on_log_start_offset_incremented(new_log_start_offset)
        return True

    # ==========================================================================================
    # retention
    # ==========================================================================================

    @locked
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention: segments wholly below the log start offset always; with
        cleanup.policy=delete also by retention.bytes and retention.ms (a segment's age is
        its largest record timestamp). As Kafka's deletableSegments: never past the high
        watermark, and the active segment too once all of it qualifies (it is rolled first,
        so the log keeps an empty active segment at its end offset), never an empty active
        segment. Deleted segments are renamed ``.deleted`` and removed later by
        ``delete_pending``. Returns the number of segments deleted."""
        now = self.clock() if now_ms is None else now_ms
        deleted = self._delete_while(
            lambda seg, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset)
        if self.config.delete:
            deleted += self._delete_retention_bytes()
            if self.config.retention_ms >= 0:
                retention = self.config.retention_ms
                deleted += self._delete_while(
                    lambda seg, nxt: now - seg.largest_timestamp > retention
                )
        return deleted

    def _delete_retention_bytes(self) -> int:
        limit = self.config.retention_bytes
        if limit < 0:
            return 0
        diff = self.size - limit

        def predicate(seg: LogSegment, nxt: LogSegment | None) -> bool:
            nonlocal diff
            if diff - seg.size >= 0:
                diff -= seg.size
                return True
            return False

        return self._delete_while(predicate)

    def _delete_while(self, predicate: Callable[[LogSegment, LogSegment | None], bool]) -> int:
        """Delete segments from the oldest while ``predicate(segment, next or None)`` holds
        and the segment lies wholly below the high watermark."""
        bases = self._base_offsets
        deletable = 0
        for i, base in enumerate(bases):
            segment = self._segments[base]
            nxt = self._segments[bases[i + 1]] if i + 1 < len(bases) else None
            upper = nxt.base_offset if nxt is not None else self._log_end_offset
            if upper > self._high_watermark or (nxt is None and segment.size == 0):
                break
            if not predicate(segment, nxt):
                break
            deletable += 1
        if deletable == 0:
            return 0
        if deletable == len(bases):
            # Every segment goes, the active one too: a new, empty active segment first.
            self._roll()
        for _ in range(deletable):
            self._schedule_delete(self._remove_segment(self._base_offsets[0]))
        new_start = self._base_offsets[0]
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self.leader_epoch_cache.truncate_from_start(new_start)
            self.producer_state.on_log_start_offset_incremented(new_start)
        self.producer_state.delete_snapshots_before(self._base_offsets[0])
        return deletable

    @locked
    def replace_segments(
        self, new_segment: LogSegment, old_segments: list[tuple[LogSegment, int]]
    ) -> None:
        """Swap a cleaned segment in for ``old_segments`` (segment, size when it was read),
        crash-safely (Kafka's LocalLog.replaceSegments).

        ``new_segment`` is complete and flushed, its files suffixed ``.cleaned``. Steps,
        each a rename: ``.cleaned`` -> ``.swap`` (from here a restart completes the swap,
        see ``_remove_temp_files_and_resolve_swaps``); the old segments leave the log and
        become ``.deleted`` (removed after file.delete.delay.ms: a fetch may still be
        sending from them); ``.swap`` -> live. The log takes ``new_segment`` over: on a
        failure before the swap point its files are deleted and nothing changed (e.g.
        SegmentsChangedError: an old segment was deleted, truncated or replaced since it
        was read, by retention or truncation); after it, KafkaStorageError, the files are
        left for the next load to complete the swap and the log keeps serving the old
        segments until then.
        """
        try:
            for segment, size in old_segments:
                if self._segments.get(segment.base_offset) is not segment or segment.size != size:
                    raise SegmentsChangedError(
                        f"segment {segment.base_offset} of {self.dir.name} changed during "
                        f"cleaning"
                    )
                if segment is self.active_segment:
                    raise SegmentsChangedError(
                        f"the active segment of {self.dir.name} cannot be replaced"
                    )
            new_segment.change_file_suffixes(CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
            fsync_dir(self.dir)
        except Exception:
            # Before the swap point nothing changed: the new segment goes.
            new_segment.delete_if_exists()
            raise
        try:
            # Renames first, the segment table after: a rename failing here leaves the
            # table (and the open descriptors readers use) as it was, and the .swap on
            # disk for the next load to complete.
            for segment, _size in old_segments:
                segment.change_file_suffixes("", DELETED_FILE_SUFFIX)
            new_segment.change_file_suffixes(SWAP_FILE_SUFFIX, "")
            fsync_dir(self.dir)
        except OSError as exc:
            raise KafkaStorageError(
                f"swapping a cleaned segment into {self.dir.name} failed ({exc}); the swap "
                f"completes when the log is loaded again"
            ) from exc
        due = self.clock() + self.config.file_delete_delay_ms
        for segment, _size in old_segments:
            self._remove_segment(segment.base_offset)
            self._pending_deletes.append((due, segment))
        self._add_segment(new_segment)

    # ==========================================================================================
    # ListOffsets
    # ==========================================================================================

    @locked
    def fetch_offset_by_timestamp(
        self,
        target_timestamp: int,
        record_locator: Callable[[bytes], Iterator[tuple[int, int]]] | None = None,
    ) -> TimestampAndOffset | None:
        """ListOffsets: earliest (-2), latest (-1), max timestamp (-3), earliest local (-4),
        or the first offset whose timestamp is >= ``target_timestamp`` (None if none).

        See ``LogSegment.find_offset_by_timestamp`` for ``record_locator``.
        """
        cache = self.leader_epoch_cache
        if target_timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            start = self._log_start_offset
            return TimestampAndOffset(NO_TIMESTAMP, start, cache.epoch_for_offset(start))
        if target_timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self._log_end_offset, cache.latest_epoch)
        if target_timestamp == MAX_TIMESTAMP:
            best = None
            for base in self._base_offsets:
                ts = self._segments[base].max_timestamp_and_offset_so_far
                if best is None or ts.timestamp > best.timestamp:
                    best = ts
            if best is None or best.timestamp < 0:
                return TimestampAndOffset(NO_TIMESTAMP, -1, None)
            return TimestampAndOffset(
                best.timestamp, best.offset, cache.epoch_for_offset(best.offset)
            )
        for base in self._base_offsets:
            segment = self._segments[base]
            if segment.largest_timestamp >= target_timestamp:
                found = segment.find_offset_by_timestamp(
                    target_timestamp, self._log_start_offset, record_locator
                )
                if found is not None:
                    return found
        return None

    # ==========================================================================================
    # lifecycle
    # ==========================================================================================

    @locked
    def close(self) -> None:
        """Snapshot producer state and close every segment (no flush: call flush first)."""
        self.producer_state.update_map_end_offset(self._log_end_offset)
        self.producer_state.take_snapshot()
        for base in self._base_offsets:
            self._segments[base].close()
        for _due, segment in self._pending_deletes:
            segment.close_handlers()

    @locked
    def rename_dir(self, new_name: str) -> None:
        """Rename the partition directory (e.g. to its ``-delete`` name); files stay open."""
        new_dir = self.dir.parent / new_name
        os.replace(self.dir, new_dir)
        self.dir = new_dir
        for segment in list(self._segments.values()) + [s for _t, s in self._pending_deletes]:
            segment.update_parent_dir(new_dir)
        self.leader_epoch_cache.path = new_dir / LEADER_EPOCH_CHECKPOINT_FILENAME
        self.producer_state.log_dir = new_dir



# PartitionLog.read as written above: the reference, and what the C read (below) calls for
# every case other than a sequential reader's read of the active segment.
python_read = PartitionLog.read
if fastread is not None:
    # The C method descriptor replaces the Python one on purpose (segment.py: fastread).
    PartitionLog.read = fastread.read_method(PartitionLog, python_read)  # type: ignore[method-assign]


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "PRODUCER_SNAPSHOT_FILE_SUFFIX",
    "FetchDataInfo",
    "LogAppendInfo",
    "OffsetOutOfRangeError",
    "PartitionDirName",
    "PartitionLog",
    "UnsupportedForMessageFormatError",
    "log_delete_dir_name",
    "log_dir_name",
    "log_future_dir_name",
    "parse_partition_dir_name",
]
