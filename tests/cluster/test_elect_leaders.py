"""Preferred leader election across real broker processes on a real ZooKeeper, while an
acks=all idempotent producer runs: after a broker restart its partitions are led by
others; `klog elect-leaders`, the /admin/preferred_replica_election znode (Kafka 2.x
tooling) and auto.leader.rebalance.enable each put leadership back on the preferred
replicas, and every acknowledged message is consumed exactly once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.daemon.metastore import paths
from tests.cluster.conftest import Cluster, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(240)

TOPIC = "elect"
PARTITIONS = 3


def preferred(c: Cluster, topic: str = TOPIC) -> dict[int, int]:
    data, _ = c.store.get(paths.topic_path(topic))
    assignment = paths.TopicAssignment.decode(data, topic)
    return {p: ra.replicas[0] for p, ra in assignment.partitions.items()}


def leaders(c: Cluster, topic: str = TOPIC) -> dict[int, int]:
    return {p: c.leader(topic, p) for p in range(PARTITIONS)}


class Load:
    """An acks=all idempotent producer over every partition, produced in steps."""

    def __init__(self, c: Cluster) -> None:
        self.acked: list[tuple[int, bytes]] = []
        self.failed: list[str] = []
        self.sent = 0
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": c.bootstrap_servers, "acks": "all",
            "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000,
            "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
        })

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.append((msg.partition(), msg.value()))
        else:
            self.failed.append(str(err))

    def run(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(30):
                self.producer.produce(TOPIC, value=b"m-%07d" % self.sent,
                                      partition=self.sent % PARTITIONS,
                                      on_delivery=self._delivered)
                self.sent += 1
            self.producer.poll(0.02)

    def run_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {what}")
            self.run(0.3)

    def check(self, c: Cluster) -> None:
        assert self.producer.flush(60) == 0
        assert not self.failed, self.failed[:5]
        assert len(self.acked) == self.sent > 300
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": c.bootstrap_servers, "group.id": f"chk-{time.monotonic_ns()}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            got: dict[int, list[bytes]] = {}
            for p in range(PARTITIONS):
                tp = confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
                _low, high = consumer.get_watermark_offsets(tp, timeout=10)
                consumer.assign([tp])
                values: list[bytes] = []
                deadline = time.monotonic() + 30
                while len(values) < high and time.monotonic() < deadline:
                    msg = consumer.poll(0.5)
                    if msg is not None and not msg.error():
                        values.append(msg.value())
                got[p] = values
        finally:
            consumer.close()
        for p, values in got.items():
            mine = [v for q, v in self.acked if q == p]
            # Every acknowledged message exactly once, in the order produced.
            assert values == sorted(values) and len(values) == len(set(values)), p
            assert values == sorted(mine), p
        self.producer = None  # let librdkafka go before the brokers do


def restart_and_wait(c: Cluster, load: Load, broker_id: int) -> None:
    """Stop a broker (controlled shutdown moves its leaderships), produce, start it again
    and wait until it is back in every ISR."""
    assert c.stop(broker_id) == 0
    load.run(1.0)
    c.start(broker_id)
    load.run_until(lambda: all(broker_id in c.partition_state(TOPIC, p).isr
                               for p in range(PARTITIONS)), 60, f"broker {broker_id} in ISRs")


def test_preferred_election_by_cli_and_znode_restores_leaders(cluster: Any) -> None:
    c: Cluster = cluster(3, overrides={"min.insync.replicas": "2"})
    c.create_topic(TOPIC, PARTITIONS, 3)
    want = preferred(c)
    assert sorted(want.values()) == c.ids  # one partition preferred by each broker
    c.wait(lambda: leaders(c) == want, 20, "initial leaders on the preferred replicas")
    load = Load(c)
    load.run(1.0)

    # Round 1: `klog elect-leaders`, Kafka's lines.
    moved = 1
    restart_and_wait(c, load, moved)
    moved_p = next(p for p, b in want.items() if b == moved)
    assert c.leader(TOPIC, moved_p) != moved
    result = CliRunner().invoke(app, [
        "elect-leaders", "--election-type", "preferred", "--all-topic-partitions",
        "-b", c.bootstrap_servers])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(
        "Successfully completed leader election (PREFERRED) for partitions "), result.stdout
    assert f"{TOPIC}-{moved_p}" in result.stdout
    load.run_until(lambda: leaders(c) == want, 20, "leaders back after elect-leaders")
    result = CliRunner().invoke(app, [
        "elect-leaders", "--election-type", "preferred", "--topic", TOPIC, "--partition",
        str(moved_p), "-b", c.bootstrap_servers])
    assert result.stdout == f"Valid replica already elected for partitions {TOPIC}-{moved_p}\n"

    # Round 2: the znode Kafka 2.x's kafka-preferred-replica-election.sh writes.
    moved = 2
    restart_and_wait(c, load, moved)
    moved_p = next(p for p, b in want.items() if b == moved)
    assert c.leader(TOPIC, moved_p) != moved
    c.store.create(paths.PREFERRED_REPLICA_ELECTION,
                   paths.PreferredReplicaElection(((TOPIC, moved_p),)).encode())
    load.run_until(lambda: leaders(c) == want, 20, "leaders back after the znode")
    load.run_until(lambda: c.store.exists(paths.PREFERRED_REPLICA_ELECTION) is None, 10,
                   "the znode deleted")
    load.run(1.0)
    load.check(c)


def test_auto_leader_rebalance_restores_leaders(cluster: Any) -> None:
    c: Cluster = cluster(3, overrides={
        "min.insync.replicas": "2", "auto.leader.rebalance.enable": "true",
        "leader.imbalance.check.interval.seconds": "1"})
    c.create_topic(TOPIC, PARTITIONS, 3)
    want = preferred(c)
    c.wait(lambda: leaders(c) == want, 20, "initial leaders on the preferred replicas")
    load = Load(c)
    load.run(1.0)
    moved = 3
    moved_p = next(p for p, b in want.items() if b == moved)
    assert c.stop(moved) == 0
    load.run(1.0)
    assert c.leader(TOPIC, moved_p) != moved
    c.start(moved)
    # Back in the ISR, it is leader again without anyone asking (1 s checks; 1 of 1
    # partition led elsewhere = 100% > leader.imbalance.per.broker.percentage=10).
    started = time.monotonic()
    load.run_until(lambda: leaders(c) == want, 60, "automatic preferred election")
    print(f"leadership back {time.monotonic() - started:.1f} s after the restart")
    wait_until(lambda: c.leader(TOPIC, moved_p) == moved, 5, "stays on the preferred replica")
    load.run(1.0)
    load.check(c)
