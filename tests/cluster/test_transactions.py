"""Transactions in cluster mode: markers cross brokers (WriteTxnMarkers to the leaders the
coordinator is not), and the coordinator's broker dies mid-transaction.

A transaction writes to partitions led by both brokers of a two-broker cluster, so its
coordinator writes one marker in-process and sends the other with WriteTxnMarkers; a
read_committed consumer sees committed transactions only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.timeout(180)

OVERRIDES = {
    "transaction.state.log.replication.factor": "2",
    "transaction.state.log.min.isr": "1",
    "offsets.topic.replication.factor": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


def consume(bootstrap: str, topic: str, partitions: int, isolation: str, expected: int,
            timeout: float = 30.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": isolation, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        quiet_until = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if len(out) >= expected:
                    quiet_until = quiet_until or time.monotonic() + 1.0
                    if time.monotonic() > quiet_until:
                        break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            out.append(msg.value())
        return out
    finally:
        consumer.close()


def test_markers_reach_the_leaders_on_other_brokers(cluster: Callable[..., Cluster]) -> None:
    c = cluster(brokers=2, overrides=OVERRIDES)
    c.create_topic("spread", partitions=4, replication_factor=1)
    leaders = {c.leader("spread", p) for p in range(4)}
    assert leaders == {1, 2}  # both brokers lead some partition
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": "x-broker",
                  "transaction.timeout.ms": 10000})
    p.init_transactions(30)
    for round_, commit in enumerate((True, False, True)):
        p.begin_transaction()
        for i in range(8):
            p.produce("spread", f"{round_}-{i}".encode(), partition=i % 4)
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(10)
            p.abort_transaction(30)
    committed = consume(c.bootstrap_servers, "spread", 4, "read_committed", 16)
    assert sorted(committed) == sorted(f"{r}-{i}".encode() for r in (0, 2) for i in range(8))
    everything = consume(c.bootstrap_servers, "spread", 4, "read_uncommitted", 24)
    assert len(everything) == 24


def test_coordinator_killed_mid_transaction(cluster: Callable[..., Cluster]) -> None:
    """The coordinator's broker is killed -9 with a transaction open: the other broker
    takes over its __transaction_state partition, loads the Ongoing transaction, aborts it
    after its timeout (markers to the data partition) and the last stable offset moves."""
    from klog.daemon.group.metadata_manager import java_string_hash, kafka_abs

    c = cluster(brokers=2, overrides=OVERRIDES)
    c.create_topic("fo", partitions=1, replication_factor=2)
    txn_id = "failover-txn"
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": txn_id,
                  "transaction.timeout.ms": 3000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("fo", b"open")
    p.flush(10)
    state_partition = kafka_abs(java_string_hash(txn_id)) % 3
    coordinator = c.leader("__transaction_state", state_partition)
    survivor = next(b for b in c.ids if b != coordinator)
    c.kill(coordinator)
    del p
    c.wait_for_leader("__transaction_state", state_partition, exclude={coordinator})
    c.wait_for_leader("fo", 0, exclude={coordinator})
    bootstrap = c.bootstrap_of([survivor])
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce("fo", b"plain")
    plain.flush(20)
    assert consume(bootstrap, "fo", 1, "read_committed", 1, timeout=40) == [b"plain"]
    again = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    again.init_transactions(30)
    again.begin_transaction()
    again.produce("fo", b"done")
    again.commit_transaction(30)
    assert consume(bootstrap, "fo", 1, "read_committed", 2) == [b"plain", b"done"]


def test_transactions_while_a_broker_is_bounced(cluster: Callable[..., Cluster]) -> None:
    """Kafka's transactions_test shape without the consumer side: transactions of 50
    records over 4 partitions (replication factor 2) while the broker that does not
    coordinate them is stopped and started again. Markers are retried across the leader
    moves; read_committed sees every committed record exactly once."""
    from klog.daemon.group.metadata_manager import java_string_hash, kafka_abs

    c = cluster(brokers=2, overrides=OVERRIDES)
    c.create_topic("bounced", partitions=4, replication_factor=2)
    txn_id = "bounce-txn"
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": txn_id,
                  "transaction.timeout.ms": 20000, "linger.ms": 5})
    p.init_transactions(30)
    coordinator = c.leader("__transaction_state", kafka_abs(java_string_hash(txn_id)) % 3)
    other = next(b for b in c.ids if b != coordinator)
    expected = []
    for t in range(30):
        if t == 10:
            assert c.stop(other) == 0
        if t == 20:
            c.start(other)
        p.begin_transaction()
        for i in range(50):
            value = f"{t}-{i}".encode()
            p.produce("bounced", value, partition=i % 4)
            expected.append(value)
        p.commit_transaction(60)
    got = consume(c.bootstrap_of([coordinator]), "bounced", 4, "read_committed",
                  len(expected), timeout=60)
    assert len(got) == len(expected) and sorted(got) == sorted(expected)


def test_a_prepared_commit_is_completed_after_the_coordinator_is_killed(
        cluster: Callable[..., Cluster]) -> None:
    """EndTxn(commit) is answered once PrepareCommit is written; its marker cannot reach
    the data partition (its only replica's broker is stopped), and the coordinator is
    killed -9 meanwhile. Restarted, it loads PrepareCommit from __transaction_state and
    sends the marker once the partition is back: the commit becomes visible."""
    from klog.daemon.group.metadata_manager import java_string_hash, kafka_abs

    c = cluster(brokers=2, overrides=OVERRIDES)
    c.create_topic("pc", partitions=2, replication_factor=1)
    txn_id = "prepared-txn"
    state_partition = kafka_abs(java_string_hash(txn_id)) % 3
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": txn_id,
                  "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    coordinator = c.leader("__transaction_state", state_partition)
    other = next(b for b in c.ids if b != coordinator)
    data = next(i for i in range(2) if c.leader("pc", i) == other)
    p.begin_transaction()
    p.produce("pc", b"prepared", partition=data)
    p.flush(10)
    assert c.stop(other) == 0
    p.commit_transaction(30)  # answered after PrepareCommit; the marker is pending
    c.kill(coordinator)
    del p
    c.start(other)
    # The killed broker's registration lives until its ZooKeeper session expires.
    c.wait(lambda: coordinator not in c.registered(), 30, "the killed broker's session ends")
    c.start(coordinator)
    c.wait_for_leader("pc", data)
    assert consume(c.bootstrap_servers, "pc", 2, "read_committed", 1, timeout=60) == [
        b"prepared"]


def test_committed_transactions_stay_readable_on_a_leader_restarted_after_kill_9(
        cluster: Callable[..., Cluster]) -> None:
    """A committed and an aborted transaction on a replicated topic; one broker stopped,
    so the other leads every partition alone; that leader is killed -9 and started
    again: it leads with the producer state it replayed from its log (no follower fetch
    moves its high watermark), and read_committed sees exactly the committed records."""
    # The high watermarks checkpointed before the kill, as a broker running for a while
    # has them: loaded again, they do not move, so nothing else ends what was replayed.
    c = cluster(brokers=2, overrides={**OVERRIDES,
                                      "replica.high.watermark.checkpoint.interval.ms": "200"})
    c.create_topic("rl", partitions=2, replication_factor=2)
    p = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": "rl-txn",
                  "transaction.timeout.ms": 20000})
    p.init_transactions(30)
    committed = [f"c-{i}".encode() for i in range(20)]
    p.begin_transaction()
    for i, value in enumerate(committed):
        p.produce("rl", value, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce("rl", f"a-{i}".encode(), partition=i % 2)
    p.flush(10)
    p.abort_transaction(30)
    del p
    assert sorted(consume(c.bootstrap_servers, "rl", 2, "read_committed", 20)) == sorted(
        committed)
    survivor = c.leader("rl", 0)
    other = next(b for b in c.ids if b != survivor)
    assert c.stop(other) == 0
    for partition in range(2):
        c.wait_for_isr("rl", partition, [survivor], timeout=30)
    time.sleep(1.0)
    c.kill(survivor)
    c.wait(lambda: survivor not in c.registered(), 30, "the killed broker's session ends")
    c.start(survivor)
    for partition in range(2):
        c.wait_for_leader("rl", partition)
    bootstrap = c.bootstrap_of([survivor])
    assert sorted(consume(bootstrap, "rl", 2, "read_committed", 20, timeout=20)) == sorted(
        committed)
    assert len(consume(bootstrap, "rl", 2, "read_uncommitted", 30)) == 30
