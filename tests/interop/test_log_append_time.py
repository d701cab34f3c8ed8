"""A broker with log.message.timestamp.type=LogAppendTime: the broker stamps every batch
with its own clock, producers learn that time from the produce response, consumers see it
as the records' timestamp (type LogAppendTime), and a topic can still opt back into
CreateTime with its own message.timestamp.type."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import (
    OFFSET_BEGINNING,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from klog.protocol.records.batch import TimestampType
from klog.testing import KlogBroker
from tests.interop.conftest import KCAT, stored_batches

pytestmark = pytest.mark.timeout(60)

OLD = 1_000_000_000_000  # 2001-09-09: a CreateTime the broker must not keep


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"log.message.timestamp.type": "LogAppendTime"}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _confluent_read(bootstrap: str, topic: str, count: int) -> list[Message]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[Message] = []
        deadline = time.monotonic() + 15
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None
                got.append(msg)
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_confluent_sees_log_append_time(bootstrap: str, broker: KlogBroker, topic: str,
                                        codec: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "compression.type": codec})
    reports: list[Message] = []
    before = _now_ms()
    for i in range(50):
        producer.produce(topic, value=f"v{i}".encode() * 20, timestamp=OLD + i,
                         on_delivery=lambda err, msg: reports.append(msg))
    assert producer.flush(20) == 0
    after = _now_ms()
    assert all(m.error() is None for m in reports)
    # The produce response carries the broker's time: delivery reports show it.
    stamps = {m.timestamp() for m in reports}
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME and before <= ts <= after
               for kind, ts in stamps)

    got = _confluent_read(bootstrap, topic, 50)
    assert [m.value() for m in got] == [f"v{i}".encode() * 20 for i in range(50)]
    by_offset = {m.offset(): m.timestamp() for m in reports}
    assert all(m.timestamp() == by_offset[m.offset()] for m in got)

    batches = stored_batches(broker.log_dir, topic)
    for b in batches:
        assert b.timestamp_type is TimestampType.LOG_APPEND_TIME
        assert before <= b.max_timestamp <= after
    # offsets_for_times works on the broker's times
    first_stamp = min(ts for _, ts in stamps)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, first_stamp)], timeout=10)
        assert tp.offset == 0
        [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, OLD)], timeout=10)
        assert tp.offset == 0
    finally:
        consumer.close()


def test_topic_override_keeps_create_time(bootstrap: str, broker: KlogBroker,
                                          topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "message.timestamp.type": "CreateTime"})])[topic].result(timeout=20)
    producer = Producer({"bootstrap.servers": bootstrap})
    reports: list[Message] = []
    producer.produce(topic, value=b"x", timestamp=OLD,
                     on_delivery=lambda err, msg: reports.append(msg))
    assert producer.flush(20) == 0
    assert reports[0].timestamp() == (TIMESTAMP_CREATE_TIME, OLD)
    [msg] = _confluent_read(bootstrap, topic, 1)
    assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, OLD)
    assert stored_batches(broker.log_dir, topic)[0].timestamp_type is TimestampType.CREATE_TIME


def test_kafka_python_sees_log_append_time(bootstrap: str, topic: str) -> None:
    before = _now_ms()
    producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4")
    try:
        futures = [producer.send(topic, value=b"v%d" % i, timestamp_ms=OLD) for i in range(10)]
        producer.flush(timeout=20)
        metadata = [f.get(timeout=10) for f in futures]
    finally:
        producer.close(timeout=5)
    after = _now_ms()
    assert all(before <= m.timestamp <= after for m in metadata)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100)
    try:
        tp = KpTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[Any] = []
        deadline = time.monotonic() + 15
        while len(got) < 10 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
    finally:
        consumer.close()
    assert [r.value for r in got] == [b"v%d" % i for i in range(10)]
    assert all(r.timestamp_type == 1 and before <= r.timestamp <= after for r in got)
    assert [r.timestamp for r in got] == [m.timestamp for m in metadata]


def test_aiokafka_sees_log_append_time(bootstrap: str, topic: str) -> None:
    async def go() -> tuple[list[Any], list[Any]]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="snappy")
        await producer.start()
        try:
            metadata = [await producer.send_and_wait(topic, b"v%d" % i, timestamp_ms=OLD)
                        for i in range(5)]
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
            while len(got) < 5 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(records)
        finally:
            await consumer.stop()
        return metadata, got

    before = _now_ms()
    metadata, got = asyncio.run(asyncio.wait_for(go(), 40))
    after = _now_ms()
    assert all(before <= m.timestamp <= after and m.timestamp_type == 1 for m in metadata)
    assert [(r.value, r.timestamp, r.timestamp_type) for r in got] == [
        (b"v%d" % i, m.timestamp, 1) for i, m in enumerate(metadata)]


def test_kcat_sees_log_append_time(bootstrap: str, topic: str) -> None:
    def kcat(*args: str, stdin: bytes | None = None) -> bytes:
        result = subprocess.run([KCAT, "-b", bootstrap, "-m", "10", *args], input=stdin,
                                capture_output=True, timeout=20, check=False)
        assert result.returncode == 0, result.stderr.decode(errors="replace")
        return result.stdout

    before = _now_ms()
    kcat("-P", "-t", topic, "-p", "0", stdin=b"a\nb\n")
    after = _now_ms()
    out = kcat("-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-J")
    got = [json.loads(line) for line in out.decode().splitlines()]
    assert [m["payload"] for m in got] == ["a", "b"]
    assert all(m["tstype"] == "logappend" and before <= m["ts"] <= after for m in got)
