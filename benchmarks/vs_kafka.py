"""klog against Apache Kafka on the same machine in the same run (issue 32).

``python -m benchmarks.vs_kafka [--quick] [--rounds N] [--only WORD] [--json FILE]``

Both brokers run side by side (Kafka: benchmarks/kafka_reference.py, the release
tests/jvm/pom.xml pins, KRaft; klog: its standalone broker, or three brokers on a
ZooKeeper) with the settings of ``kafka_reference.SHARED_SETTINGS``; the same client
(librdkafka through confluent-kafka, and Kafka's own ProducerPerformance and
ConsumerPerformance) sends the same records to each. Every row is measured in rounds that
alternate which side goes first; the table gives each side's median, the spread of its
rounds ((max - min) / median) and the ratio klog / Kafka of the medians, with the target
the issue sets where it sets one. Broker CPU is read from /proc (user + system of the
broker processes, every thread) over the measured interval only.

Groups of rows, each on brokers of their own:

- one node each: produce of 1 KiB records (acks=1 and acks=all, one and 16 partitions;
  MB/s and broker CPU seconds per GB), the fetch of the same data (one consumer; and
  several consumers of one partition at once), Kafka's ProducerPerformance and
  ConsumerPerformance, p50/p99/p99.9 latency at a fixed 10,000 msg/s (acks=1),
  transactional produce, compaction of the same dirty log, RSS idle and at its peak;
- three nodes each (RF=3, min.insync.replicas=2, acks=all): throughput and latency;
- start-up of an empty broker to its first acknowledged produce (Kafka's log dir format,
  a separate step it needs once, is not counted); many partitions (10,000; ``--quick``
  1,000) created, Metadata for all of them, and RSS after;
- the offline tools on one segment klog wrote: ``klog dump-segment`` against
  ``kafka-dump-log.sh`` (DumpLogSegments), both ``--deep-iteration``; ``klog verify``
  against Kafka's recovery of the same log at start-up after a crash (SIGKILL), until the
  partition answers again.

Kafka 4 has no ZooKeeper mode: its control plane (the metadata log) differs from klog's
ZooKeeper one by design, which start-up and partition creation reach; the data path is
the same. ``--quick`` is one round of every row at small sizes (a smoke test, a few
minutes); figures worth recording come from a quiet host (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench_broker import process_cpu
from benchmarks.common import WORK
from benchmarks.kafka_reference import (
    PERFORMANCE_OPTIONS,
    SHARED_SETTINGS,
    KafkaCluster,
    client_classpath,
    dump_log_command,
    java_command,
    kafka_version,
)
from klog.testing import KlogBroker

RECORD_SIZE = 1024
#: Both brokers: the internal topics on one node, a cleaner that looks often (Kafka's
#: default backoff is 15 s, which would be most of a compaction row).
ONE_NODE = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "log.cleaner.backoff.ms": "100",
    "group.initial.rebalance.delay.ms": "0",
}
PRODUCER = {"linger.ms": 20, "batch.size": 512 << 10, "compression.type": "none",
            "queue.buffering.max.kbytes": 256 << 10,
            "queue.buffering.max.messages": 1_000_000}


# --- the two sides ----------------------------------------------------------------------


@dataclass
class Server:
    """One side: its brokers' address, processes and log dirs."""

    name: str
    bootstrap: str
    pids: list[int]
    log_dirs: list[Path]

    def cpu(self) -> float:
        return sum(process_cpu(p) for p in self.pids)

    def rss_mib(self, key: str = "VmRSS") -> float:
        total = 0
        for pid in self.pids:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        total += int(line.split()[1])
        return total / 1024


def _klog_single(root: Path) -> tuple[Server, Callable[[], None]]:
    broker = KlogBroker(root / "data", overrides={**SHARED_SETTINGS, **ONE_NODE,
                                                  "broker.id": "1"})
    broker.start()
    assert broker.process is not None
    return (Server("klog", broker.bootstrap_servers, [broker.process.pid], [broker.log_dir]),
            broker.close)


def _kafka(root: Path, nodes: int, overrides: dict[str, str]
           ) -> tuple[Server, Callable[[], None], KafkaCluster]:
    cluster = KafkaCluster(root, nodes, profile="bench", overrides=overrides)
    cluster.start(timeout=300)
    return (Server("kafka", cluster.bootstrap_servers, [n.pid for n in cluster.nodes],
                   [n.log_dir for n in cluster.nodes]), cluster.stop, cluster)


@contextmanager
def single_pair(root: Path) -> Iterator[dict[str, Server]]:
    shutil.rmtree(root, ignore_errors=True)
    klog, stop_klog = _klog_single(root / "klog")
    try:
        kafka, stop_kafka, _ = _kafka(root / "kafka", 1, ONE_NODE)
        try:
            yield {"klog": klog, "kafka": kafka}
        finally:
            stop_kafka()
    finally:
        stop_klog()
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def cluster_pair(root: Path) -> Iterator[dict[str, Server]]:
    from benchmarks.bench_cluster import Cluster
    from klog.cluster_runner import ZooKeeperServer

    shutil.rmtree(root, ignore_errors=True)
    zk = ZooKeeperServer(root / "zookeeper")
    zk.start()
    klog = Cluster(root / "klog", zk, 3, {**SHARED_SETTINGS,
                                          "auto.leader.rebalance.enable": "false",
                                          "offsets.topic.replication.factor": "3"})
    try:
        klog.start()
        brokers = list(klog.brokers.values())
        klog_side = Server("klog", klog.bootstrap,
                           [b.process.pid for b in brokers if b.process is not None],
                           [b.log_dir for b in brokers])
        kafka, stop_kafka, _ = _kafka(root / "kafka", 3, {})
        try:
            yield {"klog": klog_side, "kafka": kafka}
        finally:
            stop_kafka()
    finally:
        klog.stop()
        zk.stop()
        shutil.rmtree(root, ignore_errors=True)


# --- measurements ---------------------------------------------------------------------------


def create_topic(server: Server, name: str, partitions: int = 1, rf: int = 1,
                 configs: dict[str, str] | None = None, timeout: float = 120) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, rf,
                                                config=configs or {})]).values():
        future.result(timeout)
    wait_leaders(server, [name], partitions, timeout)


def wait_leaders(server: Server, topics: list[str], partitions: int, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        meta = admin.list_topics(timeout=30).topics
        if all(t in meta and meta[t].error is None and len(meta[t].partitions) == partitions
               and all(p.leader >= 0 for p in meta[t].partitions.values()) for t in topics):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: {len(topics)} topics without leaders after "
                               f"{timeout} s")
        time.sleep(0.2)


def produce(server: Server, topic: str, total: int, acks: str,
            extra: dict[str, Any] | None = None, keys: int = 0) -> tuple[float, float]:
    """``total`` bytes of 1 KiB records to ``topic`` -> (MB/s, broker CPU s/GB)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": acks, **PRODUCER,
                         **(extra or {})})
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    value = os.urandom(RECORD_SIZE)
    # warm-up: connections, metadata (a key for a compacted topic, which refuses none)
    producer.produce(topic, value, b"0" if keys else None, on_delivery=delivered)
    if producer.flush(60) or failures:
        raise RuntimeError(f"{server.name}: warm-up produce failed: {failures[:3]}")
    count = total // RECORD_SIZE
    cpu0, start = server.cpu(), time.perf_counter()
    send = producer.produce
    for i in range(count):
        key = str(i % keys).encode() if keys else None
        while True:
            try:
                send(topic, value, key, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(600):
        raise RuntimeError(f"{server.name}: produce did not complete within 600 s")
    wall, cpu = time.perf_counter() - start, server.cpu() - cpu0
    if failures:
        raise RuntimeError(f"{server.name}: {len(failures)} records failed: {failures[:3]}")
    size = count * RECORD_SIZE
    return size / wall / 1e6, cpu / (size / 1e9)


def consume(server: Server, topic: str, partitions: int, records: int,
            consumers: int = 1) -> tuple[float, float]:
    """``consumers`` consumers at once each read ``records`` records of ``topic`` from
    offset 0 -> (MB/s of them all, broker CPU s/GB)."""
    from confluent_kafka import Consumer, TopicPartition

    def make() -> Any:
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "bench",
                      "enable.auto.commit": False, "max.partition.fetch.bytes": 1 << 20,
                      "fetch.max.bytes": 50 << 20})
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        return c

    made = [make() for _ in range(consumers)]
    errors: list[str] = []

    def read(c: Any) -> None:
        got, deadline = 0, time.monotonic() + 600
        while got < records and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    got += 1
        if got < records:
            errors.append(f"read {got} of {records}")

    cpu0, start = server.cpu(), time.perf_counter()
    threads = [threading.Thread(target=read, args=(c,)) for c in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - start, server.cpu() - cpu0
    for c in made:
        c.close()
    if errors:
        raise RuntimeError(f"{server.name}: {errors[0]}")
    size = consumers * records * RECORD_SIZE
    return size / wall / 1e6, cpu / (size / 1e9)


def paced_latency(server: Server, topic: str, acks: str, rate: int, seconds: float
                  ) -> dict[str, float]:
    """``rate`` records/s for ``seconds`` (1 ms ticks, linger.ms 0) -> latency percentiles
    (ms) of the deliveries."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server.bootstrap, "acks": acks,
                         "linger.ms": 0, "compression.type": "none"})
    latencies: list[float] = []
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            latencies.append(msg.latency())

    value = os.urandom(RECORD_SIZE)
    producer.produce(topic, value, partition=0)
    producer.flush(60)
    total, sent, start = int(rate * seconds), 0, time.perf_counter()
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while sent < due:
            producer.produce(topic, value, partition=0, on_delivery=delivered)
            sent += 1
        producer.poll(0)
        time.sleep(0.001)
    producer.flush(60)
    if failures or not latencies:
        raise RuntimeError(f"{server.name}: {len(failures)} records failed: {failures[:3]}")
    ms = sorted(x * 1000 for x in latencies)

    def pct(q: float) -> float:
        return ms[min(len(ms) - 1, int(q * len(ms)))]

    return {"p50": pct(0.5), "p99": pct(0.99), "p99.9": pct(0.999)}


def transactions(server: Server, topic: str, count: int, per: int) -> float:
    """``count`` transactions of ``per`` 1 KiB records -> records/s."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": server.bootstrap, **PRODUCER,
                         "transactional.id": f"bench-{topic}"})
    producer.init_transactions(60)
    value = os.urandom(RECORD_SIZE)
    start = time.perf_counter()
    for _ in range(count):
        producer.begin_transaction()
        for _ in range(per):
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.005)
        producer.commit_transaction(60)
    return count * per / (time.perf_counter() - start)


def _checkpoint(log_dir: Path, topic: str) -> int:
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return -1
    for line in path.read_text().splitlines()[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[0] == topic and parts[1] == "0":
            return int(parts[2])
    return -1


def compaction(server: Server, topic: str, total: int) -> float:
    """The same dirty log (``total`` bytes, keys 10,000 ways) written with cleaning held
    off, then let go: MB/s of dirty log cleaned, until the cleaner's checkpoint reaches the
    active segment."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    create_topic(server, topic, configs={"cleanup.policy": "compact",
                                         "segment.bytes": str(8 << 20),
                                         "min.cleanable.dirty.ratio": "0.01",
                                         "min.compaction.lag.ms": str(24 * 3600 * 1000)})
    produce(server, topic, total, "1", keys=10_000)
    directory = server.log_dirs[0] / f"{topic}-0"
    active = max(int(p.stem) for p in directory.glob("*.log"))
    dirty = sum(p.stat().st_size for p in directory.glob("*.log") if int(p.stem) < active)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0",
                    incremental_operation=AlterConfigOpType.SET)])
    start = time.perf_counter()
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    deadline = time.monotonic() + 600
    while _checkpoint(server.log_dirs[0], topic) < active:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: {topic} not cleaned within 600 s")
        time.sleep(0.05)
    return dirty / (time.perf_counter() - start) / 1e6


_PERF = re.compile(r"([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def producer_performance(server: Server, topic: str, records: int, acks: str) -> float:
    """Kafka's ProducerPerformance, 1 KiB records as fast as it goes -> MB/s (its own)."""
    done = subprocess.run(java_command(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records",
        str(records), "--record-size", str(RECORD_SIZE), "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={server.bootstrap}", f"acks={acks}",
        "linger.ms=20", f"batch.size={512 << 10}",
        options=("-Xmx512m", *PERFORMANCE_OPTIONS), classpath=client_classpath()),
        capture_output=True, text=True, timeout=900, check=False)
    found = _PERF.findall(done.stdout)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{server.name}: ProducerPerformance failed:\n"
                           f"{done.stdout[-1500:]}{done.stderr[-1500:]}")
    return float(found[-1][1]) * 1.048576  # its MB is MiB


def consumer_performance(server: Server, topic: str, records: int) -> float:
    """Kafka's ConsumerPerformance over ``records`` records -> MB/s (its own figure)."""
    done = subprocess.run(java_command(
        "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", server.bootstrap,
        "--topic", topic, "--messages", str(records), "--timeout", "120000",
        options=("-Xmx512m", *PERFORMANCE_OPTIONS), classpath=client_classpath()),
        capture_output=True, text=True, timeout=900, check=False)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or len(lines) < 2:
        raise RuntimeError(f"{server.name}: ConsumerPerformance failed:\n"
                           f"{done.stdout[-1500:]}{done.stderr[-1500:]}")
    header = [h.strip() for h in lines[-2].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    # fetch.MB.sec: the time spent fetching, without the group's join (a control-plane
    # step that differs by design)
    return float(values[header.index("fetch.MB.sec")]) * 1.048576


def startup(root: Path, side: str) -> float:
    """An empty broker's start to its first acknowledged produce (s)."""
    from confluent_kafka import Producer

    shutil.rmtree(root, ignore_errors=True)
    stop: Callable[[], None]
    if side == "klog":
        broker = KlogBroker(root / "data", overrides={**SHARED_SETTINGS, **ONE_NODE,
                                                      "broker.id": "1"})
        start = time.perf_counter()
        broker.start()
        bootstrap, stop = broker.bootstrap_servers, broker.close
    else:
        cluster = KafkaCluster(root, 1, profile="bench", overrides=ONE_NODE)
        cluster.format()  # a one-off step of its own, not counted
        start = time.perf_counter()
        cluster.start(timeout=300)
        bootstrap, stop = cluster.bootstrap_servers, cluster.stop
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
        errors: list[Any] = []
        while True:
            errors.clear()
            producer.produce("startup", b"x", on_delivery=lambda e, _m: errors.append(e))
            producer.flush(60)
            if errors and errors[0] is None:
                break
            if time.perf_counter() - start > 300:
                raise RuntimeError(f"{side}: no acknowledged produce within 300 s")
        return time.perf_counter() - start
    finally:
        stop()
        shutil.rmtree(root, ignore_errors=True)


def many_partitions(server: Server, count: int) -> dict[str, float]:
    """``count`` partitions in topics of 100 -> create time (s), Metadata latency for all
    (ms, median of 5), RSS after (MiB)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    names = [f"many-{i}" for i in range(count // 100)]
    start = time.perf_counter()
    for future in admin.create_topics([NewTopic(n, 100, 1) for n in names],
                                      request_timeout=600).values():
        future.result(900)
    wait_leaders(server, names, 100, 900)
    created = time.perf_counter() - start
    latencies = []
    for _ in range(5):
        t0 = time.perf_counter()
        admin.list_topics(timeout=60)
        latencies.append((time.perf_counter() - t0) * 1000)
    time.sleep(2)
    return {"create": created, "metadata": statistics.median(latencies),
            "rss": server.rss_mib()}


def _timed(command: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{command[:3]} failed: {done.stderr[-1500:]!r}")
    return time.perf_counter() - start


KLOG = [sys.executable, "-m", "klog"]


# --- rows -----------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    unit: str
    higher_is_better: bool
    target: float | None = None  # on the ratio klog / Kafka
    klog: list[float] = field(default_factory=list)
    kafka: list[float] = field(default_factory=list)

    def add(self, side: str, value: float) -> None:
        getattr(self, side).append(value)

    def as_json(self) -> dict[str, Any]:
        k = statistics.median(self.klog) if self.klog else None
        f = statistics.median(self.kafka) if self.kafka else None
        ratio = k / f if k is not None and f else None
        meets = None
        if ratio is not None and self.target is not None:
            meets = ratio >= self.target if self.higher_is_better else ratio <= self.target
        return {"name": self.name, "klog": _round(k), "kafka": _round(f), "unit": self.unit,
                "ratio": _round(ratio, 3), "target": _target(self),
                "meets_target": meets, "klog_spread": _spread(self.klog),
                "kafka_spread": _spread(self.kafka), "klog_rounds": [_round(v) for v in
                                                                     self.klog],
                "kafka_rounds": [_round(v) for v in self.kafka]}


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else float(f"{value:.{digits}g}")


def _spread(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    median = statistics.median(values)
    return round((max(values) - min(values)) / median, 3) if median else None


def _target(row: Row) -> str | None:
    if row.target is None:
        return None
    return f"{'>=' if row.higher_is_better else '<='} {row.target:g}"


class Table:
    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}

    def row(self, name: str, unit: str, higher: bool, target: float | None = None) -> Row:
        if name not in self.rows:
            self.rows[name] = Row(name, unit, higher, target)
        return self.rows[name]

    def print(self) -> None:
        width = max(len(r.name) for r in self.rows.values())
        print(f"{'row':<{width}}  {'klog':>10} {'kafka':>10} {'unit':<7} {'ratio':>6} "
              f"{'target':>7}  spread klog/kafka")
        for row in self.rows.values():
            j = row.as_json()
            verdict = {True: "ok", False: "MISS", None: ""}[j["meets_target"]]
            print(f"{row.name:<{width}}  {_fmt(j['klog']):>10} {_fmt(j['kafka']):>10} "
                  f"{row.unit:<7} {_fmt(j['ratio']):>6} {j['target'] or '':>7} "
                  f"{verdict:<4} {_fmt(j['klog_spread'])}/{_fmt(j['kafka_spread'])}",
                  flush=True)


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}"


def _order(round_index: int) -> tuple[str, str]:
    """Alternate which side goes first, round by round."""
    return ("klog", "kafka") if round_index % 2 == 0 else ("kafka", "klog")


# --- the groups -------------------------------------------------------------------------------


def one_node(table: Table, sizes: Sizes, rounds: int) -> None:
    with single_pair(WORK / "vs-kafka-one") as servers:
        time.sleep(sizes.settle)
        for side in ("klog", "kafka"):
            table.row("RSS, idle", "MiB", False, 0.2).add(side, servers[side].rss_mib())
        for r in range(rounds):
            for side in _order(r):
                s = servers[side]
                for parts in (1, 16):
                    for acks in ("1", "all"):
                        topic = f"p{parts}-a{acks}-{r}"
                        create_topic(s, topic, parts)
                        mbs, cpu = produce(s, topic, sizes.produce, acks)
                        label = f"produce 1 KiB, acks={acks}, {parts} partition" + \
                            ("s" if parts > 1 else "")
                        table.row(f"{label}: throughput", "MB/s", True, 1.0).add(side, mbs)
                        table.row(f"{label}: broker CPU", "s/GB", False, 1.0).add(side, cpu)
                records = sizes.produce // RECORD_SIZE
                mbs, cpu = consume(s, f"p1-a1-{r}", 1, records)
                table.row("fetch, 1 partition: throughput", "MB/s", True, 1.0).add(side, mbs)
                table.row("fetch, 1 partition: broker CPU", "s/GB", False, 1.0).add(side, cpu)
                mbs, cpu = consume(s, f"p16-a1-{r}", 16, records)
                table.row("fetch, 16 partitions: throughput", "MB/s", True, 1.0).add(side, mbs)
                table.row("fetch, 16 partitions: broker CPU", "s/GB", False, 1.0).add(side, cpu)
                mbs, _ = consume(s, f"p1-a1-{r}", 1, records, consumers=sizes.consumers)
                table.row(f"fetch, {sizes.consumers} consumers of 1 partition: throughput",
                          "MB/s", True, 1.0).add(side, mbs)
                create_topic(s, f"perf-{r}")
                mbs = producer_performance(s, f"perf-{r}", records, "1")
                table.row("ProducerPerformance acks=1: throughput", "MB/s", True,
                          1.0).add(side, mbs)
                mbs = consumer_performance(s, f"perf-{r}", records)
                table.row("ConsumerPerformance: throughput", "MB/s", True, 1.0).add(side, mbs)
                create_topic(s, f"latency-{r}")
                got = paced_latency(s, f"latency-{r}", "1", 10_000, sizes.latency_s)
                for q in ("p50", "p99", "p99.9"):
                    table.row(f"latency at 10k msg/s, acks=1: {q}", "ms", False,
                              1.0 if q == "p99" else None).add(side, got[q])
                create_topic(s, f"txn-{r}")
                table.row("transactional produce (1,000 records each)", "rec/s", True
                          ).add(side, transactions(s, f"txn-{r}", sizes.transactions, 1000))
                table.row("compaction of the same dirty log", "MB/s", True).add(
                    side, compaction(s, f"compact-{r}", sizes.compaction))
        for side in ("klog", "kafka"):
            table.row("RSS, peak under load", "MiB", False).add(
                side, servers[side].rss_mib("VmHWM"))


def three_nodes(table: Table, sizes: Sizes, rounds: int) -> None:
    with cluster_pair(WORK / "vs-kafka-three") as servers:
        for r in range(rounds):
            for side in _order(r):
                s = servers[side]
                create_topic(s, f"rf3-{r}", 1, 3, {"min.insync.replicas": "2"})
                mbs, cpu = produce(s, f"rf3-{r}", sizes.produce, "all")
                table.row("RF=3 acks=all, 3 brokers: throughput", "MB/s", True,
                          1.0).add(side, mbs)
                table.row("RF=3 acks=all, 3 brokers: CPU of all brokers", "s/GB", False
                          ).add(side, cpu)
                create_topic(s, f"rf3-latency-{r}", 1, 3, {"min.insync.replicas": "2"})
                got = paced_latency(s, f"rf3-latency-{r}", "all", 10_000, sizes.latency_s)
                for q in ("p50", "p99", "p99.9"):
                    table.row(f"latency at 10k msg/s, acks=all RF=3: {q}", "ms", False,
                              1.0 if q == "p99" else None).add(side, got[q])


def start_and_scale(table: Table, sizes: Sizes, rounds: int) -> None:
    for r in range(rounds):
        for side in _order(r):
            table.row("start-up to first acknowledged produce", "s", False, 0.1).add(
                side, startup(WORK / "vs-kafka-startup", side))
    for r in range(max(1, rounds // 3)):
        for side in _order(r):
            root = WORK / "vs-kafka-scale"
            shutil.rmtree(root, ignore_errors=True)
            if side == "klog":
                server, stop = _klog_single(root / "klog")
            else:
                server, stop, _ = _kafka(root / "kafka", 1, ONE_NODE)
            try:
                got = many_partitions(server, sizes.partitions)
            finally:
                stop()
                shutil.rmtree(root, ignore_errors=True)
            n = f"{sizes.partitions:,} partitions"
            table.row(f"{n}: create", "s", False).add(side, got["create"])
            table.row(f"{n}: Metadata of all", "ms", False).add(side, got["metadata"])
            table.row(f"{n}: RSS", "MiB", False).add(side, got["rss"])


def tools(table: Table, sizes: Sizes, rounds: int) -> None:
    """One segment (written by klog; its format is Kafka's) read by both dump tools; the
    same bytes written to Kafka, which is then killed and restarted (recovery) while
    ``klog verify`` checks its segment."""
    root = WORK / "vs-kafka-tools"
    shutil.rmtree(root, ignore_errors=True)
    server, stop = _klog_single(root / "klog")
    try:
        create_topic(server, "segment")
        produce(server, "segment", sizes.segment, "1")
        segment = sorted((server.log_dirs[0] / "segment-0").glob("*.log"))[0]
        copy = root / "segment" / segment.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(segment, copy)
    finally:
        stop()
    mb = copy.stat().st_size / 1e6
    for r in range(rounds):
        for side in _order(r):
            command = ([*KLOG, "dump-segment", "--deep-iteration", str(copy)]
                       if side == "klog" else dump_log_command(copy))
            table.row("dump of one segment, --deep-iteration", "MB/s", True, 1.0).add(
                side, mb / _timed(command))
    shutil.rmtree(root, ignore_errors=True)
    recovery(table, sizes, rounds)


def recovery(table: Table, sizes: Sizes, rounds: int) -> None:
    """Kafka killed after writing ``sizes.segment`` bytes and started again, to its first
    answer for the partition; ``klog verify`` of the same segment files."""
    from confluent_kafka import Consumer, TopicPartition

    for r in range(rounds):
        root = WORK / "vs-kafka-recovery"
        shutil.rmtree(root, ignore_errors=True)
        server, stop, cluster = _kafka(root / "kafka", 1, ONE_NODE)
        try:
            create_topic(server, "recover")
            produce(server, "recover", sizes.segment, "1")
            node = cluster.nodes[0]
            node.kill()
            files = sorted((node.log_dir / "recover-0").glob("*.log"))
            for side in _order(r):
                if side == "klog":
                    table.row("klog verify vs Kafka's recovery at start-up", "s", False
                              ).add(side, _timed([*KLOG, "verify", *map(str, files)]))
                    continue
                start = time.perf_counter()
                node.launch()
                node.wait_listening(300)
                consumer = Consumer({"bootstrap.servers": server.bootstrap,
                                     "group.id": "recovery"})
                try:
                    while True:
                        try:
                            _, high = consumer.get_watermark_offsets(
                                TopicPartition("recover", 0), timeout=5)
                            if high > 0:
                                break
                        except Exception:  # not serving the partition yet
                            pass
                        if time.perf_counter() - start > 600:
                            raise RuntimeError("kafka: no recovery within 600 s")
                        time.sleep(0.05)
                finally:
                    consumer.close()
                table.row("klog verify vs Kafka's recovery at start-up", "s", False).add(
                    side, time.perf_counter() - start)
                node.kill()
        finally:
            stop()
            shutil.rmtree(root, ignore_errors=True)


@dataclass
class Sizes:
    produce: int
    compaction: int
    segment: int
    partitions: int
    transactions: int
    latency_s: float
    consumers: int
    settle: float


FULL = Sizes(produce=1 << 30, compaction=512 << 20, segment=1 << 30, partitions=10_000,
             transactions=100, latency_s=20, consumers=8, settle=10)
QUICK = Sizes(produce=64 << 20, compaction=32 << 20, segment=64 << 20, partitions=1_000,
              transactions=10, latency_s=3, consumers=4, settle=3)
GROUPS: dict[str, Callable[[Table, Sizes, int], None]] = {
    "one-node": one_node, "three-nodes": three_nodes, "start-and-scale": start_and_scale,
    "tools": tools,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.vs_kafka",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one round of every row, small")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5; 1 quick)")
    parser.add_argument("--only", action="append", choices=sorted(GROUPS),
                        help="run only these groups of rows")
    parser.add_argument("--json", type=Path, help="write the rows to this file as JSON")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    rounds = args.rounds or (1 if args.quick else 5)
    print(f"klog against Apache Kafka {kafka_version()} (KRaft), {rounds} round(s), "
          f"{'quick' if args.quick else 'full'} sizes", flush=True)
    table = Table()
    failed: list[str] = []
    for name, group in GROUPS.items():
        if args.only and name not in args.only:
            continue
        started = time.monotonic()
        try:
            group(table, sizes, rounds)
        except Exception as exc:  # one group's failure leaves the others' rows
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
            print(f"group {name} failed: {exc}", file=sys.stderr, flush=True)
        print(f"[{name}: {time.monotonic() - started:.0f} s]", flush=True)
    table.print()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([r.as_json() for r in table.rows.values()], indent=1))
    for failure in failed:
        print(f"FAILED {failure}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
