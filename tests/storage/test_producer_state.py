"""Tests for klog.storage.producer_state: snapshot files and producer bookkeeping."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from klog.protocol.records.batch import read_batch_header
from klog.storage.files import producer_snapshot_file_path
from klog.storage.producer_state import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerSnapshotEntry,
    ProducerStateManager,
    VerificationGuard,
    encode_snapshot,
    read_snapshot,
    write_snapshot,
)

from .batches import build_batch, build_control_batch

ENTRIES = [
    ProducerSnapshotEntry(1, 2, 3, 100, 3, 1_600_000_000_000, 5, 97),
    ProducerSnapshotEntry(11, 12, -1, -1, 0, 123456, -1, -1),
]


def header(data: bytes):
    return read_batch_header(data, 0)


def test_snapshot_round_trip(tmp_path: Path) -> None:
    path = producer_snapshot_file_path(tmp_path, 42)
    assert path.name == "00000000000000000042.snapshot"
    write_snapshot(path, ENTRIES)
    assert read_snapshot(path) == ENTRIES
    data = path.read_bytes()
    assert len(data) == 10 + 46 * 2
    assert struct.unpack_from(">hIi", data)[0] == 1
    assert not list(tmp_path.glob("*.tmp"))


def test_empty_snapshot_bytes_match_kafka() -> None:
    # The corpus's snapshots of partitions without producers are exactly these 10 bytes.
    assert encode_snapshot([]) == bytes.fromhex("000148674bc700000000")


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d[:5], "shorter than"),
        (lambda d: b"\x00\x02" + d[2:], "unknown file version"),
        (lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:], "CRC"),
    ],
)
def test_corrupt_snapshots_are_rejected(tmp_path: Path, mutate, message: str) -> None:
    path = tmp_path / "00000000000000000001.snapshot"
    path.write_bytes(mutate(encode_snapshot(ENTRIES)))
    with pytest.raises(CorruptSnapshotError, match=message):
        read_snapshot(path)


def test_snapshot_count_must_match_body(tmp_path: Path) -> None:
    data = bytearray(encode_snapshot(ENTRIES))
    struct.pack_into(">i", data, 6, 1000)  # count lies; fix the CRC so it passes that check
    from klog.protocol.records.batch import crc32c

    struct.pack_into(">I", data, 2, crc32c(memoryview(data)[6:]))
    path = tmp_path / "00000000000000000001.snapshot"
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="do not fill"):
        read_snapshot(path)


def test_sequence_checks_and_duplicates(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    b0 = build_batch(0, count=3, producer_id=7, producer_epoch=1, base_sequence=0)
    state.check_append(header(b0))
    state.update_from_batch(header(b0))
    assert state.producers[7].last_seq == 2
    assert state.find_duplicate_batch(header(b0)) is not None
    gap = build_batch(3, count=1, producer_id=7, producer_epoch=1, base_sequence=5)
    with pytest.raises(OutOfOrderSequenceError):
        state.check_append(header(gap))
    fenced = build_batch(3, count=1, producer_id=7, producer_epoch=0, base_sequence=3)
    with pytest.raises(InvalidProducerEpochError):
        state.check_append(header(fenced))
    new_epoch = build_batch(3, count=1, producer_id=7, producer_epoch=2, base_sequence=0)
    state.check_append(header(new_epoch))
    # A producer the partition has no state for (retention removed its batches) may
    # continue at any sequence, as in Kafka 3.x.
    unknown = build_batch(3, count=1, producer_id=8, producer_epoch=0, base_sequence=4)
    state.check_append(header(unknown))
    # Only the last 5 batches are remembered.
    offset, seq = 3, 3
    for _ in range(6):
        b = build_batch(offset, count=1, producer_id=7, producer_epoch=1, base_sequence=seq)
        state.check_append(header(b))
        state.update_from_batch(header(b))
        offset, seq = offset + 1, seq + 1
    assert state.find_duplicate_batch(header(b0)) is None
    assert len(state.producers[7].batch_metadata) == 5


def test_transactions_and_snapshot_reload(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    t1 = build_batch(0, count=2, producer_id=1, producer_epoch=0, base_sequence=0, attributes=0x10)
    t2 = build_batch(2, count=1, producer_id=2, producer_epoch=0, base_sequence=0, attributes=0x10)
    for b in (t1, t2):
        assert state.update_from_batch(header(b), b) is None
    assert state.first_unstable_offset == 0
    abort = build_control_batch(3, commit=False, producer_id=1, producer_epoch=0)
    completed = state.update_from_batch(header(abort), abort)
    assert completed is not None and completed.is_aborted
    assert (completed.first_offset, completed.last_offset) == (0, 3)
    assert state.last_stable_offset(completed) == 2  # producer 2's transaction is open
    state.complete_txn(completed)
    state.update_map_end_offset(3)
    path = state.take_snapshot()
    commit = build_control_batch(4, commit=True, producer_id=2, producer_epoch=0)
    done = state.update_from_batch(header(commit), commit)
    assert done is not None and not done.is_aborted
    state.complete_txn(done)
    assert state.first_unstable_offset == 0  # completed, not yet replicated
    state.on_high_watermark_updated(5)
    assert state.first_unstable_offset is None
    assert path is not None and path.name == "00000000000000000003.snapshot"
    reloaded = ProducerStateManager(tmp_path)
    reloaded.truncate_and_reload(0, 3, now_ms=1_600_000_000_000)
    assert reloaded.map_end_offset == 3
    assert reloaded.producers[2].current_txn_first_offset == 2
    assert reloaded.ongoing_txns == {2: 2}
    # Out-of-range snapshots are dropped.
    reloaded.truncate_and_reload(0, 2, now_ms=1_600_000_000_000)
    assert not path.exists() and reloaded.map_end_offset == 0


def test_corrupt_snapshot_falls_back_to_older(tmp_path: Path) -> None:
    write_snapshot(producer_snapshot_file_path(tmp_path, 5), ENTRIES[:1])
    producer_snapshot_file_path(tmp_path, 9).write_bytes(b"garbage!!!!!")
    state = ProducerStateManager(tmp_path)
    state.truncate_and_reload(0, 10, now_ms=1_600_000_000_000)
    assert state.map_end_offset == 5 and 1 in state.producers


def test_corpus_snapshots(kafka_corpus: Path) -> None:
    snapshots = sorted(kafka_corpus.glob("*/*.snapshot"))
    assert len(snapshots) == 9
    for path in snapshots:
        assert read_snapshot(path) == []  # no idempotent producers in the corpus


# -- transaction verification (KIP-890 part 1) ------------------------------------------------

TXN = 0x10


def test_a_guard_verifies_only_itself_and_the_sentinel_nothing() -> None:
    guard, other = VerificationGuard(), VerificationGuard()
    assert guard.verify(guard)
    assert not guard.verify(other) and not guard.verify(None)
    assert not guard.verify(VerificationGuard.SENTINEL)
    assert not VerificationGuard.SENTINEL.verify(VerificationGuard.SENTINEL)


def test_a_transactional_batch_needs_an_ongoing_transaction_or_its_guard(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path)
    first = build_batch(0, count=1, producer_id=5, producer_epoch=0, base_sequence=0,
                        attributes=TXN)
    # Not verified at all (None): nothing is checked, as with verification off.
    state.check_verified(header(first), None)
    # Verification on, no guard of its own: refused.
    with pytest.raises(InvalidTxnStateError, match="not part of an ongoing transaction"):
        state.check_verified(header(first), VerificationGuard.SENTINEL)
    entry = state.maybe_create_verification_state_entry(5, 0, 0, now_ms=1000)
    with pytest.raises(InvalidTxnStateError):
        state.check_verified(header(first), VerificationGuard())  # another verification's
    state.check_verified(header(first), entry.guard)
    # The same entry while it waits; its guard is what the append presents.
    assert state.maybe_create_verification_state_entry(5, 0, 0, now_ms=2000) is entry
    assert state.verification_guard(5) is entry.guard
    # The first transactional append spends the verification; from then on the
    # transaction is ongoing here and needs none.
    state.update_from_batch(header(first), first)
    assert state.verification_states == {}
    assert state.has_ongoing_transaction(5)
    second = build_batch(1, count=1, producer_id=5, producer_epoch=0, base_sequence=1,
                         attributes=TXN)
    state.check_verified(header(second), VerificationGuard.SENTINEL)
    # Idempotent (non-transactional) and control batches are not this check's.
    plain = build_batch(2, count=1, producer_id=6, producer_epoch=0, base_sequence=0)
    state.check_verified(header(plain), VerificationGuard.SENTINEL)


def test_a_marker_voids_a_verification_in_progress(tmp_path: Path) -> None:
    """The ABA case: the coordinator confirmed the partition, then aborted the transaction
    (its marker landed) before the append: the guard answered before the marker no longer
    lets the late write in."""
    state = ProducerStateManager(tmp_path)
    entry = state.maybe_create_verification_state_entry(5, 0, 0, now_ms=1000)
    abort = build_control_batch(0, commit=False, producer_id=5, producer_epoch=0)
    state.update_from_batch(header(abort), abort)
    assert state.verification_guard(5) is VerificationGuard.SENTINEL
    late = build_batch(1, count=1, producer_id=5, producer_epoch=0, base_sequence=0,
                       attributes=TXN)
    with pytest.raises(InvalidTxnStateError):
        state.check_verified(header(late), entry.guard)


def test_a_verification_keeps_the_lowest_sequence_waiting(tmp_path: Path) -> None:
    """A higher sequence may not overtake a lower one still being verified (Kafka's
    VerificationStateEntry); a new epoch starts over."""
    state = ProducerStateManager(tmp_path)
    state.maybe_create_verification_state_entry(5, 3, 0, now_ms=1000)
    state.maybe_create_verification_state_entry(5, 0, 0, now_ms=1000)
    ahead = build_batch(0, count=1, producer_id=5, producer_epoch=0, base_sequence=3,
                        attributes=TXN)
    with pytest.raises(OutOfOrderSequenceError, match="earliest seen sequence"):
        state.check_append(header(ahead))
    lowest = build_batch(0, count=1, producer_id=5, producer_epoch=0, base_sequence=0,
                         attributes=TXN)
    state.check_append(header(lowest))
    entry = state.maybe_create_verification_state_entry(5, 7, 1, now_ms=1000)
    assert (entry.epoch, entry.lowest_sequence) == (1, 7)


def test_verifications_never_appended_expire(tmp_path: Path) -> None:
    state = ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)
    state.maybe_create_verification_state_entry(5, 0, 0, now_ms=10_000)
    state.remove_expired_producers(10_999)
    assert 5 in state.verification_states
    state.remove_expired_producers(11_000)
    assert state.verification_states == {}
