"""Preferred and unclean elections, the /admin/preferred_replica_election znode, and the
automatic rebalance's per-broker imbalance (klog/daemon/controller/leader_balance.py), on
a controller over a file metastore (no brokers: requests to brokers are not sent)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from klog.daemon.controller import leader_balance as lb
from klog.daemon.controller.controller import Controller
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import NodeExistsError
from klog.daemon.metastore.local import LocalMetadataStore
from klog.protocol.errors import ErrorCode
from tests.daemon.controller.fakes import controller_for

NOT_NEEDED = int(ErrorCode.ELECTION_NOT_NEEDED)
PREF_NA = int(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
ELIGIBLE_NA = int(ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
UNKNOWN = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def write_state(store: LocalMetadataStore, tp: tuple[str, int], leader: int, epoch: int,
                isr: tuple[int, ...]) -> int:
    path = paths.partition_state_path(*tp)
    data = paths.LeaderIsrAndControllerEpoch(leader=leader, leader_epoch=epoch, isr=isr,
                                             controller_epoch=3).encode()
    store.ensure_path(paths.partition_path(*tp))
    try:
        store.create(path, data)
    except NodeExistsError:
        store.set(path, data)
    return store.get(path)[1].version


def read_state(store: LocalMetadataStore, tp: tuple[str, int]
               ) -> paths.LeaderIsrAndControllerEpoch:
    return paths.LeaderIsrAndControllerEpoch.decode(store.get(paths.partition_state_path(*tp))[0])


def make_controller(store: LocalMetadataStore, live: set[int],
                    partitions: dict[tuple[str, int], tuple[tuple[int, ...], int, tuple[int, ...]]],
                    percentage: int = 10) -> Controller:
    """``partitions``: tp -> (replicas, leader, isr); states written and cached."""
    config = SimpleNamespace(unclean_leader_election_enable=False,
                             auto_leader_rebalance_enable=True,
                             leader_imbalance_per_broker_percentage=percentage,
                             leader_imbalance_check_interval_seconds=300)
    # broker id 9 is not a replica anywhere: no LeaderAndIsr goes to an in-process broker.
    c = controller_for(SimpleNamespace(broker_id=9, metastore=store, config=config))
    c.epoch = 4
    c.active = True
    c.live_brokers = {b: SimpleNamespace(broker_id=b) for b in live}  # type: ignore[misc]
    topics: dict[str, dict[int, paths.ReplicaAssignment]] = {}
    for (topic, p), (replicas, leader, isr) in partitions.items():
        topics.setdefault(topic, {})[p] = paths.ReplicaAssignment(replicas)
        version = write_state(store, (topic, p), leader, 7, isr)
        c.states[(topic, p)] = PartitionState(topic, p, leader, 7, replicas, isr, 3, version)
    c.topics = {t: paths.TopicAssignment(ps) for t, ps in topics.items()}
    return c


def elect(c: Controller, kind: int, tps: list[tuple[str, int]] | None) -> dict[Any, Any]:
    return asyncio.run(c.balance.elect(kind, tps))


# -- pure decisions


def test_preferred_leader_is_the_first_replica_only_when_alive_and_in_sync() -> None:
    assert lb.preferred_leader((1, 2, 3), (1, 2, 3), {1, 2, 3}) == 1
    assert lb.preferred_leader((1, 2, 3), (2, 3), {1, 2, 3}) is None  # not in the ISR
    assert lb.preferred_leader((1, 2, 3), (1, 2, 3), {2, 3}) is None  # dead
    assert lb.preferred_leader((), (), ()) is None


def test_unclean_leader_prefers_the_isr_then_any_live_replica() -> None:
    assert lb.unclean_leader((1, 2, 3), (1, 3), {2, 3}) == (3, (3,))
    assert lb.unclean_leader((1, 2, 3), (1,), {2, 3}) == (2, (2,))
    assert lb.unclean_leader((1, 2, 3), (1,), set()) is None


def test_imbalance_is_per_preferred_broker_and_strictly_above_the_percentage() -> None:
    assignments = {("t", p): (1, 2) if p < 10 else (2, 1) for p in range(20)}
    leaders = {tp: r[0] for tp, r in assignments.items()}
    leaders[("t", 0)] = 2  # broker 1: 1 of 10 led elsewhere = 10%
    assert lb.imbalance_ratios(assignments, leaders)[1] == (0.1, [("t", 0)])
    assert lb.imbalanced_brokers(assignments, leaders, 10) == {}  # 10% is not above 10%
    leaders[("t", 1)] = 2  # 20%
    assert lb.imbalanced_brokers(assignments, leaders, 10) == {1: [("t", 0), ("t", 1)]}
    assert lb.imbalanced_brokers(assignments, leaders, 20) == {}
    # A partition without a leader state counts in the denominator only.
    del leaders[("t", 2)]
    assert lb.imbalance_ratios(assignments, leaders)[1][0] == 0.2


# -- elections on the controller


def test_preferred_election_moves_leadership_back_and_keeps_the_isr(store) -> None:  # type: ignore[no-untyped-def]
    c = make_controller(store, {1, 2, 3}, {
        ("t", 0): ((1, 2, 3), 2, (2, 3, 1)),   # led by 2: elect 1
        ("t", 1): ((2, 3, 1), 2, (2, 3, 1)),   # already preferred
    })
    results = elect(c, lb.PREFERRED, [("t", 0), ("t", 1), ("t", 5), ("nope", 0)])
    assert results[("t", 0)] == (0, None)
    assert results[("t", 1)] == (NOT_NEEDED, lb.NOT_NEEDED_MESSAGE)
    assert results[("t", 5)][0] == UNKNOWN and results[("nope", 0)][0] == UNKNOWN
    st = read_state(store, ("t", 0))
    assert (st.leader, st.leader_epoch, st.isr, st.controller_epoch) == (1, 8, (2, 3, 1), 4)
    assert c.states[("t", 0)].leader == 1
    assert c.states[("t", 0)].zk_version == store.get(paths.partition_state_path("t", 0))[1].version
    assert read_state(store, ("t", 1)).leader_epoch == 7  # untouched


def test_preferred_replica_out_of_sync_or_dead_is_not_elected(store) -> None:  # type: ignore[no-untyped-def]
    c = make_controller(store, {2, 3}, {
        ("t", 0): ((1, 2, 3), 2, (2, 3, 1)),   # 1 is dead
        ("t", 1): ((3, 2), 2, (2,)),           # 3 is alive but out of the ISR
    })
    results = elect(c, lb.PREFERRED, None)
    assert results[("t", 0)] == (
        PREF_NA, "Failed to elect leader for partition t-0 under strategy "
                 "PreferredReplicaPartitionLeaderElectionStrategy")
    assert results[("t", 1)][0] == PREF_NA
    assert read_state(store, ("t", 0)).leader == 2 and read_state(store, ("t", 1)).leader == 2


def test_an_isr_changed_behind_the_cache_is_reread_before_electing(store) -> None:  # type: ignore[no-untyped-def]
    c = make_controller(store, {1, 2, 3}, {("t", 0): ((1, 2, 3), 2, (1, 2, 3))})
    # The leader dropped 1 from the ISR in ZooKeeper; the controller's cache still has it.
    write_state(store, ("t", 0), 2, 7, (2, 3))
    results = elect(c, lb.PREFERRED, [("t", 0)])
    assert results[("t", 0)][0] == PREF_NA
    st = read_state(store, ("t", 0))
    assert (st.leader, st.isr) == (2, (2, 3))
    # Once 1 is back in the ISR (again behind the cache), the retry path elects it.
    write_state(store, ("t", 0), 2, 7, (2, 3, 1))
    assert elect(c, lb.PREFERRED, [("t", 0)])[("t", 0)] == (0, None)
    assert read_state(store, ("t", 0)).leader == 1


def test_unclean_election_only_for_partitions_without_a_live_leader(store) -> None:  # type: ignore[no-untyped-def]
    c = make_controller(store, {2, 3}, {
        ("t", 0): ((1, 2, 3), -1, (1,)),       # offline: ISR member 1 is dead
        ("t", 1): ((1, 2), 2, (2,)),           # has a live leader
        ("t", 2): ((1,), -1, (1,)),            # no live replica at all
    })
    results = elect(c, lb.UNCLEAN, None)
    assert results[("t", 0)] == (0, None)
    assert results[("t", 1)][0] == NOT_NEEDED
    assert results[("t", 2)] == (
        ELIGIBLE_NA, "Failed to elect leader for partition t-2 under strategy "
                     "OfflinePartitionLeaderElectionStrategy(true)")
    st = read_state(store, ("t", 0))
    assert (st.leader, st.isr, st.leader_epoch) == (2, (2,), 8)


def test_many_partitions_are_written_in_batches(store) -> None:  # type: ignore[no-untyped-def]
    parts = {("t", p): ((1, 2), 2, (1, 2)) for p in range(450)}
    c = make_controller(store, {1, 2}, parts)
    results = elect(c, lb.PREFERRED, None)
    assert all(r == (0, None) for r in results.values()) and len(results) == 450
    assert {read_state(store, tp).leader for tp in parts} == {1}


def test_auto_rebalance_moves_back_only_imbalanced_brokers_partitions(store) -> None:  # type: ignore[no-untyped-def]
    parts: dict[tuple[str, int], tuple[tuple[int, ...], int, tuple[int, ...]]] = {}
    for p in range(10):
        parts[("a", p)] = ((1, 2), 1, (1, 2))
        parts[("b", p)] = ((2, 1), 2, (1, 2))
    parts[("a", 0)] = ((1, 2), 2, (1, 2))  # broker 1: 1/10 = 10%, not above 10%
    parts[("b", 0)] = ((2, 1), 1, (1, 2))  # broker 2: 3/10 = 30%
    parts[("b", 1)] = ((2, 1), 1, (1, 2))
    parts[("b", 2)] = ((2, 1), 1, (1, 2))
    c = make_controller(store, {1, 2}, parts)
    c.is_reassigning = lambda tp: tp == ("b", 2)  # type: ignore[attr-defined]
    results = asyncio.run(c.balance.check_and_trigger_auto_rebalance())
    assert results == {("b", 0): (0, None), ("b", 1): (0, None)}
    assert read_state(store, ("b", 0)).leader == 2
    assert read_state(store, ("b", 2)).leader == 1  # being reassigned: left alone
    assert read_state(store, ("a", 0)).leader == 2


def test_preferred_replica_election_znode_is_elected_then_deleted(store) -> None:  # type: ignore[no-untyped-def]
    c = make_controller(store, {1, 2}, {("t", 0): ((1, 2), 2, (1, 2)),
                                        ("t", 1): ((1, 2), 2, (1, 2))})
    store.create(paths.PREFERRED_REPLICA_ELECTION,
                 paths.PreferredReplicaElection((("t", 1),)).encode(), make_parents=True)

    async def run() -> None:
        c._loop = asyncio.get_running_loop()
        await c.balance.process(lb.PREFERRED_REPLICA_ELECTION, None)
        c.balance.on_resign()

    asyncio.run(run())
    assert read_state(store, ("t", 1)).leader == 1
    assert read_state(store, ("t", 0)).leader == 2  # not named in the znode
    assert store.exists(paths.PREFERRED_REPLICA_ELECTION) is None


def test_an_inactive_controller_answers_not_controller(store) -> None:  # type: ignore[no-untyped-def]
    c = make_controller(store, {1, 2}, {("t", 0): ((1, 2), 2, (1, 2))})
    c.active = False

    async def run() -> Any:
        future = asyncio.get_running_loop().create_future()
        await c.balance.process(lb.ELECT_LEADERS, (lb.PREFERRED, [("t", 0)], future))
        return future.result()

    assert asyncio.run(run()) == {("t", 0): (int(ErrorCode.NOT_CONTROLLER), None)}
    assert read_state(store, ("t", 0)).leader == 2
