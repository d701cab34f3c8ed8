"""Cluster-mode benchmarks: 3 klog brokers on a real ZooKeeper (loopback, one machine).

- replication: 1 KiB records produced by a confluent_kafka producer (linger.ms 50,
  batch.size 1 MiB) to a topic of replication factor 3 with acks=all and
  min.insync.replicas=2, against the same bytes to a topic of replication factor 1 with
  acks=1, on the same brokers in the same run; figure: MB/s, RF=3/acks=all as a share of
  RF=1/acks=1. Target: >= 40%.
- failover: a partition's leader is frozen (SIGSTOP) so that its ZooKeeper session expires;
  figure: the time from its registration vanishing from /brokers/ids (the session expiry) to
  the first Produce that the new leader acknowledges (a request sent to it directly, every
  10 ms, once any surviving broker's metadata names a new leader). The old leader is then
  resumed and rejoins before the next run. Target: within 2 s; the distribution over the
  runs is reported.

Needs java and Debian's ``zookeeper`` package (``make test`` installs them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import WORK, Result, report
from klog.cluster_runner import ZooKeeperServer, zookeeper_unavailable_reason
from klog.daemon.metastore import paths
from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore
from klog.testing import KlogBroker

RECORD_SIZE = 1024
SESSION_MS = 6000
SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_MS),
    "replica.lag.time.max.ms": "10000",
    "replica.fetch.wait.max.ms": "200",
    "replica.socket.timeout.ms": "5000",
    "controller.socket.timeout.ms": "5000",
    "offsets.topic.replication.factor": "3",
    "auto.leader.rebalance.enable": "false",
}


class Cluster:
    """``count`` klog brokers (ids 1..count) under a fresh chroot of ``zk``, and a store
    to read the controller's znodes. The cluster benchmarks share it."""

    def __init__(self, root: Path, zk: ZooKeeperServer, count: int,
                 settings: dict[str, str] | None = None,
                 make_broker: Callable[..., KlogBroker] = KlogBroker) -> None:
        self.connect = f"{zk.connect}/bench-{uuid.uuid4().hex[:8]}"
        settings = SETTINGS if settings is None else settings
        self.brokers = {
            i: make_broker(root / f"broker-{i}", overrides={
                **settings, "zookeeper.connect": self.connect, "broker.id": str(i)})
            for i in range(1, count + 1)}
        self.store = ZooKeeperMetadataStore(self.connect)

    def start(self) -> None:
        for broker in self.brokers.values():
            broker.start()
        self.store.start()

    def stop(self) -> None:
        self.store.close()
        for broker in self.brokers.values():
            if broker.process is not None and broker.process.poll() is None:
                os.kill(broker.process.pid, signal.SIGCONT)
            broker.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap_servers for b in self.brokers.values())

    def state(self, topic: str, partition: int = 0) -> Any:
        data, _ = self.store.get(paths.partition_state_path(topic, partition))
        return paths.LeaderIsrAndControllerEpoch.decode(data)

    def registered(self) -> set[int]:
        return {int(i) for i in self.store.get_children(paths.BROKER_IDS)}

    def wait(self, predicate: Any, timeout: float, what: str, interval: float = 0.01) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = predicate()
            except Exception:  # not there yet
                value = None
            if value:
                return value
            time.sleep(interval)
        raise SystemExit(f"timed out waiting for {what}")

    def create_topic(self, name: str, rf: int, configs: dict[str, str]) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, 1, rf, config=configs)]).values():
            future.result(30)
        self.wait(lambda: self.state(name).leader >= 0 and len(self.state(name).isr) == rf,
                  30, f"{name}'s leader and full ISR")


def _produce_mb_s(bootstrap: str, topic: str, total: int, acks: str) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 50,
                         "batch.size": 1 << 20, "enable.idempotence": False})
    value = os.urandom(RECORD_SIZE)
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    count = total // RECORD_SIZE
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    if producer.flush(120):
        raise SystemExit(f"{topic}: records still undelivered")
    elapsed = time.perf_counter() - start
    if failures:
        raise SystemExit(f"{topic}: {len(failures)} records failed: {failures[:3]}")
    return count * RECORD_SIZE / elapsed / 1e6


def bench_replication(cluster: Cluster, total: int, rounds: int) -> Result:
    rf1: list[float] = []
    rf3: list[float] = []
    for i in range(rounds):
        cluster.create_topic(f"rf1-{i}", 1, {})
        cluster.create_topic(f"rf3-{i}", 3, {"min.insync.replicas": "2"})
        rf1.append(_produce_mb_s(cluster.bootstrap, f"rf1-{i}", total, "1"))
        rf3.append(_produce_mb_s(cluster.bootstrap, f"rf3-{i}", total, "all"))
    best1, best3 = max(rf1), max(rf3)
    return Result(f"produce RF=3 acks=all (min.insync 2) vs RF=1 acks=1, 3 brokers, "
                  f"{rounds} x {total / 1e6:,.0f} MB", best3, "MB/s", baseline=best1,
                  target=">= 40% of RF=1 acks=1", ok=best3 >= 0.4 * best1,
                  extra={"rf3_rounds": [round(x, 1) for x in rf3],
                         "rf1_rounds": [round(x, 1) for x in rf1]})


async def _first_ack(cluster: Cluster, topic: str, old: int, deadline: float) -> float:
    """Seconds until a surviving broker's metadata names a new leader and that leader
    acknowledges a Produce (each attempt a fresh request over a fresh client)."""
    from klog.client.network import KafkaClient
    from klog.protocol.records.v2 import build_batch

    survivors = ",".join(b.bootstrap_servers for i, b in cluster.brokers.items() if i != old)
    batch = build_batch([(int(time.time() * 1000), None, b"failover", ())])
    async with KafkaClient(survivors, request_timeout_ms=2000) as client:
        while time.monotonic() < deadline:
            try:
                await client.refresh_metadata([topic])
                leader = client.cluster.leader_for(topic, 0)
                if leader is not None and leader >= 0 and leader != old:
                    response = await client.send(leader, 0, {
                        "transactional_id": None, "acks": 1, "timeout": 2000,
                        "topic_data": [{"name": topic, "partition_data": [
                            {"index": 0, "records": batch}]}]})
                    part = response.responses[0].partition_responses[0]
                    if int(part.error_code) == 0:
                        return time.monotonic()
            except Exception:  # not yet: the new leader is not there or not ready
                pass
            await asyncio.sleep(0.01)
    raise SystemExit("no new leader acknowledged a produce in time")


def bench_failover(cluster: Cluster, runs: int) -> Result:
    topic = "failover"
    cluster.create_topic(topic, 3, {"min.insync.replicas": "1"})
    times: list[float] = []
    for _ in range(runs):
        old = cluster.state(topic).leader
        process = cluster.brokers[old].process
        assert process is not None
        os.kill(process.pid, signal.SIGSTOP)
        try:
            cluster.wait(lambda old=old: old not in cluster.registered(),
                         SESSION_MS / 1000 * 4, "the frozen leader's session to expire")
            expired = time.monotonic()
            acked = asyncio.run(_first_ack(cluster, topic, old, expired + 30))
            times.append(acked - expired)
        finally:
            os.kill(process.pid, signal.SIGCONT)
        # The old leader registers again and rejoins the ISR before the next run.
        cluster.wait(lambda old=old: old in cluster.registered(), 60, "re-registration")
        cluster.wait(lambda: len(cluster.state(topic).isr) == 3, 60, "the full ISR")
    worst = max(times)
    return Result(f"failover: session expiry of the leader -> new leader acknowledges "
                  f"({runs} runs)", statistics.median(times) * 1000, "ms median",
                  target="<= 2000 ms", ok=worst <= 2.0,
                  extra={"runs_ms": [round(t * 1000) for t in times],
                         "max_ms": round(worst * 1000)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    parser.add_argument("--only", choices=["replication", "failover"])
    args = parser.parse_args()
    reason = zookeeper_unavailable_reason()
    if reason:
        raise SystemExit(f"cannot run the cluster benchmarks: {reason}")
    total, rounds, runs = ((32 << 20), 1, 2) if args.quick else ((256 << 20), 2, 10)
    root = WORK / "cluster"
    shutil.rmtree(root, ignore_errors=True)
    results: list[Result] = []
    with ZooKeeperServer(root / "zk") as zk:
        cluster = Cluster(root, zk, 3)
        cluster.start()
        try:
            if args.only in (None, "replication"):
                results.append(bench_replication(cluster, total, rounds))
            if args.only in (None, "failover"):
                results.append(bench_failover(cluster, runs))
        finally:
            cluster.stop()
    shutil.rmtree(root, ignore_errors=True)
    report(results)


if __name__ == "__main__":
    main()
