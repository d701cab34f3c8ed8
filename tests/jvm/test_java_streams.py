"""Kafka Streams (the version pinned in tests/jvm/pom.xml) with
processing.guarantee=exactly_once_v2 against klog.

A word count on a 3-broker cluster: its repartition topic (which Streams purges with
DeleteRecords) and its state store's compacted changelog topic are made and used on klog;
two application instances rebalance while lines flow in, one is killed -9 and restarted,
a broker is killed -9 and restarted; the committed output must hold, for every word,
exactly the counts 1, 2, ..., N (a lost or repeated update would show), and interactive
queries of the two instances together give the final counts. And a windowed count whose
window store is queried interactively."""

from __future__ import annotations

import random
import re
import struct
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.cluster.conftest import Cluster
from tests.jvm.conftest import wait_until_settled
from tests.jvm.driver import JavaProcess, Jvm

pytestmark = pytest.mark.timeout(300)

WORDS = [f"w{i:02d}" for i in range(40)]
LINES = 1500


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3"}


def make_lines(count: int) -> list[str]:
    rng = random.Random(30)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6))) for _ in range(count)]


class LineFeeder(threading.Thread):
    """Produces the lines at a steady pace (acks=all, idempotent), counting them."""

    def __init__(self, bootstrap: str, topic: str, lines: list[str], seconds: float) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})
        self.topic, self.lines, self.pause = topic, lines, seconds / len(lines)
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for i, line in enumerate(self.lines):
                self.producer.produce(self.topic, line.encode(), key=f"line-{i}".encode())
                self.producer.poll(0)
                self.sent = i + 1
                time.sleep(self.pause)
            assert self.producer.flush(60) == 0, "lines left unacknowledged"
        except BaseException as e:  # reported by the test
            self.error = e

    def wait_for(self, fraction: float) -> None:
        deadline = time.monotonic() + 60
        while self.sent < fraction * len(self.lines):
            assert self.error is None, self.error
            assert time.monotonic() < deadline, "the feeder fell behind"
            time.sleep(0.05)


class CommittedCounts:
    """Every count update of the output topic, per word, as read_committed reads them."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                                  "isolation.level": "read_committed",
                                  "enable.auto.commit": False})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.updates: dict[str, list[int]] = defaultdict(list)

    def read_until(self, expected: Counter[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(self.latest(w) < n for w, n in expected.items()):
            assert time.monotonic() < deadline, (
                f"counts not reached in {timeout} s: "
                f"{ {w: (self.latest(w), n) for w, n in expected.items() if self.latest(w) < n} }")
            self.poll(0.5)
        self.poll(2.0)  # anything beyond the expected counts would come now

    def poll(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for m in self.consumer.consume(1000, timeout=0.1):
                assert m.error() is None, m.error()
                self.updates[m.key().decode()].append(struct.unpack(">q", m.value())[0])

    def latest(self, word: str) -> int:
        return self.updates[word][-1] if self.updates[word] else 0

    def close(self) -> None:
        self.consumer.close()


def running(instance: JavaProcess, timeout: float = 90) -> None:
    while instance.event("state", timeout)["state"] != "RUNNING":
        pass


def query(instance: JavaProcess) -> dict[str, Any]:
    instance.send({"cmd": "query"})
    return instance.event("query", 30)


def test_word_count_exactly_once_through_rebalances_and_kills(
        cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    c = cluster(brokers=3, overrides={
        "min.insync.replicas": "2",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"})
    wait_until_settled(c)
    bootstrap = c.bootstrap_servers
    app, source, sink = "wordcount", "lines", "word-counts"
    c.create_topic(source, partitions=4, replication_factor=3)
    c.create_topic(sink, partitions=4, replication_factor=3)
    lines = make_lines(LINES)
    expected = Counter(w for line in lines for w in re.split(r"\W+", line) if w)

    def instance(name: str) -> JavaProcess:
        return JavaProcess.scenario(
            "streams_wordcount", tmp_path / f"{name}.log", bootstrap=bootstrap,
            application_id=app, input=source, output=sink, server=f"{name}:1",
            state_dir=str(tmp_path / f"state-{name}"),
            config={"replication.factor": "3", "num.stream.threads": "1"})

    a = instance("a")
    b: JavaProcess | None = None
    feeder = LineFeeder(bootstrap, source, lines, seconds=20)
    counts = CommittedCounts(bootstrap, sink, 4)
    try:
        running(a)
        feeder.start()
        feeder.wait_for(0.2)
        b = instance("b")  # a second instance joins while lines flow: a rebalance
        running(b)
        feeder.wait_for(0.4)
        a.kill()  # kill -9 of an instance mid-stream, then the same instance again
        a = instance("a")
        running(a)
        feeder.wait_for(0.6)
        victim = c.leader(sink, 0)
        c.kill(victim)  # kill -9 of a broker mid-stream
        c.wait(lambda: victim not in c.registered(), 30, "the killed broker's session to end")
        c.start(victim)
        feeder.join(90)
        assert feeder.error is None, feeder.error
        counts.read_until(expected, timeout=150)
        for word, n in expected.items():
            assert counts.updates[word] == list(range(1, n + 1)), (
                f"{word}: the committed updates are not exactly 1..{n}: {counts.updates[word]}")
        assert set(counts.updates) == set(expected)

        # Interactive queries: each instance holds the words of its active tasks, and
        # Streams names the instance that holds each one as its active host.
        union: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while True:
            answers = {"a:1": query(a), "b:1": query(b)}
            if all("error" not in q and q["state"] == "RUNNING" for q in answers.values()):
                union = {}
                for host, q in answers.items():
                    for word, n in q["counts"].items():
                        union[word] = n
                        assert q["active_hosts"][word] == host
                if union == dict(expected):
                    break
            assert time.monotonic() < deadline, f"queries never matched: {answers}"
            time.sleep(0.5)

        # The internal topics Streams made on klog: a compacted changelog and a
        # repartition topic whose consumed records Streams deleted.
        admin = AdminClient({"bootstrap.servers": bootstrap})
        changelog, repartition = f"{app}-counts-changelog", f"{app}-words-repartition"
        topics = admin.list_topics(timeout=10).topics
        assert changelog in topics and repartition in topics
        configs = {r.name: r for r in [ConfigResource("topic", changelog),
                                       ConfigResource("topic", repartition)]}
        described = {name: future.result(10) for name, future in zip(
            configs, admin.describe_configs(list(configs.values())).values(), strict=True)}
        assert described[changelog]["cleanup.policy"].value == "compact"
        assert described[repartition]["cleanup.policy"].value == "delete"
        purged = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
        try:
            starts = [purged.get_watermark_offsets(TopicPartition(repartition, p), timeout=10)[0]
                      for p in range(len(topics[repartition].partitions))]
        finally:
            purged.close()
        assert sum(starts) > 0, "Streams deleted nothing from its repartition topic"
    finally:
        counts.close()
        for inst in (a, b):
            if inst is not None and inst.alive():
                inst.send({"cmd": "stop"})
        for inst in (a, b):
            if inst is not None:
                try:
                    inst.result(timeout=40)
                finally:
                    inst.stop()


def test_windowed_count_and_its_interactive_query(jvm: Jvm, bootstrap: str, topic: str,
                                                  tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    output = f"{topic}-out"
    for future in admin.create_topics([NewTopic(topic, 2, 1), NewTopic(output, 2, 1)]).values():
        future.result(15)
    base = (int(time.time() * 1000) // 10_000) * 10_000 - 60_000  # a window boundary
    producer = Producer({"bootstrap.servers": bootstrap})
    expected: Counter[str] = Counter()
    for i in range(60):
        user = f"user{i % 3}"
        ts = base + (i * 700) % 30_000  # spread over three 10 s windows
        producer.produce(topic, b"click", key=user.encode(), timestamp=ts)
        expected[f"{user}@{base + ((i * 700) % 30_000) // 10_000 * 10_000}"] += 1
    assert producer.flush(20) == 0
    got = jvm.call("streams_windowed_count", timeout=120, bootstrap=bootstrap,
                   application_id=f"windows-{topic}", input=topic, output=output,
                   state_dir=str(tmp_path / "state"), window_ms=10_000, expect=60,
                   config={"replication.factor": "1"})
    assert got["total"] == 60
    assert got["windows"] == dict(expected)
    # The committed output's last update of each window is its count.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(output, p, 0) for p in range(2)])
        last: dict[str, int] = {}
        deadline = time.monotonic() + 20
        while last != dict(expected) and time.monotonic() < deadline:
            for m in consumer.consume(500, timeout=0.2):
                assert m.error() is None, m.error()
                last[m.key().decode()] = struct.unpack(">q", m.value())[0]
        assert last == dict(expected)
    finally:
        consumer.close()
