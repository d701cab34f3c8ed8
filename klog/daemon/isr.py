"""IsrManager: the ISR of the partitions this broker leads, as Kafka's ReplicaManager's
ISR half (isr-expiration, AlterPartition's ZooKeeper-mode predecessor, isr-change
propagation).

Owns three things, all on the event loop thread:

- shrink: the isr-expiration pass (every replica.lag.time.max.ms / 2) asks each led
  partition to drop the followers that lag (``Partition.maybe_shrink_isr``);
- the writes: an ISR a partition proposes -- grown by a follower's fetch
  (``Partition.maybe_expand_isr``) or shrunk here -- is written with a compare-and-set on
  the partition state znode through ``IsrStore``, off the loop, and completed on the
  partition (``Partition.complete_isr_update``); a conflict with this very leadership's
  own state at a version it was not told adopts that state, any other waits for the
  controller's LeaderAndIsr;
- propagation: the partitions whose ISR changed are announced under
  /isr_change_notification in batches (Kafka's blackout of 5 s, at most every 60 s,
  checked every 2.5 s), which the controller turns into UpdateMetadata.

It reads the hosted partitions through the mapping it is given (the replica manager's),
and calls ``on_high_watermark_moved`` when a change moved a partition's high watermark:
waiting produces and fetches may then be answered. Without an ``IsrStore`` (a broker
alone) a proposed ISR is applied by the partition at once and nothing is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import BadVersionError, MetadataStore, MetastoreError, NoNodeError
from klog.daemon.partition import Partition

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

ISR_CHANGE_PROPAGATION_BLACKOUT_MS = 5_000
ISR_CHANGE_PROPAGATION_INTERVAL_MS = 60_000
ISR_CHANGE_CHECK_MS = 2_500


class IsrStore(Protocol):
    """Where a leader writes ISR changes (blocking calls: run off the event loop)."""

    def update_partition_state(self, topic: str, partition: int,
                               state: paths.LeaderIsrAndControllerEpoch,
                               zk_version: int) -> int | None:
        """Compare-and-set the partition state znode; its new version, None on a conflict."""

    def read_partition_state(self, topic: str, partition: int
                             ) -> tuple[paths.LeaderIsrAndControllerEpoch, int] | None:
        """The state znode and its version (None if absent)."""

    def notify_isr_change(self, tps: Iterable[TopicPartition]) -> None:
        """Tell the controller (/isr_change_notification/isr_change_<seq>)."""


class IsrChangeCounts(Protocol):
    """IsrShrinksPerSec / IsrExpandsPerSec (klog/daemon/metrics/counters.py IsrMetrics)."""

    shrinks: int

    def record_change(self, old: tuple[int, ...], new: tuple[int, ...]) -> None: ...


class MetastoreIsrStore:
    """IsrStore on the broker's metastore (ZooKeeper in cluster mode)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def update_partition_state(self, topic: str, partition: int,
                               state: paths.LeaderIsrAndControllerEpoch,
                               zk_version: int) -> int | None:
        try:
            stat = self.store.set(paths.partition_state_path(topic, partition), state.encode(),
                                  version=zk_version)
        except (BadVersionError, NoNodeError):
            return None
        return stat.version

    def read_partition_state(self, topic: str, partition: int
                             ) -> tuple[paths.LeaderIsrAndControllerEpoch, int] | None:
        try:
            data, stat = self.store.get(paths.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return paths.LeaderIsrAndControllerEpoch.decode(data), stat.version

    def notify_isr_change(self, tps: Iterable[TopicPartition]) -> None:
        data = paths.IsrChangeNotification(tuple(sorted(tps))).encode()
        self.store.create(paths.isr_change_path(), data, sequential=True, make_parents=True)


class IsrManager:
    """See the module docstring. ``partitions`` is the replica manager's map of hosted
    partitions (read, never changed here); ``clock`` gives ms."""

    def __init__(self, broker_id: int, partitions: Mapping[TopicPartition, Partition], *,
                 store: IsrStore | None, replica_lag_time_max_ms: int,
                 clock: Callable[[], int],
                 on_high_watermark_moved: Callable[[TopicPartition], None],
                 metrics: IsrChangeCounts | None = None) -> None:
        self.broker_id = broker_id
        self.partitions = partitions
        self.store = store
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.clock = clock
        self.on_high_watermark_moved = on_high_watermark_moved
        self.metrics = metrics
        # The partitions whose ISR changed since the last notification.
        self.changes: set[TopicPartition] = set()
        self.last_change_ms = 0
        self.last_propagation_ms = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._writes: set[asyncio.Task[None]] = set()

    @property
    def updater(self) -> Callable[[Partition, tuple[int, ...]], None] | None:
        """What a led partition proposes its ISR changes to (``Partition.isr_updater``):
        None when there is no store to write them to (the partition applies them)."""
        return self.propose if self.store is not None else None

    def propose(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        """Partition.isr_updater: write the change off the loop, then complete it."""
        state = paths.LeaderIsrAndControllerEpoch(
            leader=self.broker_id, leader_epoch=partition.leader_epoch, isr=new_isr,
            controller_epoch=partition.controller_epoch)
        task = asyncio.get_running_loop().create_task(
            self._write(partition, state, partition.zk_version))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, partition: Partition, state: paths.LeaderIsrAndControllerEpoch,
                     zk_version: int) -> None:
        store = self.store
        assert store is not None
        tp = (partition.topic, partition.partition)
        old_isr = partition.isr
        current = None
        try:
            new_version = await asyncio.to_thread(store.update_partition_state, tp[0], tp[1],
                                                  state, zk_version)
            if new_version is None:
                current = await asyncio.to_thread(store.read_partition_state, tp[0], tp[1])
        except (MetastoreError, OSError, ValueError) as exc:
            log.warning("writing the ISR %s of %s-%d failed: %s", list(state.isr), tp[0],
                        tp[1], exc)
            new_version = None
        moved = partition.complete_isr_update(state.isr, state.leader_epoch, new_version)
        if new_version is None:
            if (current is not None and current[0].leader == self.broker_id
                    and current[0].leader_epoch == partition.leader_epoch
                    and partition.pending_isr is None and partition.is_leader):
                # The znode is this very leadership's state at a version we were not told
                # (Kafka checks the data the same way): adopt it; the next fetch or
                # expiration pass proposes the change again on top of it.
                log.info("ISR %s of %s-%d not written: zk version %d is stale; adopting the "
                         "state znode (ISR %s, version %d)", list(state.isr), tp[0], tp[1],
                         zk_version, list(current[0].isr), current[1])
                partition.isr = current[0].isr
                partition.zk_version = current[1]
                moved = partition.maybe_increment_high_watermark()
            else:
                log.info("ISR %s of %s-%d not written: the state znode moved on (%s); "
                         "waiting for the controller's LeaderAndIsr", list(state.isr), tp[0],
                         tp[1], current[0] if current is not None else "absent")
        if new_version is not None and self.partitions.get(tp) is partition:
            if self.metrics is not None and partition.isr == state.isr:
                self.metrics.record_change(old_isr, state.isr)
            self.changes.add(tp)
            self.last_change_ms = self.clock()
        if moved:
            self.on_high_watermark_moved(tp)

    def maybe_shrink_isrs(self) -> int:
        """The isr-expiration pass: every led partition drops followers that lag."""
        now = self.clock()
        shrunk = 0
        for p in list(self.partitions.values()):
            if p.is_leader and len(p.isr) > 1 and p.maybe_shrink_isr(
                    self.replica_lag_time_max_ms, now):
                shrunk += 1
                if p.isr_updater is None:  # applied at once: the HW may have moved
                    if self.metrics is not None:
                        self.metrics.shrinks += 1
                    self.changes.add((p.topic, p.partition))
                    self.last_change_ms = now
                    self.on_high_watermark_moved((p.topic, p.partition))
        return shrunk

    async def maybe_propagate_isr_changes(self, force: bool = False) -> bool:
        """Write one /isr_change_notification for the ISR changes since the last one, when
        none happened for 5 s or the last notification is 60 s old (Kafka's rule)."""
        if not self.changes or self.store is None:
            return False
        now = self.clock()
        if not (force or now - self.last_change_ms > ISR_CHANGE_PROPAGATION_BLACKOUT_MS
                or now - self.last_propagation_ms > ISR_CHANGE_PROPAGATION_INTERVAL_MS):
            return False
        changes, self.changes = self.changes, set()
        try:
            await asyncio.to_thread(self.store.notify_isr_change, changes)
        except (MetastoreError, OSError) as exc:
            log.warning("writing an ISR change notification failed: %s", exc)
            self.changes |= changes
            return False
        self.last_propagation_ms = now
        return True

    def startup(self) -> None:
        """Start the isr-expiration (every replica.lag.time.max.ms / 2) and ISR change
        propagation tasks."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._isr_expiration()),
                       loop.create_task(self._isr_propagation())]

    async def _isr_expiration(self) -> None:
        while True:
            await asyncio.sleep(max(self.replica_lag_time_max_ms // 2, 10) / 1000)
            try:
                self.maybe_shrink_isrs()
            except Exception:
                log.exception("ISR expiration failed")

    async def _isr_propagation(self) -> None:
        while True:
            await asyncio.sleep(ISR_CHANGE_CHECK_MS / 1000)
            try:
                await self.maybe_propagate_isr_changes()
            except Exception:
                log.exception("ISR change propagation failed")

    def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        for task in list(self._writes):
            task.cancel()
