"""Replication throttles: the quota's rate and throttled-replica lists (with a fake clock),
the configs that set them, and a follower catching up under a leader and a follower
throttle between two in-process brokers (the rate held within 20% of the bound, while an
unthrottled topic on the same brokers replicates at full speed)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.admin_rules import ResourceType
from klog.daemon.broker import Broker
from klog.daemon.config import BrokerConfig
from klog.daemon.replication_quota import (
    ALL,
    UNLIMITED,
    ReplicationQuotaManager,
    ReplicationQuotas,
    ThrottledReplicasError,
    parse_throttled_replicas,
)
from tests.daemon.test_replica_fetcher import _partition, _replicate, _until, run, two_brokers


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- the throttled-replica lists ------------------------------------------------------------


def test_parse_throttled_replicas() -> None:
    assert parse_throttled_replicas("*", 1) is ALL
    assert parse_throttled_replicas(" * ", 7) is ALL
    assert parse_throttled_replicas("0:1,1:2,2:1", 1) == {0, 2}
    assert parse_throttled_replicas("0:1, 1:2 ,2:1", 2) == {1}
    assert parse_throttled_replicas("0:1,1:2", 3) == frozenset()
    assert parse_throttled_replicas("", 1) == frozenset()
    assert parse_throttled_replicas(None, 1) == frozenset()
    for bad in ("0", "a:1", "0:b", "0:1,", "1:2:3", "*,0:1"):
        with pytest.raises(ThrottledReplicasError):
            parse_throttled_replicas(bad, 1)


def test_is_throttled_and_the_empty_map_when_nothing_is() -> None:
    q = ReplicationQuotaManager("LeaderReplication")
    assert not q.throttled and not q.is_throttled("t", 0)
    q.mark_throttled("t", frozenset({0, 2}))
    q.mark_throttled("all")
    assert q.is_throttled("t", 0) and q.is_throttled("t", 2) and not q.is_throttled("t", 1)
    assert q.is_throttled("all", 0) and q.is_throttled("all", 99)
    assert not q.is_throttled("other", 0)
    # A list naming no replica of this broker throttles nothing, and leaves no entry (the
    # hot path only tests the map's truth).
    q.mark_throttled("t", frozenset())
    q.remove_throttle("all")
    assert q.throttled == {}


# -- the rate (Kafka's SimpleRate over 11 one-second samples) ---------------------------------


def test_rate_is_total_over_elapsed_but_at_least_one_window() -> None:
    clock = FakeClock()
    q = ReplicationQuotaManager("FollowerReplication", 1000, clock=clock)
    assert q.rate() == 0.0 and not q.is_quota_exceeded()
    q.record(1500)
    assert q.rate() == 1500.0  # a burst counts as one second's worth
    assert q.is_quota_exceeded()
    clock.now += 0.5
    assert q.rate() == 1500.0
    clock.now += 1.0  # 1.5 s after the first sample started
    assert q.rate() == pytest.approx(1000.0)
    assert not q.is_quota_exceeded()  # exceeded means above the bound
    q.record(500)  # a new sample (the first is older than a window)
    assert q.rate() == pytest.approx(2000 / 1.5)
    assert q.total_recorded == 2000


def test_old_samples_leave_the_window() -> None:
    clock = FakeClock()
    q = ReplicationQuotaManager("LeaderReplication", 10, clock=clock)
    for _ in range(20):
        q.record(100)
        clock.now += 1.0
    # 11 samples of 1 s remain at most; the oldest ones were dropped.
    assert q.rate() == pytest.approx(1000 / 10.0)
    clock.now += 11.0
    assert q.rate() == 0.0 and not q.is_quota_exceeded()


def test_throttle_time_is_when_the_rate_is_back_at_the_bound() -> None:
    clock = FakeClock()
    q = ReplicationQuotaManager("FollowerReplication", 1000, clock=clock)
    assert q.throttle_time() == 0.0
    q.record(3000)
    wait = q.throttle_time()
    assert wait == pytest.approx(3.0)  # 3000 bytes at 1000 B/s
    clock.now += 0.5
    assert q.throttle_time() == pytest.approx(2.5)
    clock.now += 2.5 + 1e-9
    assert not q.is_quota_exceeded() and q.throttle_time() == 0.0


def test_unlimited_is_never_exceeded_and_bounds_change_live() -> None:
    clock = FakeClock()
    q = ReplicationQuotaManager("LeaderReplication", clock=clock)
    assert q.unlimited and q.bound == float(UNLIMITED)
    q.record(10**12)
    assert not q.is_quota_exceeded() and q.throttle_time() == 0.0
    q.update_quota(100)
    assert q.is_quota_exceeded()
    q.update_quota(UNLIMITED)
    assert not q.is_quota_exceeded()


# -- the configs ----------------------------------------------------------------------------


def test_quotas_follow_broker_and_topic_configs(tmp_path: Path) -> None:
    config = BrokerConfig.from_dict({"broker.id": "2", "log.dirs": str(tmp_path)})
    quotas = ReplicationQuotas.from_config(2, config)
    assert quotas.leader.unlimited and quotas.follower.unlimited
    dynamic = config.with_dynamic({"leader.replication.throttled.rate": "1000"},
                                  {"follower.replication.throttled.rate": "2000"})
    quotas.apply_broker_config(dynamic)
    assert (quotas.leader.bound, quotas.follower.bound) == (1000, 2000)
    quotas.apply_topic_config("t", {"leader.replication.throttled.replicas": "0:1,1:2",
                                    "follower.replication.throttled.replicas": "*"})
    assert quotas.leader.throttled == {"t": frozenset({1})}
    assert quotas.follower.throttled == {"t": ALL}
    quotas.apply_topic_config("t", {"follower.replication.throttled.replicas": "junk"})
    assert quotas.leader.throttled == {} and quotas.follower.throttled == {}
    quotas.apply_topic_config("u", {"leader.replication.throttled.replicas": "*"})
    quotas.remove_topic("u")
    assert quotas.leader.throttled == {}


# -- throttled catch-up between two in-process brokers ---------------------------------------

RECORD = 10_000
FETCH_MAX = "20000"  # replica.fetch.max.bytes: the throttle's granularity


async def _fill(broker: Broker, topic: str, count: int) -> int:
    """Append ``count`` batches of one RECORD-byte record to ``topic``-0; returns bytes."""
    from klog.daemon.admin_rules import TopicSpec
    from tests.daemon.test_replica_fetcher import _batch

    await broker.admin.create_topics([TopicSpec(topic, 1, 1)])
    rm = broker.replica_manager
    assert rm is not None
    for _ in range(count):
        rm.append_records({(topic, 0): _batch(os.urandom(RECORD))}, 1)
    return _partition(broker, topic).log.size  # type: ignore[attr-defined]


async def _catch_up_rate(leader: Broker, follower: Broker, topic: str) -> tuple[float, float]:
    """Seconds the follower takes to reach the leader's log end, and its bytes/s."""
    end = _partition(leader, topic).log_end_offset  # type: ignore[attr-defined]
    size = _partition(leader, topic).log.size  # type: ignore[attr-defined]
    start = time.monotonic()
    await _replicate(leader, follower, topic)
    f = _partition(follower, topic)
    await _until(lambda: f.log_end_offset == end, timeout=30)  # type: ignore[attr-defined]
    elapsed = time.monotonic() - start
    return elapsed, size / elapsed


def test_leader_throttle_holds_a_catching_up_follower_to_the_rate(tmp_path: Path) -> None:
    bound = 200_000

    async def go() -> None:
        async with two_brokers(tmp_path, **{"replica.fetch.max.bytes": FETCH_MAX}) as (b1, b2):
            await _fill(b1, "t", 60)
            await _fill(b1, "u", 60)
            errors = await b1.admin.alter_configs([
                (ResourceType.BROKER, "1", {"leader.replication.throttled.rate": str(bound)}),
                (ResourceType.TOPIC, "t", {"leader.replication.throttled.replicas": "0:1"}),
            ])
            assert all(e.error_code == 0 for e in errors), errors
            assert b1.replication_quotas.leader.throttled == {"t": frozenset({0})}
            assert b1.replication_quotas.leader.bound == bound
            # The unthrottled topic goes at full speed ...
            fast, _ = await _catch_up_rate(b1, b2, "u")
            assert fast < 1.0
            # ... the throttled one at the bound (within 20%).
            elapsed, rate = await _catch_up_rate(b1, b2, "t")
            print(f"catch-up at {rate:.0f} B/s (bound {bound}) in {elapsed:.2f} s")
            assert 0.8 * bound <= rate <= 1.2 * bound, (elapsed, rate)
            assert b1.replication_quotas.leader.total_recorded >= 600_000
            # Once in sync, the throttle no longer holds it back (Kafka: only out-of-sync
            # replicas are throttled).
            await _until(lambda: _partition(b1, "t").isr == (1, 2))  # type: ignore
            rm = b1.replica_manager
            assert rm is not None
            b1.replication_quotas.leader.record(100 * bound)  # far over the bound
            assert b1.replication_quotas.leader.is_quota_exceeded()
            rm.append_records({("t", 0): bytearray(_batch_of(RECORD))}, 1)
            f = _partition(b2, "t")
            end = _partition(b1, "t").log_end_offset  # type: ignore[attr-defined]
            await _until(lambda: f.log_end_offset == end, timeout=2)  # type: ignore

    run(go)


def test_follower_throttle_holds_its_own_fetches_to_the_rate(tmp_path: Path) -> None:
    bound = 200_000

    async def go() -> None:
        async with two_brokers(tmp_path, **{"replica.fetch.max.bytes": FETCH_MAX}) as (b1, b2):
            await _fill(b1, "t", 60)
            changes = b2.admin.config_changes
            changes.apply_broker_configs({"follower.replication.throttled.rate": str(bound)},
                                         {})
            changes.apply_topic_overrides("t", {"follower.replication.throttled.replicas": "*"})
            assert b2.fetcher_manager is not None
            assert b2.fetcher_manager.quota is b2.replication_quotas.follower
            assert b2.replication_quotas.follower.bound == bound
            elapsed, rate = await _catch_up_rate(b1, b2, "t")
            print(f"catch-up at {rate:.0f} B/s (bound {bound}) in {elapsed:.2f} s")
            assert 0.8 * bound <= rate <= 1.2 * bound, (elapsed, rate)
            assert b2.replication_quotas.follower.total_recorded >= 600_000
            # The leader did not throttle anything: its quota was never configured.
            assert b1.replication_quotas.leader.total_recorded == 0

    run(go)


def _batch_of(size: int) -> bytes:
    from tests.daemon.test_replica_fetcher import _batch

    return bytes(_batch(os.urandom(size)))


def test_a_held_back_partition_resumes_when_the_bound_is_lifted(tmp_path: Path) -> None:
    """A follower holding back every partition sleeps (at most replica.fetch.backoff.ms at a
    time) and fetches again as soon as the quota allows it."""

    async def go() -> None:
        async with two_brokers(tmp_path, **{"replica.fetch.max.bytes": FETCH_MAX}) as (b1, b2):
            await _fill(b1, "t", 10)
            quotas = b2.replication_quotas
            quotas.follower.update_quota(1)
            b2.admin.config_changes.apply_topic_overrides(
                "t", {"follower.replication.throttled.replicas": "0:2"})
            quotas.follower.record(10_000)  # far over the bound: held back for a long time
            await _replicate(b1, b2, "t")
            await asyncio.sleep(0.5)
            assert _partition(b2, "t").log_end_offset == 0  # type: ignore[attr-defined]
            # Lifting the bound lets it through.
            quotas.follower.update_quota(UNLIMITED)
            end = _partition(b1, "t").log_end_offset  # type: ignore[attr-defined]
            f = _partition(b2, "t")
            await _until(lambda: f.log_end_offset == end, timeout=5)  # type: ignore

    run(go)


def test_a_held_back_fetch_waits_only_until_the_quota_allows_it() -> None:
    from types import SimpleNamespace

    from klog.daemon.replica_manager import ReplicaManager

    clock = FakeClock()
    quota = ReplicationQuotaManager("LeaderReplication", 1000, clock=clock)
    quota.mark_throttled("t")
    parts = {("t", 0): SimpleNamespace(isr=(1, 2)), ("u", 0): SimpleNamespace(isr=(1,))}
    rm: Any = SimpleNamespace(partitions=parts)
    _throttled_wait = ReplicaManager._throttled_wait
    wanted = [("t", 0, 0, 1 << 20, -1), ("u", 0, 0, 1 << 20, -1)]
    assert _throttled_wait(rm, quota, wanted, 3, 500) == 500  # not exceeded
    quota.record(1250)
    clock.now += 1.0  # 1250 bytes in 1 s: at the bound 0.25 s from now
    assert _throttled_wait(rm, quota, wanted, 3, 500) == 250  # out of sync: held
    assert _throttled_wait(rm, quota, wanted, 2, 500) == 500  # in sync: not held
    assert _throttled_wait(rm, quota, wanted[1:], 3, 500) == 500  # nothing throttled
    quota.record(10_000)
    assert _throttled_wait(rm, quota, wanted, 3, 500) == 500  # never beyond max_wait
    assert _throttled_wait(rm, quota, wanted, 3, 20_000) == 10_250
