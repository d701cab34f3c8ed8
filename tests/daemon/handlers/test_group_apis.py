"""The group API handlers over a fake GroupCoordinator (and, for OffsetFetch, a fake
GroupMetadataManager), no socket: each test checks the call the coordinator got -- what the
handler made of the request at that version -- and the response as it goes on the wire
(encoded, then decoded again). JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, OffsetDelete, DescribeGroups, ListGroups, DeleteGroups. The socket-level
tests (test_group_membership.py, test_offset_fetch.py) drive the real coordinator."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.group.coordinator import (
    AUTHORIZED_OPERATIONS_OMITTED,
    GROUP_AUTHORIZED_OPERATIONS,
    DescribedGroup,
    GroupOverview,
)
from klog.daemon.group.group import JoinGroupResult, SyncGroupResult
from klog.daemon.group.metadata_manager import OffsetAndMetadata
from klog.daemon.handlers import (
    delete_groups,
    describe_groups,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    sync_group,
)
from klog.daemon.metadata_cache import MetadataCache, PartitionState
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context

OFFSET_COMMIT, OFFSET_FETCH, JOIN, HEARTBEAT, LEAVE, SYNC = 8, 9, 11, 12, 13, 14
DESCRIBE, LIST, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
NONE = ErrorCode.NONE
PEER = SimpleNamespace(listener_name="PLAINTEXT", peer="127.0.0.1:5555",
                       close=lambda: None)


class FakeCoordinator:
    """Records every call as (method, args); answers what the test put in ``answers``."""

    def __init__(self, **answers: Any) -> None:
        self.answers = answers
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def _call(self, name: str, *args: Any) -> Any:
        self.calls.append((name, args))
        return self.answers[name]

    async def join_group(self, *args: Any) -> Any:
        return self._call("join_group", *args)

    async def sync_group(self, *args: Any) -> Any:
        return self._call("sync_group", *args)

    def heartbeat(self, *args: Any) -> Any:
        return self._call("heartbeat", *args)

    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> Any:
        return self._call("leave_group", group_id, members)

    async def commit_offsets(self, *args: Any) -> Any:
        return self._call("commit_offsets", *args)

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> Any:
        return self._call("delete_offsets", group_id, partitions)

    def describe_groups(self, group_ids: Iterable[str]) -> Any:
        return self._call("describe_groups", list(group_ids))

    def list_groups(self, states_filter: Iterable[str] = ()) -> Any:
        return self._call("list_groups", list(states_filter))

    async def delete_groups(self, group_ids: Iterable[str]) -> Any:
        return self._call("delete_groups", list(group_ids))


def _cache() -> MetadataCache:
    cache = MetadataCache(broker_id=0)
    cache.update_partitions([PartitionState("t", p, 0, 0, (0,), (0,)) for p in (0, 1)])
    return cache


def call(module: Any, api_key: int, version: int, values: dict[str, Any],
         **components: Any) -> Any:
    """Run the handler; the response as a client decodes it (OffsetCommit's hand-encoded
    chunks included)."""
    spec = apis.spec_for(api_key)
    request = build(spec.request_entity(version), values)
    header = RequestHeader(api_key, version, 1, "client-1",
                           2 if spec.is_flexible(version) else 1)
    response = asyncio.run(module.handle(context(header, PEER, **components), request))
    body = (b"".join(bytes(c) for c in response) if isinstance(response, list)
            else apis.encode_response(response))
    return apis.decode_response(api_key, version, memoryview(body))


# -- JoinGroup -------------------------------------------------------------------------

JOINED = JoinGroupResult(NONE, "m-1", 3, "consumer", "range", "m-1", False,
                         [("m-1", "inst", b"meta-1"), ("m-2", None, b"meta-2")])


def join_values(**overrides: Any) -> dict[str, Any]:
    return {"group_id": "g", "session_timeout": 10_000, "rebalance_timeout": 30_000,
            "member_id": "m-1", "group_instance_id": "inst", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"sub-r"},
                          {"name": "roundrobin", "metadata": b"sub-rr"}],
            "reason": "because", **overrides}


@pytest.mark.parametrize("version", range(10))
def test_join_group_call(version: int) -> None:
    c = FakeCoordinator(join_group=JOINED)
    response = call(join_group, JOIN, version, join_values(), group_coordinator=c)
    [(name, args)] = c.calls
    assert name == "join_group"
    assert args == (
        "g", "m-1",
        "inst" if version >= 5 else None,         # group.instance.id from v5
        version >= 4,                              # require_known_member_id
        version >= 9,                              # supports_skip_assignment
        "client-1", "/127.0.0.1",
        10_000 if version == 0 else 30_000,        # v0: the session timeout serves
        10_000, "consumer",
        [("range", b"sub-r"), ("roundrobin", b"sub-rr")],
        "because" if version >= 8 else None,
    )
    assert (response.error_code, response.generation_id, response.protocol_name,
            response.leader, response.member_id) == (NONE, 3, "range", "m-1", "m-1")
    assert [(m.member_id, m.metadata) for m in response.members] == [
        ("m-1", b"meta-1"), ("m-2", b"meta-2")]
    if version >= 5:
        assert [m.group_instance_id for m in response.members] == ["inst", None]
    if version >= 7:
        assert response.protocol_type == "consumer"
    if version >= 9:
        assert response.skip_assignment is False


@pytest.mark.parametrize("version", range(10))
def test_join_group_error_protocol_name(version: int) -> None:
    """A failed join has no protocol: null from v7, "" before (the field is not nullable)."""
    c = FakeCoordinator(join_group=JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, "m-new"))
    response = call(join_group, JOIN, version, join_values(member_id=""),
                    group_coordinator=c)
    assert (response.error_code, response.member_id, response.generation_id) == (
        ErrorCode.MEMBER_ID_REQUIRED, "m-new", -1)
    assert response.protocol_name == ("" if version < 7 else None)
    assert list(response.members) == []


def test_join_group_client_host_without_port() -> None:
    c = FakeCoordinator(join_group=JOINED)
    ctx = context(RequestHeader(JOIN, 5, 1, None, 1),
                  SimpleNamespace(listener_name="PLAINTEXT", peer="10.0.0.7"),
                  group_coordinator=c)
    request = build(apis.spec_for(JOIN).request_entity(5), join_values())
    asyncio.run(join_group.handle(ctx, request))
    [(_, args)] = c.calls
    assert (args[5], args[6]) == ("", "/10.0.0.7")  # client id null -> ""


# -- SyncGroup -------------------------------------------------------------------------

def sync_values(**overrides: Any) -> dict[str, Any]:
    return {"group_id": "g", "generation_id": 3, "member_id": "m-1",
            "group_instance_id": "inst", "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": "m-1", "assignment": b"A1"},
                            {"member_id": "m-2", "assignment": b"A2"}], **overrides}


@pytest.mark.parametrize("version", range(6))
def test_sync_group_call(version: int) -> None:
    c = FakeCoordinator(sync_group=SyncGroupResult(NONE, b"A1", "consumer", "range"))
    response = call(sync_group, SYNC, version, sync_values(), group_coordinator=c)
    assert c.calls == [("sync_group", (
        "g", 3, "m-1", "inst" if version >= 3 else None,
        "consumer" if version >= 5 else None, "range" if version >= 5 else None,
        {"m-1": b"A1", "m-2": b"A2"}))]
    assert (response.error_code, response.assignment) == (NONE, b"A1")
    if version >= 5:
        assert (response.protocol_type, response.protocol_name) == ("consumer", "range")


@pytest.mark.parametrize("missing", ["protocol_type", "protocol_name"])
def test_sync_group_v5_needs_protocol_type_and_name(missing: str) -> None:
    c = FakeCoordinator()
    response = call(sync_group, SYNC, 5, sync_values(**{missing: None}), group_coordinator=c)
    assert c.calls == []
    assert (response.error_code, response.assignment, response.protocol_type,
            response.protocol_name) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, b"", None, None)


# -- Heartbeat -------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(5))
def test_heartbeat(version: int) -> None:
    c = FakeCoordinator(heartbeat=ErrorCode.REBALANCE_IN_PROGRESS)
    response = call(heartbeat, HEARTBEAT, version, {
        "group_id": "g", "generation_id": 3, "member_id": "m-1", "group_instance_id": "inst"},
        group_coordinator=c)
    assert c.calls == [("heartbeat", ("g", "m-1", "inst" if version >= 3 else None, 3))]
    assert response.error_code == ErrorCode.REBALANCE_IN_PROGRESS


# -- LeaveGroup ------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(3))
def test_leave_group_single_member(version: int) -> None:
    c = FakeCoordinator(leave_group=(NONE, [ErrorCode.UNKNOWN_MEMBER_ID]))
    response = call(leave_group, LEAVE, version, {"group_id": "g", "member_id": "m-1"},
                    group_coordinator=c)
    assert c.calls == [("leave_group", ("g", [("m-1", None)]))]
    # No member list before v3: the member's error is the answer's.
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    c = FakeCoordinator(leave_group=(ErrorCode.NOT_COORDINATOR, []))
    response = call(leave_group, LEAVE, version, {"group_id": "g", "member_id": "m-1"},
                    group_coordinator=c)
    assert response.error_code == ErrorCode.NOT_COORDINATOR


@pytest.mark.parametrize("version", range(3, 6))
def test_leave_group_members_batch(version: int) -> None:
    c = FakeCoordinator(leave_group=(NONE, [NONE, ErrorCode.UNKNOWN_MEMBER_ID,
                                            ErrorCode.FENCED_INSTANCE_ID]))
    members = [{"member_id": "m-1", "group_instance_id": None, "reason": None},
               {"member_id": "ghost", "group_instance_id": None, "reason": "bye"},
               {"member_id": "", "group_instance_id": "inst", "reason": None}]
    response = call(leave_group, LEAVE, version, {"group_id": "g", "members": members},
                    group_coordinator=c)
    assert c.calls == [("leave_group", ("g", [("m-1", None), ("ghost", None), ("", "inst")]))]
    # The members' errors stay theirs: the top level is NONE.
    assert response.error_code == NONE
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in response.members] == [
        ("m-1", None, NONE), ("ghost", None, ErrorCode.UNKNOWN_MEMBER_ID),
        ("", "inst", ErrorCode.FENCED_INSTANCE_ID)]
    c = FakeCoordinator(leave_group=(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, []))
    response = call(leave_group, LEAVE, version, {"group_id": "g", "members": members},
                    group_coordinator=c)
    assert (response.error_code, list(response.members)) == (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [])


# -- OffsetCommit ----------------------------------------------------------------------

def commit_values(retention: int = -1) -> dict[str, Any]:
    return {"group_id": "g", "generation_id_or_member_epoch": 3, "member_id": "m-1",
            "group_instance_id": "inst", "retention_time": retention, "topics": [
                {"name": "t", "partitions": [
                    {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": 4,
                     "committed_metadata": "meta"},
                    {"partition_index": 1, "committed_offset": 11, "committed_leader_epoch": 4,
                     "committed_metadata": None},
                    {"partition_index": 9, "committed_offset": 12, "committed_leader_epoch": 4,
                     "committed_metadata": ""}]},
                {"name": "nope", "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": 4,
                     "committed_metadata": ""}]}]}


@pytest.mark.parametrize("version", range(2, 9))
def test_offset_commit(version: int) -> None:
    c = FakeCoordinator(commit_offsets={("t", 0): NONE,
                                        ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE})
    before = int(time.time() * 1000)
    retention = 60_000 if version <= 4 else -1
    response = call(offset_commit, OFFSET_COMMIT, version, commit_values(retention),
                    group_coordinator=c, metadata_cache=_cache())
    after = int(time.time() * 1000)
    [(name, args)] = c.calls
    assert name == "commit_offsets"
    group_id, generation, member_id, instance, offsets = args
    assert (group_id, generation, member_id, instance) == (
        "g", 3, "m-1", "inst" if version >= 7 else None)
    # Only the partitions the metadata knows reach the coordinator.
    assert sorted(offsets) == [("t", 0), ("t", 1)]
    epoch = 4 if version >= 6 else -1
    now = offsets[("t", 0)].commit_timestamp
    assert before <= now <= after
    expire = now + 60_000 if version <= 4 else None
    assert offsets == {
        ("t", 0): OffsetAndMetadata(10, epoch, "meta", now, expire),
        ("t", 1): OffsetAndMetadata(11, epoch, "", now, expire),  # null metadata -> ""
    }
    if version >= 3:
        assert response.throttle_time.total_seconds() == 0
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in response.topics] == [
        ("t", [(0, NONE), (1, ErrorCode.OFFSET_METADATA_TOO_LARGE),
               (9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]),
        ("nope", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]


def test_offset_commit_of_unknown_partitions_only_does_not_call() -> None:
    c = FakeCoordinator()
    values = commit_values()
    values["topics"] = values["topics"][1:]
    response = call(offset_commit, OFFSET_COMMIT, 8, values, group_coordinator=c,
                    metadata_cache=_cache())
    assert c.calls == []
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in response.topics] == [("nope", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]


# -- OffsetFetch (reads the group manager's cache) -------------------------------------

class FakeGroupManager:
    def __init__(self, errors: dict[str, ErrorCode] | None = None) -> None:
        self.errors = errors or {}
        self.committed = {
            "g": {("t", 0): OffsetAndMetadata(42, 3, "m0", 1), ("u", 1): OffsetAndMetadata(
                7, -1, "", 1)},
        }
        self.calls: list[tuple[str, Any]] = []

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        return self.errors.get(group_id)

    def fetch_offsets(self, group_id: str, partitions: Any) -> dict[tuple[str, int], Any]:
        self.calls.append((group_id, None if partitions is None else list(partitions)))
        offsets = self.committed.get(group_id, {})
        if partitions is None:
            return dict(offsets)
        return {tp: offsets[tp] for tp in partitions if tp in offsets}

    def has_pending_txn_offset(self, group_id: str, tp: tuple[str, int]) -> bool:
        return False  # no transactional commit pending (tests/.../test_txn_offsets cover it)


def flat(topics: Any, version: int) -> dict[tuple[str, int], tuple[Any, ...]]:
    return {(t.name, p.partition_index): (
        p.committed_offset, p.committed_leader_epoch if version >= 5 else None, p.metadata,
        p.error_code) for t in topics for p in t.partitions}


@pytest.mark.parametrize("version", range(1, 8))
def test_offset_fetch_named_partitions(version: int) -> None:
    m = FakeGroupManager()
    response = call(offset_fetch, OFFSET_FETCH, version, {
        "group_id": "g", "require_stable": False,
        "topics": [{"name": "t", "partition_indexes": [0, 1]}]}, group_manager=m)
    assert m.calls == [("g", [("t", 0), ("t", 1)])]
    e = 3 if version >= 5 else None
    none = -1 if version >= 5 else None
    assert flat(response.topics, version) == {
        ("t", 0): (42, e, "m0", NONE), ("t", 1): (-1, none, "", NONE)}
    if version >= 2:
        assert response.error_code == NONE


@pytest.mark.parametrize("version", range(2, 8))
def test_offset_fetch_all_partitions(version: int) -> None:
    m = FakeGroupManager()
    response = call(offset_fetch, OFFSET_FETCH, version,
                    {"group_id": "g", "require_stable": False, "topics": None},
                    group_manager=m)
    assert m.calls == [("g", None)]
    assert set(flat(response.topics, version)) == {("t", 0), ("u", 1)}


@pytest.mark.parametrize("version", range(1, 8))
def test_offset_fetch_coordinator_error(version: int) -> None:
    m = FakeGroupManager({"g": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})
    response = call(offset_fetch, OFFSET_FETCH, version, {
        "group_id": "g", "require_stable": False,
        "topics": [{"name": "t", "partition_indexes": [0]}]}, group_manager=m)
    assert m.calls == []
    if version >= 2:
        assert (response.error_code, list(response.topics)) == (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [])
    else:  # v1 has no top-level error: the partitions carry it
        assert flat(response.topics, 1) == {
            ("t", 0): (-1, None, "", ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)}


def test_offset_fetch_v8_groups() -> None:
    m = FakeGroupManager({"loading": ErrorCode.NOT_COORDINATOR})
    response = call(offset_fetch, OFFSET_FETCH, 8, {"require_stable": True, "groups": [
        {"group_id": "g", "topics": [{"name": "u", "partition_indexes": [1]}]},
        {"group_id": "loading", "topics": None},
        {"group_id": "empty", "topics": None}]}, group_manager=m)
    assert m.calls == [("g", [("u", 1)]), ("empty", None)]
    g, loading, empty = response.groups
    assert (g.group_id, g.error_code) == ("g", NONE)
    assert flat(g.topics, 8) == {("u", 1): (7, -1, "", NONE)}
    assert (loading.group_id, loading.error_code, list(loading.topics)) == (
        "loading", ErrorCode.NOT_COORDINATOR, [])
    assert (empty.error_code, list(empty.topics)) == (NONE, [])


# -- OffsetDelete ----------------------------------------------------------------------

DELETE_REQUEST = {"group_id": "g", "topics": [
    {"name": "t", "partitions": [{"partition_index": 0}, {"partition_index": 1}]},
    {"name": "nope", "partitions": [{"partition_index": 0}]}]}


def test_offset_delete() -> None:
    c = FakeCoordinator(delete_offsets=(NONE, {
        ("t", 0): NONE, ("t", 1): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}))
    response = call(offset_delete, OFFSET_DELETE, 0, DELETE_REQUEST, group_coordinator=c,
                    metadata_cache=_cache())
    assert c.calls == [("delete_offsets", ("g", [("t", 0), ("t", 1)]))]
    assert response.error_code == NONE
    assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in response.topics] == [
        ("t", [(0, NONE), (1, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC)]),
        ("nope", [(0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)])]


def test_offset_delete_group_error_has_no_topics() -> None:
    c = FakeCoordinator(delete_offsets=(ErrorCode.GROUP_ID_NOT_FOUND, {}))
    response = call(offset_delete, OFFSET_DELETE, 0, DELETE_REQUEST, group_coordinator=c,
                    metadata_cache=_cache())
    assert c.calls == [("delete_offsets", ("g", [("t", 0), ("t", 1)]))]
    assert (response.error_code, list(response.topics)) == (ErrorCode.GROUP_ID_NOT_FOUND, [])


# -- DescribeGroups --------------------------------------------------------------------

MEMBER = {"member_id": "m-1", "group_instance_id": "inst", "client_id": "client-1",
          "client_host": "/127.0.0.1", "member_metadata": b"sub", "member_assignment": b"A"}
DESCRIBED = [
    DescribedGroup("g", NONE, "Stable", "consumer", "range", (MEMBER,)),
    DescribedGroup("never", NONE, "Dead"),
    DescribedGroup("elsewhere", ErrorCode.NOT_COORDINATOR),
]


@pytest.mark.parametrize("version", range(6))
@pytest.mark.parametrize("include_operations", [False, True])
def test_describe_groups(version: int, include_operations: bool) -> None:
    c = FakeCoordinator(describe_groups=DESCRIBED)
    response = call(describe_groups, DESCRIBE, version, {
        "groups": ["g", "never", "elsewhere"],
        "include_authorized_operations": include_operations}, group_coordinator=c)
    assert c.calls == [("describe_groups", (["g", "never", "elsewhere"],))]
    g, never, elsewhere = response.groups
    assert (g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data) == (
        NONE, "g", "Stable", "consumer", "range")
    [m] = g.members
    assert (m.member_id, m.client_id, m.client_host, m.member_metadata,
            m.member_assignment) == ("m-1", "client-1", "/127.0.0.1", b"sub", b"A")
    if version >= 4:
        assert m.group_instance_id == "inst"
    assert (never.error_code, never.group_state, list(never.members)) == (NONE, "Dead", [])
    assert (elsewhere.error_code, elsewhere.group_id, elsewhere.group_state) == (
        ErrorCode.NOT_COORDINATOR, "elsewhere", "")
    if version >= 3:
        asked = include_operations and version >= 3
        ops = GROUP_AUTHORIZED_OPERATIONS if asked else AUTHORIZED_OPERATIONS_OMITTED
        assert (g.authorized_operations, never.authorized_operations) == (ops, ops)
        # As Kafka's KafkaApis: operations only for a group described without error.
        assert elsewhere.authorized_operations == AUTHORIZED_OPERATIONS_OMITTED


# -- ListGroups ------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(6))
def test_list_groups(version: int) -> None:
    c = FakeCoordinator(list_groups=(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [
        GroupOverview("g", "consumer", "Stable"), GroupOverview("h", "", "Empty")]))
    response = call(list_groups, LIST, version, {"states_filter": ["Stable", "empty"]},
                    group_coordinator=c)
    assert c.calls == [("list_groups", (["Stable", "empty"] if version >= 4 else [],))]
    assert response.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert [(g.group_id, g.protocol_type) for g in response.groups] == [
        ("g", "consumer"), ("h", "")]
    if version >= 4:
        assert [g.group_state for g in response.groups] == ["Stable", "Empty"]
    if version >= 5:
        assert [g.group_type for g in response.groups] == ["classic", "classic"]


def test_list_groups_v5_type_filter() -> None:
    # klog's groups are all classic ones (Kafka 3.9's ZooKeeper-mode answer)
    c = FakeCoordinator(list_groups=(NONE, [GroupOverview("g", "consumer", "Stable")]))
    for types, expected in (([], ["g"]), (["Classic"], ["g"]), (["consumer"], []),
                            (["consumer", "classic"], ["g"])):
        response = call(list_groups, LIST, 5, {"types_filter": types}, group_coordinator=c)
        assert [g.group_id for g in response.groups] == expected, types


def test_list_groups_empty_filter_is_all() -> None:
    c = FakeCoordinator(list_groups=(NONE, []))
    call(list_groups, LIST, 4, {"states_filter": []}, group_coordinator=c)
    assert c.calls == [("list_groups", ([],))]


# -- DeleteGroups ----------------------------------------------------------------------

@pytest.mark.parametrize("version", range(3))
def test_delete_groups(version: int) -> None:
    c = FakeCoordinator(delete_groups={"g": NONE, "live": ErrorCode.NON_EMPTY_GROUP,
                                       "never": ErrorCode.GROUP_ID_NOT_FOUND})
    response = call(delete_groups, DELETE_GROUPS, version,
                    {"groups_names": ["live", "g", "never", "g"]}, group_coordinator=c)
    assert c.calls == [("delete_groups", (["live", "g", "never", "g"],))]
    # One result per group, in the request's order.
    assert [(r.group_id, r.error_code) for r in response.results] == [
        ("live", ErrorCode.NON_EMPTY_GROUP), ("g", NONE), ("never", ErrorCode.GROUP_ID_NOT_FOUND)]
