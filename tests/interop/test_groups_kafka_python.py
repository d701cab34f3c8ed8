"""kafka-python consumer groups against a klog broker.

Three KafkaConsumers share a topic: the assignment covers every partition exactly once; one
closes (LeaveGroup) and the others take over; one crashes (a member in a subprocess killed
with SIGKILL, no LeaveGroup) and the session timeout evicts it. Commits are checked with
committed(), including a commit from outside group management into the empty group.

Two kafka-python 3.0.12 races, both on a JoinGroup/SyncGroup round still in flight when
poll() returns, are kept out of the way (klog answers as Apache Kafka's coordinator does):
- a round that finishes while nobody is inside poll() is dropped and a new JoinGroup sent;
  from the group's leader that is a rebalance (Kafka rebalances on a leader's JoinGroup in
  Stable too), so three consumers polled in turn from one thread with short timeouts made
  the leader restart the rebalance over and over. Each consumer has its own polling thread,
  as applications run them.
- a leader that rejoins because its topic metadata changed since it assigned stops asking
  for the round once the new assignment is computed, so nobody collects the answer: the
  member never becomes stable, stops heartbeating and is evicted. Each consumer knows the
  topic's partitions before its first JoinGroup, so its metadata does not change under it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata

from klog.testing import KlogBroker
from tests.interop.conftest import wait_until_serving

PARTITIONS = 6
SESSION_MS = 2000


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"group.min.session.timeout.ms": "500", "offsets.topic.num.partitions": "4"}


def create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()


def make_consumer(bootstrap: str, group: str, topic: str) -> KafkaConsumer:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group,
        session_timeout_ms=SESSION_MS, heartbeat_interval_ms=200,
        max_poll_interval_ms=20000, request_timeout_ms=25000,
        auto_offset_reset="earliest", enable_auto_commit=False,
        metadata_max_age_ms=1000,
    )
    # The topic's partitions are known before the first JoinGroup (see the module
    # docstring): a leader that assigned from empty metadata rejoins when it arrives.
    deadline = time.monotonic() + 10
    while consumer.partitions_for_topic(topic) != set(range(PARTITIONS)):
        assert time.monotonic() < deadline, "the consumer never saw the topic's partitions"
        time.sleep(0.05)
    return consumer


class Poller:
    """Polls one consumer from its own thread until stopped."""

    def __init__(self, consumer: KafkaConsumer) -> None:
        self.consumer = consumer
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.consumer.poll(timeout_ms=200)
        except BaseException as exc:  # reported by the test thread
            self.error = exc

    def partitions(self) -> set[int]:
        if self.error is not None:
            raise AssertionError(f"poll failed: {self.error!r}") from self.error
        return {tp.partition for tp in set(self.consumer.assignment())}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "poll() did not return"


def settle(pollers: list[Poller], deadline_s: float = 25.0) -> list[set[int]]:
    """Wait until the members' assignments cover every partition once and hold 0.6 s."""
    deadline = time.monotonic() + deadline_s
    stable_since = None
    while True:
        parts = [p.partitions() for p in pollers]
        every = sorted(p for ps in parts for p in ps)
        if every == list(range(PARTITIONS)) and all(parts):
            stable_since = stable_since or time.monotonic()
            if time.monotonic() - stable_since > 0.6:
                return parts
        else:
            stable_since = None
        assert time.monotonic() < deadline, f"no complete assignment: {parts}"
        time.sleep(0.05)


@pytest.fixture
def consumers() -> Iterator[list[KafkaConsumer]]:
    made: list[KafkaConsumer] = []
    yield made
    for c in made:
        c.close(autocommit=False)


@pytest.fixture
def pollers() -> Iterator[list[Poller]]:
    running: list[Poller] = []
    yield running
    for p in running:
        p.stop()


CRASHER = r"""
import sys, warnings
warnings.simplefilter("ignore")
from kafka import KafkaConsumer
bootstrap, group, topic = sys.argv[1:4]
consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                         session_timeout_ms=2000, heartbeat_interval_ms=200,
                         max_poll_interval_ms=20000, request_timeout_ms=25000,
                         enable_auto_commit=False)
told = False
while True:
    consumer.poll(timeout_ms=500)
    if consumer.assignment() and not told:
        print("ASSIGNED", flush=True)
        told = True
"""


def start_crasher(bootstrap: str, group: str, topic: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CRASHER, bootstrap, group, topic],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_three_members_join_leave_and_crash(broker: KlogBroker, topic: str,
                                            consumers: list[KafkaConsumer],
                                            pollers: list[Poller]) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic)
    # Members start once the topic is served: a leader that saw a different partition
    # list than its metadata now shows would ask for another rebalance.
    wait_until_serving(broker, [topic])
    group = f"kp-{topic}"
    consumers.extend(make_consumer(bootstrap, group, topic) for _ in range(3))
    pollers.extend(Poller(c) for c in consumers)
    parts = settle(pollers)
    assert sorted(len(p) for p in parts) == [2, 2, 2]

    leaving = pollers.pop(0)
    leaving.stop()
    leaving.consumer.close(autocommit=False)
    consumers.remove(leaving.consumer)
    parts = settle(pollers)
    assert sorted(len(p) for p in parts) == [3, 3]

    # A member in another process joins, then is killed (SIGKILL: no LeaveGroup).
    crasher = start_crasher(bootstrap, group, topic)
    try:
        ready, _, _ = select.select([crasher.stdout], [], [], 25)
        assert ready, "the crasher got no assignment"
        line = crasher.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("ASSIGNED"), line
        # The two in-process members shed partitions for the newcomer.
        deadline = time.monotonic() + 25
        while sum(len(p.partitions()) for p in pollers) != 4:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        crasher.send_signal(signal.SIGKILL)
        crasher.wait(10)
        killed_at = time.monotonic()
        parts = settle(pollers)
        assert sorted(len(p) for p in parts) == [3, 3]
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 * 0.5
    finally:
        if crasher.poll() is None:
            crasher.kill()
            crasher.wait()
        if crasher.stdout is not None:
            crasher.stdout.close()


def test_commit_and_committed(broker: KlogBroker, topic: str,
                              consumers: list[KafkaConsumer]) -> None:
    bootstrap = broker.bootstrap_servers
    create_topic(bootstrap, topic)
    group = f"kp-commit-{topic}"
    consumer = make_consumer(bootstrap, group, topic)
    consumers.append(consumer)
    poller = Poller(consumer)
    try:
        settle([poller])
    finally:
        poller.stop()
    offsets = {TopicPartition(topic, p): OffsetAndMetadata(p * 10, f"m{p}", -1)
               for p in range(PARTITIONS)}
    consumer.commit(offsets)
    for p in range(PARTITIONS):
        assert consumer.committed(TopicPartition(topic, p)) == p * 10
    consumers.remove(consumer)
    consumer.close(autocommit=False)
    # The group is Empty now: a consumer outside group management may commit into it.
    simple = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                           enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        simple.assign([tp])
        simple.commit({tp: OffsetAndMetadata(99, "", -1)})
        assert simple.committed(tp) == 99
    finally:
        simple.close(autocommit=False)
