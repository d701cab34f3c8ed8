"""The ACL authorizer end to end on PLAINTEXT, where every client is User:ANONYMOUS:
confluent-kafka's AdminClient creates, describes and deletes ACLs; producers and
consumers are refused where no ACL lets them in (allow.everyone.if.no.acl.found=false);
`klog acls` adds, lists and removes; a client forging a follower's replica id reads
nothing; a broker asked for an authorizer klog lacks refuses to start.

The broker starts with one ACL seeded in its metastore, as an operator would seed a
cluster's first ACLs (Kafka: kafka-acls.sh --authorizer-properties): Alter, Describe and
Create on the cluster for User:ANONYMOUS -- enough to manage ACLs and create topics, and
no ClusterAction."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from typer.testing import CliRunner

from klog.cli.app import app
from klog.daemon.broker import METASTORE_DIR
from klog.daemon.metastore.local import LocalMetadataStore
from klog.daemon.security import acl_store
from klog.protocol.acls import AccessControlEntry, PatternType, ResourcePattern
from klog.protocol.acls import AclOperation as Op
from klog.protocol.acls import AclPermissionType as Permission
from klog.protocol.acls import ResourceType as Kind
from klog.protocol.errors import ErrorCode
from klog.testing import KlogBroker
from tests.daemon.wire import WireClient, batch, fetch_values
from tests.interop.conftest import wait_until_serving

pytestmark = pytest.mark.timeout(120)
ANONYMOUS = "User:ANONYMOUS"


def seed_cluster_acls(log_dir: Path) -> None:
    store = LocalMetadataStore(log_dir / METASTORE_DIR)
    store.start()
    try:
        cluster = ResourcePattern(Kind.CLUSTER, "kafka-cluster", PatternType.LITERAL)
        acl_store.update_resource(store, cluster, lambda _current: frozenset(
            AccessControlEntry(ANONYMOUS, "*", op, Permission.ALLOW)
            for op in (Op.ALTER, Op.DESCRIBE, Op.CREATE)))
    finally:
        store.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    data = tmp_path_factory.mktemp("klog") / "data"
    running = KlogBroker(data, overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "allow.everyone.if.no.acl.found": "false"})
    running.log_dir.mkdir(parents=True)
    seed_cluster_acls(running.log_dir)
    running.start()
    try:
        wait_until_serving(running)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _binding(kind: ResourceType, name: str, op: AclOperation,
             pattern: ResourcePatternType = ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(kind, name, pattern, ANONYMOUS, "*", op, AclPermissionType.ALLOW)


def _create(admin: AdminClient, *bindings: AclBinding) -> None:
    for future in admin.create_acls(list(bindings)).values():
        future.result(timeout=30)


def test_admin_client_creates_describes_and_deletes_acls(admin: AdminClient) -> None:
    _create(admin, _binding(ResourceType.TOPIC, "acl-a", AclOperation.READ),
            _binding(ResourceType.GROUP, "app-", AclOperation.READ,
                     ResourcePatternType.PREFIXED))
    topics = AclBindingFilter(ResourceType.TOPIC, "acl-a", ResourcePatternType.ANY, None,
                              None, AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(topics).result(timeout=30)
    assert [(b.name, b.principal, b.operation) for b in found] == [
        ("acl-a", ANONYMOUS, AclOperation.READ)]
    groups = AclBindingFilter(ResourceType.GROUP, "app-1", ResourcePatternType.MATCH, None,
                              None, AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(groups).result(timeout=30)
    assert [(b.name, b.resource_pattern_type) for b in found] == [
        ("app-", ResourcePatternType.PREFIXED)]
    # (popitem would take the future from the map confluent-kafka completes it through)
    (deleted_future,) = admin.delete_acls([topics]).values()
    deleted = deleted_future.result(timeout=30)
    assert [b.name for b in deleted] == ["acl-a"]
    assert admin.describe_acls(topics).result(timeout=30) == []


def _produce(bootstrap: str, topic: str) -> KafkaError | None:
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000,
                         "enable.idempotence": True})
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1
    return errors[0]  # type: ignore[no-any-return]


def _consume(bootstrap: str, topic: str, group: str) -> tuple[list[bytes], list[int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []
    errors: list[int] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline and not values and not errors:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                errors.append(msg.error().code())
            else:
                values.append(msg.value())
    finally:
        consumer.close()
    return values, errors


def test_produce_and_consume_need_acls(admin: AdminClient, bootstrap: str) -> None:
    _create(admin, *(_binding(ResourceType.TOPIC, "open", op)
                     for op in (AclOperation.WRITE, AclOperation.READ)),
            _binding(ResourceType.GROUP, "readers", AclOperation.READ))
    assert _produce(bootstrap, "open") is None
    denied = _produce(bootstrap, "closed")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    values, errors = _consume(bootstrap, "open", "readers")
    assert values == [b"v"] and errors == []
    values, errors = _consume(bootstrap, "closed", "readers")
    assert values == [] and KafkaError.TOPIC_AUTHORIZATION_FAILED in errors
    # Read on the topic, none on the group: the group is refused.
    values, errors = _consume(bootstrap, "open", "strangers")
    assert values == [] and KafkaError.GROUP_AUTHORIZATION_FAILED in errors


def test_metadata_hides_topics_without_describe(admin: AdminClient) -> None:
    _create(admin, _binding(ResourceType.TOPIC, "shown", AclOperation.WRITE))
    futures = admin.create_topics([NewTopic(t, 1, 1) for t in ("shown", "unseen")])
    for future in futures.values():
        future.result(timeout=30)  # Create on the cluster: both exist now
    listed = admin.list_topics(timeout=10).topics
    assert "shown" in listed  # Write implies Describe
    assert "unseen" not in listed
    named = admin.list_topics("unseen", timeout=10).topics["unseen"]
    assert named.error is not None
    assert named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_forged_follower_fetch_is_refused(admin: AdminClient, broker: KlogBroker) -> None:
    _create(admin, *(_binding(ResourceType.TOPIC, "replicated", op)
                     for op in (AclOperation.WRITE, AclOperation.READ)))
    with WireClient((broker.host, broker.port)) as client:
        client.metadata(["replicated"])  # auto-created (Create on the cluster)
        deadline = time.monotonic() + 10
        while client.produce("replicated", 0, batch(2)).responses[0] \
                .partition_responses[0].error_code and time.monotonic() < deadline:
            time.sleep(0.1)
        as_consumer = client.fetch("replicated", 0, 0)
        assert as_consumer.responses[0].partitions[0].error_code == 0
        forged = client.call(1, 12, {**fetch_values("replicated", 0, 0), "replica_id": 1})
        part = forged.responses[0].partitions[0]
        # Kafka's answer to a follower fetch without ClusterAction (KafkaApis).
        assert part.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert not part.records


def test_klog_acls_add_list_remove(broker: KlogBroker) -> None:
    runner = CliRunner()
    env = {"KLOG_BOOTSTRAP_SERVER": broker.bootstrap_servers, "COLUMNS": "200"}

    def klog(*args: str) -> Any:
        return runner.invoke(app, ["acls", *args], env=env)

    added = klog("add", "--allow-principal", "User:alice", "--producer", "--topic", "orders",
                 "--resource-pattern-type", "prefixed", "--json")
    assert added.exit_code == 0, added.output
    assert {r["operation"] for r in json.loads(added.stdout)} == {"Write", "Describe", "Create"}
    listed = klog("list", "--principal", "User:alice", "--json")
    assert listed.exit_code == 0
    rows = json.loads(listed.stdout)
    assert {(r["name"], r["pattern_type"], r["operation"]) for r in rows} == {
        ("orders", "PREFIXED", op) for op in ("Write", "Describe", "Create")}
    table = klog("list", "--topic", "orders-eu", "--resource-pattern-type", "match")
    assert "User:alice" in table.stdout and "PREFIXED" in table.stdout
    bad = klog("add", "--allow-principal", "alice", "--topic", "x")
    assert bad.exit_code == 2 and "Type:name" in bad.stderr and "Traceback" not in bad.output
    removed = klog("remove", "--topic", "orders", "--resource-pattern-type", "prefixed",
                   "--force", "--json")
    assert removed.exit_code == 0 and len(json.loads(removed.stdout)) == 3
    assert json.loads(klog("list", "--principal", "User:alice", "--json").stdout) == []


def test_an_unknown_authorizer_refuses_start_up(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "klog", "broker", "start", "--override",
         f"log.dirs={tmp_path}", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", "authorizer.class.name=com.example.MyAuthorizer"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "com.example.MyAuthorizer" in lines[0], result.stderr


def test_klog_acls_against_a_broker_without_an_authorizer(tmp_path: Path) -> None:
    with KlogBroker(tmp_path / "plain") as plain:
        result = CliRunner().invoke(app, ["acls", "list"],
                                    env={"KLOG_BOOTSTRAP_SERVER": plain.bootstrap_servers})
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "SECURITY_DISABLED" in lines[0], \
        result.stderr


def test_kafka_python_admin_client(bootstrap: str) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        acl = ACL("User:bob", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                  ResourcePattern(KpResourceType.TOPIC, "kp-topic",
                                  ACLResourcePatternType.LITERAL))
        created = admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        flt = ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(KpResourceType.TOPIC, None,
                                              ACLResourcePatternType.ANY))
        found, _error = admin.describe_acls(flt)
        assert [(a.principal, a.resource_pattern.resource_name) for a in found] == [
            ("User:bob", "kp-topic")]
        (result,) = admin.delete_acls([flt])
        deleted = [entry[0] if isinstance(entry, tuple) else entry for entry in result[1]]
        assert [a.resource_pattern.resource_name for a in deleted] == ["kp-topic"]
        assert admin.describe_acls(flt)[0] == []
    finally:
        admin.close()
