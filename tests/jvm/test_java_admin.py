"""Kafka's Java AdminClient against klog: topics and partitions, configs (incremental),
describeCluster, listOffsets and deleteRecords, consumer group administration and quotas
on one broker; SCRAM users and ACLs on a broker with SASL and the ACL authorizer;
electLeaders and alterPartitionReassignments on a 3-broker cluster with real ZooKeeper."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from klog.testing import KlogBroker, free_port
from tests.cluster.conftest import Cluster
from tests.jvm.driver import Jvm

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}


def test_topics(jvm: Jvm, bootstrap: str, topic: str) -> None:
    got = jvm.call("admin_topics", bootstrap=bootstrap, prefix=topic)
    a, b, c = f"{topic}-a", f"{topic}-b", f"{topic}-c"
    assert got["duplicate_create"] == "TopicExistsException"
    assert {a, b} <= set(got["listed"]) and c not in got["listed"]  # c: validateOnly
    described = got["described"]
    assert described["name"] == a and not described["internal"]
    assert described["topic_id"] != "AAAAAAAAAAAAAAAAAAAAAA"
    assert described["partitions"] == [
        {"partition": p, "leader": 0, "replicas": [0], "isr": [0]} for p in range(3)]
    assert got["b_partitions"] == 1  # the broker's num.partitions
    assert got["partitions_after_create_partitions"] == 5
    assert got["shrink"] == "InvalidPartitionsException"
    assert b not in got["listed_after_delete"] and a in got["listed_after_delete"]
    assert got["describe_deleted"] == "UnknownTopicOrPartitionException"


def test_configs(jvm: Jvm, bootstrap: str, topic: str) -> None:
    got = jvm.call("admin_configs", bootstrap=bootstrap, topic=topic)
    assert got["initial_retention"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG",
                                        "read_only": False, "sensitive": False}
    assert got["initial_cleanup_policy"]["value"] == "delete"
    assert got["initial_cleanup_policy"]["source"] == "DEFAULT_CONFIG"
    assert got["initial_count"] > 20
    assert got["set_retention"]["value"] == "7200000"
    assert got["set_cleanup_policy"] == {"value": "compact", "source": "DYNAMIC_TOPIC_CONFIG",
                                         "read_only": False, "sensitive": False}
    assert got["appended_cleanup_policy"]["value"] == "compact,delete"
    assert got["subtracted_cleanup_policy"]["value"] == "delete"
    assert got["deleted_retention"]["value"] == "604800000"
    assert got["deleted_retention"]["source"] == "DEFAULT_CONFIG"
    assert got["unknown_config"] == "InvalidConfigurationException"
    assert got["broker_before"]["value"] == "15000"
    assert got["defaults_after_set"]["value"] == "20000"
    assert got["defaults_after_set"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert got["broker_after_set"]["value"] == "20000"
    assert got["broker_after_set"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert got["broker_after_delete"]["value"] == "15000"


def test_cluster_offsets_and_delete_records(jvm: Jvm, bootstrap: str, broker: KlogBroker,
                                            topic: str) -> None:
    base = 1_700_000_000_000
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=0, timestamp=base + i * 1000)
    assert producer.flush(20) == 0
    got = jvm.call("admin_cluster_and_offsets", bootstrap=bootstrap, topic=topic,
                   timestamp=base + 2500, delete_before=4)
    assert got["controller"] == 0
    assert got["nodes"] == [{"id": 0, "host": "127.0.0.1", "port": broker.port}]
    assert len(got["cluster_id"]) == 22
    assert got["earliest"] == [0, -1] and got["latest"] == [10, -1]
    assert got["for_timestamp"] == [3, base + 3000]
    assert got["max_timestamp"] == [9, base + 9000]
    assert got["low_watermark"] == 4 and got["earliest_after_delete"] == 4
    assert got["delete_beyond_end"] == "OffsetOutOfRangeException"


def test_consumer_group_admin(jvm: Jvm, bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(20) == 0
    group = f"g-{topic}"
    got = jvm.call("admin_groups", bootstrap=bootstrap, topic=topic, group=group, expect=10)
    assert got["listed"] == [f"{group} consumer Stable Classic"]
    assert got["state"] == "Stable" and got["assignor"] == "range"
    assert got["coordinator"] == 0
    [member] = got["members"]
    assert member["group_instance_id"] == "admin-static" and member["partitions"] == [0, 1]
    assert got["committed"] == {f"{topic}-0": [5, ""], f"{topic}-1": [5, ""]}
    assert got["delete_while_active"] == "GroupNotEmptyException"
    assert got["members_after_remove"] == []
    assert got["state_after_remove"] == "Empty"
    assert got["after_alter"] == {f"{topic}-0": [1, "moved"], f"{topic}-1": [5, ""]}
    assert got["after_delete_offsets"] == {f"{topic}-0": [1, "moved"]}
    assert got["listed_after_delete"] == []
    assert got["state_after_delete"] == "Dead"


def test_topic_ids_log_dirs_producers_and_fencing(jvm: Jvm, bootstrap: str,
                                                   broker: KlogBroker, topic: str) -> None:
    got = jvm.call("admin_by_topic_id_log_dirs_producers", bootstrap=bootstrap, topic=topic)
    # describeTopics by id: Metadata v12 with topic ids.
    assert got["by_id"] == topic
    assert got["log_dirs"] == {str(broker.log_dir): {"error": "null",
                                                     "partition_0_size": 350}}
    assert got["replica_log_dir"] == str(broker.log_dir)
    [(producer_id, epoch, last_sequence)] = got["producers"]
    assert producer_id >= 0 and (epoch, last_sequence) == (0, 4)
    assert got["two_groups"] == {f"ga-{topic}": 1, f"gb-{topic}": 2}
    assert set(got["features"]) == {"finalized", "supported"}  # describeFeatures answered
    assert got["fence"] == "fenced"
    assert got["fenced_producer"] == "error: ProducerFencedException"
    assert got["delete_by_id"] == "deleted" and got["listed_after_delete"] is False


def test_client_quotas(jvm: Jvm, bootstrap: str) -> None:
    got = jvm.call("admin_quotas", bootstrap=bootstrap)
    assert got["all"]["{user=alice}"] == {"consumer_byte_rate": 2048.0,
                                          "producer_byte_rate": 1024.0}
    assert got["all"]["{client-id=c1}"] == {"request_percentage": 50.0}
    assert got["all"]["{user=null}"] == {"producer_byte_rate": 4096.0}
    assert got["all"]["{client-id=c2, user=bob}"] == {"consumer_byte_rate": 512.0}
    assert got["alice"] == {"{user=alice}": {"consumer_byte_rate": 2048.0,
                                             "producer_byte_rate": 1024.0}}
    assert got["after_remove"]["{user=alice}"] == {"consumer_byte_rate": 2048.0}
    assert got["unknown_key"] == "InvalidRequestException"


ADMIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret";')
BROKER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
               'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    port = free_port()
    running = KlogBroker(tmp_path_factory.mktemp("secured") / "data", port=port, overrides={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": BROKER_JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin", "allow.everyone.if.no.acl.found": "false",
        "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_scram_users_and_acls_on_a_secured_broker(jvm: Jvm, secured_broker: KlogBroker,
                                                  topic: str) -> None:
    admin_config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                    "sasl.jaas.config": ADMIN_JAAS}
    user_config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                   "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                       'required username="alice" password="alice-secret";'}
    got = jvm.call("admin_scram_and_acls", timeout=150,
                   bootstrap=secured_broker.bootstrap_servers, config=admin_config,
                   user_config=user_config, user="alice", password="alice-secret",
                   topic=topic, group_prefix="alice-")
    assert got["credentials"] == ["SCRAM-SHA-256:4096", "SCRAM-SHA-512:8192"]
    assert got["acls"] == sorted([
        f"(pattern=ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL), "
        f"entry=(principal=User:alice, host=*, operation={op}, permissionType=ALLOW))"
        for op in ("WRITE", "READ")] + [
        "(pattern=ResourcePattern(resourceType=GROUP, name=alice-, patternType=PREFIXED), "
        "entry=(principal=User:alice, host=*, operation=READ, permissionType=ALLOW))"])
    assert got["produce_allowed"] == "ok"
    assert got["produce_forbidden"] == "TopicAuthorizationException"
    assert got["consume_allowed"] == "ok"
    assert got["consume_forbidden_group"] == "GroupAuthorizationException"
    assert len(got["deleted"]) == 1
    assert got["produce_after_acl_deleted"] == "TopicAuthorizationException"
    assert got["described_after_delete"] == "ResourceNotFoundException"
    assert got["produce_after_user_deleted"] == "SaslAuthenticationException"


def test_elect_leaders_and_reassign_partitions(jvm: Jvm, cluster: Callable[..., Cluster],
                                               topic: str) -> None:
    c = cluster(brokers=3)
    c.create_topic(topic, partitions=2, replication_factor=2)
    described = jvm.call("admin_describe_topic", bootstrap=c.bootstrap_servers, topic=topic)
    replicas0 = described["partitions"][0]["replicas"]
    leader = replicas0[0]
    assert described["partitions"][0]["leader"] == leader
    # Move leadership off the preferred replica: stop it, wait, start it again.
    c.stop(leader)
    c.wait_for_leader(topic, 0, exclude={leader})
    c.start(leader)
    c.wait_for_isr(topic, 0, replicas0)
    bootstrap = c.bootstrap_servers
    elected = jvm.call("admin_elect_leaders", bootstrap=bootstrap, topic=topic,
                       partitions=[0, 1])
    assert elected["results"]["0"] is None
    # Partition 1's leader never moved: Kafka answers ELECTION_NOT_NEEDED.
    assert elected["results"]["1"] == "ElectionNotNeededException"
    assert elected["again"] == "ElectionNotNeededException"
    assert elected["described"]["partitions"][0]["leader"] == leader
    assert c.leader(topic, 0) == leader
    targets = []
    for p in described["partitions"]:
        missing = [b for b in c.ids if b not in p["replicas"]]
        targets.append([missing[0], p["replicas"][0]])
    moved = jvm.call("admin_reassign", bootstrap=bootstrap, topic=topic, targets=targets)
    after = moved["described"]["partitions"]
    assert [p["replicas"] for p in after] == targets
    assert [sorted(p["isr"]) for p in after] == [sorted(t) for t in targets]
    assert moved["cancel_idle"] == "NoReassignmentInProgressException"
    for p, target in enumerate(targets):
        state = c.partition_state(topic, p)
        assert state is not None and sorted(state.isr) == sorted(target)
