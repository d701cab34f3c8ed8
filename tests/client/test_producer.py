"""klog's producer: batches as BatchBuilder writes them, the accumulator's rules, and records
delivered to a real klog broker and read back by confluent-kafka and kafka-python."""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from klog import testing
from klog.client import errors
from klog.client.accumulator import BufferPool, ProducerBatch, RecordAccumulator
from klog.client.errors import KafkaClientError, KafkaTimeoutError
from klog.client.producer import Producer, RecordMetadata, SyncProducer
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import read_batch_header
from klog.protocol.records.compression import CompressionType
from klog.protocol.records.v2 import BatchBuilder

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


# ------------------------------------------------------------------ without a broker


def test_batches_are_the_bytes_batch_builder_writes() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        rng = random.Random(1)
        for codec in CompressionType:
            for _ in range(10):
                batch = ProducerBatch("t", 0, codec, 0.0)
                builder = BatchBuilder(compression=codec, producer_id=7, producer_epoch=1,
                                       base_sequence=5)
                for _ in range(rng.randrange(1, 30)):
                    ts = 1_700_000_000_000 + rng.randrange(-5, 100_000)
                    key = None if rng.random() < 0.3 else rng.randbytes(
                        rng.choice([0, 3, 300, 20000]))
                    value = None if rng.random() < 0.2 else rng.randbytes(
                        rng.choice([0, 10, 255, 256, 1024, 70000]))
                    headers = [(f"h{j}", None if rng.random() < 0.3 else rng.randbytes(5))
                               for j in range(rng.choice([0, 0, 1, 3]))]
                    if key is None and value is not None and not headers and rng.random() < 0.5:
                        # send()'s fast path for plain records: the same bytes
                        batch.append_value(ts, value, 0, None, loop.create_future())
                    else:
                        batch.append(ts, key, value, headers, 0, None, loop.create_future())
                    builder.append(ts, key, value, headers)
                assert batch.close(7, 1, 5) == builder.build()
                assert batch.base_sequence == 5

    asyncio.run(main())


def test_buffer_pool_blocks_until_memory_is_released_and_times_out() -> None:
    async def main() -> None:
        pool = BufferPool(100)
        assert pool.try_allocate(80)
        assert not pool.try_allocate(30)
        waiter = asyncio.ensure_future(pool.allocate(30, 5000))
        await asyncio.sleep(0.01)
        assert not waiter.done() and pool.queued == 1
        pool.release(80)
        await asyncio.wait_for(waiter, 1)
        assert pool.available == 70
        start = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            await pool.allocate(90, 50)
        assert 0.04 < time.monotonic() - start < 1
        assert pool.available == 70 and pool.queued == 0
        with pytest.raises(KafkaClientError):
            await pool.allocate(101, 50)

    asyncio.run(main())


def _append(acc: RecordAccumulator, partition: int, value: bytes, now: float) -> Any:
    future, _ = acc.append("t", partition, 1000, None, value, (), len(value) + 10, now=now)
    acc.pool.try_allocate(len(value) + 10)
    return future


def test_accumulator_linger_full_batches_and_drain() -> None:
    async def main() -> None:
        acc = RecordAccumulator(batch_size=100, linger_ms=50)
        leaders = {("t", 0): 1, ("t", 1): 1, ("t", 2): 2}
        leader_for = lambda t, p: leaders.get((t, p))  # noqa: E731
        _append(acc, 0, b"a" * 20, now=0)
        ready, delay, unknown = acc.ready(leader_for, now=10)
        assert ready == {} and delay == pytest.approx(40) and not unknown
        ready, _, _ = acc.ready(leader_for, now=50)
        assert ready == {1: [("t", 0)]}
        # A full batch is ready at once and partitions of the same leader ride along.
        for _ in range(5):
            _append(acc, 1, b"b" * 20, now=60)
        _append(acc, 2, b"c", now=60)
        ready, _, _ = acc.ready(leader_for, now=61)
        assert set(ready) == {1} and set(ready[1]) == {("t", 0), ("t", 1)}
        drained = acc.drain(ready, 1 << 20, now=61)
        assert sorted(b.partition for b in drained[1]) == [0, 1]
        assert all(b.closed for b in drained[1])
        # Unknown leaders are reported by topic.
        _append(acc, 7, b"x", now=70)
        _, _, unknown = acc.ready(leader_for, now=200)
        assert unknown == {"t"}

    asyncio.run(main())


def test_accumulator_retries_in_sequence_order_after_backoff() -> None:
    async def main() -> None:
        acc = RecordAccumulator(batch_size=30, linger_ms=0, retry_backoff_ms=100,
                                idempotent=True)
        leader_for = lambda t, p: 1  # noqa: E731
        for _ in range(3):
            _append(acc, 0, b"v" * 25, now=0)  # one batch each
        first = acc.drain({1: [("t", 0)]}, 1 << 20, now=1, producer_id=5, producer_epoch=0)
        second = acc.drain({1: [("t", 0)]}, 1 << 20, now=1, producer_id=5, producer_epoch=0)
        (b0,), (b1,) = first[1], second[1]
        assert (b0.base_sequence, b1.base_sequence) == (0, 1)
        # Both fail; the later one comes back first, yet b0 goes out first.
        acc.reenqueue(b1, now=2)
        acc.reenqueue(b0, now=2)
        assert [b.base_sequence for b in acc.batches[("t", 0)]] == [0, 1, None]
        ready, delay, _ = acc.ready(leader_for, now=50)
        assert ready == {} and delay == pytest.approx(52)
        again = acc.drain({1: [("t", 0)]}, 1 << 20, now=120, producer_id=5, producer_epoch=0)
        assert again[1] == [b0] and b0.attempts == 1
        # A retried batch waits while an earlier sequence of its partition is in flight.
        assert acc.has_earlier_incomplete(b1)
        assert acc.drain({1: [("t", 0)]}, 1 << 20, now=120, producer_id=5,
                         producer_epoch=0) == {}
        acc.complete(b0, 10)
        assert not acc.has_earlier_incomplete(b1)
        assert b0.futures[0].result().offset == 10
        assert acc.drain({1: [("t", 0)]}, 1 << 20, now=121, producer_id=5,
                         producer_epoch=0)[1] == [b1]
        assert b1.base_sequence == 1  # a retry keeps its sequence (and its bytes)

    asyncio.run(main())


def test_accumulator_mutes_partitions_when_order_is_guaranteed() -> None:
    async def main() -> None:
        acc = RecordAccumulator(batch_size=30, linger_ms=0, guarantee_order=True)
        leader_for = lambda t, p: 1  # noqa: E731
        _append(acc, 0, b"v" * 25, now=0)
        _append(acc, 0, b"w" * 25, now=0)
        ready, _, _ = acc.ready(leader_for, now=1)
        (batch,) = acc.drain(ready, 1 << 20, now=1)[1]
        assert acc.ready(leader_for, now=2)[0] == {}  # muted while in flight
        acc.complete(batch, 0)
        assert acc.ready(leader_for, now=2)[0] == {1: [("t", 0)]}

    asyncio.run(main())


def test_accumulator_expires_batches_past_the_delivery_timeout() -> None:
    async def main() -> None:
        acc = RecordAccumulator(delivery_timeout_ms=1000)
        future = _append(acc, 0, b"v", now=0)
        assert acc.expire(now=999) == []
        (expired,) = acc.expire(now=1000)
        assert isinstance(future.exception(), KafkaTimeoutError)
        assert expired.done and not acc.incomplete

    asyncio.run(main())


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        Producer(acks=2)
    with pytest.raises(ValueError):
        Producer(compression_type="brotli")
    with pytest.raises(ValueError):
        Producer(enable_idempotence=True, acks=1)
    with pytest.raises(ValueError):
        Producer(delivery_timeout_ms=1000, request_timeout_ms=30000)
    assert Producer().idempotent
    assert not Producer(acks=1).idempotent
    assert not Producer(max_in_flight_requests_per_connection=6).idempotent


# ------------------------------------------------------------------ against a broker


@pytest.fixture(scope="module")
def broker() -> Iterator[testing.KlogBroker]:
    with testing.broker(overrides={"num.partitions": 4}) as b:
        yield b


def _read_confluent(bootstrap: str, topic: str, partitions: int, count: int) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "producer-tests",
                         "enable.auto.commit": False, "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[Any] = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


def _read_kafka_python(bootstrap: str, topic: str, partitions: int, count: int) -> list[Any]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000,
                             enable_auto_commit=False)
    tps = [KafkaTopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got: list[Any] = []
    try:
        for msg in consumer:
            got.append(msg)
            if len(got) >= count:
                break
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("codec", CODECS)
def test_records_are_read_back_by_confluent_and_kafka_python(
        broker: testing.KlogBroker, codec: str) -> None:
    topic = f"codec-{codec}"
    records = [
        (b"key-1", b"value-1", [("h1", b"x"), ("h2", None)]),
        (None, b"no key", []),
        (b"key-null-value", None, [("only", b"")]),
        (b"big", b"z" * 5000, []),
        (b"", b"", []),
    ]

    async def produce() -> list[RecordMetadata]:
        async with Producer(broker.bootstrap_servers, compression_type=codec,
                            linger_ms=20) as producer:
            futures = [await producer.send(topic, value, key=key, headers=headers, partition=0,
                                           timestamp_ms=1_700_000_000_000 + i)
                       for i, (key, value, headers) in enumerate(records)]
            await producer.flush()
            return [f.result() for f in futures]

    metadata = asyncio.run(produce())
    assert [m.offset for m in metadata] == [0, 1, 2, 3, 4]
    assert [m.timestamp for m in metadata] == [1_700_000_000_000 + i for i in range(5)]

    got = _read_confluent(broker.bootstrap_servers, topic, 1, len(records))
    assert [(m.key(), m.value(), m.headers() or []) for m in got] == [
        (k, v, h) for k, v, h in records]
    assert [m.timestamp()[1] for m in got] == [1_700_000_000_000 + i for i in range(5)]

    got = _read_kafka_python(broker.bootstrap_servers, topic, 1, len(records))
    assert [(m.key, m.value, list(m.headers)) for m in got] == [(k, v, h) for k, v, h in records]


def test_keyed_records_land_where_kafka_python_puts_them(broker: testing.KlogBroker) -> None:
    topic = "keyed"
    keys = [f"user-{i}".encode() for i in range(60)]

    async def produce() -> list[RecordMetadata]:
        async with Producer(broker.bootstrap_servers) as producer:
            futures = [await producer.send(topic, b"v", key=key) for key in keys]
            return list(await asyncio.gather(*futures))

    metadata = asyncio.run(produce())
    expected = [(kafka_python_murmur2(k) & 0x7FFFFFFF) % 4 for k in keys]
    assert [m.partition for m in metadata] == expected
    assert len(set(expected)) == 4
    got = _read_kafka_python(broker.bootstrap_servers, topic, 4, len(keys))
    assert sorted((m.key, m.partition) for m in got) == sorted(zip(keys, expected, strict=True))


def test_delivery_in_produce_order_with_callbacks(broker: testing.KlogBroker) -> None:
    topic = "ordered"
    seen: list[tuple[int, int]] = []

    async def produce() -> list[RecordMetadata]:
        async with Producer(broker.bootstrap_servers, batch_size=500, linger_ms=1) as producer:
            futures = []
            for i in range(300):
                futures.append(await producer.send(
                    topic, str(i).encode(), partition=1,
                    on_delivery=lambda m, e, i=i: seen.append((i, m.offset))))
            await producer.flush()
            assert producer.producer_id >= 0
            return [f.result() for f in futures]

    metadata = asyncio.run(produce())
    assert [m.offset for m in metadata] == list(range(300))
    assert seen == [(i, i) for i in range(300)]
    got = _read_confluent(broker.bootstrap_servers, topic, 4, 300)
    assert [m.value() for m in got] == [str(i).encode() for i in range(300)]


def test_send_nowait_delivers_through_callbacks_and_says_when_it_would_block(
        broker: testing.KlogBroker) -> None:
    topic = "nowait"
    seen: list[tuple[int, int, int]] = []

    async def produce() -> tuple[int, int]:
        async with Producer(broker.bootstrap_servers, batch_size=1500, linger_ms=1,
                            buffer_memory=3000) as producer:
            with pytest.raises(errors.WouldBlockError, match="metadata"):
                producer.send_nowait(topic, b"first")  # metadata for the topic not yet known
            await producer.partitions_for(topic)
            would_block = full = 0
            for i in range(400):
                def callback(m: Any, e: Any, i: int = i) -> None:
                    seen.append((i, m.partition, m.offset))

                value = str(i).encode() * 20
                # keyed, explicit-partition and plain records all go without waiting
                kwargs: dict[str, Any] = ({"key": b"k"} if i % 3 == 0 else
                                          {"partition": 2} if i % 3 == 1 else {})
                try:
                    if producer.send_nowait(topic, value, on_delivery=callback, **kwargs):
                        full += 1
                        await asyncio.sleep(0)
                except errors.WouldBlockError:
                    would_block += 1  # buffer memory (3 kB) is full: wait as send() does
                    await producer.send(topic, value, on_delivery=callback, **kwargs)
            await producer.flush()  # waits for records that have no future as well
            assert len(seen) == 400
            return would_block, full

    would_block, full = asyncio.run(produce())
    assert would_block > 0 and full > 0
    assert sorted(i for i, _, _ in seen) == list(range(400))
    # per partition, callbacks come in produce order with consecutive offsets
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for i, partition, offset in seen:
        by_partition.setdefault(partition, []).append((i, offset))
    for entries in by_partition.values():
        assert [i for i, _ in entries] == sorted(i for i, _ in entries)
        offsets = [o for _, o in entries]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    got = _read_confluent(broker.bootstrap_servers, topic, 4, 400)
    assert sorted(m.value() for m in got) == sorted(str(i).encode() * 20 for i in range(400))


def test_send_nowait_before_start_and_after_close() -> None:
    async def main() -> None:
        producer = Producer("127.0.0.1:1")
        with pytest.raises(errors.WouldBlockError, match="not started"):
            producer.send_nowait("t", b"v")
        await producer.close()
        with pytest.raises(errors.KafkaClientError, match="closed"):
            producer.send_nowait("t", b"v")

    asyncio.run(main())


def test_sticky_partitioning_fills_batches_and_spreads(broker: testing.KlogBroker) -> None:
    async def produce() -> list[RecordMetadata]:
        async with Producer(broker.bootstrap_servers, batch_size=2000, linger_ms=5) as producer:
            futures = [await producer.send("sticky", b"x" * 100) for _ in range(400)]
            return list(await asyncio.gather(*futures))

    metadata = asyncio.run(produce())
    # Consecutive records share a partition for a whole batch, and every partition is used.
    switches = sum(1 for a, b in itertools.pairwise(metadata)
                   if a.partition != b.partition)
    assert switches < 400 / 10
    assert {m.partition for m in metadata} == {0, 1, 2, 3}


def test_acks_zero_and_acks_one(broker: testing.KlogBroker) -> None:
    async def produce(acks: int) -> list[RecordMetadata]:
        async with Producer(broker.bootstrap_servers, acks=acks) as producer:
            futures = [await producer.send("acks", b"v", partition=2) for _ in range(5)]
            return list(await asyncio.gather(*futures))

    assert [m.offset for m in asyncio.run(produce(0))] == [-1] * 5
    one = asyncio.run(produce(1))
    assert [m.offset for m in one] == [5, 6, 7, 8, 9]


def test_unknown_partition_and_too_large_records_fail_fast(broker: testing.KlogBroker) -> None:
    async def main() -> None:
        async with Producer(broker.bootstrap_servers, max_block_ms=2000) as producer:
            with pytest.raises(KafkaClientError, match="partition 9"):
                await producer.send("limits", b"v", partition=9)
            with pytest.raises(KafkaClientError) as info:
                await producer.send("limits", b"v" * (2 << 20))
            assert info.value.error_code == 10  # MESSAGE_TOO_LARGE

    asyncio.run(main())


def test_sync_producer(broker: testing.KlogBroker) -> None:
    results: list[RecordMetadata] = []
    with SyncProducer(broker.bootstrap_servers, linger_ms=1) as producer:
        futures = [producer.send("sync", f"v{i}", key="k") for i in range(10)]
        producer.flush(10)
        results = [f.result(5) for f in futures]
        one = producer.send_and_wait("sync", b"last", partition=0)
        assert producer.partitions_for("sync") == [0, 1, 2, 3]
    assert len({m.partition for m in results}) == 1
    assert [m.offset for m in results] == list(range(results[0].offset,
                                                     results[0].offset + 10))
    assert one.partition == 0 and threading.active_count() < 20


# ------------------------------------------------------------------ a broker going away


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_order_and_no_duplicates_across_a_broker_restart(
        klog_broker_factory: Any, caplog: pytest.LogCaptureFixture, how: str) -> None:
    caplog.set_level(logging.DEBUG, logger="klog.client.sender")
    broker = klog_broker_factory()
    topic = "restart"
    count = 3000

    async def produce() -> list[RecordMetadata]:
        async with Producer(broker.bootstrap_servers, linger_ms=2, batch_size=2000,
                            retry_backoff_ms=50, request_timeout_ms=5000,
                            delivery_timeout_ms=60000) as producer:
            futures = []
            for i in range(count):
                futures.append(await producer.send(topic, str(i).encode(), partition=0))
                if i == count // 3:
                    await producer.flush()
                    # Stop the broker while records keep coming, then bring it back.
                    loop = asyncio.get_running_loop()
                    restart = loop.run_in_executor(None, _bounce, broker, how)
                if i % 50 == 0:
                    await asyncio.sleep(0.002)
            await restart
            await producer.flush(60)
            return [f.result() for f in futures]

    metadata = asyncio.run(produce())
    assert [m.offset for m in metadata] == list(range(count))
    got = _read_confluent(broker.bootstrap_servers, topic, 1, count)
    assert [m.value() for m in got] == [str(i).encode() for i in range(count)]
    # The restart did make batches fail and go again.
    assert any(r.getMessage().startswith("retrying") for r in caplog.records)


def _bounce(broker: testing.KlogBroker, how: str) -> None:
    time.sleep(0.05)
    # SIGTERM lets the broker answer what it has; SIGKILL leaves requests persisted but
    # unanswered, which the idempotent producer retries and the broker deduplicates.
    if how == "stop":
        broker.stop()
    else:
        broker.kill()
    time.sleep(1.0)
    broker.start()


def test_delivery_timeout_when_the_broker_stays_down(klog_broker_factory: Any) -> None:
    broker = klog_broker_factory()

    async def main() -> None:
        async with Producer(broker.bootstrap_servers, linger_ms=0, request_timeout_ms=500,
                            delivery_timeout_ms=1500, retry_backoff_ms=50) as producer:
            await producer.send_and_wait("down", b"first", partition=0)
            await asyncio.get_running_loop().run_in_executor(None, broker.stop)
            start = time.monotonic()
            future = await producer.send("down", b"lost", partition=0)
            with pytest.raises(KafkaTimeoutError):
                await asyncio.wait_for(future, 10)
            assert time.monotonic() - start < 5
            # The lost batch left a gap in the sequence: once the broker is back, the
            # producer carries on under a new producer id instead of being refused.
            first_id = producer.producer_id
            await asyncio.get_running_loop().run_in_executor(None, broker.start)
            after = await asyncio.wait_for(
                await producer.send("down", b"after", partition=0), 30)
            assert after.offset == 1
            assert producer.producer_id not in (-1, first_id)

    asyncio.run(main())


def test_a_sequence_reset_renumbers_built_batches() -> None:
    async def main() -> None:
        acc = RecordAccumulator(batch_size=30, linger_ms=0, idempotent=True)
        for _ in range(2):
            _append(acc, 0, b"v" * 25, now=0)
        (b0,) = acc.drain({1: [("t", 0)]}, 1 << 20, now=1, producer_id=5, producer_epoch=0)[1]
        (b1,) = acc.drain({1: [("t", 0)]}, 1 << 20, now=1, producer_id=5, producer_epoch=0)[1]
        acc.reenqueue(b1, now=2)  # b1 built with sequence 1, waiting for a retry
        acc.fail(b0, KafkaClientError("gone"))
        assert acc.needs_sequence_reset
        acc.reset_sequences()
        (again,) = acc.drain({1: [("t", 0)]}, 1 << 20, now=500, producer_id=9,
                             producer_epoch=0)[1]
        assert again is b1 and b1.base_sequence == 0
        header = read_batch_header(b1.payload, 0)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 0, 0)
        header.ensure_valid(b1.payload)  # the CRC covers them and was recomputed

    asyncio.run(main())


def test_a_sequence_reset_waits_for_requests_written_at_once() -> None:
    """A batch failed for good while another was in flight in a request written at once
    (the fast path, which has no task in ``Sender._requests``): the sender waited for no
    task, reset the sequences under the in-flight batch and died on the accumulator's
    assertion, failing every record after it (found by the chaos harness, seed 2 of
    ``python -m tests.chaos --nemeses kill``)."""
    from klog.client.sender import Sender

    async def main() -> None:
        acc = RecordAccumulator(batch_size=30, linger_ms=0, idempotent=True)
        for partition in (0, 1):
            _append(acc, partition, b"v" * 25, now=0)
        drained = acc.drain({1: [("t", 0), ("t", 1)]}, 1 << 20, now=1, producer_id=5,
                            producer_epoch=0)[1]
        failed, in_flight = sorted(drained, key=lambda b: b.partition)
        sender = Sender(None, acc, acks=-1, retries=5,  # type: ignore[arg-type]
                        request_timeout_ms=1000, max_in_flight=5, max_request_size=1 << 20,
                        retry_backoff_ms=1, idempotent=True)
        sender.producer_id, sender.producer_epoch = 5, 0
        acc.fail(failed, KafkaClientError("gone"))
        assert acc.needs_sequence_reset and acc.has_in_flight()
        # Waits: the other batch is still in flight.
        await asyncio.wait_for(sender._run_once(), 5)
        assert acc.needs_sequence_reset and sender.producer_id == 5
        acc.complete(in_flight, 0)
        sender.wakeup()  # nothing is left to send: the sender would sleep until woken
        await asyncio.wait_for(sender._run_once(), 5)
        assert not acc.needs_sequence_reset and sender.producer_id == -1

    asyncio.run(main())


def test_a_sequence_reset_keeps_the_retries_of_other_partitions_as_they_were_sent() -> None:
    """A batch of one partition failed for good; another partition's batch, sent and
    waiting for a retry (its first attempt may be written, the answer lost), keeps its
    producer id and sequence so the broker can recognise it, and that partition's new
    batches wait for it. Renumbered under the new producer id, it was written twice: the
    chaos harness found such duplicates after kill -9 of every broker (seed 3)."""
    async def main() -> None:
        acc = RecordAccumulator(batch_size=30, linger_ms=0, idempotent=True)
        for partition in (0, 1):
            _append(acc, partition, b"v" * 25, now=0)
        drained = acc.drain({1: [("t", 0), ("t", 1)]}, 1 << 20, now=1, producer_id=5,
                            producer_epoch=0)[1]
        failed, retried = sorted(drained, key=lambda b: b.partition)
        acc.reenqueue(retried, now=2)       # connection lost: outcome unknown
        acc.fail(failed, KafkaClientError("gone"))
        fresh = _append(acc, 1, b"w" * 25, now=3)
        acc.reset_sequences()
        (again,) = acc.drain({1: [("t", 1)]}, 1 << 20, now=500, producer_id=9,
                             producer_epoch=0)[1]
        assert again is retried
        header = read_batch_header(retried.payload, 0)
        assert (header.producer_id, header.base_sequence) == (5, 0)  # as first sent
        # The new batch does not overtake the one sent under the old producer id.
        assert acc.drain({1: [("t", 1)]}, 1 << 20, now=501, producer_id=9,
                         producer_epoch=0) == {}
        acc.complete(retried, 0)
        (new,) = acc.drain({1: [("t", 1)]}, 1 << 20, now=502, producer_id=9,
                           producer_epoch=0)[1]
        assert new.records[0][0] is fresh
        header = read_batch_header(new.payload, 0)
        assert (header.producer_id, header.base_sequence) == (9, 0)

    asyncio.run(main())


def test_a_leader_gone_from_the_metadata_before_connecting_is_retried() -> None:
    """Batches drained for a leader that then left the metadata (the connection attempt
    says BROKER_NOT_AVAILABLE): nothing was sent, so they wait for the new leader. They
    failed for good (24 records of the chaos harness's long run, seed 2929)."""
    from klog.client.sender import Sender

    class NoSuchBroker:
        def __init__(self) -> None:
            self.refreshes = 0

        async def connect_to(self, node: int) -> None:
            raise KafkaClientError(f"broker {node} is not in the cluster metadata",
                                   ErrorCode.BROKER_NOT_AVAILABLE)

        def request_metadata_refresh(self) -> None:
            self.refreshes += 1

    async def main() -> None:
        from klog.client.accumulator import now_ms

        acc = RecordAccumulator(batch_size=30, linger_ms=0, idempotent=True)
        start = now_ms()  # the retry is decided on the clock: within delivery.timeout.ms
        _append(acc, 0, b"v" * 25, now=start)
        (batch,) = acc.drain({3: [("t", 0)]}, 1 << 20, now=start + 1, producer_id=5,
                             producer_epoch=0)[3]
        client = NoSuchBroker()
        sender = Sender(client, acc, acks=-1, retries=5,  # type: ignore[arg-type]
                        request_timeout_ms=1000, max_in_flight=5, max_request_size=1 << 20,
                        retry_backoff_ms=1, idempotent=True)
        sender._in_flight_requests[3] = 1
        await sender._produce(3, [batch])
        assert not batch.done and batch.attempts == 1
        assert client.refreshes >= 1

    asyncio.run(main())


def test_a_leader_missing_from_the_brokers_is_no_leader() -> None:
    """A partial metadata update can leave a partition's leader that the latest response
    no longer lists; producing to it failed for good (BROKER_NOT_AVAILABLE) instead of
    waiting for metadata, and the failure reset the producer's sequences (chaos seed 3)."""
    from klog.client.network import BrokerMeta, ClusterMetadata, PartitionMeta

    cluster = ClusterMetadata(brokers={1: BrokerMeta(1, "h", 1)},
                              topics={"t": {0: PartitionMeta("t", 0, 1, 0, (1, 3), (1, 3), 0),
                                            1: PartitionMeta("t", 1, 3, 0, (3, 1), (3, 1), 0)}})
    assert cluster.leader_for("t", 0) == 1
    assert cluster.leader_for("t", 1) is None
