"""Partition reassignment in the controller (Kafka's KIP-455, ZooKeeper mode).

A reassignment moves a partition from its origin replicas (ORS) to target replicas (TRS):

1. The topic znode gets the full replica set RS = TRS + ORS (target first, then the
   origin replicas not in the target), adding_replicas AR = TRS - ORS and
   removing_replicas RR = ORS - TRS. Replicas a previous reassignment of the partition
   was adding and the new one no longer needs are stopped and deleted.
2. Every replica of RS gets a LeaderAndIsr with RS at a new leader epoch: the adding
   replicas start following the leader.
3. When the ISR (read from the partition's state znode, which the leader writes, and
   watched while the reassignment runs) holds every target replica: the state gets
   replicas TRS, an ISR without RR and, when the leader is being removed or is dead, the
   first target replica alive and in the ISR as leader, at a new leader epoch; RR get a
   StopReplica with delete; the topic znode gets RS = TRS with no AR/RR; the partition
   leaves /admin/reassign_partitions (deleted when empty); every broker gets
   UpdateMetadata.

Cancelling reassigns to the origin replicas (RS - AR), which completes at once. Growing
or shrinking the replication factor is a reassignment to a longer or shorter list. What
is in flight lives in the topic znodes, so a new controller resumes it on failover (and
re-reads /admin/reassign_partitions, the path Kafka 2.x tooling writes).

Owned by the Controller: every method runs inside the controller's event task (one event
at a time), so nothing here is locked; metastore calls go through ``controller._call``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import BadVersionError, NoNodeError
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.controller.context import ControllerContext

log = logging.getLogger(__name__)

_P = ParamSpec("_P")
_T = TypeVar("_T")

TopicPartition = tuple[str, int]
Result = tuple[int, str | None]

_NONE: Result = (0, None)


# -- the replica-set arithmetic (Kafka's ReplicaAssignment) --------------------------------

def origin_replicas(ra: paths.ReplicaAssignment) -> tuple[int, ...]:
    """ORS: what the partition had before the reassignment (RS - AR)."""
    return tuple(r for r in ra.replicas if r not in ra.adding_replicas)


def target_replicas(ra: paths.ReplicaAssignment) -> tuple[int, ...]:
    """TRS: what the partition will have after it (RS - RR)."""
    return tuple(r for r in ra.replicas if r not in ra.removing_replicas)


def is_being_reassigned(ra: paths.ReplicaAssignment) -> bool:
    return bool(ra.adding_replicas or ra.removing_replicas)


def reassign_to(ra: paths.ReplicaAssignment, target: Sequence[int]) -> paths.ReplicaAssignment:
    """The assignment while moving from ``ra``'s origin replicas to ``target``."""
    origin = origin_replicas(ra)
    full = tuple(dict.fromkeys((*target, *origin)))
    return paths.ReplicaAssignment(
        full,
        tuple(r for r in full if r not in origin),
        tuple(r for r in full if r not in target),
    )


class ReassignmentManager:
    def __init__(self, controller: ControllerContext) -> None:
        self.controller = controller
        # Partitions whose state znode carries our watch (one watch each, re-armed on fire).
        self._watched: set[TopicPartition] = set()

    # -- queries (run on the event loop; read the controller's cache) -----------------------

    def _assignment(self, tp: TopicPartition) -> paths.ReplicaAssignment | None:
        topic = self.controller.topics.get(tp[0])
        return None if topic is None else topic.partitions.get(tp[1])

    def is_reassigning(self, tp: TopicPartition) -> bool:
        ra = self._assignment(tp)
        return ra is not None and is_being_reassigned(ra)

    def ongoing(self) -> dict[TopicPartition, paths.ReplicaAssignment]:
        return {(t, p): ra for t, a in self.controller.topics.items()
                for p, ra in sorted(a.partitions.items()) if is_being_reassigned(ra)}

    def list(self, tps: Iterable[TopicPartition] | None
             ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """Ongoing reassignments among ``tps`` (None: all): replicas, adding, removing."""
        if tps is None:
            chosen = self.ongoing()
        else:
            chosen = {}
            for tp in tps:
                ra = self._assignment(tp)
                if ra is not None and is_being_reassigned(ra):
                    chosen[tp] = ra
        return {tp: (list(ra.replicas), list(ra.adding_replicas), list(ra.removing_replicas))
                for tp, ra in chosen.items()}

    # -- starting and cancelling -----------------------------------------------------------

    def validate(self, tp: TopicPartition, target: Sequence[int] | None,
                 allow_rf_change: bool = True) -> Result | None:
        """Kafka's checks of one requested reassignment; None when it may go ahead."""
        ra = self._assignment(tp)
        if ra is None or tp[0] in self.controller.deletion_waiting:
            # A topic queued for deletion takes no reassignment (nor cancellation), as in
            # Kafka, which answers the same.
            return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "The partition does not exist."
        if target is None:
            if not is_being_reassigned(ra):
                return (int(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS),
                        f"No reassignment in progress for {tp[0]}-{tp[1]}.")
            return None
        replicas = list(target)
        if not replicas:
            return (int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                    "Empty replica list specified in partition reassignment.")
        if len(set(replicas)) != len(replicas):
            return (int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                    f"Duplicate replica ids in partition reassignment replica list: {replicas}")
        if any(r < 0 for r in replicas):
            return (int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                    f"Invalid broker id in replica list: {replicas}")
        if not allow_rf_change and len(replicas) != len(origin_replicas(ra)):
            return (int(ErrorCode.INVALID_REPLICATION_FACTOR),
                    f"The replication factor is changed from {len(origin_replicas(ra))} to "
                    f"{len(replicas)} but allowReplicationFactorChange is false.")
        adding = reassign_to(ra, replicas).adding_replicas
        live = set(self.controller.live_brokers)
        if not set(adding) <= live:
            return (int(ErrorCode.INVALID_REPLICA_ASSIGNMENT),
                    f"Replica assignment has brokers that are not alive. Replica list: "
                    f"{list(adding)}, live broker list: {sorted(live)}")
        return None

    async def alter(self, targets: Mapping[TopicPartition, Sequence[int] | None],
                    allow_rf_change: bool = True) -> dict[TopicPartition, Result]:
        """AlterPartitionReassignments: start (or replace) a reassignment per partition;
        a None target cancels the ongoing one."""
        results: dict[TopicPartition, Result] = {}
        started: dict[TopicPartition, paths.ReplicaAssignment] = {}
        for tp, target in targets.items():
            error = self.validate(tp, target, allow_rf_change)
            if error is not None:
                results[tp] = error
                continue
            ra = self._assignment(tp)
            assert ra is not None
            goal = origin_replicas(ra) if target is None else tuple(target)
            started[tp] = reassign_to(ra, goal)
        for tp, new in started.items():
            results[tp] = await self._start(tp, new)
        # A reassignment through the API replaces one from /admin/reassign_partitions.
        if started:
            await self._call(self._remove_from_legacy_znode, set(started))
        return results

    async def _start(self, tp: TopicPartition, new: paths.ReplicaAssignment) -> Result:
        c = self.controller
        current = self._assignment(tp)
        if current is None:
            return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "The partition does not exist."
        try:
            unneeded = tuple(r for r in current.replicas if r not in new.replicas)
            if is_being_reassigned(new) or new != current:
                await self._write_assignment(tp, new)
            if unneeded:
                log.info("reassignment of %s-%d: stopping replicas %s no longer needed",
                         tp[0], tp[1], list(unneeded))
            if is_being_reassigned(new):
                log.info("reassignment of %s-%d started: replicas %s, adding %s, removing %s",
                         tp[0], tp[1], list(new.replicas), list(new.adding_replicas),
                         list(new.removing_replicas))
            state = await self._fresh_state(tp)
            if state is None:
                return int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), "The partition has no state."
            if not is_being_reassigned(new) or self._complete_in(new, state):
                await self._complete(tp, state, stop=unneeded)
                return _NONE
            # Phase A: every replica of RS learns RS at a new leader epoch; adding replicas
            # start following. A leader that is going away stays leader until the end.
            isr = tuple(r for r in state.isr if r in new.replicas) or state.isr
            leader = state.leader
            if leader not in new.replicas or not c._replica_online(leader, tp):
                leader, isr = await c._choose_leader_async(tp, new.replicas, isr)
            updated = PartitionState(
                tp[0], tp[1], leader, state.leader_epoch + 1, new.replicas, isr, c.epoch,
                state.zk_version, adding_replicas=new.adding_replicas,
                removing_replicas=new.removing_replicas)
            await self._call(c._update_states, [updated])
            written = self._with_assignment(c.states[tp], new)
            c.states[tp] = written
            c._send([written])
            self._stop(tp, unneeded, written.leader_epoch)
            await self._watch(tp)
            # The ISR may already hold the target (e.g. a shrink only): finish now.
            fresh = await self._fresh_state(tp)
            if fresh is not None and self._complete_in(new, fresh):
                await self._complete(tp, fresh)
            return _NONE
        except (BadVersionError, NoNodeError) as exc:
            log.warning("reassignment of %s-%d failed: %s", tp[0], tp[1], exc)
            return int(ErrorCode.UNKNOWN_SERVER_ERROR), str(exc)

    # -- completion -------------------------------------------------------------------------

    def _complete_in(self, ra: paths.ReplicaAssignment, state: PartitionState) -> bool:
        """Kafka's isReassignmentComplete: every target replica is in the ISR."""
        return set(target_replicas(ra)) <= set(state.isr)

    async def _complete(self, tp: TopicPartition, state: PartitionState,
                        stop: Sequence[int] = ()) -> bool:
        """Phase B: RS = TRS; leadership off removed or dead replicas; RR stopped and
        deleted; the topic znode and /admin/reassign_partitions updated."""
        c = self.controller
        ra = self._assignment(tp)
        if ra is None:
            return False
        target = target_replicas(ra)
        removing = tuple(dict.fromkeys((*ra.removing_replicas, *stop)))
        isr = tuple(r for r in state.isr if r in target)
        leader = state.leader
        if leader not in target or not c._replica_online(leader, tp):
            eligible = [r for r in target if r in isr and c._replica_online(r, tp)]
            if not eligible:
                log.warning("reassignment of %s-%d cannot complete yet: no target replica "
                            "is alive and in the ISR %s", tp[0], tp[1], list(state.isr))
                return False
            leader = eligible[0]
        updated = PartitionState(tp[0], tp[1], leader, state.leader_epoch + 1, target,
                                 isr or (leader,), c.epoch, state.zk_version)
        await self._call(c._update_states, [updated])
        written = c.states[tp]
        c._send([written])
        self._stop(tp, removing, written.leader_epoch)
        if is_being_reassigned(ra) or ra.replicas != target:
            await self._write_assignment(tp, paths.ReplicaAssignment(target))
        c.states[tp] = self._with_assignment(c.states[tp], paths.ReplicaAssignment(target))
        self._watched.discard(tp)
        await self._call(self._remove_from_legacy_znode, {tp})
        log.info("reassignment of %s-%d completed: replicas %s, leader %d", tp[0], tp[1],
                 list(target), leader)
        if tp[0] in c.deletion_waiting and not any(
                is_being_reassigned(r) for r in c.topics[tp[0]].partitions.values()):
            c._queue.put_nowait(("delete_topics", None))  # its deletion waited for this
        return True

    async def maybe_complete(self, tps: Iterable[TopicPartition]) -> None:
        """Finish the reassignments among ``tps`` whose ISR now holds every target."""
        for tp in tps:
            ra = self._assignment(tp)
            if ra is None or not is_being_reassigned(ra):
                continue
            state = await self._fresh_state(tp)
            if state is not None and self._complete_in(ra, state):
                await self._complete(tp, state)

    async def on_isr_watch(self, tp: TopicPartition) -> None:
        """The state znode of a reassigning partition changed (the leader wrote its ISR)."""
        self._watched.discard(tp)
        if not self.is_reassigning(tp):
            return
        await self._watch(tp)
        await self.maybe_complete([tp])

    # -- failover and /admin/reassign_partitions ----------------------------------------------

    async def on_failover(self) -> None:
        """A new controller resumes what the topic znodes say is in flight (Kafka's
        initializePartitionReassignments), then reads /admin/reassign_partitions."""
        self._watched = set()
        ongoing = self.ongoing()
        if ongoing:
            log.info("resuming %d partition reassignment(s)", len(ongoing))
        for tp, ra in ongoing.items():
            await self._start(tp, reassign_to(ra, target_replicas(ra)))
        await self.on_legacy_znode()

    async def on_legacy_znode(self) -> None:
        """/admin/reassign_partitions was created or changed: start what it asks for;
        drop from it what is done, refused or unknown; delete it when empty."""
        c = self.controller
        try:
            stat = await self._call(c.store.exists, paths.REASSIGN_PARTITIONS,
                                    c._watcher("reassign_partitions"))
            if stat is None:
                return
            data, _ = await self._call(c.store.get, paths.REASSIGN_PARTITIONS)
        except NoNodeError:
            return
        try:
            wanted = paths.PartitionReassignment.decode(data).partitions
        except ValueError as exc:
            log.warning("ignoring %s: %s", paths.REASSIGN_PARTITIONS, exc)
            await self._call(self._delete_legacy_znode)
            return
        finished: set[TopicPartition] = set()
        for tp, target in wanted.items():
            ra = self._assignment(tp)
            if ra is not None and is_being_reassigned(ra) and target_replicas(ra) == target:
                continue  # already under way (e.g. our own write of the znode fired)
            error = self.validate(tp, target)
            if error is not None:
                log.warning("reassignment of %s-%d from %s refused: %s", tp[0], tp[1],
                            paths.REASSIGN_PARTITIONS, error[1])
                finished.add(tp)
                continue
            assert ra is not None
            await self._start(tp, reassign_to(ra, target))
            if not self.is_reassigning(tp):
                finished.add(tp)
        if finished:
            await self._call(self._remove_from_legacy_znode, finished)

    def _remove_from_legacy_znode(self, tps: set[TopicPartition]) -> None:
        store = self.controller.store
        for _ in range(5):
            try:
                data, stat = store.get(paths.REASSIGN_PARTITIONS)
            except NoNodeError:
                return
            try:
                current = paths.PartitionReassignment.decode(data)
            except ValueError:
                self._delete_legacy_znode()
                return
            left = {tp: r for tp, r in current.partitions.items() if tp not in tps}
            if len(left) == len(current.partitions):
                return
            try:
                if left:
                    store.set(paths.REASSIGN_PARTITIONS,
                              paths.PartitionReassignment(left, current.version).encode(),
                              version=stat.version)
                else:
                    store.delete(paths.REASSIGN_PARTITIONS, version=stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue  # rewritten meanwhile: read it again

    def _delete_legacy_znode(self) -> None:
        with contextlib.suppress(NoNodeError):
            self.controller.store.delete(paths.REASSIGN_PARTITIONS)

    # -- metastore helpers ------------------------------------------------------------------

    async def _call(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return await self.controller._call(fn, *args, **kwargs)

    async def _write_assignment(self, tp: TopicPartition, new: paths.ReplicaAssignment) -> None:
        """Compare-and-set the partition's entry in /brokers/topics/<t>."""
        assignment = await self._call(self._write_assignment_sync, tp, new)
        self.controller.topics[tp[0]] = assignment

    def _write_assignment_sync(self, tp: TopicPartition,
                               new: paths.ReplicaAssignment) -> paths.TopicAssignment:
        store = self.controller.store
        path = paths.topic_path(tp[0])
        while True:
            data, stat = store.get(path)
            current = paths.TopicAssignment.decode(data, tp[0])
            parts = dict(current.partitions)
            if tp[1] not in parts:
                raise NoNodeError(f"{tp[0]}-{tp[1]} is not in {path}", path)
            parts[tp[1]] = new
            updated = paths.TopicAssignment(parts, current.topic_id, max(current.version, 2))
            try:
                store.set(path, updated.encode(), version=stat.version)
                return updated
            except BadVersionError:
                continue

    async def _fresh_state(self, tp: TopicPartition) -> PartitionState | None:
        """The partition's state as the znode has it now (the leader writes the ISR there
        and tells the controller only later)."""
        c = self.controller
        if tp not in c.states:
            return None
        fresh = await self._call(c._read_partition_states, [tp])
        if tp in fresh:
            c.states[tp] = fresh[tp]
        return c.states.get(tp)

    async def _watch(self, tp: TopicPartition) -> None:
        if tp in self._watched:
            return
        c = self.controller
        with contextlib.suppress(NoNodeError):
            await self._call(c.store.get, paths.partition_state_path(*tp),
                             c._watcher("reassign_isr", tp))
            self._watched.add(tp)

    def _stop(self, tp: TopicPartition, replicas: Iterable[int], leader_epoch: int) -> None:
        c = self.controller
        for r in replicas:
            if r in c.live_brokers:
                c._send_stop_replica(r, [tp], delete=True, epochs={tp: leader_epoch})

    @staticmethod
    def _with_assignment(s: PartitionState, ra: paths.ReplicaAssignment) -> PartitionState:
        from dataclasses import replace

        return replace(s, adding_replicas=ra.adding_replicas,
                       removing_replicas=ra.removing_replicas)

