"""Kafka's transactions_test shape (tests/kafkatest/tests/core/transactions_test.py with its
TransactionalMessageCopier) in cluster mode: N unique records are copied from one topic to
another by a consume-transform-produce loop in transactions of ~750 records while brokers
are bounced, cleanly (SIGTERM) or hard (SIGKILL): first the broker that is both the
transaction coordinator and the group coordinator of the copier (its transactional id and
group id are picked so), then another one. Afterwards a read_committed consumer of the
output finds exactly the N input values, each once, and the copier's group has committed the
end of every input partition.

The copier is librdkafka's (confluent-kafka): a read_committed consumer in a group without
auto commit, and a transactional producer. Per transaction: begin, produce the transformed
records, send_offsets_to_transaction with the consumer's positions and group metadata,
commit. An abortable error aborts and rewinds the consumer to the group's committed
offsets; a rebalance (the group coordinator moved) aborts too, as librdkafka's own
transactions example does, since the new assignment restarts from the committed offsets.
The copy is gated (``Copier.allowance``) so that it goes on during every bounce.

``COPIER_DEBUG=eos,cgrp,...`` in the environment turns on librdkafka's debug logs.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.timeout(240)

RECORDS = 12_000
TRANSACTION_SIZE = 750
PARTITIONS = 4
INPUT, OUTPUT = "copy-input", "copy-output"

OVERRIDES = {
    "min.insync.replicas": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
TOPIC_CONFIGS = {"min.insync.replicas": "2"}


def _hash_partition(key: str, partitions: int = 3) -> int:
    from klog.daemon.group.metadata_manager import java_string_hash, kafka_abs

    return kafka_abs(java_string_hash(key)) % partitions


@dataclass
class CopierStats:
    committed: int = 0  # input records whose offsets are committed with their copies
    transactions: int = 0
    aborts: int = 0
    rebalances: int = 0
    done: bool = False
    phase: str = "starting"  # what the copier is doing, for a failure's message
    error: BaseException | None = None
    events: list[str] = field(default_factory=list)


class Copier(threading.Thread):
    """TransactionalMessageCopier in Python. It copies no further than ``allowance`` input
    records, which the test raises around each bounce so that the copy spans them."""

    def __init__(self, bootstrap: str, total: int, deadline: float, transactional_id: str,
                 group: str) -> None:
        super().__init__(name="copier", daemon=True)
        self.bootstrap = bootstrap
        self.total = total
        self.deadline = deadline
        self.transactional_id = transactional_id
        self.group = group
        self.allowance = 0
        self.stats = CopierStats()
        self._rebalanced = False

    def run(self) -> None:
        try:
            self._copy()
            self.stats.done = True
        except BaseException as e:  # reported by the test
            self.stats.error = e

    def _check_deadline(self) -> None:
        if time.monotonic() > self.deadline:
            raise TimeoutError(f"copier still running at its deadline: {self.stats}")

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._rebalanced = True
        self.stats.rebalances += 1

    def _copy(self) -> None:
        debug = {"debug": os.environ["COPIER_DEBUG"]} if os.environ.get("COPIER_DEBUG") else {}
        consumer = Consumer({**debug,
            "bootstrap.servers": self.bootstrap, "group.id": self.group,
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
        })
        producer = Producer({**debug,
            "bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
            "transaction.timeout.ms": 30000, "linger.ms": 5,
            # librdkafka 2.10+ decommissions a broker missing from Metadata (a killed one
            # until it is back) but may keep it cached as the group coordinator: then
            # send_offsets_to_transaction waits for a state change of some other broker
            # connection, past its timeout (confluentinc/librdkafka#5511 and #5456).
            # Closing idle connections provides such state changes.
            "connections.max.idle.ms": 3000,
        })
        try:
            consumer.subscribe([INPUT], on_revoke=self._on_revoke)
            producer.init_transactions(60)
            while self.stats.committed < self.total:
                self._check_deadline()
                if self.stats.committed >= self.allowance:
                    # Not consumer.poll(): it would hand over a record. The heartbeats go
                    # on in librdkafka's thread; a gate is far shorter than
                    # max.poll.interval.ms.
                    time.sleep(0.1)
                    continue
                self._one_transaction(consumer, producer)
        finally:
            consumer.close()
            producer.flush(10)

    def _one_transaction(self, consumer: Consumer, producer: Producer) -> None:
        self.stats.phase = "begin"
        producer.begin_transaction()
        count = 0
        idle_since = time.monotonic()
        limit = min(self.total, self.allowance)
        while count < TRANSACTION_SIZE and self.stats.committed + count < limit:
            self._check_deadline()
            self.stats.phase = f"consuming ({count} in the transaction)"
            messages = consumer.consume(min(500, TRANSACTION_SIZE - count), 0.2)
            if self._rebalanced:
                # The batch may hold records of the new assignment, which restarts from
                # the committed offsets: drop it and the transaction, and rewind.
                self._rebalanced = False
                self._abort(consumer, producer, "rebalance")
                return
            if not messages:
                if count and time.monotonic() - idle_since > 2.0:
                    break  # commit what we have; the rest comes in the next one
                continue
            idle_since = time.monotonic()
            for m in messages:
                if m.error():
                    continue  # transient fetch errors; the consumer retries
                self._produce(producer, m.partition(), m.key(), b"copy-" + m.value())
                count += 1
        if count == 0:
            self._abort(consumer, producer, "empty")
            return
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        try:
            self.stats.phase = f"send_offsets_to_transaction {positions}"
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                                 60)
            self._commit(producer)
        except KafkaException as e:
            err = e.args[0]
            if err.fatal():
                raise
            # Abortable (or a retriable error the client gave up on): abort and rewind.
            self._abort(consumer, producer, f"{err.name()}: {err.str()}")
            return
        self.stats.committed = sum(tp.offset for tp in positions)
        self.stats.transactions += 1
        time.sleep(0.5)  # paces the copy so that it spans the bounces

    def _produce(self, producer: Producer, partition: int, key: bytes | None,
                 value: bytes) -> None:
        while True:
            try:
                producer.produce(OUTPUT, value, key, partition=partition)
                return
            except BufferError:
                producer.poll(0.1)

    def _commit(self, producer: Producer) -> None:
        for _ in range(10):
            try:
                self.stats.phase = "commit_transaction"
                producer.commit_transaction(60)
                return
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise
                self.stats.events.append(f"commit retried: {e.args[0].str()}")
        raise TimeoutError("commit_transaction kept failing with retriable errors")

    def _abort(self, consumer: Consumer, producer: Producer, why: str) -> None:
        self.stats.events.append(f"abort ({why})")
        if why != "empty":
            self.stats.aborts += 1
        for _ in range(10):
            try:
                self.stats.phase = "abort_transaction"
                producer.abort_transaction(60)
                break
            except KafkaException as e:
                if e.args[0].fatal() or not e.args[0].retriable():
                    raise
        self._rewind(consumer)

    def _rewind(self, consumer: Consumer) -> None:
        """Seek every assigned partition back to the group's committed offset."""
        assignment = consumer.assignment()
        if not assignment:
            return  # the next assignment starts from the committed offsets
        for _ in range(50):
            try:
                committed = consumer.committed(assignment, timeout=30)
                for tp in committed:
                    offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
                    consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
                return
            except KafkaException as e:
                # "Erroneous state": a partition just assigned is not fetching yet.
                self.stats.events.append(f"rewind retried: {e.args[0].str()}")
                self._check_deadline()
                time.sleep(0.1)
        raise TimeoutError("could not rewind the consumer to its committed offsets")


def seed(c: Cluster) -> list[bytes]:
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 20})
    values = [str(i).encode() for i in range(RECORDS)]
    for i, v in enumerate(values):
        while True:
            try:
                producer.produce(INPUT, v, v, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0
    return values


def read_output(bootstrap: str, expected: int, timeout: float = 60.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(OUTPUT, p, 0) for p in range(PARTITIONS)])
        out: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                # Every partition at its last stable offset, and a little more for luck.
                if len(at_end) == PARTITIONS and len(out) >= expected:
                    break
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            at_end.discard(msg.partition())
            out.append(msg.value())
        return out
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        tps = consumer.committed([TopicPartition(INPUT, p) for p in range(PARTITIONS)], 30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()


def coordinated_by_one_broker(c: Cluster) -> tuple[str, str, int]:
    """Creates the internal topics, then picks a transactional id and a group id whose
    transaction and group coordinators are the same broker (returned with them), so that
    one bounce takes both away mid-transaction."""
    warm = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": "warm-up"})
    warm.init_transactions(60)
    probe = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "warm-up"})
    try:
        probe.committed([TopicPartition(INPUT, 0)], 60)
    finally:
        probe.close()
    for topic in ("__transaction_state", "__consumer_offsets"):
        for p in range(3):
            c.wait_for_isr(topic, p, c.ids, 60)
    broker = c.leader("__transaction_state", 0)
    group_partition = next((p for p in range(3) if c.leader("__consumer_offsets", p) == broker),
                           0)
    transactional_id = next(f"copier-txn-{n}" for n in range(1000)
                            if _hash_partition(f"copier-txn-{n}") == 0)
    group = next(f"copier-group-{n}" for n in range(1000)
                 if _hash_partition(f"copier-group-{n}") == group_partition)
    return transactional_id, group, broker


def settle(c: Cluster, topics: dict[str, int], timeout: float = 60.0) -> None:
    """Every partition of ``topics`` led and fully in sync on every broker again."""
    for topic, count in topics.items():
        for p in range(count):
            c.wait_for_isr(topic, p, c.ids, timeout)
            c.wait_for_leader(topic, p, timeout=timeout)


def bounce(c: Cluster, broker: int, hard: bool, topics: dict[str, int]) -> None:
    if hard:
        c.kill(broker)
    else:
        assert c.stop(broker) == 0
    for topic, count in topics.items():
        for p in range(count):
            c.wait_for_leader(topic, p, exclude={broker}, timeout=60)
    if hard:
        # Its registration lives until its ZooKeeper session expires.
        c.wait(lambda: broker not in c.registered(), 30, f"broker {broker}'s session ends")
    c.start(broker)
    c.wait_for_registered(c.ids)
    settle(c, topics)


@pytest.mark.parametrize("hard", [False, True], ids=["clean", "hard"])
def test_copy_in_transactions_while_brokers_bounce(cluster: Callable[..., Cluster],
                                                  hard: bool) -> None:
    started = time.monotonic()
    c = cluster(brokers=3, overrides=OVERRIDES)
    for topic in (INPUT, OUTPUT):
        c.create_topic(topic, PARTITIONS, 3, configs=TOPIC_CONFIGS)
    values = seed(c)
    transactional_id, group, coordinator = coordinated_by_one_broker(c)
    copier = Copier(c.bootstrap_servers, RECORDS, started + 200, transactional_id, group)
    copier.allowance = 2 * TRANSACTION_SIZE
    copier.start()
    c.wait(lambda: copier.stats.transactions >= 1 or copier.stats.error, 60,
           "the copier's first transaction")
    assert copier.stats.error is None, copier.stats.error
    topics = {INPUT: PARTITIONS, OUTPUT: PARTITIONS, "__transaction_state": 3,
              "__consumer_offsets": 3}
    settle(c, topics)
    bounced: list[int] = []
    # First the broker of both coordinators (if leadership has not moved meanwhile), then
    # another one.
    for victim in (c.leader("__transaction_state", _hash_partition(transactional_id)),
                   next(b for b in c.ids if b != coordinator)):
        if victim in bounced:
            victim = next(b for b in c.ids if b not in bounced)
        assert copier.stats.error is None, copier.stats.error
        copier.allowance = copier.stats.committed + 4 * TRANSACTION_SIZE
        bounce(c, victim, hard, topics)
        bounced.append(victim)
        copier.allowance += TRANSACTION_SIZE
        progress = copier.stats.transactions
        try:
            c.wait(lambda done=progress: copier.stats.transactions > done or copier.stats.error,
                   90,
                   f"a transaction committed after broker {victim}'s bounce")
        except pytest.fail.Exception as e:
            pytest.fail(f"{e}\ncopier: {copier.stats}")
    copier.allowance = RECORDS
    copier.join(max(1.0, started + 210 - time.monotonic()))
    stats: Any = copier.stats
    assert not copier.is_alive(), f"copier hung: {stats}"
    assert stats.error is None, f"copier failed: {stats.error!r} {stats.events}"
    got = read_output(c.bootstrap_servers, RECORDS)
    expected = sorted(b"copy-" + v for v in values)
    duplicates = len(got) - len(set(got))
    missing = len(set(expected) - set(got))
    assert (len(got), duplicates, missing) == (RECORDS, 0, 0), stats.events
    assert sorted(got) == expected
    assert committed_offsets(c.bootstrap_servers, group) == {
        p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
    print(f"\n{'hard' if hard else 'clean'}: bounced {bounced}, {stats.transactions} "
          f"transactions, {stats.aborts} aborts, {stats.rebalances} rebalances, "
          f"{time.monotonic() - started:.1f} s; events: {stats.events}")
