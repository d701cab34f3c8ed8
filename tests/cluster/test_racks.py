"""Racks on three real brokers (one rack each) over ZooKeeper: replica placement with
racks, the replicas' racks in ``klog topic describe``, and follower fetching (KIP-392):
with replica.selector.class set, librdkafka (confluent-kafka with client.rack) and klog's
own consumer (client_rack) read from the follower in their rack -- counted from each
broker's metrics endpoint: the bytes each broker served to consumers
(kafka_server_brokertopicmetrics_bytesout_total) and its consumer fetch requests
(kafka_network_requestmetrics_requests_total{request="FetchConsumer"})."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request
from collections.abc import Callable

import confluent_kafka as ck
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from klog.cli.app import app
from klog.client.consumer import Consumer, TopicPartition
from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.timeout(300)

RACKS = {1: "rack-a", 2: "rack-b", 3: "rack-c"}
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
TOPIC = "racked"
RECORDS = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


class Served:
    """What each broker served consumers, from its metrics endpoint."""

    def __init__(self, ports: dict[int, int]) -> None:
        self.ports = ports

    def bytes_out(self) -> dict[int, float]:
        key = ("kafka_server_brokertopicmetrics_bytesout_total",
               frozenset({("topic", TOPIC)}))
        return {b: _scrape(p).get(key, 0.0) for b, p in self.ports.items()}

    def consumer_fetches(self) -> dict[int, float]:
        out = {}
        for b, p in self.ports.items():
            got = _scrape(p)
            out[b] = sum(v for (name, labels), v in got.items()
                         if name == "kafka_network_requestmetrics_requests_total"
                         and ("request", "FetchConsumer") in labels)
        return out


def _racked_cluster(cluster: Callable[..., Cluster]) -> tuple[Cluster, Served]:
    ports = {b: _free_port() for b in RACKS}
    c = cluster(3, overrides={"replica.selector.class": SELECTOR},
                per_broker={b: {"broker.rack": rack, "metrics.http.listener":
                                f"127.0.0.1:{ports[b]}"} for b, rack in RACKS.items()})
    return c, Served(ports)


def _produce(c: Cluster, start: int, count: int) -> None:
    producer = ck.Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
    for i in range(start, start + count):
        producer.produce(TOPIC, b"value-%06d" % i + b"x" * 200, partition=0)
    assert producer.flush(30) == 0


def _diff(after: dict[int, float], before: dict[int, float]) -> dict[int, float]:
    return {b: after[b] - before.get(b, 0.0) for b in after}


def _settled(served: Served) -> dict[int, float]:
    """Bytes out once no fetch of an earlier consumer is still waiting on a broker (a long
    poll parked before that consumer closed is answered, and counted, when records come)."""
    before = served.bytes_out()
    while True:
        time.sleep(1.0)
        now = served.bytes_out()
        if now == before:
            return now
        before = now


def _confluent_read(c: Cluster, rack: str, count: int) -> list[bytes]:
    consumer = ck.Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": f"g-{rack}",
                            "client.rack": rack, "enable.auto.commit": False,
                            "auto.offset.reset": "earliest"})
    try:
        consumer.assign([ck.TopicPartition(TOPIC, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < count and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=1.0):
                assert msg.error() is None, msg.error()
                values.append(msg.value())
        return values
    finally:
        consumer.close()


def _klog_read(c: Cluster, rack: str, count: int) -> list[bytes]:
    async def read() -> list[bytes]:
        async with Consumer(c.bootstrap_servers, client_rack=rack,
                            auto_offset_reset="earliest") as consumer:
            tp = TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            values: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(values) < count and time.monotonic() < deadline:
                got = await consumer.getmany(timeout_ms=1000)
                values += [r.value or b"" for r in got.get(tp, [])]
            return values

    return asyncio.run(read())


def test_consumers_read_from_the_follower_in_their_rack(
        cluster: Callable[..., Cluster]) -> None:
    c, served = _racked_cluster(cluster)
    c.create_topic(TOPIC, partitions=1, replication_factor=3)
    c.wait_for_isr(TOPIC, 0, [1, 2, 3])
    leader = c.leader(TOPIC, 0)
    followers = [b for b in RACKS if b != leader]
    _produce(c, 0, RECORDS)
    expected = [b"value-%06d" % i + b"x" * 200 for i in range(RECORDS)]

    # librdkafka in the first follower's rack: every record, all of it served by that
    # follower; the leader only named it (no record bytes).
    before = served.bytes_out()
    fetches_before = served.consumer_fetches()
    assert _confluent_read(c, RACKS[followers[0]], RECORDS) == expected
    moved = _diff(served.bytes_out(), before)
    assert moved[followers[0]] >= RECORDS * 200, moved
    assert moved[leader] == 0 and moved[followers[1]] == 0, moved
    fetches = _diff(served.consumer_fetches(), fetches_before)
    assert fetches[followers[0]] > 0 and fetches[leader] > 0, fetches

    # klog's consumer in the other follower's rack, records produced meanwhile included.
    _produce(c, RECORDS, 50)
    expected += [b"value-%06d" % i + b"x" * 200 for i in range(RECORDS, RECORDS + 50)]
    before = _settled(served)
    assert _klog_read(c, RACKS[followers[1]], RECORDS + 50) == expected
    moved = _diff(served.bytes_out(), before)
    assert moved[followers[1]] >= (RECORDS + 50) * 200, moved
    assert moved[leader] == 0 and moved[followers[0]] == 0, moved

    # In the leader's rack, or without a rack: the leader serves.
    before = _settled(served)
    assert _confluent_read(c, RACKS[leader], RECORDS + 50) == expected
    moved = _diff(served.bytes_out(), before)
    assert moved[leader] >= (RECORDS + 50) * 200 and sum(moved.values()) == moved[leader]


def test_a_stopped_follower_sends_its_rack_back_to_the_leader(
        cluster: Callable[..., Cluster]) -> None:
    c, served = _racked_cluster(cluster)
    c.create_topic(TOPIC, partitions=1, replication_factor=3)
    c.wait_for_isr(TOPIC, 0, [1, 2, 3])
    leader = c.leader(TOPIC, 0)
    follower = next(b for b in RACKS if b != leader)
    _produce(c, 0, 100)

    async def read() -> None:
        async with Consumer(c.bootstrap_servers, client_rack=RACKS[follower],
                            auto_offset_reset="earliest", request_timeout_ms=5000,
                            metadata_max_age_ms=2000) as consumer:
            tp = TopicPartition(TOPIC, 0)
            consumer.assign([tp])
            got = 0
            while got < 100:
                got += len((await consumer.getmany(timeout_ms=1000)).get(tp, []))
            c.stop(follower)
            await asyncio.to_thread(c.wait, lambda: follower not in c.partition_state(
                TOPIC, 0).isr, 30, f"broker {follower} out of the ISR")
            before = await asyncio.to_thread(served.bytes_out)
            await asyncio.to_thread(_produce, c, 100, 50)
            deadline = time.monotonic() + 60
            while got < 150 and time.monotonic() < deadline:
                got += len((await consumer.getmany(timeout_ms=1000)).get(tp, []))
            assert got == 150
            after = await asyncio.to_thread(served.bytes_out)
            assert after[leader] >= before[leader] + 50 * 200

    served.ports.pop(follower)  # not scraped once stopped
    asyncio.run(read())


def test_placement_and_describe_show_racks(cluster: Callable[..., Cluster]) -> None:
    c, _served = _racked_cluster(cluster)
    c.create_topic("spread", partitions=6, replication_factor=2)
    result = CliRunner().invoke(app, ["topic", "describe", "spread", "--json",
                                      "--bootstrap-server", c.bootstrap_servers])
    assert result.exit_code == 0, result.output
    details = json.loads(result.output)["partition_details"]
    for p in details:
        assert p["replica_racks"] == [RACKS[r] for r in p["replicas"]]
        assert len(set(p["replica_racks"])) == 2
    # Leaders spread over the racks, as Kafka's rack-aware round-robin does.
    assert sorted(p["leader"] for p in details) == [1, 1, 2, 2, 3, 3]
    table = CliRunner().invoke(app, ["topic", "describe", "spread", "--partitions",
                                     "--bootstrap-server", c.bootstrap_servers])
    assert table.exit_code == 0 and "RACKS" in table.output and "rack-b" in table.output
