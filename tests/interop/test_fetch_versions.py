"""Which Fetch version real clients negotiate with klog, now that it serves Kafka 3.9's
v0-v17 (v13+ name topics by id), and that each still reads every record at it.

The version a client used is read from the broker's own request metrics
(``kafka_network_requestmetrics_requests_total{request="FetchConsumer",version=...}`` on
/metrics), not inferred from the client consuming: a client that fell back to v12 would
consume just as well.
"""

from __future__ import annotations

import asyncio
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka as ck
import pytest
from prometheus_client.parser import text_string_to_metric_families

from klog.client.consumer import Consumer
from klog.protocol import apis
from tests.daemon.wire import InProcessBroker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    from kafka.protocol.broker_version_data import BrokerVersionData

pytestmark = pytest.mark.timeout(120)

COUNT = 20
FETCH = 1


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    data = tmp_path_factory.mktemp("fetch-versions")
    b = InProcessBroker(Path(data), {"metrics.http.listener": "127.0.0.1:0",
                                     "num.partitions": 2}).start()
    try:
        yield b
    finally:
        b.stop()


def _fetch_versions(broker: InProcessBroker) -> dict[int, float]:
    """Consumer Fetch requests the broker has served so far, by version."""
    bound = broker.broker.metrics.bound
    assert bound is not None
    with urllib.request.urlopen(f"http://127.0.0.1:{bound[1]}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "kafka_network_requestmetrics_requests_total" \
                    and s.labels.get("request") == "FetchConsumer":
                out[int(s.labels["version"])] = s.value
    return out


def _new_fetches(before: dict[int, float], after: dict[int, float]) -> set[int]:
    return {v for v, n in after.items() if n > before.get(v, 0)}


def _produce(broker: InProcessBroker, topic: str) -> list[bytes]:
    values = [b"%s-%03d" % (topic.encode(), i) for i in range(COUNT)]
    producer = ck.Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "linger.ms": 5})
    for i, v in enumerate(values):
        producer.produce(topic, v, key=b"k%d" % i, partition=i % 2)
    assert producer.flush(20) == 0
    return values


def test_advertised_fetch_range_is_kafka_3_9s() -> None:
    assert apis.ADVERTISED[FETCH] == (0, 17)


def test_librdkafka_fetches_with_topic_ids(broker: InProcessBroker) -> None:
    topic = "fv-librdkafka"
    values = _produce(broker, topic)
    before = _fetch_versions(broker)
    consumer = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{broker.port}",
                            "group.id": "fv-rd", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(200):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == COUNT:
                break
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)
    used = _new_fetches(before, _fetch_versions(broker))
    # librdkafka 2.x speaks Fetch v13+ (topic ids) when the broker does
    assert used and min(used) >= 13, used


def test_klog_consumer_fetches_at_v17_by_topic_id(broker: InProcessBroker) -> None:
    topic = "fv-klog"
    values = _produce(broker, topic)
    before = _fetch_versions(broker)

    async def consume() -> list[bytes]:
        out: list[bytes] = []
        async with Consumer(f"127.0.0.1:{broker.port}", group_id="fv-klog",
                            auto_offset_reset="earliest",
                            enable_auto_commit=False) as consumer:
            consumer.subscribe([topic])
            while len(out) < COUNT:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                out.extend(r.value for records in batch.values() for r in records)
        return out

    got = asyncio.run(consume())
    assert sorted(got) == sorted(values)
    assert _new_fetches(before, _fetch_versions(broker)) == {17}


def test_kafka_python_infers_3_9_and_consumes(broker: InProcessBroker) -> None:
    topic = "fv-kafka-python"
    values = _produce(broker, topic)
    before = _fetch_versions(broker)
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=f"127.0.0.1:{broker.port}",
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   group_id=None, api_version=None,
                                   consumer_timeout_ms=20_000)
    try:
        # kafka-python infers the broker's release from ApiVersions: Fetch v17 is 3.9's
        assert consumer.config["api_version"] == (3, 9)
        got = []
        for record in consumer:
            got.append(record.value)
            if len(got) == COUNT:
                break
    finally:
        consumer.close()
    assert sorted(got) == sorted(values)
    # kafka-python 3.0 caps its own Fetch at v12 (its fetcher: "TODO v13 topic ids")
    assert _new_fetches(before, _fetch_versions(broker)) == {12}
    assert BrokerVersionData  # imported: the module whose table maps Fetch v17 to 3.9


def test_aiokafka_consumes(broker: InProcessBroker) -> None:
    from aiokafka import AIOKafkaConsumer

    topic = "fv-aiokafka"
    values = _produce(broker, topic)
    before = _fetch_versions(broker)

    async def consume() -> list[bytes]:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=f"127.0.0.1:{broker.port}",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        out: list[bytes] = []
        try:
            while len(out) < COUNT:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                out.extend(r.value for records in batch.values() for r in records)
        finally:
            await consumer.stop()
        return out

    got = asyncio.run(consume())
    assert sorted(got) == sorted(values)
    used = _new_fetches(before, _fetch_versions(broker))
    # aiokafka 0.14's newest Fetch is v11 (names): the wider range klog advertises
    # changes nothing for it
    assert used and max(used) <= 12, used
