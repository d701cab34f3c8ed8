"""Kafka's znode layout (paths.py): path functions, payloads as Kafka 2.x and 3.x write them,
round trips, and clear errors on garbage."""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import InvalidPathError
from klog.daemon.metastore.local import LocalMetadataStore
from klog.daemon.metastore.paths import (
    BrokerRegistration,
    ConfigChangeNotification,
    ControllerRegistration,
    EndPoint,
    EntityConfig,
    IsrChangeNotification,
    LeaderIsrAndControllerEpoch,
    LogDirEventNotification,
    PartitionReassignment,
    PreferredReplicaElection,
    ProducerIdBlock,
    ReplicaAssignment,
    TopicAssignment,
    ZNodeDataError,
)

# --- paths ------------------------------------------------------------------------------------


def test_path_functions() -> None:
    assert paths.broker_path(3) == "/brokers/ids/3"
    assert paths.topic_path("first_topic") == "/brokers/topics/first_topic"
    assert paths.topic_partitions_path("t") == "/brokers/topics/t/partitions"
    assert paths.partition_path("t", 2) == "/brokers/topics/t/partitions/2"
    assert paths.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert paths.topic_config_path("t") == "/config/topics/t"
    assert paths.broker_config_path(1) == "/config/brokers/1"
    assert paths.broker_config_path(None) == "/config/brokers/<default>"
    assert paths.config_path("users", "alice") == "/config/users/alice"
    assert paths.config_change_path() == "/config/changes/config_change_"
    assert paths.delete_topic_path("t") == "/admin/delete_topics/t"
    assert paths.isr_change_path() == "/isr_change_notification/isr_change_"
    assert paths.log_dir_event_path() == "/log_dir_event_notification/log_dir_event_"
    assert paths.CLUSTER_ID == "/cluster/id"
    assert paths.CONTROLLER == "/controller"
    assert paths.CONTROLLER_EPOCH == "/controller_epoch"
    assert paths.BROKER_SEQID == "/brokers/seqid"
    assert paths.REASSIGN_PARTITIONS == "/admin/reassign_partitions"
    assert paths.PREFERRED_REPLICA_ELECTION == "/admin/preferred_replica_election"
    assert paths.LATEST_PRODUCER_ID_BLOCK == "/latest_producer_id_block"


@pytest.mark.parametrize("topic", ["", "a/b", ".", "..", "a\x00", "/t"])
def test_path_functions_refuse_bad_names(topic: str) -> None:
    with pytest.raises(InvalidPathError):
        paths.topic_path(topic)
    with pytest.raises(InvalidPathError):
        paths.delete_topic_path(topic)


def test_path_functions_refuse_non_int_ids() -> None:
    with pytest.raises(TypeError):
        paths.broker_path("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        paths.partition_state_path("t", True)


def test_sequence_number() -> None:
    assert paths.sequence_number("isr_change_0000000012", paths.ISR_CHANGE_PREFIX) == 12
    assert paths.sequence_number("/config/changes/config_change_0000000003", "config_change_") == 3
    for bad in ["isr_change_", "isr_change_x1", "other_0000000001", "isr_change_00000000001"]:
        with pytest.raises(ValueError):
            paths.sequence_number(bad, paths.ISR_CHANGE_PREFIX)


def test_persistent_paths_are_kafkas() -> None:
    assert paths.persistent_paths() == [
        "/consumers",
        "/brokers/ids",
        "/brokers/topics",
        "/config/changes",
        "/admin/delete_topics",
        "/brokers/seqid",
        "/isr_change_notification",
        "/latest_producer_id_block",
        "/log_dir_event_notification",
        "/config/topics",
        "/config/clients",
        "/config/users",
        "/config/brokers",
        "/config/ips",
    ]


def test_create_persistent_paths_and_broker_sequence(tmp_path: Path) -> None:
    with LocalMetadataStore(tmp_path / "m") as store:
        paths.create_persistent_paths(store)
        zxid = store.last_zxid  # type: ignore[attr-defined]
        paths.create_persistent_paths(store)  # idempotent: writes nothing
        assert store.last_zxid == zxid  # type: ignore[attr-defined]
        for p in paths.persistent_paths():
            assert store.exists(p) is not None
        assert store.get_children("/config") == sorted(
            ["changes", "topics", "clients", "users", "brokers", "ips"]
        )
        assert [paths.generate_broker_sequence_id(store) for _ in range(3)] == [1, 2, 3]
        store.delete(paths.BROKER_SEQID)
        assert paths.generate_broker_sequence_id(store) == 1  # recreated when missing


# --- Kafka's own payloads -----------------------------------------------------------------------


def test_broker_registration_kafka_2x_v4() -> None:
    raw = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://kafka1:9092"],"jmx_port":-1,"host":"kafka1",'
        b'"timestamp":"1587042011123","port":9092,"version":4}'
    )
    reg = BrokerRegistration.decode(0, raw)
    assert reg.broker_id == 0 and reg.version == 4
    assert reg.endpoints == (EndPoint("PLAINTEXT", "kafka1", 9092, "PLAINTEXT"),)
    assert reg.timestamp_ms == 1587042011123 and reg.jmx_port == -1
    assert reg.rack is None and reg.features == {}


def test_broker_registration_kafka_3x_v5() -> None:
    raw = (
        b'{"features":{"feature_a":{"min_version":1,"max_version":3}},'
        b'"listener_security_protocol_map":{"INTERNAL":"PLAINTEXT","EXTERNAL":"SASL_SSL"},'
        b'"endpoints":["INTERNAL://10.0.0.1:9092","EXTERNAL://[::1]:9093","INTERNAL://:9094"],'
        b'"rack":"dc1","jmx_port":9999,"port":9092,"host":"10.0.0.1","version":5,'
        b'"timestamp":"1690000000000"}'
    )
    reg = BrokerRegistration.decode(7, raw)
    assert reg.endpoints == (
        EndPoint("INTERNAL", "10.0.0.1", 9092, "PLAINTEXT"),
        EndPoint("EXTERNAL", "::1", 9093, "SASL_SSL"),
        EndPoint("INTERNAL", None, 9094, "PLAINTEXT"),
    )
    assert reg.endpoints[1].connection_string == "EXTERNAL://[::1]:9093"
    assert reg.endpoints[2].connection_string == "INTERNAL://:9094"
    assert reg.rack == "dc1" and reg.jmx_port == 9999
    assert reg.features == {"feature_a": (1, 3)}


def test_broker_registration_old_versions() -> None:
    v1 = BrokerRegistration.decode(
        1, b'{"jmx_port":-1,"timestamp":"1","host":"h","version":1,"port":9092}'
    )
    assert v1.endpoints == (EndPoint("PLAINTEXT", "h", 9092, "PLAINTEXT"),)
    v2 = BrokerRegistration.decode(
        1,
        b'{"jmx_port":-1,"timestamp":"1","endpoints":["PLAINTEXT://h:9092","SSL://h:9093"],'
        b'"host":"h","version":2,"port":9092}',
    )
    assert [e.security_protocol for e in v2.endpoints] == ["PLAINTEXT", "SSL"]
    v3 = BrokerRegistration.decode(
        1, b'{"version":3,"endpoints":["PLAINTEXT://h:1"],"rack":null,"host":"h","port":1}'
    )
    assert v3.rack is None and v3.jmx_port == -1 and v3.timestamp_ms == 0


def test_broker_registration_encodes_like_kafka_3x() -> None:
    reg = BrokerRegistration(
        broker_id=1,
        endpoints=(
            EndPoint("CLIENT", "h1", 9092, "SSL"),
            EndPoint("REPLICATION", "h1", 9093, "PLAINTEXT"),
        ),
        rack="r1",
        timestamp_ms=1700000000000,
    )
    assert json.loads(reg.encode()) == {
        "version": 5,
        "host": "h1",
        "port": 9093,  # the first PLAINTEXT listener, for old clients
        "endpoints": ["CLIENT://h1:9092", "REPLICATION://h1:9093"],
        "jmx_port": -1,
        "timestamp": "1700000000000",
        "rack": "r1",
        "listener_security_protocol_map": {"CLIENT": "SSL", "REPLICATION": "PLAINTEXT"},
        "features": {},
    }
    no_plain = BrokerRegistration(2, (EndPoint("SSL", "h", 1, "SSL"),))
    doc = json.loads(no_plain.encode())
    assert doc["host"] is None and doc["port"] == -1 and "rack" not in doc
    assert BrokerRegistration.decode(1, reg.encode()) == reg


def test_topic_assignment_versions() -> None:
    v1 = TopicAssignment.decode(b'{"version":1,"partitions":{"2":[0],"1":[0],"0":[0]}}')
    assert v1.partitions == {p: ReplicaAssignment((0,)) for p in (0, 1, 2)}
    assert v1.topic_id is None and list(v1.partitions) == [0, 1, 2]
    v2 = TopicAssignment.decode(
        b'{"version":2,"partitions":{"0":[1,2]},"adding_replicas":{},"removing_replicas":{}}'
    )
    assert v2.partitions == {0: ReplicaAssignment((1, 2))}
    v3 = TopicAssignment.decode(
        b'{"partitions":{"0":[1,2,3],"1":[2,3,4]},"topic_id":"8y2hKNm5SRi6Ee2jcqU2ig",'
        b'"adding_replicas":{"1":[3]},"removing_replicas":{"1":[4]},"version":3}'
    )
    assert v3.partitions[1] == ReplicaAssignment((2, 3, 4), (3,), (4,))
    assert v3.topic_id is not None and paths.uuid_to_str(v3.topic_id) == "8y2hKNm5SRi6Ee2jcqU2ig"
    assert json.loads(v3.encode()) == {
        "version": 3,
        "partitions": {"0": [1, 2, 3], "1": [2, 3, 4]},
        "adding_replicas": {"1": [3]},
        "removing_replicas": {"1": [4]},
        "topic_id": "8y2hKNm5SRi6Ee2jcqU2ig",
    }
    assert TopicAssignment.decode(b'{"version":3}').partitions == {}


def test_partition_state() -> None:
    s = LeaderIsrAndControllerEpoch.decode(
        b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":4,"isr":[0,2]}'
    )
    assert s == LeaderIsrAndControllerEpoch(0, leader_epoch=4, isr=(0, 2), controller_epoch=1)
    assert json.loads(s.encode()) == {
        "version": 1, "leader": 0, "leader_epoch": 4, "controller_epoch": 1, "isr": [0, 2],
    }
    recovering = LeaderIsrAndControllerEpoch(-1, 5, (), 2, leader_recovery_state=1)
    assert json.loads(recovering.encode())["leader_recovery_state"] == 1
    assert LeaderIsrAndControllerEpoch.decode(recovering.encode()) == recovering


def test_configs_and_change_notifications() -> None:
    cfg = EntityConfig.decode(
        b'{"version":1,"config":{"retention.ms":"86400000","cleanup.policy":"compact"}}'
    )
    assert cfg.config == {"retention.ms": "86400000", "cleanup.policy": "compact"}
    assert EntityConfig.decode(cfg.encode()) == cfg
    assert EntityConfig.decode(b'{"version":1,"config":{}}').config == {}
    assert EntityConfig.decode(b"").config == {}
    assert json.loads(EntityConfig({"b": "2", "a": "1"}).encode()) == {
        "version": 1, "config": {"a": "1", "b": "2"},
    }

    v2 = ConfigChangeNotification.decode(b'{"version":2,"entity_path":"topics/first_topic"}')
    assert (v2.entity_type, v2.entity_name) == ("topics", "first_topic")
    v1 = ConfigChangeNotification.decode(
        b'{"version":1,"entity_type":"topics","entity_name":"first_topic"}'
    )
    assert v1.entity_path == "topics/first_topic"
    nested = ConfigChangeNotification("users/alice/clients/app")
    assert (nested.entity_type, nested.entity_name) == ("users", "alice/clients/app")
    assert json.loads(nested.encode()) == {"version": 2, "entity_path": "users/alice/clients/app"}
    default = ConfigChangeNotification("brokers/<default>")
    assert ConfigChangeNotification.decode(default.encode()).entity_name == "<default>"


def test_controller_and_cluster() -> None:
    v1 = ControllerRegistration.decode(b'{"version":1,"brokerid":0,"timestamp":"1587042011700"}')
    assert v1 == ControllerRegistration(0, 1587042011700, -1, 1)
    v2 = ControllerRegistration.decode(
        b'{"version":2,"brokerid":1,"timestamp":"1690000000000","kraftControllerEpoch":-1}'
    )
    assert v2.broker_id == 1 and v2.version == 2
    assert json.loads(ControllerRegistration(3, 5).encode()) == {
        "version": 2, "brokerid": 3, "timestamp": "5", "kraftControllerEpoch": -1,
    }
    assert paths.decode_controller_epoch(b"12") == 12
    assert paths.encode_controller_epoch(13) == b"13"

    raw = b'{"version":"1","id":"lRaQCIBoRh2xRKLuP9CAQg"}'  # the corpus broker's cluster
    assert paths.decode_cluster_id(raw) == "lRaQCIBoRh2xRKLuP9CAQg"
    assert json.loads(paths.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    new = paths.new_cluster_id()
    assert len(new) == 22 and paths.uuid_to_str(paths.uuid_from_str(new)) == new


def test_notifications_and_admin_payloads() -> None:
    isr = IsrChangeNotification.decode(
        b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"t","partition":1}]}'
    )
    assert isr.partitions == (("t", 0), ("t", 1))
    assert IsrChangeNotification.decode(isr.encode()) == isr

    reassign = PartitionReassignment.decode(
        b'{"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2],'
        b'"log_dirs":["any","any"]}]}'
    )
    assert reassign.partitions == {("foo", 0): (1, 2)}
    assert PartitionReassignment.decode(reassign.encode()) == reassign

    election = PreferredReplicaElection.decode(
        b'{"version":1,"partitions":[{"topic":"foo","partition":1}]}'
    )
    assert election.partitions == (("foo", 1),)
    assert PreferredReplicaElection.decode(election.encode()) == election

    event = LogDirEventNotification.decode(b'{"version":1,"broker":2,"event":1}')
    assert event == LogDirEventNotification(2)
    assert json.loads(event.encode()) == {"version": 1, "broker": 2, "event": 1}

    block = ProducerIdBlock.decode(b'{"version":1,"broker":0,"block_start":"0","block_end":"999"}')
    assert block == ProducerIdBlock(0, 0, 1000)
    assert block.last_producer_id == 999
    nxt = block.next_block(3)
    assert json.loads(nxt.encode()) == {
        "version": 1, "broker": 3, "block_start": "1000", "block_end": "1999",
    }


# --- Kafka Uuids --------------------------------------------------------------------------------


def test_kafka_uuids() -> None:
    u = uuid.UUID("f32da128-d9b9-4918-ba11-eda372a5368a")
    assert paths.uuid_to_str(u) == "8y2hKNm5SRi6Ee2jcqU2ig"
    assert paths.uuid_from_str("8y2hKNm5SRi6Ee2jcqU2ig") == u
    for bad in ["", "short", "8y2hKNm5SRi6Ee2jcqU2i=", "8y2hKNm5SRi6Ee2jcqU2ig==", 7]:
        with pytest.raises(ValueError):
            paths.uuid_from_str(bad)  # type: ignore[arg-type]
    ids = {paths.new_kafka_uuid() for _ in range(200)}
    assert len(ids) == 200
    assert all(not paths.uuid_to_str(i).startswith("-") and i.int > 1 for i in ids)


# --- garbage ------------------------------------------------------------------------------------

DECODERS = {
    "broker": lambda b: BrokerRegistration.decode(1, b),
    "topic": lambda b: TopicAssignment.decode(b, "t"),
    "state": LeaderIsrAndControllerEpoch.decode,
    "config": EntityConfig.decode,
    "change": ConfigChangeNotification.decode,
    "controller": ControllerRegistration.decode,
    "isr": IsrChangeNotification.decode,
    "reassign": PartitionReassignment.decode,
    "election": PreferredReplicaElection.decode,
    "logdir": LogDirEventNotification.decode,
    "block": ProducerIdBlock.decode,
    "cluster": paths.decode_cluster_id,
    "epoch": paths.decode_controller_epoch,
}

COMMON_GARBAGE = [b"\xff\xfe\x00", b"not json", b"[1,2]", b"null", b'"12"', b"{", b"[" * 5000]

SPECIFIC_GARBAGE = [
    ("broker", b'{"version":0,"endpoints":[]}'),
    ("broker", b'{"version":4,"endpoints":"PLAINTEXT://h:1"}'),
    ("broker", b'{"version":4,"endpoints":["nonsense"]}'),
    ("broker", b'{"version":4,"endpoints":["CUSTOM://h:1"]}'),  # no map: unknown protocol
    ("broker", b'{"version":4,"endpoints":["A://h:1"],"listener_security_protocol_map":[]}'),
    ("broker", b'{"version":5,"endpoints":[],"features":{"f":{"max_version":2}}}'),
    ("broker", b'{"version":1,"port":1}'),
    ("broker", b'{"version":"five","endpoints":[]}'),
    ("broker", b'{"version":5,"endpoints":[],"rack":7}'),
    ("broker", b'{"version":5,"endpoints":[],"timestamp":"yesterday"}'),
    ("topic", b'{"version":3,"partitions":{"x":[1]}}'),
    ("topic", b'{"version":3,"partitions":{"0":[1,"2"]}}'),
    ("topic", b'{"version":3,"partitions":{"0":[true]}}'),
    ("topic", b'{"version":3,"partitions":[]}'),
    ("topic", b'{"version":3,"partitions":{},"topic_id":"not-a-uuid"}'),
    ("state", b'{"version":1,"leader":0,"leader_epoch":0,"controller_epoch":1}'),
    ("state", b'{"version":1,"leader":"0","leader_epoch":0,"isr":[],"controller_epoch":1}'),
    ("config", b'{"version":1,"config":{"a":1}}'),
    ("config", b'{"version":1,"config":["a"]}'),
    ("change", b'{"version":2,"entity_path":"no-type"}'),
    ("change", b'{"version":3,"entity_path":"topics/t"}'),
    ("change", b'{"version":1,"entity_type":"topics"}'),
    ("controller", b'{"version":1,"timestamp":"1"}'),
    ("isr", b'{"version":1,"partitions":[{"topic":"t"}]}'),
    ("isr", b'{"version":1,"partitions":["t-0"]}'),
    ("reassign", b'{"version":1,"partitions":[{"topic":"t","partition":0}]}'),
    ("reassign", b'{"version":1}'),
    ("election", b'{"version":1,"partitions":{}}'),
    ("logdir", b'{"version":1,"event":1}'),
    ("block", b'{"version":1,"broker":0,"block_start":"10","block_end":"5"}'),
    ("block", b'{"version":1,"broker":0,"block_start":"0x10","block_end":"99"}'),
    ("cluster", b'{"version":"1"}'),
    ("epoch", b"1.5"),
    ("epoch", b""),
]


@pytest.mark.parametrize("kind", sorted(DECODERS))
@pytest.mark.parametrize("raw", COMMON_GARBAGE, ids=range(len(COMMON_GARBAGE)))
def test_garbage_is_a_clear_error(kind: str, raw: bytes) -> None:
    with pytest.raises(ZNodeDataError) as info:
        DECODERS[kind](raw)
    assert str(info.value)


@pytest.mark.parametrize(("kind", "raw"), SPECIFIC_GARBAGE)
def test_wrong_fields_are_a_clear_error(kind: str, raw: bytes) -> None:
    with pytest.raises(ZNodeDataError) as info:
        DECODERS[kind](raw)
    assert str(info.value)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(sorted(DECODERS)),
    st.one_of(
        st.binary(max_size=64),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    ["version", "partitions", "endpoints", "isr", "leader", "config", "id",
                     "broker", "topic", "partition", "replicas", "entity_path", "features"]
                ),
                inner,
                max_size=5,
            ),
            max_leaves=12,
        ).map(lambda v: json.dumps(v).encode()),
    ),
)
def test_decoders_never_fail_otherwise(kind: str, raw: bytes) -> None:
    with contextlib.suppress(ZNodeDataError):
        DECODERS[kind](raw)


# --- round trips --------------------------------------------------------------------------------

_ids = st.integers(min_value=-1, max_value=2**31 - 1)
_name = st.text(
    alphabet=st.characters(whitelist_categories=("L", "N"), whitelist_characters="._-"),
    min_size=1, max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(
    st.dictionaries(
        st.integers(min_value=0, max_value=10_000),
        st.builds(
            ReplicaAssignment,
            st.lists(_ids, max_size=5).map(tuple),
            st.lists(_ids, max_size=2).map(tuple),
            st.lists(_ids, max_size=2).map(tuple),
        ),
        max_size=8,
    ),
    st.one_of(st.none(), st.uuids()),
)
def test_topic_assignment_round_trip(
    partitions: dict[int, ReplicaAssignment], topic_id: uuid.UUID | None
) -> None:
    value = TopicAssignment(partitions, topic_id)
    assert TopicAssignment.decode(value.encode()) == value


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.builds(
            EndPoint,
            _name.map(str.upper),
            st.one_of(st.none(), st.sampled_from(["localhost", "10.1.2.3", "::1", "h-1.x"])),
            st.integers(min_value=0, max_value=65535),
            st.sampled_from(paths.SECURITY_PROTOCOLS),
        ),
        max_size=4,
        unique_by=lambda e: e.listener_name,
    ),
    st.one_of(st.none(), _name),
    st.dictionaries(_name, st.tuples(st.integers(1, 5), st.integers(5, 9)), max_size=3),
    st.integers(min_value=0, max_value=2**62),
)
def test_broker_registration_round_trip(
    endpoints: list[EndPoint],
    rack: str | None,
    features: dict[str, tuple[int, int]],
    timestamp: int,
) -> None:
    value = BrokerRegistration(5, tuple(endpoints), rack, 9999, timestamp, features)
    assert BrokerRegistration.decode(5, value.encode()) == value
