"""Replication across real broker processes on a real ZooKeeper: acks=all with an
idempotent producer survives kill -9 of partition leaders with no acknowledged message lost
or duplicated and identical replicas; a follower with a divergent tail truncates by leader
epoch when it comes back."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import Cluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")


def _log_bytes(c: Cluster, broker_id: int, topic: str, partition: int = 0) -> bytes:
    """The partition's segments on one broker, concatenated in offset order."""
    d = Path(c.broker(broker_id).log_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def _consume_all(bootstrap: str, topic: str, expected_end: int | None = None,
                 timeout: float = 30.0) -> list[bytes]:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    try:
        tp = confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)
        _low, high = consumer.get_watermark_offsets(tp, timeout=10)
        end = high if expected_end is None else expected_end
        consumer.assign([tp])
        values: list[bytes] = []
        offsets: list[int] = []
        deadline = time.monotonic() + timeout
        while (not offsets or offsets[-1] < end - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            offsets.append(msg.offset())
            values.append(msg.value())
        assert offsets == list(range(len(offsets))), "offsets are not dense from 0"
        assert not offsets or offsets[-1] == end - 1, (offsets[-1:], end)
        return values
    finally:
        consumer.close()


def _wait_for_full_isr(c: Cluster, topic: str) -> None:
    try:
        c.wait_for_isr(topic, 0, c.ids, timeout=40)
    except BaseException:
        for i in c.ids:
            print(f"--- broker {i} ---\n{c.broker(i).log_tail(60)}")
        raise


def _wait_replicas_identical(c: Cluster, topic: str, ids: list[int]) -> None:
    def same() -> bool:
        logs = [_log_bytes(c, i, topic) for i in ids]
        return all(x == logs[0] for x in logs) and bool(logs[0])

    wait_until(same, 30, f"identical logs of {topic}-0 on brokers {ids}")


def test_acks_all_idempotent_producer_survives_leader_kills(cluster: Any) -> None:
    c: Cluster = cluster(3, overrides={"min.insync.replicas": "2"})
    c.create_topic("t", 1, 3)
    c.wait_for_isr("t", 0, c.ids)
    acked: list[bytes] = []
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            failed.append(str(err))

    producer = confluent_kafka.Producer({
        "bootstrap.servers": c.bootstrap_servers, "acks": "all",
        "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000,
        "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
    })
    sent = 0

    def produce_for(seconds: float) -> None:
        nonlocal sent
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(50):
                producer.produce("t", value=b"m-%07d" % sent, partition=0,
                                 on_delivery=delivered)
                sent += 1
            producer.poll(0.02)

    produce_for(1.5)
    for _round in range(2):
        leader = c.leader("t", 0)
        c.kill(leader)
        produce_for(1.0)  # the producer keeps going through the election
        c.wait_for_leader("t", 0, exclude={leader})
        produce_for(1.5)
        c.start(leader)
        _wait_for_full_isr(c, "t")
        produce_for(1.0)
    assert producer.flush(60) == 0
    assert not failed, failed[:5]
    assert len(acked) == sent > 1000
    values = _consume_all(c.bootstrap_servers, "t")
    # Every acknowledged message exactly once, in the order produced.
    assert values == sorted(values)
    assert len(values) == len(set(values))
    assert set(acked) <= set(values)
    assert len(values) == sent  # idempotence: retries brought no duplicates
    print(f"produced {sent}, acknowledged {len(acked)}, consumed {len(values)}")
    _wait_replicas_identical(c, "t", c.ids)


def test_follower_with_a_divergent_tail_truncates_on_return(cluster: Any) -> None:
    c: Cluster = cluster(3, overrides={"min.insync.replicas": "1",
                                       "unclean.leader.election.enable": "false"})
    c.create_topic("d", 1, 3)
    c.wait_for_isr("d", 0, c.ids)
    all_acks = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_servers,
                                         "acks": "all", "linger.ms": 0})
    for i in range(10):
        all_acks.produce("d", value=b"common-%d" % i, partition=0)
    assert all_acks.flush(30) == 0
    old = c.leader("d", 0)
    followers = [i for i in c.ids if i != old]
    _wait_replicas_identical(c, "d", c.ids)
    # The followers stop fetching; the leader alone takes acks=1 writes, then dies.
    for f in followers:
        c.pause(f)
    # Fetches already waiting on the leader are answered (empty) into the paused
    # followers' sockets within replica.fetch.wait.max.ms; none are sent after that.
    time.sleep(0.8)
    try:
        one_ack = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_of([old]),
                                            "acks": "1", "linger.ms": 0})
        for i in range(5):
            one_ack.produce("d", value=b"lost-%d" % i, partition=0)
        assert one_ack.flush(10) == 0
        c.kill(old)
    finally:
        for f in followers:
            c.resume(f)
    new = c.wait_for_leader("d", 0, exclude={old})
    assert new in followers
    producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_of(followers),
                                         "acks": "all", "linger.ms": 0})
    for i in range(3):
        producer.produce("d", value=b"new-%d" % i, partition=0)
    assert producer.flush(30) == 0
    # The old leader returns with offsets 10-14 from its lost epoch: it must truncate them
    # (OffsetForLeaderEpoch) and take the new leader's 10-12 instead.
    c.start(old)
    _wait_for_full_isr(c, "d")
    _wait_replicas_identical(c, "d", c.ids)
    assert "truncated d-0 to offset 10" in c.broker(old).log_tail(1000)
    values = _consume_all(c.bootstrap_servers, "d")
    assert values == [b"common-%d" % i for i in range(10)] + [b"new-%d" % i for i in range(3)]


def _metadata_isr(c: Cluster, topic: str, via: int) -> list[int]:
    from klog.client.admin import AdminClient

    async def ask() -> Any:
        async with AdminClient(c.bootstrap_of([via])) as admin:
            return await admin.describe_topics([topic])

    described = asyncio.run(ask())
    return sorted(described[topic].partitions[0].isr)


def test_isr_shrinks_for_a_stalled_follower_and_grows_back(cluster: Any) -> None:
    # Sessions long enough that the controller never sees the stalled broker as gone: the
    # ISR changes here are the leader's own (same leader epoch).
    c: Cluster = cluster(3, overrides={"min.insync.replicas": "2",
                                       "zookeeper.session.timeout.ms": "30000"})
    c.create_topic("s", 1, 3)
    c.wait_for_isr("s", 0, c.ids)
    before = c.partition_state("s", 0)
    assert before is not None
    leader = before.leader
    # Stall a follower that is not the controller (a stalled controller would hold up the
    # metadata updates this test waits for).
    controller = c.wait_for_controller()
    followers = [i for i in c.ids if i != leader]
    stalled = next(i for i in reversed(followers) if i != controller)
    other = next(i for i in followers if i != stalled)
    for via in c.ids:  # everyone knows the topic before the stall
        wait_until(lambda via=via: _metadata_isr(c, "s", via) == c.ids, 30, "metadata of s")
    c.pause(stalled)
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_of([leader]),
                                             "acks": "all", "linger.ms": 0,
                                             "message.timeout.ms": 30000})
        errors: list[str | None] = []

        def delivered(err: Any, msg: Any) -> None:
            errors.append(None if err is None else err.name())

        started = time.monotonic()
        for i in range(3):
            producer.produce("s", value=b"v%d" % i, partition=0, on_delivery=delivered)
        # acks=all waits for the stalled follower until replica.lag.time.max.ms (3 s)
        # takes it out of the ISR; then the two left acknowledge.
        assert producer.flush(30) == 0
        if errors != [None] * 3:
            for i in c.ids:
                print(f"=== {i} (leader {leader}, stalled {stalled})", c.broker(i).log_tail(200))
        assert errors == [None] * 3
        assert time.monotonic() - started > 2.5
        c.wait_for_isr("s", 0, [leader, other])
        shrunk = c.partition_state("s", 0)
        assert shrunk is not None and shrunk.leader_epoch == before.leader_epoch
        # The ISR change notification reaches the controller; every broker's metadata
        # shows the new ISR.
        wait_until(lambda: _metadata_isr(c, "s", other) == sorted([leader, other]), 30,
                   "metadata with the shrunk ISR")
    finally:
        c.resume(stalled)
    c.wait_for_isr("s", 0, c.ids, timeout=30)
    grown = c.partition_state("s", 0)
    assert grown is not None and grown.leader_epoch == before.leader_epoch
    _wait_replicas_identical(c, "s", c.ids)
    assert _consume_all(c.bootstrap_servers, "s") == [b"v0", b"v1", b"v2"]


def test_with_unclean_election_off_a_partition_whose_isr_is_gone_stays_offline(
        cluster: Any) -> None:
    """The followers fall out of the ISR, the leader takes acks=1 writes alone and then
    goes: the partition has no leader until that broker returns (a follower taking over
    would drop those acknowledged writes), and then nothing is lost."""
    from klog.client.admin import NewTopic

    # Long sessions: the paused followers stay registered, so the controller never counts
    # them out; the leader leaves by SIGTERM (its registration goes at once).
    c: Cluster = cluster(4, overrides={"min.insync.replicas": "1",
                                       "unclean.leader.election.enable": "false",
                                       "zookeeper.session.timeout.ms": "30000"})
    controller = c.wait_for_controller()
    leader, *followers = [i for i in c.ids if i != controller]

    async def create(admin: Any) -> None:
        result = await admin.create_topics([NewTopic(
            "u", replica_assignment={0: [leader, *followers]})])
        assert result["u"] is None, result["u"]

    c._admin(None, create)
    c.wait_for_isr("u", 0, [leader, *followers])
    producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_servers,
                                         "acks": "all", "linger.ms": 0})
    for i in range(10):
        producer.produce("u", value=b"all-%d" % i, partition=0)
    assert producer.flush(30) == 0
    for f in followers:
        c.pause(f)
    try:
        # Followers at the leader's log end offset stay in sync however long they are
        # silent (Kafka's isCaughtUp): the leader's new writes are what they lag behind.
        one_ack = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_of([leader]),
                                            "acks": "1", "linger.ms": 0})
        for i in range(5):
            one_ack.produce("u", value=b"one-%d" % i, partition=0)
        assert one_ack.flush(10) == 0
        c.wait_for_isr("u", 0, [leader], timeout=30)  # replica.lag.time.max.ms: 3 s
        c.stop(leader)
    finally:
        for f in followers:
            c.resume(f)
    wait_until(lambda: c.leader("u", 0) == -1, 20, "u-0 to lose its leader")
    # It stays offline: the live replicas are not in the ISR.
    time.sleep(3)
    state = c.partition_state("u", 0)
    assert state is not None and (state.leader, state.isr) == (-1, (leader,))
    assert c.metadata_leader("u", 0, via=controller) == -1
    # The last ISR member returns and leads again, with every acknowledged write.
    c.start(leader)
    assert c.wait_for_leader("u", 0) == leader
    c.wait_for_isr("u", 0, [leader, *followers], timeout=40)
    assert _consume_all(c.bootstrap_servers, "u") == \
        [b"all-%d" % i for i in range(10)] + [b"one-%d" % i for i in range(5)]


def test_turning_unclean_election_on_brings_an_offline_partition_back(cluster: Any) -> None:
    """The partition's ISR is its stopped leader alone; setting the topic's
    unclean.leader.election.enable makes the controller elect a live follower at once (the
    records it never copied are lost, which is what that setting accepts)."""
    from klog.client.admin import AlterConfigOp, ConfigResource, NewTopic

    c: Cluster = cluster(3, overrides={"min.insync.replicas": "1",
                                       "unclean.leader.election.enable": "false",
                                       "zookeeper.session.timeout.ms": "30000"})
    controller = c.wait_for_controller()
    leader, follower = [i for i in c.ids if i != controller]

    async def create(admin: Any) -> None:
        result = await admin.create_topics([NewTopic(
            "v", replica_assignment={0: [leader, follower]})])
        assert result["v"] is None, result["v"]

    c._admin(None, create)
    c.wait_for_isr("v", 0, [leader, follower])
    producer = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_servers,
                                         "acks": "all", "linger.ms": 0})
    for i in range(5):
        producer.produce("v", value=b"both-%d" % i, partition=0)
    assert producer.flush(30) == 0
    c.pause(follower)
    try:
        one_ack = confluent_kafka.Producer({"bootstrap.servers": c.bootstrap_of([leader]),
                                            "acks": "1", "linger.ms": 0})
        one_ack.produce("v", value=b"leader-only", partition=0)
        assert one_ack.flush(10) == 0
        c.wait_for_isr("v", 0, [leader], timeout=30)
        c.stop(leader)
    finally:
        c.resume(follower)
    wait_until(lambda: c.leader("v", 0) == -1, 20, "v-0 to lose its leader")
    time.sleep(1)
    assert c.leader("v", 0) == -1  # unclean election is off: it stays offline

    async def allow(admin: Any) -> None:
        result = await admin.alter_configs({ConfigResource.of("topic", "v"): [
            AlterConfigOp("unclean.leader.election.enable", "true")]})
        assert all(e is None for e in result.values()), result

    c._admin(controller, allow)
    assert c.wait_for_leader("v", 0, timeout=20) == follower
    assert _consume_all(c.bootstrap_of([controller, follower]), "v") == \
        [b"both-%d" % i for i in range(5)]


@pytest.mark.parametrize("replicas", [3, 2])
def test_killing_the_controller_takes_it_out_of_the_isrs_it_followed(
        cluster: Any, replicas: int) -> None:
    """The controller's broker dies while it follows a partition: the broker that takes
    over as controller finds it missing from /brokers/ids and takes it out of that ISR at
    once (Kafka's onControllerFailover -> onBrokerFailure), so acks=all resumes within
    about the ZooKeeper session timeout. The leader's own lag check would take
    replica.lag.time.max.ms (set far longer here) and more. With 2 replicas the leader is
    left alone in the ISR: the LeaderAndIsr itself moves the high watermark, and the
    waiting produce must be answered then."""
    from klog.client.admin import NewTopic

    session_ms, lag_ms = 6000, 60000
    c: Cluster = cluster(3, overrides={"min.insync.replicas": str(replicas - 1),
                                       "zookeeper.session.timeout.ms": str(session_ms),
                                       "replica.lag.time.max.ms": str(lag_ms)})
    controller = c.wait_for_controller()
    leader, follower = [i for i in c.ids if i != controller]
    assigned = [leader, follower, controller] if replicas == 3 else [leader, controller]

    async def create(admin: Any) -> None:
        result = await admin.create_topics([NewTopic("k", replica_assignment={0: assigned})])
        assert result["k"] is None, result["k"]

    c._admin(None, create)
    c.wait_for_isr("k", 0, assigned)
    # The session's expiry, the next controller's failover, and slack for a loaded machine;
    # far below the lag check's replica.lag.time.max.ms.
    bound_ms = 4 * session_ms
    assert bound_ms < lag_ms
    producer = confluent_kafka.Producer({
        "bootstrap.servers": c.bootstrap_of([leader, follower]), "acks": "all",
        "linger.ms": 0, "message.timeout.ms": bound_ms,
    })
    errors: list[str | None] = []

    def delivered(err: Any, msg: Any) -> None:
        errors.append(None if err is None else err.name())

    producer.produce("k", value=b"before", partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0 and errors == [None]
    c.kill(controller)
    producer.produce("k", value=b"after", partition=0, on_delivery=delivered)
    assert producer.flush(bound_ms / 1000 + 10) == 0
    if errors != [None, None]:
        for i in c.ids:
            print(f"=== broker {i} (controller {controller}, leader {leader})\n"
                  f"{c.broker(i).log_tail(80)}")
    assert errors == [None, None]  # not _MSG_TIMED_OUT: acks=all came back in time
    state = c.partition_state("k", 0)
    assert state is not None and state.leader == leader
    assert sorted(state.isr) == sorted(r for r in assigned if r != controller)
    assert _consume_all(c.bootstrap_of([leader, follower]), "k") == [b"before", b"after"]


def _leader_epoch(c: Cluster, topic: str) -> int:
    state = c.partition_state(topic, 0)
    assert state is not None
    return state.leader_epoch


def test_a_follower_names_the_leader_to_a_producer_that_missed_the_move(cluster: Any) -> None:
    """Produce v10+ (KIP-951) against real brokers: a produce to a follower is answered
    NOT_LEADER_OR_FOLLOWER with the leader and its epoch (the follower's own replica's
    view) and the leader's endpoint (v9: the error alone). Once the leader died and came
    back as a follower, it names the new leader and epoch the same way."""
    from klog.protocol.errors import ErrorCode
    from klog.protocol.records.v2 import build_batch
    from tests.daemon.wire import WireClient

    c: Cluster = cluster(2)
    c.create_topic("m", 1, 2)
    c.wait_for_isr("m", 0, c.ids)
    leader = c.leader("m", 0)
    (follower,) = [i for i in c.ids if i != leader]
    epoch = _leader_epoch(c, "m")
    batch = build_batch([(int(time.time() * 1000), b"k", b"v")])

    def produce_to(broker_id: int, version: int) -> Any:
        b = c.broker(broker_id)
        with WireClient((b.host, b.port)) as client:
            return client.produce("m", 0, batch, version=version)

    def error_of(broker_id: int) -> int:
        return int(produce_to(broker_id, 10).responses[0].partition_responses[0].error_code)

    # the state znode names the leader before the brokers have taken the partition up (a
    # broker that has not answers UNKNOWN_TOPIC_OR_PARTITION meanwhile)
    wait_until(lambda: error_of(leader) == 0, 30, "the leader takes a produce")
    wait_until(lambda: error_of(follower) == ErrorCode.NOT_LEADER_OR_FOLLOWER, 30,
               "the follower hosts the partition")
    answer = produce_to(follower, 10)
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader, epoch)
    assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [
        (leader, c.broker(leader).host, c.broker(leader).port)]
    old = produce_to(follower, 9).responses[0].partition_responses[0]
    assert old.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # the leader dies: the survivor leads; the old leader, back as a follower, names it
    c.kill(leader)
    assert c.wait_for_leader("m", 0, exclude={leader}) == follower
    c.start(leader)
    c.wait_for_isr("m", 0, c.ids, timeout=40)
    new_epoch = _leader_epoch(c, "m")
    wait_until(lambda: error_of(leader) == ErrorCode.NOT_LEADER_OR_FOLLOWER, 30,
               "the old leader hosts the partition again, as a follower")
    answer = produce_to(leader, 11)
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (
        follower, new_epoch)
    assert [n.node_id for n in answer.node_endpoints] == [follower]
