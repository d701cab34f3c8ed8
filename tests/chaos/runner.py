"""One chaos run, end to end: network, cluster, workloads, nemeses, healing, checks.

``run(Options)`` -> the result document (also written as JSON): it claims a network slot
(net.py), starts ZooKeeper (one node or a 3-node ensemble) and the brokers each in its
namespace (nodes.py), creates the workload topics (RF=3, min.insync.replicas=2,
unclean.leader.election.enable=false unless the run asks otherwise), starts the workloads
(workloads.py), applies the nemesis schedule (nemesis.py) for the duration, heals
everything, waits until the cluster is quiet (every broker registered, every ISR full),
lets the workloads run a little longer, stops them, reads every partition back, stops the
brokers cleanly, runs ``klog verify`` on each broker's log dir and compares the replicas'
segments, and hands it all to the checker (checker.py).

Every exit path -- a pass, an anomaly, an exception, SIGINT, SIGTERM -- ends in
``finally``: nemesis healed, workloads stopped, processes killed, namespaces, links and
the slot removed (net.py ``Network.down``). A run that found anomalies (or failed) keeps
its directory (logs of every node, the histories, result.json) and says so with its seed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import TopicPartition

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetastoreError, NoNodeError
from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore
from tests.chaos import checker
from tests.chaos.checker import Event
from tests.chaos.nemesis import KINDS, Nemesis, Schedule
from tests.chaos.net import Network
from tests.chaos.nodes import BrokerNode, ZooKeeperNode
from tests.chaos.workloads import (
    Clock,
    GroupWorkload,
    KlogProducerWorkload,
    LiveReader,
    ProducerWorkload,
    TransactionWorkload,
    Workload,
    ops_json,
)

PARTITIONS = 3
TOPICS = {"idempotent": "chaos-idem", "klog": "chaos-klog", "transactions": "chaos-txn",
          "group": "chaos-group"}

BROKER_SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "zookeeper.connection.timeout.ms": "10000",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "replica.socket.timeout.ms": "5000",
    "controller.socket.timeout.ms": "5000",
    "controlled.shutdown.retry.backoff.ms": "200",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "5000",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "log.segment.bytes": str(1 << 20),
}


@dataclass
class Options:
    seed: int
    duration: float
    json_path: Path | None = None
    zookeepers: int = 3
    brokers: int = 3
    nemeses: list[str] = field(default_factory=lambda: list(KINDS))
    acks: str = "all"
    unclean: bool = False
    out: Path | None = None
    keep: bool = False
    hold: tuple[float, float] = (6.0, 15.0)
    quiet: tuple[float, float] = (4.0, 8.0)
    rate: float = 40.0
    log: Callable[[str], None] = field(default=lambda s: print(s, flush=True), repr=False)


class HarnessError(RuntimeError):
    """The harness could not do its part (not an anomaly of klog's)."""


class ChaosCluster:
    """The hosts of one run: ZooKeeper nodes z1.., brokers b1.. (see nemesis.ClusterView)."""

    def __init__(self, net: Network, root: Path, zookeepers: int, brokers: int,
                 overrides: dict[str, str]) -> None:
        self.net = net
        self.root = root
        zk_names = [f"z{i}" for i in range(1, zookeepers + 1)]
        ensemble = {i: net.address(n) for i, n in enumerate(zk_names, 1)}
        self.zookeepers = {
            n: ZooKeeperNode(n, net.exec_prefix(n), net.address(n), root / n, i, ensemble)
            for i, n in enumerate(zk_names, 1)}
        self.zookeeper_connect = ",".join(z.connect for z in self.zookeepers.values()) + "/klog"
        settings = {**BROKER_SETTINGS, **overrides,
                    "zookeeper.connect": self.zookeeper_connect}
        self.brokers = {
            f"b{i}": BrokerNode(f"b{i}", net.exec_prefix(f"b{i}"), net.address(f"b{i}"),
                                root / f"b{i}", i, settings)
            for i in range(1, brokers + 1)}
        self._store: ZooKeeperMetadataStore | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def node(self, name: str) -> BrokerNode | ZooKeeperNode:
        return self.brokers.get(name) or self.zookeepers[name]

    # -- ZooKeeper, read by the harness

    def store(self) -> ZooKeeperMetadataStore:
        if self._store is None:
            store = ZooKeeperMetadataStore(self.zookeeper_connect, session_timeout_ms=10000,
                                           connection_timeout_ms=5000)
            store.start()
            self._store = store
        return self._store

    def close_store(self) -> None:
        if self._store is not None:
            with contextlib.suppress(Exception):
                self._store.close()
            self._store = None

    def _znode(self, fn: Callable[[ZooKeeperMetadataStore], Any]) -> Any:
        try:
            return fn(self.store())
        except NoNodeError:
            return None
        except (MetastoreError, OSError, TimeoutError):
            self.close_store()  # a new session next time
            return None

    def registered(self) -> list[int]:
        ids = self._znode(lambda s: s.get_children(paths.BROKER_IDS))
        return sorted(int(i) for i in ids or [])

    def partition_state(self, topic: str, partition: int
                        ) -> paths.LeaderIsrAndControllerEpoch | None:
        got = self._znode(lambda s: s.get(paths.partition_state_path(topic, partition)))
        return None if got is None else paths.LeaderIsrAndControllerEpoch.decode(got[0])

    def topic_partitions(self, topic: str) -> dict[int, tuple[int, ...]]:
        got = self._znode(lambda s: s.get(paths.topic_path(topic)))
        if got is None:
            return {}
        doc = json.loads(got[0])
        return {int(p): tuple(r) for p, r in doc.get("partitions", {}).items()}

    def leader_of(self, topic: str, partition: int) -> str | None:
        state = self.partition_state(topic, partition)
        if state is None or state.leader < 0:
            return None
        return f"b{state.leader}"

    # -- processes

    def start_zookeepers(self, timeout: float = 60.0) -> None:
        for z in self.zookeepers.values():
            z.start()
        wait(lambda: all(z.mode() for z in self.zookeepers.values()), timeout,
             "every ZooKeeper node serving",
             lambda: {n: (z.alive, z.log_tail(5)) for n, z in self.zookeepers.items()})

    def start_broker(self, name: str) -> None:
        self.brokers[name].start()

    def start_brokers(self, timeout: float = 90.0) -> None:
        for b in self.brokers.values():
            b.start()
        wanted = sorted(b.broker_id for b in self.brokers.values())
        wait(lambda: self.registered() == wanted, timeout, f"brokers {wanted} registered",
             lambda: {n: (b.alive, b.log_tail(5)) for n, b in self.brokers.items()})

    def healthy(self, topics: list[str]) -> str | None:
        """None when every node runs, every broker is registered and every partition of
        ``topics`` has a leader and a full ISR; else what is not yet so."""
        for name in [*self.zookeepers, *self.brokers]:
            node = self.node(name)
            if not node.alive:
                return f"{name} is not running"
        if any(not z.mode() for z in self.zookeepers.values()):
            return "ZooKeeper not serving"
        wanted = sorted(b.broker_id for b in self.brokers.values())
        if self.registered() != wanted:
            return f"registered {self.registered()}, not {wanted}"
        for topic in topics:
            assignment = self.topic_partitions(topic)
            if not assignment:
                return f"{topic}: no assignment"
            for p, replicas in assignment.items():
                state = self.partition_state(topic, p)
                if state is None or state.leader < 0:
                    return f"{topic}-{p}: no leader"
                if sorted(state.isr) != sorted(replicas):
                    return f"{topic}-{p}: ISR {list(state.isr)} of {list(replicas)}"
        return None

    def stop_all(self) -> None:
        for b in self.brokers.values():
            b.resume()
            b.signal(signal.SIGTERM)
        for b in self.brokers.values():
            b.stop(30)
        for z in self.zookeepers.values():
            z.stop(10)


def wait(predicate: Callable[[], Any], timeout: float, what: str,
         diagnose: Callable[[], Any] | None = None, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = predicate()
        except Exception:  # transient: not yet
            got = None
        if got:
            return got
        if time.monotonic() >= deadline:
            extra = f": {diagnose()}" if diagnose is not None else ""
            raise HarnessError(f"timed out after {timeout:g} s waiting for {what}{extra}")
        time.sleep(interval)


def create_topics(bootstrap: str, topics: list[str], configs: dict[str, str]) -> None:
    from klog.client.admin import AdminClient, NewTopic

    async def create() -> None:
        async with AdminClient(bootstrap, request_timeout_ms=20000) as admin:
            result = await admin.create_topics(
                [NewTopic(t, PARTITIONS, 3, configs=configs) for t in topics])
        errors = {t: e for t, e in result.items() if e is not None}
        if errors:
            raise HarnessError(f"creating topics failed: {errors}")

    asyncio.run(create())


def read_back(bootstrap: str, topic: str, read_committed: bool, timeout: float = 90.0
              ) -> dict[int, list[tuple[int, str]]]:
    """Every record of every partition, from the start to the high watermark (read_
    committed: to the last stable offset, which equals it once every transaction ended)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"chaos-check-{time.monotonic_ns()}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        "logger": logging.getLogger("rdkafka")})
    try:
        ends = {p: _high_watermark(consumer, topic, p, timeout) for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + timeout
        while True:
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    continue
                out[msg.partition()].append((msg.offset(), msg.value().decode()))
            positions = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
            if all(tp.offset >= ends[tp.partition] or ends[tp.partition] == 0
                   for tp in positions):
                return out
            if time.monotonic() > deadline:
                raise HarnessError(f"reading {topic} back: positions "
                                   f"{[(tp.partition, tp.offset) for tp in positions]}, "
                                   f"ends {ends}")
    finally:
        consumer.close()


def _high_watermark(consumer: Any, topic: str, partition: int, timeout: float) -> int:
    """ListOffsets, retried for ``timeout`` s: right after healing a broker may not know
    its partitions yet (as in Kafka, UNKNOWN_TOPIC_OR_PARTITION is retriable); one that
    never learns them is a defect, reported with the error."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                      timeout=10)[1])
        except confluent_kafka.KafkaException as exc:
            if time.monotonic() > deadline:
                raise HarnessError(f"{topic}-{partition}: no high watermark within "
                                   f"{timeout:g} s after healing: {exc}") from None
            time.sleep(1)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap,
                                         "group.id": "chaos-ends",
                                         "logger": logging.getLogger("rdkafka")})
    try:
        return {p: _high_watermark(consumer, topic, p, 60) for p in range(PARTITIONS)}
    finally:
        consumer.close()


def klog_verify(log_dir: Path) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "klog", "verify", str(log_dir)],
                          capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


@contextlib.contextmanager
def _signals_as_exit() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run through ``finally`` like SIGINT does."""
    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def machine_state() -> dict[str, Any]:
    load = os.getloadavg()
    return {"kernel": platform.release(), "cpus": os.cpu_count(),
            "loadavg": [round(x, 2) for x in load], "python": platform.python_version(),
            "confluent_kafka": confluent_kafka.version()[0],
            "librdkafka": confluent_kafka.libversion()[0]}


def run(opts: Options) -> dict[str, Any]:
    log = opts.log
    started = time.monotonic()
    out = opts.out or Path(tempfile.mkdtemp(prefix=f"klog-chaos-{opts.seed}-"))
    out.mkdir(parents=True, exist_ok=True)
    schedule = Schedule(opts.seed, opts.nemeses, opts.hold, opts.quiet)
    log(f"chaos run: seed {opts.seed}, {opts.duration:g} s, {opts.zookeepers} ZooKeeper "
        f"node(s), {opts.brokers} brokers, acks={opts.acks}"
        f"{', unclean leader election' if opts.unclean else ''}; logs in {out}")
    log("schedule: " + ", ".join(f"{s.kind} {s.hold:g}s/{s.quiet:g}s"
                                 for s in schedule.preview(opts.duration)))
    hosts = [f"z{i}" for i in range(1, opts.zookeepers + 1)] + \
            [f"b{i}" for i in range(1, opts.brokers + 1)]
    net = Network(hosts, log_dir=out)
    overrides = {"unclean.leader.election.enable": "true"} if opts.unclean else {}
    topic_configs = {"min.insync.replicas": "2",
                     "unclean.leader.election.enable": "true" if opts.unclean else "false"}
    cluster: ChaosCluster | None = None
    workloads: dict[str, Workload] = {}
    nemesis: Nemesis | None = None
    events: list[Event] = []
    result: dict[str, Any] = {"seed": opts.seed, "duration": opts.duration,
                              "options": {"zookeepers": opts.zookeepers,
                                          "brokers": opts.brokers, "nemeses": opts.nemeses,
                                          "acks": opts.acks, "unclean": opts.unclean},
                              "machine": machine_state(), "events": [], "logs": str(out)}
    failed = True
    client_log = logging.FileHandler(out / "clients.log")
    client_log.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.getLogger().addHandler(client_log)
    logging.getLogger().setLevel(logging.INFO)
    logging.getLogger("klog.client").setLevel(logging.DEBUG)  # retries, resets
    with _signals_as_exit():
        try:
            net.up()
            result["network"] = {"slot": net.slot, "subnet": net.subnet,
                                 "latency_means": "netem" if net.netem else "nfqueue"}
            log(f"network: slot {net.slot}, {net.subnet}, latency by "
                f"{'netem' if net.netem else 'NFQUEUE (no sch_netem in this kernel)'}")
            cluster = ChaosCluster(net, out, opts.zookeepers, opts.brokers, overrides)
            cluster.start_zookeepers()
            cluster.start_brokers()
            topics = list(TOPICS.values())
            create_topics(cluster.bootstrap, topics, topic_configs)
            wait(lambda: cluster.healthy(topics) is None, 60, "the topics' full ISRs",
                 lambda: cluster.healthy(topics))
            clock = Clock()
            bootstrap = cluster.bootstrap
            workloads = {
                "idempotent": ProducerWorkload("idempotent", clock, bootstrap,
                                               TOPICS["idempotent"], PARTITIONS,
                                               producers=2, rate=opts.rate, acks=opts.acks),
                "klog": KlogProducerWorkload("klog", clock, bootstrap, TOPICS["klog"],
                                             PARTITIONS, producers=1, rate=opts.rate,
                                             acks=opts.acks),
                "transactions": TransactionWorkload(clock, bootstrap, TOPICS["transactions"],
                                                    PARTITIONS, opts.seed),
                "group-feed": ProducerWorkload("group-feed", clock, bootstrap,
                                               TOPICS["group"], PARTITIONS, producers=1,
                                               rate=opts.rate / 2, acks=opts.acks),
                "group": GroupWorkload(clock, bootstrap, TOPICS["group"], PARTITIONS,
                                       opts.seed),
                "reader": LiveReader("reader", clock, bootstrap, TOPICS["idempotent"],
                                     PARTITIONS),
                "txn-reader": LiveReader("txn-reader", clock, bootstrap,
                                         TOPICS["transactions"], PARTITIONS,
                                         read_committed=True),
            }
            for w in workloads.values():
                w.start()
            producers = [w for w in workloads.values() if isinstance(w, ProducerWorkload)]
            wait(lambda: all(w.acked_times() for w in producers), 60,
                 "the first acknowledgements")
            log(f"workloads running ({clock.now():.1f} s); nemesis for {opts.duration:g} s")
            nemesis = Nemesis(cluster, opts.seed, TOPICS["idempotent"], PARTITIONS)
            end = clock.now() + opts.duration
            while clock.now() < end:
                step = schedule.next()
                event = nemesis.start(step.kind, clock.now())
                events.append(event)
                log(f"{event.start:7.1f} s  {step.kind} {event.targets} {event.detail}")
                time.sleep(min(step.hold, max(1.0, end - clock.now())))
                nemesis.heal()
                event.heal = clock.now()
                log(f"{event.heal:7.1f} s  healed {step.kind}")
                time.sleep(min(step.quiet, max(0.0, end - clock.now())))
            log(f"{clock.now():7.1f} s  nemesis over; waiting for the cluster to be quiet")
            quiet_from = clock.now()
            wait(lambda: cluster.healthy(topics) is None, 180,
                 "every broker registered and every ISR full after healing",
                 lambda: cluster.healthy(topics))
            recovered_at = clock.now()
            result["recovery_s"] = round(recovered_at - quiet_from, 1)
            time.sleep(10)  # the workloads show they work again
            for w in workloads.values():
                w.stop()
            producers_end = clock.now()
            log(f"{clock.now():7.1f} s  workloads stopped; reading everything back")
            wait(lambda: cluster.healthy(topics) is None, 120, "a quiet cluster",
                 lambda: cluster.healthy(topics))
            finals = {name: read_back(bootstrap, topic, read_committed=name == "transactions")
                      for name, topic in TOPICS.items()}
            group_w = workloads["group"]
            assert isinstance(group_w, GroupWorkload)
            final_committed = group_w.final_committed()
            ends = {topic: end_offsets(bootstrap, topic) for topic in TOPICS.values()}
            assignments = {topic: cluster.topic_partitions(topic) for topic in TOPICS.values()}
            cluster.close_store()
            cluster.stop_all()
            verify = {name: klog_verify(b.log_dir) for name, b in cluster.brokers.items()}
            replica_notes = []
            for topic, partitions in assignments.items():
                for p, replicas in partitions.items():
                    dirs = {r: cluster.brokers[f"b{r}"].log_dir / f"{topic}-{p}"
                            for r in replicas}
                    replica_notes += [f"{topic}-{p}: {n}" for n in
                                      checker.compare_replicas(dirs, ends[topic][p])]
            result.update(_check(opts, events, workloads, finals, final_committed, verify,
                                 replica_notes, producers_end, recovered_at))
            failed = not result["valid"]
        except BaseException as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
            result["valid"] = False
            log(f"run failed: {result['error']}")
            if not isinstance(exc, Exception):
                raise
        finally:
            if nemesis is not None:
                with contextlib.suppress(Exception):
                    nemesis.heal()
            for w in workloads.values():
                w.running.clear()
            result["events"] = [asdict(e) for e in events]
            with contextlib.suppress(Exception):  # kept with the logs, pass or fail
                (out / "histories.json").write_text(json.dumps(_histories(workloads)))
            result["wall_time_s"] = round(time.monotonic() - started, 1)
            if cluster is not None:
                cluster.close_store()
                for node in [*cluster.brokers.values(), *cluster.zookeepers.values()]:
                    with contextlib.suppress(Exception):
                        node.kill()
            # One deadline for them all: a producer flushing to brokers just killed holds
            # its thread until the deadline, and seven in a row outlived a SIGTERM's wait.
            stop_deadline = time.monotonic() + 15
            for w in workloads.values():
                w.stop(stop_deadline - time.monotonic())
            net.down()
            logging.getLogger().removeHandler(client_log)
            client_log.close()
            (out / "result.json").write_text(json.dumps(result, indent=2))
            if opts.json_path is not None:
                opts.json_path.write_text(json.dumps(result, indent=2) + "\n")
            if failed or opts.keep:
                log(f"kept {out} (seed {opts.seed}; replay: python -m tests.chaos "
                    f"--seed {opts.seed} --duration {opts.duration:g})")
                result["logs"] = str(out)
            else:
                shutil.rmtree(out, ignore_errors=True)
                result["logs"] = None
    return result


def _histories(workloads: dict[str, Workload]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, w in workloads.items():
        if isinstance(w, ProducerWorkload):
            out[name] = ops_json(w.ops)
        elif isinstance(w, TransactionWorkload):
            out[name] = [asdict(t) for t in w.txns]
        elif isinstance(w, LiveReader):
            out[name] = w.seen
        elif isinstance(w, GroupWorkload):
            out[name] = {"commits": [asdict(c) for c in w.commits], "observed": w.observed}
    return out


def _check(opts: Options, events: list[Event], workloads: dict[str, Workload],
           finals: dict[str, dict[int, list[tuple[int, str]]]], final_committed: dict[int, int],
           verify: dict[str, tuple[int, str]], replica_notes: list[str], end: float,
           recovered_at: float) -> dict[str, Any]:
    anomalies: list[str] = []
    informational: list[str] = []
    lossy = opts.acks != "all" or opts.unclean
    counts: dict[str, Any] = {}
    rows: dict[str, checker.ProducerCounts] = {}
    ack_times: list[float] = []
    for name, topic_key in (("idempotent", "idempotent"), ("klog", "klog"),
                            ("group-feed", "group")):
        w = workloads[name]
        assert isinstance(w, ProducerWorkload)
        total, per_kind, notes = checker.check_producers(w.ops, finals[topic_key], events)
        counts[name] = {**asdict(total), "client_errors": w.errors}
        for kind, c in per_kind.items():
            rows.setdefault(kind, checker.ProducerCounts()).add(c)
        ack_times += w.acked_times()
        after = checker.acknowledged_after(w.acked_times(), recovered_at)
        counts[name]["acked_after_recovery"] = after
        if not after:
            anomalies.append(f"{name}: no record acknowledged in the 10 s after the cluster "
                             f"recovered (at {recovered_at:.1f} s): the client is stuck")
        bad = total.lost + total.offset_mismatch
        strict = total.duplicated + total.reordered
        if notes and (strict or (bad and not lossy) or any("no producer" in n for n in notes)):
            anomalies += [f"{name}: {n}" for n in notes[:30]]
        elif notes:
            informational += [f"{name}: {n}" for n in notes[:30]]
    reader = workloads["reader"]
    assert isinstance(reader, LiveReader)
    phantoms, notes = checker.check_live_reads(reader.seen, finals["idempotent"])
    counts["reader"] = {"read": len(reader.seen), "phantom_reads": phantoms}
    (informational if lossy else anomalies).extend(f"reader: {n}" for n in notes)
    txn_w = workloads["transactions"]
    txn_reader = workloads["txn-reader"]
    assert isinstance(txn_w, TransactionWorkload) and isinstance(txn_reader, LiveReader)
    txn_counts, notes = checker.check_transactions(txn_w.txns, finals["transactions"],
                                                   txn_reader.seen)
    committed_after = sum(1 for t in txn_w.txns
                          if t.outcome == "committed" and (t.ended or 0) >= recovered_at)
    counts["transactions"] = {**asdict(txn_counts), "read_committed_live": len(txn_reader.seen),
                              "committed_after_recovery": committed_after,
                              "client_errors": txn_w.errors}
    if not committed_after:
        anomalies.append("transactions: none committed in the 10 s after the cluster "
                         f"recovered (at {recovered_at:.1f} s)")
    if txn_counts.committed_lost and lossy and not (txn_counts.aborted_visible
                                                    or txn_counts.partial):
        informational += [f"transactions: {n}" for n in notes[:30]]
    else:
        anomalies += [f"transactions: {n}" for n in notes[:30]]
    group_w = workloads["group"]
    assert isinstance(group_w, GroupWorkload)
    group_counts, notes = checker.check_group(group_w.commits, group_w.observed,
                                              final_committed)
    group_counts.joins, group_counts.leaves = group_w.joins, group_w.leaves
    commits_after = sum(1 for c in group_w.commits if c.time >= recovered_at)
    counts["group"] = {**asdict(group_counts), "final_committed": final_committed,
                       "commits_after_recovery": commits_after,
                       "client_errors": group_w.errors}
    if not commits_after:  # a rebalance may take the whole window: worth a look, no more
        informational.append("group: no offset committed in the 10 s after the cluster "
                             "recovered")
    (informational if lossy else anomalies).extend(f"group: {n}" for n in notes)
    for broker, (code, text) in verify.items():
        if code != 0:
            anomalies.append(f"klog verify {broker}: exit {code}: {text[-500:]}")
    counts["verify"] = {b: code for b, (code, _t) in verify.items()}
    (informational if lossy else anomalies).extend(f"replicas: {n}" for n in replica_notes)
    unavailable = checker.unavailability(events, ack_times, end)
    table_rows: dict[str, dict[str, Any]] = {}
    for kind in [*dict.fromkeys(e.kind for e in events), checker.QUIET]:
        c = rows.get(kind, checker.ProducerCounts())
        worst = max((u for e, u in zip(events, unavailable, strict=True) if e.kind == kind),
                    default=0.0)
        table_rows[kind] = {"operations": c.operations, "acked": c.acked, "lost": c.lost,
                            "duplicated": c.duplicated, "reordered": c.reordered,
                            "max_unavailability_s": worst}
    for e, u in zip(events, unavailable, strict=True):
        e.detail["max_unavailability_s"] = u
    return {"workloads": counts, "table": table_rows, "anomalies": anomalies,
            "informational": informational, "valid": not anomalies}
