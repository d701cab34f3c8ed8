"""Tests for klog.daemon.group.group: states, members, protocol selection, stored form."""

from __future__ import annotations

import pytest

from klog.daemon.group.group import (
    GroupMetadata,
    GroupState,
    IllegalStateTransition,
    JoinGroupResult,
    MemberMetadata,
    SyncGroupResult,
)
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import (
    ConsumerProtocolSubscription,
    GroupMetadataValue,
)


def member(member_id: str, protocols: list[tuple[str, bytes]], instance: str | None = None,
           rebalance: int = 300, session: int = 100) -> MemberMetadata:
    return MemberMetadata(member_id, "g", instance, "client", "/10.0.0.1", rebalance, session,
                          "consumer", protocols)


def sub(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(topics=topics).encode()


def test_state_transitions_follow_the_table() -> None:
    group = GroupMetadata("g", clock=lambda: 12.5)
    assert group.state is GroupState.EMPTY and group.current_state_timestamp == 12500
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.STABLE)
    group.transition_to(GroupState.PREPARING_REBALANCE)
    assert not group.can_rebalance()
    group.transition_to(GroupState.COMPLETING_REBALANCE)
    assert group.can_rebalance()
    group.transition_to(GroupState.STABLE)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.EMPTY)
    group.transition_to(GroupState.DEAD)
    group.transition_to(GroupState.DEAD)


def test_first_member_sets_protocol_type_and_leader_awaiting_counts() -> None:
    group = GroupMetadata("g")
    answers: list[JoinGroupResult] = []
    group.add(member("a", [("range", b"")]), answers.append)
    group.add(member("b", [("range", b"")]))
    assert group.protocol_type == "consumer" and group.leader_id == "a"
    assert group.num_members_awaiting_join == 1 and not group.has_all_members_joined()
    assert [m.member_id for m in group.not_yet_rejoined_members()] == ["b"]
    group.update_member(group.get("b"), [("range", b"x")], 500, 100, answers.append)
    assert group.has_all_members_joined() and group.rebalance_timeout_ms == 500
    group.add_pending_member("c")
    assert not group.has_all_members_joined()
    group.remove_pending_member("c")
    assert group.maybe_invoke_join_callback(group.get("a"), JoinGroupResult(ErrorCode.NONE))
    assert not group.maybe_invoke_join_callback(group.get("a"), JoinGroupResult(ErrorCode.NONE))
    assert group.num_members_awaiting_join == 1 and len(answers) == 1
    group.remove("a")
    assert group.leader_id == "b"
    assert group.num_members_awaiting_join == 1
    group.remove("b")
    assert group.leader_id is None and group.num_members_awaiting_join == 0
    assert not group.supported_protocols


def test_protocol_support_and_votes() -> None:
    group = GroupMetadata("g")
    assert not group.supports_protocols("", ["range"])
    assert not group.supports_protocols("consumer", [])
    assert group.supports_protocols("consumer", ["anything"])
    group.add(member("a", [("range", b""), ("roundrobin", b"")]))
    group.add(member("b", [("roundrobin", b""), ("range", b"")]))
    group.add(member("c", [("roundrobin", b"")]))
    group.transition_to(GroupState.PREPARING_REBALANCE)
    assert group.candidate_protocols() == {"roundrobin"}
    assert group.select_protocol() == "roundrobin"
    assert group.supports_protocols("consumer", ["roundrobin", "x"])
    assert not group.supports_protocols("consumer", ["range"])
    assert not group.supports_protocols("connect", ["roundrobin"])
    group.remove("c")
    # A tie (a: range, b: roundrobin) goes to the leader's preference.
    assert group.select_protocol() == "range"


def test_member_matches_and_heartbeat_rules() -> None:
    m = member("a", [("range", b"1"), ("rr", b"2")])
    assert m.matches([("range", b"1"), ("rr", b"2")])
    assert not m.matches([("rr", b"2"), ("range", b"1")])
    assert not m.matches([("range", b"1")])
    assert m.metadata("rr") == b"2" and m.vote({"rr"}) == "rr"
    assert not m.has_satisfied_heartbeat()
    m.awaiting_sync = lambda result: None
    assert m.has_satisfied_heartbeat()
    m.is_new = True
    assert not m.has_satisfied_heartbeat()


def test_static_member_replacement_fences_parked_requests() -> None:
    group = GroupMetadata("g")
    joins: list[JoinGroupResult] = []
    syncs: list[SyncGroupResult] = []
    old = member("old", [("range", b"")], instance="i")
    group.add(old, joins.append)
    old.awaiting_sync = syncs.append
    replaced = group.replace_static_member("i", "old", "new")
    assert replaced is old and old.member_id == "new"
    assert joins[0].error == ErrorCode.FENCED_INSTANCE_ID and joins[0].member_id == "old"
    assert syncs[0].error == ErrorCode.FENCED_INSTANCE_ID
    assert group.static_members == {"i": "new"} and group.leader_id == "new"
    assert group.num_members_awaiting_join == 0


def test_next_generation_and_subscribed_topics() -> None:
    group = GroupMetadata("g")
    group.add(member("a", [("range", sub("t1", "t2"))]))
    group.add(member("b", [("range", sub("t3"))]))
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.init_next_generation()
    assert (group.generation_id, group.protocol_name, group.state) == (
        1, "range", GroupState.COMPLETING_REBALANCE)
    assert group.subscribed_topics == {"t1", "t2", "t3"}
    assert group.is_subscribed_to_topic("t3") and not group.is_subscribed_to_topic("t4")
    assert [m[0] for m in group.current_member_metadata()] == ["a", "b"]
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.remove("a")
    group.remove("b")
    group.init_next_generation()
    assert (group.generation_id, group.protocol_name, group.state) == (
        2, None, GroupState.EMPTY)


def test_unparsable_subscription_means_unknown_topics() -> None:
    group = GroupMetadata("g")
    group.add(member("a", [("range", b"\x00")]))
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.init_next_generation()
    assert group.subscribed_topics is None and not group.is_subscribed_to_topic("t")


def test_stored_value_round_trip_and_summary() -> None:
    group = GroupMetadata("g", clock=lambda: 1.0)
    group.add(member("a", [("range", sub("t1"))], instance="inst", rebalance=900, session=45))
    group.add(member("b", [("range", sub("t2"))]))
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.init_next_generation()
    value = group.to_value({"a": b"A", "b": b"B"})
    assert value.version == 3 and value.generation == 1 and value.leader == "a"
    decoded = GroupMetadataValue.decode(value.encode())
    assert decoded == value
    loaded = GroupMetadata.from_value("g", decoded)
    assert loaded.state is GroupState.STABLE and loaded.generation_id == 1
    assert loaded.protocol_name == "range" and loaded.leader_id == "a"
    assert loaded.static_members == {"inst": "a"}
    a = loaded.get("a")
    assert (a.session_timeout_ms, a.rebalance_timeout_ms, a.assignment) == (45, 900, b"A")
    assert loaded.subscribed_topics == {"t1", "t2"}
    summary = loaded.summary()
    assert summary["group_state"] == "Stable" and summary["protocol_data"] == "range"
    assert summary["members"][1]["member_assignment"] == b"B"  # type: ignore[index]
    # Not Stable: no metadata nor assignments shown.
    group.transition_to(GroupState.PREPARING_REBALANCE)
    members = group.summary()["members"]
    assert members[0]["member_metadata"] == b"" and members[0]["member_assignment"] == b""  # type: ignore[index]
    empty = GroupMetadata.from_value("g", GroupMetadataValue("consumer", 7, None, None, 5))
    assert empty.state is GroupState.EMPTY and empty.generation_id == 7
    assert empty.current_state_timestamp == 5 and empty.protocol_type == "consumer"
