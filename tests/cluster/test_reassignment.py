"""Partition reassignment on a real ZooKeeper and 4 real brokers while an acks=all
idempotent producer and a consumer run: move [1,2,3] -> [2,3,4] (the old replica's log is
deleted), shrink RF 3 -> 2, grow it back with the controller killed (kill -9) in the
middle, grow RF 1 -> 3 and cancel half-way (back to the original replica; the adding
replica's log deleted), and Kafka 2.x's /admin/reassign_partitions znode. Nothing
acknowledged is lost and the consumer sees every message exactly once. A topic deleted
while it moves is deleted when the move ends."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import NoNodeError
from tests.cluster.conftest import Cluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(300)


#: Brokers held with SIGSTOP: admin requests bootstrap from the others (a paused broker
#: accepts connections but never answers, and its ZooKeeper session must not expire).
PAUSED: set[int] = set()


def admin(c: Cluster, fn: Any) -> Any:
    from klog.client.admin import AdminClient

    async def run() -> Any:
        async with AdminClient(c.bootstrap_of(i for i in c.ids if i not in PAUSED)) as a:
            return await fn(a)

    return asyncio.run(run())


def reassign(c: Cluster, targets: dict[tuple[str, int], list[int] | None]) -> dict[Any, Any]:
    return admin(c, lambda a: a.alter_partition_reassignments(targets))


def ongoing(c: Cluster) -> dict[Any, Any]:
    return admin(c, lambda a: a.list_partition_reassignments())


def assignment(c: Cluster, topic: str, partition: int = 0) -> paths.ReplicaAssignment:
    data, _ = c.store.get(paths.topic_path(topic))
    return paths.TopicAssignment.decode(data, topic).partitions[partition]


def has_log(c: Cluster, broker_id: int, topic: str, partition: int = 0) -> bool:
    return (Path(c.broker(broker_id).log_dir) / f"{topic}-{partition}").exists()


def wait_done(c: Cluster, topic: str, target: list[int], timeout: float = 60.0) -> None:
    def done() -> bool:
        ra = assignment(c, topic)
        return list(ra.replicas) == target and not ra.adding_replicas \
            and not ra.removing_replicas
    try:
        wait_until(done, timeout, f"reassignment of {topic}-0 to {target}")
    except BaseException:
        for i in c.ids:
            print(f"--- broker {i} ---\n{c.broker(i).log_tail(40)}")
        raise


class Traffic:
    """An acks=all idempotent producer and an assign()ed consumer of t-0, each in a
    thread, for the whole test."""

    def __init__(self, c: Cluster) -> None:
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.seen: list[bytes] = []
        self.sent = 0
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": c.bootstrap_servers, "acks": "all",
            "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120000,
            "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
        })
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": c.bootstrap_servers, "group.id": "reassign-check",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000,
        })
        self.consumer.assign([confluent_kafka.TopicPartition("t", 0, 0)])
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]
        for th in self.threads:
            th.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.failed.append(str(err))

    def _produce(self) -> None:
        while not self.stop_producing.is_set():
            for _ in range(20):
                self.producer.produce("t", value=b"m-%07d" % self.sent, partition=0,
                                      on_delivery=self._delivered)
                self.sent += 1
            self.producer.poll(0.02)

    def _consume(self) -> None:
        while not self.stop_consuming.is_set():
            msg = self.consumer.poll(0.2)
            if msg is not None and not msg.error():
                self.seen.append(msg.value())

    def finish(self) -> None:
        self.stop_producing.set()
        self.threads[0].join(10)
        assert self.producer.flush(120) == 0
        wait_until(lambda: len(self.seen) >= self.sent, 60,
                   f"the consumer to see {self.sent} messages")
        self.stop_consuming.set()
        self.threads[1].join(10)
        self.consumer.close()


def test_reassignments_under_load(cluster: Any) -> None:
    c: Cluster = cluster(4, overrides={"min.insync.replicas": "2"})

    async def create(a: Any) -> None:
        from klog.client.admin import NewTopic

        result = await a.create_topics([NewTopic("t", replica_assignment={0: [1, 2, 3]}),
                                        NewTopic("g", replica_assignment={0: [2]})])
        assert all(e is None for e in result.values()), result

    admin(c, create)
    c.wait_for_leader("t", 0)
    c.wait_for_leader("g", 0)
    c.wait_for_isr("t", 0, [1, 2, 3], timeout=30)
    traffic = Traffic(c)
    try:
        _scenarios(c, traffic)
        traffic.finish()
    finally:
        traffic.stop_producing.set()
        traffic.stop_consuming.set()
    assert not traffic.failed, traffic.failed[:5]
    assert len(traffic.acked) == traffic.sent > 2000
    # Every acknowledged message exactly once, in the order produced.
    assert traffic.seen == sorted(traffic.seen)
    assert len(set(traffic.seen)) == len(traffic.seen) == traffic.sent
    assert set(traffic.acked) == set(traffic.seen)
    print(f"produced {traffic.sent}, acknowledged {len(traffic.acked)}, "
          f"consumed {len(traffic.seen)}")


def _scenarios(c: Cluster, traffic: Traffic) -> None:
    time.sleep(1.5)
    # 1. Move [1,2,3] -> [2,3,4]: broker 4 catches up, 1 goes (its log deleted).
    assert reassign(c, {("t", 0): [2, 3, 4]}) == {("t", 0): None}
    wait_done(c, "t", [2, 3, 4])
    assert set(c.partition_state("t", 0).isr) == {2, 3, 4}
    assert c.leader("t", 0) in (2, 3, 4)
    wait_until(lambda: not has_log(c, 1, "t"), 20, "t-0 deleted on broker 1")
    assert has_log(c, 4, "t")
    assert ongoing(c) == {}
    # Refusals come back per partition, with Kafka's error.
    errors = reassign(c, {("t", 0): [2, 2], ("t", 9): [1], ("g", 0): None})
    assert "INVALID_REPLICA_ASSIGNMENT" in repr(errors[("t", 0)])
    assert "UNKNOWN_TOPIC_OR_PARTITION" in repr(errors[("t", 9)])
    assert "NO_REASSIGNMENT_IN_PROGRESS" in repr(errors[("g", 0)])
    time.sleep(1.0)

    # 2. Shrink RF 3 -> 2: completes at once.
    assert reassign(c, {("t", 0): [2, 3]}) == {("t", 0): None}
    wait_done(c, "t", [2, 3], timeout=20)
    wait_until(lambda: not has_log(c, 4, "t"), 20, "t-0 deleted on broker 4")
    time.sleep(1.0)

    # 3. Grow RF 2 -> 3 and kill -9 the controller while the new replica is held back
    #    (paused): the next controller finishes it.
    controller = c.wait_for_controller()
    adding = next(b for b in (1, 4) if b != controller)
    c.pause(adding)
    PAUSED.add(adding)
    try:
        assert reassign(c, {("t", 0): [2, 3, adding]}) == {("t", 0): None}
        assert list(assignment(c, "t").adding_replicas) == [adding]
        c.kill(controller)
        wait_until(lambda: c.controller() not in (None, controller), 30, "a new controller")
    finally:
        c.resume(adding)
        PAUSED.discard(adding)
    if controller in (2, 3):
        c.start(controller)  # a target replica: it must be back to join the ISR
    wait_done(c, "t", [2, 3, adding])
    if controller not in (2, 3):
        c.start(controller)
    c.wait_for_registered(c.ids)
    time.sleep(1.0)

    # 4. Grow RF 1 -> 3 of g, cancelled half-way: back to [2], the adding replicas' logs
    #    deleted. Then grow it for real.
    controller = c.wait_for_controller()
    held = next(b for b in (1, 3, 4) if b != controller)
    other = next(b for b in (1, 3, 4) if b not in (controller, held))
    # The controller learns of the restarted broker from its watch, a moment later.
    wait_until(lambda: len(c.describe_cluster(via=controller).brokers) == 4, 20,
               "the controller to see 4 brokers")
    c.pause(held)
    PAUSED.add(held)
    try:
        result = reassign(c, {("g", 0): [2, held, other]})
        if result != {("g", 0): None}:
            for i in c.ids:
                print(f"--- broker {i} ---\n{c.broker(i).log_tail(60)}")
        assert result == {("g", 0): None}, (controller, c.controller())
        wait_until(lambda: ongoing(c).get(("g", 0)) is not None, 10, "g-0 listed")
        listed = ongoing(c)[("g", 0)]
        assert set(listed.adding_replicas) == {held, other} and listed.removing_replicas == ()
        wait_until(lambda: has_log(c, other, "g"), 20, f"g-0 created on broker {other}")
        assert reassign(c, {("g", 0): None}) == {("g", 0): None}
        wait_done(c, "g", [2], timeout=20)
    finally:
        c.resume(held)
        PAUSED.discard(held)
    wait_until(lambda: not has_log(c, other, "g") and not has_log(c, held, "g"), 30,
               "the cancelled replicas of g-0 deleted")
    assert reassign(c, {("g", 0): [2, held, other]}) == {("g", 0): None}
    wait_done(c, "g", [2, held, other])

    # 5. Kafka 2.x tooling: /admin/reassign_partitions, deleted by the controller when done.
    c.store.create(paths.REASSIGN_PARTITIONS, paths.PartitionReassignment(
        {("g", 0): (held, other)}).encode(), make_parents=True)
    wait_done(c, "g", [held, other])

    def gone() -> bool:
        try:
            c.store.get(paths.REASSIGN_PARTITIONS)
        except NoNodeError:
            return True
        return False

    wait_until(gone, 20, "/admin/reassign_partitions deleted")
    time.sleep(1.0)


def test_topic_deletion_waits_for_its_reassignment(cluster: Any) -> None:
    """As Kafka: a topic whose partition is being moved is deleted once the move ends; the
    request stays in /admin/delete_topics and the topic takes no other reassignment."""
    c: Cluster = cluster(3)
    c.create_topic("d", partitions=1, replication_factor=1)
    leader = c.wait_for_leader("d", 0)
    # Not the controller: admin requests go there, and a paused broker never answers.
    controller = c.wait_for_controller()
    adding = next(b for b in c.ids if b not in (leader, controller))
    other = next(b for b in c.ids if b not in (leader, adding))
    c.pause(adding)  # the new replica cannot catch up: the move stays in flight
    PAUSED.add(adding)
    try:
        assert reassign(c, {("d", 0): [leader, adding]}) == {("d", 0): None}
        assert list(assignment(c, "d").adding_replicas) == [adding]
        # Queued, not done within the request's timeout: REQUEST_TIMED_OUT, as Kafka says.
        errors = admin(c, lambda a: a.delete_topics(["d"], timeout_ms=2000))
        assert "REQUEST_TIMED_OUT" in repr(errors["d"]), errors
        assert c.store.exists(paths.topic_path("d")) is not None
        assert c.store.exists(paths.delete_topic_path("d")) is not None
        errors = reassign(c, {("d", 0): [leader, other]})
        assert "UNKNOWN_TOPIC_OR_PARTITION" in repr(errors[("d", 0)]), errors
    finally:
        c.resume(adding)
        PAUSED.discard(adding)
    # The move completes, then the topic goes: znodes and every replica's log.
    # The controller removes the topic's znode, then its config, then the deletion request,
    # one after another (as Kafka): wait for the last of them.
    wait_until(lambda: c.store.exists(paths.delete_topic_path("d")) is None, 60,
               "topic d's deletion request done after its reassignment")
    assert c.store.exists(paths.topic_path("d")) is None
    wait_until(lambda: not has_log(c, leader, "d") and not has_log(c, adding, "d"), 30,
               "d-0's logs deleted")
