"""The group handlers over a real socket, at every advertised version: JoinGroup (0-9),
SyncGroup (0-5), Heartbeat (0-4), LeaveGroup (0-5), OffsetCommit (2-8), OffsetDelete (0),
DescribeGroups (0-5), ListGroups (0-4), DeleteGroups (0-2)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import ConsumerProtocolSubscription
from tests.daemon.wire import InProcessBroker, WireClient

OFFSET_COMMIT, JOIN, HEARTBEAT, LEAVE, SYNC = 8, 11, 12, 13, 14
DESCRIBE, LIST, FIND_COORDINATOR, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 10, 42, 47
SUBSCRIPTION = ConsumerProtocolSubscription(topics=("t",)).encode()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    b = InProcessBroker(tmp_path_factory.mktemp("groups"), {
        "offsets.topic.num.partitions": "1", "group.min.session.timeout.ms": "100",
        "num.partitions": "2",
    }).start()
    try:
        with b.connect() as client:
            client.metadata(["t"])
            client.call(FIND_COORDINATOR, 3, {"key": "any", "key_type": 0})
        mgr = b.broker.group_manager
        deadline = time.monotonic() + 10
        while b.call(lambda: mgr.coordinator_error("any")) is not None:
            assert time.monotonic() < deadline, "__consumer_offsets did not load"
            time.sleep(0.02)
        yield b
    finally:
        b.stop()


def join(client: WireClient, version: int, group: str, member_id: str = "",
         instance: str | None = None) -> Any:
    return client.call(JOIN, version, {
        "group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
        "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": SUBSCRIPTION}], "reason": None,
    })


@pytest.mark.parametrize("version", range(10))
def test_join_sync_heartbeat_leave(broker: InProcessBroker, version: int) -> None:
    group = f"life-{version}"
    sync_v, heartbeat_v, leave_v = min(version, 5), min(version, 4), min(version, 5)
    instance = "inst" if version >= 5 else None
    with broker.connect() as client:
        joined = join(client, version, group, instance=instance)
        if version >= 4 and instance is None:
            assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED
            assert joined.member_id.startswith("wire-") and joined.generation_id == -1
            joined = join(client, version, group, joined.member_id)
        assert joined.error_code == ErrorCode.NONE
        member_id = joined.member_id
        assert (joined.generation_id, joined.leader, joined.protocol_name) == (
            1, member_id, "range")
        if version >= 7:
            assert joined.protocol_type == "consumer"
        [m] = joined.members
        assert (m.member_id, m.metadata) == (member_id, SUBSCRIPTION)
        synced = client.call(SYNC, sync_v, {
            "group_id": group, "generation_id": 1, "member_id": member_id,
            "group_instance_id": instance, "protocol_type": "consumer",
            "protocol_name": "range", "assignments": [
                {"member_id": member_id, "assignment": b"mine"}]})
        assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, b"mine")
        if sync_v >= 5:
            assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")
        beat = client.call(HEARTBEAT, heartbeat_v, {
            "group_id": group, "generation_id": 1, "member_id": member_id,
            "group_instance_id": instance})
        assert beat.error_code == ErrorCode.NONE
        stale = client.call(HEARTBEAT, heartbeat_v, {
            "group_id": group, "generation_id": 2, "member_id": member_id,
            "group_instance_id": instance})
        assert stale.error_code == ErrorCode.ILLEGAL_GENERATION
        if leave_v >= 3:
            left = client.call(LEAVE, leave_v, {"group_id": group, "members": [
                {"member_id": member_id, "group_instance_id": instance, "reason": "bye"},
                {"member_id": "ghost", "group_instance_id": None, "reason": None}]})
            assert left.error_code == ErrorCode.NONE
            assert [(r.member_id, r.error_code) for r in left.members] == [
                (member_id, ErrorCode.NONE), ("ghost", ErrorCode.UNKNOWN_MEMBER_ID)]
        else:
            ghost = client.call(LEAVE, leave_v, {"group_id": group, "member_id": "ghost"})
            assert ghost.error_code == ErrorCode.UNKNOWN_MEMBER_ID
            left = client.call(LEAVE, leave_v, {"group_id": group, "member_id": member_id})
            assert left.error_code == ErrorCode.NONE
    deadline = time.monotonic() + 5
    coordinator = broker.broker.group_coordinator
    while broker.call(lambda: coordinator.group_state(group)) != "Empty":
        assert time.monotonic() < deadline


def test_sync_v5_needs_protocol_type_and_name(broker: InProcessBroker) -> None:
    with broker.connect() as client:
        synced = client.call(SYNC, 5, {
            "group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
            "protocol_type": None, "protocol_name": "range", "assignments": []})
        assert synced.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        bad = join(client, 9, "")
        assert bad.error_code == ErrorCode.INVALID_GROUP_ID


def commit(client: WireClient, version: int, group: str, offsets: dict[tuple[str, int], int],
           generation: int = -1, member_id: str = "", metadata: str | None = "m",
           retention: int = -1) -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": offset,
            "committed_leader_epoch": 3, "committed_metadata": metadata})
    response = client.call(OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": generation,
        "member_id": member_id, "group_instance_id": None, "retention_time": retention,
        "topics": [{"name": n, "partitions": p} for n, p in topics.items()]})
    return {(t.name, p.partition_index): p.error_code
            for t in response.topics for p in t.partitions}


@pytest.mark.parametrize("version", range(2, 9))
def test_offset_commit(broker: InProcessBroker, version: int) -> None:
    group = f"commit-{version}"
    mgr = broker.broker.group_manager
    with broker.connect() as client:
        result = commit(client, version, group, {("t", 0): 5, ("t", 1): 6, ("nope", 0): 1},
                        retention=60_000 if version <= 4 else -1)
        assert result == {("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE,
                          ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        big = commit(client, version, group, {("t", 0): 9}, metadata="x" * 5000)
        assert big == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE}
        stale = commit(client, version, group, {("t", 0): 9}, generation=3, member_id="m")
        assert stale == {("t", 0): ErrorCode.UNKNOWN_MEMBER_ID}
        nulled = commit(client, version, group, {("t", 1): 7}, metadata=None)
        assert nulled == {("t", 1): ErrorCode.NONE}
    stored = broker.call(lambda: mgr.fetch_offsets(group, None))
    assert stored[("t", 0)].offset == 5 and stored[("t", 0)].metadata == "m"
    assert stored[("t", 1)].offset == 7 and stored[("t", 1)].metadata == ""
    assert stored[("t", 0)].leader_epoch == (3 if version >= 6 else -1)
    om = stored[("t", 0)]
    if version <= 4:
        assert om.expire_timestamp == om.commit_timestamp + 60_000
    else:
        assert om.expire_timestamp is None
    assert abs(om.commit_timestamp - time.time() * 1000) < 60_000


def test_offset_delete_list_describe_delete(broker: InProcessBroker) -> None:
    with broker.connect() as client:
        assert commit(client, 8, "admin-g", {("t", 0): 1, ("t", 1): 2}) == {
            ("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.NONE}
        deleted = client.call(OFFSET_DELETE, 0, {"group_id": "admin-g", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]},
            {"name": "nope", "partitions": [{"partition_index": 0}]}]})
        assert deleted.error_code == ErrorCode.NONE
        assert {(t.name, p.partition_index): p.error_code
                for t in deleted.topics for p in t.partitions} == {
            ("t", 0): ErrorCode.NONE, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        missing = client.call(OFFSET_DELETE, 0, {"group_id": "never", "topics": [
            {"name": "t", "partitions": [{"partition_index": 0}]}]})
        assert (missing.error_code, missing.topics) == (ErrorCode.GROUP_ID_NOT_FOUND, ())

        # A live member keeps "live-g" Stable.
        joined = join(client, 9, "live-g", instance="i")
        client.call(SYNC, 5, {
            "group_id": "live-g", "generation_id": joined.generation_id,
            "member_id": joined.member_id, "group_instance_id": "i",
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": joined.member_id, "assignment": b"A"}]})
        for version in range(5):
            listed = client.call(LIST, version, {"states_filter": []})
            assert listed.error_code == ErrorCode.NONE
            names = {g.group_id: g for g in listed.groups}
            assert names["live-g"].protocol_type == "consumer"
            assert names["admin-g"].protocol_type == ""
            if version >= 4:
                assert (names["live-g"].group_state, names["admin-g"].group_state) == (
                    "Stable", "Empty")
        stable = client.call(LIST, 4, {"states_filter": ["STABLE"]})
        assert [g.group_id for g in stable.groups] == ["live-g"]

        for version in range(6):
            described = client.call(DESCRIBE, version, {
                "groups": ["live-g", "admin-g", "never"],
                "include_authorized_operations": True})
            live, admin, never = described.groups
            assert (live.error_code, live.group_state, live.protocol_type,
                    live.protocol_data) == (ErrorCode.NONE, "Stable", "consumer", "range")
            [member] = live.members
            assert member.member_id == joined.member_id
            assert (member.member_metadata, member.member_assignment) == (SUBSCRIPTION, b"A")
            assert member.client_id == "wire" and member.client_host == "/127.0.0.1"
            if version >= 4:
                assert member.group_instance_id == "i"
            if version >= 3:
                assert live.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
            assert (admin.group_state, admin.members) == ("Empty", ())
            assert (never.error_code, never.group_state) == (ErrorCode.NONE, "Dead")

        for version in range(3):
            deleted_groups = client.call(DELETE_GROUPS, version, {
                "groups_names": ["live-g", "never"]})
            assert {r.group_id: r.error_code for r in deleted_groups.results} == {
                "live-g": ErrorCode.NON_EMPTY_GROUP, "never": ErrorCode.GROUP_ID_NOT_FOUND}
        gone = client.call(DELETE_GROUPS, 2, {"groups_names": ["admin-g"]})
        assert [(r.group_id, r.error_code) for r in gone.results] == [
            ("admin-g", ErrorCode.NONE)]
        after = client.call(DESCRIBE, 5, {"groups": ["admin-g"],
                                          "include_authorized_operations": False})
        assert after.groups[0].group_state == "Dead"
        assert after.groups[0].authorized_operations == -(2**31)
    mgr = broker.broker.group_manager
    assert broker.call(lambda: mgr.fetch_offsets("admin-g", None)) == {}
