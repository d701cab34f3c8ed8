"""klog.client.consumer against a real klog broker, with records written by real clients."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from klog.client.consumer import Consumer, NoOffsetForPartitionError, TopicPartition
from klog.protocol.errors import OffsetOutOfRangeError
from klog.testing import KlogBroker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

pytestmark = pytest.mark.timeout(90)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    running = KlogBroker(tmp_path_factory.mktemp("klog") / "data",
                         overrides={"num.partitions": "1"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


_counter = iter(range(10**6))


@pytest.fixture
def topic() -> str:
    return f"consumer-{next(_counter)}"


def _create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)
    futures[topic].result(timeout=15)


def _records(n: int) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    out: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = []
    for i in range(n):
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = None if i % 7 == 3 and key is not None else (f"value-{i}-" * (i % 13 + 1)).encode()
        headers = [] if i % 3 == 0 else [("h1", f"{i}".encode()), ("h2", b"")]
        out.append((key, value, headers))
    return out


def _produce_kafka_python(bootstrap: str, topic: str, codec: str, items: list[Any],
                          partition: int = 0) -> None:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, request_timeout_ms=10_000,
        compression_type=None if codec == "none" else codec)
    try:
        for key, value, headers in items:
            producer.send(topic, key=key, value=value, headers=headers, partition=partition)
        producer.flush(timeout=15)
    finally:
        producer.close(timeout=5)


def _produce_confluent(bootstrap: str, topic: str, codec: str, items: list[Any],
                       partition: int = 0, timestamp: int | None = None) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.codec": codec,
                         "linger.ms": 20})
    for key, value, headers in items:
        kwargs: dict[str, Any] = {"key": key, "value": value, "partition": partition}
        if headers:
            kwargs["headers"] = headers
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        producer.produce(topic, **kwargs)
    assert producer.flush(15) == 0


async def _read(consumer: Consumer, n: int, timeout: float = 15.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        assert time.monotonic() < deadline, f"only {len(got)} of {n} records"
        batch = await consumer.getmany(timeout_ms=500)
        for records in batch.values():
            got.extend(records)
    return got


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


# librdkafka compresses with lz4 only once the broker advertises FindCoordinator (it
# sends uncompressed batches until then); kafka-python covers lz4.
_WRITERS = [("kafka-python", c) for c in CODECS] + [("confluent", c) for c in CODECS
                                                    if c != "lz4"]


@pytest.mark.parametrize(("producer", "codec"), _WRITERS)
def test_records_from_real_clients_read_identically(
        broker: KlogBroker, topic: str, producer: str, codec: str) -> None:
    items = _records(300)
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, topic)
    if producer == "confluent":
        _produce_confluent(bootstrap, topic, codec, items)
    else:
        _produce_kafka_python(bootstrap, topic, codec, items)

    async def main() -> list[Any]:
        async with Consumer(bootstrap, auto_offset_reset="earliest",
                            max_partition_fetch_bytes=4096) as consumer:
            consumer.assign([(topic, 0)])
            got = await _read(consumer, len(items))
            assert await consumer.position((topic, 0)) == len(items)
            return got

    got = _run(main())
    assert [r.offset for r in got] == list(range(len(items)))
    for record, (key, value, headers) in zip(got, items, strict=True):
        assert (record.topic, record.partition) == (topic, 0)
        assert record.key == key and record.value == value
        assert record.headers == headers
        assert record.timestamp_type == 0 and record.timestamp > 1_600_000_000_000
        assert record.leader_epoch == 0


def test_seek_beginning_end_offset_and_timestamp(broker: KlogBroker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, topic)
    t0 = 1_700_000_000_000
    for i in range(5):  # 5 batches of 10, timestamps t0 + 1000 * batch
        _produce_confluent(bootstrap, topic, "none",
                           [(b"k", f"{i}-{j}".encode(), []) for j in range(10)],
                           timestamp=t0 + 1000 * i)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with Consumer(bootstrap) as consumer:  # latest by default
            consumer.assign([tp])
            assert await consumer.position(tp) == 50
            assert await consumer.getmany(timeout_ms=200) == {}
            consumer.seek_to_beginning(tp)
            assert await consumer.position(tp) == 0
            first = await consumer.getone()
            assert (first.offset, first.value) == (0, b"0-0")
            consumer.seek(tp, 37)
            got = await consumer.getmany(tp, timeout_ms=5000, max_records=3)
            assert [r.offset for r in got[tp]] == [37, 38, 39]
            assert await consumer.position(tp) == 40
            found = await consumer.offsets_for_times({tp: t0 + 2500})
            assert found[tp] is not None and found[tp].offset == 30
            assert found[tp].timestamp == t0 + 3000
            assert (await consumer.offsets_for_times({tp: t0 + 10_000}))[tp] is None
            await consumer.seek_to_timestamp({tp: t0 + 1000})
            assert (await consumer.getone()).offset == 10
            await consumer.seek_to_timestamp({tp: t0 + 99_000})
            assert await consumer.position(tp) == 50
            consumer.seek_to_end()
            assert await consumer.position(tp) == 50
            assert await consumer.beginning_offsets([tp]) == {tp: 0}
            assert await consumer.end_offsets([tp]) == {tp: 50}
            assert consumer.highwater(tp) == 50

    _run(main())


@pytest.mark.parametrize("reset", ["earliest", "latest", "none"])
def test_offset_out_of_range(broker: KlogBroker, topic: str, reset: str) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, topic)
    _produce_confluent(bootstrap, topic, "none", [(None, b"x", [])] * 10)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with Consumer(bootstrap, auto_offset_reset=reset) as consumer:
            consumer.assign([tp])
            if reset == "none":
                with pytest.raises(NoOffsetForPartitionError):
                    await consumer.getmany(timeout_ms=100)
            consumer.seek(tp, 1000)
            if reset == "none":
                with pytest.raises(OffsetOutOfRangeError):
                    await consumer.getmany(timeout_ms=5000)
                consumer.seek(tp, 9)
                assert (await consumer.getone()).offset == 9
            elif reset == "earliest":
                got = await _read(consumer, 10)
                assert [r.offset for r in got] == list(range(10))
            else:
                assert await consumer.getmany(timeout_ms=1000) == {}
                assert await consumer.position(tp) == 10

    _run(main())


def test_long_poll_returns_as_soon_as_a_record_arrives(broker: KlogBroker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, topic)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with Consumer(bootstrap, fetch_max_wait_ms=5000) as consumer:
            consumer.assign([tp])
            assert await consumer.position(tp) == 0
            started = time.monotonic()
            assert await consumer.getmany(timeout_ms=300) == {}
            assert 0.25 < time.monotonic() - started < 2
            loop = asyncio.get_running_loop()
            loop.call_later(0.5, _produce_confluent, bootstrap, topic, "none",
                            [(b"k", b"late", [])])
            started = time.monotonic()
            got = await consumer.getmany(timeout_ms=10_000)
            waited = time.monotonic() - started
            assert [r.value for r in got[tp]] == [b"late"]
            assert waited < 4, f"long poll answered after {waited:.1f} s"

    _run(main())


def test_many_partitions_pause_resume_and_async_iteration(broker: KlogBroker, topic: str
                                                           ) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, topic, partitions=3)
    for p in range(3):
        _produce_kafka_python(bootstrap, topic, "zstd",
                              [(None, f"{p}-{i}".encode(), []) for i in range(20)], p)
    tps = [TopicPartition(topic, p) for p in range(3)]

    async def main() -> None:
        async with Consumer(bootstrap, auto_offset_reset="earliest",
                            value_deserializer=bytes.decode) as consumer:
            consumer.assign(tps)
            assert consumer.assignment() == set(tps)
            consumer.pause(tps[1])
            got = await _read(consumer, 40)
            assert {r.partition for r in got} == {0, 2}
            assert await consumer.getmany(timeout_ms=300) == {}
            assert consumer.paused() == {tps[1]}
            consumer.resume(tps[1])
            seen = []
            async for record in consumer:
                seen.append(record.value)
                if len(seen) == 20:
                    break
            assert seen == [f"1-{i}" for i in range(20)]
        # assign replaces the assignment
        async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign(tps)
            consumer.assign([tps[2]])
            got = await _read(consumer, 20)
            assert {r.partition for r in got} == {2}

    _run(main())


def test_consumer_survives_a_broker_restart(broker: KlogBroker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    _create(bootstrap, topic)
    _produce_confluent(bootstrap, topic, "none", [(None, b"before", [])] * 5)
    tp = TopicPartition(topic, 0)

    async def main() -> None:
        async with Consumer(bootstrap, auto_offset_reset="earliest",
                            request_timeout_ms=5000) as consumer:
            consumer.assign([tp])
            assert len(await _read(consumer, 5)) == 5
            await asyncio.to_thread(broker.restart)
            await asyncio.to_thread(_produce_confluent, bootstrap, topic, "none",
                                    [(None, b"after", [])] * 3)
            got = await _read(consumer, 3, timeout=30)
            assert [(r.offset, r.value) for r in got] == [(5, b"after"), (6, b"after"),
                                                          (7, b"after")]

    _run(main())
