"""The Metadata handler (klog/daemon/handlers/metadata.py) over a real MetadataCache and a
fake admin, no socket: all topics vs named ones (v0: an empty list is all; v1+: null is
all), auto-creation asked of the admin only for unknown named topics and allowed only when
the request (v4+) and auto.create.topics.enable both allow it, leaders that are dead or
lack the request's listener, offline replicas, brokers by listener, internal topics,
controller and cluster id, duplicate names answered once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.handlers.metadata import handle
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionState
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context

METADATA = 3
LISTENER = "PLAINTEXT"
CLUSTER_ID = "klog-cluster-id-000"
TOPIC_IDS = {"a": uuid.UUID(int=1), "b": uuid.UUID(int=2),
             "__consumer_offsets": uuid.UUID(int=3)}
NONE = int(ErrorCode.NONE)
UNKNOWN = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
LEADER_NOT_AVAILABLE = int(ErrorCode.LEADER_NOT_AVAILABLE)


def _broker(broker_id: int, *listeners: str, rack: str | None = None) -> BrokerInfo:
    return BrokerInfo(broker_id, tuple(BrokerEndpoint(name, f"host{broker_id}", 9090 + i)
                                       for i, name in enumerate(listeners)), rack)


def _cache() -> MetadataCache:
    """Brokers 0 and 1 on PLAINTEXT, 2 only on INTERNAL, 3 dead (not in the cache).
    a-0 led by 0; a-1 led by 3 (dead); a-2 led by 2 (no PLAINTEXT endpoint); b-0 led by 1;
    __consumer_offsets-0 led by 0."""
    cache = MetadataCache(broker_id=0, cluster_id=CLUSTER_ID)
    cache.update_brokers([_broker(0, LISTENER, "INTERNAL", rack="r0"),
                          _broker(1, LISTENER), _broker(2, "INTERNAL")], controller_id=1)
    cache.update_partitions([
        PartitionState("a", 0, 0, 5, (0, 1, 3), (0, 1)),
        PartitionState("a", 1, 3, 2, (3, 0), (3,)),
        PartitionState("a", 2, 2, 1, (2, 0), (2, 0)),
        PartitionState("b", 0, 1, 0, (1,), (1,)),
        PartitionState("__consumer_offsets", 0, 0, 0, (0,), (0,)),
    ], TOPIC_IDS)
    return cache


class FakeAdmin:
    """Records each auto_create_topics call; answers the chosen error per topic (0 by
    default) and, as the real creation would, puts the topics answered 0 in the cache."""

    def __init__(self, cache: MetadataCache, errors: dict[str, int] | None = None) -> None:
        self.cache = cache
        self.errors = errors or {}
        self.calls: list[tuple[list[str], bool]] = []

    async def auto_create_topics(self, names: Sequence[str], *, allowed: bool
                                 ) -> dict[str, int]:
        self.calls.append((list(names), allowed))
        answer = {name: self.errors.get(name, 0) for name in names}
        self.cache.update_partitions(
            [PartitionState(n, 0, 1, 0, (1,), (1,)) for n, e in answer.items() if e == 0])
        return answer


def call(version: int, topics: list[str] | None, cache: MetadataCache | None = None,
         admin: FakeAdmin | None = None, allow_auto: bool = True,
         auto_create_enable: bool = True, listener: str = LISTENER) -> Any:
    cache = cache if cache is not None else _cache()
    values: dict[str, Any] = {
        "topics": None if topics is None else [
            {"name": t, "topic_id": uuid.UUID(int=0)} for t in topics],
        "allow_auto_topic_creation": allow_auto,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    request = build(apis.spec_for(METADATA).request_entity(version), values)
    connection = SimpleNamespace(listener_name=listener, peer="127.0.0.1:5555")
    ctx = context(RequestHeader(METADATA, version, 1, "t", 2 if version >= 9 else 1),
                  connection, config={"auto_create_topics_enable": auto_create_enable},
                  metadata_cache=cache, admin=admin if admin is not None else FakeAdmin(cache))
    return asyncio.run(handle(ctx, request))


def topics_of(response: Any) -> dict[str, Any]:
    return {t.name: t for t in response.topics}


def partitions_of(topic: Any) -> dict[int, Any]:
    return {int(p.partition_index): p for p in topic.partitions}


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12])
def test_all_topics(version: int) -> None:
    admin = FakeAdmin(_cache())
    # v0 has no null list: an empty one asks for every topic.
    response = call(version, [] if version == 0 else None, admin.cache, admin)
    assert [t.name for t in response.topics] == ["__consumer_offsets", "a", "b"]
    assert admin.calls == []


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_empty_list_is_no_topic_from_v1(version: int) -> None:
    admin = FakeAdmin(_cache())
    response = call(version, [], admin.cache, admin)
    assert list(response.topics) == [] and admin.calls == []
    assert [b.node_id for b in response.brokers] == [0, 1]


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12])
def test_named_topics_duplicates_answered_once(version: int) -> None:
    admin = FakeAdmin(_cache())
    response = call(version, ["b", "a", "b"], admin.cache, admin)
    assert [t.name for t in response.topics] == ["b", "a"]
    assert admin.calls == []
    b = topics_of(response)["b"]
    assert int(b.error_code) == NONE
    [p] = b.partitions
    assert (int(p.error_code), int(p.leader_id), list(p.replica_nodes), list(p.isr_nodes)) == (
        NONE, 1, [1], [1])
    if version >= 10:
        assert b.topic_id == TOPIC_IDS["b"]


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12])
def test_leaders_offline_replicas_and_listeners(version: int) -> None:
    a = topics_of(call(version, ["a"]))["a"]
    assert int(a.error_code) == NONE
    parts = partitions_of(a)
    assert sorted(parts) == [0, 1, 2]
    # a-0: leader 0 alive on PLAINTEXT; replica 3 is dead: v0 leaves it out and says so
    # (Kafka's errorUnavailableEndpoints), v1+ list it.
    if version == 0:
        assert (int(parts[0].error_code), int(parts[0].leader_id)) == (
            int(ErrorCode.REPLICA_NOT_AVAILABLE), 0)
        assert list(parts[0].replica_nodes) == [0, 1] and list(parts[0].isr_nodes) == [0, 1]
        assert list(parts[2].replica_nodes) == [0] and list(parts[2].isr_nodes) == [0]
    else:
        assert (int(parts[0].error_code), int(parts[0].leader_id)) == (NONE, 0)
        assert list(parts[0].replica_nodes) == [0, 1, 3] and list(parts[0].isr_nodes) == [0, 1]
        assert list(parts[2].replica_nodes) == [2, 0] and list(parts[2].isr_nodes) == [2, 0]
    # a-1: the leader's broker is dead.
    assert (int(parts[1].error_code), int(parts[1].leader_id)) == (LEADER_NOT_AVAILABLE, -1)
    if version >= 5:
        assert list(parts[0].offline_replicas) == [3]
        assert list(parts[1].offline_replicas) == [3]
        assert list(parts[2].offline_replicas) == []
    if version >= 7:
        assert [int(parts[i].leader_epoch) for i in range(3)] == [5, 2, 1]
    # a-2: the leader is alive but has no endpoint on this request's listener: Kafka's
    # LEADER_NOT_AVAILABLE before v6, LISTENER_NOT_FOUND from v6 (to show the misconfig).
    listener_error = LEADER_NOT_AVAILABLE if version < 6 else int(ErrorCode.LISTENER_NOT_FOUND)
    assert (int(parts[2].error_code), int(parts[2].leader_id)) == (listener_error, -1)


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12])
def test_brokers_listed_by_listener(version: int) -> None:
    plaintext = call(version, [])
    assert [(b.node_id, b.host, b.port) for b in plaintext.brokers] == [
        (0, "host0", 9090), (1, "host1", 9090)]
    if version >= 1:
        assert [b.rack for b in plaintext.brokers] == ["r0", None]
    internal = call(version, ["a"], listener="INTERNAL")
    assert [(b.node_id, b.port) for b in internal.brokers] == [(0, 9091), (2, 9090)]
    # Over INTERNAL a-2's leader (2) is reachable, a-0's (0) too (v0: but not replica 1).
    parts = partitions_of(topics_of(internal)["a"])
    a0_error = int(ErrorCode.REPLICA_NOT_AVAILABLE) if version == 0 else NONE
    assert [(int(parts[i].error_code), int(parts[i].leader_id)) for i in (0, 2)] == [
        (a0_error, 0), (NONE, 2)]


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_controller_cluster_id_and_internal(version: int) -> None:
    response = call(version, None)
    assert response.controller_id == 1
    if version >= 2:
        assert response.cluster_id == CLUSTER_ID
    internal = {t.name: t.is_internal for t in response.topics}
    assert internal == {"__consumer_offsets": True, "a": False, "b": False}


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12])
def test_unknown_topic_auto_created_when_config_allows(version: int) -> None:
    admin = FakeAdmin(_cache())
    response = call(version, ["a", "new", "new"], admin.cache, admin)
    # Only the unknown topic is asked for, once; before v4 the request cannot refuse.
    assert admin.calls == [(["new"], True)]
    new = topics_of(response)["new"]
    assert int(new.error_code) == NONE
    assert [(int(p.partition_index), int(p.leader_id)) for p in new.partitions] == [(0, 1)]
    assert [t.name for t in response.topics] == ["a", "new"]


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12])
def test_config_off_disallows_creation(version: int) -> None:
    admin = FakeAdmin(_cache(), {"new": UNKNOWN})
    response = call(version, ["new"], admin.cache, admin, auto_create_enable=False)
    assert admin.calls == [(["new"], False)]
    new = topics_of(response)["new"]
    assert (int(new.error_code), list(new.partitions)) == (UNKNOWN, [])


@pytest.mark.parametrize("version", [4, 9, 12])
def test_request_flag_disallows_creation_from_v4(version: int) -> None:
    admin = FakeAdmin(_cache(), {"new": UNKNOWN})
    call(version, ["new"], admin.cache, admin, allow_auto=False)
    assert admin.calls == [(["new"], False)]
    admin = FakeAdmin(_cache())
    call(version, ["new"], admin.cache, admin, allow_auto=True)
    assert admin.calls == [(["new"], True)]


@pytest.mark.parametrize("version", [1, 9, 12])
def test_admin_errors_passed_through(version: int) -> None:
    admin = FakeAdmin(_cache(), {"bad name!": int(ErrorCode.INVALID_TOPIC_EXCEPTION),
                                 "slow": LEADER_NOT_AVAILABLE})
    response = call(version, ["bad name!", "slow"], admin.cache, admin)
    assert admin.calls == [(["bad name!", "slow"], True)]
    got = {t.name: (int(t.error_code), list(t.partitions)) for t in response.topics}
    assert got == {"bad name!": (int(ErrorCode.INVALID_TOPIC_EXCEPTION), []),
                   "slow": (LEADER_NOT_AVAILABLE, [])}


def test_known_topic_without_partitions_is_unknown() -> None:
    # The admin answered 0 but the cache has no partition for it (yet): the topic is
    # UNKNOWN_TOPIC_OR_PARTITION rather than a topic with no partitions.
    cache = _cache()

    class NoCreation(FakeAdmin):
        async def auto_create_topics(self, names: Sequence[str], *, allowed: bool
                                     ) -> dict[str, int]:
            self.calls.append((list(names), allowed))
            return dict.fromkeys(names, 0)

    admin = NoCreation(cache)
    response = call(9, ["ghost"], cache, admin)
    ghost = topics_of(response)["ghost"]
    assert (int(ghost.error_code), list(ghost.partitions)) == (UNKNOWN, [])


def test_a_request_before_the_first_update_metadata_waits_for_it() -> None:
    """A broker just started in a cluster knows nothing until the controller's first
    UpdateMetadata: a Metadata request then waits for it rather than naming no broker
    but itself (or none) and no topic, which librdkafka takes for the cluster."""
    filled = _cache()
    empty = MetadataCache(broker_id=0, cluster_id=CLUSTER_ID)

    async def scenario() -> Any:
        values = {"topics": [{"name": "a", "topic_id": uuid.UUID(int=0)}],
                  "allow_auto_topic_creation": False,
                  "include_cluster_authorized_operations": False,
                  "include_topic_authorized_operations": False}
        request = build(apis.spec_for(METADATA).request_entity(12), values)
        connection = SimpleNamespace(listener_name=LISTENER, peer="127.0.0.1:5555")
        ctx = context(RequestHeader(METADATA, 12, 1, "t", 2), connection,
                      config={"auto_create_topics_enable": False}, metadata_cache=empty,
                      admin=FakeAdmin(empty))
        answer = asyncio.ensure_future(handle(ctx, request))
        await asyncio.sleep(0.05)
        assert not answer.done()
        # The controller's update arrives (UpdateMetadata: brokers, then partitions).
        empty.update_brokers([filled.broker(b) for b in filled.alive_broker_ids()],
                             filled.controller_id)
        empty.update_partitions(list(filled.partitions("a").values()), TOPIC_IDS)
        empty.changed()
        return await asyncio.wait_for(answer, 1)

    response = asyncio.run(scenario())
    assert [b.node_id for b in response.brokers] == [0, 1]
    assert int(topics_of(response)["a"].error_code) == NONE
