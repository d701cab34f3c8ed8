"""Partition assignors of the consumer group protocol: range, roundrobin, cooperative-sticky.

The leader of a consumer group runs one of these over every member's subscription (the
``ConsumerProtocolSubscription`` blobs of the JoinGroup answer) and hands each member its
partitions (``ConsumerProtocolAssignment`` blobs in SyncGroup). The blob formats are
``klog.protocol.internal_topics``'; this module only maps them to plain values.

Results follow Kafka's assignors (org.apache.kafka.clients.consumer):

- ``range``: per topic, partitions in order split in contiguous ranges over the members
  subscribed to it, members sorted as Kafka's MemberInfo sorts them (static members by
  group.instance.id first, then the others by member id); the first ``n % members`` get one
  more.
- ``roundrobin``: every subscribed partition (topics sorted, partitions in order) dealt in
  turn to the sorted members, skipping members not subscribed to the partition's topic.
- ``cooperative-sticky``: balanced (no partition can move to an eligible member holding two
  fewer) while keeping as much of the previous ownership as possible (``owned_partitions``
  and ``generation_id`` of the subscriptions: a partition claimed by two members stays with
  the newer generation). Incremental cooperative rebalancing (KIP-429): a partition whose
  owner changes is left out of this round's assignment, so its old owner revokes it first
  and rejoins; the next round gives it to its new owner.

Pure functions and stateless assignor objects; safe to share.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from klog.client.fetcher import TopicPartition
from klog.protocol.internal_topics import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    InternalTopicError,
    TopicPartitions,
)

__all__ = [
    "ASSIGNORS",
    "COOPERATIVE",
    "EAGER",
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "get_assignor",
    "run_assignor",
]

#: Rebalance protocols (ConsumerPartitionAssignor.RebalanceProtocol).
EAGER = "eager"
COOPERATIVE = "cooperative"


@dataclass(frozen=True, slots=True)
class Subscription:
    """One member's subscription as the leader sees it."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    group_instance_id: str | None = None
    user_data: bytes | None = None
    rack_id: str | None = None


# --- the blobs ----------------------------------------------------------------------------


def _grouped(partitions: Iterable[tuple[str, int]]) -> tuple[TopicPartitions, ...]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in partitions:
        by_topic[topic].append(partition)
    return tuple(TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))


def encode_subscription(topics: Iterable[str], *, owned_partitions: Iterable[tuple[str, int]] = (),
                        generation_id: int = -1, user_data: bytes | None = None,
                        rack_id: str | None = None, version: int = 3) -> bytes:
    """A JoinGroup protocol metadata blob (ConsumerProtocolSubscription; v3 as Kafka 3.x)."""
    return ConsumerProtocolSubscription(
        topics=tuple(sorted(set(topics))), user_data=user_data,
        owned_partitions=_grouped(owned_partitions), generation_id=generation_id,
        rack_id=rack_id, version=version).encode()


def decode_subscription(blob: bytes, group_instance_id: str | None = None) -> Subscription:
    """A member's subscription from its JoinGroup metadata; InternalTopicError if corrupt."""
    sub = ConsumerProtocolSubscription.decode(blob)
    owned = tuple(TopicPartition(tp.topic, p) for tp in sub.owned_partitions
                  for p in tp.partitions)
    return Subscription(tuple(sub.topics), owned, sub.generation_id, group_instance_id,
                        sub.user_data, sub.rack_id)


def encode_assignment(partitions: Iterable[tuple[str, int]], user_data: bytes | None = None,
                      version: int = 3) -> bytes:
    """A SyncGroup assignment blob (ConsumerProtocolAssignment)."""
    return ConsumerProtocolAssignment(
        assigned_partitions=_grouped(partitions), user_data=user_data,
        version=version).encode()


def decode_assignment(blob: bytes | None) -> list[TopicPartition]:
    """A member's partitions from its SyncGroup answer (an empty blob: none), sorted."""
    if not blob:
        return []
    assignment = ConsumerProtocolAssignment.decode(blob)
    return sorted(TopicPartition(tp.topic, p) for tp in assignment.assigned_partitions
                  for p in tp.partitions)


# --- assignors ----------------------------------------------------------------------------


def _member_order(member_id: str, sub: Subscription) -> tuple[int, str]:
    # Kafka's MemberInfo order: static members (by group.instance.id) before dynamic ones
    # (by member id), so a restarted static member gets the same place.
    if sub.group_instance_id is not None:
        return (0, sub.group_instance_id)
    return (1, member_id)


def _sorted_members(subscriptions: Mapping[str, Subscription],
                    members: Iterable[str] | None = None) -> list[str]:
    ids = subscriptions if members is None else members
    return sorted(ids, key=lambda m: _member_order(m, subscriptions[m]))


class PartitionAssignor(ABC):
    """What the consumer needs of an assignor: its protocol name, the rebalance protocols
    it supports, and ``assign``."""

    name: ClassVar[str]
    rebalance_protocols: ClassVar[tuple[str, ...]] = (EAGER,)

    def subscription_user_data(self, topics: Iterable[str]) -> bytes | None:
        """Extra data this assignor wants in its members' subscriptions."""
        return None

    @abstractmethod
    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        """member id -> its partitions. Topics missing from ``partitions_per_topic`` (not
        in the metadata) are skipped; every member gets an entry, maybe empty."""

    def on_assignment(self, assignment: Sequence[TopicPartition],  # noqa: B027 (optional hook)
                      generation_id: int) -> None:
        """Called on every member with its new assignment (no-op by default)."""


class RangeAssignor(PartitionAssignor):
    """Contiguous ranges of each topic's partitions (Kafka's RangeAssignor)."""

    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        consumers: dict[str, list[str]] = defaultdict(list)
        for member_id, sub in subscriptions.items():
            for topic in set(sub.topics):
                consumers[topic].append(member_id)
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        for topic in sorted(consumers):
            count = partitions_per_topic.get(topic)
            if count is None:
                continue
            members = _sorted_members(subscriptions, consumers[topic])
            per_member, extra = divmod(count, len(members))
            for i, member_id in enumerate(members):
                start = per_member * i + min(i, extra)
                length = per_member + (1 if i < extra else 0)
                out[member_id].extend(TopicPartition(topic, p)
                                      for p in range(start, start + length))
        return out


class RoundRobinAssignor(PartitionAssignor):
    """Every partition dealt in turn to the members (Kafka's RoundRobinAssignor)."""

    name = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        members = _sorted_members(subscriptions)
        if not members:
            return out
        topics_of = {m: set(subscriptions[m].topics) for m in members}
        all_topics = sorted(set().union(*topics_of.values()))
        turn = 0
        for topic in all_topics:
            for partition in range(partitions_per_topic.get(topic, 0)):
                while topic not in topics_of[members[turn % len(members)]]:
                    turn += 1
                out[members[turn % len(members)]].append(TopicPartition(topic, partition))
                turn += 1
        return out


class CooperativeStickyAssignor(PartitionAssignor):
    """Balanced and sticky, with incremental cooperative rebalancing (see the module
    docstring); Kafka's CooperativeStickyAssignor."""

    name = "cooperative-sticky"
    rebalance_protocols = (COOPERATIVE, EAGER)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        members = _sorted_members(subscriptions)
        topics_of = {m: set(subscriptions[m].topics) for m in members}
        all_topics = sorted(t for t in set().union(set(), *topics_of.values())
                            if t in partitions_per_topic)
        partitions = [TopicPartition(t, p) for t in all_topics
                      for p in range(partitions_per_topic[t])]
        eligible = {t: [m for m in members if t in topics_of[m]] for t in all_topics}
        previous = self._previous_owners(members, subscriptions, topics_of, set(partitions))
        same_subscriptions = len({frozenset(t) for t in topics_of.values()}) <= 1
        if same_subscriptions:
            target = self._constrained(members, partitions, previous)
        else:
            target = self._general(members, partitions, eligible, previous)
        # KIP-429: a partition changing owner is revoked by its old owner first; the new
        # owner gets it in the follow-up rebalance.
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        for member_id, tps in target.items():
            out[member_id] = sorted(tp for tp in tps
                                    if previous.get(tp, member_id) == member_id)
        return out

    @staticmethod
    def _previous_owners(members: list[str], subscriptions: Mapping[str, Subscription],
                         topics_of: Mapping[str, set[str]], existing: set[TopicPartition]
                         ) -> dict[TopicPartition, str]:
        """Who owns what now: a claim counts when the partition still exists and the member
        still subscribes to its topic; of two claims the higher generation wins (the other
        member missed a rebalance), of equal ones the first member in order."""
        owner: dict[TopicPartition, str] = {}
        generation: dict[TopicPartition, int] = {}
        for member_id in members:
            sub = subscriptions[member_id]
            for tp in sub.owned_partitions:
                tp = TopicPartition(*tp)
                if tp not in existing or tp.topic not in topics_of[member_id]:
                    continue
                if tp not in owner or sub.generation_id > generation[tp]:
                    owner[tp] = member_id
                    generation[tp] = sub.generation_id
        return owner

    @staticmethod
    def _constrained(members: list[str], partitions: list[TopicPartition],
                     previous: Mapping[TopicPartition, str]
                     ) -> dict[str, list[TopicPartition]]:
        """Everyone subscribes to the same topics: each member gets ``min_quota`` or
        ``min_quota + 1`` partitions, keeping what it owned up to its quota."""
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        if not members:
            return out
        min_quota, with_extra = divmod(len(partitions), len(members))
        max_quota = min_quota + (1 if with_extra else 0)
        owned: dict[str, list[TopicPartition]] = defaultdict(list)
        for tp in partitions:
            if tp in previous:
                owned[previous[tp]].append(tp)
        taken: set[TopicPartition] = set()
        at_max = 0
        # Members owning the most keep the extra partition first (fewest moves).
        for member_id in sorted(members, key=lambda m: -len(owned[m])):
            mine = owned[member_id]
            keep = min(len(mine), min_quota)
            if len(mine) > min_quota and at_max < with_extra:
                keep = max_quota
                at_max += 1
            out[member_id] = mine[:keep]
            taken.update(mine[:keep])
        order = {m: i for i, m in enumerate(members)}
        for tp in partitions:
            if tp in taken:
                continue
            least = min(members, key=lambda m: (len(out[m]), order[m]))
            out[least].append(tp)
        return out

    @staticmethod
    def _general(members: list[str], partitions: list[TopicPartition],
                 eligible: Mapping[str, list[str]], previous: Mapping[TopicPartition, str]
                 ) -> dict[str, list[TopicPartition]]:
        """Different subscriptions: keep valid ownership, give each free partition (those
        with the fewest candidates first) to its least loaded candidate, then move
        partitions from a member to a candidate holding at least two fewer until none can."""
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        order = {m: i for i, m in enumerate(members)}
        owner: dict[TopicPartition, str] = {}
        for tp in partitions:
            if tp in previous:
                owner[tp] = previous[tp]
                out[previous[tp]].append(tp)
        free = sorted((tp for tp in partitions if tp not in owner),
                      key=lambda tp: (len(eligible[tp.topic]), tp))
        for tp in free:
            candidates = eligible[tp.topic]
            if not candidates:
                continue
            least = min(candidates, key=lambda m: (len(out[m]), order[m]))
            out[least].append(tp)
            owner[tp] = least
        moved = True
        while moved:  # each move lowers the sum of squared loads: this ends
            moved = False
            for tp in partitions:
                current = owner.get(tp)
                if current is None:
                    continue
                target = min(eligible[tp.topic], key=lambda m: (len(out[m]), order[m]))
                if len(out[target]) + 1 < len(out[current]):
                    out[current].remove(tp)
                    out[target].append(tp)
                    owner[tp] = target
                    moved = True
        return out


ASSIGNORS: Mapping[str, type[PartitionAssignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, CooperativeStickyAssignor)
}


def get_assignor(spec: str | PartitionAssignor) -> PartitionAssignor:
    """An assignor by protocol name (``range``, ``roundrobin``, ``cooperative-sticky``;
    Kafka's class names work too) or the instance itself."""
    if isinstance(spec, PartitionAssignor):
        return spec
    name = spec.strip()
    aliases = {
        "org.apache.kafka.clients.consumer.RangeAssignor": "range",
        "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
    }
    name = aliases.get(name, name).lower()
    try:
        return ASSIGNORS[name]()
    except KeyError:
        raise ValueError(f"unknown partition assignor {spec!r} "
                         f"(one of {', '.join(ASSIGNORS)})") from None


def run_assignor(assignor: PartitionAssignor, partitions_per_topic: Mapping[str, int],
                 members: Iterable[tuple[str, str | None, bytes]]) -> dict[str, bytes]:
    """What the group leader does: decode each (member id, group instance id, metadata)
    of the JoinGroup answer, assign, and encode each member's SyncGroup assignment.

    A member whose metadata cannot be decoded subscribes to nothing (Kafka would fail the
    whole rebalance; one broken member should not stop the others)."""
    subscriptions: dict[str, Subscription] = {}
    for member_id, instance_id, blob in members:
        try:
            subscriptions[member_id] = decode_subscription(blob, instance_id)
        except InternalTopicError:
            subscriptions[member_id] = Subscription((), group_instance_id=instance_id)
    assignment = assignor.assign(partitions_per_topic, subscriptions)
    return {m: encode_assignment(assignment.get(m, ())) for m in subscriptions}
