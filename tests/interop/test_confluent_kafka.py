"""librdkafka (confluent-kafka) against one klog broker: produce and consume unchanged.

Consumers use ``assign`` (no group coordinator is involved), so every test is about the
data path: Metadata, Produce, Fetch and ListOffsets.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from klog.protocol.records.batch import CompressionType
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


def _producer(bootstrap: str, **conf: Any) -> Producer:
    """A producer; ``conf`` holds librdkafka settings by their dotted names."""
    settings = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 20000}
    settings.update(conf)
    return Producer(settings)


def _consumer(bootstrap: str, **conf: Any) -> Consumer:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": "interop-unused",  # required by librdkafka; assign() never joins it
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
    }
    settings.update(conf)
    return Consumer(settings)


def _produce_all(producer: Producer, topic: str, items: list[dict[str, Any]],
                 timeout: float = 20.0) -> list[Message]:
    """Produce ``items`` (kwargs of Producer.produce) and return their delivery reports,
    failing the test on any delivery error."""
    reports: list[Message] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        reports.append(msg)

    for item in items:
        producer.produce(topic, on_delivery=on_delivery, **item)
        producer.poll(0)
    assert producer.flush(timeout) == 0, "messages still undelivered"
    errors = [m.error() for m in reports if m.error() is not None]
    assert not errors, errors
    return reports


def _consume(bootstrap: str, topic: str, count: int, *, partition: int = 0,
             offset: int = OFFSET_BEGINNING, timeout: float = 15.0,
             **conf: Any) -> list[Message]:
    consumer = _consumer(bootstrap, **conf)
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        got: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(msg)
        return got
    finally:
        consumer.close()


# -- topics and metadata --------------------------------------------------------------------


def test_metadata_auto_creates_topic(bootstrap: str, broker: KlogBroker, topic: str) -> None:
    consumer = _consumer(bootstrap, **{"allow.auto.create.topics": True})
    try:
        # A metadata request naming an unknown topic creates it (auto.create.topics.enable).
        deadline = time.monotonic() + 10
        while True:
            md = consumer.list_topics(topic, timeout=5)
            t = md.topics[topic]
            if t.error is None and t.partitions and t.partitions[0].leader == 0:
                break
            assert time.monotonic() < deadline, f"topic never became usable: {t.error}"
            time.sleep(0.1)
        assert md.cluster_id
        assert md.controller_id == 0
        assert {b.id: (b.host, b.port) for b in md.brokers.values()} == {
            0: ("127.0.0.1", broker.port)}
        assert sorted(t.partitions) == [0]  # num.partitions defaults to 1
        p = t.partitions[0]
        assert (p.leader, list(p.replicas), list(p.isrs)) == (0, [0], [0])
        assert topic in consumer.list_topics(timeout=5).topics  # listing all topics
    finally:
        consumer.close()
    assert (broker.log_dir / f"{topic}-0").is_dir()


def test_unknown_topic_without_auto_create(bootstrap: str, topic: str) -> None:
    consumer = _consumer(bootstrap, **{"allow.auto.create.topics": False})
    try:
        md = consumer.list_topics(topic, timeout=5)
        assert md.topics[topic].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        consumer.close()
    # ... and it was not created as a side effect
    assert topic not in _consumer(bootstrap).list_topics(timeout=5).topics


# -- produce: codecs, keys, headers, null values ------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_codec_round_trip(bootstrap: str, broker: KlogBroker, topic: str, codec: str) -> None:
    base_ts = int(time.time() * 1000) - 60_000
    items: list[dict[str, Any]] = []
    for i in range(300):
        items.append({
            "key": None if i % 7 == 0 else f"key-{i}".encode(),
            "value": None if i % 11 == 0 else (f"value-{i}-" * (i % 13 + 1)).encode(),
            "headers": [("n", str(i).encode()), ("empty", b""), ("dup", b"1"), ("dup", b"2")]
            if i % 3 == 0 else None,
            "timestamp": base_ts + i,
        })
    producer = _producer(bootstrap, **{"compression.type": codec, "linger.ms": 50})
    reports = _produce_all(producer, topic, items)
    assert sorted(m.offset() for m in reports) == list(range(300))

    got = _consume(bootstrap, topic, 300)
    assert [m.offset() for m in got] == list(range(300))
    for item, msg in zip(items, got, strict=True):
        assert msg.key() == item["key"]
        assert msg.value() == item["value"]
        expected_headers = item["headers"]
        assert msg.headers() == ([(k, v) for k, v in expected_headers]
                                 if expected_headers else None)
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, item["timestamp"])

    batches = stored_batches(broker.log_dir, topic)
    assert sum(b.records_count or 0 for b in batches) == 300
    # librdkafka sends a batch uncompressed when compressing would not make it smaller.
    # It uses lz4 only with brokers that advertise FindCoordinator (its proxy for "0.8.2
    # or later"), which klog does since the group coordinator landed: lz4 arrives as lz4.
    expected = _CODEC_TYPES[codec]
    codecs = {b.compression for b in batches}
    assert expected in codecs
    assert codecs <= {expected, CompressionType.NONE}
    assert len(batches) < 300  # the producer batched, and batches are stored whole


def test_empty_and_binary_payloads(bootstrap: str, topic: str) -> None:
    items = [
        {"key": b"", "value": b""},
        {"key": None, "value": None},
        {"key": bytes(range(256)), "value": bytes(range(255, -1, -1)) * 40},
        {"key": b"\x00", "value": b"\x00" * 3},
    ]
    _produce_all(_producer(bootstrap), topic, items)
    got = _consume(bootstrap, topic, len(items))
    assert [(m.key(), m.value()) for m in got] == [(i["key"], i["value"]) for i in items]


def test_one_megabyte_value(bootstrap: str, topic: str) -> None:
    big = bytes(i % 251 for i in range(1_000_000))
    # librdkafka's own message.max.bytes (1000000) counts the record's overhead too: raise
    # it to the broker's default (1048588), as a user sending 1 MB values does.
    producer = _producer(bootstrap, **{"message.max.bytes": 1_048_588})
    _produce_all(producer, topic, [{"key": b"big", "value": big},
                                               {"key": b"after", "value": b"x"}])
    got = _consume(bootstrap, topic, 2)
    assert [m.key() for m in got] == [b"big", b"after"]
    assert got[0].value() == big


def test_message_too_large_is_refused(bootstrap: str, topic: str) -> None:
    # The producer's own limit is raised so the batch reaches the broker, whose
    # message.max.bytes (1048588 by default) refuses it.
    producer = _producer(bootstrap, **{"message.max.bytes": 3_000_000})
    _produce_all(producer, topic, [{"value": b"before"}])
    errors: list[KafkaError] = []
    producer.produce(topic, value=b"x" * 1_100_000,
                     on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(20) == 0
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    reports = _produce_all(producer, topic, [{"value": b"after"}])
    assert reports[0].offset() == 1  # nothing of the refused batch was appended
    got = _consume(bootstrap, topic, 2)
    assert [m.value() for m in got] == [b"before", b"after"]


@pytest.mark.parametrize("acks", [0, 1, -1])
def test_acks(bootstrap: str, topic: str, acks: int) -> None:
    producer = _producer(bootstrap, acks=acks)
    items = [{"key": str(i).encode(), "value": f"v{i}".encode()} for i in range(500)]
    reports = _produce_all(producer, topic, items)
    if acks != 0:
        assert [m.offset() for m in reports] == list(range(500))
    got = _consume(bootstrap, topic, 500)
    assert [m.value() for m in got] == [i["value"] for i in items]


# -- consume: beginning, end, timestamps, list offsets --------------------------------------


def test_consume_from_end_sees_only_new_messages(bootstrap: str, topic: str) -> None:
    producer = _producer(bootstrap)
    _produce_all(producer, topic, [{"value": f"old-{i}".encode()} for i in range(20)])
    consumer = _consumer(bootstrap, **{"enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_END)])
        # "End" resolves (ListOffsets latest) to 20; the consumer reports reaching it.
        eof = None
        deadline = time.monotonic() + 10
        while eof is None and time.monotonic() < deadline:
            eof = consumer.poll(0.1)
        assert eof is not None and eof.error().code() == KafkaError._PARTITION_EOF
        assert eof.offset() == 20
        _produce_all(producer, topic, [{"value": f"new-{i}".encode()} for i in range(5)])
        got: list[Message] = []
        deadline = time.monotonic() + 10
        while len(got) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
            elif msg is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF
        assert [(m.offset(), m.value()) for m in got] == [
            (20 + i, f"new-{i}".encode()) for i in range(5)]
    finally:
        consumer.close()


def test_offsets_for_times_and_consume_from_timestamp(bootstrap: str, topic: str) -> None:
    base_ts = int(time.time() * 1000) - 3_600_000
    # One request: several batches, and several records per batch, so a lookup must find
    # the exact record inside a batch, not just the batch.
    items = [{"value": f"v{i}".encode(), "timestamp": base_ts + 1000 * i} for i in range(40)]
    _produce_all(_producer(bootstrap, **{"linger.ms": 20, "batch.num.messages": 7}), topic, items)
    consumer = _consumer(bootstrap)
    try:
        def lookup(ts: int) -> int:
            [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=10)
            assert tp.error is None
            return tp.offset

        assert lookup(base_ts - 5) == 0
        assert lookup(base_ts) == 0
        assert lookup(base_ts + 1) == 1
        assert lookup(base_ts + 10_500) == 11
        assert lookup(base_ts + 12_000) == 12
        assert lookup(base_ts + 39_000) == 39
        assert lookup(base_ts + 39_001) == OFFSET_END  # no record that late: -1
    finally:
        consumer.close()
    got = _consume(bootstrap, topic, 10, offset=30)
    assert [m.value() for m in got] == [f"v{i}".encode() for i in range(30, 40)]


def test_watermarks(bootstrap: str, topic: str) -> None:
    producer = _producer(bootstrap)
    _produce_all(producer, topic, [{"value": b"x"}] * 7)
    consumer = _consumer(bootstrap)
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 7)
        _produce_all(producer, topic, [{"value": b"y"}] * 3)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 10)
    finally:
        consumer.close()


def test_admin_list_offsets(bootstrap: str, topic: str) -> None:
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import AdminClient, OffsetSpec

    base_ts = int(time.time() * 1000) - 600_000
    stamps = [base_ts + 10 * i for i in range(10)]
    stamps[4] = base_ts + 5_000  # the largest timestamp, not on the last record
    _produce_all(_producer(bootstrap), topic,
                 [{"value": b"v", "timestamp": ts} for ts in stamps])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, 0)

    def offset_of(spec: OffsetSpec) -> Any:
        futures = admin.list_offsets({tp: spec}, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                     request_timeout=10)
        return futures[tp].result(timeout=10)

    assert offset_of(OffsetSpec.earliest()).offset == 0
    assert offset_of(OffsetSpec.latest()).offset == 10
    found = offset_of(OffsetSpec.max_timestamp())
    assert (found.offset, found.timestamp) == (4, base_ts + 5_000)
    found = offset_of(OffsetSpec.for_timestamp(base_ts + 25))
    assert (found.offset, found.timestamp) == (3, base_ts + 30)


def test_long_poll_delivers_promptly(bootstrap: str, topic: str) -> None:
    """A consumer's fetch waits in the broker (fetch.wait.max.ms) and is answered as soon
    as a produce brings data, not when the wait runs out."""
    producer = _producer(bootstrap, **{"linger.ms": 0})
    _produce_all(producer, topic, [{"value": b"first"}])
    stats: list[dict[str, Any]] = []
    consumer = _consumer(bootstrap, **{"fetch.wait.max.ms": 10_000,
                                       "statistics.interval.ms": 100,
                                       "stats_cb": lambda raw: stats.append(json.loads(raw))})

    def fetches_sent() -> int:
        brokers = stats[-1]["brokers"].values()
        return next(b["req"]["Fetch"] for b in brokers if b["nodeid"] == 0)

    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        first = None
        deadline = time.monotonic() + 10
        while first is None and time.monotonic() < deadline:
            first = consumer.poll(0.2)
        assert first is not None and first.value() == b"first"
        # Now the consumer's next fetch is parked in the broker's purgatory: during a quiet
        # second it sends no more fetches (an immediate empty answer would make it send
        # hundreds).
        assert consumer.poll(0.3) is None
        before = fetches_sent()
        assert consumer.poll(1.0) is None
        assert fetches_sent() - before <= 1
        produced_at: list[float] = []

        def produce_later() -> None:
            produced_at.append(time.monotonic())
            _produce_all(producer, topic, [{"value": b"second"}])

        thread = threading.Thread(target=produce_later)
        thread.start()
        second = None
        deadline = time.monotonic() + 9
        while second is None and time.monotonic() < deadline:
            second = consumer.poll(0.05)
        received_at = time.monotonic()
        thread.join(10)
        assert second is not None and second.value() == b"second"
        assert received_at - produced_at[0] < 2.0, received_at - produced_at[0]
    finally:
        consumer.close()


def test_consumer_reads_past_small_fetch_limits(bootstrap: str, topic: str) -> None:
    """max.partition.fetch.bytes smaller than a batch: the broker still returns one whole
    batch (at least one message), so the consumer makes progress."""
    items = [{"value": bytes([i]) * 5000} for i in range(30)]
    _produce_all(_producer(bootstrap, **{"linger.ms": 20}), topic, items)
    got = _consume(bootstrap, topic, 30, **{"max.partition.fetch.bytes": 1024,
                                            "fetch.max.bytes": 2048, "message.max.bytes": 1000,
                                            "receive.message.max.bytes": 1_000_000})
    assert [m.value() for m in got] == [i["value"] for i in items]


def test_offset_out_of_range_resets(bootstrap: str, topic: str) -> None:
    _produce_all(_producer(bootstrap), topic, [{"value": f"{i}".encode()} for i in range(5)])
    got = _consume(bootstrap, topic, 5, offset=1000, **{"auto.offset.reset": "earliest"})
    assert [m.offset() for m in got] == list(range(5))


def test_produce_result_reports_create_time(bootstrap: str, topic: str) -> None:
    reports = _produce_all(_producer(bootstrap), topic, [{"value": b"v", "timestamp": 1234}])
    assert reports[0].timestamp() == (TIMESTAMP_CREATE_TIME, 1234)


def test_empty_partition_offsets(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    tp = TopicPartition(topic, 0)
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        assert admin.list_offsets({tp: spec})[tp].result(timeout=10).offset == 0
    consumer = _consumer(bootstrap)
    try:
        assert consumer.get_watermark_offsets(tp, timeout=10) == (0, 0)
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=10)
        assert found.offset == OFFSET_END
    finally:
        consumer.close()
    # the first record of the once-empty partition is at offset 0
    _produce_all(_producer(bootstrap), topic, [{"value": b"one"}])
    got = _consume(bootstrap, topic, 1, offset=0)
    assert [(m.offset(), m.value()) for m in got] == [(0, b"one")]


# -- per-record errors (KIP-467) --------------------------------------------------------------


def _one_batch(bootstrap: str, topic: str, items: list[dict[str, Any]]
               ) -> dict[int, KafkaError | None]:
    """Produce ``items`` to partition 0 as one batch (a long linger gathers them) and give
    each one's delivery error (None: delivered), by its index."""
    producer = _producer(bootstrap, **{"linger.ms": 2000, "batch.num.messages": 10_000,
                                       "retries": 0})
    outcomes: dict[int, KafkaError | None] = {}
    for i, item in enumerate(items):
        producer.produce(topic, partition=0, **item,
                         on_delivery=lambda err, _msg, i=i: outcomes.__setitem__(i, err))
    assert producer.flush(30) == 0
    assert sorted(outcomes) == list(range(len(items)))
    return outcomes


def _codes(outcomes: dict[int, KafkaError | None], code: int) -> list[int]:
    return sorted(i for i, err in outcomes.items() if err is not None and err.code() == code)


def test_keyless_records_fail_alone_on_a_compacted_topic(bootstrap: str, topic: str) -> None:
    """librdkafka's own test (0011_produce_batch, its record-fail case) against Kafka: one
    batch of 100 records, every tenth without a key, to a cleanup.policy=compact topic. The
    broker names the ten in the response's record errors (KIP-467), so librdkafka fails
    exactly them with INVALID_RECORD and the other 90 with _INVALID_DIFFERENT_RECORD.
    (Before, the batch was refused whole without record errors: all 100 INVALID_RECORD.)"""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})]
                        )[topic].result(timeout=20)
    items = [{"value": f"test message #{i}".encode(),
              "key": None if i % 10 == 0 else f"test message #{i}".encode()}
             for i in range(100)]
    outcomes = _one_batch(bootstrap, topic, items)
    assert _codes(outcomes, KafkaError.INVALID_RECORD) == list(range(0, 100, 10))
    assert _codes(outcomes, KafkaError._INVALID_DIFFERENT_RECORD) == [
        i for i in range(100) if i % 10]
    # nothing of the refused batch was appended; a batch of keyed records is
    keyed = _one_batch(bootstrap, topic, [{"value": b"v", "key": b"k"}])
    assert keyed == {0: None}
    got = _consume(bootstrap, topic, 1)
    assert [(m.offset(), m.key()) for m in got] == [(0, b"k")]


def test_records_with_timestamps_out_of_range_fail_alone(bootstrap: str, topic: str) -> None:
    """message.timestamp.difference.max.ms: the two records an hour old are named (the
    partition's error is INVALID_TIMESTAMP); librdkafka fails each record named, when more
    than one is, with INVALID_RECORD, and the others with _INVALID_DIFFERENT_RECORD."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "message.timestamp.difference.max.ms": "600000"})])[topic].result(timeout=20)
    now = int(time.time() * 1000)
    items = [{"value": b"v", "timestamp": now - 3_600_000 if i in (3, 7) else now}
             for i in range(20)]
    outcomes = _one_batch(bootstrap, topic, items)
    assert _codes(outcomes, KafkaError.INVALID_RECORD) == [3, 7]
    assert _codes(outcomes, KafkaError._INVALID_DIFFERENT_RECORD) == [
        i for i in range(20) if i not in (3, 7)]
