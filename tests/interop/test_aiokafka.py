"""aiokafka against one klog broker: the asyncio client (its own protocol code).

Each test runs its coroutine with ``asyncio.run`` under a timeout; consumers have no group
and use ``assign``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import MessageSizeTooLargeError

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


def run(coro_fn: Callable[[], Awaitable[Any]], timeout: float = 40.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro_fn(), timeout)

    return asyncio.run(bounded())


def _producer(bootstrap: str, **conf: Any) -> AIOKafkaProducer:
    settings: dict[str, Any] = {"bootstrap_servers": bootstrap, "linger_ms": 5,
                                "request_timeout_ms": 10_000}
    settings.update(conf)
    return AIOKafkaProducer(**settings)


def _consumer(bootstrap: str, **conf: Any) -> AIOKafkaConsumer:
    settings: dict[str, Any] = {"bootstrap_servers": bootstrap, "group_id": None,
                                "enable_auto_commit": False, "fetch_max_wait_ms": 100,
                                "request_timeout_ms": 10_000}
    settings.update(conf)
    return AIOKafkaConsumer(**settings)


async def _send_all(producer: AIOKafkaProducer, topic: str,
                    items: list[dict[str, Any]]) -> list[Any]:
    futures = [await producer.send(topic, **item) for item in items]
    return list(await asyncio.gather(*futures))


async def _drain(consumer: AIOKafkaConsumer, count: int, timeout: float = 15.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=200)).values():
            got.extend(records)
    return got


async def _consume(bootstrap: str, topic: str, count: int, *, offset: int = 0,
                   **conf: Any) -> list[Any]:
    consumer = _consumer(bootstrap, **conf)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        return await _drain(consumer, count)
    finally:
        await consumer.stop()


def test_metadata_auto_creates_topic(bootstrap: str, broker: KlogBroker, topic: str) -> None:
    async def go() -> None:
        producer = _producer(bootstrap)
        await producer.start()
        try:
            assert await producer.partitions_for(topic) == {0}
            cluster = producer.client.cluster
            assert [(b.nodeId, b.host, b.port) for b in cluster.brokers()] == [
                (0, "127.0.0.1", broker.port)]
            assert cluster.leader_for_partition(TopicPartition(topic, 0)) == 0
        finally:
            await producer.stop()
        consumer = _consumer(bootstrap)
        await consumer.start()
        try:
            assert topic in await consumer.topics()
        finally:
            await consumer.stop()

    run(go)


@pytest.mark.parametrize("codec", CODECS)
def test_codec_round_trip(bootstrap: str, broker: KlogBroker, topic: str, codec: str) -> None:
    base_ts = int(time.time() * 1000) - 60_000
    items: list[dict[str, Any]] = []
    for i in range(200):
        items.append({
            # aiokafka refuses a record with neither key nor value
            "key": None if i % 4 == 0 else f"k{i}".encode(),
            "value": None if i % 6 == 0 and i % 4 else (f"value-{i}" * (i % 19 + 1)).encode(),
            "headers": [("h", str(i).encode()), ("", b"")] if i % 3 else None,
            "timestamp_ms": base_ts + 2 * i,
        })

    async def go() -> list[Any]:
        producer = _producer(bootstrap, compression_type=None if codec == "none" else codec,
                             linger_ms=50)
        await producer.start()
        try:
            metadata = await _send_all(producer, topic, items)
        finally:
            await producer.stop()
        assert [m.offset for m in metadata] == list(range(200))
        return await _consume(bootstrap, topic, 200)

    got = run(go)
    assert [r.offset for r in got] == list(range(200))
    for item, record in zip(items, got, strict=True):
        assert record.key == item["key"]
        assert record.value == item["value"]
        assert list(record.headers) == (item["headers"] or [])
        assert record.timestamp == item["timestamp_ms"]
        assert record.timestamp_type == 0  # CreateTime
    batches = stored_batches(broker.log_dir, topic)
    assert sum(b.records_count or 0 for b in batches) == 200
    assert {b.compression for b in batches} == {_CODEC_TYPES[codec]}


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(bootstrap: str, topic: str, acks: Any) -> None:
    async def go() -> list[Any]:
        producer = _producer(bootstrap, acks=acks)
        await producer.start()
        try:
            metadata = await _send_all(producer, topic,
                                       [{"value": f"m{i}".encode()} for i in range(300)])
        finally:
            await producer.stop()
        if acks != 0:
            assert [m.offset for m in metadata] == list(range(300))
        return await _consume(bootstrap, topic, 300)

    got = run(go)
    assert [r.value for r in got] == [f"m{i}".encode() for i in range(300)]


def test_one_megabyte_value_and_message_too_large(bootstrap: str, topic: str) -> None:
    big = bytes(i % 241 for i in range(1_000_000))

    async def go() -> list[Any]:
        producer = _producer(bootstrap, max_request_size=3_000_000)
        await producer.start()
        try:
            await _send_all(producer, topic, [{"key": b"big", "value": big}])
            with pytest.raises(MessageSizeTooLargeError):
                await producer.send_and_wait(topic, value=b"z" * 1_100_000)
            [after] = await _send_all(producer, topic, [{"key": b"after", "value": b"1"}])
            assert after.offset == 1
        finally:
            await producer.stop()
        return await _consume(bootstrap, topic, 2)

    got = run(go)
    assert [r.key for r in got] == [b"big", b"after"]
    assert got[0].value == big


def test_consume_from_beginning_end_and_timestamp(bootstrap: str, topic: str) -> None:
    base_ts = int(time.time() * 1000) - 86_400_000

    async def go() -> None:
        producer = _producer(bootstrap, linger_ms=30)
        await producer.start()
        consumer = _consumer(bootstrap)
        await consumer.start()
        try:
            await _send_all(producer, topic, [
                {"value": f"{i}".encode(), "timestamp_ms": base_ts + 10 * i} for i in range(50)])
            tp = TopicPartition(topic, 0)
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 50}
            found = (await consumer.offsets_for_times({tp: base_ts + 255}))[tp]
            assert (found.offset, found.timestamp) == (26, base_ts + 260)
            assert (await consumer.offsets_for_times({tp: base_ts + 10_000}))[tp] is None

            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            assert [r.value for r in await _drain(consumer, 50)] == [
                f"{i}".encode() for i in range(50)]
            consumer.seek(tp, found.offset)
            assert [r.offset for r in await _drain(consumer, 24)] == list(range(26, 50))
            await consumer.seek_to_end(tp)
            assert await consumer.position(tp) == 50
            await _send_all(producer, topic, [{"value": b"new"}])
            assert [(r.offset, r.value) for r in await _drain(consumer, 1)] == [(50, b"new")]
        finally:
            await consumer.stop()
            await producer.stop()

    run(go)


def test_long_poll_delivers_promptly(bootstrap: str, topic: str) -> None:
    async def go() -> None:
        producer = _producer(bootstrap, linger_ms=0)
        await producer.start()
        consumer = _consumer(bootstrap, fetch_max_wait_ms=10_000, request_timeout_ms=30_000)
        await consumer.start()
        try:
            await producer.send_and_wait(topic, b"first")
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            assert [r.value for r in await _drain(consumer, 1)] == [b"first"]
            assert await consumer.getmany(timeout_ms=1000) == {}  # a fetch waits in the broker
            produced_at = time.monotonic()
            await producer.send_and_wait(topic, b"second")
            second = await _drain(consumer, 1, timeout=9)
            assert [r.value for r in second] == [b"second"]
            assert time.monotonic() - produced_at < 2.0
        finally:
            await consumer.stop()
            await producer.stop()

    run(go)
