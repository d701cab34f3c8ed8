"""The chaos harness's nemeses: faults that start and heal, on a schedule from a seed.

Kinds (each ``start`` returns the targets it chose; ``heal`` undoes it):

    partition-halves   the hosts (brokers and ZooKeeper nodes) split in two halves
    isolate-node       one host cut from every other host and from the clients
    bridge             A sees B's half and C's half; the two halves do not see each other
    leader-isolated    the leader of a partition cut from ZooKeeper and the other brokers;
                       its clients still reach it
    one-way-loss       a fraction (30, 60 or 100 %) of one broker's packets lost in one
                       direction (out or in)
    latency-loss       a host's outgoing packets delayed 50-400 ms (+- a quarter), 0-5 % lost
                       (tc netem where the kernel has it, else NFQUEUE and delayer.py)
    kill               kill -9 of a broker; heal starts it again on the same data
    pause              SIGSTOP of a broker; heal is SIGCONT
    zk-isolate         a ZooKeeper node cut from everyone (with one node: ZooKeeper gone)
    zk-kill            kill -9 of a ZooKeeper node; heal starts it again
    crash-all          kill -9 of every broker at once; heal starts them all again

``Schedule`` draws from ``random.Random(seed)``: which kind, how long it holds, how long
the quiet after it lasts, and the choice of targets, so the same seed replays the same
sequence (targets chosen by role -- "the leader of chaos-idem-1" -- follow the cluster's
state at that moment, which a replay reproduces only as far as the cluster does).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tests.chaos.checker import Event
from tests.chaos.net import Network
from tests.chaos.nodes import BrokerNode, ZooKeeperNode

KINDS = ("partition-halves", "isolate-node", "bridge", "leader-isolated", "one-way-loss",
         "latency-loss", "kill", "pause", "zk-isolate", "zk-kill", "crash-all")


class ClusterView(Protocol):
    """What a nemesis needs of the cluster (the runner's ``ChaosCluster``)."""

    net: Network
    brokers: dict[str, BrokerNode]
    zookeepers: dict[str, ZooKeeperNode]

    def leader_of(self, topic: str, partition: int) -> str | None: ...

    def start_broker(self, name: str) -> None: ...


@dataclass
class Step:
    kind: str
    hold: float
    quiet: float


class Schedule:
    """The sequence of nemesis steps for a seed (see the module docstring)."""

    def __init__(self, seed: int, kinds: Sequence[str], hold: tuple[float, float] = (6, 15),
                 quiet: tuple[float, float] = (4, 8)) -> None:
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown nemeses {unknown}; known: {', '.join(KINDS)}")
        self.seed = seed
        self.kinds = list(kinds)
        self.rng = random.Random(seed)
        self.hold = hold
        self.quiet = quiet
        # Each kind once in a shuffled round, then another round: every kind gets its
        # turn early even in a short run.
        self._round: list[str] = []

    def next(self) -> Step:
        if not self._round:
            self._round = list(self.kinds)
            self.rng.shuffle(self._round)
        kind = self._round.pop()
        return Step(kind, round(self.rng.uniform(*self.hold), 1),
                    round(self.rng.uniform(*self.quiet), 1))

    def preview(self, duration: float) -> list[Step]:
        """The steps a run of ``duration`` seconds takes (a copy of the generator)."""
        copy = Schedule(self.seed, self.kinds, self.hold, self.quiet)
        steps, t = [], 0.0
        while t < duration:
            step = copy.next()
            steps.append(step)
            t += step.hold + step.quiet
        return steps


class Nemesis:
    """Starts and heals one fault at a time on a ``ClusterView``."""

    def __init__(self, cluster: ClusterView, seed: int, topic: str, partitions: int) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed * 31 + 7)
        self.topic = topic
        self.partitions = partitions
        self._heal: Callable[[], None] | None = None

    @property
    def net(self) -> Network:
        return self.cluster.net

    def _hosts(self) -> list[str]:
        return sorted(self.cluster.brokers) + sorted(self.cluster.zookeepers)

    def start(self, kind: str, now: float) -> Event:
        starter = getattr(self, "_" + kind.replace("-", "_"))
        targets, detail = starter()
        return Event(kind, targets, now, None, detail)

    def heal(self) -> None:
        """Undo the fault in place (and any network fault at all)."""
        heal, self._heal = self._heal, None
        self.net.heal()
        if heal is not None:
            heal()

    # -- network faults

    def _split(self, hosts: list[str]) -> tuple[list[str], list[str]]:
        self.rng.shuffle(hosts)
        half = len(hosts) // 2
        return sorted(hosts[:half]), sorted(hosts[half:])

    def _partition_halves(self) -> tuple[list[str], dict[str, Any]]:
        a, b = self._split(self._hosts())
        self.net.partition([a, b])
        return [",".join(a), ",".join(b)], {}

    def _isolate_node(self) -> tuple[list[str], dict[str, Any]]:
        host = self.rng.choice(self._hosts())
        self.net.drop(host, ["all"])
        return [host], {}

    def _bridge(self) -> tuple[list[str], dict[str, Any]]:
        hosts = self._hosts()
        self.rng.shuffle(hosts)
        bridge, rest = hosts[0], hosts[1:]
        a, b = self._split(rest)
        self.net.partition([a, b])
        return [bridge, ",".join(a), ",".join(b)], {"bridge": bridge}

    def _leader_isolated(self) -> tuple[list[str], dict[str, Any]]:
        partition = self.rng.randrange(self.partitions)
        leader = self.cluster.leader_of(self.topic, partition)
        if leader is None:  # no leader now: isolate some broker the same way
            leader = self.rng.choice(sorted(self.cluster.brokers))
        others = [h for h in self._hosts() if h != leader]
        self.net.drop(leader, others)
        return [leader], {"partition": f"{self.topic}-{partition}"}

    def _one_way_loss(self) -> tuple[list[str], dict[str, Any]]:
        broker = self.rng.choice(sorted(self.cluster.brokers))
        direction = self.rng.choice(["out", "in"])
        percent = self.rng.choice([30, 60, 100])
        self.net.drop(broker, ["all"], direction=direction, percent=percent)
        return [broker], {"direction": direction, "percent": percent}

    def _latency_loss(self) -> tuple[list[str], dict[str, Any]]:
        host = self.rng.choice(self._hosts())
        delay = self.rng.choice([50, 100, 200, 400])
        loss = self.rng.choice([0, 1, 5])
        means = self.net.delay(host, delay, delay // 4, loss, self.rng.randrange(1 << 30))
        return [host], {"delay_ms": delay, "jitter_ms": delay // 4, "loss_percent": loss,
                        "means": means}

    def _zk_isolate(self) -> tuple[list[str], dict[str, Any]]:
        zk = self.rng.choice(sorted(self.cluster.zookeepers))
        self.net.drop(zk, ["all"])
        return [zk], {}

    # -- process faults

    def _kill(self) -> tuple[list[str], dict[str, Any]]:
        broker = self.rng.choice(sorted(self.cluster.brokers))
        self.cluster.brokers[broker].kill()
        self._heal = lambda: self.cluster.start_broker(broker)
        return [broker], {}

    def _crash_all(self) -> tuple[list[str], dict[str, Any]]:
        for node in self.cluster.brokers.values():
            node.kill()

        def restart() -> None:
            for name in sorted(self.cluster.brokers):
                self.cluster.start_broker(name)

        self._heal = restart
        return sorted(self.cluster.brokers), {}

    def _pause(self) -> tuple[list[str], dict[str, Any]]:
        broker = self.rng.choice(sorted(self.cluster.brokers))
        node = self.cluster.brokers[broker]
        node.pause()
        self._heal = node.resume
        return [broker], {}

    def _zk_kill(self) -> tuple[list[str], dict[str, Any]]:
        zk = self.rng.choice(sorted(self.cluster.zookeepers))
        node = self.cluster.zookeepers[zk]
        node.kill()
        self._heal = node.start
        return [zk], {}
