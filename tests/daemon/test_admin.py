"""AdminManager (klog/daemon/admin.py) and dynamic configs (klog/daemon/config_changes.py).

Three layers: the pure validation and placement functions; the admin APIs spoken over a
real socket to an in-process broker (one per module), where a test can also look at the
broker's insides (live log configs, znodes); and the /config/changes listener of a broker
in cluster mode on a real ZooKeeper, fed by another writer.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klog.daemon import admin as admin_mod
from klog.daemon.admin import (
    AdminError,
    AlterConfigOp,
    apply_incremental_ops,
    assign_replicas,
    check_assignment,
    new_partitions_assignment,
    resource_label,
    validate_topic_name,
)
from klog.daemon.config import ConfigSource, ConfigType
from klog.daemon.config_changes import (
    purge_obsolete_notifications,
    read_entity_config,
    write_entity_config,
)
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache
from klog.daemon.metastore import paths
from klog.daemon.metastore.local import LocalMetadataStore
from klog.protocol.errors import ErrorCode
from tests.daemon.wire import InProcessBroker, WireClient, batch, running_broker

pytestmark = pytest.mark.timeout(60)

API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 18, 19, 20, 21
DESCRIBE_CONFIGS, ALTER_CONFIGS, DESCRIBE_LOG_DIRS = 32, 33, 35
CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 37, 44, 60
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


def _code(fn: Any, *args: Any, **kwargs: Any) -> tuple[ErrorCode, str]:
    with pytest.raises(AdminError) as info:
        fn(*args, **kwargs)
    return info.value.error_code, str(info.value)


# -- topic names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "A-b_c.9", "x" * 249, "__consumer_offsets", "-"])
def test_legal_topic_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize(("name", "fragment"), [
    ("", "can't be empty"),
    (".", "cannot be \".\" or \"..\""),
    ("..", "cannot be \".\" or \"..\""),
    ("x" * 250, "can't be longer than 249 characters"),
    ("a/b", "contains a character other than ASCII alphanumerics"),
    ("a b", "contains a character other than ASCII alphanumerics"),
    ("é", "contains a character other than ASCII alphanumerics"),
])
def test_illegal_topic_names(name: str, fragment: str) -> None:
    code, message = _code(validate_topic_name, name)
    assert code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert fragment in message


# -- assign_replicas: klog.placement's refusals as Kafka's error codes ----------------------


def test_assign_replicas_checks_partitions_before_replication_factor() -> None:
    assert _code(assign_replicas, [0], 0, 0) == (
        ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
    assert _code(assign_replicas, [0], 1, 0) == (
        ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    assert _code(assign_replicas, [], 1, 1)[0] == ErrorCode.INVALID_REPLICATION_FACTOR


def test_assign_replicas_places_by_rack() -> None:
    racks = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}
    for replicas in assign_replicas(racks, 12, 3).values():
        assert sorted(racks[b] for b in replicas) == ["a", "b", "c"]


def test_assign_replicas_refuses_mixed_racks_as_kafka() -> None:
    # Kafka's AdminOperationException, answered UNKNOWN_SERVER_ERROR.
    assert _code(assign_replicas, {1: "a", 2: None}, 1, 1) == (
        ErrorCode.UNKNOWN_SERVER_ERROR,
        "Not all brokers have rack information for replica rack aware assignment.")


# -- CreateTopics assignments ---------------------------------------------------------------


def test_check_assignment_accepts_a_good_one() -> None:
    check_assignment({0: [1, 2], 1: [2, 1], 2: [1, 2]}, [1, 2, 3])


@pytest.mark.parametrize(("assignment", "message"), [
    ({0: [1], 2: [1]}, "partitions should be a consecutive 0-based integer sequence"),
    ({1: [1]}, "partitions should be a consecutive 0-based integer sequence"),
    ({0: [1, 2], 1: [1]}, "All partitions should have the same number of replicas"),
    ({0: []}, "All partitions should have the same number of replicas"),
    ({0: [1, 1]}, "Duplicate brokers not allowed in replica assignment: 1, 1 for partition "
                  "id 0."),
    ({0: [1, 7], 1: [8, 1]}, "Unknown broker(s) in replica assignment: 7, 8."),
])
def test_check_assignment_refuses(assignment: dict[int, list[int]], message: str) -> None:
    assert _code(check_assignment, assignment, [1, 2, 3]) == (
        ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


# -- CreatePartitions assignments -----------------------------------------------------------


def test_new_partitions_continue_the_round_robin() -> None:
    existing = {0: [2, 3], 1: [3, 1], 2: [1, 2]}
    added = new_partitions_assignment(existing, [1, 2, 3], 6)
    assert sorted(added) == [3, 4, 5]
    for replicas in added.values():
        assert len(replicas) == 2 and len(set(replicas)) == 2
    # Kafka starts the new partitions' round-robin at partition 0's leader.
    assert [added[p][0] for p in (3, 4, 5)] == [2, 3, 1]


def test_new_partitions_are_placed_by_rack() -> None:
    racks = {1: "a", 2: "b", 3: "c"}
    added = new_partitions_assignment({0: [1, 2], 1: [2, 3]}, racks, 8)
    assert sorted(added) == [2, 3, 4, 5, 6, 7]
    for replicas in added.values():
        assert len({racks[b] for b in replicas}) == 2
    assert _code(new_partitions_assignment, {0: [1]}, {1: "a", 2: None}, 2) == (
        ErrorCode.UNKNOWN_SERVER_ERROR,
        "Not all brokers have rack information for replica rack aware assignment.")
    # An explicit assignment needs no racks.
    assert new_partitions_assignment({0: [1]}, {1: "a", 2: None}, 2, [[2]]) == {1: [2]}


def test_new_partitions_with_explicit_replicas() -> None:
    added = new_partitions_assignment({0: [1, 2]}, [1, 2, 3], 3, [[3, 1], [2, 3]])
    assert added == {1: [3, 1], 2: [2, 3]}


@pytest.mark.parametrize(("count", "proposed", "code", "message"), [
    (1, None, ErrorCode.INVALID_PARTITIONS,
     "Topic currently has 2 partitions, which is higher than the requested 1."),
    (2, None, ErrorCode.INVALID_PARTITIONS, "Topic already has 2 partitions."),
    (4, [[1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "Increasing the number of partitions by 2 but 1 assignments provided."),
    (3, [[9]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Unknown broker(s) in replica "
     "assignment: 9."),
    (3, [[]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "Cannot have replication factor of 0 for partition id 2."),
    (3, [[1, 1]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "Duplicate brokers not allowed in replica assignment: 1, 1 for partition id 2."),
    (3, [[1, 2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "Inconsistent replication factor between partitions, partition 0 has 1 while "
     "partition 2 has replicas 2."),
])
def test_new_partitions_refused(count: int, proposed: list[list[int]] | None,
                                code: ErrorCode, message: str) -> None:
    assert _code(new_partitions_assignment, {0: [1], 1: [2]}, [1, 2], count, proposed) == (
        code, message)


# -- IncrementalAlterConfigs operations -----------------------------------------------------


def _topic_ops(current: dict[str, str], ops: list[tuple[str, int, str | None]]
               ) -> dict[str, str]:
    return apply_incremental_ops(current, ops, admin_mod._topic_config_type,
                                 admin_mod._topic_config_default)


def test_incremental_set_delete_append_subtract() -> None:
    current = {"retention.ms": "1000", "segment.bytes": "2048"}
    out = _topic_ops(current, [
        ("retention.ms", AlterConfigOp.SET, "5000"),
        ("segment.bytes", AlterConfigOp.DELETE, None),
        ("cleanup.policy", AlterConfigOp.APPEND, "compact"),  # from the default "delete"
        ("leader.replication.throttled.replicas", AlterConfigOp.APPEND, "0:1,1:1"),
    ])
    assert out == {"retention.ms": "5000", "cleanup.policy": "delete,compact",
                   "leader.replication.throttled.replicas": "0:1,1:1"}
    out = _topic_ops(out, [("cleanup.policy", AlterConfigOp.SUBTRACT, "delete"),
                           ("leader.replication.throttled.replicas", AlterConfigOp.APPEND,
                            "1:1,2:1")])
    assert out["cleanup.policy"] == "compact"
    assert out["leader.replication.throttled.replicas"] == "0:1,1:1,2:1"
    assert current == {"retention.ms": "1000", "segment.bytes": "2048"}  # not modified


@pytest.mark.parametrize(("ops", "code", "message"), [
    ([("retention.ms", 0, "1"), ("retention.ms", 1, None)], ErrorCode.INVALID_REQUEST,
     "Error due to duplicate config keys : retention.ms"),
    ([("retention.ms", 0, None)], ErrorCode.INVALID_REQUEST,
     "Null value not supported for : SET:retention.ms"),
    ([("retention.ms", 7, "1")], ErrorCode.INVALID_REQUEST,
     "Unknown alter configuration operation type 7 for retention.ms"),
    ([("retention.ms", 2, "1")], ErrorCode.INVALID_REQUEST,
     "Config value append is not allowed for config key: retention.ms"),
    ([("segment.bytes", 3, "1")], ErrorCode.INVALID_REQUEST,
     "Config value subtract is not allowed for config key: segment.bytes"),
    ([("no.such.config", 2, "1")], ErrorCode.INVALID_CONFIG,
     "Unknown config name: no.such.config"),
])
def test_incremental_refused(ops: list[tuple[str, int, str | None]], code: ErrorCode,
                             message: str) -> None:
    assert _code(_topic_ops, {}, ops) == (code, message)


def test_resource_label_is_kafkas() -> None:
    assert resource_label(2, "t") == "ConfigResource(type=TOPIC, name='t')"
    assert resource_label(4, "") == "ConfigResource(type=BROKER, name='')"
    assert resource_label(99, "x") == "ConfigResource(type=UNKNOWN, name='x')"


# -- waiting for the controller's first UpdateMetadata ---------------------------------------


def _admin_manager(cache: MetadataCache) -> admin_mod.AdminManager:
    """An AdminManager with only its metadata cache (this wait touches nothing else)."""
    none: Any = None
    return admin_mod.AdminManager(cache.broker_id, none, none, cache, none, none, none, none)


def test_waiting_for_the_controllers_first_update_metadata() -> None:
    # A broker just started in cluster mode holds Metadata requests until the controller
    # tells it the cluster (handlers/metadata.py). They go on when the UpdateMetadata
    # comes; if it never comes (a wrong advertised listener), the timeout counts from the
    # first request that waited, so later requests are not held again.
    import asyncio

    everyone = [BrokerInfo(b, (BrokerEndpoint("PLAINTEXT", "h", 9090 + b),)) for b in (1, 3)]

    async def go() -> None:
        cache = MetadataCache(broker_id=3, controller_id=1)
        manager = _admin_manager(cache)
        waiting = asyncio.get_running_loop().create_task(
            manager.wait_for_cluster_metadata(60_000))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        cache.update_brokers(everyone, controller_id=1)  # as ControlRequestReceiver does
        cache.changed()
        assert await asyncio.wait_for(waiting, 10) is True
        assert await manager.wait_for_cluster_metadata(60_000) is True  # at once

        lonely = _admin_manager(MetadataCache(broker_id=4, controller_id=1))
        assert await lonely.wait_for_cluster_metadata(200) is False
        # Bounded by the first wait's deadline, not 60 s more.
        assert await asyncio.wait_for(lonely.wait_for_cluster_metadata(60_000), 10) is False

    asyncio.run(asyncio.wait_for(go(), 30))


# -- config_changes on a local store --------------------------------------------------------


def test_entity_configs_and_notifications(tmp_path: Path) -> None:
    with LocalMetadataStore(tmp_path / "meta") as store:
        paths.create_persistent_paths(store)
        assert read_entity_config(store, "topics", "t") == {}
        first = write_entity_config(store, "topics", "t", {"retention.ms": "1"})
        second = write_entity_config(store, "brokers", "<default>", {"a": "b"})
        write_entity_config(store, "topics", "t", {"segment.ms": "5"})  # replaces
        assert read_entity_config(store, "topics", "t") == {"segment.ms": "5"}
        assert read_entity_config(store, "brokers", "<default>") == {"a": "b"}
        assert first == "/config/changes/config_change_0000000000"
        assert second == "/config/changes/config_change_0000000001"
        data, _ = store.get(second)
        assert paths.ConfigChangeNotification.decode(data).entity_path == "brokers/<default>"
        now = int(time.time() * 1000)
        assert purge_obsolete_notifications(store, now) == 0
        assert purge_obsolete_notifications(store, now + 16 * 60 * 1000) == 3
        assert store.get_children(paths.CONFIG_CHANGES) == []


# -- the APIs over the wire, standalone ------------------------------------------------------


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path_factory.mktemp("admin"), {"num.partitions": "2"})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def client(node: InProcessBroker) -> Iterator[WireClient]:
    with node.connect() as c:
        yield c


def _create(client: WireClient, name: str, version: int = 7, partitions: int = -1,
            rf: int = -1, assignments: list[tuple[int, list[int]]] | None = None,
            configs: dict[str, str | None] | None = None, validate_only: bool = False,
            timeout: int = 10000) -> Any:
    return client.call(CREATE_TOPICS, version, {
        "topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [{"partition_index": p, "broker_ids": b}
                            for p, b in (assignments or [])],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
        }],
        "timeout": timeout, "validate_only": validate_only,
    }).topics[0]


def _describe_topic(client: WireClient, name: str, keys: list[str] | None = None,
                    version: int = 4, synonyms: bool = True) -> Any:
    return client.call(DESCRIBE_CONFIGS, version, {
        "resources": [{"resource_type": TOPIC, "resource_name": name,
                       "configuration_keys": keys}],
        "include_synonyms": synonyms, "include_documentation": True,
    }).results[0]


def _znode(node: InProcessBroker, path: str) -> bytes | None:
    def get() -> bytes | None:
        store = node.broker.metastore
        return store.get(path)[0] if store.exists(path) is not None else None
    return node.call(get)


def test_create_topics_v7_answers_configs_and_id(node: InProcessBroker,
                                                 client: WireClient) -> None:
    t = _create(client, "v7", configs={"retention.ms": "60000", "cleanup.policy": "compact"})
    assert (t.error_code, t.error_message) == (0, None)
    assert (t.num_partitions, t.replication_factor) == (2, 1)  # broker defaults (-1)
    assert t.topic_id == node.call(lambda: node.broker.metadata_cache.topic_id("v7"))
    configs = {c.name: c for c in t.configs}
    assert configs["retention.ms"].value == "60000"
    assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
    stored = paths.EntityConfig.decode(_znode(node, "/config/topics/v7")).config
    assert stored == {"retention.ms": "60000", "cleanup.policy": "compact"}
    assignment = paths.TopicAssignment.decode(_znode(node, "/brokers/topics/v7"))
    assert assignment.topic_id == t.topic_id
    assert {p: ra.replicas for p, ra in assignment.partitions.items()} == {0: (0,), 1: (0,)}
    # the live log got the topic's config
    segment_ms = node.call(lambda: node.broker.replica_manager.get_partition("v7", 0)
                           .log.config.retention_ms)
    assert segment_ms == 60000


def test_create_topics_validate_only_writes_nothing(node: InProcessBroker,
                                                    client: WireClient) -> None:
    t = _create(client, "dry", partitions=3, validate_only=True)
    assert (t.error_code, t.num_partitions, t.replication_factor) == (0, 3, 1)
    assert t.topic_id is None  # the zero uuid, as kio reads it
    assert _znode(node, "/brokers/topics/dry") is None
    assert _znode(node, "/config/topics/dry") is None
    assert client.metadata(["dry"], auto_create=False).topics[0].error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_topics_with_assignment(client: WireClient) -> None:
    t = _create(client, "assigned", assignments=[(0, [0]), (1, [0]), (2, [0])])
    assert (t.error_code, t.num_partitions) == (0, 3)
    md = client.metadata(["assigned"], auto_create=False).topics[0]
    assert sorted(p.partition_index for p in md.partitions) == [0, 1, 2]


@pytest.mark.parametrize(("kwargs", "code", "fragment"), [
    ({"partitions": 0}, ErrorCode.INVALID_PARTITIONS, "Number of partitions must be"),
    ({"rf": 2}, ErrorCode.INVALID_REPLICATION_FACTOR, "larger than available brokers: 1."),
    ({"partitions": 1, "assignments": [(0, [0])]}, ErrorCode.INVALID_REQUEST,
     "Both numPartitions or replicationFactor and replicasAssignments were set"),
    ({"assignments": [(0, [0]), (0, [0])]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
     "consecutive"),
    ({"assignments": [(0, [3])]}, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Unknown broker"),
    ({"configs": {"retention.ms": "soon"}}, ErrorCode.INVALID_CONFIG, "retention.ms"),
    ({"configs": {"no.such": "1"}}, ErrorCode.INVALID_CONFIG,
     "Unknown topic config name: no.such"),
    ({"configs": {"retention.ms": None}}, ErrorCode.INVALID_REQUEST,
     "Null value not supported for topic configs : retention.ms"),
])
def test_create_topics_refused(node: InProcessBroker, client: WireClient,
                               kwargs: dict[str, Any], code: ErrorCode, fragment: str) -> None:
    t = _create(client, "refused", **kwargs)
    assert t.error_code == code
    assert fragment in t.error_message
    assert (t.num_partitions, t.replication_factor, t.configs) == (-1, -1, ())
    assert _znode(node, "/brokers/topics/refused") is None


def test_create_topics_duplicates_exists_and_collisions(client: WireClient) -> None:
    assert _create(client, "a.b").error_code == 0
    again = _create(client, "a.b")
    assert (again.error_code, again.error_message) == (
        ErrorCode.TOPIC_ALREADY_EXISTS, "Topic 'a.b' already exists.")
    clash = _create(client, "a_b")
    assert clash.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert "collides with existing topics: a.b" in clash.error_message
    bad = _create(client, "bad/name")
    assert bad.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    twice = client.call(CREATE_TOPICS, 5, {
        "topics": [{"name": "twice", "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}] * 2,
        "timeout": 5000, "validate_only": False})
    assert [(t.name, t.error_code) for t in twice.topics] == [
        ("twice", ErrorCode.INVALID_REQUEST)]
    assert client.metadata(["twice"], auto_create=False).topics[0].error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_topics_old_version_and_zero_timeout(client: WireClient) -> None:
    t = _create(client, "v2", version=2, partitions=1, rf=1)
    assert (t.name, t.error_code) == ("v2", 0)
    # timeout 0: created, but answered REQUEST_TIMED_OUT without waiting, as Kafka does
    t = _create(client, "no-wait", partitions=1, timeout=0)
    assert t.error_code == ErrorCode.REQUEST_TIMED_OUT
    client.create_topic("no-wait")


def test_delete_topics_by_name_then_recreate(node: InProcessBroker,
                                             client: WireClient) -> None:
    assert _create(client, "doomed", partitions=2).error_code == 0
    client.produce("doomed", 0, batch(3))
    assert _create(client, "doomed").topic_id is None  # already exists: the zero id
    response = client.call(DELETE_TOPICS, 5, {"topic_names": ["doomed", "never"],
                                              "timeout": 10000})
    got = {r.name: (r.error_code, r.error_message) for r in response.responses}
    assert got["doomed"] == (0, None)
    assert got["never"][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _znode(node, "/brokers/topics/doomed") is None
    assert _znode(node, "/config/topics/doomed") is None
    assert _znode(node, "/admin/delete_topics/doomed") is None
    assert node.call(lambda: node.broker.replica_manager.get_partition("doomed", 0)) is None
    # at once creatable again, empty
    assert _create(client, "doomed", partitions=1).error_code == 0
    assert node.log_end_offset("doomed") == 0


def test_delete_topics_v6_by_id_and_malformed_entries(node: InProcessBroker,
                                                      client: WireClient) -> None:
    for name in ("by-id", "by-name", "both"):
        assert _create(client, name, partitions=1).error_code == 0
    cache = node.broker.metadata_cache
    by_id = node.call(lambda: cache.topic_id("by-id"))
    both = node.call(lambda: cache.topic_id("both"))
    unknown = uuid.uuid4()
    response = client.call(DELETE_TOPICS, 6, {"topics": [
        {"name": None, "topic_id": by_id},
        {"name": "by-name", "topic_id": uuid.UUID(int=0)},
        {"name": "both", "topic_id": both},
        {"name": None, "topic_id": uuid.UUID(int=0)},
        {"name": None, "topic_id": unknown},
    ], "timeout": 10000})
    got = [(r.name, r.topic_id, r.error_code, r.error_message) for r in response.responses]
    assert got[0][:3] == ("by-id", by_id, 0)
    assert got[1][0] == "by-name" and got[1][2] == 0 and got[1][1] is not None
    assert got[2] == ("both", both, ErrorCode.INVALID_REQUEST,
                      "You may not specify both topic name and topic id.")
    assert got[3] == (None, None, ErrorCode.INVALID_REQUEST,
                      "Neither topic name nor id were specified.")
    assert got[4][1:3] == (unknown, ErrorCode.UNKNOWN_TOPIC_ID)
    names = {t.name for t in client.metadata(None).topics}
    assert "by-id" not in names and "by-name" not in names and "both" in names


def test_delete_topics_timeout_zero(client: WireClient) -> None:
    assert _create(client, "quick", partitions=1).error_code == 0
    response = client.call(DELETE_TOPICS, 4, {"topic_names": ["quick"], "timeout": 0})
    assert response.responses[0].error_code == ErrorCode.REQUEST_TIMED_OUT
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # marked: the controller still deletes it
        if client.metadata(["quick"], auto_create=False).topics[0].error_code:
            break
        time.sleep(0.02)
    assert client.metadata(["quick"], auto_create=False).topics[0].error_code == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_create_partitions(node: InProcessBroker, client: WireClient) -> None:
    assert _create(client, "grow", partitions=1).error_code == 0

    def grow(count: int, assignments: list[list[int]] | None = None,
             validate_only: bool = False, name: str = "grow", version: int = 3) -> Any:
        return client.call(CREATE_PARTITIONS, version, {
            "topics": [{"name": name, "count": count, "assignments": None
                        if assignments is None else [{"broker_ids": b} for b in assignments]}],
            "timeout": 10000, "validate_only": validate_only}).results[0]

    assert (grow(3, validate_only=True).error_code) == 0
    assert len(client.metadata(["grow"]).topics[0].partitions) == 1
    assert grow(3).error_code == 0
    assert len(client.metadata(["grow"]).topics[0].partitions) == 3
    assert client.produce("grow", 2, batch(1)).responses[0].partition_responses[0] \
        .error_code == 0
    assert grow(4, [[0]], version=0).error_code == 0
    assert len(client.metadata(["grow"]).topics[0].partitions) == 4
    shrink = grow(2)
    assert (shrink.error_code, shrink.error_message) == (
        ErrorCode.INVALID_PARTITIONS,
        "Topic currently has 4 partitions, which is higher than the requested 2.")
    same = grow(4)
    assert (same.error_code, same.error_message) == (
        ErrorCode.INVALID_PARTITIONS, "Topic already has 4 partitions.")
    assert grow(6, [[0]]).error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert grow(5, [[4]]).error_message == "Unknown broker(s) in replica assignment: 4."
    missing = grow(2, name="nowhere")
    assert (missing.error_code, missing.error_message) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nowhere' does not exist.")
    illegal = grow(2, name="no/such")
    assert (illegal.error_code, illegal.error_message) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'no/such' does not exist.")
    data = paths.TopicAssignment.decode(_znode(node, "/brokers/topics/grow"))
    assert sorted(data.partitions) == [0, 1, 2, 3]
    assert data.topic_id == node.call(lambda: node.broker.metadata_cache.topic_id("grow"))


def test_delete_records(node: InProcessBroker, client: WireClient) -> None:
    assert _create(client, "trim", partitions=2).error_code == 0
    for _ in range(4):
        client.produce("trim", 0, batch(5))
    client.produce("trim", 1, batch(2))

    def delete(offsets: dict[int, int], name: str = "trim", version: int = 2) -> dict:
        r = client.call(DELETE_RECORDS, version, {"topics": [{"name": name, "partitions": [
            {"partition_index": p, "offset": o} for p, o in offsets.items()]}],
            "timeout": 5000})
        return {p.partition_index: (p.low_watermark, p.error_code) for p in r.topics[0].partitions}

    assert delete({0: 7, 1: -1}) == {0: (7, 0), 1: (2, 0)}
    assert delete({0: 3}, version=0) == {0: (7, 0)}  # never moves back
    assert delete({0: 21}) == {0: (-1, ErrorCode.OFFSET_OUT_OF_RANGE)}
    assert delete({0: -5}) == {0: (-1, ErrorCode.OFFSET_OUT_OF_RANGE)}
    assert delete({7: 1}) == {7: (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
    assert delete({0: 1}, name="nowhere") == {0: (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
    fetched = client.fetch("trim", 0, 3).responses[0].partitions[0]
    assert fetched.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetched.log_start_offset == 7
    assert delete({0: 20}) == {0: (20, 0)}
    # compacted topics refuse (Kafka's policy check)
    assert _create(client, "kept", partitions=1,
                   configs={"cleanup.policy": "compact"}).error_code == 0
    client.produce("kept", 0, batch(1, key=b"k"))
    assert delete({0: 1}, name="kept") == {0: (-1, ErrorCode.POLICY_VIOLATION)}


def test_describe_topic_configs(client: WireClient) -> None:
    assert _create(client, "described", partitions=1,
                   configs={"retention.ms": "3600000"}).error_code == 0
    r = _describe_topic(client, "described")
    assert (r.error_code, r.resource_type, r.resource_name) == (0, TOPIC, "described")
    configs = {c.name: c for c in r.configs}
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source, retention.read_only) == (
        "3600000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False)
    assert retention.config_type == ConfigType.LONG
    assert retention.documentation
    assert [(s.name, s.source) for s in retention.synonyms][:2] == [
        ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG)]
    assert configs["cleanup.policy"].config_type == ConfigType.LIST
    only = _describe_topic(client, "described", ["segment.bytes", "retention.ms"])
    assert sorted(c.name for c in only.configs) == ["retention.ms", "segment.bytes"]
    bare = _describe_topic(client, "described", version=1, synonyms=False)
    assert all(c.synonyms == () for c in bare.configs)
    missing = _describe_topic(client, "nowhere")
    assert (missing.error_code, missing.configs) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ())
    assert _describe_topic(client, "bad/name").error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_a_damaged_config_znode_is_an_error_answer(node: InProcessBroker,
                                                   client: WireClient) -> None:
    assert _create(client, "damaged", partitions=1).error_code == 0
    node.call(lambda: node.broker.metastore.set("/config/topics/damaged", b"{not json"))
    r = _describe_topic(client, "damaged")
    assert r.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert r.error_message.startswith("metastore failure: ")
    r = _incremental(client, TOPIC, "damaged", [("segment.ms", 0, "1000")])
    assert r.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    # AlterConfigs replaces the whole znode: the topic is usable again
    assert _alter(client, TOPIC, "damaged", {"segment.ms": "1000"}).error_code == 0
    assert _describe_topic(client, "damaged", ["segment.ms"]).configs[0].value == "1000"


def _broker_resource(client: WireClient, name: str, keys: list[str] | None = None) -> Any:
    return client.call(DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": BROKER, "resource_name": name,
                       "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": False}).results[0]


def test_describe_broker_configs(client: WireClient) -> None:
    r = _broker_resource(client, "0")
    assert r.error_code == 0
    configs = {c.name: c for c in r.configs}
    assert configs["num.partitions"].value == "2"
    assert configs["num.partitions"].config_source == ConfigSource.STATIC_BROKER_CONFIG
    assert configs["broker.id"].read_only is True
    assert configs["log.retention.hours"].config_source == ConfigSource.DEFAULT_CONFIG
    assert all(c.documentation is None for c in r.configs)
    assert _broker_resource(client, "").error_code == 0  # the cluster default resource
    wrong = _broker_resource(client, "5")
    assert (wrong.error_code, wrong.error_message) == (
        ErrorCode.INVALID_REQUEST,
        "Unexpected broker id, expected 0 or empty string, but received 5")
    assert _broker_resource(client, "x").error_message == \
        "Broker id must be an integer, but it is: x"
    other = client.call(DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": 99, "resource_name": "0", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False}).results[0]
    assert (other.error_code, other.error_message) == (
        ErrorCode.INVALID_REQUEST, "Unsupported resource type: 99")


def _loggers(client: WireClient, name: str = "0", keys: list[str] | None = None) -> Any:
    return client.call(DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": BROKER_LOGGER, "resource_name": name,
                       "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": False}).results[0]


def test_broker_loggers_are_described_and_their_levels_changed(client: WireClient) -> None:
    # kafka-configs --entity-type broker-loggers (Kafka's Log4jController): every logger of
    # the broker with its level, changed by IncrementalAlterConfigs until the broker stops.
    name = "klog.daemon.admin"
    described = _loggers(client)
    assert described.error_code == 0
    levels = {c.name: c.value for c in described.configs}
    root = levels["root"]
    assert root in {"FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "ALL"}
    assert name in levels
    assert all(c.config_source == ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG
               and not c.read_only and not c.is_sensitive and not list(c.synonyms)
               for c in described.configs)
    try:
        assert _incremental(client, BROKER_LOGGER, "0", [(name, 0, "TRACE")],
                            validate_only=True).error_code == 0
        assert [c.value for c in _loggers(client, keys=[name]).configs] == [levels[name]]
        assert _incremental(client, BROKER_LOGGER, "0", [(name, 0, "DEBUG")]).error_code == 0
        assert [(c.name, c.value) for c in _loggers(client, keys=[name]).configs] == [
            (name, "DEBUG")]
        assert logging.getLogger(name).level == logging.DEBUG  # the broker runs in here
        assert _incremental(client, BROKER_LOGGER, "0", [(name, 1, None)]).error_code == 0
        assert [c.value for c in _loggers(client, keys=[name]).configs] == [root]
        assert logging.getLogger(name).level == logging.NOTSET
    finally:
        logging.getLogger(name).setLevel(logging.NOTSET)
    label = "ConfigResource(type=BROKER_LOGGER, name='0')"
    for ops, message in [
        ([("no.such.logger", 0, "DEBUG")],
         f"Invalid config value for resource {label}: Logger no.such.logger does not exist!"),
        ([(name, 0, "LOUD")],
         f"Invalid config value for resource {label}: Cannot set the log level of {name} to "
         f"LOUD as it is not a supported log level. Valid log levels are FATAL, ERROR, WARN, "
         f"INFO, DEBUG, TRACE"),
        ([("root", 1, None)], "Removing the log level of the root logger is not allowed"),
        ([(name, 2, "DEBUG")], "APPEND operation is not allowed for the BROKER_LOGGER resource"),
        ([("root", 0, "DEBUG"), (name, 3, "x")],
         "SUBTRACT operation is not allowed for the BROKER_LOGGER resource"),
        ([(name, 0, "DEBUG"), (name, 1, None)], f"Error due to duplicate config keys : {name}"),
    ]:
        r = _incremental(client, BROKER_LOGGER, "0", ops)
        assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, message)
    # Nothing of a refused request was applied.
    assert logging.getLogger(name).level == logging.NOTSET
    assert _loggers(client, keys=["root"]).configs[0].value == root
    assert _loggers(client, "").error_message == "Broker id must not be empty"
    assert _loggers(client, "7").error_code == ErrorCode.INVALID_REQUEST
    r = _incremental(client, BROKER_LOGGER, "", [(name, 0, "DEBUG")])
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST,
                                               "Broker id must not be empty")


def _alter(client: WireClient, resource_type: int, name: str, configs: dict[str, str | None],
           validate_only: bool = False, version: int = 2) -> Any:
    r = client.call(ALTER_CONFIGS, version, {"resources": [{
        "resource_type": resource_type, "resource_name": name,
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "validate_only": validate_only})
    return r.responses[0]


def _incremental(client: WireClient, resource_type: int, name: str,
                 ops: list[tuple[str, int, str | None]], validate_only: bool = False,
                 version: int = 1) -> Any:
    r = client.call(INCREMENTAL_ALTER_CONFIGS, version, {"resources": [{
        "resource_type": resource_type, "resource_name": name,
        "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}],
        "validate_only": validate_only})
    return r.responses[0]


def test_alter_topic_configs_replaces_and_applies_live(node: InProcessBroker,
                                                       client: WireClient) -> None:
    assert _create(client, "altered", partitions=1,
                   configs={"retention.ms": "1000"}).error_code == 0

    def live() -> Any:
        return node.call(lambda: node.broker.replica_manager.get_partition("altered", 0)
                         .log.config)

    assert _alter(client, TOPIC, "altered", {"segment.ms": "5000"}, validate_only=True) \
        .error_code == 0
    assert live().segment_ms != 5000
    r = _alter(client, TOPIC, "altered", {"segment.ms": "5000"}, version=0)
    assert (r.error_code, r.resource_name) == (0, "altered")
    assert (live().segment_ms, live().retention_ms) == (5000, 7 * 24 * 3600 * 1000)
    assert paths.EntityConfig.decode(_znode(node, "/config/topics/altered")).config == {
        "segment.ms": "5000"}
    changes = node.call(lambda: node.broker.metastore.get_children("/config/changes"))
    last = max(changes)
    note = paths.ConfigChangeNotification.decode(_znode(node, f"/config/changes/{last}"))
    assert note.entity_path == "topics/altered"
    bad = _alter(client, TOPIC, "altered", {"segment.ms": "later"})
    assert bad.error_code == ErrorCode.INVALID_REQUEST
    assert bad.error_message.startswith(
        "Invalid config value for resource ConfigResource(type=TOPIC, name='altered'): ")
    assert _alter(client, TOPIC, "altered", {"nope": "1"}).error_code == ErrorCode.INVALID_CONFIG
    assert _alter(client, TOPIC, "altered", {"segment.ms": None}).error_message == \
        "Null value not supported for : segment.ms"
    missing = _alter(client, TOPIC, "nowhere", {})
    assert (missing.error_code, missing.error_message) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nowhere' does not exist.")
    assert live().segment_ms == 5000


def test_incremental_alter_topic_configs_applies_live(node: InProcessBroker,
                                                      client: WireClient) -> None:
    assert _create(client, "inc", partitions=1, configs={"retention.ms": "1000"}
                   ).error_code == 0
    r = _incremental(client, TOPIC, "inc", [("max.message.bytes", AlterConfigOp.SET, "2048"),
                                            ("cleanup.policy", AlterConfigOp.APPEND, "compact")])
    assert r.error_code == 0
    config = node.call(lambda: node.broker.replica_manager.get_partition("inc", 0).log.config)
    assert (config.max_message_bytes, config.cleanup_policy, config.retention_ms) == (
        2048, ("delete", "compact"), 1000)
    big = client.produce("inc", 0, batch(1, value=b"x" * 4096))
    assert big.responses[0].partition_responses[0].error_code == ErrorCode.MESSAGE_TOO_LARGE
    r = _incremental(client, TOPIC, "inc", [("max.message.bytes", AlterConfigOp.DELETE, None),
                                            ("retention.ms", AlterConfigOp.DELETE, None)],
                     version=0)
    assert r.error_code == 0
    assert paths.EntityConfig.decode(_znode(node, "/config/topics/inc")).config == {
        "cleanup.policy": "delete,compact"}
    ok = client.produce("inc", 0, batch(1, key=b"k", value=b"x" * 4096))
    assert ok.responses[0].partition_responses[0].error_code == 0
    dry = _incremental(client, TOPIC, "inc", [("cleanup.policy", AlterConfigOp.SUBTRACT,
                                               "compact")], validate_only=True)
    assert dry.error_code == 0
    assert paths.EntityConfig.decode(_znode(node, "/config/topics/inc")).config == {
        "cleanup.policy": "delete,compact"}
    dup = _incremental(client, TOPIC, "inc", [("segment.ms", 0, "1"), ("segment.ms", 0, "2")])
    assert dup.error_message == "Error due to duplicate config keys : segment.ms"


def test_alter_broker_configs(node: InProcessBroker, client: WireClient) -> None:
    assert _create(client, "follows-broker", partitions=1).error_code == 0

    def retention() -> int:
        return node.call(lambda: node.broker.replica_manager
                         .get_partition("follows-broker", 0).log.config.retention_ms)

    r = _incremental(client, BROKER, "0", [("log.retention.ms", AlterConfigOp.SET, "123456")])
    assert r.error_code == 0
    assert retention() == 123456
    assert paths.EntityConfig.decode(_znode(node, "/config/brokers/0")).config == {
        "log.retention.ms": "123456"}
    entry = {c.name: c for c in _broker_resource(client, "0", ["log.retention.ms"]).configs}
    assert entry["log.retention.ms"].config_source == ConfigSource.DYNAMIC_BROKER_CONFIG
    # the cluster default sits below the per-broker value
    r = _alter(client, BROKER, "", {"log.retention.ms": "654321", "log.segment.bytes": "2000000"})
    assert r.error_code == 0
    assert retention() == 123456
    default = {c.name: c for c in _broker_resource(client, "").configs}
    assert default["log.segment.bytes"].value == "2000000"
    assert default["log.segment.bytes"].config_source == \
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert _incremental(client, BROKER, "0", [("log.retention.ms", AlterConfigOp.DELETE,
                                               None)]).error_code == 0
    assert retention() == 654321
    segment_bytes = node.call(lambda: node.broker.replica_manager
                              .get_partition("follows-broker", 0).log.config.segment_bytes)
    assert segment_bytes == 2000000
    refused = _alter(client, BROKER, "0", {"broker.id": "3"})
    assert refused.error_code == ErrorCode.INVALID_REQUEST
    assert "Cannot update these configs dynamically: broker.id" in refused.error_message
    assert _alter(client, BROKER, "7", {}).error_message == \
        "Unexpected broker id, expected 0, but received 7"
    assert _alter(client, 3, "x", {}).error_code == ErrorCode.INVALID_REQUEST
    # back to the static settings for the other tests
    assert _alter(client, BROKER, "", {}).error_code == 0
    assert retention() == 7 * 24 * 3600 * 1000


def test_dynamic_cleaner_configs_reach_the_running_cleaner(node: InProcessBroker,
                                                           client: WireClient) -> None:
    def cleaner() -> tuple[int, int, float]:
        c = node.broker.log_cleaner
        return node.call(lambda: (c.config.threads, len(c.threads), c.throttler.desired_rate))

    assert cleaner()[:2] == (1, 1)
    r = _incremental(client, BROKER, "", [
        ("log.cleaner.threads", AlterConfigOp.SET, "2"),
        ("log.cleaner.io.max.bytes.per.second", AlterConfigOp.SET, "1000000")])
    assert r.error_code == 0
    assert cleaner() == (2, 2, 1_000_000.0)
    # Kafka's bounds on a running cleaner: at most double, at least half, at least one.
    refused = _incremental(client, BROKER, "0", [("log.cleaner.threads", AlterConfigOp.SET,
                                                  "5")])
    assert refused.error_code == ErrorCode.INVALID_REQUEST
    assert "cannot be increased to more than double the current value 2" in \
        refused.error_message
    assert cleaner()[:2] == (2, 2)
    assert _alter(client, BROKER, "", {}).error_code == 0  # back to the static settings
    assert cleaner()[:2] == (1, 1)


def test_describe_cluster(node: InProcessBroker, client: WireClient) -> None:
    for version in (0, 1):
        r = client.call(DESCRIBE_CLUSTER, version, {
            "include_cluster_authorized_operations": True, "endpoint_type": 1})
        assert r.error_code == 0
        assert r.cluster_id == node.call(lambda: node.broker.metadata_cache.cluster_id)
        assert r.controller_id == 0
        assert [(b.broker_id, b.host, b.port) for b in r.brokers] == [
            (0, "127.0.0.1", node.port)]
        assert r.cluster_authorized_operations == 8096
    plain = client.call(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                              "endpoint_type": 1})
    assert plain.cluster_authorized_operations == -2**31
    controller = client.call(DESCRIBE_CLUSTER, 1, {
        "include_cluster_authorized_operations": False, "endpoint_type": 2})
    assert (int(controller.error_code), controller.brokers) == (114, ())
    unknown = client.call(DESCRIBE_CLUSTER, 1, {
        "include_cluster_authorized_operations": False, "endpoint_type": 9})
    assert int(unknown.error_code) == 115
    assert unknown.error_message == "Unsupported endpoint type 9"


def test_describe_log_dirs(node: InProcessBroker, client: WireClient) -> None:
    assert _create(client, "sized", partitions=2).error_code == 0
    client.produce("sized", 1, batch(10, value=b"y" * 100))
    log_dir = str(node.broker.config.log_dirs[0].absolute())
    for version in (1, 4):
        r = client.call(DESCRIBE_LOG_DIRS, version, {
            "topics": [{"topic": "sized", "partitions": [0, 1, 5]}]})
        if version >= 3:
            assert r.error_code == 0
        (result,) = r.results
        assert (result.error_code, result.log_dir) == (0, log_dir)
        (topic,) = result.topics
        parts = {p.partition_index: p for p in topic.partitions}
        assert sorted(parts) == [0, 1]
        assert parts[0].partition_size == 0
        assert parts[1].partition_size > 1000
        assert all(p.offset_lag == 0 and p.is_future_key is False for p in parts.values())
        if version >= 4:
            assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
    everything = client.call(DESCRIBE_LOG_DIRS, 2, {"topics": None}).results[0]
    assert "sized" in {t.name for t in everything.topics}


def test_not_the_controller_answers_not_controller(node: InProcessBroker,
                                                   client: WireClient) -> None:
    controller = node.broker.controller

    def set_active(value: bool) -> None:
        controller.active = value

    node.call(lambda: set_active(False))
    try:
        assert _create(client, "elsewhere").error_code == ErrorCode.NOT_CONTROLLER
        r = client.call(DELETE_TOPICS, 6, {"topics": [{"name": "v7", "topic_id": None}],
                                           "timeout": 1000})
        assert r.responses[0].error_code == ErrorCode.NOT_CONTROLLER
        r = client.call(CREATE_PARTITIONS, 3, {"topics": [{"name": "v7", "count": 9,
                                                           "assignments": None}],
                                               "timeout": 1000, "validate_only": False})
        assert r.results[0].error_code == ErrorCode.NOT_CONTROLLER
    finally:
        node.call(lambda: set_active(True))


def test_topic_deletion_disabled(tmp_path: Path) -> None:
    with running_broker(tmp_path, delete_topic_enable="false") as node, \
            node.connect() as client:
        assert _create(client, "stays", partitions=1).error_code == 0
        for version, code in ((1, ErrorCode.INVALID_REQUEST), (2, ErrorCode.INVALID_REQUEST),
                              (3, ErrorCode.TOPIC_DELETION_DISABLED),
                              (6, ErrorCode.TOPIC_DELETION_DISABLED)):
            values: dict[str, Any] = {"timeout": 1000}
            if version < 6:
                values["topic_names"] = ["stays"]
            else:
                values["topics"] = [{"name": "stays", "topic_id": None}]
            r = client.call(DELETE_TOPICS, version, values)
            assert r.responses[0].error_code == code
        assert _znode(node, "/admin/delete_topics/stays") is None
        assert client.metadata(["stays"], auto_create=False).topics[0].error_code == 0


def test_dynamic_configs_survive_a_restart(tmp_path: Path) -> None:
    node = InProcessBroker(tmp_path, {}).start()
    try:
        with node.connect() as client:
            assert _create(client, "kept", partitions=1).error_code == 0
            assert _incremental(client, BROKER, "", [("log.retention.ms", 0, "777000")]
                                ).error_code == 0
            assert _incremental(client, TOPIC, "kept", [("segment.ms", 0, "9000")]
                                ).error_code == 0
    finally:
        node.stop()
    node = InProcessBroker(tmp_path, {}).start()
    try:
        assert node.broker.config.log_retention_ms == 777000
        config = node.call(lambda: node.broker.replica_manager.get_partition("kept", 0)
                           .log.config)
        assert (config.retention_ms, config.segment_ms) == (777000, 9000)
    finally:
        node.stop()


def test_cluster_mode_broker_applies_notifications_of_other_writers(tmp_path: Path) -> None:
    from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore
    from tests.zkserver import ZooKeeperServer, zookeeper_unavailable_reason

    reason = zookeeper_unavailable_reason()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    with ZooKeeperServer(tmp_path / "zk") as zk:
        connect = zk.connect + "/kafka"
        with running_broker(tmp_path / "b", zookeeper_connect=connect, broker_id="1") as node, \
                node.connect() as client:
            assert _create(client, "watched", partitions=1).error_code == 0
            other = ZooKeeperMetadataStore(connect)
            other.start()
            try:
                # another broker's AlterConfigs (or kafka-configs.sh) writes these
                write_entity_config(other, "topics", "watched", {"segment.ms": "4321"})
                write_entity_config(other, "brokers", "<default>",
                                    {"log.retention.ms": "86400000"})
                write_entity_config(other, "brokers", "2", {"log.retention.ms": "1"})

                def live() -> Any:
                    return node.call(lambda: node.broker.replica_manager
                                     .get_partition("watched", 0).log.config)

                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and (live().segment_ms != 4321
                                                       or live().retention_ms != 86400000):
                    time.sleep(0.05)
                assert (live().segment_ms, live().retention_ms) == (4321, 86400000)
                assert node.broker.config.dynamic_broker_configs == {}
                # this broker's own change is applied and also heard (idempotent)
                assert _incremental(client, TOPIC, "watched",
                                    [("segment.ms", 0, "5555")]).error_code == 0
                assert live().segment_ms == 5555
                seq = node.call(lambda: node.broker.admin.config_changes.last_executed_change)
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline and node.call(
                        lambda: node.broker.admin.config_changes.last_executed_change) < 3:
                    time.sleep(0.05)
                assert node.call(
                    lambda: node.broker.admin.config_changes.last_executed_change) == 3
                assert seq <= 3
            finally:
                other.close()


# -- many partitions at once, and logs that cannot be created ---------------------------------


def test_a_large_create_makes_its_files_off_the_event_loop_while_others_are_served(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from klog.storage import leader_epoch

    partitions = 1200
    with running_broker(tmp_path) as node:
        loop_thread = node._thread
        made_on: Counter[str] = Counter()
        manager = node.broker.log_manager
        assert manager is not None
        create_log = manager.get_or_create_log
        write_checkpoint = leader_epoch.write_leader_epoch_checkpoint

        def where() -> str:
            return "loop" if threading.current_thread() is loop_thread else "worker"

        def recording_create(topic: str, partition: int, config: Any = None) -> Any:
            if topic == "wide" and manager.get_log(topic, partition) is None:
                made_on["log on " + where()] += 1
            return create_log(topic, partition, config)

        def recording_checkpoint(path: Any, entries: Any) -> None:
            if "wide-" in str(path):
                made_on["epoch checkpoint on " + where()] += 1
            write_checkpoint(path, entries)

        monkeypatch.setattr(manager, "get_or_create_log", recording_create)
        monkeypatch.setattr(leader_epoch, "write_leader_epoch_checkpoint", recording_checkpoint)
        answer: list[Any] = []
        with node.connect(timeout=60) as creator, node.connect() as other:
            creating = threading.Thread(target=lambda: answer.append(
                _create(creator, "wide", version=4, partitions=partitions, timeout=50_000)))
            creating.start()
            served_meanwhile = 0
            while creating.is_alive():
                assert other.call(API_VERSIONS, 3, {
                    "client_software_name": "t", "client_software_version": "1"}).error_code == 0
                served_meanwhile += creating.is_alive()
            creating.join()
            assert answer[0].error_code == 0, answer[0]
            meta = other.metadata(["wide"], auto_create=False).topics[0]
            assert len(meta.partitions) == partitions
            assert all(p.leader_id == 0 for p in meta.partitions)
        # Every log and its first leader epoch checkpoint (two fsyncs) were made by workers.
        assert made_on == {"log on worker": partitions,
                           "epoch checkpoint on worker": partitions}, made_on
        assert served_meanwhile > 0
        # The partitions work: the leader epoch is the one written ahead.
        with node.connect() as client:
            produced = client.produce("wide", partitions - 1, batch(1))
            assert produced.responses[0].partition_responses[0].error_code == 0


def test_create_answers_a_storage_error_when_the_log_cannot_be_created(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A full disk, injected at the storage layer: creating a log of topic "full" fails as
    # mkdir/open fail on a full file system (ENOSPC). No tiny file system is mounted: that
    # needs root and a loop device.
    import errno

    from klog.storage import log_manager

    real = log_manager.PartitionLog
    full = {"full-0", "full-1", "full-2"}

    def partition_log(directory: Path, *args: Any, **kwargs: Any) -> Any:
        if Path(directory).name in full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(directory))
        return real(directory, *args, **kwargs)

    monkeypatch.setattr(log_manager, "PartitionLog", partition_log)
    with running_broker(tmp_path) as node, node.connect() as client:
        result = _create(client, "full", version=4, partitions=3)
        assert result.error_code == ErrorCode.KAFKA_STORAGE_ERROR, result
        assert "No space left on device" in result.error_message
        assert "full-0" in result.error_message
        # Other topics are unaffected; adding partitions to a topic meets the same answer.
        assert _create(client, "fine", version=4, partitions=1).error_code == 0
        full.add("fine-1")
        grown = client.call(CREATE_PARTITIONS, 1, {
            "topics": [{"name": "fine", "count": 2, "assignments": None}],
            "timeout": 10_000, "validate_only": False}).results[0]
        assert grown.error_code == ErrorCode.KAFKA_STORAGE_ERROR, grown
        assert "fine-1" in grown.error_message


def test_concurrent_auto_creations_of_one_topic_both_wait_for_its_leaders(
        tmp_path: Path) -> None:
    # A new librdkafka client sends more than one Metadata request for a topic at start;
    # the one that finds the topic already being created waits for that creation as for
    # its own, instead of answering LEADER_NOT_AVAILABLE at once (its creation runs in
    # worker threads, long enough for the other request to arrive meanwhile).
    import threading

    # Enough partitions that the creation spans the second request's arrival, few enough
    # that it completes within the auto-creation wait (2 s) on a loaded 2-core machine
    # (200 did not, at times, with other brokers' tests running beside it).
    partitions = 60
    with running_broker(tmp_path, num_partitions=str(partitions)) as node:
        for attempt in range(3):
            name = f"raced-{attempt}"
            barrier = threading.Barrier(2)
            answers: list[Any] = []

            def ask(name: str = name, barrier: threading.Barrier = barrier,
                    answers: list[Any] = answers) -> None:
                with node.connect() as c:
                    barrier.wait()
                    answers.append(c.metadata([name]).topics[0])

            threads = [threading.Thread(target=ask) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert [(a.error_code, len(a.partitions)) for a in answers] == \
                [(0, partitions)] * 2, attempt


def test_creations_refuse_a_mix_of_racked_and_unracked_brokers(tmp_path: Path) -> None:
    # Kafka's assignReplicasToBrokers: with racks, every broker needs one. CreateTopics and
    # auto-creation are refused (UNKNOWN_SERVER_ERROR, Kafka's AdminOperationException),
    # unless the request gives the replica assignment.
    from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo

    with running_broker(tmp_path, broker_rack="rack-a") as node:
        cache = node.broker.metadata_cache
        assert node.call(lambda: cache.alive_broker_racks()) == {0: "rack-a"}
        unracked = BrokerInfo(7, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 1),), None)

        def add() -> None:
            cache.brokers[7] = unracked

        node.call(add)
        with node.connect() as client:
            refused = _create(client, "mixed", partitions=1, rf=1)
            assert (refused.error_code, refused.error_message) == (
                ErrorCode.UNKNOWN_SERVER_ERROR,
                "Not all brokers have rack information for replica rack aware assignment.")
            given = _create(client, "given", assignments=[(0, [0])])
            assert given.error_code == 0
            node.call(add)  # the creation's UpdateMetadata named the live brokers again
            assert client.metadata(["auto-mixed"]).topics[0].error_code == \
                ErrorCode.UNKNOWN_SERVER_ERROR
            node.call(lambda: cache.brokers.pop(7))
            assert _create(client, "racked", partitions=2, rf=1).error_code == 0
