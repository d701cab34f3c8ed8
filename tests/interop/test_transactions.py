"""Transactions with real clients (confluent-kafka / librdkafka) against a klog broker.

A transactional producer commits, aborts and commits again; a read_committed consumer sees
only the committed records and a read_uncommitted one all of them (never a marker); two
producers of one transactional.id fence each other; a transaction left open by a producer
that goes away is aborted after its timeout, also across a clean broker restart.
Timeouts are small (transaction.timeout.ms of a few seconds, the abort check every
200 ms) so that every test is bounded.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from klog.testing import KlogBroker
from tests.interop.conftest import wait_until_serving

pytestmark = pytest.mark.timeout(120)

TXN_TIMEOUT_MS = 4000


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
        "transaction.state.log.num.partitions": "5",
        "offsets.topic.num.partitions": "3",
    }


def producer(broker: KlogBroker, txn_id: str, **extra: object) -> Producer:
    config = {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": txn_id,
              "transaction.timeout.ms": TXN_TIMEOUT_MS, "linger.ms": 5}
    config.update(extra)
    return Producer(config)


def consume_all(broker: KlogBroker, topic: str, isolation: str, expected: int,
                partitions: int = 1, timeout: float = 20.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers,
                         "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        idle_until = None
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                # Once the expected count is in, wait a little for anything extra.
                if len(out) >= expected:
                    idle_until = idle_until or time.monotonic() + 1.0
                    if time.monotonic() > idle_until:
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


@pytest.fixture
def topic() -> Iterator[str]:
    yield f"txn-{uuid.uuid4().hex[:10]}"


def create_topic(broker: KlogBroker, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    wait_until_serving(broker, [topic])


def test_commit_abort_commit(broker: KlogBroker, topic: str) -> None:
    create_topic(broker, topic, 2)
    p = producer(broker, "txn-cac")
    p.init_transactions(20)
    for round_, commit in enumerate((True, False, True)):
        p.begin_transaction()
        for i in range(10):
            p.produce(topic, f"{round_}-{i}".encode(), partition=i % 2)
        if commit:
            p.commit_transaction(20)
        else:
            p.flush(10)
            p.abort_transaction(20)
    committed = consume_all(broker, topic, "read_committed", 20, partitions=2)
    everything = consume_all(broker, topic, "read_uncommitted", 30, partitions=2)
    assert sorted(committed) == sorted(f"{r}-{i}".encode() for r in (0, 2) for i in range(10))
    assert sorted(everything) == sorted(f"{r}-{i}".encode() for r in (0, 1, 2)
                                        for i in range(10))


def test_zombie_fencing(broker: KlogBroker, topic: str) -> None:
    create_topic(broker, topic)
    first = producer(broker, "txn-zombie")
    first.init_transactions(20)
    first.begin_transaction()
    first.produce(topic, b"zombie")
    first.flush(10)
    # A second producer with the same transactional.id: its init aborts the first's
    # transaction and bumps the epoch, fencing the first.
    second = producer(broker, "txn-zombie")
    second.init_transactions(30)
    second.begin_transaction()
    second.produce(topic, b"live")
    second.commit_transaction(20)
    with pytest.raises(KafkaException) as info:
        first.produce(topic, b"zombie-2")
        first.commit_transaction(10)
    assert info.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                         KafkaError.INVALID_PRODUCER_EPOCH)
    assert consume_all(broker, topic, "read_committed", 1) == [b"live"]
    assert sorted(consume_all(broker, topic, "read_uncommitted", 2)) == [b"live", b"zombie"]


def test_abandoned_transaction_is_aborted_after_its_timeout(broker: KlogBroker,
                                                             topic: str) -> None:
    create_topic(broker, topic)
    p = producer(broker, "txn-abandoned")
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, b"never-committed")
    p.flush(10)
    del p  # goes away without ending its transaction
    # Data after it: invisible to read_committed until the transaction is aborted
    # (the last stable offset is held at its first record).
    other = Producer({"bootstrap.servers": broker.bootstrap_servers})
    other.produce(topic, b"plain")
    other.flush(10)
    assert consume_all(broker, topic, "read_committed", 1, timeout=TXN_TIMEOUT_MS / 1000 + 10) \
        == [b"plain"]


@pytest.mark.parametrize("crash", [False, True], ids=["clean-restart", "kill-9"])
def test_transaction_open_across_a_broker_restart_is_aborted_after_its_timeout(
        tmp_path, crash: bool) -> None:
    """The coordinator reloads the Ongoing transaction from __transaction_state and the
    partition its open transaction from producer state (a snapshot, or the log replayed
    after a crash); the timeout aborts it and the last stable offset moves on. The
    transactional id is usable again afterwards."""
    overrides = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
                 "transaction.state.log.num.partitions": "3"}
    with KlogBroker(tmp_path / "data", overrides=overrides) as broker:
        wait_until_serving(broker)
        topic = "restarted"
        create_topic(broker, topic)
        p = producer(broker, "txn-restart")
        p.init_transactions(20)
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, f"open-{i}".encode())
        p.flush(10)
        if crash:
            broker.kill()
        else:
            assert broker.stop() == 0
        del p
        broker.start()
        wait_until_serving(broker, [topic])
        plain = Producer({"bootstrap.servers": broker.bootstrap_servers})
        plain.produce(topic, b"after-restart")
        plain.flush(10)
        assert consume_all(broker, topic, "read_committed", 1,
                           timeout=TXN_TIMEOUT_MS / 1000 + 15) == [b"after-restart"]
        assert len(consume_all(broker, topic, "read_uncommitted", 6)) == 6
        again = producer(broker, "txn-restart")
        again.init_transactions(30)
        again.begin_transaction()
        again.produce(topic, b"committed")
        again.commit_transaction(20)
        assert consume_all(broker, topic, "read_committed", 2) == [b"after-restart",
                                                                  b"committed"]


@pytest.mark.parametrize("end", ["commit", "abort", "commit-then-abort"])
def test_ended_transactions_read_the_same_after_a_kill_9(tmp_path, end: str) -> None:
    """Committed records stay readable to read_committed, and aborted ones hidden, after
    kill -9 and a restart on the same log dir: the log replayed on load ends each
    transaction below the high watermark, so the last stable offset is not held at the
    first of them (it was, and read_committed saw nothing until new data arrived)."""
    overrides = {"transaction.state.log.num.partitions": "1",
                 "transaction.state.log.replication.factor": "1"}
    with KlogBroker(tmp_path / "data", overrides=overrides) as broker:
        wait_until_serving(broker)
        topic = "ended"
        create_topic(broker, topic, 2)
        p = producer(broker, f"txn-kill-{end}")
        p.init_transactions(20)
        committed: list[bytes] = []
        everything: list[bytes] = []
        for round_, outcome in enumerate(end.split("-then-")):
            p.begin_transaction()
            values = [f"{outcome}-{round_}-{i}".encode() for i in range(20)]
            for i, value in enumerate(values):
                p.produce(topic, value, partition=i % 2)
            p.flush(10)
            everything += values
            if outcome == "commit":
                p.commit_transaction(20)
                committed += values
            else:
                p.abort_transaction(20)
        before = consume_all(broker, topic, "read_committed", len(committed), partitions=2)
        assert sorted(before) == sorted(committed)
        broker.kill()
        broker.start()
        wait_until_serving(broker, [topic])
        after = consume_all(broker, topic, "read_committed", len(committed), partitions=2,
                            timeout=10)
        assert sorted(after) == sorted(committed)
        raw = consume_all(broker, topic, "read_uncommitted", len(everything), partitions=2)
        assert sorted(raw) == sorted(everything)


def test_aiokafka_transactional_producer(broker: KlogBroker, topic: str) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer

    create_topic(broker, topic)

    async def go() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                             transactional_id="aio-txn", transaction_timeout_ms=TXN_TIMEOUT_MS)
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"aio-committed")
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aio-aborted")
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(go())
    assert consume_all(broker, topic, "read_committed", 1) == [b"aio-committed"]
    assert sorted(consume_all(broker, topic, "read_uncommitted", 2)) == [b"aio-aborted",
                                                                         b"aio-committed"]


def test_kafka_python_transactional_producer(broker: KlogBroker, topic: str) -> None:
    from kafka import KafkaProducer

    if not hasattr(KafkaProducer, "init_transactions"):
        pytest.skip("this kafka-python has no transactional producer")
    create_topic(broker, topic)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                      transactional_id="kp-txn", transaction_timeout_ms=TXN_TIMEOUT_MS)
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"kp-committed")
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"kp-aborted")
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    assert consume_all(broker, topic, "read_committed", 1) == [b"kp-committed"]
    assert sorted(consume_all(broker, topic, "read_uncommitted", 2)) == [b"kp-aborted",
                                                                         b"kp-committed"]
