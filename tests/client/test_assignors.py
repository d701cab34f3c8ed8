"""klog.client.assignors: range, roundrobin and cooperative-sticky, against kafka-python's
assignors (kafka.coordinator.assignors) as an independent oracle, and the blob formats
against kafka-python's ConsumerProtocol decoder."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import pytest
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor as KpCoop
from kafka.coordinator.assignors.range import RangePartitionAssignor as KpRange
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor as KpRoundRobin
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment as KpAssignment,
)
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolSubscription as KpSubscription,
)

from klog.client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    get_assignor,
    run_assignor,
)
from klog.client.fetcher import TopicPartition as TP

# --- the oracle ----------------------------------------------------------------------------


class _Cluster:
    def __init__(self, partitions_per_topic: dict[str, int]) -> None:
        self._p = partitions_per_topic

    def topics(self) -> set[str]:
        return set(self._p)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self._p.get(topic)
        return None if n is None else set(range(n))


def _kp_members(subs: dict[str, Subscription]) -> list[SimpleNamespace]:
    members = []
    for member_id, sub in subs.items():
        by_topic: dict[str, list[int]] = {}
        for t, p in sub.owned_partitions:
            by_topic.setdefault(t, []).append(p)
        owned = [SimpleNamespace(topic=t, partitions=sorted(ps)) for t, ps in by_topic.items()]
        metadata = SimpleNamespace(topics=list(sub.topics), user_data=b"",
                                   owned_partitions=owned, generation_id=sub.generation_id)
        members.append(SimpleNamespace(member_id=member_id,
                                       group_instance_id=sub.group_instance_id,
                                       metadata=metadata))
    return members


def _kp_assign(assignor: object, partitions: dict[str, int], subs: dict[str, Subscription]
               ) -> dict[str, list[TP]]:
    result = assignor.assign(_Cluster(partitions), _kp_members(subs))  # type: ignore[attr-defined]
    return {m: sorted(TP(t, p) for t, ps in a.assigned_partitions for p in ps)
            for m, a in result.items()}


def _ours(assignor: object, partitions: dict[str, int], subs: dict[str, Subscription]
          ) -> dict[str, list[TP]]:
    return {m: sorted(tps) for m, tps in assignor.assign(partitions, subs).items()}  # type: ignore[attr-defined]


def _random_case(rng: random.Random, same_topics: bool
                 ) -> tuple[dict[str, int], dict[str, Subscription]]:
    topics = {f"t{i}": rng.randint(1, 12) for i in range(rng.randint(1, 5))}
    names = sorted(topics)
    subs = {}
    for i in range(rng.randint(1, 7)):
        chosen = names if same_topics else rng.sample(names, rng.randint(1, len(names)))
        subs[f"consumer-{rng.randrange(1 << 30):08x}-{i}"] = Subscription(tuple(chosen))
    return topics, subs


# --- range and roundrobin: exactly kafka-python's results -----------------------------------


def test_range_example_from_kafka_docs() -> None:
    subs = {"C0": Subscription(("t0", "t1")), "C1": Subscription(("t0", "t1"))}
    assert _ours(RangeAssignor(), {"t0": 3, "t1": 3}, subs) == {
        "C0": [TP("t0", 0), TP("t0", 1), TP("t1", 0), TP("t1", 1)],
        "C1": [TP("t0", 2), TP("t1", 2)],
    }


def test_roundrobin_example_from_kafka_docs() -> None:
    subs = {"C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1")),
            "C2": Subscription(("t0", "t1", "t2"))}
    assert _ours(RoundRobinAssignor(), {"t0": 1, "t1": 2, "t2": 3}, subs) == {
        "C0": [TP("t0", 0)],
        "C1": [TP("t1", 0)],
        "C2": [TP("t1", 1), TP("t2", 0), TP("t2", 1), TP("t2", 2)],
    }


@pytest.mark.parametrize("seed", range(40))
def test_range_matches_kafka_python(seed: int) -> None:
    partitions, subs = _random_case(random.Random(seed), same_topics=seed % 2 == 0)
    assert _ours(RangeAssignor(), partitions, subs) == _kp_assign(KpRange(), partitions, subs)


@pytest.mark.parametrize("seed", range(40))
def test_roundrobin_matches_kafka_python(seed: int) -> None:
    # Same subscriptions only: kafka-python 3.0.12's roundrobin crashes when members
    # subscribe to different topics (it rebinds member_id to a (instance, id) tuple while
    # skipping); the Kafka documentation example above covers that case.
    partitions, subs = _random_case(random.Random(seed), same_topics=True)
    assert (_ours(RoundRobinAssignor(), partitions, subs)
            == _kp_assign(KpRoundRobin(), partitions, subs))


def test_static_members_sort_first_by_instance_id() -> None:
    # Kafka's MemberInfo order: a static member keeps its place whatever member id it gets.
    subs = {"a-dynamic": Subscription(("t",)),
            "z-static": Subscription(("t",), group_instance_id="i-1"),
            "m-static": Subscription(("t",), group_instance_id="i-2")}
    got = _ours(RangeAssignor(), {"t": 3}, subs)
    assert got == {"z-static": [TP("t", 0)], "m-static": [TP("t", 1)],
                   "a-dynamic": [TP("t", 2)]}
    assert got == _kp_assign(KpRange(), {"t": 3}, subs)


def test_unknown_topics_are_skipped_and_everyone_gets_an_entry() -> None:
    subs = {"a": Subscription(("gone",)), "b": Subscription(("t",))}
    for assignor in (RangeAssignor(), RoundRobinAssignor(), CooperativeStickyAssignor()):
        assert _ours(assignor, {"t": 2}, subs) == {"a": [], "b": [TP("t", 0), TP("t", 1)]}


# --- cooperative-sticky ---------------------------------------------------------------------


def _counts(assignment: dict[str, list[TP]]) -> list[int]:
    return sorted(len(v) for v in assignment.values())


def _every_partition_once(assignment: dict[str, list[TP]], partitions: dict[str, int],
                          subs: dict[str, Subscription]) -> None:
    seen = Counter(tp for tps in assignment.values() for tp in tps)
    subscribed = {t for s in subs.values() for t in s.topics if t in partitions}
    assert set(seen) == {TP(t, p) for t in subscribed for p in range(partitions[t])}
    assert max(seen.values()) == 1
    for member, tps in assignment.items():
        assert all(tp.topic in subs[member].topics for tp in tps)


def _balanced(assignment: dict[str, list[TP]], subs: dict[str, Subscription]) -> bool:
    """Kafka's criterion: no partition could move to an eligible member with 2 fewer."""
    for tps in assignment.values():
        for tp in tps:
            for other, theirs in assignment.items():
                if tp.topic in subs[other].topics and len(theirs) + 1 < len(tps):
                    return False
    return True


@pytest.mark.parametrize("seed", range(30))
def test_fresh_sticky_assignment_is_complete_balanced_and_like_kafka_python(seed: int) -> None:
    partitions, subs = _random_case(random.Random(seed), same_topics=seed % 3 != 0)
    ours = _ours(CooperativeStickyAssignor(), partitions, subs)
    _every_partition_once(ours, partitions, subs)
    assert _balanced(ours, subs)
    theirs = _kp_assign(KpCoop(), partitions, subs)
    if seed % 3 != 0:  # same subscriptions: the load per member is determined
        assert _counts(ours) == _counts(theirs)


def _with_owned(subs: dict[str, Subscription], assignment: dict[str, list[TP]],
                generation: int) -> dict[str, Subscription]:
    return {m: Subscription(s.topics, tuple(assignment.get(m, ())), generation,
                            s.group_instance_id) for m, s in subs.items()}


def _two_rounds(assignor: CooperativeStickyAssignor, partitions: dict[str, int],
                subs: dict[str, Subscription]) -> tuple[dict[str, list[TP]], dict[str, list[TP]]]:
    first = _ours(assignor, partitions, subs)
    # Members revoke what they lost and rejoin owning what they kept.
    second = _ours(assignor, partitions, _with_owned(subs, first, 2))
    return first, second


def test_member_joining_takes_partitions_over_two_rounds_without_double_ownership() -> None:
    partitions = {"t": 6}
    old = {"a": Subscription(("t",)), "b": Subscription(("t",))}
    start = _ours(CooperativeStickyAssignor(), partitions, old)
    assert _counts(start) == [3, 3]
    subs = _with_owned(old, start, 1)
    subs["c"] = Subscription(("t",))
    first, second = _two_rounds(CooperativeStickyAssignor(), partitions, subs)
    # Round one: a and b only keep (no partition goes to c while another member owns it).
    assert set(first["a"]) <= set(start["a"]) and set(first["b"]) <= set(start["b"])
    assert first["c"] == [] and _counts(first) == [0, 2, 2]
    # Round two: the revoked ones go to c; a and b keep the rest.
    _every_partition_once(second, partitions, subs)
    assert _counts(second) == [2, 2, 2]
    assert second["a"] == first["a"] and second["b"] == first["b"]
    # kafka-python's cooperative-sticky moves the same number of partitions in round one.
    kp_first = _kp_assign(KpCoop(), partitions, subs)
    assert _counts(kp_first) == _counts(first)


def test_member_leaving_its_partitions_go_to_the_others_in_one_round() -> None:
    partitions = {"t": 7, "u": 2}
    subs = {m: Subscription(("t", "u")) for m in ("a", "b", "c")}
    start = _ours(CooperativeStickyAssignor(), partitions, subs)
    remaining = _with_owned({m: subs[m] for m in ("a", "b")}, start, 1)
    after = _ours(CooperativeStickyAssignor(), partitions, remaining)
    _every_partition_once(after, partitions, remaining)
    assert _counts(after) == [4, 5]
    for m in ("a", "b"):  # sticky: nothing the survivors owned moved
        assert set(start[m]) <= set(after[m])
    kp_after = _kp_assign(KpCoop(), partitions, remaining)
    for m in ("a", "b"):
        assert set(start[m]) <= set(kp_after[m])
    assert _counts(kp_after) == _counts(after)


def test_claims_of_an_older_generation_lose() -> None:
    partitions = {"t": 2}
    subs = {"a": Subscription(("t",), (TP("t", 0), TP("t", 1)), generation_id=3),
            "b": Subscription(("t",), (TP("t", 0),), generation_id=4)}
    first = _ours(CooperativeStickyAssignor(), partitions, subs)
    assert first == {"a": [TP("t", 1)], "b": [TP("t", 0)]}


@pytest.mark.parametrize("seed", range(30))
def test_random_membership_changes_stay_consistent(seed: int) -> None:
    rng = random.Random(1000 + seed)
    partitions, subs = _random_case(rng, same_topics=seed % 2 == 0)
    assignor = CooperativeStickyAssignor()
    current = _ours(assignor, partitions, subs)
    generation = 1
    for _ in range(4):
        # Someone leaves, someone joins (with one of the topic sets in use).
        if len(subs) > 1 and rng.random() < 0.5:
            gone = rng.choice(sorted(subs))
            subs.pop(gone)
            current.pop(gone)
        joiner = f"new-{rng.randrange(1 << 20)}"
        subs[joiner] = Subscription(rng.choice(list(subs.values())).topics)
        owned = _with_owned(subs, current, generation)
        first = _ours(assignor, partitions, owned)
        for m, tps in first.items():  # round one only ever shrinks what a member owns
            previous = set(current.get(m, ()))
            assert set(tps) - previous <= _unowned(current, tps)
        generation += 1
        current = _ours(assignor, partitions, _with_owned(subs, first, generation))
        generation += 1
        _every_partition_once(current, partitions, subs)
        assert _balanced(current, subs)


def _unowned(current: dict[str, list[TP]], tps: list[TP]) -> set[TP]:
    owned = {tp for v in current.values() for tp in v}
    return {tp for tp in tps if tp not in owned}


def test_stable_group_keeps_its_assignment() -> None:
    partitions = {"t": 5, "u": 3}
    subs = {m: Subscription(("t", "u")) for m in ("a", "b", "c")}
    first = _ours(CooperativeStickyAssignor(), partitions, subs)
    again = _ours(CooperativeStickyAssignor(), partitions, _with_owned(subs, first, 1))
    assert again == first


# --- blobs and the leader's run --------------------------------------------------------------


def test_subscription_blob_reads_back_and_kafka_python_reads_it() -> None:
    blob = encode_subscription(["b", "a", "a"], owned_partitions=[("a", 1), ("a", 0), ("b", 2)],
                               generation_id=7)
    sub = decode_subscription(blob, "static-1")
    assert sub == Subscription(("a", "b"), (TP("a", 0), TP("a", 1), TP("b", 2)), 7, "static-1")
    theirs = KpSubscription.decode(blob)
    assert theirs.topics == ["a", "b"] and theirs.generation_id == 7
    assert [(tp.topic, tp.partitions) for tp in theirs.owned_partitions] == [
        ("a", [0, 1]), ("b", [2])]


def test_assignment_blob_reads_back_and_kafka_python_reads_it() -> None:
    blob = encode_assignment([("t", 2), ("s", 0), ("t", 0)])
    assert decode_assignment(blob) == [TP("s", 0), TP("t", 0), TP("t", 2)]
    assert sorted(KpAssignment.decode(blob).partitions()) == [("s", 0), ("t", 0), ("t", 2)]
    assert decode_assignment(b"") == []


def test_old_subscription_versions_decode() -> None:
    v0 = encode_subscription(["t"], version=0)
    assert decode_subscription(v0) == Subscription(("t",))
    v1 = encode_subscription(["t"], owned_partitions=[("t", 3)], version=1)
    assert decode_subscription(v1).owned_partitions == (TP("t", 3),)


def test_run_assignor_encodes_each_members_assignment() -> None:
    members = [("m1", None, encode_subscription(["t"])),
               ("m2", None, encode_subscription(["t"])),
               ("bad", None, b"\x00")]
    blobs = run_assignor(RangeAssignor(), {"t": 3}, members)
    assert {m: decode_assignment(b) for m, b in blobs.items()} == {
        "m1": [TP("t", 0), TP("t", 1)], "m2": [TP("t", 2)], "bad": []}


def test_get_assignor_by_name() -> None:
    assert get_assignor("range").name == "range"
    assert get_assignor("RoundRobin").name == "roundrobin"
    assert get_assignor("org.apache.kafka.clients.consumer.CooperativeStickyAssignor").name == (
        "cooperative-sticky")
    with pytest.raises(ValueError, match="unknown partition assignor"):
        get_assignor("sticky-ish")
