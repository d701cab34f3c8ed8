"""The controller's wire channel with real brokers: LeaderAndIsr / UpdateMetadata reach
remote brokers, a new controller takes over with a higher epoch, a broker stopping with
SIGTERM hands its leaderships over first (ControlledShutdown), requests from an older
controller epoch or for an older broker epoch are refused, and control requests forged
by a client (another controller id, an epoch ZooKeeper has not reached, a broker epoch
that is not the registration's) are refused without being applied."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

import confluent_kafka

from klog.client.admin import AdminClient
from klog.client.network import BrokerConnection, build_request
from klog.daemon.controller import channel
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.protocol import apis, framing, inter_broker
from klog.protocol.errors import ErrorCode
from tests.cluster.conftest import Cluster
from tests.daemon.wire import WireClient


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
    ctl = c.wait_for_controller()
    target = next(b for b in c.ids if b != ctl)
    st = c.partition_state("fenced", 0)
    assert st is not None
    bogus = PartitionState("fenced", 0, target, st.leader_epoch + 5, (1, 2), (target,), epoch)
    # The controller of an older epoch (a deposed one; its id may have been any).
    for deposed in (ctl, 99):
        stale = channel.leader_and_isr_values(deposed, epoch - 1, -1, [bogus], {}, [],
                                              "PLAINTEXT")
        response = send(c, target, inter_broker.LEADER_AND_ISR, stale)
        assert int(response.error_code) == ErrorCode.STALE_CONTROLLER_EPOCH
    # The current controller, for an older incarnation of the target broker.
    old_incarnation = channel.leader_and_isr_values(ctl, epoch, broker_epoch(c, target) - 1,
                                                    [bogus], {}, [], "PLAINTEXT")
    response = send(c, target, inter_broker.LEADER_AND_ISR, old_incarnation)
    assert int(response.error_code) == ErrorCode.STALE_BROKER_EPOCH
    stale_md = channel.update_metadata_values(ctl, epoch - 1, -1, [], [bogus], {})
    response = send(c, target, inter_broker.UPDATE_METADATA, stale_md)
    assert int(response.error_code) == ErrorCode.STALE_CONTROLLER_EPOCH
    stale_stop = channel.stop_replica_values(ctl, epoch - 1, -1, [(("fenced", 0), -1)], True)
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


HUGE_EPOCH = 2**31 - 1


def raw_call(c: Cluster, broker_id: int, frame: bytes, api_key: int, version: int) -> Any:
    """Send one hand-made request frame from a plain socket; its decoded answer."""
    host, port = c.broker(broker_id).bootstrap_servers.split(":")
    with WireClient((host, int(port))) as client:
        client.send_raw(frame)
        _, response = client.recv_response(api_key, version)
        return response


def forged(c: Cluster, broker_id: int, api_key: int, version: int,
           values: dict[str, Any]) -> int:
    """The top-level error of a control request sent to ``broker_id`` from a plain
    socket, as any client could."""
    host, port = c.broker(broker_id).bootstrap_servers.split(":")
    with WireClient((host, int(port))) as client:
        return int(client.call(api_key, version, values).error_code)


def produce_acks_all(c: Cluster, topic: str, count: int, partitions: int = 1) -> list[Any]:
    """Produce ``count`` records with acks=all; the delivery errors (none expected)."""
    errors: list[Any] = []
    producer = confluent_kafka.Producer({
        "bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 0,
        "message.timeout.ms": 20000})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=i % partitions,
                         on_delivery=lambda err, _msg: err and errors.append(err))
    assert producer.flush(30) == 0
    return errors


def test_forged_control_requests_are_refused_and_the_controller_keeps_working(
        cluster: Any) -> None:
    """Issue 18, item 1 in cluster mode: StopReplica / LeaderAndIsr / UpdateMetadata from
    a plain socket to a follower, claiming a non-controller id or an epoch ZooKeeper has
    not reached, and ControlledShutdown to the controller without the broker's epoch:
    all refused, nothing applied; the real controller's requests are still obeyed."""
    c = cluster(brokers=3)
    c.create_topic("guarded", partitions=1, replication_factor=3,
                   configs={"min.insync.replicas": 3})
    c.wait(lambda: agree(c, "guarded", 1, c.ids), 20, "metadata everywhere")
    assert produce_acks_all(c, "guarded", 50) == []
    ctl = c.wait_for_controller()
    epoch = controller_epoch(c)
    leader = c.leader("guarded", 0)
    follower = next(b for b in c.ids if b not in (ctl, leader))
    other = next(b for b in c.ids if b != ctl)  # a broker, but not the controller
    st = c.partition_state("guarded", 0)
    assert st is not None
    # The follower leads alone, at a much higher leader epoch.
    usurp = PartitionState("guarded", 0, follower, st.leader_epoch + 100, (1, 2, 3),
                           (follower,), HUGE_EPOCH)
    tp = [(("guarded", 0), -1)]
    refused = {
        # The frame: StopReplica v0 (header v1, null client id), delete=true.
        "stop-replica-v0-huge-epoch": raw_call(c, follower, framing.encode_frame(
            struct.pack(">hhih", 5, 0, 1, -1) + struct.pack(">iib", ctl, HUGE_EPOCH, 1)
            + struct.pack(">ih", 1, 7) + b"guarded" + struct.pack(">i", 0)), 5, 0
        ).error_code,
        "stop-replica-other-id": forged(c, follower, inter_broker.STOP_REPLICA, 3,
                                        channel.stop_replica_values(other, epoch, -1, tp,
                                                                    True)),
        "leader-and-isr-huge-epoch": forged(
            c, follower, inter_broker.LEADER_AND_ISR, 6, channel.leader_and_isr_values(
                ctl, HUGE_EPOCH, -1, [usurp], {}, [], "PLAINTEXT")),
        "leader-and-isr-other-id": forged(
            c, follower, inter_broker.LEADER_AND_ISR, 6, channel.leader_and_isr_values(
                other, epoch, -1, [usurp], {}, [], "PLAINTEXT")),
        "update-metadata-other-id": forged(
            c, follower, inter_broker.UPDATE_METADATA, 7, channel.update_metadata_values(
                other, epoch, -1, [], [usurp], {})),
        "update-metadata-next-epoch": forged(
            c, follower, inter_broker.UPDATE_METADATA, 7, channel.update_metadata_values(
                ctl, epoch + 1, -1, [], [usurp], {})),
    }
    assert refused == {name: ErrorCode.CLUSTER_AUTHORIZATION_FAILED for name in refused}
    # ControlledShutdown of the follower, sent to the controller by someone else: not
    # without the follower's current broker epoch.
    for version, values in [(1, {"broker_id": follower}),
                            (3, {"broker_id": follower, "broker_epoch": -1}),
                            (3, {"broker_id": follower,
                                 "broker_epoch": broker_epoch(c, follower) + 1})]:
        error = forged(c, ctl, inter_broker.CONTROLLED_SHUTDOWN, version, values)
        assert error == ErrorCode.STALE_BROKER_EPOCH, (version, values)
    assert controller_epoch(c) == epoch and c.wait_for_controller() == ctl
    # Nothing was applied: the follower keeps its replica and ZooKeeper's view ...
    assert (c.broker(follower).log_dir / "guarded-0").is_dir()
    assert agree(c, "guarded", 1, c.ids)
    # ... and still obeys the controller (its controller epoch was not raised to
    # 2**31-1): acks=all with min.insync.replicas=3 needs it in every ISR, on the old
    # topic and on one created now; and the follower was not marked as shutting down,
    # or one of three single-replica partitions would get no leader.
    c.create_topic("after", partitions=3, replication_factor=3,
                   configs={"min.insync.replicas": 3})
    c.create_topic("solo", partitions=3, replication_factor=1)
    assert {c.leader("solo", p) for p in range(3)} == set(c.ids)
    assert produce_acks_all(c, "after", 30, partitions=3) == []
    assert produce_acks_all(c, "guarded", 10) == []
    c.wait(lambda: agree(c, "after", 3, c.ids), 20, "the new topic everywhere")
