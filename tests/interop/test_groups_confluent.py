"""confluent-kafka (librdkafka) consumer groups against a klog broker.

Groups of three members, eager (range) and cooperative-sticky: they join, one leaves, one
crashes (a member in a subprocess killed with SIGKILL: no LeaveGroup, the session timeout
evicts it); at every settled point the members' assignments cover every partition exactly
once. A static member (group.instance.id) restarts without a rebalance; committed offsets
survive a broker restart.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klog.testing import KlogBroker
from tests.interop.conftest import wait_until_serving

PARTITIONS = 6
SESSION_MS = 2000


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "4", "num.partitions": str(PARTITIONS)}


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(10)


def consumer_config(bootstrap: str, group: str, **extra: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap, "group.id": group,
        "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 200,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 1000,
        **extra,
    }


class Member:
    """A consumer in this process; its assignment as librdkafka reports it."""

    def __init__(self, config: dict[str, object], topic: str) -> None:
        self.consumer = Consumer(config)
        self.assign_calls = 0
        self.consumer.subscribe([topic], on_assign=self._on_assign)
        self.closed = False

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assign_calls += 1

    def poll(self) -> None:
        if not self.closed:
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def settle(members: list[Member], deadline_s: float = 25.0,
           extra: Callable[[], set[int]] | None = None) -> list[set[int]]:
    """Poll until the live members' assignments partition all partitions; return them."""
    deadline = time.monotonic() + deadline_s
    stable_since = None
    while True:
        for m in members:
            m.poll()
        parts = [m.assignment() for m in members if not m.closed]
        every = [p for ps in parts for p in ps]
        if extra is not None:
            every += list(extra())
        complete = sorted(every) == list(range(PARTITIONS)) and all(parts)
        if complete:
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since > 0.6:  # held for a few heartbeats
                return parts
        else:
            stable_since = None
        assert time.monotonic() < deadline, f"no complete assignment: {parts}"


@pytest.fixture
def members() -> Iterator[list[Member]]:
    made: list[Member] = []
    yield made
    for m in made:
        m.close()


CRASHER = r"""
import json, sys, time
from confluent_kafka import Consumer
config = json.loads(sys.argv[1])
consumer = Consumer(config)
assigned = []
consumer.subscribe([sys.argv[2]], on_assign=lambda c, ps: assigned.append(1))
while True:
    consumer.poll(0.05)
    if consumer.assignment():
        print("ASSIGNED", sorted(tp.partition for tp in consumer.assignment()), flush=True)
"""


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_three_members_join_leave_and_crash(broker: KlogBroker, topic: str,
                                            members: list[Member], strategy: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic)
    group = f"grp-{strategy}-{topic}"
    config = consumer_config(bootstrap, group, **{"partition.assignment.strategy": strategy})
    members.extend(Member(config, topic) for _ in range(3))
    parts = settle(members)
    assert sorted(len(p) for p in parts) == [2, 2, 2]

    # One member leaves (LeaveGroup): the other two take everything.
    members[0].close()
    parts = settle(members)
    assert sorted(len(p) for p in parts) == [3, 3]

    # A third member in another process joins, then crashes without leaving.
    crasher = subprocess.Popen(
        [sys.executable, "-c", CRASHER, json.dumps(config), topic],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        crasher_parts: set[int] = set()

        def read_crasher() -> set[int]:
            return crasher_parts

        deadline = time.monotonic() + 25
        line = ""
        while not line.startswith("ASSIGNED"):
            assert time.monotonic() < deadline, "the crasher got no assignment"
            for m in members:
                m.poll()
            # Its first line tells us it holds partitions (read without blocking long).
            import select
            ready, _, _ = select.select([crasher.stdout], [], [], 0.05)
            if ready:
                line = crasher.stdout.readline()  # type: ignore[union-attr]
        crasher_parts.update(json.loads(line.split(" ", 1)[1]))
        parts = settle(members, extra=read_crasher)
        assert sorted([len(p) for p in parts] + [len(crasher_parts)]) == [2, 2, 2]
        crasher.send_signal(signal.SIGKILL)
        crasher.wait(10)
        killed_at = time.monotonic()
        crasher_parts.clear()
        parts = settle(members)
        evicted_after = time.monotonic() - killed_at
        assert sorted(len(p) for p in parts) == [3, 3]
        # Evicted by the session timeout (2 s), not sooner than it could be.
        assert evicted_after >= SESSION_MS / 1000 * 0.5
    finally:
        if crasher.poll() is None:
            crasher.kill()
            crasher.wait()
        if crasher.stdout is not None:
            crasher.stdout.close()


def test_static_member_restarts_without_rebalance(broker: KlogBroker, topic: str,
                                                  members: list[Member]) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic)
    group = f"grp-static-{topic}"
    configs = [consumer_config(bootstrap, group, **{"group.instance.id": f"inst-{i}",
                                                    "session.timeout.ms": "6000"})
               for i in range(3)]
    members.extend(Member(c, topic) for c in configs)
    parts = settle(members)
    before = {i: parts[i] for i in range(3)}
    calls = [m.assign_calls for m in members]
    # Member 2 goes away (a static member sends no LeaveGroup) and comes back.
    members[2].close()
    time.sleep(0.5)
    members[2] = Member(configs[2], topic)
    parts = settle(members)
    assert parts[2] == before[2]
    assert parts[0] == before[0] and parts[1] == before[1]
    # The others saw no rebalance at all.
    assert [m.assign_calls for m in members[:2]] == calls[:2]


def test_committed_offsets_survive_a_broker_restart(broker: KlogBroker, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(60):
        producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(10) == 0
    group = f"grp-commit-{topic}"
    consumer = Consumer(consumer_config(bootstrap, group))
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 25
    while seen < 30:
        assert time.monotonic() < deadline
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            seen += 1
    consumer.commit(asynchronous=False)
    committed = {tp.partition: tp.offset for tp in consumer.committed(
        [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)}
    consumer.close()
    assert sum(o for o in committed.values() if o >= 0) >= 30

    broker.restart()
    wait_until_serving(broker, [topic])
    again = Consumer(consumer_config(bootstrap, group))
    deadline = time.monotonic() + 25
    while True:
        try:
            after = {tp.partition: tp.offset for tp in again.committed(
                [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=5)}
            break
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    again.close()
    assert after == committed


def test_a_stable_group_survives_a_broker_restart(broker: KlogBroker, topic: str,
                                                  members: list[Member]) -> None:
    """The group record is reloaded at start-up: the members keep their generation and
    assignments (heartbeats go on), no rebalance."""
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic)
    config = consumer_config(bootstrap, f"grp-restart-{topic}", **{"session.timeout.ms": 15000})
    members.extend(Member(config, topic) for _ in range(2))
    before = settle(members)
    calls = [m.assign_calls for m in members]
    broker.restart()
    wait_until_serving(broker, [topic])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # several heartbeats against the restarted broker
        for m in members:
            m.poll()
    assert settle(members) == before
    assert [m.assign_calls for m in members] == calls
