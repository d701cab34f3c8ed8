"""One classic consumer group's in-memory state: members, generation, protocol, state machine.

The model is Kafka 3.x's ``GroupMetadata`` / ``MemberMetadata`` (classic protocol):

- States and their legal predecessors (``VALID_PREVIOUS_STATES``)::

      Empty               <- PreparingRebalance          (no member rejoined)
      PreparingRebalance  <- Stable, CompletingRebalance, Empty
      CompletingRebalance <- PreparingRebalance          (every member joined or timed out)
      Stable              <- CompletingRebalance         (the leader's assignment was stored)
      Dead                <- any state                   (group deleted or unloaded)

- Protocol selection: the candidates are the protocols every member supports; each member
  votes for the first candidate in its own preference order, and the most votes win (a tie
  goes to the candidate first in the leader's list, so the choice is deterministic).
- Static members (``group.instance.id``) are kept in ``static_members`` (instance id ->
  current member id); a rejoining instance gets a new member id and the old one is fenced.
- Members that were told MEMBER_ID_REQUIRED wait in ``pending_members`` until they join
  with that id.

Callbacks: a member waiting in JoinGroup or SyncGroup has ``awaiting_join`` /
``awaiting_sync`` set to a one-shot callable that delivers the response; the coordinator
makes these from asyncio futures. This module does no I/O and knows nothing of timers.

Locking: none. Everything runs on the broker's event loop thread (the coordinator calls in).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolSubscription,
    GroupMetadataValue,
    InternalTopicError,
)
from klog.protocol.internal_topics import MemberMetadata as StoredMember

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(RuntimeError):
    """A transition the state table forbids: a coordinator bug, never a client's fault."""


@dataclass(slots=True)
class JoinGroupResult:
    error: ErrorCode
    member_id: str = UNKNOWN_MEMBER_ID
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    # (member_id, group_instance_id, metadata): only the leader gets them
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncGroupResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


JoinCallback = Callable[[JoinGroupResult], None]
SyncCallback = Callable[[SyncGroupResult], None]
Protocols = list[tuple[str, bytes]]


def join_error(member_id: str, error: ErrorCode) -> JoinGroupResult:
    return JoinGroupResult(error=error, member_id=member_id)


class MemberMetadata:
    """One member: identity, timeouts, supported protocols (in preference order), and the
    pending JoinGroup/SyncGroup response callbacks."""

    __slots__ = (
        "assignment", "awaiting_join", "awaiting_sync", "client_host", "client_id",
        "group_id", "group_instance_id", "heartbeat_satisfied", "is_leaving", "is_new",
        "member_id", "protocol_type", "rebalance_timeout_ms", "session_timeout_ms",
        "supported_protocols",
    )

    def __init__(
        self,
        member_id: str,
        group_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        supported_protocols: Protocols,
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.supported_protocols = list(supported_protocols)
        self.assignment = assignment
        self.awaiting_join: JoinCallback | None = None
        self.awaiting_sync: SyncCallback | None = None
        self.is_new = False
        self.is_leaving = False
        self.heartbeat_satisfied = False

    def __repr__(self) -> str:
        return f"MemberMetadata({self.member_id!r}, instance={self.group_instance_id!r})"

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def has_satisfied_heartbeat(self) -> bool:
        """Whether the session deadline that just passed is excused.

        A new member (still in its first JoinGroup) needs a real completion; members
        waiting in JoinGroup/SyncGroup are excused (their sockets are parked with us).
        """
        if self.is_new:
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True
        return self.heartbeat_satisfied

    def protocols(self) -> set[str]:
        return {name for name, _ in self.supported_protocols}

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.supported_protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Protocols) -> bool:
        """Same protocols with the same metadata, in the same order."""
        if len(protocols) != len(self.supported_protocols):
            return False
        return all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1])
            for a, b in zip(protocols, self.supported_protocols, strict=True)
        )

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.supported_protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


class GroupMetadata:
    """A group's state (see the module docstring). Mutated only by the coordinator."""

    def __init__(
        self,
        group_id: str,
        state: GroupState = GroupState.EMPTY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.group_id = group_id
        self.state = state
        self._clock = clock
        self.current_state_timestamp: int | None = self._now_ms()
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_members_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None

    def __repr__(self) -> str:
        return (f"GroupMetadata({self.group_id!r}, {self.state}, generation={self.generation_id}, "
                f"members={len(self.members)})")

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # -- state ----------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalStateTransition(
                f"group {self.group_id} cannot go from {self.state} to {state}"
            )
        self.state = state
        self.current_state_timestamp = self._now_ms()

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # -- members --------------------------------------------------------------------------

    @property
    def size(self) -> int:
        return len(self.members)

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> MemberMetadata:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        prefix = client_id if group_instance_id is None else group_instance_id
        return f"{prefix}-{uuid.uuid4()}"

    def add(self, member: MemberMetadata, callback: JoinCallback | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.discard(member.member_id)
        self.supported_protocols.update(member.protocols())
        member.awaiting_join = callback
        if callback is not None:
            self.num_members_awaiting_join += 1

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self.supported_protocols.subtract(member.protocols())
        self.supported_protocols += Counter()  # drop zero counts
        if member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        if member.group_instance_id is not None and (
            self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        return member

    def add_pending_member(self, member_id: str) -> None:
        self.pending_members.add(member_id)

    def remove_pending_member(self, member_id: str) -> None:
        self.pending_members.discard(member_id)

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def current_static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> MemberMetadata:
        """Give a static member a new member id (the old one is fenced from now on).

        A JoinGroup/SyncGroup the old id still has parked is answered FENCED_INSTANCE_ID.
        """
        member = self.members.pop(old_member_id)
        if member.is_awaiting_join:
            self.maybe_invoke_join_callback(member, join_error(old_member_id,
                                                               ErrorCode.FENCED_INSTANCE_ID))
        self.maybe_invoke_sync_callback(member, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def update_member(
        self,
        member: MemberMetadata,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        callback: JoinCallback | None,
    ) -> None:
        self.supported_protocols.subtract(member.protocols())
        member.supported_protocols = list(protocols)
        self.supported_protocols.update(member.protocols())
        self.supported_protocols += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if callback is not None and not member.is_awaiting_join:
            self.num_members_awaiting_join += 1
        elif callback is None and member.is_awaiting_join:
            self.num_members_awaiting_join -= 1
        member.awaiting_join = callback

    def maybe_invoke_join_callback(self, member: MemberMetadata, result: JoinGroupResult) -> bool:
        callback = member.awaiting_join
        if callback is None:
            return False
        member.awaiting_join = None
        self.num_members_awaiting_join -= 1
        callback(result)
        return True

    def maybe_invoke_sync_callback(self, member: MemberMetadata, result: SyncGroupResult) -> bool:
        callback = member.awaiting_sync
        if callback is None:
            return False
        member.awaiting_sync = None
        callback(result)
        return True

    def has_all_members_joined(self) -> bool:
        return (len(self.members) == self.num_members_awaiting_join
                and not self.pending_members)

    def not_yet_rejoined_members(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def all_members_awaiting_join(self) -> int:
        return self.num_members_awaiting_join

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False if none did."""
        if self.leader_id is not None:
            leader = self.members.get(self.leader_id)
            if leader is not None and leader.is_awaiting_join:
                return True
            for member in self.members.values():
                if member.is_awaiting_join:
                    self.leader_id = member.member_id
                    return True
            self.leader_id = None
            return False
        return False

    # -- protocols ------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        names = set(protocols)
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return (self.protocol_type == protocol_type
                and any(self.supported_protocols.get(p, 0) == n for p in names))

    def select_protocol(self) -> str:
        if not self.members:
            raise IllegalStateTransition(
                f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        winners = {p for p, v in votes.items() if v == best}
        # Deterministic tie-break: the preference order of the leader (else any member).
        reference = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        for name, _ in reference.supported_protocols:
            if name in winners:
                return name
        return min(winners)

    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None when unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                sub = ConsumerProtocolSubscription.decode(member.metadata(self.protocol_name))
            except (InternalTopicError, KeyError):
                return None
            topics.update(sub.topics)
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        if self.protocol_name is None:
            raise IllegalStateTransition(f"no protocol selected for group {self.group_id}")
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()]

    # -- views ----------------------------------------------------------------------------

    def summary(self) -> dict[str, object]:
        """What DescribeGroups shows: member metadata and assignments only when Stable."""
        stable = self.is_(GroupState.STABLE)
        members = []
        for m in self.members.values():
            members.append({
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata(self.protocol_name or "") if stable else b"",
                "member_assignment": m.assignment if stable else b"",
            })
        return {
            "group_state": str(self.state),
            "protocol_type": self.protocol_type or "",
            "protocol_data": (self.protocol_name or "") if stable else "",
            "members": members,
        }

    def to_value(self, assignment: dict[str, bytes]) -> GroupMetadataValue:
        """The record stored in __consumer_offsets (value version 3, as Kafka 3.x writes)."""
        protocol = self.protocol_name
        members = tuple(
            StoredMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(protocol) if protocol is not None else b"",
                assignment=assignment.get(m.member_id, b""),
            )
            for m in self.members.values()
        )
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=protocol,
            leader=self.leader_id,
            current_state_timestamp=(self.current_state_timestamp
                                     if self.current_state_timestamp is not None else -1),
            members=members,
            version=3,
        )

    @classmethod
    def from_value(
        cls, group_id: str, value: GroupMetadataValue, clock: Callable[[], float] = time.time
    ) -> GroupMetadata:
        """Rebuild a loaded group: Stable with its members, or Empty without any."""
        state = GroupState.STABLE if value.members else GroupState.EMPTY
        group = cls(group_id, state, clock)
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        if value.current_state_timestamp >= 0:
            group.current_state_timestamp = value.current_state_timestamp
        for stored in value.members:
            protocols = [(value.protocol, stored.subscription)] if value.protocol else []
            member = MemberMetadata(
                stored.member_id, group_id, stored.group_instance_id, stored.client_id,
                stored.client_host, stored.rebalance_timeout or stored.session_timeout,
                stored.session_timeout, value.protocol_type, protocols, stored.assignment,
            )
            group.add(member)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        with contextlib.suppress(IllegalStateTransition):
            group.subscribed_topics = group.compute_subscribed_topics()
        return group
