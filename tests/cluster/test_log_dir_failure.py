"""A log dir that fails under produce load, on real brokers over ZooKeeper: broker 1 has
two log dirs, one of them a small tmpfs that librdkafka's acks=all producer fills. The
full disk's I/O error takes that dir offline on broker 1; it tells the controller
(/log_dir_event_notification), leadership of the partition there moves to another in-sync
replica, the producer follows it, and no acknowledged record is lost; broker 1 goes on
leading the partition of its other dir. A standalone broker whose only log dir fails
shuts down.

The tmpfs is mounted by the test (root, CAP_SYS_ADMIN); without them the tests are skipped
with the reason. Every mount is unmounted on every exit path, after the brokers stop."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from klog.client.admin import AdminClient, NewTopic
from klog.client.consumer import Consumer, TopicPartition
from klog.protocol.errors import ErrorCode
from klog.testing import KlogBroker
from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.timeout(300)

#: Big enough for a few MB of records, small enough to fill in seconds.
TMPFS_BYTES = 3 << 20
#: One index entry per MiB of log (index.interval.bytes): the index pages are touched while
#: the disk has room, never at the moment it fills (a full tmpfs answers a write to a new
#: page of a mapped file with SIGBUS, not an error).
TOPIC_CONFIGS = {"index.interval.bytes": str(1 << 20), "segment.bytes": str(64 << 20),
                 "min.insync.replicas": "2"}


def _mount(path: Path, size: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                             str(path)], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN): "
                    f"{result.stderr.strip()}")


def _unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A TMPFS_BYTES tmpfs, unmounted at teardown (whatever happened)."""
    path = tmp_path / "small-disk"
    _mount(path, TMPFS_BYTES)
    try:
        yield path
    finally:
        _unmount(path)


class Producing:
    """librdkafka producing to one topic in a thread, acks=all and idempotent."""

    def __init__(self, bootstrap: str, topic: str, value_size: int = 1000) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.value_size = value_size
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                                "enable.idempotence": True, "linger.ms": 5,
                                "message.timeout.ms": 120_000})

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.append(msg.value())
            else:
                self.failed.append(str(err))

        i = 0
        while not self.stop.is_set():
            value = b"v-%08d-" % i
            producer.produce(self.topic, value + b"x" * (self.value_size - len(value)),
                             partition=0, on_delivery=delivered)
            i += 1
            producer.poll(0)
            if i % 50 == 0:
                time.sleep(0.01)
        producer.flush(150)

    def __enter__(self) -> Producing:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(180)


def _read(bootstrap: str, topic: str, count: int) -> list[bytes]:
    async def read() -> list[bytes]:
        async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            out: list[bytes] = []
            deadline = time.monotonic() + 90
            while len(out) < count and time.monotonic() < deadline:
                got = await consumer.getmany(timeout_ms=1000)
                out += [r.value or b"" for r in got.get(tp, [])]
            return out

    return asyncio.run(read())


def _admin(bootstrap: str, fn: Callable[[AdminClient], Any]) -> Any:
    async def run() -> Any:
        async with AdminClient(bootstrap) as admin:
            return await fn(admin)

    return asyncio.run(run())


def test_a_full_disk_moves_leadership_and_loses_nothing(
        cluster: Callable[..., Cluster], small_disk: Path, tmp_path: Path) -> None:
    other = tmp_path / "big-disk"
    c = cluster(3, per_broker={1: {"log.dirs": f"{small_disk},{other}"}})
    try:
        # "doomed" lands on the tmpfs (the first dir, no partition yet), "safe" on the
        # other dir; broker 1 leads both.
        for name in ("doomed", "safe"):
            async def create(admin: AdminClient, name: str = name) -> None:
                result = await admin.create_topics([NewTopic(
                    name, replica_assignment={0: [1, 2, 3]}, configs=TOPIC_CONFIGS)])
                assert result[name] is None, result[name]
            _admin(c.bootstrap_servers, create)
            c.wait_for_isr(name, 0, [1, 2, 3])
        assert c.leader("doomed", 0) == 1 and c.leader("safe", 0) == 1
        assert any(p.name == "doomed-0" for p in small_disk.iterdir())
        assert any(p.name == "safe-0" for p in other.iterdir())

        with Producing(c.bootstrap_servers, "doomed") as load:
            # The tmpfs fills; the dir fails; another replica leads.
            new_leader = c.wait_for_leader("doomed", 0, exclude={1}, timeout=90)
            marked = len(load.acked)
            c.wait(lambda: len(load.acked) > marked + 500, 60,
                   "records acknowledged by the new leader")
        assert new_leader in (2, 3)
        assert not load.failed, load.failed[:3]

        # Nothing acknowledged is lost, in order, no duplicates.
        got = _read(c.bootstrap_servers, "doomed", len(load.acked))
        assert got == load.acked

        # Broker 1 still leads and serves the partition of its other dir.
        assert c.leader("safe", 0) == 1
        producer = ck.Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
        for i in range(100):
            producer.produce("safe", b"safe-%d" % i, partition=0)
        assert producer.flush(30) == 0
        assert _read(c.bootstrap_of([1]), "safe", 100) == [b"safe-%d" % i for i in range(100)]

        # DescribeLogDirs: the tmpfs is offline, the other dir serves.
        dirs = _admin(c.bootstrap_servers, lambda a: a.describe_log_dirs([1]))[1]
        by_path = {d.log_dir: d for d in dirs}
        assert by_path[str(small_disk)].error_code == ErrorCode.KAFKA_STORAGE_ERROR
        assert by_path[str(other)].error_code == 0
        assert ("safe", 0) in by_path[str(other)].replicas
        log = c.broker(1).log_tail(400)
        assert f"Stopping serving replicas in dir {small_disk}" in log
    finally:
        c.close()  # the brokers stop before the fixture unmounts the tmpfs


def test_a_broker_whose_every_log_dir_fails_shuts_down(small_disk: Path,
                                                         tmp_path: Path) -> None:
    broker = KlogBroker(tmp_path / "data", overrides={"log.dirs": str(small_disk)})
    broker.start()
    try:
        async def create(admin: AdminClient) -> None:
            result = await admin.create_topics([NewTopic("alone", 1, 1,
                                                         configs={"index.interval.bytes":
                                                                  str(1 << 20)})])
            assert result["alone"] is None

        _admin(broker.bootstrap_servers, create)
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "1",
                                "message.timeout.ms": 20_000})
        proc = broker.process
        assert proc is not None
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(BufferError):
                for _ in range(100):
                    producer.produce("alone", b"z" * 10_000, partition=0)
            producer.poll(0.05)
        assert proc.poll() == 1, "the broker did not stop"
        assert "Shutdown broker because all log dirs in" in broker.log_tail(200)
    finally:
        broker.kill()
