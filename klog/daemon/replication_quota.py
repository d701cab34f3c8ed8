"""Replication throttles: Kafka's ReplicationQuotaManager, one for leaders, one for followers.

A quota is a byte rate bound (the dynamic broker configs leader.replication.throttled.rate
and follower.replication.throttled.rate; unlimited by default) and a set of throttled
replicas per topic (the topic configs leader.replication.throttled.replicas and
follower.replication.throttled.replicas: ``*`` for every replica, or ``partition:broker``
entries of which a broker keeps those naming itself). Only throttled replicas are measured
and held back, so a reassignment can move data slowly while ordinary replication goes at
full speed.

The measured rate is Kafka's SimpleRate over 11 samples of 1 s: the bytes recorded in the
samples still inside the window, divided by the time since the oldest of them started, but
by at least one sample's length (so a burst right after a quiet spell counts as a burst).
The quota is exceeded when that rate is above the bound. Like Kafka, a throttled replica is
only held back while the quota is exceeded, and never when it is in sync:

- the leader (ReplicaManager.fetch_messages, klog/daemon/replica_manager.py; and its
  DelayedFetch, klog/daemon/delayed.py) answers a follower's fetch of a throttled
  partition with no records while its quota is exceeded and the follower is out of the
  ISR; the throttled partitions' bytes of every follower fetch response are recorded;
- the follower (klog/daemon/replica_fetcher.py) leaves throttled partitions out of its
  fetches while its quota is exceeded and the partition lags; the bytes it appends for
  throttled partitions are recorded.

Hot paths check ``quota.throttled`` (a dict, empty when nothing is throttled) before
anything else: an unthrottled broker pays one truth test per fetch, a throttled topic one
dict lookup per partition. Everything runs on the broker's event loop; no locks.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from klog.daemon.config.broker import BrokerConfig

#: Kafka's "no quota" (Long.MAX_VALUE, the rate configs' default).
UNLIMITED = 2**63 - 1
#: Kafka's ReplicationQuotaManagerConfig: 10 whole windows + the current one, of 1 s each.
DEFAULT_NUM_SAMPLES = 11
DEFAULT_WINDOW_S = 1.0

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"

#: A topic's throttled partitions on this broker: a set of partition ids, or ALL.
ALL: frozenset[int] = frozenset({-1})  # Kafka's AllReplicas = Seq(-1), compared by identity


class ThrottledReplicasError(ValueError):
    """A throttled-replica list that is neither '*' nor partition:broker entries."""


def parse_throttled_replicas(value: str | None, broker_id: int) -> frozenset[int]:
    """The partitions a throttled-replica list throttles on ``broker_id``: ALL for ``*``,
    the partitions of the ``partition:broker`` entries naming this broker otherwise (empty
    for an empty list). Raises ThrottledReplicasError for anything else."""
    text = (value or "").strip()
    if not text:
        return frozenset()
    if text == "*":
        return ALL
    out: set[int] = set()
    for item in text.split(","):
        entry = item.strip()
        partition, sep, broker = entry.partition(":")
        if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
            raise ThrottledReplicasError(
                f"{entry!r} is not partitionId:brokerId (the list must be '*' or "
                f"partitionId:brokerId,...)")
        if int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class ReplicationQuotaManager:
    """One replication quota (leader or follower side); see the module docstring."""

    def __init__(self, kind: str, bound: float = UNLIMITED, *,
                 num_samples: int = DEFAULT_NUM_SAMPLES, window_s: float = DEFAULT_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kind = kind
        self.bound = float(bound)
        self.num_samples = max(1, num_samples)
        self.window_s = window_s
        self.clock = clock
        #: topic -> throttled partitions (ALL for every one); empty when nothing is throttled.
        self.throttled: dict[str, frozenset[int]] = {}
        # [start time, bytes] per sample, oldest first; at most num_samples of them.
        self._samples: deque[list[float]] = deque()
        self.total_recorded = 0

    def __repr__(self) -> str:
        bound = "unlimited" if self.unlimited else f"{self.bound:.0f} B/s"
        return f"ReplicationQuotaManager({self.kind}, {bound}, throttled={self.throttled})"

    # -- configuration ----------------------------------------------------------------------

    @property
    def unlimited(self) -> bool:
        return self.bound >= UNLIMITED

    def update_quota(self, bound: float) -> None:
        """A new rate bound in bytes/s (UNLIMITED for none); the measured rate is kept."""
        self.bound = float(bound)

    def mark_throttled(self, topic: str, partitions: frozenset[int] = ALL) -> None:
        """Throttle these partitions of ``topic`` (replacing what was throttled before)."""
        if partitions:
            self.throttled[topic] = partitions
        else:
            self.throttled.pop(topic, None)

    def remove_throttle(self, topic: str) -> None:
        self.throttled.pop(topic, None)

    # -- the checks -------------------------------------------------------------------------

    def is_throttled(self, topic: str, partition: int) -> bool:
        partitions = self.throttled.get(topic)
        return partitions is not None and (partitions is ALL or partition in partitions)

    def record(self, nbytes: int, now: float | None = None) -> None:
        """Count bytes moved for throttled replicas (also while the quota is exceeded)."""
        if nbytes <= 0:
            return
        now = self.clock() if now is None else now
        self._purge(now)
        samples = self._samples
        if samples and now - samples[-1][0] < self.window_s:
            samples[-1][1] += nbytes
        else:
            samples.append([now, float(nbytes)])
            if len(samples) > self.num_samples:
                samples.popleft()
        self.total_recorded += nbytes

    def rate(self, now: float | None = None) -> float:
        """Bytes/s over the samples still in the window (Kafka's SimpleRate)."""
        now = self.clock() if now is None else now
        self._purge(now)
        samples = self._samples
        if not samples:
            return 0.0
        total = sum(s[1] for s in samples)
        return total / max(now - samples[0][0], self.window_s)

    def is_quota_exceeded(self, now: float | None = None) -> bool:
        if self.unlimited:
            return False
        return self.rate(now) > self.bound

    def throttle_time(self, now: float | None = None) -> float:
        """Seconds until the rate falls back to the bound with nothing more recorded (0 when
        it is not exceeded): when a fetcher holding back every partition may look again."""
        if self.unlimited:
            return 0.0
        now = self.clock() if now is None else now
        self._purge(now)
        samples = self._samples
        if not samples or self.bound <= 0:
            return 0.0 if not samples else self.window_s
        total = sum(s[1] for s in samples)
        since_oldest = now - samples[0][0]
        if total / max(since_oldest, self.window_s) <= self.bound:
            return 0.0
        # Exceeded, so total / bound > the elapsed time >= one window: the rate reaches
        # the bound when total / (since_oldest + wait) == bound (purging old samples could
        # only make that sooner).
        return total / self.bound - since_oldest

    def _purge(self, now: float) -> None:
        # Samples that started more than num_samples windows ago no longer count (Kafka's
        # purgeObsoleteSamples).
        horizon = now - self.num_samples * self.window_s
        samples = self._samples
        while samples and samples[0][0] <= horizon:
            samples.popleft()


class ReplicationQuotas:
    """The leader and follower quotas of one broker, kept in step with its configs."""

    def __init__(self, broker_id: int, leader_bound: float = UNLIMITED,
                 follower_bound: float = UNLIMITED, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_id = broker_id
        self.leader = ReplicationQuotaManager("LeaderReplication", leader_bound, clock=clock)
        self.follower = ReplicationQuotaManager("FollowerReplication", follower_bound,
                                                clock=clock)

    @classmethod
    def from_config(cls, broker_id: int, config: BrokerConfig) -> ReplicationQuotas:
        quotas = cls(broker_id)
        quotas.apply_broker_config(config)
        return quotas

    def apply_broker_config(self, config: BrokerConfig) -> None:
        """Take the rates from a BrokerConfig (its dynamic layers included)."""
        self.leader.update_quota(int(config.get(LEADER_RATE)))
        self.follower.update_quota(int(config.get(FOLLOWER_RATE)))

    def apply_topic_config(self, topic: str, overrides: Mapping[str, str] | None) -> None:
        """Take a topic's throttled-replica lists from its overrides (Kafka's
        TopicConfigHandler: a missing or empty list removes the throttle). A malformed list
        (written around validation) throttles nothing rather than failing the caller."""
        overrides = overrides or {}
        for quota, name in ((self.leader, LEADER_REPLICAS), (self.follower, FOLLOWER_REPLICAS)):
            try:
                partitions = parse_throttled_replicas(overrides.get(name), self.broker_id)
            except ThrottledReplicasError:
                partitions = frozenset()
            quota.mark_throttled(topic, partitions)

    def remove_topic(self, topic: str) -> None:
        self.leader.remove_throttle(topic)
        self.follower.remove_throttle(topic)
