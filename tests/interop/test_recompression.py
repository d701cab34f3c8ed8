"""A broker with compression.type=gzip: whatever codec a producer used, the broker stores
gzip batches (recompressing on append), and consumers read back the very records that
were produced. Topics can override it: ``producer`` keeps the producer's codec,
``uncompressed`` stores plain batches."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from klog.protocol.records.batch import CompressionType
from klog.testing import KlogBroker
from tests.interop.conftest import stored_batches

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"compression.type": "gzip"}


def _items(n: int) -> list[dict[str, Any]]:
    base_ts = int(time.time() * 1000) - 10_000
    return [{
        "key": None if i % 10 == 0 else f"key-{i}".encode(),
        "value": (f"value {i} " * (i % 20 + 1)).encode(),
        "headers": [("h", f"{i}".encode())] if i % 3 == 0 else [],
        "timestamp_ms": base_ts + i,
    } for i in range(n)]


def _kafka_python_produce(bootstrap: str, topic: str, items: list[dict[str, Any]],
                          codec: str | None, **conf: Any) -> list[Any]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec,
                             linger_ms=30, **conf)
    try:
        futures = [producer.send(topic, **item) for item in items]
        producer.flush(timeout=20)
        return [f.get(timeout=10) for f in futures]
    finally:
        producer.close(timeout=5)


def _kafka_python_read(bootstrap: str, topic: str, count: int) -> list[Any]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        tp = KpTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[Any] = []
        deadline = time.monotonic() + 15
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
        return got
    finally:
        consumer.close()


def _same_records(items: list[dict[str, Any]], got: list[Any]) -> None:
    assert [r.offset for r in got] == list(range(len(items)))
    for item, r in zip(items, got, strict=True):
        assert (r.key, r.value, list(r.headers), r.timestamp) == (
            item["key"], item["value"], item["headers"], item["timestamp_ms"])


@pytest.mark.parametrize("codec", ["lz4", "snappy", "zstd", None])
def test_kafka_python_batches_are_recompressed(bootstrap: str, broker: KlogBroker,
                                               topic: str, codec: str | None) -> None:
    items = _items(300)
    metadata = _kafka_python_produce(bootstrap, topic, items, codec)
    assert [m.offset for m in metadata] == list(range(300))
    batches = stored_batches(broker.log_dir, topic)
    assert {b.compression for b in batches} == {CompressionType.GZIP}
    assert sum(b.records_count or 0 for b in batches) == 300
    # kafka-python is idempotent by default: producer id and sequences survive recompression
    assert all(b.producer_id >= 0 for b in batches)
    assert [b.base_sequence for b in batches] == [b.base_offset for b in batches]
    _same_records(items, _kafka_python_read(bootstrap, topic, 300))


def test_aiokafka_lz4_is_recompressed(bootstrap: str, broker: KlogBroker, topic: str) -> None:
    items = _items(100)

    async def go() -> list[Any]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4",
                                    linger_ms=30)
        await producer.start()
        try:
            futures = [await producer.send(topic, **item) for item in items]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, fetch_max_wait_ms=100)
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got: list[Any] = []
            deadline = time.monotonic() + 15
            while len(got) < 100 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(records)
            return got
        finally:
            await consumer.stop()

    got = asyncio.run(asyncio.wait_for(go(), 40))
    assert {b.compression for b in stored_batches(broker.log_dir, topic)} == {
        CompressionType.GZIP}
    _same_records(items, got)


def test_confluent_uncompressed_is_recompressed(bootstrap: str, broker: KlogBroker,
                                                topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 30})
    for i in range(200):
        producer.produce(topic, key=b"k%d" % i, value=b"confluent %d " % i * 10,
                         headers=[("i", b"%d" % i)])
    assert producer.flush(20) == 0
    assert {b.compression for b in stored_batches(broker.log_dir, topic)} == {
        CompressionType.GZIP}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[Any] = []
        deadline = time.monotonic() + 15
        while len(got) < 200 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None
                got.append(msg)
    finally:
        consumer.close()
    assert [(m.offset(), m.key(), m.value(), m.headers()) for m in got] == [
        (i, b"k%d" % i, b"confluent %d " % i * 10, [("i", b"%d" % i)]) for i in range(200)]


@pytest.mark.parametrize(("setting", "stored"), [("producer", CompressionType.LZ4),
                                                  ("uncompressed", CompressionType.NONE),
                                                  ("zstd", CompressionType.ZSTD)])
def test_topic_compression_type_overrides_the_broker(
        bootstrap: str, broker: KlogBroker, topic: str, setting: str,
        stored: CompressionType) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": setting})])[
        topic].result(timeout=20)
    items = _items(50)
    _kafka_python_produce(bootstrap, topic, items, "lz4")
    assert {b.compression for b in stored_batches(broker.log_dir, topic)} == {stored}
    _same_records(items, _kafka_python_read(bootstrap, topic, 50))
