"""Elections in klog/daemon/controller/controller.py.

Partition leaders: the controller reads the ISR it elects from out of the metastore, not
from its cache: leaders shrink the ISR there by compare-and-set and tell the controller only
later, so a cached ISR may still list a replica that fell behind, and electing it would lose
acknowledged records.

The controller itself: /controller and the bumped /controller_epoch are written in one
multi, as Kafka writes them, so no reader sees a new controller under the old epoch."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from klog.daemon.config_changes import write_entity_config
from klog.daemon.controller.controller import Controller
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import BadVersionError, NodeExistsError
from klog.daemon.metastore.local import LocalMetadataStore
from tests.daemon.controller.fakes import controller_for


def controller(store: LocalMetadataStore, live: set[int], unclean: bool = False) -> Controller:
    broker = SimpleNamespace(broker_id=1, metastore=store,
                             config=SimpleNamespace(unclean_leader_election_enable=unclean))
    c = controller_for(broker)
    c.epoch = 3
    c.topics["t"] = paths.TopicAssignment({0: paths.ReplicaAssignment((1, 2, 3))})
    c.live_brokers = {b: None for b in live}  # type: ignore[misc]
    return c


def write_state(store: LocalMetadataStore, leader: int, epoch: int, isr: tuple[int, ...]
                ) -> None:
    path = paths.partition_state_path("t", 0)
    data = paths.LeaderIsrAndControllerEpoch(leader=leader, leader_epoch=epoch, isr=isr,
                                             controller_epoch=3).encode()
    store.ensure_path(paths.partition_path("t", 0))
    try:
        store.create(path, data)
    except NodeExistsError:
        store.set(path, data)


def state(store: LocalMetadataStore) -> paths.LeaderIsrAndControllerEpoch:
    data, _ = store.get(paths.partition_state_path("t", 0))
    return paths.LeaderIsrAndControllerEpoch.decode(data)


def test_a_replica_the_leader_dropped_from_the_isr_is_not_elected(store) -> None:  # type: ignore[no-untyped-def]
    write_state(store, 1, 5, (1, 2, 3))
    c = controller(store, live={2, 3})  # broker 1, the leader, died
    # The cache still has the full ISR; the leader had shrunk it to itself and 3.
    c.states[("t", 0)] = PartitionState("t", 0, 1, 5, (1, 2, 3), (1, 2, 3), 3, 0)
    write_state(store, 1, 5, (1, 3))
    changed = asyncio.run(c._elect_leaders([("t", 0)]))
    st = state(store)
    assert (st.leader, st.leader_epoch, st.isr) == (3, 6, (3,))
    # what LeaderAndIsr will carry: the state as written, with its znode version
    _, stat = store.get(paths.partition_state_path("t", 0))
    assert [(s.leader, s.zk_version) for s in changed] == [(3, stat.version)]


def test_no_live_isr_member_leaves_the_partition_offline_without_unclean_election(
        store) -> None:  # type: ignore[no-untyped-def]
    write_state(store, 1, 5, (1,))
    c = controller(store, live={2, 3})
    c.states[("t", 0)] = PartitionState("t", 0, 1, 5, (1, 2, 3), (1, 2, 3), 3, 0)
    asyncio.run(c._elect_leaders([("t", 0)]))
    st = state(store)
    assert st.leader == -1 and st.isr == (1,)  # offline: nothing acknowledged is lost


def test_unclean_election_takes_a_live_replica(store) -> None:  # type: ignore[no-untyped-def]
    write_state(store, 1, 5, (1,))
    c = controller(store, live={2, 3}, unclean=True)
    c.states[("t", 0)] = PartitionState("t", 0, 1, 5, (1, 2, 3), (1, 2, 3), 3, 0)
    asyncio.run(c._elect_leaders([("t", 0)]))
    st = state(store)
    assert (st.leader, st.isr) == (2, (2,))


def set_topic_config(store: LocalMetadataStore, **config: str) -> None:
    write_entity_config(store, paths.CONFIG_TYPE_TOPIC, "t",
                        {k.replace("_", "."): v for k, v in config.items()})


def test_the_topic_override_of_unclean_election_wins(store) -> None:  # type: ignore[no-untyped-def]
    # Read from /config/topics at election time, as Kafka's controller does.
    write_state(store, 1, 5, (1,))
    set_topic_config(store, unclean_leader_election_enable="true")
    c = controller(store, live={2, 3}, unclean=False)
    c.states[("t", 0)] = PartitionState("t", 0, 1, 5, (1, 2, 3), (1, 2, 3), 3, 0)
    asyncio.run(c._elect_leaders([("t", 0)]))
    assert (state(store).leader, state(store).isr) == (2, (2,))

    write_state(store, 2, 6, (2,))
    set_topic_config(store, unclean_leader_election_enable="false")
    c = controller(store, live={1, 3}, unclean=True)
    c.states[("t", 0)] = PartitionState("t", 0, 2, 6, (1, 2, 3), (2,), 3, 0)
    asyncio.run(c._elect_leaders([("t", 0)]))
    assert (state(store).leader, state(store).isr) == (-1, (2,))


def test_turning_unclean_election_on_elects_offline_partitions_at_once(store) -> None:  # type: ignore[no-untyped-def]
    write_state(store, -1, 6, (1,))
    c = controller(store, live={2, 3})
    c.active = True
    c.states[("t", 0)] = PartitionState("t", 0, -1, 6, (1, 2, 3), (1,), 3, 0)
    sent: list[list[PartitionState]] = []
    c._send = sent.append  # type: ignore[method-assign]

    async def go() -> None:
        set_topic_config(store, unclean_leader_election_enable="true")
        c.unclean_enabled_changed(["t"])  # what config_changes calls on the new override
        kind, arg = c._queue.get_nowait()
        assert (kind, arg) == ("unclean_enabled", ("t",))
        await c._on_unclean_enabled(arg)

    asyncio.run(go())
    assert (state(store).leader, state(store).leader_epoch, state(store).isr) == (2, 7, (2,))
    assert [(s.topic, s.partition, s.leader) for s in sent[0]] == [("t", 0, 2)]


# --- the controller's own election: /controller and /controller_epoch in one multi ----------


def registered(store: LocalMetadataStore) -> tuple[int | None, int]:
    """(the broker in /controller or None, the epoch in /controller_epoch)."""
    epoch = int(store.get(paths.CONTROLLER_EPOCH)[0].decode())
    if store.exists(paths.CONTROLLER) is None:
        return None, epoch
    return paths.ControllerRegistration.decode(store.get(paths.CONTROLLER)[0]).broker_id, epoch


def registration(broker_id: int) -> bytes:
    return paths.ControllerRegistration(broker_id, 0).encode()


def test_the_first_controller_gets_epoch_1_written_with_its_registration(store) -> None:  # type: ignore[no-untyped-def]
    c = controller(store, live={1})
    assert c._register(registration(1)) == 1
    assert registered(store) == (1, 1)


def test_a_broker_that_finds_a_controller_leaves_the_epoch_alone(store) -> None:  # type: ignore[no-untyped-def]
    controller(store, live={1})._register(registration(1))
    other = controller(store, live={1, 2})
    with pytest.raises(NodeExistsError):
        other._register(registration(2))
    assert registered(store) == (1, 1)
    store.delete(paths.CONTROLLER)  # the controller's session ended
    assert other._register(registration(2)) == 2
    assert registered(store) == (2, 2)


def test_a_broker_whose_epoch_write_loses_a_race_takes_no_office(store) -> None:  # type: ignore[no-untyped-def]
    # Another broker bumps the epoch between this one's read and its write: the multi fails
    # whole, so no /controller names a broker under an epoch it did not write.
    store.create(paths.CONTROLLER_EPOCH, b"4")
    real_get = store.get

    def get_then_race(path: str, *args: object) -> object:
        result = real_get(path, *args)
        if path == paths.CONTROLLER_EPOCH:
            store.set(paths.CONTROLLER_EPOCH, b"5")
        return result

    store.get = get_then_race
    with pytest.raises(BadVersionError):
        controller(store, live={1})._register(registration(1))
    store.get = real_get
    assert registered(store) == (None, 5)


# --- failover: brokers that died while no controller watched -------------------------------


def test_a_new_controller_takes_unregistered_brokers_out_of_the_isrs(store) -> None:  # type: ignore[no-untyped-def]
    # Broker 1 was the controller and died: nobody saw it leave /brokers/ids, so the broker
    # taking over must do what the broker change would have (Kafka's onControllerFailover
    # -> onBrokerFailure): where it followed, the ISR loses it at a new leader epoch;
    # where it led, a live ISR replica leads.
    for b in (2, 3):
        store.create(paths.broker_path(b), paths.BrokerRegistration(
            b, (paths.EndPoint("PLAINTEXT", "127.0.0.1", 9090 + b),)).encode(),
            make_parents=True)
    store.create(paths.topic_path("t"), paths.TopicAssignment({
        0: paths.ReplicaAssignment((2, 3, 1)), 1: paths.ReplicaAssignment((1, 2, 3)),
        2: paths.ReplicaAssignment((3, 1))}).encode(), make_parents=True)
    for p, (leader, isr) in enumerate([(2, (2, 3, 1)), (1, (1, 2, 3)), (3, (3,))]):
        store.ensure_path(paths.partition_path("t", p))
        store.create(paths.partition_state_path("t", p), paths.LeaderIsrAndControllerEpoch(
            leader=leader, leader_epoch=5, isr=isr, controller_epoch=1).encode())
    config = SimpleNamespace(zookeeper_connect="zk", delete_topic_enable=True,
                             unclean_leader_election_enable=False,
                             auto_leader_rebalance_enable=False)
    # broker id 9 hosts no replica: nothing is applied in-process; no channel: none sent.
    broker = SimpleNamespace(broker_id=9, metastore=store, config=config,
                             metadata_cache=SimpleNamespace(controller_id=-1))
    c = controller_for(broker)

    async def failover() -> None:
        c._loop = asyncio.get_running_loop()
        c.epoch, c.active = 2, True
        await c._on_failover()

    asyncio.run(failover())
    states = {p: paths.LeaderIsrAndControllerEpoch.decode(
        store.get(paths.partition_state_path("t", p))[0]) for p in range(3)}
    assert {p: (s.leader, s.leader_epoch, s.isr, s.controller_epoch)
            for p, s in states.items()} == {
        0: (2, 6, (2, 3), 2),   # followed by 1: out of the ISR
        1: (2, 6, (2, 3), 2),   # led by 1: a new leader from the live ISR
        2: (3, 5, (3,), 1),     # not in the ISR: untouched
    }
    assert c.states[("t", 0)].isr == (2, 3)
    assert c.states[("t", 0)].zk_version == store.get(paths.partition_state_path("t", 0))[1].version
