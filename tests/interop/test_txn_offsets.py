"""Offsets in transactions with confluent-kafka, aiokafka and kafka-python against klog: a
consume-transform-produce loop commits its input offsets with
``send_offsets_to_transaction`` (AddOffsetsToTxn, TxnOffsetCommit); the group's committed
offsets change only when the transaction commits (an abort leaves them), and the
transactional commits survive a broker restart (loading applies the markers)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from klog.testing import KlogBroker
from tests.interop.conftest import wait_until_serving

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3"}


def _create(broker: KlogBroker, *topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(10)
    wait_until_serving(broker, list(topics))


def _committed(broker: KlogBroker, group: str, topic: str,
               isolation: str = "read_uncommitted", timeout: float = 10) -> int:
    """The group's committed offset as librdkafka fetches it: with read_committed it asks
    for stable offsets (OffsetFetch require_stable) and retries UNSTABLE_OFFSET_COMMIT."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": isolation})
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=timeout)
        return int(tp.offset)
    finally:
        consumer.close()


def _poll(consumer: Any, n: int) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + 20
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            out.append(msg)
    assert len(out) == n
    return out


def test_consume_transform_produce_offsets(broker: KlogBroker) -> None:
    suffix = uuid.uuid4().hex[:8]
    source, sink, group = f"in-{suffix}", f"out-{suffix}", f"ctp-{suffix}"
    _create(broker, source, sink)
    plain = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(30):
        plain.produce(source, f"r{i}".encode(), partition=0)
    plain.flush(10)

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers,
                         "transactional.id": f"ctp-{suffix}", "transaction.timeout.ms": 10000})
    producer.init_transactions(20)
    try:
        for round_, commit in enumerate((True, False)):
            msgs = _poll(consumer, 10)
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, m.value().upper(), partition=0)
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                                 20)
            producer.flush(10)
            # Pending: the group still shows the last committed offset (none at first).
            before = _committed(broker, group, source)
            assert before == (-1001 if round_ == 0 else 10)
            if round_ == 0:
                # A stable fetch gets UNSTABLE_OFFSET_COMMIT until the transaction ends.
                with pytest.raises(KafkaException, match="Timed out"):
                    _committed(broker, group, source, "read_committed", timeout=2)
            if commit:
                producer.commit_transaction(20)
                assert _committed(broker, group, source) == 10
            else:
                producer.abort_transaction(20)
                assert _committed(broker, group, source) == 10
    finally:
        consumer.close()
    broker.restart()
    assert _committed(broker, group, source, "read_committed") == 10


def test_aiokafka_send_offsets_to_transaction(broker: KlogBroker) -> None:
    """aiokafka commits offsets in a transaction with TxnOffsetCommit v0."""
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    suffix = uuid.uuid4().hex[:8]
    source, sink, group = f"ai-in-{suffix}", f"ai-out-{suffix}", f"ai-g-{suffix}"
    _create(broker, source, sink)

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                                    transactional_id=f"ai-{suffix}")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(sink, b"x", partition=0)
                await producer.send_offsets_to_transaction(
                    {AioTopicPartition(source, 0): 5}, group)
            assert _committed(broker, group, source) == 5
            await producer.begin_transaction()
            await producer.send_and_wait(sink, b"y", partition=0)
            await producer.send_offsets_to_transaction({AioTopicPartition(source, 0): 9}, group)
            await producer.abort_transaction()
            assert _committed(broker, group, source) == 5
        finally:
            await producer.stop()

    asyncio.run(main())


def test_kafka_python_send_offsets_to_transaction(broker: KlogBroker) -> None:
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KpTopicPartition

    suffix = uuid.uuid4().hex[:8]
    source, sink, group = f"kp-in-{suffix}", f"kp-out-{suffix}", f"kp-g-{suffix}"
    _create(broker, source, sink)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers,
                             transactional_id=f"kp-{suffix}")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(sink, b"x", partition=0)
        producer.send_offsets_to_transaction(
            {KpTopicPartition(source, 0): OffsetAndMetadata(12, "", -1)}, group)
        producer.commit_transaction()
        assert _committed(broker, group, source) == 12
    finally:
        producer.close(5)
