"""Fixtures for multi-broker tests: one real ZooKeeper and N real klog broker processes.

    def test_failover(cluster):
        c = cluster(brokers=3, overrides={"min.insync.replicas": "2"})
        c.create_topic("t", partitions=1, replication_factor=3)
        leader = c.leader("t", 0)              # from the partition state znode
        c.kill(leader)                         # kill -9
        new = c.wait_for_leader("t", 0, exclude={leader})
        c.start(leader)                        # same port, same data
        producer = Producer({"bootstrap.servers": c.bootstrap_servers})

``cluster(brokers=3, overrides=None, per_broker=None, start=True)`` returns a ``Cluster``:
brokers 1..N (``broker.id`` = 1..N), each a ``klog.testing.KlogBroker`` on a free port of
127.0.0.1 with its own data dir, all pointed at a fresh chroot of the session's ZooKeeper
(``zk_server`` from tests/zkserver.py; the tests are skipped with the reason when java or
Debian's ``zookeeper`` package is missing). ``overrides`` apply to every broker on top of
SHORT_TIMEOUTS (short session / lag / socket timeouts so failures are noticed in seconds);
``per_broker`` maps a broker id to its own extra overrides. Everything is stopped (SIGKILL
if SIGTERM does not end it) and the ZooKeeper clients closed at teardown.

``Cluster``:
  - ``brokers`` dict id -> KlogBroker; ``broker(id)``; ``ids``; ``bootstrap_servers``
    (every broker, comma-separated; ``bootstrap_of(ids)`` for some of them)
  - ``zookeeper_connect`` (with the chroot), ``chroot``, ``store`` (a started
    ZooKeeperMetadataStore on the chroot, for reading/writing znodes in tests)
  - ``kill(id)`` (SIGKILL), ``stop(id)`` (SIGTERM, returns the exit code), ``start(id)``,
    ``restart(id)``, ``pause(id)`` / ``resume(id)`` (SIGSTOP / SIGCONT)
  - ``controller()`` -> broker id in /controller or None; ``wait_for_controller(exclude=())``
  - ``registered()`` -> sorted ids under /brokers/ids; ``wait_for_registered(ids)``
  - ``partition_state(topic, p)`` -> LeaderIsrAndControllerEpoch or None (the znode);
    ``leader(topic, p)`` -> its leader (-1 when none); ``wait_for_leader(topic, p,
    exclude=())``; ``wait_for_isr(topic, p, isr)``
  - ``metadata_leader(topic, p, via=None)`` -> the leader a Metadata request to broker
    ``via`` (default: any) reports, through klog's admin client; ``describe_cluster(via=
    None)`` -> its ClusterDescription (controller_id, brokers)
  - ``create_topic(name, partitions=1, replication_factor=3, configs=None)`` via
    CreateTopics, then waits until every partition has a leader in ZooKeeper
  - ``wait(predicate, timeout, what)``: poll until true, else fail with ``what``

Module-level: ``SHORT_TIMEOUTS`` (the defaults above), ``wait_until``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import NoNodeError
from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore
from klog.testing import KlogBroker
from tests.zkserver import ZooKeeperServer, zk_server  # noqa: F401 - the fixture

SHORT_TIMEOUTS: dict[str, str] = {
    "zookeeper.session.timeout.ms": "6000",
    "zookeeper.connection.timeout.ms": "10000",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "replica.socket.timeout.ms": "5000",
    "controller.socket.timeout.ms": "5000",
    "controlled.shutdown.retry.backoff.ms": "200",
    "replica.high.watermark.checkpoint.interval.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "auto.leader.rebalance.enable": "false",
}


def wait_until(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition",
               interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned); fail after
    ``timeout`` seconds naming ``what``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except Exception as e:  # a transient error is just "not yet"
            last = e
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
        time.sleep(interval)


class Cluster:
    """N brokers on one ZooKeeper chroot; see the module docstring."""

    def __init__(self, zk: ZooKeeperServer, root: Path, count: int,
                 overrides: Mapping[str, Any] | None = None,
                 per_broker: Mapping[int, Mapping[str, Any]] | None = None) -> None:
        self.zk = zk
        self.chroot = f"/klog-{uuid.uuid4().hex[:12]}"
        self.zookeeper_connect = zk.connect + self.chroot
        common = {**SHORT_TIMEOUTS, **{k: str(v) for k, v in (overrides or {}).items()}}
        replication = str(min(3, count))
        common.setdefault("offsets.topic.replication.factor", replication)
        common.setdefault("transaction.state.log.replication.factor", replication)
        common.setdefault("transaction.state.log.min.isr", str(min(2, count)))
        self.brokers: dict[int, KlogBroker] = {}
        for broker_id in range(1, count + 1):
            settings = {**common, **{k: str(v) for k, v in
                                     (per_broker or {}).get(broker_id, {}).items()}}
            settings["zookeeper.connect"] = self.zookeeper_connect
            settings["broker.id"] = str(broker_id)
            self.brokers[broker_id] = KlogBroker(root / f"broker-{broker_id}",
                                                 overrides=settings)
        self._store: ZooKeeperMetadataStore | None = None

    # -- processes

    @property
    def ids(self) -> list[int]:
        return sorted(self.brokers)

    def broker(self, broker_id: int) -> KlogBroker:
        return self.brokers[broker_id]

    @property
    def bootstrap_servers(self) -> str:
        return self.bootstrap_of(self.ids)

    def bootstrap_of(self, ids: Iterable[int]) -> str:
        return ",".join(self.brokers[i].bootstrap_servers for i in ids)

    def start_all(self) -> Cluster:
        for b in self.brokers.values():
            b.start()
        self.wait_for_registered(self.ids)
        self.wait_for_controller()
        return self

    def start(self, broker_id: int) -> KlogBroker:
        return self.brokers[broker_id].start()

    def stop(self, broker_id: int, timeout: float = 30.0) -> int | None:
        self.resume(broker_id)  # a stopped process cannot handle SIGTERM
        return self.brokers[broker_id].stop(timeout)

    def kill(self, broker_id: int) -> None:
        self.brokers[broker_id].kill()

    def restart(self, broker_id: int) -> KlogBroker:
        self.stop(broker_id)
        return self.start(broker_id)

    def pause(self, broker_id: int) -> None:
        self._signal(broker_id, signal.SIGSTOP)

    def resume(self, broker_id: int) -> None:
        self._signal(broker_id, signal.SIGCONT)

    def _signal(self, broker_id: int, sig: signal.Signals) -> None:
        proc = self.brokers[broker_id].process
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)

    def close(self) -> None:
        # SIGTERM to all at once: their controlled shutdowns overlap instead of queueing.
        for broker_id in self.brokers:
            self.resume(broker_id)
            self._signal(broker_id, signal.SIGTERM)
        for b in self.brokers.values():
            with contextlib.suppress(Exception):
                b.stop(timeout=15)
            b.kill()
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- ZooKeeper

    @property
    def store(self) -> ZooKeeperMetadataStore:
        if self._store is None:
            store = ZooKeeperMetadataStore(self.zookeeper_connect, session_timeout_ms=10000,
                                           connection_timeout_ms=10000)
            store.start()
            self._store = store
        return self._store

    def controller(self) -> int | None:
        try:
            data, _ = self.store.get(paths.CONTROLLER)
        except NoNodeError:
            return None
        return paths.ControllerRegistration.decode(data).broker_id

    def wait_for_controller(self, exclude: Iterable[int] = (), timeout: float = 30.0) -> int:
        excluded = set(exclude)

        def found() -> int | None:
            c = self.controller()
            return c if c is not None and c not in excluded else None

        return int(wait_until(found, timeout, f"a controller not in {sorted(excluded)}"))

    def registered(self) -> list[int]:
        try:
            return sorted(int(n) for n in self.store.get_children(paths.BROKER_IDS))
        except NoNodeError:
            return []

    def wait_for_registered(self, ids: Iterable[int], timeout: float = 30.0) -> None:
        wanted = sorted(ids)
        try:
            wait_until(lambda: self.registered() == wanted, timeout,
                       f"brokers {wanted} registered in /brokers/ids")
        except pytest.fail.Exception as exc:
            # Say which broker is missing and what it logged (its data is gone at teardown).
            missing = sorted(set(wanted) - set(self.registered()))
            tails = []
            for b in missing:
                proc = self.brokers[b].process
                code = proc.poll() if proc is not None else None
                tails.append(f"--- broker {b} (exit code {code}):\n"
                             f"{self.brokers[b].log_tail(30)}")
            pytest.fail(f"{exc}\nnot registered: {missing}\n" + "\n".join(tails))

    def partition_state(self, topic: str, partition: int
                        ) -> paths.LeaderIsrAndControllerEpoch | None:
        try:
            data, _ = self.store.get(paths.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return paths.LeaderIsrAndControllerEpoch.decode(data)

    def leader(self, topic: str, partition: int) -> int:
        state = self.partition_state(topic, partition)
        return -1 if state is None else state.leader

    def wait_for_leader(self, topic: str, partition: int, exclude: Iterable[int] = (),
                        timeout: float = 30.0) -> int:
        excluded = set(exclude)

        def found() -> int | None:
            leader = self.leader(topic, partition)
            return leader if leader >= 0 and leader not in excluded else None

        return int(wait_until(found, timeout,
                              f"a leader of {topic}-{partition} not in {sorted(excluded)}"))

    def wait_for_isr(self, topic: str, partition: int, isr: Iterable[int],
                     timeout: float = 30.0) -> None:
        wanted = sorted(isr)

        def matches() -> bool:
            state = self.partition_state(topic, partition)
            return state is not None and sorted(state.isr) == wanted

        wait_until(matches, timeout, f"ISR {wanted} of {topic}-{partition}")

    # -- Kafka protocol (klog's admin client)

    def _admin(self, via: int | None, fn: Callable[[Any], Any]) -> Any:
        from klog.client.admin import AdminClient

        bootstrap = self.bootstrap_servers if via is None else self.bootstrap_of([via])

        async def run() -> Any:
            async with AdminClient(bootstrap) as admin:
                return await fn(admin)

        return asyncio.run(run())

    def metadata_leader(self, topic: str, partition: int, via: int | None = None) -> int:
        async def ask(admin: Any) -> int:
            topics = await admin.list_topics(include_internal=True)
            for p in topics[topic].partitions if topic in topics else ():
                if p.partition == partition:
                    return int(p.leader)
            return -1

        return int(self._admin(via, ask))

    def describe_cluster(self, via: int | None = None) -> Any:
        """DescribeCluster (or Metadata) answered by broker ``via`` (default: any): a
        klog.client.admin.ClusterDescription (cluster_id, controller_id, brokers)."""
        return self._admin(via, lambda admin: admin.describe_cluster())

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3,
                     configs: Mapping[str, Any] | None = None, timeout: float = 30.0) -> None:
        from klog.client.admin import NewTopic

        async def create(admin: Any) -> None:
            result = await admin.create_topics([NewTopic(
                name, partitions, replication_factor,
                configs={k: str(v) for k, v in (configs or {}).items()})])
            if result[name] is not None:
                raise result[name]

        self._admin(None, create)
        for p in range(partitions):
            self.wait_for_leader(name, p, timeout=timeout)

    def wait(self, predicate: Callable[[], Any], timeout: float = 20.0,
             what: str = "condition") -> Any:
        return wait_until(predicate, timeout, what)


@pytest.fixture
def cluster(zk_server: ZooKeeperServer,  # noqa: F811 - the imported fixture
            tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """A factory: ``cluster(brokers=3, overrides=None, per_broker=None, start=True)``."""
    made: list[Cluster] = []

    def make(brokers: int = 3, overrides: Mapping[str, Any] | None = None,
             per_broker: Mapping[int, Mapping[str, Any]] | None = None,
             start: bool = True) -> Cluster:
        c = Cluster(zk_server, tmp_path / f"cluster-{len(made)}", brokers, overrides,
                    per_broker)
        made.append(c)
        return c.start_all() if start else c

    yield make
    for c in made:
        c.close()
