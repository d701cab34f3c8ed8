"""Leader elections on request and leader rebalancing: the controller's ElectLeaders
(PREFERRED and UNCLEAN), the /admin/preferred_replica_election znode of Kafka 2.x-era
tooling, and auto.leader.rebalance.enable.

Owned by the Controller (``controller.balance``): everything here runs inside the
controller's event task, one event at a time, so nothing is locked; the periodic check
and the znode watch only queue events (``EVENTS``) that the controller hands back to
``LeaderBalancer.process``.

Election rules (Kafka's PartitionLeaderElectionAlgorithms):
  - PREFERRED: only where the leader is not the first replica of the assignment; that
    replica must be alive (registered, not shutting down) and in the ISR, else
    PREFERRED_LEADER_NOT_AVAILABLE. The ISR stays as it is.
  - UNCLEAN: only where the partition has no live leader; the first live ISR replica,
    else the first live replica (the ISR becomes just that replica), else
    ELIGIBLE_LEADERS_NOT_AVAILABLE.
A partition that needs no election answers ELECTION_NOT_NEEDED, an unknown one
UNKNOWN_TOPIC_OR_PARTITION.

The automatic check is Kafka's checkAndTriggerAutoLeaderRebalance: partitions are
grouped by their preferred replica; for each broker, the share of its group that some
other broker leads is its imbalance; above leader.imbalance.per.broker.percentage, its
partitions whose preferred replica can lead (alive, in the ISR, not being reassigned)
move back. It runs every leader.imbalance.check.interval.seconds (the first time 5 s
after becoming controller, as Kafka, or sooner when the interval is shorter).

Writes are compare-and-set at the znode version the controller cached, batched in
multi transactions (a preferred election over 1,000 partitions is a handful of
ZooKeeper round trips); a batch that fails (a leader changed an ISR meanwhile) is
re-read from ZooKeeper and decided again one partition at a time, so the election never
picks a replica that fell out of the ISR.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import (
    ConnectionLossError,
    MetastoreError,
    NoNodeError,
    SessionExpiredError,
    SetOp,
    Watcher,
)
from klog.daemon.tasks import answer, returning
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.controller.context import ControllerContext

log = logging.getLogger(__name__)

PREFERRED, UNCLEAN = 0, 1
ELECTION_TYPES = {PREFERRED: "PREFERRED", UNCLEAN: "UNCLEAN"}

#: Event kinds the controller passes to ``LeaderBalancer.process``.
ELECT_LEADERS = "elect_leaders"
PREFERRED_REPLICA_ELECTION = "preferred_replica_election"
AUTO_LEADER_REBALANCE = "auto_leader_rebalance"
EVENTS = frozenset({ELECT_LEADERS, PREFERRED_REPLICA_ELECTION, AUTO_LEADER_REBALANCE})

# Kafka's names of the strategies, as its failure messages carry them.
_STRATEGY = {PREFERRED: "PreferredReplicaPartitionLeaderElectionStrategy",
             UNCLEAN: "OfflinePartitionLeaderElectionStrategy(true)"}
_FAILED = {PREFERRED: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
           UNCLEAN: ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}
NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."
UNKNOWN_MESSAGE = "The partition does not exist."

#: First automatic check after failover (KafkaController schedules it 5 s out).
FIRST_CHECK_DELAY_S = 5.0
# State znodes written per multi transaction: well under ZooKeeper's 1 MB jute.maxbuffer.
_BATCH = 200

TopicPartition = tuple[str, int]
Result = tuple[int, "str | None"]


# -- pure decisions ------------------------------------------------------------------------

def preferred_leader(replicas: Sequence[int], isr: Iterable[int],
                     alive: Iterable[int]) -> int | None:
    """Kafka's preferredReplicaPartitionLeaderElection: the first assigned replica, when
    it is alive and in the ISR; else None."""
    if not replicas:
        return None
    first = replicas[0]
    return first if first in set(isr) and first in set(alive) else None


def unclean_leader(replicas: Sequence[int], isr: Iterable[int],
                   alive: Iterable[int]) -> tuple[int, tuple[int, ...]] | None:
    """Kafka's offlinePartitionLeaderElection with unclean election allowed: (leader, new
    ISR) -- the first live ISR replica with the live ISR, else the first live replica
    alone; None when no replica is alive."""
    isr_set, alive_set = set(isr), set(alive)
    isr_alive = tuple(r for r in replicas if r in isr_set and r in alive_set)
    if isr_alive:
        return isr_alive[0], isr_alive
    live = [r for r in replicas if r in alive_set]
    return (live[0], (live[0],)) if live else None


def imbalance_ratios(assignments: Mapping[TopicPartition, Sequence[int]],
                     leaders: Mapping[TopicPartition, int]
                     ) -> dict[int, tuple[float, list[TopicPartition]]]:
    """Per preferred broker: (share of its partitions led elsewhere, those partitions).
    A partition without a known leader state counts in the share's denominator only (as
    Kafka's ``leadershipInfo.exists(...)``)."""
    groups: dict[int, list[TopicPartition]] = {}
    for tp, replicas in assignments.items():
        if replicas:
            groups.setdefault(replicas[0], []).append(tp)
    out: dict[int, tuple[float, list[TopicPartition]]] = {}
    for broker, tps in groups.items():
        elsewhere = [tp for tp in tps if tp in leaders and leaders[tp] != broker]
        out[broker] = (len(elsewhere) / len(tps), elsewhere)
    return out


def imbalanced_brokers(assignments: Mapping[TopicPartition, Sequence[int]],
                       leaders: Mapping[TopicPartition, int],
                       percentage: int) -> dict[int, list[TopicPartition]]:
    """Brokers whose imbalance ratio exceeds ``percentage`` / 100, with the partitions
    they should lead back (Kafka: ``imbalanceRatio > leaderImbalancePerBrokerPercentage
    / 100``, strictly greater)."""
    limit = percentage / 100
    return {b: tps for b, (ratio, tps) in imbalance_ratios(assignments, leaders).items()
            if ratio > limit and tps}


def failure_message(tp: TopicPartition, election_type: int) -> str:
    return (f"Failed to elect leader for partition {tp[0]}-{tp[1]} under strategy "
            f"{_STRATEGY[election_type]}")


# -- the controller side -------------------------------------------------------------------

class LeaderBalancer:
    def __init__(self, controller: ControllerContext) -> None:
        self.controller = controller
        self._timer: asyncio.TimerHandle | None = None

    # -- requests and events

    async def request(self, election_type: int, tps: list[TopicPartition] | None
                      ) -> dict[TopicPartition, Result]:
        """An ElectLeaders request: queued as a controller event; answers when done."""
        c = self.controller
        loop = asyncio.get_running_loop()
        future: asyncio.Future[dict[TopicPartition, Result]] = loop.create_future()
        c._queue.put_nowait((ELECT_LEADERS, (election_type, tps, future)))
        return await future

    async def process(self, kind: str, arg: Any) -> None:
        c = self.controller
        if kind == ELECT_LEADERS:
            election_type, tps, future = arg
            not_controller = {tp: (int(ErrorCode.NOT_CONTROLLER), None) for tp in tps or []}
            await answer(
                future, lambda: self.elect(election_type, tps) if c.active
                else returning(not_controller))
            return
        if not c.active:
            return
        if kind == PREFERRED_REPLICA_ELECTION:
            await self._on_znode()
        elif kind == AUTO_LEADER_REBALANCE:
            try:
                if c.config.current.auto_leader_rebalance_enable:
                    await self.check_and_trigger_auto_rebalance()
            finally:
                self._schedule(self._interval())

    async def on_failover(self) -> None:
        """Just became controller: run an election left pending in the znode, start the
        automatic checks."""
        await self._on_znode()
        if self.controller.config.current.auto_leader_rebalance_enable:
            self._schedule(min(FIRST_CHECK_DELAY_S, self._interval()))

    def on_resign(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _interval(self) -> float:
        return float(max(1, self.controller.config.current.leader_imbalance_check_interval_seconds))

    def _schedule(self, delay: float) -> None:
        self.on_resign()
        c = self.controller
        if c._closed:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, c._queue.put_nowait, (AUTO_LEADER_REBALANCE, None))

    # -- /admin/preferred_replica_election

    def _watch(self) -> Watcher:
        return self.controller._watcher(PREFERRED_REPLICA_ELECTION)

    async def _on_znode(self) -> None:
        """Kafka's ZkTriggered election: the znode's partitions move to their preferred
        replicas, then the znode goes (so the tool's next request can create it again)."""
        c = self.controller
        path = paths.PREFERRED_REPLICA_ELECTION
        stat = await c._call(c.store.exists, path, self._watch())
        if stat is None:
            return
        try:
            data, _ = await c._call(c.store.get, path)
        except NoNodeError:
            return
        try:
            request = paths.PreferredReplicaElection.decode(data)
        except ValueError as exc:
            log.warning("ignoring %s: %s", path, exc)
        else:
            results = await self.elect(PREFERRED, list(request.partitions))
            done = sorted(tp for tp, (code, _) in results.items() if code == 0)
            log.info("preferred replica election from %s: %d partitions moved%s", path,
                     len(done), "" if len(done) == len(results) else
                     f", {len(results) - len(done)} not")
        with contextlib.suppress(NoNodeError):
            await c._call(c.store.delete, path)

    # -- automatic rebalance

    async def check_and_trigger_auto_rebalance(self) -> dict[TopicPartition, Result]:
        c = self.controller
        assignments = {tp: tuple(c.topics[tp[0]].partitions[tp[1]].replicas)
                       for tp in c._all_partitions()}
        leaders = {tp: s.leader for tp, s in c.states.items()}
        reassigning = getattr(c, "is_reassigning", None)
        results: dict[TopicPartition, Result] = {}
        percentage = c.config.current.leader_imbalance_per_broker_percentage
        for broker, tps in sorted(imbalanced_brokers(assignments, leaders, percentage).items()):
            candidates = [tp for tp in tps
                          if not (reassigning is not None and reassigning(tp))
                          and self._can_lead(tp, assignments[tp])]
            if not candidates:
                continue
            log.info("leader imbalance of broker %d above %d%%: moving %d partitions back "
                     "to it", broker, percentage, len(candidates))
            results.update(await self.elect(PREFERRED, candidates))
        return results

    def _can_lead(self, tp: TopicPartition, replicas: Sequence[int]) -> bool:
        c = self.controller
        s = c.states.get(tp)
        if s is None:
            return False
        alive = [r for r in replicas if c._replica_online(r, tp)]
        return preferred_leader(replicas, s.isr, alive) is not None

    # -- elections

    async def elect(self, election_type: int, tps: Iterable[TopicPartition] | None
                    ) -> dict[TopicPartition, Result]:
        """Elect leaders of ``tps`` (None: every partition); per partition (error code,
        message). Runs inside the controller's event task."""
        c = self.controller
        if election_type not in ELECTION_TYPES:
            raise ValueError(f"unknown election type {election_type}")
        wanted = c._all_partitions() if tps is None else list(dict.fromkeys(tps))
        results: dict[TopicPartition, Result] = {}
        electable: list[TopicPartition] = []
        for tp in wanted:
            assignment = c.topics.get(tp[0])
            s = c.states.get(tp)
            if assignment is None or tp[1] not in assignment.partitions or s is None:
                results[tp] = (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), UNKNOWN_MESSAGE)
                continue
            replicas = tuple(assignment.partitions[tp[1]].replicas)
            if election_type == PREFERRED:
                needed = bool(replicas) and s.leader != replicas[0]
            else:
                needed = s.leader < 0 or not c._replica_online(s.leader, tp)
            if needed:
                electable.append(tp)
            else:
                results[tp] = (int(ErrorCode.ELECTION_NOT_NEEDED), NOT_NEEDED_MESSAGE)
        if electable:
            results.update(await self._run(election_type, electable))
        return results

    def _decide(self, election_type: int, s: PartitionState) -> PartitionState | None:
        """The new state of ``s`` under the election, or None when no replica qualifies."""
        c = self.controller
        replicas = tuple(c.topics[s.topic].partitions[s.partition].replicas)
        alive = [r for r in replicas if c._replica_online(r, (s.topic, s.partition))]
        if election_type == PREFERRED:
            leader = preferred_leader(replicas, s.isr, alive)
            if leader is None:
                return None
            isr = tuple(s.isr)
        else:
            chosen = unclean_leader(replicas, s.isr, alive)
            if chosen is None:
                return None
            leader, isr = chosen
        return replace(s, leader=leader, isr=isr, leader_epoch=s.leader_epoch + 1,
                       replicas=replicas, controller_epoch=c.epoch)

    async def _run(self, election_type: int, tps: list[TopicPartition]
                   ) -> dict[TopicPartition, Result]:
        c = self.controller
        started = time.perf_counter()
        intended: dict[TopicPartition, int] = {}
        updates: list[PartitionState] = []
        # Where the cache says no replica qualifies, ZooKeeper may know better (an ISR
        # expansion whose notification is still queued): those are decided again below.
        retry: list[TopicPartition] = []
        for tp in tps:
            new = self._decide(election_type, c.states[tp])
            if new is None:
                retry.append(tp)
            else:
                updates.append(new)
                intended[tp] = new.leader
        for start in range(0, len(updates), _BATCH):
            batch = updates[start:start + _BATCH]
            if not await c._call(self._write_batch, batch):
                retry += [(s.topic, s.partition) for s in batch]
        if retry:
            # Someone (a leader changing its ISR) wrote meanwhile, or the cache ruled the
            # partition out: decide again from the state as ZooKeeper has it now, one
            # partition at a time.
            fresh = await c._call(c._read_partition_states, retry)
            again: list[PartitionState] = []
            for tp in retry:
                c.states[tp] = fresh.get(tp, c.states[tp])
                new = self._decide(election_type, c.states[tp])
                if new is None:
                    intended.pop(tp, None)
                else:
                    again.append(new)
                    intended[tp] = new.leader
            if again:
                await c._call(c._update_states, again)
        written = time.perf_counter()
        changed = [c.states[tp] for tp in intended if tp in c.states]
        if changed:
            await self._send(changed)
        sent = time.perf_counter()
        results: dict[TopicPartition, Result] = {}
        for tp in tps:
            s = c.states.get(tp)
            if tp in intended and s is not None and s.leader == intended[tp]:
                results[tp] = (0, None)
            else:
                results[tp] = (int(_FAILED[election_type]), failure_message(tp, election_type))
        elected = sum(1 for code, _ in results.values() if code == 0)
        log.info("%s leader election: %d of %d partitions elected in %.0f ms (state "
                 "znodes %.0f ms, %d re-read; requests to brokers %.0f ms)",
                 ELECTION_TYPES[election_type], elected, len(tps),
                 (sent - started) * 1000, (written - started) * 1000, len(retry),
                 (sent - written) * 1000)
        return results

    async def _send(self, changed: list[PartitionState]) -> None:
        """LeaderAndIsr to the replicas, then UpdateMetadata to every broker (the
        controller's ``_send``), remote brokers first: the controller's own broker applies
        its share in-process, synchronously, which for 1,000 partitions takes a while;
        letting the channel's sender tasks write the remote requests before that lets the
        other brokers work on theirs at the same time."""
        c = self.controller
        by_broker: dict[int, list[PartitionState]] = {}
        for s in changed:
            for r in s.replicas:
                if r in c.live_brokers:
                    by_broker.setdefault(r, []).append(s)
        remote = [b for b in c.live_brokers if b != c.broker_id]
        for broker_id, mine in by_broker.items():
            if broker_id != c.broker_id:
                c._send_leader_and_isr(broker_id, mine)
        if remote:
            c._send_update_metadata(changed, remote)
            # Two turns of the loop: the woken sender tasks encode and write.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        if c.broker_id in by_broker:
            c._send_leader_and_isr(c.broker_id, by_broker[c.broker_id])
        if c.broker_id in c.live_brokers:
            c._send_update_metadata(changed, [c.broker_id])

    def _write_batch(self, batch: list[PartitionState]) -> bool:
        """One multi transaction of compare-and-set writes; False when any version moved
        (nothing is written then)."""
        c = self.controller
        ops = [SetOp(paths.partition_state_path(s.topic, s.partition),
                     paths.LeaderIsrAndControllerEpoch(
                         leader=s.leader, leader_epoch=s.leader_epoch, isr=tuple(s.isr),
                         controller_epoch=s.controller_epoch).encode(),
                     version=s.zk_version)
               for s in batch]
        try:
            stats = c.store.multi(ops)
        except (SessionExpiredError, ConnectionLossError):
            raise
        except MetastoreError:
            return False
        for s, stat in zip(batch, stats, strict=True):
            version = getattr(stat, "version", s.zk_version + 1)
            c.states[(s.topic, s.partition)] = replace(s, zk_version=version)
        return True
