"""Kafka's Java transactions (the 4.x and 3.x clients, as test_java_client.py) against
klog: the consume-transform-produce loop with
sendOffsetsToTransaction (with aborts on the way) copies a topic exactly once; a zombie
producer is fenced by its successor; aborted and open transactions as read_committed and
read_uncommitted consumers see them (the last stable offset); and the copy again on a
3-broker cluster whose transaction coordinator is killed -9 in the middle."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster
from tests.jvm.conftest import wait_until_settled
from tests.jvm.driver import JavaProcess, Jvm

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3"}



@pytest.fixture(scope="module")
def jvm(client_jvm: Jvm) -> Jvm:
    """This module's tests run with Kafka 4.x's client and again with the last 3.x one."""
    return client_jvm

def fill(bootstrap: str, topic: str, partitions: int, per_partition: int,
         replication: int = 1) -> list[bytes]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, replication)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    values = []
    for p in range(partitions):
        for i in range(per_partition):
            value = f"{p}-{i}".encode()
            values.append(value)
            producer.produce(topic, value, key=f"k{i}".encode(), partition=p)
    assert producer.flush(30) == 0
    return values


def read_committed(bootstrap: str, topic: str, partitions: int, expect: int,
                   timeout: float = 30.0) -> list[bytes]:
    """Every record of ``topic`` as a read_committed librdkafka consumer sees it, up to the
    end (reading on a while past ``expect`` so that duplicates would show)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (len(got) < expect or len(at_end) < partitions):
            for message in consumer.consume(500, timeout=0.2):
                if message.error() is not None:
                    if message.error().code() == -191:  # _PARTITION_EOF
                        at_end.add(message.partition())
                        continue
                    raise AssertionError(message.error())
                at_end.discard(message.partition())
                got.append(message.value())
        return got
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    return {tp.partition: tp.offset for tp in future.result(15).topic_partitions}


def assert_copied_exactly_once(inputs: list[bytes], outputs: list[bytes]) -> None:
    expected = Counter(b"copied:" + v for v in inputs)
    got = Counter(outputs)
    duplicated = {v: n for v, n in got.items() if n > 1}
    missing = expected - got
    assert not duplicated, f"{len(duplicated)} records copied more than once: " \
                           f"{sorted(duplicated)[:5]}"
    assert not missing, f"{len(missing)} records never copied: {sorted(missing)[:5]}"
    assert got == expected


def test_copy_loop_with_aborts_is_exactly_once(jvm: Jvm, bootstrap: str, topic: str) -> None:
    inputs = fill(bootstrap, topic, 3, 200)
    output = f"{topic}-out"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(output, 3, 1)]).values():
        future.result(15)
    group = f"g-{topic}"
    got = jvm.call("txn_copy", bootstrap=bootstrap, input=topic, output=output, group=group,
                   transactional_id=f"tx-{topic}", expect=600, abort_every=3)
    assert got["committed_records"] == 600
    assert got["aborted"] >= 1 and got["abortable_errors"] == 0
    assert_copied_exactly_once(inputs, read_committed(bootstrap, output, 3, 600))
    assert committed_offsets(bootstrap, group) == {0: 200, 1: 200, 2: 200}


def test_zombie_is_fenced(jvm: Jvm, bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    got = jvm.call("txn_fencing", bootstrap=bootstrap, topic=topic,
                   transactional_id=f"tx-{topic}")
    assert got["zombie_first_send"] == "ok"
    assert got["zombie_second_send"] in ("ProducerFencedException",
                                         "InvalidProducerEpochException")
    assert got["zombie_commit"] in ("ProducerFencedException", "InvalidProducerEpochException",
                                    "KafkaException")
    assert got["successor_send"] == "ok" and got["successor_commit"] == "ok"
    assert read_committed(bootstrap, topic, 1, 1) == [b"successor-1"]


def test_aborted_and_open_transactions_for_read_committed(jvm: Jvm, bootstrap: str,
                                                         topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    got = jvm.call("txn_abort_and_lso", bootstrap=bootstrap, topic=topic,
                   transactional_id=f"tx-{topic}")
    # 10 aborted records + their marker, 5 committed + marker: the open transaction's
    # first record is at 17, which is where read_committed's end stands.
    assert got["lso_while_open"] == 17
    assert got["hw_while_open"] == 20
    assert got["read_committed_while_open"] == [f"committed-{i}" for i in range(5)]
    assert got["lso_after_commit"] == 21
    assert got["read_committed_after_commit"] == [f"open-{i}" for i in range(3)]
    assert got["read_uncommitted"] == ([f"aborted-{i}" for i in range(10)]
                                       + [f"committed-{i}" for i in range(5)]
                                       + [f"open-{i}" for i in range(3)])


def test_copy_loop_survives_a_coordinator_kill(cluster: Callable[..., Cluster], topic: str,
                                               tmp_path: Path) -> None:
    c = cluster(brokers=3, overrides={"min.insync.replicas": "2"})
    wait_until_settled(c)
    bootstrap = c.bootstrap_servers
    inputs = fill(bootstrap, topic, 3, 200, replication=3)
    output = f"{topic}-out"
    c.create_topic(output, partitions=3, replication_factor=3)
    group = f"g-{topic}"
    copy = JavaProcess.scenario(
        "txn_copy", tmp_path / "copy.log", bootstrap=bootstrap, input=topic, output=output,
        group=group, transactional_id=f"tx-{topic}", expect=600, pause_ms=20,
        max_poll_records=20, timeout_ms=150000,
        config={"transaction.timeout.ms": "10000", "request.timeout.ms": "5000",
                "default.api.timeout.ms": "20000"})
    try:
        first = copy.event("progress", timeout=60)
        coordinator = first["coordinator"]
        assert coordinator in c.ids
        at_kill = 0
        while at_kill < 150:
            at_kill = copy.event("progress", timeout=60)["committed"]
        c.kill(coordinator)  # kill -9, mid-stream
        # Its registration lives until its ZooKeeper session expires; a broker started
        # before that is refused, in Kafka as in klog.
        c.wait(lambda: coordinator not in c.registered(), 30, "the killed broker's session "
               "to expire")
        c.start(coordinator)
        result = copy.result(timeout=170)
    finally:
        copy.stop()
    assert at_kill < 600, "the copy was over before the kill"
    assert result["committed_records"] == 600
    assert_copied_exactly_once(inputs, read_committed(bootstrap, output, 3, 600))
    assert committed_offsets(bootstrap, group) == {0: 200, 1: 200, 2: 200}
