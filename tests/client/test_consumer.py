"""klog.client.consumer against a real klog broker, with records written by real clients."""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from klog.client.consumer import Consumer, NoOffsetForPartitionError, TopicPartition
from klog.protocol.errors import ErrorCode, OffsetOutOfRangeError
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
    # the codec really was used on the wire and in the log
    from tests.interop.conftest import stored_batches

    batches = stored_batches(broker.log_dir, topic)
    assert codec in {h.compression.kafka_name for h in batches}
    # librdkafka sends a batch uncompressed when compressing did not make it smaller: a
    # batch of a few of these short records, cut off by linger.ms when producing was slow
    # (CI failed on one such batch). Measured over every window of these records: some
    # batches of up to 3 do not shrink with one codec or another, none of 4 or more.
    others = [h for h in batches if h.compression.kafka_name != codec]
    assert all(h.compression.kafka_name == "none" and (h.records_count or 0) <= 3
               for h in others), [(h.compression.kafka_name, h.records_count) for h in others]
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


# --- the fetcher's protocol handling, against a scripted client (no network) -------------


class _Cluster:
    def __init__(self, leaders: dict[tuple[str, int], int | None]) -> None:
        self.leaders = leaders
        self.brokers: dict[int, Any] = {1: None, 2: None, 3: None}

    def leader_for(self, topic: str, partition: int) -> int | None:
        return self.leaders.get((topic, partition))

    def partitions_for(self, topic: str) -> list[int] | None:
        parts = sorted(p for t, p in self.leaders if t == topic)
        return parts or None


class _ScriptedClient:
    """Stands in for KafkaClient: answers from ``fetch`` / ``list_offsets`` callables."""

    def __init__(self, leaders: dict[tuple[str, int], int | None]) -> None:
        self.cluster = _Cluster(leaders)
        self.sent: list[tuple[int, int, dict[str, Any]]] = []
        self.refreshes = 0
        self.on_refresh: Any = None
        self.fetch: Any = None
        self.log_end = 100

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def refresh_metadata(self, topics: Any = None, **kw: Any) -> Any:
        self.refreshes += 1
        if self.on_refresh is not None:
            self.on_refresh()
        return self.cluster

    def api_version(self, node: int, api_key: int, max_version: int | None = None) -> int:
        return 12  # the scripted fetch answers name their topics

    async def send(self, node: int, api_key: int, values: dict[str, Any], **kw: Any) -> Any:
        self.sent.append((node, api_key, values))
        if api_key == 2:
            return _ns(topics=[_ns(name=t["name"], partitions=[
                _ns(partition_index=p["partition_index"], error_code=0, timestamp=-1,
                    offset=0 if p["timestamp"] == -2 else self.log_end, leader_epoch=0)
                for p in t["partitions"]]) for t in values["topics"]])
        result = self.fetch(node, values)
        if asyncio.iscoroutine(result):
            result = await result
        return result

    def fetches(self, node: int | None = None) -> list[tuple[int, dict[str, Any]]]:
        return [(n, v) for n, k, v in self.sent if k == 1 and (node is None or n == node)]


def _ns(**kw: Any) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(**kw)


def _fetch_response(parts: dict[tuple[str, int], tuple[int, bytes | None]],
                    preferred: int = -1) -> Any:
    topics: dict[str, list[Any]] = {}
    for (t, p), (code, records) in parts.items():
        topics.setdefault(t, []).append(_ns(
            partition_index=p, error_code=code, high_watermark=100, last_stable_offset=100,
            log_start_offset=0, aborted_transactions=None, records=records,
            preferred_read_replica=preferred))
    return _ns(error_code=0, responses=[_ns(topic=t, partitions=ps) for t, ps in topics.items()])


def _batch(base: int, n: int) -> bytes:
    from klog.protocol.records.v2 import BatchBuilder

    b = BatchBuilder(base_offset=base)
    for i in range(n):
        b.append(1000 + base + i, None, f"v{base + i}".encode())
    return b.build()


def _requested(values: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {(t["topic"], p["partition"]): p["fetch_offset"]
            for t in values["topics"] for p in t["partitions"]}


def _answer_from_log(values: dict[str, Any]) -> Any:
    return _fetch_response({tp: (0, _batch(off, 5) if off < 100 else b"")
                            for tp, off in _requested(values).items()})


async def _scripted_consumer(client: _ScriptedClient, **kw: Any) -> Consumer:
    consumer = Consumer(client=client, retry_backoff_ms=10, fetch_max_wait_ms=10,  # type: ignore[arg-type]
                        auto_offset_reset="earliest", **kw)
    await consumer.start()
    return consumer


def test_not_leader_refreshes_metadata_and_follows_the_new_leader() -> None:
    client = _ScriptedClient({("t", 0): 1})

    def fetch(node: int, values: dict[str, Any]) -> Any:
        if node == 1:
            return _fetch_response({tp: (6, None) for tp in _requested(values)})
        return _answer_from_log(values)

    client.fetch = fetch
    client.on_refresh = lambda: client.cluster.leaders.update({("t", 0): 2})

    async def main() -> None:
        consumer = await _scripted_consumer(client)
        consumer.assign([("t", 0)])
        got = await consumer.getmany(timeout_ms=5000)
        assert [r.offset for r in got[TopicPartition("t", 0)]] == [0, 1, 2, 3, 4]
        assert client.refreshes >= 1
        assert client.fetches(1) and client.fetches(2)
        await consumer.close()

    _run(main())


@pytest.mark.parametrize("failure", ["unknown_topic", "leaderless", "connection"])
def test_transient_failures_are_retried(failure: str) -> None:
    from klog.client.errors import KafkaConnectionError

    client = _ScriptedClient({("t", 0): 1 if failure != "leaderless" else None})
    calls = {"n": 0}

    def fetch(node: int, values: dict[str, Any]) -> Any:
        calls["n"] += 1
        if calls["n"] <= 2:
            if failure == "connection":
                raise KafkaConnectionError("connection reset")
            return _fetch_response({tp: (3, None) for tp in _requested(values)})
        return _answer_from_log(values)

    client.fetch = fetch
    if failure == "leaderless":
        def appear() -> None:
            if client.refreshes >= 3:
                client.cluster.leaders[("t", 0)] = 1
        client.on_refresh = appear

    async def main() -> None:
        consumer = await _scripted_consumer(client)
        consumer.assign([("t", 0)])
        got = await consumer.getmany(timeout_ms=5000)
        assert [r.offset for r in got[TopicPartition("t", 0)]] == [0, 1, 2, 3, 4]
        assert client.refreshes >= (3 if failure == "leaderless" else 1)
        await consumer.close()

    _run(main())


def test_prefetch_one_fetch_per_leader_and_stale_answers_dropped() -> None:
    client = _ScriptedClient({("t", 0): 1, ("t", 1): 1})
    in_flight = {"now": 0, "max": 0}
    hold = asyncio.Event()

    async def fetch(node: int, values: dict[str, Any]) -> Any:
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
        try:
            if _requested(values).get(("t", 0)) == 50:
                await hold.wait()  # held until the test has sought elsewhere
            return _answer_from_log(values)
        finally:
            in_flight["now"] -= 1

    client.fetch = fetch

    async def main() -> None:
        consumer = await _scripted_consumer(client)
        tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
        consumer.assign([tp0, tp1])
        got: dict[TopicPartition, list[int]] = {tp0: [], tp1: []}
        while len(got[tp0]) < 10 or len(got[tp1]) < 10:
            batch = await consumer.getmany(timeout_ms=5000)
            for tp, records in batch.items():
                got[tp] += [r.offset for r in records]
        assert got[tp0][:10] == list(range(10)) and got[tp1][:10] == list(range(10))
        assert in_flight["max"] == 1  # both partitions share leader 1: one Fetch at a time
        # Prefetch: once records are handed out, the next Fetch goes out without a poll.
        before = len(client.fetches())
        await asyncio.sleep(0.2)
        assert len(client.fetches()) > before
        # A seek while a Fetch is in flight: its answer is for the old position, dropped.
        consumer.pause(tp1)
        consumer.seek(tp0, 50)
        await asyncio.sleep(0.1)
        assert _requested(client.fetches()[-1][1]) == {("t", 0): 50}
        consumer.seek(tp0, 80)
        hold.set()
        batch = await consumer.getmany(tp0, timeout_ms=5000)
        assert batch[tp0][0].offset == 80
        await consumer.close()

    _run(main())


def test_fetch_request_values() -> None:
    client = _ScriptedClient({("t", 0): 1})
    client.fetch = lambda node, values: _answer_from_log(values)

    async def main() -> None:
        consumer = await _scripted_consumer(client, isolation_level="read_committed",
                                            fetch_min_bytes=7, fetch_max_bytes=1000,
                                            max_partition_fetch_bytes=300)
        consumer.assign([("t", 0)])
        consumer.seek(("t", 0), 42)
        await consumer.getmany(timeout_ms=5000)
        _node, values = client.fetches()[0]
        assert values["isolation_level"] == 1 and values["min_bytes"] == 7
        assert values["max_bytes"] == 1000 and values["replica_id"] == -1
        assert values["topics"][0]["partitions"][0]["partition_max_bytes"] == 300
        assert values["topics"][0]["partitions"][0]["fetch_offset"] == 42
        await consumer.close()

    _run(main())


def test_client_rack_follows_the_preferred_read_replica_kip_392() -> None:
    client = _ScriptedClient({("t", 0): 1})
    follower_out_of_range = {"once": True}

    def fetch(node: int, values: dict[str, Any]) -> Any:
        assert values["rack_id"] == "rack-c"
        offsets = _requested(values)
        if node == 1 and offsets[("t", 0)] in (0, 10):
            # The leader names broker 3 (no records) ...
            return _fetch_response({tp: (0, b"") for tp in offsets}, preferred=3)
        if node == 3 and offsets[("t", 0)] == 10 and follower_out_of_range.pop("once", None):
            # ... whose offset out of range sends the partition back to the leader,
            # without a reset of the position.
            return _fetch_response({tp: (int(ErrorCode.OFFSET_OUT_OF_RANGE), None)
                                    for tp in offsets})
        return _answer_from_log(values)

    client.fetch = fetch

    async def main() -> None:
        consumer = await _scripted_consumer(client, client_rack="rack-c")
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        offsets: list[int] = []
        while len(offsets) < 15:
            got = await consumer.getmany(timeout_ms=5000)
            offsets += [r.offset for r in got.get(tp, [])]
        assert offsets[:15] == list(range(15))
        nodes = [n for n, _v in client.fetches()]
        assert nodes[:2] == [1, 3]  # named by the leader, then read from the follower
        at_ten = [n for n, v in client.fetches() if _requested(v)[("t", 0)] == 10]
        assert at_ten[:3] == [3, 1, 3]  # out of range there: the leader, which names it again
        await consumer.close()

    _run(main())


def test_a_preferred_replica_gone_from_the_metadata_is_dropped() -> None:
    client = _ScriptedClient({("t", 0): 1})

    def fetch(node: int, values: dict[str, Any]) -> Any:
        offsets = _requested(values)
        if node == 1 and 3 in client.cluster.brokers:
            client.cluster.brokers.pop(3)  # broker 3 leaves the cluster meanwhile
            return _fetch_response({tp: (0, b"") for tp in offsets}, preferred=3)
        return _answer_from_log(values)

    client.fetch = fetch

    async def main() -> None:
        consumer = await _scripted_consumer(client, client_rack="rack-c")
        consumer.assign([("t", 0)])
        got = await consumer.getmany(timeout_ms=5000)
        assert [r.offset for r in got[TopicPartition("t", 0)]] == [0, 1, 2, 3, 4]
        assert {n for n, _v in client.fetches()} == {1}
        await consumer.close()

    _run(main())


# --- data Apache Kafka 2.x wrote, served by a klog broker --------------------------------

CORPUS_COUNTS = {("first_topic", 0): 11, ("first_topic", 1): 12, ("first_topic", 2): 18,
                 ("new_topic", 0): 2, ("__consumer_offsets", 12): 470,
                 ("__consumer_offsets", 18): 499}


def test_reads_what_kafka_wrote_as_kafka_python_does(kafka_corpus: Any, tmp_path: Any) -> None:
    import os
    import shutil

    log_dir = tmp_path / "kafka-logs"
    shutil.copytree(kafka_corpus, log_dir, copy_function=shutil.copyfile)
    for root, dirs, files in os.walk(log_dir):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o700)
        for name in files:
            os.chmod(os.path.join(root, name), 0o600)
    os.chmod(log_dir, 0o700)
    with KlogBroker(tmp_path / "data", overrides={"log.dirs": str(log_dir)}) as running:
        bootstrap = running.bootstrap_servers
        tps = [TopicPartition(t, p) for t, p in CORPUS_COUNTS]

        async def ours() -> dict[TopicPartition, list[Any]]:
            async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
                consumer.assign(tps)
                assert await consumer.end_offsets(tps) == {
                    tp: CORPUS_COUNTS[tp] for tp in tps}
                got: dict[TopicPartition, list[Any]] = {tp: [] for tp in tps}
                deadline = time.monotonic() + 20
                while any(len(got[tp]) < CORPUS_COUNTS[tp] for tp in tps):
                    assert time.monotonic() < deadline
                    for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                        got[tp] += records
                return got

        got = _run(ours())
        theirs = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                     enable_auto_commit=False, request_timeout_ms=10_000,
                                     auto_offset_reset="earliest")
        try:
            theirs.assign([kafka.TopicPartition(t, p) for t, p in tps])
            expected: dict[TopicPartition, list[Any]] = {tp: [] for tp in tps}
            deadline = time.monotonic() + 20
            while any(len(expected[tp]) < CORPUS_COUNTS[tp] for tp in tps):
                assert time.monotonic() < deadline
                for ktp, msgs in theirs.poll(timeout_ms=500).items():
                    expected[TopicPartition(ktp.topic, ktp.partition)] += msgs
        finally:
            theirs.close()
    for tp in tps:
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got[tp]] == [
            (m.offset, m.timestamp, m.key, m.value, list(m.headers)) for m in expected[tp]], tp
