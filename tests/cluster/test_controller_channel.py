"""The controller's wire channel with real brokers: LeaderAndIsr / UpdateMetadata reach
remote brokers, a new controller takes over with a higher epoch, a broker stopping with
SIGTERM hands its leaderships over first (ControlledShutdown), and requests from an older
controller epoch or for an older broker epoch are refused."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from klog.client.admin import AdminClient
from klog.client.network import BrokerConnection, build_request
from klog.daemon.controller import channel
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.protocol import apis, inter_broker
from klog.protocol.errors import ErrorCode
from tests.cluster.conftest import Cluster


def metadata_view(c: Cluster, via: int, topic: str) -> dict[int, tuple[int, tuple[int, ...],
                                                                        tuple[int, ...]]]:
    """partition -> (leader, sorted isr, replicas) as broker ``via`` answers Metadata."""

    async def ask() -> Any:
        async with AdminClient(c.bootstrap_of([via])) as admin:
            return await admin.describe_topics([topic])

    described = asyncio.run(ask())
    out = {}
    for p in described[topic].partitions:
        out[p.partition] = (int(p.leader), tuple(sorted(p.isr)), tuple(p.replicas))
    return out


def zk_view(c: Cluster, topic: str, partitions: int) -> dict[int, tuple[int, tuple[int, ...]]]:
    out = {}
    for p in range(partitions):
        st = c.partition_state(topic, p)
        assert st is not None
        out[p] = (st.leader, tuple(sorted(st.isr)))
    return out


def agree(c: Cluster, topic: str, partitions: int, brokers: list[int]) -> bool:
    """Every broker in ``brokers`` answers Metadata with ZooKeeper's leaders and ISRs."""
    zk = zk_view(c, topic, partitions)
    for b in brokers:
        view = metadata_view(c, b, topic)
        if {p: v[:2] for p, v in view.items()} != zk:
            return False
    return True


def controller_epoch(c: Cluster) -> int:
    data, _ = c.store.get(paths.CONTROLLER_EPOCH)
    return int(data.decode())


def broker_epoch(c: Cluster, broker_id: int) -> int:
    _, stat = c.store.get(paths.broker_path(broker_id))
    return stat.czxid


def send(c: Cluster, broker_id: int, api_key: int, values: dict[str, Any]) -> Any:
    host, port = c.broker(broker_id).bootstrap_servers.split(":")

    async def go() -> Any:
        conn = BrokerConnection(broker_id, host, int(port))
        try:
            await conn.connect(10)
            version = conn.api_versions[api_key][1]
            entity = build_request(apis.spec_for(api_key).request_entity(version), values)
            return await conn.request(api_key, version, entity, timeout=10)
        finally:
            conn.close()

    return asyncio.run(go())


def test_leaders_and_isr_reach_every_broker(cluster: Any) -> None:
    c = cluster(brokers=3)
    c.create_topic("spread", partitions=3, replication_factor=3)
    c.wait(lambda: agree(c, "spread", 3, c.ids), 20, "every broker's Metadata = ZooKeeper")
    leaders = {p: v[0] for p, v in zk_view(c, "spread", 3).items()}
    # Kafka's assignment starts from a random broker and shifts: all three lead one.
    assert sorted(leaders.values()) == [1, 2, 3]
    for b in c.ids:
        view = metadata_view(c, b, "spread")
        assert all(sorted(v[2]) == [1, 2, 3] for v in view.values())


def test_controller_failover_bumps_epoch_and_brokers_keep_serving(cluster: Any) -> None:
    c = cluster(brokers=3)
    c.create_topic("before", partitions=3, replication_factor=3)
    first = c.wait_for_controller()
    epoch = controller_epoch(c)
    c.kill(first)
    second = c.wait_for_controller(exclude={first})
    assert controller_epoch(c) > epoch
    survivors = [b for b in c.ids if b != first]
    # The new controller moved the dead broker's leaderships and told the survivors.
    c.wait(lambda: all(c.leader("before", p) in survivors for p in range(3)), 20,
           "leaders on live brokers")
    c.wait(lambda: agree(c, "before", 3, survivors), 20, "survivors agree with ZooKeeper")
    # ... and it serves new work: a topic created now reaches every live broker.
    c.create_topic("after", partitions=2, replication_factor=2)
    c.wait(lambda: agree(c, "after", 2, survivors), 20, "new topic on every survivor")
    assert {c.leader("after", p) for p in range(2)} <= set(survivors)
    assert second in survivors


def test_sigterm_moves_leaderships_before_exit(cluster: Any) -> None:
    c = cluster(brokers=3)
    c.create_topic("moving", partitions=3, replication_factor=3)
    c.wait(lambda: agree(c, "moving", 3, c.ids), 20, "metadata everywhere")
    victim = next(b for b in c.ids if b != c.controller())
    led = [p for p in range(3) if c.leader("moving", p) == victim]
    followed = [p for p in range(3) if p not in led]
    assert led and followed
    epochs = {p: c.partition_state("moving", p).leader_epoch for p in range(3)}
    started = time.monotonic()
    assert c.stop(victim) == 0
    took = time.monotonic() - started
    for p in range(3):
        st = c.partition_state("moving", p)
        assert st is not None and st.leader != victim and st.leader >= 0
        # Where it followed, the controller took the stopping broker out of the ISR (a
        # new leader epoch, same leader): that is controlled shutdown, not the failover
        # after its registration vanished, which changes only what it led.
        assert st.leader_epoch == epochs[p] + 1, (p, st)
    assert "controlled shutdown of broker" in c.broker(victim).log_tail(200)
    assert took < 20
    survivors = [b for b in c.ids if b != victim]
    c.wait(lambda: agree(c, "moving", 3, survivors), 20, "survivors agree")


def test_stale_controller_and_broker_epochs_are_refused(cluster: Any) -> None:
    c = cluster(brokers=2)
    c.create_topic("fenced", partitions=1, replication_factor=2)
    c.wait(lambda: agree(c, "fenced", 1, c.ids), 20, "metadata everywhere")
    epoch = controller_epoch(c)
    target = next(b for b in c.ids if b != c.controller())
    st = c.partition_state("fenced", 0)
    assert st is not None
    bogus = PartitionState("fenced", 0, target, st.leader_epoch + 5, (1, 2), (target,), epoch)
    stale = channel.leader_and_isr_values(99, epoch - 1, -1, [bogus], {}, [], "PLAINTEXT")
    response = send(c, target, inter_broker.LEADER_AND_ISR, stale)
    assert int(response.error_code) == ErrorCode.STALE_CONTROLLER_EPOCH
    old_incarnation = channel.leader_and_isr_values(99, epoch + 1, broker_epoch(c, target) - 1,
                                                    [bogus], {}, [], "PLAINTEXT")
    response = send(c, target, inter_broker.LEADER_AND_ISR, old_incarnation)
    assert int(response.error_code) == ErrorCode.STALE_BROKER_EPOCH
    stale_md = channel.update_metadata_values(99, epoch - 1, -1, [], [bogus], {})
    response = send(c, target, inter_broker.UPDATE_METADATA, stale_md)
    assert int(response.error_code) == ErrorCode.STALE_CONTROLLER_EPOCH
    stale_stop = channel.stop_replica_values(99, epoch - 1, -1, [(("fenced", 0), -1)], True)
    response = send(c, target, inter_broker.STOP_REPLICA, stale_stop)
    assert int(response.error_code) == ErrorCode.STALE_CONTROLLER_EPOCH
    # Nothing was applied: the broker still reports ZooKeeper's leader.
    assert agree(c, "fenced", 1, [target])
    # ControlledShutdown reaches only the controller.
    response = send(c, target, inter_broker.CONTROLLED_SHUTDOWN,
                    {"broker_id": target, "broker_epoch": -1})
    assert int(response.error_code) == ErrorCode.NOT_CONTROLLER


def test_controller_sigterm_hands_over_leaderships_and_control(cluster: Any) -> None:
    c = cluster(brokers=3)
    c.create_topic("ctl", partitions=3, replication_factor=3)
    c.wait(lambda: agree(c, "ctl", 3, c.ids), 20, "metadata everywhere")
    first = c.wait_for_controller()
    epochs = {p: c.partition_state("ctl", p).leader_epoch for p in range(3)}
    assert c.stop(first) == 0
    # Its own controlled shutdown ran in-process before it resigned.
    for p in range(3):
        st = c.partition_state("ctl", p)
        assert st is not None and st.leader not in (first, -1)
        assert st.leader_epoch == epochs[p] + 1, (p, st)
    assert f"controlled shutdown of broker {first} succeeded" in c.broker(first).log_tail(200)
    c.wait_for_controller(exclude={first})
    survivors = [b for b in c.ids if b != first]
    c.wait(lambda: agree(c, "ctl", 3, survivors), 20, "survivors agree")


def test_restarted_broker_gets_metadata_and_its_replicas(cluster: Any) -> None:
    c = cluster(brokers=3)
    c.create_topic("back", partitions=3, replication_factor=3)
    victim = next(b for b in c.ids if b != c.controller())
    c.stop(victim)
    c.start(victim)
    c.wait_for_registered(c.ids)
    # A broker starts with an empty metadata cache: everything it knows came from the
    # controller's UpdateMetadata, and its logs exist because LeaderAndIsr named them.
    c.wait(lambda: agree(c, "back", 3, [victim]), 20, "the restarted broker's metadata")
    for p in range(3):
        assert (c.broker(victim).log_dir / f"back-{p}").is_dir()
