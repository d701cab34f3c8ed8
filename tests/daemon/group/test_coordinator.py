"""Tests for klog.daemon.group.coordinator: the classic group protocol against a fake manager.

Timeouts are real but tiny (tens of ms), driven by the coordinator's own Timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from klog.daemon.group.group import GroupState
from klog.daemon.group.metadata_manager import OffsetAndMetadata
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import GroupMetadataValue, MemberMetadata
from tests.daemon.group.fakes import (
    GROUP,
    PROTOCOLS,
    join,
    join_new,
    make_coordinator,
    subscription,
    sync,
)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


async def stable_group(coordinator: Any, n: int, **kw: Any) -> list[Any]:
    """n members joined and synced (the leader assigns b'a-<member id>' to everyone)."""
    joined = await asyncio.gather(*(join_new(coordinator, **kw) for _ in range(n)))
    leader = next(r for r in joined if r.leader_id == r.member_id)
    assignments = {m[0]: b"a-" + m[0].encode() for m in leader.members}
    synced = await asyncio.gather(*(
        sync(coordinator, r, assignments if r is leader else None,
             instance=kw.get("instance")) for r in joined))
    assert all(s.error == ErrorCode.NONE for s in synced)
    return joined


def test_first_join_requires_a_member_id_then_forms_generation_one() -> None:
    async def main() -> None:
        coordinator, manager = make_coordinator()
        first = await join(coordinator)
        assert first.error == ErrorCode.MEMBER_ID_REQUIRED
        assert first.member_id.startswith("client-")
        assert coordinator.groups[GROUP].pending_members == {first.member_id}
        joined = await join(coordinator, first.member_id)
        assert joined.error == ErrorCode.NONE
        assert (joined.member_id, joined.generation_id) == (first.member_id, 1)
        assert joined.leader_id == joined.member_id
        assert joined.protocol_name == "range" and joined.protocol_type == "consumer"
        assert [m[0] for m in joined.members] == [joined.member_id]
        assert coordinator.group_state(GROUP) == "CompletingRebalance"
        synced = await sync(coordinator, joined, {joined.member_id: b"mine"})
        assert (synced.error, synced.assignment) == (ErrorCode.NONE, b"mine")
        assert coordinator.group_state(GROUP) == "Stable"
        # The assignment was stored before the answer.
        stored = manager.values[GROUP]
        assert stored.generation == 1 and stored.leader == joined.member_id
        assert stored.members[0].assignment == b"mine"
        assert stored.members[0].subscription == PROTOCOLS[0][1]
        coordinator.shutdown()
    run(main())


def test_old_versions_join_without_member_id_round_trip() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator()
        joined = await join(coordinator, require_known=False)
        assert joined.error == ErrorCode.NONE and joined.generation_id == 1
        coordinator.shutdown()
    run(main())


def test_three_members_one_generation_leader_gets_all_metadata() -> None:
    async def main() -> None:
        coordinator, manager = make_coordinator(group_initial_rebalance_delay_ms="50")
        joined = await asyncio.gather(*(join_new(coordinator) for _ in range(3)))
        assert {r.generation_id for r in joined} == {1}
        leaders = [r for r in joined if r.leader_id == r.member_id]
        assert len(leaders) == 1 and len(leaders[0].members) == 3
        assert all(r.members == [] for r in joined if r is not leaders[0])
        ids = {r.member_id for r in joined}
        assignments = {m: m.encode() for m in ids}
        synced = await asyncio.gather(*(
            sync(coordinator, r, assignments if r is leaders[0] else None) for r in joined))
        assert [s.assignment for s in synced] == [r.member_id.encode() for r in joined]
        assert len(manager.values[GROUP].members) == 3
        coordinator.shutdown()
    run(main())


def test_protocol_selected_by_votes() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator(group_initial_rebalance_delay_ms="30")
        s = subscription("t")
        joined = await asyncio.gather(
            join_new(coordinator, protocols=[("range", s), ("roundrobin", s)]),
            join_new(coordinator, protocols=[("roundrobin", s), ("range", s)]),
            join_new(coordinator, protocols=[("roundrobin", s), ("sticky", s), ("range", s)]),
        )
        assert {r.protocol_name for r in joined} == {"roundrobin"}
        coordinator.shutdown()
    run(main())


def test_inconsistent_protocols_and_bad_session_timeouts() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator(group_max_session_timeout_ms="5000")
        await stable_group(coordinator, 1)
        other = await join_new(coordinator, protocols=[("cooperative-sticky", b"x")])
        assert other.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        other = await join_new(coordinator, protocol_type="connect")
        assert other.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        empty = await join(coordinator, group="g2", protocols=[])
        assert empty.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert (await join(coordinator, session=5)).error == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await join(coordinator, session=6000)).error == ErrorCode.INVALID_SESSION_TIMEOUT
        assert (await join(coordinator, group="")).error == ErrorCode.INVALID_GROUP_ID
        # A member id for a group nobody knows.
        assert (await join(coordinator, "stale", group="g3")).error == ErrorCode.UNKNOWN_MEMBER_ID
        coordinator.shutdown()
    run(main())


def test_coordinator_errors_come_first() -> None:
    async def main() -> None:
        coordinator, manager = make_coordinator()
        manager.coordinator_err = ErrorCode.NOT_COORDINATOR
        assert (await join(coordinator)).error == ErrorCode.NOT_COORDINATOR
        assert coordinator.heartbeat(GROUP, "m", None, 1) == ErrorCode.NOT_COORDINATOR
        assert coordinator.leave_group(GROUP, [("m", None)]) == (ErrorCode.NOT_COORDINATOR, [])
        commit = await coordinator.commit_offsets(GROUP, -1, "", None,
                                                  {("t", 0): OffsetAndMetadata(1)})
        assert commit == {("t", 0): ErrorCode.NOT_COORDINATOR}
        manager.coordinator_err = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        # Loading: SyncGroup says rejoin, Heartbeat answers blindly (as Kafka).
        result = await coordinator.sync_group(GROUP, 1, "m", None, None, None, {})
        assert result.error == ErrorCode.REBALANCE_IN_PROGRESS
        assert coordinator.heartbeat(GROUP, "m", None, 1) == ErrorCode.NONE
        coordinator.shutdown()
        assert (await join(coordinator)).error == ErrorCode.COORDINATOR_NOT_AVAILABLE
    run(main())


def test_heartbeat_errors_and_rebalance_in_progress() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator()
        [a] = await stable_group(coordinator, 1)
        assert coordinator.heartbeat(GROUP, a.member_id, None, 1) == ErrorCode.NONE
        assert coordinator.heartbeat(GROUP, a.member_id, None, 7) == ErrorCode.ILLEGAL_GENERATION
        assert coordinator.heartbeat(GROUP, "who", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        assert coordinator.heartbeat("nope", "who", None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        # A second member joins: the first learns of the rebalance through its heartbeat.
        b_task = asyncio.ensure_future(join_new(coordinator))
        for _ in range(100):
            await asyncio.sleep(0.001)
            if coordinator.group_state(GROUP) == "PreparingRebalance":
                break
        assert coordinator.heartbeat(GROUP, a.member_id, None, 1) == \
            ErrorCode.REBALANCE_IN_PROGRESS
        # A stale SyncGroup / commit during the rebalance
        result = await sync(coordinator, a)
        assert result.error == ErrorCode.REBALANCE_IN_PROGRESS
        a2, b = await asyncio.gather(join(coordinator, a.member_id), b_task)
        assert a2.generation_id == b.generation_id == 2
        # CompletingRebalance: a heartbeat is fine, a commit is told to wait for the rebalance
        assert coordinator.heartbeat(GROUP, b.member_id, None, 2) == ErrorCode.NONE
        commit = await coordinator.commit_offsets(GROUP, 2, b.member_id, None,
                                                  {("t1", 0): OffsetAndMetadata(5)})
        assert commit == {("t1", 0): ErrorCode.REBALANCE_IN_PROGRESS}
        coordinator.shutdown()
    run(main())


def test_session_timeout_evicts_a_silent_member() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator(group_initial_rebalance_delay_ms="20")
        a, b = await stable_group(coordinator, 2, session=150, rebalance=2000)
        # Only a heartbeats; b's session runs out and it is removed.
        for _ in range(40):
            await asyncio.sleep(0.02)
            error = coordinator.heartbeat(GROUP, a.member_id, None, a.generation_id)
            if error == ErrorCode.REBALANCE_IN_PROGRESS:
                break
        assert error == ErrorCode.REBALANCE_IN_PROGRESS
        assert not coordinator.groups[GROUP].has(b.member_id)
        rejoined = await join(coordinator, a.member_id, session=150, rebalance=2000)
        assert rejoined.generation_id == a.generation_id + 1
        assert [m[0] for m in rejoined.members] == [a.member_id]
        assert coordinator.heartbeat(GROUP, b.member_id, None, 1) == ErrorCode.UNKNOWN_MEMBER_ID
        coordinator.shutdown()
    run(main())


def test_rebalance_timeout_drops_members_that_do_not_rejoin() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator(group_initial_rebalance_delay_ms="20")
        a, _b = await stable_group(coordinator, 2, session=5000, rebalance=100)
        # a rejoins (e.g. its subscription changed); b never does.
        loop = asyncio.get_running_loop()
        started = loop.time()
        rejoined = await join(coordinator, a.member_id, session=5000, rebalance=100,
                              protocols=[("range", subscription("t1", "t2"))])
        elapsed = loop.time() - started
        assert 0.08 <= elapsed < 1.0
        assert rejoined.error == ErrorCode.NONE and rejoined.generation_id == 2
        assert [m[0] for m in rejoined.members] == [a.member_id]
        assert coordinator.groups[GROUP].subscribed_topics == {"t1", "t2"}
        coordinator.shutdown()
    run(main())


def test_members_that_do_not_sync_are_removed() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator(group_initial_rebalance_delay_ms="20")
        a, b = await asyncio.gather(join_new(coordinator, rebalance=100),
                                    join_new(coordinator, rebalance=100))
        leader = a if a.leader_id == a.member_id else b
        follower = b if leader is a else a
        await sync(coordinator, leader, {leader.member_id: b"x", follower.member_id: b"y"})
        group = coordinator.groups[GROUP]
        for _ in range(100):
            await asyncio.sleep(0.005)
            if not group.has(follower.member_id):
                break
        assert not group.has(follower.member_id)
        assert group.state is GroupState.PREPARING_REBALANCE
        assert coordinator.heartbeat(GROUP, leader.member_id, None, 1) == \
            ErrorCode.REBALANCE_IN_PROGRESS
        coordinator.shutdown()
    run(main())


def test_pending_member_expires_after_its_session_timeout() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator()
        first = await join(coordinator, session=50)
        assert coordinator.groups[GROUP].is_pending_member(first.member_id)
        await asyncio.sleep(0.15)
        assert not coordinator.groups[GROUP].is_pending_member(first.member_id)
        coordinator.shutdown()
    run(main())


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator(group_initial_rebalance_delay_ms="150")
        loop = asyncio.get_running_loop()
        started = loop.time()
        a_task = asyncio.ensure_future(join_new(coordinator, rebalance=5000))
        await asyncio.sleep(0.08)
        b = await join_new(coordinator, rebalance=5000)
        a = await a_task
        elapsed = loop.time() - started
        assert a.generation_id == b.generation_id == 1
        # b arrived during the first delay, which was extended once by the delay.
        assert 0.2 <= elapsed < 2.0, elapsed
        coordinator.shutdown()
    run(main())


def test_group_max_size() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator(group_max_size="2",
                                          group_initial_rebalance_delay_ms="20")
        await stable_group(coordinator, 2)
        third = await join(coordinator)
        assert third.error == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert third.member_id == ""
        coordinator.shutdown()
    run(main())


def test_leave_group_single_and_batched() -> None:
    async def main() -> None:
        coordinator, manager = make_coordinator(group_initial_rebalance_delay_ms="20")
        a, b = await stable_group(coordinator, 2)
        top, errors = coordinator.leave_group(GROUP, [(b.member_id, None), ("ghost", None)])
        assert top == ErrorCode.NONE
        assert errors == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID]
        assert coordinator.group_state(GROUP) == "PreparingRebalance"
        assert coordinator.leave_group("nope", [("x", None)]) == (
            ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID])
        # The last member leaves while the rebalance waits for it: the group becomes Empty
        # and that is stored.
        assert coordinator.leave_group(GROUP, [(a.member_id, None)])[1] == [ErrorCode.NONE]
        for _ in range(50):
            await asyncio.sleep(0.01)
            if coordinator.group_state(GROUP) == "Empty":
                break
        assert coordinator.group_state(GROUP) == "Empty"
        await asyncio.sleep(0.01)
        assert manager.values[GROUP].members == () and manager.values[GROUP].generation == 2
        coordinator.shutdown()
    run(main())


def test_static_member_restart_without_rebalance_fences_old_id() -> None:
    async def main() -> None:
        coordinator, manager = make_coordinator(group_initial_rebalance_delay_ms="20")
        joined = await asyncio.gather(
            join_new(coordinator, instance="i-1"), join_new(coordinator, instance="i-2"))
        leader = next(r for r in joined if r.leader_id == r.member_id)
        assignments = {r.member_id: r.member_id.encode() for r in joined}
        await asyncio.gather(*(sync(coordinator, r, assignments if r is leader else None,
                                    instance=f"i-{i + 1}") for i, r in enumerate(joined)))
        old = joined[1]
        stores = len(manager.stores)
        # i-2 restarts: unknown member id, same instance id, same protocols.
        again = await join(coordinator, instance="i-2")
        assert again.error == ErrorCode.NONE
        assert again.member_id != old.member_id and again.member_id.startswith("i-2-")
        assert again.generation_id == old.generation_id  # no rebalance
        assert again.leader_id == leader.member_id and again.members == []
        assert coordinator.group_state(GROUP) == "Stable"
        assert len(manager.stores) == stores + 1
        assert {m.member_id for m in manager.values[GROUP].members} == {
            leader.member_id, again.member_id}
        # The new id gets the old assignment; the old id is fenced.
        synced = await sync(coordinator, again, instance="i-2")
        assert synced.assignment == old.member_id.encode()
        assert coordinator.heartbeat(GROUP, old.member_id, "i-2", old.generation_id) == \
            ErrorCode.FENCED_INSTANCE_ID
        assert coordinator.heartbeat(GROUP, again.member_id, "i-2", again.generation_id) == \
            ErrorCode.NONE
        commit = await coordinator.commit_offsets(GROUP, old.generation_id, old.member_id,
                                                  "i-2", {("t1", 0): OffsetAndMetadata(1)})
        assert commit == {("t1", 0): ErrorCode.FENCED_INSTANCE_ID}
        assert coordinator.leave_group(GROUP, [(old.member_id, "i-2")])[1] == [
            ErrorCode.FENCED_INSTANCE_ID]
        # v9 clients: a restarted leader is told it leads but must skip the assignment.
        again_leader = await join(coordinator, instance="i-1", skip=True)
        assert again_leader.skip_assignment and again_leader.leader_id == again_leader.member_id
        assert len(again_leader.members) == 2
        assert coordinator.group_state(GROUP) == "Stable"
        # Removing a static member by instance id alone (admin) triggers a rebalance.
        assert coordinator.leave_group(GROUP, [("", "i-2")])[1] == [ErrorCode.NONE]
        assert coordinator.group_state(GROUP) == "PreparingRebalance"
        coordinator.shutdown()
    run(main())


def test_static_member_with_changed_protocol_rebalances() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator()
        [a] = await stable_group(coordinator, 1, instance="i-1")
        task = asyncio.ensure_future(join(coordinator, instance="i-1",
                                          protocols=[("roundrobin", b"")]))
        result = await task
        assert result.error == ErrorCode.NONE
        assert result.generation_id == a.generation_id + 1
        assert result.protocol_name == "roundrobin"
        coordinator.shutdown()
    run(main())


def test_offset_commit_validation() -> None:
    async def main() -> None:
        coordinator, manager = make_coordinator(offset_metadata_max_bytes="5")
        om = OffsetAndMetadata(10, -1, "meta", 1000, None)
        # Admin/simple commit to a group nobody manages: allowed.
        assert await coordinator.commit_offsets("simple", -1, "", None, {("t", 0): om}) == {
            ("t", 0): ErrorCode.NONE}
        assert manager.offsets["simple"][("t", 0)] == om
        # A generation for an unknown group: stale.
        assert await coordinator.commit_offsets("unknown", 3, "m", None, {("t", 0): om}) == {
            ("t", 0): ErrorCode.ILLEGAL_GENERATION}
        [a] = await stable_group(coordinator, 1)
        tp = ("t1", 0)
        assert await coordinator.commit_offsets(GROUP, 1, a.member_id, None, {tp: om}) == {
            tp: ErrorCode.NONE}
        assert await coordinator.commit_offsets(GROUP, 2, a.member_id, None, {tp: om}) == {
            tp: ErrorCode.ILLEGAL_GENERATION}
        assert await coordinator.commit_offsets(GROUP, 1, "x", None, {tp: om}) == {
            tp: ErrorCode.UNKNOWN_MEMBER_ID}
        # An admin commit into a group with members is refused.
        assert await coordinator.commit_offsets(GROUP, -1, "", None, {tp: om}) == {
            tp: ErrorCode.UNKNOWN_MEMBER_ID}
        big = OffsetAndMetadata(11, -1, "toolong", 1000, None)
        result = await coordinator.commit_offsets(GROUP, 1, a.member_id, None,
                                                  {tp: big, ("t1", 1): om})
        assert result == {tp: ErrorCode.OFFSET_METADATA_TOO_LARGE, ("t1", 1): ErrorCode.NONE}
        assert manager.offsets[GROUP][tp].offset == 10
        coordinator.shutdown()
    run(main())


def test_offset_delete() -> None:
    async def main() -> None:
        coordinator, manager = make_coordinator()
        [a] = await stable_group(coordinator, 1)  # subscribed to t1
        om = OffsetAndMetadata(1)
        await coordinator.commit_offsets(GROUP, 1, a.member_id, None,
                                         {("t1", 0): om, ("t2", 0): om})
        top, errors = await coordinator.delete_offsets(GROUP, [("t1", 0), ("t2", 0)])
        assert top == ErrorCode.NONE
        assert errors == {("t1", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                          ("t2", 0): ErrorCode.NONE}
        assert set(manager.offsets[GROUP]) == {("t1", 0)}
        assert (await coordinator.delete_offsets("none", [("t1", 0)]))[0] == \
            ErrorCode.GROUP_ID_NOT_FOUND
        # Empty group: anything goes.
        coordinator.leave_group(GROUP, [(a.member_id, None)])
        await asyncio.sleep(0.02)
        assert coordinator.group_state(GROUP) == "Empty"
        assert await coordinator.delete_offsets(GROUP, [("t1", 0)]) == (
            ErrorCode.NONE, {("t1", 0): ErrorCode.NONE})
        coordinator.shutdown()
    run(main())


def test_describe_list_and_delete_groups() -> None:
    async def main() -> None:
        coordinator, manager = make_coordinator()
        [a] = await stable_group(coordinator, 1)
        await coordinator.commit_offsets("simple", -1, "", None, {("t", 0): OffsetAndMetadata(1)})
        [d, unknown] = coordinator.describe_groups([GROUP, "nope"])
        assert (d.error, d.state, d.protocol_type, d.protocol_data) == (
            ErrorCode.NONE, "Stable", "consumer", "range")
        [member] = d.members
        assert member["member_id"] == a.member_id
        assert member["member_assignment"] == b"a-" + a.member_id.encode()
        assert member["member_metadata"] == PROTOCOLS[0][1]
        assert member["client_host"] == "/127.0.0.1"
        assert (unknown.error, unknown.state) == (ErrorCode.NONE, "Dead")
        error, groups = coordinator.list_groups()
        assert error == ErrorCode.NONE
        assert {(g.group_id, g.protocol_type, g.state) for g in groups} == {
            (GROUP, "consumer", "Stable"), ("simple", "", "Empty")}
        assert [g.group_id for g in coordinator.list_groups(["stable"])[1]] == [GROUP]
        assert [g.group_id for g in coordinator.list_groups(["Empty"])[1]] == ["simple"]
        manager.loading.add(0)
        assert coordinator.list_groups()[0] == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        manager.loading.clear()
        results = await coordinator.delete_groups([GROUP, "simple", "nope"])
        assert results == {GROUP: ErrorCode.NON_EMPTY_GROUP, "simple": ErrorCode.NONE,
                           "nope": ErrorCode.GROUP_ID_NOT_FOUND}
        assert "simple" not in manager.offsets
        assert ("simple", None) in manager.stores
        assert coordinator.group_state("simple") is None
        coordinator.shutdown()
    run(main())


def test_loaded_group_is_stable_and_expires_without_heartbeats() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator()
        value = GroupMetadataValue(
            protocol_type="consumer", generation=4, protocol="range", leader="m-1",
            current_state_timestamp=123,
            members=(MemberMetadata("m-1", "c", "/1.2.3.4", 100, 100, subscription("t1"),
                                    b"asg", None),
                     MemberMetadata("m-2", "c", "/1.2.3.4", 5000, 5000, subscription("t2"),
                                    b"asg2", "inst")),
        )
        coordinator.on_group_loaded(GROUP, value)
        group = coordinator.groups[GROUP]
        assert group.state is GroupState.STABLE and group.generation_id == 4
        assert group.subscribed_topics == {"t1", "t2"}
        assert group.static_members == {"inst": "m-2"}
        synced = await coordinator.sync_group(GROUP, 4, "m-2", "inst", None, None, {})
        assert synced.assignment == b"asg2"
        # m-1 (session 100 ms) never heartbeats: removed, the group rebalances.
        await asyncio.sleep(0.25)
        assert not group.has("m-1")
        assert group.state is GroupState.PREPARING_REBALANCE
        coordinator.on_partition_unloaded(0)
        assert GROUP not in coordinator.groups and group.state is GroupState.DEAD
        coordinator.shutdown()
    run(main())


def test_unloading_answers_parked_joins_not_coordinator() -> None:
    async def main() -> None:
        coordinator, _ = make_coordinator(group_initial_rebalance_delay_ms="5000")
        task = asyncio.ensure_future(join_new(coordinator, rebalance=10000))
        await asyncio.sleep(0.02)
        coordinator.on_partition_unloaded(0)
        result = await task
        assert result.error == ErrorCode.NOT_COORDINATOR
        coordinator.shutdown()
    run(main())


def test_failed_assignment_store_makes_members_rejoin() -> None:
    async def main() -> None:
        coordinator, manager = make_coordinator()
        joined = await join_new(coordinator)
        manager.store_error = ErrorCode.NOT_COORDINATOR
        result = await sync(coordinator, joined, {joined.member_id: b"x"})
        assert result.error == ErrorCode.NOT_COORDINATOR
        assert (result.protocol_type, result.protocol_name) == (None, None)
        assert coordinator.group_state(GROUP) == "PreparingRebalance"
        coordinator.shutdown()
    run(main())


def test_txn_offset_commit_validation() -> None:
    """TxnOffsetCommit: a group nobody knows is created; without member or generation (v0-v2)
    a transaction may commit into a group with members; given ones are checked (KIP-447)."""
    async def main() -> None:
        coordinator, manager = make_coordinator()
        om = OffsetAndMetadata(10, -1, "", 1000, None)
        tp = ("t1", 0)
        assert await coordinator.commit_txn_offsets("fresh", 5, 0, -1, "", None, {tp: om}) \
            == {tp: ErrorCode.NONE}
        assert coordinator.group_state("fresh") == "Empty"
        assert manager.txn_offsets == {5: {"fresh": {tp: om}}}
        [a] = await stable_group(coordinator, 1)
        assert await coordinator.commit_txn_offsets(GROUP, 6, 0, -1, "", None, {tp: om}) \
            == {tp: ErrorCode.NONE}
        assert await coordinator.commit_txn_offsets(GROUP, 6, 0, 1, a.member_id, None,
                                                    {tp: om}) == {tp: ErrorCode.NONE}
        assert await coordinator.commit_txn_offsets(GROUP, 6, 0, 2, a.member_id, None,
                                                    {tp: om}) == {tp: ErrorCode.ILLEGAL_GENERATION}
        assert await coordinator.commit_txn_offsets(GROUP, 6, 0, 1, "x", None, {tp: om}) \
            == {tp: ErrorCode.UNKNOWN_MEMBER_ID}
        manager.coordinator_err = ErrorCode.NOT_COORDINATOR
        assert await coordinator.commit_txn_offsets(GROUP, 6, 0, -1, "", None, {tp: om}) \
            == {tp: ErrorCode.NOT_COORDINATOR}
        # Nothing reached the plain offsets.
        assert GROUP not in manager.offsets
        coordinator.shutdown()
    run(main())
