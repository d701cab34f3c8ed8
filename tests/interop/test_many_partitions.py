"""Topics of 50 partitions, created by Metadata (num.partitions=50 on this module's broker)
and explicitly (CreateTopics through each client's admin API), written and read by every
client: each partition holds exactly what was sent to it, in order.

(The module's broker ends up with ~250 partitions; its clean shutdown takes seconds, one
fsync'ed checkpoint after another.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections import defaultdict
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import NewTopic as KpNewTopic

from klog.testing import KlogBroker
from tests.interop.conftest import KCAT

pytestmark = pytest.mark.timeout(90)

PARTITIONS = 50
PER_PARTITION = 20


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"num.partitions": str(PARTITIONS)}


def _expected() -> dict[int, list[bytes]]:
    return {p: [f"p{p}-m{i}".encode() for i in range(PER_PARTITION)] for p in range(PARTITIONS)}


def _by_partition(records: list[tuple[int, int, bytes]]) -> dict[int, list[bytes]]:
    """(partition, offset, value) -> values per partition in offset order, checking that
    offsets run 0, 1, 2, ... in each partition."""
    out: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for partition, offset, value in records:
        out[partition].append((offset, value))
    for partition, rows in out.items():
        assert [o for o, _ in rows] == list(range(len(rows))), partition
    return {p: [v for _, v in rows] for p, rows in out.items()}


def _confluent_consume_all(bootstrap: str, topic: str, count: int) -> list[tuple[int, int, bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                assert msg.error() is None, msg.error()
                got.append((msg.partition(), msg.offset(), msg.value()))
        return got
    finally:
        consumer.close()


def test_confluent_auto_created(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    md = producer.list_topics(topic, timeout=10)  # creates it, with num.partitions
    partitions = md.topics[topic].partitions
    assert sorted(partitions) == list(range(PARTITIONS))
    assert all(p.leader == 0 and list(p.isrs) == [0] for p in partitions.values())
    for i in range(PER_PARTITION):
        for p in range(PARTITIONS):
            producer.produce(topic, value=f"p{p}-m{i}".encode(), partition=p)
        producer.poll(0)
    assert producer.flush(30) == 0
    got = _confluent_consume_all(bootstrap, topic, PARTITIONS * PER_PARTITION)
    assert _by_partition(got) == _expected()


def test_confluent_created_explicitly(bootstrap: str, broker: KlogBroker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS + 7,
                                            replication_factor=1)], operation_timeout=10)
    futures[topic].result(timeout=20)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == PARTITIONS + 7
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    # Keys spread over the partitions with the default partitioner.
    for i in range(1000):
        producer.produce(topic, key=f"key-{i}".encode(), value=str(i).encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING)
                         for p in range(PARTITIONS + 7)])
        seen: dict[bytes, int] = {}
        deadline = time.monotonic() + 30
        while len(seen) < 1000 and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                assert msg.error() is None
                assert msg.key() not in seen
                seen[msg.key()] = msg.partition()
    finally:
        consumer.close()
    assert len(seen) == 1000
    assert len(set(seen.values())) > 40  # really spread
    assert len([d for d in broker.log_dir.iterdir()
                if d.name.startswith(f"{topic}-")]) == PARTITIONS + 7


def test_kafka_python_created_explicitly(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([KpNewTopic(topic, PARTITIONS, 1)], timeout_ms=10_000)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=10)
    try:
        assert producer.partitions_for(topic) == set(range(PARTITIONS))
        futures = [producer.send(topic, value=f"p{p}-m{i}".encode(), partition=p)
                   for i in range(PER_PARTITION) for p in range(PARTITIONS)]
        producer.flush(timeout=30)
        assert all(f.get(timeout=10).offset >= 0 for f in futures)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        tps = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(got) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=200).items():
                got.extend((tp.partition, r.offset, r.value) for r in records)
        end = consumer.end_offsets(tps)
    finally:
        consumer.close()
    assert _by_partition(got) == _expected()
    assert set(end.values()) == {PER_PARTITION}


def test_aiokafka_created_explicitly(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin import NewTopic as AioNewTopic

    async def roundtrip(name: str) -> dict[int, list[bytes]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=10)
        await producer.start()
        try:
            assert await producer.partitions_for(name) == set(range(PARTITIONS))
            futures = [await producer.send(name, value=f"p{p}-m{i}".encode(), partition=p)
                       for i in range(PER_PARTITION) for p in range(PARTITIONS)]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, fetch_max_wait_ms=100)
        await consumer.start()
        try:
            tps = [AioTopicPartition(name, p) for p in range(PARTITIONS)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            got: list[tuple[int, int, bytes]] = []
            deadline = time.monotonic() + 30
            while len(got) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    got.extend((tp.partition, r.offset, r.value) for r in records)
        finally:
            await consumer.stop()
        return _by_partition(got)

    async def go() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(topic, PARTITIONS, 1)])
        finally:
            await admin.close()
        assert await roundtrip(topic) == _expected()

    asyncio.run(asyncio.wait_for(go(), 60))


def test_kcat_all_partitions(bootstrap: str, topic: str) -> None:
    def kcat(*args: str, stdin: bytes | None = None) -> bytes:
        result = subprocess.run([KCAT, "-b", bootstrap, "-m", "10", *args], input=stdin,
                                capture_output=True, timeout=30, check=False)
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        return result.stdout

    # Keyed messages: librdkafka's partitioner spreads them over the 50 partitions.
    kcat("-P", "-t", topic, "-K:", stdin=b"".join(b"k%d:m%d\n" % (i, i) for i in range(500)))
    listing = json.loads(kcat("-L", "-J", "-t", topic))
    [entry] = listing["topics"]
    assert [p["partition"] for p in entry["partitions"]] == list(range(PARTITIONS))
    out = kcat("-C", "-t", topic, "-o", "beginning", "-e", "-J")
    got: list[dict[str, Any]] = [json.loads(line) for line in out.decode().splitlines()]
    assert sorted(m["payload"] for m in got) == sorted(f"m{i}" for i in range(500))
    assert len({m["partition"] for m in got}) > 25
    _by_partition([(m["partition"], m["offset"], m["payload"].encode()) for m in got])


def test_one_long_poll_watches_every_partition(bootstrap: str, topic: str) -> None:
    """A consumer of all 50 partitions has one fetch parked in the broker; a record
    produced to any of them completes it at once."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    producer.produce(topic, value=b"first", partition=3)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10_000})
    try:
        # Offset 0, not "beginning": every partition is fetchable at once, so they all go
        # into the first fetch (librdkafka keeps one fetch in flight per broker).
        consumer.assign([CkTopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        first = None
        deadline = time.monotonic() + 10
        while first is None and time.monotonic() < deadline:
            first = consumer.poll(0.2)
        assert first is not None and first.value() == b"first"
        assert consumer.poll(1.0) is None  # parked
        for partition in (37, 0, 49):
            produced_at = time.monotonic()
            producer.produce(topic, value=b"p%d" % partition, partition=partition)
            assert producer.flush(10) == 0
            msg = None
            while msg is None and time.monotonic() - produced_at < 8:
                msg = consumer.poll(0.05)
            assert msg is not None and (msg.partition(), msg.value()) == (
                partition, b"p%d" % partition)
            assert time.monotonic() - produced_at < 2.0
    finally:
        consumer.close()
