"""IsrManager: the isr-expiration shrink, the compare-and-set writes of proposed ISRs
(success, a conflict with this leadership's own state adopted, another conflict left to
the controller), and the /isr_change_notification propagation rule."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path

from klog.daemon.isr import (
    ISR_CHANGE_PROPAGATION_BLACKOUT_MS,
    IsrManager,
)
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetastoreError
from klog.daemon.metrics.counters import IsrMetrics
from klog.daemon.partition import Partition
from klog.protocol.records.v2 import build_batch
from klog.storage.log import PartitionLog

TopicPartition = tuple[str, int]


class FakeStore:
    """An IsrStore in memory: one state znode per partition with its version."""

    def __init__(self) -> None:
        self.states: dict[TopicPartition, tuple[paths.LeaderIsrAndControllerEpoch, int]] = {}
        self.notified: list[set[TopicPartition]] = []
        self.fail_notify = False

    def update_partition_state(self, topic: str, partition: int,
                               state: paths.LeaderIsrAndControllerEpoch,
                               zk_version: int) -> int | None:
        current = self.states.get((topic, partition))
        if current is None or current[1] != zk_version:
            return None
        self.states[(topic, partition)] = (state, zk_version + 1)
        return zk_version + 1

    def read_partition_state(self, topic: str, partition: int
                             ) -> tuple[paths.LeaderIsrAndControllerEpoch, int] | None:
        return self.states.get((topic, partition))

    def notify_isr_change(self, tps: Iterable[TopicPartition]) -> None:
        if self.fail_notify:
            raise MetastoreError("ZooKeeper is away")
        self.notified.append(set(tps))


class Clock:
    def __init__(self) -> None:
        self.now = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now


def _leader(tmp_path: Path, isr: tuple[int, ...] = (1, 2)) -> Partition:
    p = Partition("t", 0, 1, PartitionLog(tmp_path / "t-0"))
    p.make_leader(PartitionState("t", 0, 1, 0, (1, 2), isr))
    return p


def _manager(partitions: dict[TopicPartition, Partition], store: FakeStore | None,
             clock: Clock, moved: list[TopicPartition],
             metrics: IsrMetrics | None = None) -> IsrManager:
    manager = IsrManager(1, partitions, store=store, replica_lag_time_max_ms=10_000,
                         clock=clock, on_high_watermark_moved=moved.append, metrics=metrics)
    for p in partitions.values():
        p.isr_updater = manager.updater
    return manager


def test_without_a_store_a_shrink_is_applied_and_counted_at_once(tmp_path: Path) -> None:
    p = _leader(tmp_path)
    p.append_records_to_leader(bytearray(build_batch([(0, None, b"v")])), 1, 1)
    clock, moved, metrics = Clock(), [], IsrMetrics()
    manager = _manager({("t", 0): p}, None, clock, moved, metrics)
    assert manager.updater is None
    assert manager.maybe_shrink_isrs() == 0  # the follower counts as caught up for now
    clock.now += 60_000
    assert manager.maybe_shrink_isrs() == 1
    assert p.isr == (1,) and p.high_watermark == 1
    assert manager.changes == {("t", 0)} and moved == [("t", 0)] and metrics.shrinks == 1


def test_a_proposed_isr_is_written_by_compare_and_set(tmp_path: Path) -> None:
    async def go() -> None:
        p = _leader(tmp_path)
        store = FakeStore()
        store.states[("t", 0)] = (paths.LeaderIsrAndControllerEpoch(1, 0, (1, 2), 0), 0)
        clock, moved, metrics = Clock(), [], IsrMetrics()
        manager = _manager({("t", 0): p}, store, clock, moved, metrics)
        clock.now += 60_000
        assert manager.maybe_shrink_isrs() == 1
        assert p.pending_isr == (1,) and p.isr == (1, 2)  # proposed, not yet in force
        await asyncio.sleep(0.2)  # the write runs in a worker thread
        assert p.isr == (1,) and p.pending_isr is None and p.zk_version == 1
        assert store.states[("t", 0)][0].isr == (1,)
        assert manager.changes == {("t", 0)} and metrics.shrinks == 1
        manager.shutdown()

    asyncio.run(go())


def test_a_conflict_with_this_leaderships_own_state_is_adopted(tmp_path: Path) -> None:
    async def go() -> None:
        p = _leader(tmp_path)
        store = FakeStore()
        # The znode holds this leadership's state at a version the partition was not told.
        store.states[("t", 0)] = (paths.LeaderIsrAndControllerEpoch(1, 0, (1, 2), 0), 5)
        clock, moved = Clock(), []
        manager = _manager({("t", 0): p}, store, clock, moved)
        clock.now += 60_000
        manager.maybe_shrink_isrs()
        await asyncio.sleep(0.2)
        assert (p.isr, p.zk_version, p.pending_isr) == ((1, 2), 5, None)
        assert not manager.changes  # nothing was written
        # Another leader's state is left for the controller's LeaderAndIsr.
        store.states[("t", 0)] = (paths.LeaderIsrAndControllerEpoch(2, 1, (2,), 0), 9)
        manager.maybe_shrink_isrs()
        await asyncio.sleep(0.2)
        assert (p.isr, p.zk_version, p.pending_isr) == ((1, 2), 5, None)
        manager.shutdown()

    asyncio.run(go())


def test_changes_are_announced_after_the_blackout_and_kept_on_failure() -> None:
    async def go() -> None:
        store, clock = FakeStore(), Clock()
        manager = _manager({}, store, clock, [])
        manager.changes = {("t", 0)}
        manager.last_change_ms = manager.last_propagation_ms = clock.now
        assert not await manager.maybe_propagate_isr_changes()  # within the blackout
        clock.now += ISR_CHANGE_PROPAGATION_BLACKOUT_MS + 1
        store.fail_notify = True
        assert not await manager.maybe_propagate_isr_changes()
        assert manager.changes == {("t", 0)}  # kept for the next pass
        store.fail_notify = False
        assert await manager.maybe_propagate_isr_changes()
        assert store.notified == [{("t", 0)}] and not manager.changes
        assert not await manager.maybe_propagate_isr_changes(force=True)  # nothing left

    asyncio.run(go())
