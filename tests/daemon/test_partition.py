"""Partition: the leader's high watermark over the ISR, follower tracking, ISR shrink and
expand (proposed, then completed), leader epochs, DelayedProduce's replica check."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from klog.daemon.metadata_cache import PartitionState
from klog.daemon.partition import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    Partition,
    UnknownLeaderEpochError,
)
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import iter_batch_headers
from klog.protocol.records.v2 import build_batch
from klog.storage.log import PartitionLog


def _batch(*values: bytes) -> bytearray:
    now = int(time.time() * 1000)
    return bytearray(build_batch([(now, None, v) for v in values]))


def _partition(tmp_path: Path, replicas: tuple[int, ...] = (1, 2, 3),
               isr: tuple[int, ...] | None = None, epoch: int = 0) -> Partition:
    plog = PartitionLog(tmp_path / "t-0")
    p = Partition("t", 0, 1, plog)
    p.make_leader(PartitionState("t", 0, 1, epoch, replicas, replicas if isr is None else isr))
    return p


def test_leader_alone_high_watermark_is_the_log_end_offset(tmp_path: Path) -> None:
    p = _partition(tmp_path, replicas=(1,))
    p.append_records_to_leader(_batch(b"a", b"b"), 1, 1)
    assert (p.log_end_offset, p.high_watermark) == (2, 2)


def test_high_watermark_is_the_smallest_log_end_offset_of_the_isr(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    p.append_records_to_leader(_batch(b"a", b"b", b"c"), -1, 1)
    assert p.high_watermark == 0  # followers' positions unknown (-1) after becoming leader
    now = int(time.time() * 1000)
    assert p.update_follower_fetch_state(2, 3, 3, now) is False  # 3 still unknown
    assert p.update_follower_fetch_state(3, 1, 3, now) is True
    assert p.high_watermark == 1
    assert p.update_follower_fetch_state(3, 3, 3, now) is True
    assert p.high_watermark == 3
    # Not a replica: None (Kafka answers such a fetch with empty records).
    assert p.update_follower_fetch_state(9, 3, 3, now) is None


def test_leader_epoch_is_stamped_and_cached(tmp_path: Path) -> None:
    p = _partition(tmp_path, replicas=(1,), epoch=4)
    p.append_records_to_leader(_batch(b"a"), 1, 1)
    p.make_leader(PartitionState("t", 0, 1, 7, (1,), (1,)))
    p.append_records_to_leader(_batch(b"b"), 1, 1)
    raw = p.log.read(0, 1 << 20).read_bytes()
    assert [h.partition_leader_epoch for h in iter_batch_headers(raw)] == [4, 7]
    assert [(e.epoch, e.start_offset) for e in p.log.leader_epoch_cache.entries] == \
        [(4, 0), (7, 1)]
    assert p.leader_epoch_start_offset == 1


def test_isr_expands_when_a_follower_reaches_the_high_watermark(tmp_path: Path) -> None:
    p = _partition(tmp_path, isr=(1, 2))
    p.append_records_to_leader(_batch(b"a", b"b"), 1, 1)
    now = int(time.time() * 1000)
    p.update_follower_fetch_state(2, 2, 2, now)
    assert p.high_watermark == 2
    p.update_follower_fetch_state(3, 1, 2, now)
    assert p.isr == (1, 2)  # behind the high watermark
    p.update_follower_fetch_state(3, 2, 2, now)
    assert p.isr == (1, 2, 3)


def test_isr_change_is_pending_until_written(tmp_path: Path) -> None:
    proposed: list[tuple[int, ...]] = []
    p = _partition(tmp_path, isr=(1, 2))
    p.isr_updater = lambda part, isr: proposed.append(isr)
    p.append_records_to_leader(_batch(b"a", b"b"), 1, 1)
    now = int(time.time() * 1000)
    p.update_follower_fetch_state(2, 2, 2, now)
    p.update_follower_fetch_state(3, 2, 2, now)
    assert proposed == [(1, 2, 3)]
    assert p.isr == (1, 2) and p.pending_isr == (1, 2, 3)
    assert p.maximal_isr == (1, 2, 3)
    # A second catch-up proposes nothing while one change is in flight.
    p.update_follower_fetch_state(3, 2, 2, now)
    assert proposed == [(1, 2, 3)]
    # A failed compare-and-set leaves the ISR as it was, and nothing pending.
    p.complete_isr_update((1, 2, 3), p.leader_epoch, None)
    assert (p.isr, p.pending_isr) == ((1, 2), None)
    p.update_follower_fetch_state(3, 2, 2, now)
    p.complete_isr_update((1, 2, 3), p.leader_epoch, 5)
    assert (p.isr, p.pending_isr, p.zk_version) == ((1, 2, 3), None, 5)
    # A write completing after a new leadership is ignored.
    p.append_records_to_leader(_batch(b"c"), 1, 1)  # the followers now lag
    assert p.maybe_shrink_isr(0, now + 10)
    assert p.pending_isr == (1,)
    p.make_leader(PartitionState("t", 0, 1, 1, (1, 2, 3), (1, 2, 3), zk_version=9))
    assert p.complete_isr_update((1,), 0, 10) is False
    assert (p.isr, p.zk_version) == ((1, 2, 3), 9)


def test_pending_shrink_keeps_the_high_watermark_on_the_old_isr(tmp_path: Path) -> None:
    p = _partition(tmp_path, replicas=(1, 2), isr=(1, 2))
    p.isr_updater = lambda part, isr: None
    p.append_records_to_leader(_batch(b"a", b"b"), 1, 1)
    assert p.maybe_shrink_isr(1000, int(time.time() * 1000) + 5000)
    assert p.pending_isr == (1,)
    assert p.high_watermark == 0  # the change is not written yet
    assert p.complete_isr_update((1,), p.leader_epoch, 3) is True
    assert (p.isr, p.high_watermark) == ((1,), 2)


def test_isr_shrinks_after_the_lag_time(tmp_path: Path) -> None:
    p = _partition(tmp_path)
    p.append_records_to_leader(_batch(b"a"), 1, 1)
    t0 = int(time.time() * 1000)
    p.update_follower_fetch_state(2, 1, 1, t0)  # caught up at t0
    p.update_follower_fetch_state(3, 0, 1, t0)  # behind
    assert p.out_of_sync_replicas(10_000, t0 + 5_000) == []  # 3 counts from the election
    assert p.out_of_sync_replicas(10_000, t0 + 20_000) == [3]
    p.append_records_to_leader(_batch(b"b"), 1, 1)
    assert p.out_of_sync_replicas(10_000, t0 + 20_000) == [2, 3]
    # A follower at the log end offset is in sync however long ago it fetched.
    p.update_follower_fetch_state(2, 2, 2, t0 + 1)
    assert p.out_of_sync_replicas(10_000, t0 + 60_000) == [3]
    assert p.maybe_shrink_isr(10_000, t0 + 60_000)
    assert p.isr == (1, 2)


def test_follower_catching_up_to_the_previous_fetch_end_counts_as_caught_up(
        tmp_path: Path) -> None:
    p = _partition(tmp_path, replicas=(1, 2), isr=(1, 2))
    t0 = int(time.time() * 1000) + 100_000
    p.append_records_to_leader(_batch(b"a"), 1, 1)
    p.update_follower_fetch_state(2, 0, 1, t0)  # saw the leader at 1
    p.append_records_to_leader(_batch(b"b"), 1, 1)
    p.update_follower_fetch_state(2, 1, 2, t0 + 500)  # reached 1: caught up as of t0
    assert p.remote_replicas[2].last_caught_up_time_ms == t0


def test_min_insync_replicas_and_delayed_produce_checks(tmp_path: Path) -> None:
    p = _partition(tmp_path, isr=(1, 2))
    with pytest.raises(NotEnoughReplicasError):
        p.append_records_to_leader(_batch(b"a"), -1, 3)
    info = p.append_records_to_leader(_batch(b"a"), -1, 2)
    required = info.last_offset + 1
    assert p.check_enough_replicas_reach_offset(required, 2) == (False, 0)
    p.update_follower_fetch_state(2, required, required, int(time.time() * 1000))
    assert p.check_enough_replicas_reach_offset(required, 2) == (True, 0)
    # The ISR shrank below min.insync.replicas before the HW got there.
    p.append_records_to_leader(_batch(b"b"), 1, 2)
    p.isr = (1,)
    p.maybe_increment_high_watermark()
    assert p.check_enough_replicas_reach_offset(2, 2) == \
        (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    p.make_follower(PartitionState("t", 0, 2, 1, (1, 2, 3), (2,)))
    assert p.check_enough_replicas_reach_offset(2, 2) == \
        (True, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    with pytest.raises(NotLeaderOrFollowerError):
        p.append_records_to_leader(_batch(b"c"), 1, 1)


def test_leader_epoch_fencing(tmp_path: Path) -> None:
    p = _partition(tmp_path, epoch=3)
    p.check_leader_epoch(3)
    p.check_leader_epoch(-1)
    with pytest.raises(FencedLeaderEpochError):
        p.check_leader_epoch(2)
    with pytest.raises(UnknownLeaderEpochError):
        p.check_leader_epoch(4)


def test_follower_high_watermark_is_min_of_leader_and_own(tmp_path: Path) -> None:
    leader = _partition(tmp_path / "a", replicas=(1, 2))
    leader.append_records_to_leader(_batch(b"a", b"b", b"c"), 1, 1)
    follower = Partition("t", 0, 2, PartitionLog(tmp_path / "b" / "t-0"))
    follower.make_follower(PartitionState("t", 0, 1, 0, (1, 2), (1, 2)))
    data = leader.log.read(0, 1 << 20).read_bytes()
    follower.append_records_to_follower(data, 10, 0)
    assert (follower.log_end_offset, follower.high_watermark) == (3, 3)
    follower.update_follower_high_watermark(2)
    assert follower.high_watermark == 2
    assert follower.log.read(0, 1 << 20).read_bytes() == data


def test_a_leader_that_stays_keeps_its_followers_positions_across_an_epoch(
        tmp_path: Path) -> None:
    # The controller takes dead broker 3 out of the ISR (a new leader epoch, same leader):
    # the high watermark moves over the ISR left at once, as Kafka's makeLeader, instead of
    # waiting for broker 2's next fetch.
    p = _partition(tmp_path)
    p.append_records_to_leader(_batch(b"a", b"b"), -1, 2)
    now = int(time.time() * 1000)
    p.update_follower_fetch_state(2, 2, 2, now)
    assert p.high_watermark == 0  # broker 3 (in the ISR) never fetched
    p.make_leader(PartitionState("t", 0, 1, 1, (1, 2, 3), (1, 2)))
    assert p.high_watermark == 2
    assert p.remote_replicas[2].log_end_offset == 2
    assert p.remote_replicas[3].last_caught_up_time_ms == 0  # out of the ISR: not caught up
    # A new leadership (after following) knows nothing of the followers' positions.
    p.make_follower(PartitionState("t", 0, 2, 2, (1, 2, 3), (1, 2)))
    p.make_leader(PartitionState("t", 0, 1, 3, (1, 2, 3), (1, 2)))
    assert p.remote_replicas[2].log_end_offset == -1


def test_a_leader_loaded_without_a_checkpointed_high_watermark_waits_for_its_isr(
        tmp_path: Path) -> None:
    """After a crash, a log with no replication-offset-checkpoint entry loads with its high
    watermark at the log start (LogManager), so as leader it serves only what its ISR
    followers have fetched; a one-replica ISR (standalone) serves everything at once."""
    from klog.storage.log_manager import LogManager

    manager = LogManager([tmp_path / "logs"]).startup()
    for partition in (0, 1):
        manager.get_or_create_log("t", partition).append_as_leader(
            _batch(b"a", b"b", b"c", b"d"), 0)
    manager._unlock_all()  # kill -9 before any checkpoint
    reloaded = LogManager([tmp_path / "logs"]).startup()
    try:
        shared = reloaded.get_log("t", 0)
        alone = reloaded.get_log("t", 1)
        assert shared is not None and alone is not None
        p = Partition("t", 0, 1, shared)
        p.make_leader(PartitionState("t", 0, 1, 1, (1, 2, 3), (1, 2, 3)))
        assert p.high_watermark == 0  # the followers may have none of it
        now = int(time.time() * 1000)
        p.update_follower_fetch_state(2, 2, 4, now)
        p.update_follower_fetch_state(3, 4, 4, now)
        assert p.high_watermark == 2
        p.update_follower_fetch_state(2, 4, 4, now)
        assert p.high_watermark == 4
        single = Partition("t", 1, 1, alone)
        single.make_leader(PartitionState("t", 1, 1, 1, (1,), (1,)))
        assert single.high_watermark == 4
    finally:
        reloaded.close()
