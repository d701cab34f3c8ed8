"""kafka-python against one klog broker: its own protocol code, independent of librdkafka.

Consumers have no group (``group_id=None``) and use ``assign``: Metadata, Produce, Fetch
and ListOffsets only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import MessageSizeTooLargeError

from klog.protocol.records.batch import CompressionType, TimestampType
from klog.testing import KlogBroker
from tests.interop.conftest import CODECS, stored_batches

pytestmark = pytest.mark.timeout(60)

_CODEC_TYPES = {
    "none": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


@pytest.fixture
def producer(bootstrap: str) -> Iterator[KafkaProducer]:
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, request_timeout_ms=10_000)
    yield p
    p.close(timeout=5)


def _consumer(bootstrap: str, **conf: Any) -> KafkaConsumer:
    settings: dict[str, Any] = {"bootstrap_servers": bootstrap, "group_id": None,
                                "enable_auto_commit": False, "fetch_max_wait_ms": 100,
                                "request_timeout_ms": 10_000}
    settings.update(conf)
    return KafkaConsumer(**settings)


def _consume(bootstrap: str, topic: str, count: int, *, partition: int = 0,
             offset: int | None = 0, timeout: float = 15.0, **conf: Any) -> list[Any]:
    """``count`` records from ``offset`` (None: from the end)."""
    consumer = _consumer(bootstrap, **conf)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if offset is None:
            consumer.seek_to_end(tp)
        else:
            consumer.seek(tp, offset)
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
        return got
    finally:
        consumer.close()


def _send_all(producer: KafkaProducer, topic: str, items: list[dict[str, Any]]) -> list[Any]:
    futures = [producer.send(topic, **item) for item in items]
    producer.flush(timeout=20)
    return [f.get(timeout=20) for f in futures]


def test_metadata_auto_creates_topic(bootstrap: str, broker: KlogBroker, topic: str,
                                     producer: KafkaProducer) -> None:
    consumer = _consumer(bootstrap)
    try:
        # A consumer's listing asks for all topics: nothing is created by that.
        assert consumer.partitions_for_topic(topic) == set()
        assert topic not in consumer.topics()
        # The producer's Metadata request names the topic: it is created.
        assert producer.partitions_for(topic) == {0}
        assert consumer.partitions_for_topic(topic) == {0}
        assert topic in consumer.topics()
        cluster = producer._metadata
        assert [(b.node_id, b.host, b.port) for b in cluster.brokers()] == [
            (0, "127.0.0.1", broker.port)]
        assert cluster.leader_for_partition(TopicPartition(topic, 0)) == 0
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", CODECS)
def test_codec_round_trip(bootstrap: str, broker: KlogBroker, topic: str, codec: str) -> None:
    base_ts = int(time.time() * 1000) - 60_000
    items: list[dict[str, Any]] = []
    for i in range(200):
        items.append({
            # kafka-python refuses a record with neither key nor value
            "key": None if i % 5 == 0 else f"key-{i}".encode(),
            "value": None if i % 9 == 0 and i % 5 else (f"value-{i}-" * (i % 17 + 1)).encode(),
            "headers": [("n", str(i).encode()), ("empty", b"")] if i % 2 == 0 else [],
            "timestamp_ms": base_ts + i,
        })
    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             compression_type=None if codec == "none" else codec,
                             linger_ms=50, request_timeout_ms=10_000)
    try:
        metadata = _send_all(producer, topic, items)
    finally:
        producer.close(timeout=5)
    assert [m.offset for m in metadata] == list(range(200))

    got = _consume(bootstrap, topic, 200)
    assert [r.offset for r in got] == list(range(200))
    for item, record in zip(items, got, strict=True):
        assert record.key == item["key"]
        assert record.value == item["value"]
        assert list(record.headers) == item["headers"]
        assert record.timestamp == item["timestamp_ms"]
        assert record.timestamp_type == TimestampType.CREATE_TIME

    batches = stored_batches(broker.log_dir, topic)
    assert sum(b.records_count or 0 for b in batches) == 200
    assert {b.compression for b in batches} == {_CODEC_TYPES[codec]}


def test_one_megabyte_value_and_message_too_large(bootstrap: str, topic: str) -> None:
    big = bytes(i % 249 for i in range(1_000_000))
    # Not idempotent: kafka-python 3.0 puts an idempotent producer in a fatal state after
    # any non-retriable error (its classifier's fallback), so nothing after it would pass.
    producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=3_000_000,
                             request_timeout_ms=10_000, enable_idempotence=False)
    try:
        _send_all(producer, topic, [{"key": b"big", "value": big}])
        # Beyond the broker's message.max.bytes (1048588): refused by the broker.
        future = producer.send(topic, value=b"y" * 1_100_000)
        with pytest.raises(MessageSizeTooLargeError):
            future.get(timeout=20)
        [after] = _send_all(producer, topic, [{"key": b"after", "value": b"x"}])
        assert after.offset == 1
    finally:
        producer.close(timeout=5)
    got = _consume(bootstrap, topic, 2)
    assert [(r.key, len(r.value)) for r in got] == [(b"big", 1_000_000), (b"after", 1)]
    assert got[0].value == big


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(bootstrap: str, topic: str, acks: Any) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=5)
    try:
        metadata = _send_all(producer, topic, [{"value": f"v{i}".encode()} for i in range(300)])
    finally:
        producer.close(timeout=5)
    if acks != 0:  # acks=0 gets no offsets back
        assert [m.offset for m in metadata] == list(range(300))
    got = _consume(bootstrap, topic, 300)
    assert [r.value for r in got] == [f"v{i}".encode() for i in range(300)]


def test_consume_from_end(bootstrap: str, topic: str, producer: KafkaProducer) -> None:
    _send_all(producer, topic, [{"value": b"old"}] * 10)
    consumer = _consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_end(tp)
        assert consumer.position(tp, timeout_ms=10_000) == 10
        _send_all(producer, topic, [{"value": f"new-{i}".encode()} for i in range(3)])
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
        assert [(r.offset, r.value) for r in got] == [(10 + i, f"new-{i}".encode())
                                                      for i in range(3)]
    finally:
        consumer.close()


def test_list_offsets(bootstrap: str, topic: str, producer: KafkaProducer) -> None:
    base_ts = int(time.time() * 1000) - 7_200_000
    _send_all(producer, topic, [{"value": f"{i}".encode(), "timestamp_ms": base_ts + 100 * i}
                                for i in range(25)])
    consumer = _consumer(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 25}
        found = consumer.offsets_for_times({tp: base_ts + 1050})[tp]
        assert (found.offset, found.timestamp) == (11, base_ts + 1100)
        assert consumer.offsets_for_times({tp: base_ts})[tp].offset == 0
        assert consumer.offsets_for_times({tp: base_ts + 10**6})[tp] is None
        # consume from a timestamp: seek to the offset the lookup found
        consumer.assign([tp])
        consumer.seek(tp, found.offset)
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while len(got) < 14 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
        assert [r.value for r in got] == [f"{i}".encode() for i in range(11, 25)]
    finally:
        consumer.close()


def test_long_poll_delivers_promptly(bootstrap: str, topic: str,
                                     producer: KafkaProducer) -> None:
    _send_all(producer, topic, [{"value": b"first"}])
    consumer = _consumer(bootstrap, fetch_max_wait_ms=10_000, request_timeout_ms=30_000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list[Any] = []
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(records)
        assert [r.value for r in got] == [b"first"]
        # The next fetch is parked in the broker (fetch.max.wait.ms = 10 s).
        assert consumer.poll(timeout_ms=1000) == {}
        produced_at: list[float] = []

        def produce_later() -> None:
            produced_at.append(time.monotonic())
            _send_all(producer, topic, [{"value": b"second"}])

        thread = threading.Thread(target=produce_later)
        thread.start()
        second: list[Any] = []
        deadline = time.monotonic() + 9
        while not second and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=50).values():
                second.extend(records)
        received_at = time.monotonic()
        thread.join(10)
        assert [r.value for r in second] == [b"second"]
        assert received_at - produced_at[0] < 2.0
    finally:
        consumer.close()


def test_small_fetch_sizes(bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=200_000)
    try:
        _send_all(producer, topic, [{"value": bytes([i]) * 4000} for i in range(20)])
    finally:
        producer.close(timeout=5)
    got = _consume(bootstrap, topic, 20, max_partition_fetch_bytes=512, fetch_max_bytes=1024)
    assert [r.value for r in got] == [bytes([i]) * 4000 for i in range(20)]


def test_fetch_min_bytes_waits_for_enough_data(bootstrap: str, topic: str,
                                               producer: KafkaProducer) -> None:
    """fetch.min.bytes: a fetch with less data waits until fetch.max.wait.ms; one that
    brings enough returns at once."""
    _send_all(producer, topic, [{"value": b"seed"}])
    consumer = _consumer(bootstrap, fetch_min_bytes=20_000, fetch_max_wait_ms=1500,
                         request_timeout_ms=30_000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 1)  # past the seed: nothing to read yet

        def wait_for(count: int, timeout: float) -> tuple[list[Any], float]:
            got: list[Any] = []
            start = time.monotonic()
            while len(got) < count and time.monotonic() - start < timeout:
                for records in consumer.poll(timeout_ms=50).values():
                    got.extend(records)
            return got, time.monotonic() - start

        assert consumer.poll(timeout_ms=300) == {}  # a fetch is now parked
        _send_all(producer, topic, [{"value": b"small"}])
        small, took = wait_for(1, 6)
        assert [r.value for r in small] == [b"small"]
        assert took > 0.5, took  # held back: 5 bytes < fetch.min.bytes
        assert consumer.poll(timeout_ms=300) == {}  # the next fetch is parked
        _send_all(producer, topic, [{"value": b"x" * 30_000}])
        big, took = wait_for(1, 6)
        assert [len(r.value) for r in big] == [30_000]
        assert took < 1.0, took  # enough bytes: answered before the wait ran out
    finally:
        consumer.close()


def test_acks_all_below_min_insync_replicas(bootstrap: str, topic: str) -> None:
    """min.insync.replicas above the ISR size refuses acks=all (NOT_ENOUGH_REPLICAS) and
    still takes acks=1."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import NotEnoughReplicasError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={
            "min.insync.replicas": "2"})])
    finally:
        admin.close()
    strict = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0,
                           enable_idempotence=False)
    try:
        with pytest.raises(NotEnoughReplicasError):
            strict.send(topic, value=b"refused").get(timeout=20)
    finally:
        strict.close(timeout=5)
    relaxed = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    try:
        assert relaxed.send(topic, value=b"taken").get(timeout=20).offset == 0
    finally:
        relaxed.close(timeout=5)
    assert [r.value for r in _consume(bootstrap, topic, 1)] == [b"taken"]


def test_timestamp_too_far_off_is_refused(bootstrap: str, topic: str) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import InvalidTimestampError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={
            "message.timestamp.difference.max.ms": "60000"})])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False)
    try:
        now = int(time.time() * 1000)
        with pytest.raises(InvalidTimestampError):
            producer.send(topic, value=b"old", timestamp_ms=now - 3_600_000).get(timeout=20)
        with pytest.raises(InvalidTimestampError):
            producer.send(topic, value=b"future", timestamp_ms=now + 3_600_000).get(timeout=20)
        assert producer.send(topic, value=b"now", timestamp_ms=now).get(timeout=20).offset == 0
    finally:
        producer.close(timeout=5)
