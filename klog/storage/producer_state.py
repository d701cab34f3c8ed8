"""Idempotent and transactional producer state of one partition, and its .snapshot files.

This module owns Kafka's ProducerStateManager for one partition: per producer id the
epoch, the metadata of the last 5 batches (duplicate detection, sequence checks), the
coordinator epoch and the first offset of an ongoing transaction; the partition's ongoing
and completed-but-unreplicated transactions (for the last stable offset); and the
``<20-digit offset>.snapshot`` files that persist it. Everything it needs is in v2 batch
headers, except the COMMIT/ABORT type of a transaction marker, read from the one record of
a control batch.

KIP-890 part 1 (transaction verification): before a leader appends the first batch of a
producer's transaction it asks the transaction coordinator whether the partition is in the
ongoing transaction; meanwhile the producer has a ``VerificationStateEntry`` here whose
``VerificationGuard`` the append must present. Any transactional append of the producer
(data, which starts the transaction here, or a marker, which ends it) removes the entry,
so a verification answered before a marker landed cannot let a late write open a
transaction the coordinator no longer knows (the ABA case of Kafka's VerificationGuard).
Entries live in memory only and expire with producer.id.expiration.ms.

Snapshot format, version 1 (Kafka's ProducerStateManager; big-endian)::

    version: int16 (= 1)
    crc: uint32                   CRC-32C of everything after this field
    producer_entries: int32 count, then per entry:
        producerId int64, epoch int16, lastSequence int32, lastOffset int64,
        offsetDelta int32, timestamp int64, coordinatorEpoch int32,
        currentTxnFirstOffset int64 (-1 when no transaction is ongoing)

Locking: not thread-safe; the owning PartitionLog's lock serialises every call.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from klog.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from klog.protocol.records.batch import (
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    BatchHeader,
    crc32c,
    read_batch_header,
)
from klog.storage.checkpoints import atomic_write_bytes
from klog.storage.files import PRODUCER_SNAPSHOT_FILE_SUFFIX, producer_snapshot_file_path

PRODUCER_SNAPSHOT_VERSION = 1
NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
INT32_MAX = 2**31 - 1

_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # version (2) + crc (4)
# A snapshot is small; this bound stops a corrupt count from reading a huge file.
MAX_SNAPSHOT_BYTES = 512 * 1024 * 1024


class CorruptSnapshotError(Exception):
    """A .snapshot file that fails its version, CRC or structure checks."""


class OutOfOrderSequenceError(KafkaError):
    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(KafkaError):
    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class TransactionCoordinatorFencedError(KafkaError):
    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class InvalidTxnStateError(KafkaError):
    error_code = ErrorCode.INVALID_TXN_STATE


# -- snapshot files ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer of a snapshot file, field for field."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def read_snapshot(path: Path | str) -> list[ProducerSnapshotEntry]:
    """Parse a producer snapshot file; CorruptSnapshotError when it is not one."""
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_SNAPSHOT_BYTES:
        raise CorruptSnapshotError(f"snapshot {path} is implausibly large ({size} bytes)")
    data = path.read_bytes()
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(
            f"snapshot {path} failed schema validation: {len(data)} bytes is shorter than "
            f"the {_HEAD.size}-byte header"
        )
    version, crc, count = _HEAD.unpack_from(data)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot {path} contained an unknown file version {version}")
    computed = crc32c(memoryview(data)[_CRC_START:])
    if crc != computed:
        raise CorruptSnapshotError(
            f"snapshot {path} is corrupt (CRC is no longer valid). Stored crc: {crc}. "
            f"Computed crc: {computed}"
        )
    body = len(data) - _HEAD.size
    if count < 0 or count * _ENTRY.size != body:
        raise CorruptSnapshotError(
            f"snapshot {path} failed schema validation: {count} entries do not fill {body} bytes"
        )
    return [
        ProducerSnapshotEntry(*fields_)
        for fields_ in _ENTRY.iter_unpack(memoryview(data)[_HEAD.size :])
    ]


def encode_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    entries = list(entries)
    buf = bytearray(_HEAD.size + _ENTRY.size * len(entries))
    _HEAD.pack_into(buf, 0, PRODUCER_SNAPSHOT_VERSION, 0, len(entries))
    for i, e in enumerate(entries):
        _ENTRY.pack_into(
            buf,
            _HEAD.size + i * _ENTRY.size,
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    struct.pack_into(">I", buf, 2, crc32c(memoryview(buf)[_CRC_START:]))
    return bytes(buf)


def write_snapshot(path: Path | str, entries: Iterable[ProducerSnapshotEntry]) -> None:
    """Write a snapshot atomically (temporary file, fsync, rename)."""
    path = Path(path)
    atomic_write_bytes(path, encode_snapshot(entries))


def list_snapshot_offsets(directory: Path) -> list[int]:
    """Offsets of the ``<offset>.snapshot`` files in ``directory``, ascending."""
    offsets = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(PRODUCER_SNAPSHOT_FILE_SUFFIX):
            prefix = name[: -len(PRODUCER_SNAPSHOT_FILE_SUFFIX)]
            if prefix.isdigit():
                offsets.append(int(prefix))
    return sorted(offsets)


# -- in-memory state --------------------------------------------------------------------------


class VerificationGuard:
    """One transaction verification's token (Kafka's VerificationGuard): equal only to
    itself. ``SENTINEL`` stands for "no verification started"; it verifies nothing."""

    __slots__ = ()
    SENTINEL: VerificationGuard

    def verify(self, request_guard: VerificationGuard | None) -> bool:
        """True when ``request_guard`` is this very guard and not the sentinel."""
        return self is not VerificationGuard.SENTINEL and request_guard is self

    def __repr__(self) -> str:
        return "VerificationGuard(SENTINEL)" if self is VerificationGuard.SENTINEL \
            else f"VerificationGuard({id(self):#x})"


VerificationGuard.SENTINEL = VerificationGuard()


@dataclass(slots=True)
class VerificationStateEntry:
    """A producer's verification in progress on this partition (Kafka's
    VerificationStateEntry): its guard, when it began, and the lowest sequence (with its
    epoch) seen while verifying -- a batch with a higher sequence is out of order until
    the lowest one is appended, so a retried first batch is not overtaken by the next."""

    timestamp: int
    lowest_sequence: int
    epoch: int
    guard: VerificationGuard = field(default_factory=VerificationGuard)

    def maybe_update_lowest_sequence_and_epoch(self, sequence: int, epoch: int) -> None:
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch = epoch
            self.lowest_sequence = sequence


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Sequence range and offsets of one appended batch (Kafka's BatchMetadata)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        if self.last_seq == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.last_seq - self.offset_delta) % (INT32_MAX + 1)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    """What the partition remembers about one producer id."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batch_metadata: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN)
    )

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return NO_SEQUENCE if self.is_empty else self.batch_metadata[0].first_seq

    @property
    def last_seq(self) -> int:
        return NO_SEQUENCE if self.is_empty else self.batch_metadata[-1].last_seq

    @property
    def last_data_offset(self) -> int:
        return -1 if self.is_empty else self.batch_metadata[-1].last_offset

    @property
    def last_offset_delta(self) -> int:
        return 0 if self.is_empty else self.batch_metadata[-1].offset_delta

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, delta: int, ts: int) -> None:
        if epoch != self.producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = epoch
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, delta, ts))
        self.last_timestamp = ts

    def find_duplicate_batch(self, header: BatchHeader) -> BatchMetadata | None:
        if header.producer_epoch != self.producer_epoch:
            return None
        for meta in self.batch_metadata:
            if meta.first_seq == header.base_sequence and meta.last_seq == header.last_sequence:
                return meta
        return None

    def to_snapshot_entry(self) -> ProducerSnapshotEntry:
        return ProducerSnapshotEntry(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            last_sequence=self.last_seq,
            last_offset=self.last_data_offset,
            offset_delta=self.last_offset_delta,
            timestamp=self.last_timestamp,
            coordinator_epoch=self.coordinator_epoch,
            current_txn_first_offset=(
                -1 if self.current_txn_first_offset is None else self.current_txn_first_offset
            ),
        )

    @classmethod
    def from_snapshot_entry(cls, e: ProducerSnapshotEntry) -> ProducerStateEntry:
        entry = cls(
            producer_id=e.producer_id,
            producer_epoch=e.producer_epoch,
            coordinator_epoch=e.coordinator_epoch,
            last_timestamp=e.timestamp,
            current_txn_first_offset=(
                e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None
            ),
        )
        if e.last_offset >= 0:
            entry.batch_metadata.append(
                BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp)
            )
        return entry


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker: its offsets and whether it aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def read_end_txn_marker(entry: memoryview | bytes) -> tuple[bool, int]:
    """(COMMIT?, coordinator epoch) of the transaction marker batch in ``entry``.

    The only record decoding producer state needs: the single record of a control batch
    (key: version int16, type int16; value: version int16, coordinatorEpoch int32).
    """
    from klog.protocol.records.control import EndTransactionMarker
    from klog.protocol.records.v2 import iter_records

    header = read_batch_header(entry, 0)
    for record in iter_records(entry, header):
        marker = EndTransactionMarker.from_record(record)
        return marker.control_type.name == "COMMIT", marker.coordinator_epoch
    raise CorruptRecordError("control batch without a record")


def control_record_is_commit(entry: memoryview | bytes) -> bool:
    """COMMIT (True) or ABORT (False) of the transaction marker batch in ``entry``."""
    return read_end_txn_marker(entry)[0]


class ProducerStateManager:
    """Producer state of one partition (Kafka's ProducerStateManager).

    ``map_end_offset`` is the offset up to which the log has been applied. Batches come
    in through ``update_from_batch`` (from recovery, follower appends and leader appends
    alike); leader appends first call ``check_append`` for the duplicate and sequence
    checks.
    """

    def __init__(
        self,
        log_dir: Path,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id, for transactions not yet ended / not yet stable.
        self.ongoing_txns: dict[int, int] = {}
        self.unreplicated_txns: dict[int, CompletedTxn] = {}
        # producer id -> its transaction verification in progress (KIP-890; memory only).
        self.verification_states: dict[int, VerificationStateEntry] = {}
        self.map_end_offset = 0
        self.last_snap_offset = 0

    # -- snapshots -------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        return list_snapshot_offsets(self.log_dir)

    @property
    def latest_snapshot_offset(self) -> int | None:
        offsets = self.snapshot_offsets()
        return offsets[-1] if offsets else None

    @property
    def oldest_snapshot_offset(self) -> int | None:
        offsets = self.snapshot_offsets()
        return offsets[0] if offsets else None

    def take_snapshot(self) -> Path | None:
        """Write ``<map_end_offset>.snapshot`` unless one was written at this offset."""
        if (
            self.map_end_offset == self.last_snap_offset
            and producer_snapshot_file_path(self.log_dir, self.map_end_offset).exists()
        ):
            return None
        path = producer_snapshot_file_path(self.log_dir, self.map_end_offset)
        write_snapshot(path, (p.to_snapshot_entry() for p in self.producers.values()))
        self.last_snap_offset = self.map_end_offset
        return path

    def delete_snapshots_before(self, offset: int) -> None:
        for snap in self.snapshot_offsets():
            if snap < offset:
                producer_snapshot_file_path(self.log_dir, snap).unlink(missing_ok=True)

    def _clear(self) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()
        self.unreplicated_txns.clear()

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop snapshots outside (log_start_offset, log_end_offset] and reload the latest.

        After this, ``map_end_offset`` says where replaying the log must start.
        """
        for snap in self.snapshot_offsets():
            if snap > log_end_offset or snap <= log_start_offset:
                producer_snapshot_file_path(self.log_dir, snap).unlink(missing_ok=True)
        if log_end_offset != self.map_end_offset:
            self._clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        for snap in reversed(self.snapshot_offsets()):
            path = producer_snapshot_file_path(self.log_dir, snap)
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError):
                # A snapshot is derived state: an unreadable one is replaced by replaying
                # the log from an older snapshot (Kafka deletes it the same way).
                path.unlink(missing_ok=True)
                continue
            for e in entries:
                entry = ProducerStateEntry.from_snapshot_entry(e)
                if not self._is_expired(entry, now_ms):
                    self._load_producer(entry)
            self.last_snap_offset = self.map_end_offset = snap
            return
        self.last_snap_offset = self.map_end_offset = log_start_offset

    def _load_producer(self, entry: ProducerStateEntry) -> None:
        self.producers[entry.producer_id] = entry
        if entry.current_txn_first_offset is not None:
            self.ongoing_txns[entry.current_txn_first_offset] = entry.producer_id

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._clear()
        for snap in self.snapshot_offsets():
            producer_snapshot_file_path(self.log_dir, snap).unlink(missing_ok=True)
        self.map_end_offset = self.last_snap_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        for first in [f for f in self.unreplicated_txns if f < log_start_offset]:
            del self.unreplicated_txns[first]
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        self.last_snap_offset = max(self.last_snap_offset, 0)

    # -- expiration ------------------------------------------------------------------------

    def _is_expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return (
            entry.current_txn_first_offset is None
            and now_ms - entry.last_timestamp >= self.producer_id_expiration_ms
        )

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms, and verifications begun
        that long ago and never appended (Kafka's removeExpiredProducers)."""
        expired = [pid for pid, e in self.producers.items() if self._is_expired(e, now_ms)]
        for pid in expired:
            del self.producers[pid]
        limit = self.producer_id_expiration_ms
        for pid in [pid for pid, v in self.verification_states.items()
                    if now_ms - v.timestamp >= limit]:
            del self.verification_states[pid]
        return len(expired)

    # -- transaction verification (KIP-890 part 1) -----------------------------------------

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        """Has ``producer_id`` a transaction this partition's log has data of, not ended?"""
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def maybe_create_verification_state_entry(self, producer_id: int, sequence: int,
                                              epoch: int, now_ms: int
                                              ) -> VerificationStateEntry:
        """The producer's verification entry, made if it has none; its lowest sequence
        follows ``sequence``/``epoch`` (Kafka's maybeCreateVerificationStateEntry)."""
        entry = self.verification_states.get(producer_id)
        if entry is None:
            entry = self.verification_states[producer_id] = VerificationStateEntry(
                now_ms, sequence, epoch)
        entry.maybe_update_lowest_sequence_and_epoch(sequence, epoch)
        return entry

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        """The guard of the producer's verification in progress, else the sentinel."""
        entry = self.verification_states.get(producer_id)
        return VerificationGuard.SENTINEL if entry is None else entry.guard

    def check_verified(self, header: BatchHeader, request_guard: VerificationGuard | None
                       ) -> None:
        """KIP-890's rule for a leader's append of a transactional data batch: either the
        producer has an ongoing transaction here already, or the append carries the guard
        of its verification in progress. INVALID_TXN_STATE otherwise -- the transaction
        was never added here, or a marker ended it since it was verified. ``request_guard``
        None: the broker does not verify (transaction.partition.verification.enable off,
        or a broker-internal append)."""
        if request_guard is None or not header.is_transactional or header.is_control:
            return
        pid = header.producer_id
        if self.has_ongoing_transaction(pid) or self.verification_guard(pid).verify(
                request_guard):
            return
        raise InvalidTxnStateError(
            f"Record was not part of an ongoing transaction (producer {pid}, epoch "
            f"{header.producer_epoch}, {self.log_dir.name})")

    # -- appends ---------------------------------------------------------------------------

    def find_duplicate_batch(self, header: BatchHeader) -> BatchMetadata | None:
        entry = self.producers.get(header.producer_id)
        return None if entry is None else entry.find_duplicate_batch(header)

    def check_append(self, header: BatchHeader) -> None:
        """A leader's checks on a client batch: epoch not stale, sequence in order.

        Raises InvalidProducerEpochError / OutOfOrderSequenceError (the client's error
        codes). Call ``find_duplicate_batch`` first: a duplicate is answered, not appended.
        """
        if not header.has_producer_id:
            return
        verifying = self.verification_states.get(header.producer_id)
        if verifying is not None and not header.is_control \
                and header.base_sequence != NO_SEQUENCE \
                and header.base_sequence > verifying.lowest_sequence:
            # Kafka's ProducerAppendInfo.checkSequence: a lower sequence still waits for
            # its verification; this one must not overtake it.
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {header.producer_id} at offset "
                f"{header.base_offset} in partition {self.log_dir.name}: "
                f"{header.base_sequence} (incoming seq. number), "
                f"{verifying.lowest_sequence} (earliest seen sequence)")
        entry = self.producers.get(header.producer_id)
        if entry is None:
            # As Kafka 3.x: with no state for the producer (its batches were removed by
            # retention or DeleteRecords, or its state expired) any sequence is accepted,
            # so a long-lived idempotent producer is not failed for what the broker forgot.
            return
        if header.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"epoch of producer {header.producer_id} at offset {header.base_offset} is "
                f"{header.producer_epoch}, which is smaller than the last seen epoch "
                f"{entry.producer_epoch}"
            )
        if header.is_control or header.base_sequence == NO_SEQUENCE:
            return
        if entry.current_txn_first_offset is not None and not header.is_transactional:
            # Kafka's ProducerAppendInfo.appendDataBatch: a producer in a transaction
            # writes transactional batches until its marker.
            raise InvalidTxnStateError(
                f"expected a transactional write from producer {header.producer_id} in "
                f"{self.log_dir.name}: its transaction from offset "
                f"{entry.current_txn_first_offset} is not ended")
        if header.producer_epoch != entry.producer_epoch:
            if header.base_sequence != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence number for new epoch of producer {header.producer_id} "
                    f"at offset {header.base_offset}: {header.producer_epoch} (request epoch), "
                    f"{header.base_sequence} (seq. number), {entry.producer_epoch} "
                    "(current producer epoch)"
                )
            return
        last_seq = entry.last_seq
        if last_seq == NO_SEQUENCE and header.base_sequence != 0:
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {header.producer_id} at offset "
                f"{header.base_offset}: found {header.base_sequence}, expected 0"
            )
        if last_seq != NO_SEQUENCE and not _in_sequence(last_seq, header.base_sequence):
            raise OutOfOrderSequenceError(
                f"out of order sequence number for producer {header.producer_id} at offset "
                f"{header.base_offset} in partition {self.log_dir.name}: "
                f"{header.base_sequence} (incoming seq. number), {last_seq} (current end "
                "sequence number)"
            )

    def check_marker(self, header: BatchHeader, entry_bytes: memoryview | bytes) -> None:
        """A coordinator's transaction marker (leader append): Kafka's appendEndTxnMarker
        checks. A marker of an older producer epoch is INVALID_PRODUCER_EPOCH; one of an
        older coordinator epoch than the producer's last marker, TRANSACTION_COORDINATOR_FENCED
        (a deposed coordinator still sending)."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return
        if header.producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"transaction marker of producer {header.producer_id} has epoch "
                f"{header.producer_epoch}, smaller than the last seen epoch "
                f"{entry.producer_epoch} in {self.log_dir.name}")
        _commit, coordinator_epoch = read_end_txn_marker(entry_bytes)
        if entry.coordinator_epoch > coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"transaction marker of producer {header.producer_id} has coordinator epoch "
                f"{coordinator_epoch}, older than the last seen {entry.coordinator_epoch} "
                f"in {self.log_dir.name}")

    def update_from_batch(
        self, header: BatchHeader, entry_bytes: memoryview | bytes | None = None
    ) -> CompletedTxn | None:
        """Apply one appended v2 batch (offsets already assigned); return the transaction
        a marker completed, if any. ``entry_bytes`` is needed for control batches only."""
        if not header.has_producer_id or header.base_offset is None:
            return None
        pid = header.producer_id
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if header.is_transactional and self.verification_states:
            # Data started the transaction here, or a marker ended it: either way the
            # verification is spent (Kafka's UnifiedLog.updateProducers).
            self.verification_states.pop(pid, None)
        if header.is_control:
            if entry_bytes is None:
                raise ValueError("a control batch needs its bytes to read the marker type")
            is_commit, coordinator_epoch = read_end_txn_marker(entry_bytes)
            first = entry.current_txn_first_offset
            # As Kafka: only a marker that ends data of this partition completes a
            # transaction (a marker for a partition the producer added but never wrote to
            # moves neither the last stable offset nor the transaction index).
            completed = None if first is None else CompletedTxn(
                pid, first, header.last_offset, not is_commit)
            if header.producer_epoch != entry.producer_epoch:
                entry.batch_metadata.clear()
                entry.producer_epoch = header.producer_epoch
            entry.coordinator_epoch = coordinator_epoch
            entry.current_txn_first_offset = None
            entry.last_timestamp = header.max_timestamp
            return completed
        entry.add_batch(
            header.producer_epoch,
            header.last_sequence,
            header.last_offset,
            header.last_offset - header.base_offset,
            header.max_timestamp,
        )
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = header.base_offset
            self.ongoing_txns[header.base_offset] = pid
        return None

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is done: the first other ongoing txn, else after it."""
        for first in sorted(self.ongoing_txns):
            if self.ongoing_txns[first] != completed.producer_id:
                return first
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        self.ongoing_txns.pop(completed.first_offset, None)
        self.unreplicated_txns[completed.first_offset] = completed

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        for first in [
            f for f, t in self.unreplicated_txns.items() if t.last_offset < high_watermark
        ]:
            del self.unreplicated_txns[first]

    @property
    def first_unstable_offset(self) -> int | None:
        candidates = list(self.ongoing_txns) + list(self.unreplicated_txns)
        return min(candidates) if candidates else None

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self.producers)
