"""Every client generation against one klog broker, reading each other's records.

kafka-python forced to the wire versions of Kafka 0.9, 0.10.1, 0.11, 1.0 and 2.0 (its
``api_version``: no ApiVersions negotiation, the versions of that release -- e.g. (0, 9)
produces with Produce v1 and message format v0, fetches with Fetch v1) produces and
consumes, and current librdkafka (confluent_kafka) reads what each wrote and writes what
each reads: so up-conversion on produce (v0/v1 message sets -> v2) and down-conversion on
fetch (v2 -> v0/v1) are exercised by real clients over real sockets. Current kafka-python
consumes with incremental fetch sessions (KIP-227), which the broker now keeps.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(120)

GENERATIONS = [(0, 9), (0, 10, 1), (0, 11), (1, 0), (2, 0)]
COUNT = 20


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"num.partitions": "1"}


def _ids(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def _values(tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(COUNT)]


def _kp_produce(bootstrap: str, topic: str, version: tuple[int, ...], values: list[bytes],
                compression: str | None = None) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=version,
                             compression_type=compression, request_timeout_ms=10_000,
                             linger_ms=5)
    try:
        for i, v in enumerate(values):
            producer.send(topic, key=b"k%d" % i, value=v).get(timeout=15)
    finally:
        producer.close(timeout=5)


def _kp_consume(bootstrap: str, topic: str, count: int, timeout: float = 30.0,
                **conf: Any) -> tuple[list[Any], KafkaConsumer]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=100,
                             request_timeout_ms=10_000, **conf)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(records)
    return got, consumer


def _rd_produce(bootstrap: str, topic: str, values: list[bytes], compression: str = "none"
                ) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": compression,
                         "linger.ms": 5})
    for i, v in enumerate(values):
        producer.produce(topic, key=b"k%d" % i, value=v, partition=0)
    assert producer.flush(15) == 0


def _rd_consume(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append(message)
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("version", GENERATIONS, ids=_ids)
@pytest.mark.parametrize("compression", [None, "gzip"])
def test_old_kafka_python_writes_and_everyone_reads(bootstrap: str, version: tuple[int, ...],
                                                    compression: str | None) -> None:
    topic = f"gen-w-{_ids(version)}-{compression}"
    values = _values(topic)
    _kp_produce(bootstrap, topic, version, values, compression)
    own, consumer = _kp_consume(bootstrap, topic, COUNT, api_version=version)
    consumer.close()
    assert [r.value for r in own] == values
    assert [r.offset for r in own] == list(range(COUNT))
    assert [r.key for r in own] == [b"k%d" % i for i in range(COUNT)]
    if version >= (0, 10):
        assert all(r.timestamp > 0 for r in own)
    current = _rd_consume(bootstrap, topic, COUNT)
    assert [m.value() for m in current] == values
    assert [m.key() for m in current] == [b"k%d" % i for i in range(COUNT)]


@pytest.mark.parametrize("version", GENERATIONS, ids=_ids)
@pytest.mark.parametrize("compression", ["none", "gzip", "lz4"])
def test_current_librdkafka_writes_and_old_kafka_python_reads(
        bootstrap: str, version: tuple[int, ...], compression: str) -> None:
    topic = f"gen-r-{_ids(version)}-{compression}"
    values = _values(topic)
    _rd_produce(bootstrap, topic, values, compression)
    got, consumer = _kp_consume(bootstrap, topic, COUNT, api_version=version)
    consumer.close()
    assert [r.value for r in got] == values
    assert [r.offset for r in got] == list(range(COUNT))
    assert [r.key for r in got] == [b"k%d" % i for i in range(COUNT)]


def test_old_generations_read_each_other(bootstrap: str) -> None:
    topic = "gen-mixed"
    expected: list[bytes] = []
    for version in GENERATIONS:
        values = _values(f"{topic}-{_ids(version)}")
        _kp_produce(bootstrap, topic, version, values)
        expected += values
    for version in GENERATIONS:
        got, consumer = _kp_consume(bootstrap, topic, len(expected), api_version=version)
        consumer.close()
        assert [r.value for r in got] == expected, version


def test_current_kafka_python_keeps_an_incremental_fetch_session(
        bootstrap: str, broker: KlogBroker) -> None:
    topic = "gen-sessions"
    _rd_produce(bootstrap, topic, _values("first"))
    got, consumer = _kp_consume(bootstrap, topic, COUNT)
    try:
        assert [r.value for r in got] == _values("first")
        handler = consumer._fetcher._session_handlers[0]
        session_id = handler.next_metadata.session_id
        assert session_id != 0  # the broker opened a session
        _rd_produce(bootstrap, topic, _values("second"))
        more: list[Any] = []
        deadline = time.monotonic() + 30
        while len(more) < COUNT and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                more.extend(records)
        assert [r.value for r in more] == _values("second")
        # the same session all along, continued by incremental fetches
        assert handler.next_metadata.session_id == session_id
        assert handler.next_metadata.epoch > 1
    finally:
        consumer.close()


@pytest.mark.parametrize("version", [(0, 9), (0, 10, 1)], ids=_ids)
def test_old_kafka_python_consumes_in_a_group_and_commits(bootstrap: str,
                                                          version: tuple[int, ...]) -> None:
    # 0.9-era group membership: GroupCoordinator v0, JoinGroup v0, SyncGroup v0,
    # OffsetCommit v2 / OffsetFetch v1 -- and a second consumer resumes at the commit
    topic = f"gen-group-{_ids(version)}"
    group = f"group-{_ids(version)}"
    values = _values(topic)
    _rd_produce(bootstrap, topic, values)
    conf: dict[str, Any] = {"bootstrap_servers": bootstrap, "group_id": group,
                            "api_version": version, "auto_offset_reset": "earliest",
                            "enable_auto_commit": False, "fetch_max_wait_ms": 100,
                            "request_timeout_ms": 11_000, "session_timeout_ms": 10_000}
    first = KafkaConsumer(topic, **conf)
    got: list[Any] = []
    deadline = time.monotonic() + 40
    try:
        while len(got) < COUNT // 2 and time.monotonic() < deadline:
            for records in first.poll(timeout_ms=200, max_records=COUNT // 2 - len(got)
                                      ).values():
                got.extend(records)
        assert [r.value for r in got] == values[:COUNT // 2]
        first.commit()
    finally:
        first.close()
    second = KafkaConsumer(topic, **conf)
    rest: list[Any] = []
    deadline = time.monotonic() + 40
    try:
        while len(rest) < COUNT // 2 and time.monotonic() < deadline:
            for records in second.poll(timeout_ms=200).values():
                rest.extend(records)
    finally:
        second.close()
    assert [r.value for r in rest] == values[COUNT // 2:]
