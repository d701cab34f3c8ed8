"""Logs of many segments (log.segment.bytes=16 KiB on this module's broker): consumers read
across segment boundaries from any offset, timestamp lookups find records in older
segments, a kill -9 leaves every segment readable after recovery, and size-based
retention moves the log start offset, which consumers and ListOffsets follow."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from klog.testing import KlogBroker
from tests.interop.conftest import wait_until_serving

pytestmark = pytest.mark.timeout(90)

COUNT = 3000
# Recent enough for time-based retention (7 days by default), which runs every 200 ms here
BASE_TS = int(time.time() * 1000) - 3_600_000


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"log.segment.bytes": "16384", "log.index.interval.bytes": "1024",
            "log.retention.check.interval.ms": "200"}


def _produce(bootstrap: str, topic: str, count: int = COUNT, **conf: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                         "batch.num.messages": 50, **conf})
    for i in range(count):
        producer.produce(topic, key=b"%d" % i, value=b"record-%06d-" % i + b"x" * 50,
                         partition=0, timestamp=BASE_TS + 10 * i)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0


def _read(bootstrap: str, topic: str, offset: int, count: int) -> list[Message]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, offset)])
        got: list[Message] = []
        deadline = time.monotonic() + 20
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.2):
                assert msg.error() is None, msg.error()
                got.append(msg)
        return got
    finally:
        consumer.close()


def _value(i: int) -> bytes:
    return b"record-%06d-" % i + b"x" * 50


def test_reads_across_segments(bootstrap: str, broker: KlogBroker, topic: str) -> None:
    _produce(bootstrap, topic)
    segments = sorted((broker.log_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) > 10
    got = _read(bootstrap, topic, OFFSET_BEGINNING, COUNT)
    assert [m.offset() for m in got] == list(range(COUNT))
    assert [m.value() for m in got] == [_value(i) for i in range(COUNT)]
    # From offsets inside batches, on and around segment boundaries
    bases = [int(p.stem) for p in segments[1:4]]
    for start in [1, 777, *bases, *(b - 1 for b in bases), *(b + 1 for b in bases)]:
        part = _read(bootstrap, topic, start, 5)
        assert [m.offset() for m in part[:5]] == list(range(start, start + 5)), start
    # kafka-python (its own fetch decoding) across the same segments
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100,
                             max_partition_fetch_bytes=20_000)
    try:
        tp = KpTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 100)
        offsets: list[int] = []
        deadline = time.monotonic() + 20
        while len(offsets) < COUNT - 100 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                offsets.extend(r.offset for r in records)
        assert offsets == list(range(100, COUNT))
    finally:
        consumer.close()


def test_timestamp_lookup_across_segments(bootstrap: str, topic: str) -> None:
    _produce(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        for i in (0, 1, 13, 499, 1234, 2999):
            for target, expected in ((BASE_TS + 10 * i, i), (BASE_TS + 10 * i - 3, i)):
                [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, target)],
                                                  timeout=10)
                assert tp.offset == expected, (i, target)
    finally:
        consumer.close()


def test_kill_9_recovers_every_segment(bootstrap: str, broker: KlogBroker, topic: str) -> None:
    _produce(bootstrap, topic, **{"compression.type": "zstd"})
    broker.kill()
    broker.start()
    wait_until_serving(broker, [topic])
    got = _read(bootstrap, topic, OFFSET_BEGINNING, COUNT)
    assert [m.value() for m in got] == [_value(i) for i in range(COUNT)]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        # the time index was rebuilt where it was not flushed
        [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 10 * 2500)],
                                          timeout=10)
        assert tp.offset == 2500
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (
            0, COUNT)
    finally:
        consumer.close()
    _produce(bootstrap, topic, count=10)
    assert [m.offset() for m in _read(bootstrap, topic, COUNT, 10)] == list(
        range(COUNT, COUNT + 10))


def test_retention_moves_the_log_start_offset(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.bytes": "40000",
                                                       "file.delete.delay.ms": "0"})])[
        topic].result(timeout=20)
    _produce(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        # Retention runs every 200 ms, also while the producer is still sending: the first
        # log start offset above 0 may be an intermediate one. Wait until it has stayed
        # put for five retention passes, then the log is within retention.bytes.
        deadline = time.monotonic() + 20
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        settled_since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            before = low
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            if low != before or low == 0:
                settled_since = time.monotonic()
            elif time.monotonic() - settled_since >= 1.0:
                break
        assert 0 < low < high == COUNT
        [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS)], timeout=10)
        assert tp.offset == low  # the earliest record still there
    finally:
        consumer.close()
    # from the beginning = from the log start offset; an offset below it is out of range
    got = _read(bootstrap, topic, OFFSET_BEGINNING, COUNT - low)
    assert [m.offset() for m in got] == list(range(low, COUNT))
    got = _read(bootstrap, topic, 0, 3)  # auto.offset.reset=earliest after the error
    assert [m.offset() for m in got[:3]] == [low, low + 1, low + 2]


def test_retention_by_time_deletes_the_active_segment_too(bootstrap: str, topic: str) -> None:
    """Every record older than retention.ms: the whole log goes, its active segment too (as
    Kafka rolls and deletes it); consumers find nothing to read and new records go on at
    the same end offset."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"retention.ms": "60000",
                                                       "file.delete.delay.ms": "0"})])[
        topic].result(timeout=20)
    _produce(bootstrap, topic, count=200)  # records an hour old, in one (active) segment
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        deadline = time.monotonic() + 20
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        while low < high and time.monotonic() < deadline:
            time.sleep(0.1)
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert low == high == 200
    finally:
        consumer.close()
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, value=b"fresh", partition=0)
    assert producer.flush(10) == 0
    got = _read(bootstrap, topic, OFFSET_BEGINNING, 1)
    assert [(m.offset(), m.value()) for m in got] == [(200, b"fresh")]
