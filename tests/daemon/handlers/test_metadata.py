"""The Metadata handler (klog/daemon/handlers/metadata.py) over a real MetadataCache and a
fake admin, no socket: all topics vs named ones (v0: an empty list is all; v1+: null is
all), auto-creation asked of the admin only for unknown named topics and allowed only when
the request (v4+) and auto.create.topics.enable both allow it, leaders that are dead or
lack the request's listener, offline replicas, brokers by listener, internal topics,
controller and cluster id, duplicate names answered once; a broker just started waits for
the controller's first UpdateMetadata and never names a controller it does not list."""

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

    def __init__(self, cache: MetadataCache, errors: dict[str, int] | None = None,
                 controller_update: list[BrokerInfo] | None = None) -> None:
        self.cache = cache
        self.errors = errors or {}
        self.calls: list[tuple[list[str], bool]] = []
        #: What the controller's first UpdateMetadata brings while a request waits for
        #: it (None: it does not come in time).
        self.controller_update = controller_update
        self.waits: list[int] = []

    async def wait_for_cluster_metadata(self, timeout_ms: int) -> bool:
        self.waits.append(timeout_ms)
        if self.controller_update is not None:
            self.cache.update_brokers(self.controller_update, controller_id=1)
        return self.cache.from_controller

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


def _just_started() -> MetadataCache:
    """Broker 3 just started in cluster mode: its cache holds its own registration and
    the controller's id (1, read from ZooKeeper), not yet the controller's UpdateMetadata."""
    cache = MetadataCache(broker_id=3, cluster_id=CLUSTER_ID, controller_id=1)
    cache.brokers[3] = _broker(3, LISTENER)
    return cache


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_a_broker_just_started_answers_once_the_controller_told_it_the_cluster(
        version: int) -> None:
    # Answered from its own registration, librdkafka learned one broker and a controller
    # it could not find, and waited for it without asking again: a CreateTopics sent to a
    # cluster just started timed out after 30 s (issue 28).
    cache = _just_started()
    everyone = [_broker(1, LISTENER), _broker(2, LISTENER), _broker(3, LISTENER)]
    admin = FakeAdmin(cache, controller_update=everyone)
    response = call(version, None, cache, admin)
    assert admin.waits == [5000]
    assert [b.node_id for b in response.brokers] == [1, 2, 3]
    assert response.controller_id == 1
    # From then on nothing waits.
    call(version, None, cache, admin)
    assert admin.waits == [5000]


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_no_controller_is_named_that_the_answer_does_not_list(version: int) -> None:
    # The controller's UpdateMetadata did not come in time: the broker answers what it
    # knows, and names no controller rather than one without an address.
    cache = _just_started()
    admin = FakeAdmin(cache)
    response = call(version, None, cache, admin)
    assert admin.waits == [5000]
    assert [b.node_id for b in response.brokers] == [3]
    assert response.controller_id == -1
    # Nor one that is not on the request's listener (as DescribeCluster answers).
    over_internal = call(version, None, listener="INTERNAL")
    assert [b.node_id for b in over_internal.brokers] == [0, 2]
    assert over_internal.controller_id == -1


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


def call_by_ids(version: int, ids: list[uuid.UUID], cache: MetadataCache | None = None,
                admin: FakeAdmin | None = None, **ctx_kwargs: Any) -> Any:
    cache = cache if cache is not None else _cache()
    request = build(apis.spec_for(METADATA).request_entity(version), {
        "topics": [{"name": None, "topic_id": i} for i in ids],
        "allow_auto_topic_creation": True, "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False})
    connection = SimpleNamespace(listener_name=LISTENER, peer="127.0.0.1:5555")
    ctx = context(RequestHeader(METADATA, version, 1, "t", 2), connection,
                  config={"auto_create_topics_enable": True}, metadata_cache=cache,
                  admin=admin if admin is not None else FakeAdmin(cache), **ctx_kwargs)
    response = asyncio.run(handle(ctx, request))
    # What goes on the wire decodes back (names may be null from v12).
    return apis.decode_response(METADATA, version, apis.encode_response(response))


def test_topics_by_id_from_v12() -> None:
    # Kafka's admin client describes (and deletes) topics by id with Metadata v12: known
    # ids answer their topics, names included; an unknown id UNKNOWN_TOPIC_ID with the id
    # and no name; nothing is auto-created. (klog answered by names only: nothing, or a
    # topic without an id, and Kafka's client threw IllegalStateException.)
    admin = FakeAdmin(_cache())
    stranger = uuid.UUID(int=99)
    response = call_by_ids(12, [TOPIC_IDS["b"], stranger, TOPIC_IDS["b"]], admin.cache, admin)
    assert admin.calls == []
    known, unknown = response.topics
    assert (known.name, known.topic_id, int(known.error_code)) == ("b", TOPIC_IDS["b"], NONE)
    assert [int(p.leader_id) for p in known.partitions] == [1]
    assert (unknown.name, unknown.topic_id, int(unknown.error_code), list(unknown.partitions)) \
        == (None, stranger, int(ErrorCode.UNKNOWN_TOPIC_ID), [])
