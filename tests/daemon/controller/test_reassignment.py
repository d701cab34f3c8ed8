"""Partition reassignment in the controller (klog/daemon/controller/reassignment.py), on a
file metastore with the requests to brokers recorded instead of sent: the replica-set
arithmetic of KIP-455, Kafka's validation errors, the two phases (RS = TRS + ORS, then
TRS once the ISR holds it, leadership off removed replicas, removed replicas stopped and
deleted), cancelling, RF changes, resuming after a failover and /admin/reassign_partitions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.controller.controller import Controller
from klog.daemon.controller.reassignment import (
    is_being_reassigned,
    origin_replicas,
    reassign_to,
    target_replicas,
)
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.local import LocalMetadataStore
from klog.protocol.errors import ErrorCode
from tests.daemon.controller.fakes import controller_for

TP = ("t", 0)


class Recorded:
    def __init__(self) -> None:
        self.leader_and_isr: list[tuple[int, PartitionState]] = []
        self.stop: list[tuple[int, tuple[str, int], bool, int]] = []
        self.update_metadata = 0


def make_controller(store: LocalMetadataStore, replicas: tuple[int, ...] = (1, 2, 3),
                    live: tuple[int, ...] = (1, 2, 3, 4), leader: int | None = None,
                    isr: tuple[int, ...] | None = None,
                    assignment: paths.ReplicaAssignment | None = None,
                    ) -> tuple[Controller, Recorded]:
    """A controller (epoch 3) of topic t (one partition) whose znodes exist."""
    broker = SimpleNamespace(broker_id=1, metastore=store,
                             config=SimpleNamespace(unclean_leader_election_enable=False))
    c = controller_for(broker)
    c.epoch = 3
    c.active = True
    c.live_brokers = {b: None for b in live}  # type: ignore[misc]
    ra = assignment or paths.ReplicaAssignment(replicas)
    topic = paths.TopicAssignment({0: ra}, topic_id=paths.new_kafka_uuid())
    if store.exists(paths.topic_path("t")) is None:
        store.create(paths.topic_path("t"), topic.encode(), make_parents=True)
        write_state(store, leader if leader is not None else ra.replicas[0], 5,
                    isr if isr is not None else ra.replicas)
    c.topics["t"] = paths.TopicAssignment.decode(store.get(paths.topic_path("t"))[0], "t")
    st, stat = read_state(store)
    c.states[TP] = PartitionState("t", 0, st.leader, st.leader_epoch, ra.replicas,
                                  tuple(st.isr), 3, stat.version)
    rec = Recorded()
    c._send_leader_and_isr = lambda b, states: rec.leader_and_isr.extend(  # type: ignore[method-assign]
        (b, s) for s in states)
    c._send_stop_replica = lambda b, tps, delete, epochs=None: rec.stop.extend(  # type: ignore[method-assign]
        (b, tp, delete, (epochs or {}).get(tp, -1)) for tp in tps)

    def update_metadata(states: Any, broker_ids: Any = None) -> None:
        rec.update_metadata += 1

    c._send_update_metadata = update_metadata  # type: ignore[method-assign]
    return c, rec


def write_state(store: LocalMetadataStore, leader: int, epoch: int, isr: tuple[int, ...],
                version: int = -1) -> None:
    path = paths.partition_state_path("t", 0)
    data = paths.LeaderIsrAndControllerEpoch(leader=leader, leader_epoch=epoch, isr=isr,
                                             controller_epoch=3).encode()
    if store.exists(path) is None:
        store.ensure_path(paths.partition_path("t", 0))
        store.create(path, data)
    else:
        store.set(path, data, version=version)


def read_state(store: LocalMetadataStore) -> tuple[paths.LeaderIsrAndControllerEpoch, Any]:
    data, stat = store.get(paths.partition_state_path("t", 0))
    return paths.LeaderIsrAndControllerEpoch.decode(data), stat


def expand_isr(store: LocalMetadataStore, *replicas: int) -> None:
    """What the leader does when followers catch up: compare-and-set the ISR."""
    st, stat = read_state(store)
    write_state(store, st.leader, st.leader_epoch, tuple(st.isr) + replicas, stat.version)


def znode_assignment(store: LocalMetadataStore) -> paths.ReplicaAssignment:
    return paths.TopicAssignment.decode(store.get(paths.topic_path("t"))[0]).partitions[0]


def run(c: Controller, fn: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    async def main() -> Any:
        c._loop = asyncio.get_running_loop()
        try:
            return await fn()
        finally:
            c._closed = True  # watches firing later must not touch the finished loop

    return asyncio.run(main())


# -- arithmetic ------------------------------------------------------------------------------

def test_replica_sets_of_a_move() -> None:
    ra = reassign_to(paths.ReplicaAssignment((1, 2, 3)), [2, 3, 4])
    assert ra == paths.ReplicaAssignment((2, 3, 4, 1), (4,), (1,))
    assert origin_replicas(ra) == (2, 3, 1)
    assert target_replicas(ra) == (2, 3, 4)
    assert is_being_reassigned(ra)
    # Cancelling reassigns to the origin: nothing added or removed any more.
    back = reassign_to(ra, origin_replicas(ra))
    assert back == paths.ReplicaAssignment((2, 3, 1)) and not is_being_reassigned(back)
    # Replacing an ongoing reassignment keeps the origin of the first one.
    other = reassign_to(ra, [5, 6, 7])
    assert other == paths.ReplicaAssignment((5, 6, 7, 2, 3, 1), (5, 6, 7), (2, 3, 1))


def test_replica_sets_of_rf_changes() -> None:
    grow = reassign_to(paths.ReplicaAssignment((1,)), [1, 2, 3])
    assert grow == paths.ReplicaAssignment((1, 2, 3), (2, 3), ())
    shrink = reassign_to(paths.ReplicaAssignment((1, 2, 3)), [1, 2])
    assert shrink == paths.ReplicaAssignment((1, 2, 3), (), (3,))


# -- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize(("tp", "target", "code", "words"), [
    (("t", 7), [1, 2, 3], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
    (("x", 0), [1, 2, 3], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "does not exist"),
    (TP, [], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list"),
    (TP, [2, 2, 3], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Duplicate replica ids"),
    (TP, [2, -1], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Invalid broker id"),
    (TP, [2, 3, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "not alive"),
    (TP, None, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No reassignment in progress"),
])
def test_refused_requests_change_nothing(store, tp, target, code, words) -> None:  # type: ignore[no-untyped-def]
    c, rec = make_controller(store)
    before = store.get(paths.topic_path("t"))[0]
    results = run(c, lambda: c.reassignments.alter({tp: target}))
    assert results[tp][0] == int(code) and words in (results[tp][1] or "")
    assert store.get(paths.topic_path("t"))[0] == before
    assert rec.leader_and_isr == [] and rec.stop == []


def test_rf_change_refused_when_not_allowed(store) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_controller(store)
    results = run(c, lambda: c.reassignments.alter({TP: [1, 2]}, allow_rf_change=False))
    assert results[TP][0] == int(ErrorCode.INVALID_REPLICATION_FACTOR)
    ok = run(c, lambda: c.reassignments.alter({TP: [2, 3, 4]}, allow_rf_change=False))
    assert ok[TP] == (0, None)


# -- the two phases ---------------------------------------------------------------------------

def test_move_off_the_leader_completes_once_the_isr_holds_the_target(store) -> None:  # type: ignore[no-untyped-def]
    c, rec = make_controller(store, leader=1)
    results = run(c, lambda: c.reassignments.alter({TP: [2, 3, 4]}))
    assert results == {TP: (0, None)}
    # Phase A: RS = TRS + ORS in the znode, every replica of RS told at a new epoch.
    assert znode_assignment(store) == paths.ReplicaAssignment((2, 3, 4, 1), (4,), (1,))
    st, _ = read_state(store)
    assert (st.leader, st.leader_epoch, st.isr) == (1, 6, (1, 2, 3))
    assert sorted(b for b, _ in rec.leader_and_isr) == [1, 2, 3, 4]
    assert all(s.replicas == (2, 3, 4, 1) and s.adding_replicas == (4,)
               and s.removing_replicas == (1,) for _, s in rec.leader_and_isr)
    assert rec.stop == []
    assert c.is_reassigning(TP)
    assert c.list_partition_reassignments(None) == {TP: ([2, 3, 4, 1], [4], [1])}
    assert c.list_partition_reassignments([("t", 0), ("t", 5)]) == {
        TP: ([2, 3, 4, 1], [4], [1])}
    # An ISR change that does not complete the target changes nothing.
    rec.leader_and_isr.clear()
    run(c, lambda: c.reassignments.on_isr_watch(TP))
    assert c.is_reassigning(TP) and rec.leader_and_isr == []
    # Phase B: the leader adds 4 to the ISR; leadership leaves 1, which is stopped and
    # deleted; the znode holds the target only.
    expand_isr(store, 4)
    run(c, lambda: c.reassignments.on_isr_watch(TP))
    st, _ = read_state(store)
    assert (st.leader, st.leader_epoch, st.isr) == (2, 7, (2, 3, 4))
    assert znode_assignment(store) == paths.ReplicaAssignment((2, 3, 4))
    assert sorted(b for b, _ in rec.leader_and_isr) == [2, 3, 4]
    assert all(s.replicas == (2, 3, 4) and s.leader == 2 for _, s in rec.leader_and_isr)
    assert rec.stop == [(1, TP, True, 7)]
    assert not c.is_reassigning(TP) and c.list_partition_reassignments(None) == {}
    assert c.states[TP].replicas == (2, 3, 4) and c.states[TP].leader == 2


def test_isr_change_notification_completes_too(store) -> None:  # type: ignore[no-untyped-def]
    c, rec = make_controller(store, leader=2)
    run(c, lambda: c.reassignments.alter({TP: [2, 3, 4]}))
    expand_isr(store, 4)
    run(c, lambda: c.reassignments.maybe_complete([TP]))
    st, _ = read_state(store)
    # The leader stays (it is a target replica), at a new epoch.
    assert (st.leader, st.isr) == (2, (2, 3, 4)) and st.leader_epoch == 7
    assert rec.stop == [(1, TP, True, 7)]


def test_cancel_reverts_to_the_original_replicas(store) -> None:  # type: ignore[no-untyped-def]
    c, rec = make_controller(store, leader=1)
    run(c, lambda: c.reassignments.alter({TP: [2, 3, 4]}))
    rec.stop.clear()
    results = run(c, lambda: c.reassignments.alter({TP: None}))
    assert results == {TP: (0, None)}
    ra = znode_assignment(store)
    assert set(ra.replicas) == {1, 2, 3} and not is_being_reassigned(ra)
    st, _ = read_state(store)
    assert st.leader == 1 and set(st.isr) == {1, 2, 3}
    assert rec.stop == [(4, TP, True, st.leader_epoch)]  # the adding replica goes away
    assert not c.is_reassigning(TP)


def test_grow_rf_from_one_to_three(store) -> None:  # type: ignore[no-untyped-def]
    c, rec = make_controller(store, replicas=(1,))
    run(c, lambda: c.reassignments.alter({TP: [1, 2, 3]}))
    assert znode_assignment(store) == paths.ReplicaAssignment((1, 2, 3), (2, 3), ())
    expand_isr(store, 2)
    run(c, lambda: c.reassignments.on_isr_watch(TP))
    assert c.is_reassigning(TP)
    expand_isr(store, 3)
    run(c, lambda: c.reassignments.on_isr_watch(TP))
    assert znode_assignment(store) == paths.ReplicaAssignment((1, 2, 3))
    assert read_state(store)[0].isr == (1, 2, 3) and rec.stop == []


def test_shrink_rf_completes_at_once(store) -> None:  # type: ignore[no-untyped-def]
    c, rec = make_controller(store, leader=3)
    run(c, lambda: c.reassignments.alter({TP: [1, 2]}))
    assert znode_assignment(store) == paths.ReplicaAssignment((1, 2))
    st, _ = read_state(store)
    assert (st.leader, st.isr) == (1, (1, 2))  # leadership left the removed replica 3
    assert [(b, d) for b, _, d, _ in rec.stop] == [(3, True)]
    assert not c.is_reassigning(TP)


def test_no_completion_while_no_target_replica_may_lead(store) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_controller(store, leader=1, live=(1, 2, 3, 4))
    run(c, lambda: c.reassignments.alter({TP: [4]}))
    c.live_brokers.pop(4)  # died before joining the ISR... and after: no leader to hand to
    expand_isr(store, 4)
    run(c, lambda: c.reassignments.on_isr_watch(TP))
    assert c.is_reassigning(TP) and read_state(store)[0].leader == 1


# -- failover and the Kafka 2.x znode ----------------------------------------------------------

def test_a_new_controller_resumes_a_reassignment(store) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_controller(store, leader=1)
    run(c, lambda: c.reassignments.alter({TP: [2, 3, 4]}))
    # The controller dies; the leader adds 4 meanwhile; a new controller takes over.
    expand_isr(store, 4)
    c2, rec2 = make_controller(store)
    assert c2.is_reassigning(TP)
    run(c2, c2.reassignments.on_failover)
    assert znode_assignment(store) == paths.ReplicaAssignment((2, 3, 4))
    assert read_state(store)[0].leader == 2
    assert [(b, d) for b, _, d, _ in rec2.stop] == [(1, True)]


def test_a_new_controller_resumes_an_unfinished_reassignment(store) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_controller(store, leader=1)
    run(c, lambda: c.reassignments.alter({TP: [2, 3, 4]}))
    c2, rec2 = make_controller(store)
    run(c2, c2.reassignments.on_failover)
    assert znode_assignment(store) == paths.ReplicaAssignment((2, 3, 4, 1), (4,), (1,))
    assert 4 in {b for b, _ in rec2.leader_and_isr}  # the adding replica is (re)started
    expand_isr(store, 4)
    run(c2, lambda: c2.reassignments.on_isr_watch(TP))
    assert znode_assignment(store) == paths.ReplicaAssignment((2, 3, 4))


def test_admin_reassign_partitions_znode(store) -> None:  # type: ignore[no-untyped-def]
    c, rec = make_controller(store, leader=1)
    store.ensure_path("/admin")
    store.create(paths.REASSIGN_PARTITIONS, paths.PartitionReassignment(
        {TP: (2, 3, 4), ("t", 9): (1, 2)}).encode())
    run(c, c.reassignments.on_legacy_znode)
    # Started; the unknown partition was dropped from the znode.
    assert c.is_reassigning(TP)
    left = paths.PartitionReassignment.decode(store.get(paths.REASSIGN_PARTITIONS)[0])
    assert dict(left.partitions) == {TP: (2, 3, 4)}
    # Firing again (e.g. on the controller's own write) starts nothing twice.
    rec.leader_and_isr.clear()
    run(c, c.reassignments.on_legacy_znode)
    assert rec.leader_and_isr == []
    expand_isr(store, 4)
    run(c, lambda: c.reassignments.on_isr_watch(TP))
    assert znode_assignment(store) == paths.ReplicaAssignment((2, 3, 4))
    assert store.exists(paths.REASSIGN_PARTITIONS) is None  # deleted once empty


def test_api_reassignment_replaces_the_znode_one(store) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_controller(store, leader=1)
    store.ensure_path("/admin")
    store.create(paths.REASSIGN_PARTITIONS,
                 paths.PartitionReassignment({TP: (2, 3, 4)}).encode())
    run(c, c.reassignments.on_legacy_znode)
    run(c, lambda: c.reassignments.alter({TP: [1, 2, 4]}))
    assert store.exists(paths.REASSIGN_PARTITIONS) is None
    assert target_replicas(znode_assignment(store)) == (1, 2, 4)


def test_garbage_in_the_znode_is_dropped(store) -> None:  # type: ignore[no-untyped-def]
    c, rec = make_controller(store)
    store.ensure_path("/admin")
    store.create(paths.REASSIGN_PARTITIONS, b'{"version":1,"partitions":7}')
    run(c, c.reassignments.on_legacy_znode)
    assert store.exists(paths.REASSIGN_PARTITIONS) is None
    assert rec.leader_and_isr == [] and not c.is_reassigning(TP)


def test_replacing_a_reassignment_stops_the_replicas_no_longer_needed(store) -> None:  # type: ignore[no-untyped-def]
    c, rec = make_controller(store, leader=1, live=(1, 2, 3, 4, 5))
    run(c, lambda: c.reassignments.alter({TP: [2, 3, 4]}))
    rec.stop.clear()
    run(c, lambda: c.reassignments.alter({TP: [2, 3, 5]}))
    # The origin stays [1,2,3]: 4 was only being added, so it is stopped and deleted.
    assert znode_assignment(store) == paths.ReplicaAssignment((2, 3, 5, 1), (5,), (1,))
    assert [(b, d) for b, _, d, _ in rec.stop] == [(4, True)]
    assert 4 not in {b for b, _ in rec.leader_and_isr[-4:]}


def test_requests_queue_as_controller_events(store) -> None:  # type: ignore[no-untyped-def]
    c, _ = make_controller(store, leader=1)

    async def main() -> Any:
        task = asyncio.get_running_loop().create_task(c._run())
        try:
            started = await c.alter_partition_reassignments({TP: [2, 3, 4]})
            listed = c.list_partition_reassignments([TP])
            c.active = False  # deposed: answers NOT_CONTROLLER, changes nothing
            refused = await c.alter_partition_reassignments({TP: None})
            return started, listed, refused
        finally:
            task.cancel()

    started, listed, refused = run(c, main)
    assert started == {TP: (0, None)}
    assert listed == {TP: ([2, 3, 4, 1], [4], [1])}
    assert refused == {TP: (int(ErrorCode.NOT_CONTROLLER), None)}
    assert c.is_reassigning(TP)
