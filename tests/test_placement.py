"""klog/placement.py: Kafka's replica assignments, rack-unaware and rack-aware, and the
refusals it raises (the broker's error codes for them are tested in tests/daemon/test_admin.py,
the reassignment tool's messages in tests/tools/test_reassignment.py)."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from klog.placement import (
    MAX_PARTITIONS_PER_TOPIC,
    MIXED_RACKS,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    MixedRacksError,
    assign_replicas,
    assign_replicas_rack_aware,
    assign_replicas_to_brokers,
    rack_alternated,
)


@pytest.mark.parametrize("brokers", [[0], [1, 2], [1, 2, 3], [5, 3, 9, 7], [0, 1, 2, 3, 4]])
@pytest.mark.parametrize("rf", [1, 2, 3])
def test_assign_replicas_spreads_leaders_and_replicas(brokers: list[int], rf: int) -> None:
    if rf > len(brokers):
        with pytest.raises(InvalidReplicationFactorError) as info:
            assign_replicas(brokers, 4, rf)
        message = str(info.value)
        assert message == f"Replication factor: {rf} larger than available brokers: " \
                          f"{len(brokers)}."
        return
    n = len(brokers)
    partitions = 4 * n
    out = assign_replicas(brokers, partitions, rf, rng=random.Random(7))
    assert sorted(out) == list(range(partitions))
    for replicas in out.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    leaders = Counter(r[0] for r in out.values())
    assert set(leaders) == set(brokers)
    assert max(leaders.values()) == min(leaders.values()) == partitions // n
    replicas_per_broker = Counter(b for r in out.values() for b in r)
    assert max(replicas_per_broker.values()) == min(replicas_per_broker.values())
    # consecutive partitions start on consecutive brokers (round-robin leaders)
    ids = sorted(brokers)
    firsts = [ids.index(out[p][0]) for p in range(partitions)]
    assert all((b - a) % n == 1 % n for a, b in itertools.pairwise(firsts))


def test_assign_replicas_followers_shift_between_rounds() -> None:
    # With 3 brokers and rf 2 the follower of partitions 0-2 and 3-5 are shifted once
    # more (Kafka's nextReplicaShift), so leader->follower pairs are not all the same.
    out = assign_replicas([0, 1, 2], 6, 2, fixed_start_index=0)
    assert out == {0: [0, 1], 1: [1, 2], 2: [2, 0], 3: [0, 2], 4: [1, 0], 5: [2, 1]}


def test_assign_replicas_refuses_what_cannot_be_placed() -> None:
    with pytest.raises(InvalidPartitionsError, match=r"^Number of partitions must be larger"):
        assign_replicas([0], 0, 0)
    with pytest.raises(InvalidPartitionsError, match=f"limit of {MAX_PARTITIONS_PER_TOPIC}"):
        assign_replicas([0], 2, 1, start_partition=MAX_PARTITIONS_PER_TOPIC - 1)
    with pytest.raises(InvalidReplicationFactorError, match=r"^Replication factor must be"):
        assign_replicas([0], 1, 0)
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 0"):
        assign_replicas([], 1, 1)


def test_rack_aware_assignment_matches_kafkas_test() -> None:
    # AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: k for b, k in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas_rack_aware(racks, 7, 3, fixed_start_index=0) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0],
        5: [2, 0, 3], 6: [0, 4, 2]}


def test_rack_aware_refuses_more_replicas_than_brokers() -> None:
    with pytest.raises(InvalidReplicationFactorError,
                       match=r"^Replication factor: 3 larger than available brokers: 2\.$"):
        assign_replicas_rack_aware({0: "a", 1: "b"}, 1, 3)


def test_assign_to_brokers_is_rack_unaware_without_racks() -> None:
    brokers = {1: None, 2: None, 3: None}
    assert assign_replicas_to_brokers(brokers, 6, 2, fixed_start_index=0) == \
        assign_replicas([1, 2, 3], 6, 2, fixed_start_index=0)


def test_assign_to_brokers_is_rack_aware_with_racks() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert assign_replicas_to_brokers(racks, 7, 3, fixed_start_index=0) == \
        assign_replicas_rack_aware(racks, 7, 3, fixed_start_index=0)
    # Random starts: every partition still has one replica in each of the three racks.
    for seed in range(20):
        out = assign_replicas_to_brokers(racks, 12, 3, rng=random.Random(seed))
        for replicas in out.values():
            assert sorted(racks[b] for b in replicas) == ["rack1", "rack2", "rack3"]


def test_assign_to_brokers_refuses_a_mix_of_racked_and_unracked_brokers() -> None:
    with pytest.raises(MixedRacksError) as info:
        assign_replicas_to_brokers({1: "a", 2: None, 3: "b"}, 1, 1)
    assert str(info.value) == MIXED_RACKS == (
        "Not all brokers have rack information for replica rack aware assignment.")


def test_rack_aware_continues_from_a_start_partition() -> None:
    # Adding partitions 7.. to the topic of Kafka's example continues its round-robin of
    # leaders (the followers' shift starts anew, as in Kafka), one replica in each rack.
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    whole = assign_replicas_rack_aware(racks, 10, 3, fixed_start_index=0)
    added = assign_replicas_rack_aware(racks, 3, 3, fixed_start_index=0, start_partition=7)
    assert sorted(added) == [7, 8, 9]
    assert [added[p][0] for p in added] == [whole[p][0] for p in (7, 8, 9)]
    for replicas in added.values():
        assert sorted(racks[b] for b in replicas) == ["rack1", "rack2", "rack3"]
