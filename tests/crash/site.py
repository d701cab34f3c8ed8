"""Where the crash matrix runs: a site (a standalone broker, or a 3-broker ZooKeeper cluster)
with the broker its disruption hits, the three disruptions, and ``World``: one site, every
scenario built on it, one disruption applied.

A site gives scenarios what they need to place their state on the broker that will be hit:
``create_topic`` makes that broker every partition's preferred leader, ``coordinated_id``
picks a group or transactional id whose coordinator it is. Each broker listens twice:
PLAINTEXT (``bootstrap_servers``; every such client is User:ANONYMOUS) and SASL_PLAINTEXT
with SCRAM (``sasl_bootstrap_servers``), and runs the ACL authorizer with
``allow.everyone.if.no.acl.found``, so only the resources a scenario gives ACLs are guarded;
it has two log dirs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klog.daemon.group.metadata_manager import java_string_hash, kafka_abs
from klog.testing import KlogBroker, free_port
from tests.cluster.conftest import Cluster, wait_until

if TYPE_CHECKING:
    from tests.crash.scenarios import Scenario

#: SIGSTOP's length: past the clients' session timeout (CLIENT_SESSION_TIMEOUT_MS), their
#: request timeouts (CLIENT_REQUEST_TIMEOUT_MS) and a cluster broker's ZooKeeper session
#: (tests/cluster/conftest.py SHORT_TIMEOUTS: 6 s).
PAUSE_S = 8.0
CLIENT_SESSION_TIMEOUT_MS = 6000
CLIENT_REQUEST_TIMEOUT_MS = 5000

SCRAM_MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512"

#: librdkafka's log lines (connection refused while a broker is down, ...) go to Python
#: logging: pytest shows them with a failing test only.
CLIENT_LOG = logging.getLogger("tests.crash.librdkafka")


def _not_down_noise(record: logging.LogRecord) -> bool:
    """Leave out what every client says over and over while its broker is down."""
    message = record.getMessage()
    return "Connection refused" not in message and "Disconnected" not in message


CLIENT_LOG.addFilter(_not_down_noise)

#: Every site's brokers: small timeouts so that what a crash interrupts (an abandoned
#: transaction, an expired member, a dirty compacted log) is dealt with in seconds.
BROKER_OVERRIDES: dict[str, str] = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "sasl.enabled.mechanisms": SCRAM_MECHANISMS,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "transaction.state.log.num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "log.cleaner.backoff.ms": "200",
    "log.retention.check.interval.ms": "500",
    "auto.create.topics.enable": "false",
    # A follower's fetch takes at most this much of a partition while its throttle allows
    # (Kafka's default, 1 MB, would move the reassignment scenario's data in one fetch).
    "replica.fetch.max.bytes": "65536",
}


def two_log_dirs(data_dir: Path) -> list[Path]:
    """A broker's log dirs: two (JBOD), so that a replica can move between them."""
    return [data_dir / "logs", data_dir / "logs-b"]


def listeners(plain_port: int, sasl_port: int) -> str:
    return f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"


class Site(ABC):
    """A running standalone broker or cluster, and ``target``: the broker id disruptions
    hit."""

    mode: str
    target: int

    def __init__(self) -> None:
        self._admin: AdminClient | None = None
        self._admin_lock = threading.Lock()
        self.sasl_ports: dict[int, int] = {}
        self.timings: dict[str, float] = {}  # the disruption's phases, for the report

    # -- addresses

    @property
    @abstractmethod
    def bootstrap_servers(self) -> str: ...

    @abstractmethod
    def broker_ids(self) -> list[int]: ...

    @abstractmethod
    def bootstrap_of(self, broker_id: int) -> str: ...

    def sasl_bootstrap_servers(self, ids: Iterable[int] | None = None) -> str:
        chosen = self.broker_ids() if ids is None else list(ids)
        return ",".join(f"127.0.0.1:{self.sasl_ports[i]}" for i in chosen)

    # -- clients

    def admin(self) -> AdminClient:
        """The site's admin client, shared by the scenarios' threads (a new one after each
        disruption)."""
        with self._admin_lock:  # one client: a second one dropped would end the first's calls
            if self._admin is None:
                # (No logger: an admin client would call it from librdkafka's background
                # thread.)
                self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
            return self._admin

    def producer(self, **config: Any) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap_servers, "acks": "all",
                         "reconnect.backoff.max.ms": 500, "logger": CLIENT_LOG, **config})

    def consumer(self, **config: Any) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap_servers,
                         "enable.auto.commit": False, "reconnect.backoff.max.ms": 500,
                         "logger": CLIENT_LOG, **config})

    def klog(self, *args: str, json_out: bool = False) -> Any:
        """Run the ``klog`` CLI against the site; its parsed JSON with ``json_out``."""
        cmd = [sys.executable, "-m", "klog", *args, "-b", self.bootstrap_servers]
        if json_out:
            cmd.append("--json")
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL, check=False)
        assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}{done.stdout}"
        return json.loads(done.stdout) if json_out else done.stdout

    # -- placement

    def replicas(self, partitions: int) -> list[list[int]] | None:
        """Each partition's replica list: ``target`` first (the preferred leader)."""
        return None

    def create_topic(self, name: str, partitions: int = 1,
                     configs: Mapping[str, str] | None = None) -> None:
        assignment = self.replicas(partitions)
        config = dict(configs or {})
        topic = (NewTopic(name, partitions, -1, replica_assignment=assignment, config=config)
                 if assignment is not None else NewTopic(name, partitions, 1, config=config))
        self.admin().create_topics([topic])[name].result(30)
        self.wait_for_leaders(name, partitions)

    def metadata(self, broker_id: int) -> dict[str, dict[int, tuple[int, list[int]]]]:
        """Every topic as broker ``broker_id``'s Metadata answer gives it: partition ->
        (leader, replicas). (Asked with klog's admin client bootstrapped from that broker
        alone: its first Metadata request goes there.)"""
        from klog.client.admin import AdminClient as KlogAdmin

        async def ask() -> dict[str, dict[int, tuple[int, list[int]]]]:
            async with KlogAdmin(self.bootstrap_of(broker_id)) as admin:
                topics = await admin.list_topics()
            return {name: {p.partition: (p.leader, sorted(p.replicas)) for p in t.partitions}
                    for name, t in topics.items()}

        return asyncio.run(ask())

    def wait_for_leaders(self, topic: str, partitions: int, timeout: float = 30.0) -> None:
        """Until every broker's Metadata gives each partition of ``topic`` a leader (each
        learns it from the controller, one after the other)."""
        def led(broker_id: int) -> bool:
            found = self.metadata(broker_id).get(topic, {})
            return len(found) == partitions and all(leader >= 0 for leader, _ in found.values())

        for broker_id in self.broker_ids():
            wait_until(lambda b=broker_id: led(b), timeout,
                       f"every partition of {topic} led, says broker {broker_id}")

    def coordinated_id(self, key_type: str, prefix: str) -> str:
        """A group id (``key_type`` "group") or transactional id ("txn") starting with
        ``prefix`` whose coordinator is ``target``."""
        return prefix

    # -- the disruption

    @abstractmethod
    def stop_target(self) -> int | None: ...

    @abstractmethod
    def kill_target(self) -> None: ...

    @abstractmethod
    def start_target(self) -> None: ...

    @abstractmethod
    def signal_target(self, sig: signal.Signals) -> None: ...

    @abstractmethod
    def wait_recovered(self) -> None:
        """Until the hit broker is back and serves (in a cluster: leads again what it led
        by preference)."""

    @abstractmethod
    def log_tails(self, lines: int = 60) -> str: ...

    @abstractmethod
    def log_dirs(self, broker_id: int | None = None) -> list[Path]:
        """The log dirs of broker ``broker_id`` (None: of every broker)."""

    def reset_admin(self) -> None:
        with self._admin_lock:
            self._admin = None

    def close(self) -> None:
        self.reset_admin()


class StandaloneSite(Site):
    """One broker (id 0): controller, leader and coordinator of everything."""

    mode = "standalone"
    target = 0

    def __init__(self, root: Path) -> None:
        super().__init__()
        plain, sasl = free_port(), free_port()
        self.sasl_ports = {0: sasl}
        self.broker = KlogBroker(root / "broker", port=plain, overrides={
            **BROKER_OVERRIDES, "listeners": listeners(plain, sasl),
            "log.dirs": ",".join(str(d) for d in two_log_dirs(root / "broker"))})

    def start(self) -> StandaloneSite:
        self.broker.start()
        self.wait_recovered()
        return self

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers

    def broker_ids(self) -> list[int]:
        return [0]

    def bootstrap_of(self, broker_id: int) -> str:
        return self.broker.bootstrap_servers

    def stop_target(self) -> int | None:
        return self.broker.stop()

    def kill_target(self) -> None:
        self.broker.kill()

    def start_target(self) -> None:
        self.broker.start()

    def signal_target(self, sig: signal.Signals) -> None:
        assert self.broker.process is not None
        os.kill(self.broker.process.pid, sig)

    def wait_recovered(self) -> None:
        def serving() -> bool:
            return self.admin().list_topics(timeout=5).controller_id == 0

        wait_until(serving, 30, "the broker to answer Metadata as the controller")

    def log_tails(self, lines: int = 60) -> str:
        return f"--- broker 0 ---\n{self.broker.log_tail(lines)}"

    def log_dirs(self, broker_id: int | None = None) -> list[Path]:
        return two_log_dirs(self.broker.data_dir)

    def close(self) -> None:
        super().close()
        self.broker.close()


class ClusterSite(Site):
    """Three brokers on a real ZooKeeper; ``role`` "leader" makes ``target`` a broker that
    is not the controller, "controller" the controller itself."""

    mode = "cluster"

    def __init__(self, cluster: Cluster, role: str) -> None:
        super().__init__()
        self.cluster = cluster
        self.role = role
        for broker_id, broker in cluster.brokers.items():
            self.sasl_ports[broker_id] = free_port()
            broker.overrides["listeners"] = listeners(broker.port, self.sasl_ports[broker_id])
            broker.overrides["log.dirs"] = ",".join(str(d)
                                                    for d in two_log_dirs(broker.data_dir))
        self.target = -1

    def start(self) -> ClusterSite:
        self.cluster.start_all()
        controller = self.cluster.wait_for_controller()
        self.target = controller if self.role == "controller" else next(
            b for b in self.cluster.ids if b != controller)
        self._create_internal_topics()
        return self

    def _create_internal_topics(self) -> None:
        """__consumer_offsets and __transaction_state exist (FindCoordinator creates them)
        and are led, so that ``coordinated_id`` can pick ids by their leaders."""
        probe = self.producer(**{"transactional.id": "crash-probe"})
        probe.init_transactions(30)
        del probe
        from tests.crash.scenarios import committed_offsets

        committed_offsets(self, "crash-probe", [TopicPartition("crash-probe", 0)])
        for topic in ("__consumer_offsets", "__transaction_state"):
            for p in range(3):
                self.cluster.wait_for_leader(topic, p)

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def broker_ids(self) -> list[int]:
        return self.cluster.ids

    def bootstrap_of(self, broker_id: int) -> str:
        return self.cluster.broker(broker_id).bootstrap_servers

    def replicas(self, partitions: int) -> list[list[int]] | None:
        others = [b for b in self.cluster.ids if b != self.target]
        return [[self.target, *others] for _ in range(partitions)]

    def coordinated_id(self, key_type: str, prefix: str) -> str:
        topic = "__consumer_offsets" if key_type == "group" else "__transaction_state"
        for n in range(1000):
            candidate = f"{prefix}-{n}"
            if self.cluster.leader(topic, kafka_abs(java_string_hash(candidate)) % 3) \
                    == self.target:
                return candidate
        raise AssertionError(f"no {key_type} id led by broker {self.target}")

    def stop_target(self) -> int | None:
        return self.cluster.stop(self.target)

    def kill_target(self) -> None:
        self.cluster.kill(self.target)

    def start_target(self) -> None:
        # A killed broker's registration lives until ZooKeeper ends its session; a second
        # registration of the same id is refused until then, as Kafka's.
        t = time.monotonic()
        self.cluster.wait(lambda: self.target not in self.cluster.registered(), 30,
                          f"broker {self.target}'s old registration to go")
        self.timings["session"] = time.monotonic() - t
        self.cluster.start(self.target)

    def signal_target(self, sig: signal.Signals) -> None:
        if sig == signal.SIGSTOP:
            self.cluster.pause(self.target)
        else:
            self.cluster.resume(self.target)

    def wait_recovered(self) -> None:
        self.cluster.wait_for_registered(self.cluster.ids)
        self.cluster.wait_for_controller()

        def described() -> bool:
            return all(len(self.cluster.describe_cluster(via=b).brokers) == 3
                       for b in self.cluster.ids)

        wait_until(described, 30, "every broker to know all three")
        self._lead_again()

    def _lead_again(self) -> None:
        """Give the hit broker its leaderships back (a preferred leader election, as an
        operator or auto.leader.rebalance.enable would), so that the checks read what the
        broker that went down rebuilt -- producer state, transactions, offsets, compacted
        logs -- and not only what the others kept."""
        from confluent_kafka import ElectionType

        from klog.daemon.metastore import paths

        store = self.cluster.store
        preferred: dict[tuple[str, int], int] = {}
        for topic in store.get_children(paths.BROKER_TOPICS):
            if store.exists(paths.delete_topic_path(topic)) is not None:
                continue
            data, _ = store.get(paths.topic_path(topic))
            for p, assigned in paths.TopicAssignment.decode(data, topic).partitions.items():
                if assigned.replicas and assigned.replicas[0] == self.target:
                    preferred[(topic, p)] = self.target

        def caught_up() -> list[tuple[str, int]]:
            behind = []
            for topic, p in preferred:
                state = self.cluster.partition_state(topic, p)
                if state is None or self.target not in state.isr:
                    behind.append((topic, p))
            return behind

        wait_until(lambda: not caught_up(), 60,
                   f"broker {self.target} back in the ISR of what it leads by preference")
        self.admin().elect_leaders(ElectionType.PREFERRED, None).result(30)

        def moved_back() -> bool:
            return all(self.cluster.leader(t, p) == self.target for t, p in preferred)

        wait_until(moved_back, 30, f"broker {self.target} leading again")

    def log_tails(self, lines: int = 60) -> str:
        return "\n".join(f"--- broker {i} ---\n{self.cluster.broker(i).log_tail(lines)}"
                         for i in self.cluster.ids)

    def log_dirs(self, broker_id: int | None = None) -> list[Path]:
        ids = self.cluster.ids if broker_id is None else [broker_id]
        return [d for i in ids for d in two_log_dirs(self.cluster.broker(i).data_dir)]


# ---------------------------------------------------------------------------- disruptions


@dataclass(frozen=True)
class Disruption:
    """One way the target broker goes down (and comes back)."""

    name: str
    apply: Callable[[Site], None]

    def __str__(self) -> str:
        return self.name


def _sigterm(site: Site) -> None:
    t = time.monotonic()
    code = site.stop_target()
    assert code == 0, f"SIGTERM: exit code {code}"
    site.timings["down"] = time.monotonic() - t
    _start(site)


def _kill9(site: Site) -> None:
    site.kill_target()
    _start(site)


def _start(site: Site) -> None:
    t = time.monotonic()
    site.start_target()
    site.timings["up"] = time.monotonic() - t


def _sigstop(site: Site) -> None:
    site.signal_target(signal.SIGSTOP)
    try:
        time.sleep(PAUSE_S)
    finally:
        site.signal_target(signal.SIGCONT)


DISRUPTIONS: tuple[Disruption, ...] = (
    Disruption("sigterm", _sigterm),
    Disruption("kill9", _kill9),
    Disruption("sigstop", _sigstop),
)


# ---------------------------------------------------------------------------- the world


class World:
    """One site, every scenario of its mode built on it, then one disruption.

    A scenario whose build fails keeps its error for its own cell; the others go on."""

    def __init__(self, site: Site, scenarios: Sequence[Scenario], disruption: Disruption
                 ) -> None:
        self.site = site
        self.disruption = disruption
        self.scenarios = {s.name: s for s in scenarios}
        self.failed: dict[str, str] = {}
        self.disruption_error: str | None = None
        self.timings: dict[str, float] = {}

    def start_and_run(self) -> None:
        """Start the site, then ``run``; a site that does not start fails every cell."""
        t = time.monotonic()
        try:
            self.site.start()
        except BaseException as exc:
            if not isinstance(exc, Exception | pytest.fail.Exception):
                raise
            self.disruption_error = f"the site did not start: {traceback.format_exc()}"
            return
        finally:
            self.timings["start"] = time.monotonic() - t
        self.run()

    def run(self) -> None:
        started = time.monotonic()
        # The scenarios are built side by side (they touch nothing of each other's, and
        # most of a build is waiting for brokers and the CLI).
        with ThreadPoolExecutor(len(self.scenarios), thread_name_prefix="build") as pool:
            for name, outcome in zip(self.scenarios,
                                     pool.map(self._build, self.scenarios.values()),
                                     strict=True):
                if outcome is not None:
                    self.failed[name] = outcome
        for name, scenario in self.scenarios.items():
            if name not in self.failed:
                scenario.before_disruption(self.site)
        t = time.monotonic()
        try:
            self.disruption.apply(self.site)
            # A new admin client for after: librdkafka 2.16 re-bootstraps when every broker
            # it knows is down, and its coordinator cache may keep pointing at the retired
            # broker handle -- a group it looked up before then never answers again.
            self.site.reset_admin()
            t_recovery = time.monotonic()
            self.site.wait_recovered()
            self.site.timings["recovered"] = time.monotonic() - t_recovery
        except BaseException as exc:
            if not isinstance(exc, Exception | pytest.fail.Exception):
                raise
            self.disruption_error = traceback.format_exc()
        self.timings["disruption"] = time.monotonic() - t
        self.timings.update({f"disruption {k}": v for k, v in self.site.timings.items()})
        self.timings["world"] = time.monotonic() - started

    def _build(self, scenario: Scenario) -> str | None:
        """Build one scenario; its failure as text, or None."""
        t = time.monotonic()
        try:
            scenario.build(self.site)
        except BaseException as exc:
            if not isinstance(exc, Exception | pytest.fail.Exception):
                raise
            return f"build failed: {traceback.format_exc()}"
        finally:
            self.timings[f"build {scenario.name}"] = time.monotonic() - t
        return None

    def check(self, name: str) -> None:
        if self.disruption_error is not None:
            pytest.fail(f"{self.disruption}: {self.disruption_error}\n"
                        f"{self.site.log_tails()}")
        if name in self.failed:
            pytest.fail(f"{self.failed[name]}\n{self.site.log_tails()}")
        t = time.monotonic()
        try:
            self.scenarios[name].check(self.site)
        except BaseException:
            print(self.site.log_tails(80))
            raise
        finally:
            self.timings[f"check {name}"] = time.monotonic() - t

    def close(self) -> None:
        for scenario in self.scenarios.values():
            try:
                scenario.close()
            except Exception:
                traceback.print_exc()
        self.site.close()


#: How many worlds of a module run side by side. A world spends most of its time waiting
#: (for brokers to start, sessions to end, clients to reconnect): three at once take about
#: the time of one and a half.
PARALLEL_WORLDS = 3


def run_worlds(worlds: Iterable[World], label: Callable[[World], str]) -> None:
    """Start and run ``worlds``, ``PARALLEL_WORLDS`` at a time; print each one's timings."""
    worlds = list(worlds)
    with ThreadPoolExecutor(PARALLEL_WORLDS, thread_name_prefix="world") as pool:
        list(pool.map(World.start_and_run, worlds))
    for world in worlds:
        took = world.timings.get("start", 0) + world.timings.get("world", 0)
        print(f"\n{label(world)}: {took:.1f} s "
              f"({', '.join(f'{k} {v:.1f}' for k, v in world.timings.items())})")
