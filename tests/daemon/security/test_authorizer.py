"""The ACL authorizer's decisions (Kafka's AclAuthorizer rules), with ACLs set directly,
and its create/delete/describe over a local metastore."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.metastore.local import LocalMetadataStore
from klog.daemon.security import acl_store
from klog.daemon.security.authorizer import AclAuthorizer, parse_super_users
from klog.daemon.security.principal import ANONYMOUS, KafkaPrincipal
from klog.protocol.acls import (
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    operations_bitfield,
)
from klog.protocol.errors import ErrorCode

ALICE = KafkaPrincipal("User", "alice")
BOB = KafkaPrincipal("User", "bob")
HOST = "10.0.0.1"
OP = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def acl(kind: ResourceType, name: str, principal: str, op: AclOperation,
        permission: AclPermissionType = ALLOW, host: str = "*",
        pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(kind, name, pattern),
                      AccessControlEntry(principal, host, op, permission))


def authorizer(*bindings: AclBinding, **kw: object) -> AclAuthorizer:
    a = AclAuthorizer(None, **kw)  # type: ignore[arg-type]
    results = asyncio.run(a.create_acls(list(bindings)))
    assert all(code == 0 for code, _ in results), results
    return a


def test_no_acls_denies_unless_allow_everyone() -> None:
    assert not authorizer().authorize(ALICE, HOST, OP.READ, TOPIC, "t")
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize(
        ALICE, HOST, OP.READ, TOPIC, "t")


def test_allow_everyone_applies_only_to_resources_without_any_acl() -> None:
    a = authorizer(acl(TOPIC, "t", "User:bob", OP.READ), allow_everyone_if_no_acl_found=True)
    assert not a.authorize(ALICE, HOST, OP.READ, TOPIC, "t")  # an ACL exists: bob's only
    assert a.authorize(ALICE, HOST, OP.READ, TOPIC, "other")


def test_literal_allow_matches_principal_operation_and_host() -> None:
    a = authorizer(acl(TOPIC, "t", "User:alice", OP.READ, host=HOST))
    assert a.authorize(ALICE, HOST, OP.READ, TOPIC, "t")
    assert not a.authorize(ALICE, "10.0.0.2", OP.READ, TOPIC, "t")
    assert not a.authorize(BOB, HOST, OP.READ, TOPIC, "t")
    assert not a.authorize(ALICE, HOST, OP.WRITE, TOPIC, "t")
    assert not a.authorize(ALICE, HOST, OP.READ, TOPIC, "t2")
    assert not a.authorize(ALICE, HOST, OP.READ, GROUP, "t")


def test_wildcard_principal_host_and_resource() -> None:
    a = authorizer(acl(TOPIC, "*", "User:*", OP.WRITE))
    assert a.authorize(ALICE, HOST, OP.WRITE, TOPIC, "anything")
    assert a.authorize(ANONYMOUS, "::1", OP.WRITE, TOPIC, "x")
    assert not a.authorize(ALICE, HOST, OP.WRITE, GROUP, "x")


def test_prefixed_patterns() -> None:
    a = authorizer(acl(TOPIC, "pay", "User:alice", OP.READ, pattern=PatternType.PREFIXED))
    assert a.authorize(ALICE, HOST, OP.READ, TOPIC, "pay")
    assert a.authorize(ALICE, HOST, OP.READ, TOPIC, "payments")
    assert not a.authorize(ALICE, HOST, OP.READ, TOPIC, "pa")
    assert not a.authorize(ALICE, HOST, OP.READ, TOPIC, "xpayments")


@pytest.mark.parametrize("granted", [OP.READ, OP.WRITE, OP.DELETE, OP.ALTER, OP.DESCRIBE])
def test_describe_is_implied(granted: AclOperation) -> None:
    a = authorizer(acl(TOPIC, "t", "User:alice", granted))
    assert a.authorize(ALICE, HOST, OP.DESCRIBE, TOPIC, "t")


def test_describe_configs_implied_by_alter_configs_only() -> None:
    a = authorizer(acl(TOPIC, "t", "User:alice", OP.ALTER_CONFIGS))
    assert a.authorize(ALICE, HOST, OP.DESCRIBE_CONFIGS, TOPIC, "t")
    assert not a.authorize(ALICE, HOST, OP.DESCRIBE, TOPIC, "t")
    b = authorizer(acl(TOPIC, "t", "User:alice", OP.READ))
    assert not b.authorize(ALICE, HOST, OP.WRITE, TOPIC, "t")  # Read implies no Write
    assert not b.authorize(ALICE, HOST, OP.DESCRIBE_CONFIGS, TOPIC, "t")


def test_all_allows_every_operation() -> None:
    a = authorizer(acl(CLUSTER, "kafka-cluster", "User:alice", OP.ALL))
    for op in SUPPORTED_OPERATIONS[CLUSTER]:
        assert a.authorize(ALICE, HOST, op, CLUSTER, "kafka-cluster")


def test_deny_wins_over_allow() -> None:
    a = authorizer(acl(TOPIC, "*", "User:*", OP.ALL),
                   acl(TOPIC, "secret", "User:alice", OP.READ, DENY))
    assert not a.authorize(ALICE, HOST, OP.READ, TOPIC, "secret")
    assert a.authorize(ALICE, HOST, OP.WRITE, TOPIC, "secret")  # deny names Read only
    # A deny implies nothing: Describe stays allowed (by the All).
    assert a.authorize(ALICE, HOST, OP.DESCRIBE, TOPIC, "secret")
    assert a.authorize(BOB, HOST, OP.READ, TOPIC, "secret")


def test_deny_all_on_a_prefix_and_wildcard_host() -> None:
    a = authorizer(acl(TOPIC, "t", "User:alice", OP.READ),
                   acl(TOPIC, "t", "User:alice", OP.ALL, DENY, host=HOST,
                       pattern=PatternType.PREFIXED))
    assert not a.authorize(ALICE, HOST, OP.READ, TOPIC, "t")
    assert a.authorize(ALICE, "10.9.9.9", OP.READ, TOPIC, "t")


def test_super_users_bypass_everything() -> None:
    a = authorizer(acl(TOPIC, "t", "User:alice", OP.ALL, DENY),
                   super_users=parse_super_users("User:alice; User:admin"))
    assert a.authorize(ALICE, HOST, OP.READ, TOPIC, "t")
    assert a.authorize(ALICE, HOST, OP.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert not a.authorize(BOB, HOST, OP.READ, TOPIC, "t")


def test_parse_super_users_refuses_a_bare_name() -> None:
    with pytest.raises(ValueError):
        parse_super_users("alice")


def test_cache_is_invalidated_on_change() -> None:
    a = authorizer()
    assert not a.authorize(ALICE, HOST, OP.READ, TOPIC, "t")
    asyncio.run(a.create_acls([acl(TOPIC, "t", "User:alice", OP.READ)]))
    assert a.authorize(ALICE, HOST, OP.READ, TOPIC, "t")
    asyncio.run(a.delete_acls([AclBindingFilter(resource_type=TOPIC)]))
    assert not a.authorize(ALICE, HOST, OP.READ, TOPIC, "t")


def test_authorized_operations() -> None:
    a = authorizer(acl(TOPIC, "t", "User:alice", OP.READ),
                   acl(TOPIC, "t", "User:alice", OP.ALTER_CONFIGS))
    expected = operations_bitfield([OP.READ, OP.DESCRIBE, OP.ALTER_CONFIGS,
                                    OP.DESCRIBE_CONFIGS])
    assert a.authorized_operations(ALICE, HOST, TOPIC, "t") == expected
    assert a.authorized_operations(BOB, HOST, TOPIC, "t") == 0


def test_authorize_by_resource_type() -> None:
    assert not authorizer().authorize_by_resource_type(ALICE, HOST, OP.WRITE, TOPIC)
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize_by_resource_type(
        ALICE, HOST, OP.WRITE, TOPIC)
    a = authorizer(acl(TOPIC, "t", "User:alice", OP.WRITE))
    assert a.authorize_by_resource_type(ALICE, HOST, OP.WRITE, TOPIC)
    assert not a.authorize_by_resource_type(BOB, HOST, OP.WRITE, TOPIC)
    # a deny on a prefix dominating every allowed name: no topic is writable
    b = authorizer(acl(TOPIC, "tx", "User:alice", OP.WRITE),
                   acl(TOPIC, "t", "User:alice", OP.WRITE, DENY, pattern=PatternType.PREFIXED))
    assert not b.authorize_by_resource_type(ALICE, HOST, OP.WRITE, TOPIC)
    c = authorizer(acl(TOPIC, "t", "User:alice", OP.WRITE),
                   acl(TOPIC, "*", "User:alice", OP.WRITE, DENY))
    assert not c.authorize_by_resource_type(ALICE, HOST, OP.WRITE, TOPIC)


def test_invalid_bindings_are_refused_one_by_one() -> None:
    a = AclAuthorizer(None)
    results = asyncio.run(a.create_acls([
        acl(TOPIC, "ok", "User:alice", OP.READ),
        acl(CLUSTER, "not-the-cluster", "User:alice", OP.ALTER),
        acl(TOPIC, "", "User:alice", OP.READ),
        acl(TOPIC, "t", "alice", OP.READ),
        acl(TOPIC, "t", "User:alice", OP.ANY),
        acl(TOPIC, "t", "User:alice", OP.READ, pattern=PatternType.MATCH),
    ]))
    assert results[0] == (0, None)
    assert [code for code, _ in results[1:]] == [int(ErrorCode.INVALID_REQUEST)] * 5
    assert len(a.acls()) == 1


def test_describe_and_delete_filters() -> None:
    a = authorizer(acl(TOPIC, "t", "User:alice", OP.READ),
                   acl(TOPIC, "t", "User:bob", OP.WRITE),
                   acl(TOPIC, "t", "User:alice", OP.READ, pattern=PatternType.PREFIXED),
                   acl(GROUP, "g", "User:alice", OP.READ))
    assert len(a.acls()) == 4
    assert len(a.acls(AclBindingFilter(resource_type=TOPIC))) == 3
    assert len(a.acls(AclBindingFilter(principal="User:alice"))) == 3
    literal = AclBindingFilter(resource_type=TOPIC, pattern_type=PatternType.LITERAL)
    assert len(a.acls(literal)) == 2
    # MATCH: every pattern that applies to topic "tx": the prefixed "t" only
    match = AclBindingFilter(resource_type=TOPIC, name="tx", pattern_type=PatternType.MATCH)
    assert [b.pattern.pattern_type for b in a.acls(match)] == [PatternType.PREFIXED]
    results = asyncio.run(a.delete_acls([
        AclBindingFilter(principal="User:bob"), AclBindingFilter(resource_type=TOPIC)]))
    assert [len(r[2]) for r in results] == [1, 2]  # bob's under the first filter only
    assert [b.pattern.resource_type for b in a.acls()] == [GROUP]


def test_ten_thousand_unrelated_acls_keep_the_index_small() -> None:
    a = AclAuthorizer(None)
    asyncio.run(a.create_acls(
        [acl(TOPIC, f"other-{i}", "User:bob", OP.READ) for i in range(5000)]
        + [acl(TOPIC, f"pre-{i}-", "User:bob", OP.READ, pattern=PatternType.PREFIXED)
           for i in range(5000)]
        + [acl(TOPIC, "mine", "User:alice", OP.WRITE)]))
    assert a.matching_entries(TOPIC, "mine") == [
        AccessControlEntry("User:alice", "*", OP.WRITE, ALLOW)]
    assert a.authorize(ALICE, HOST, OP.WRITE, TOPIC, "mine")
    assert a.authorize(BOB, HOST, OP.READ, TOPIC, "pre-42-x")


# -- the metastore ---------------------------------------------------------------------------


def test_acls_persist_in_kafkas_layout_and_reload(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path / "ms")
    store.start()
    try:
        a = AclAuthorizer(store)
        asyncio.run(a.create_acls([
            acl(TOPIC, "t", "User:alice", OP.READ),
            acl(TOPIC, "t", "User:bob", OP.WRITE, DENY, host=HOST),
            acl(GROUP, "app", "User:alice", OP.READ, pattern=PatternType.PREFIXED)]))
        data, _ = store.get("/kafka-acl/Topic/t")
        assert acl_store.decode_entries(data) == {
            AccessControlEntry("User:alice", "*", OP.READ, ALLOW),
            AccessControlEntry("User:bob", HOST, OP.WRITE, DENY)}
        assert b'"permissionType":"Deny"' in data and b'"operation":"Write"' in data
        assert store.exists("/kafka-acl-extended/prefixed/Group/app") is not None
        literal_changes = store.get_children("/kafka-acl-changes")
        assert len(literal_changes) == 1 and literal_changes[0].startswith("acl_changes_")
        note, _ = store.get(f"/kafka-acl-changes/{literal_changes[0]}")
        assert note == b"Topic:t"
        (ext,) = store.get_children("/kafka-acl-extended-changes")
        note, _ = store.get(f"/kafka-acl-extended-changes/{ext}")
        assert acl_store.decode_change("/kafka-acl-extended-changes", note) == \
            ResourcePattern(GROUP, "app", PatternType.PREFIXED)

        b = AclAuthorizer(store)
        asyncio.run(b.startup())
        assert sorted(map(str, b.acls())) == sorted(map(str, a.acls()))
        assert b.authorize(ALICE, HOST, OP.READ, GROUP, "app-1")

        asyncio.run(b.delete_acls([AclBindingFilter(resource_type=TOPIC)]))
        assert store.exists("/kafka-acl/Topic/t") is None  # empty: znode gone
    finally:
        store.close()


def test_a_kafka_written_document_is_read(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path / "ms")
    store.start()
    try:
        store.create("/kafka-acl/Cluster/kafka-cluster",
                     b'{"version": 1, "acls": [ { "host":"host1", "permissionType": "Allow",'
                     b'"operation": "ClusterAction","principal": "User:broker"}]}',
                     make_parents=True)
        a = AclAuthorizer(store)
        asyncio.run(a.startup())
        assert a.authorize(KafkaPrincipal("User", "broker"), "host1", OP.CLUSTER_ACTION,
                           CLUSTER, "kafka-cluster")
    finally:
        store.close()


def test_a_change_on_one_broker_reaches_the_others_through_zookeeper(
        zk_server: Any) -> None:
    from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore

    connect = f"{zk_server.connect}/acls-{uuid.uuid4().hex[:12]}"
    stores = [ZooKeeperMetadataStore(connect, session_timeout_ms=4000,
                                     connection_timeout_ms=10000) for _ in range(2)]
    for s in stores:
        s.start()

    async def scenario() -> None:
        one, two = (AclAuthorizer(s, watch_changes=True) for s in stores)
        await one.startup()
        await two.startup()

        async def until(check: Any) -> bool:
            for _ in range(200):  # bounded: 10 s
                if check():
                    return True
                await asyncio.sleep(0.05)
            return False

        await one.create_acls([acl(TOPIC, "t", "User:alice", OP.READ),
                               acl(GROUP, "g", "User:alice", OP.READ,
                                   pattern=PatternType.PREFIXED)])
        assert await until(lambda: two.authorize(ALICE, HOST, OP.READ, TOPIC, "t")
                           and two.authorize(ALICE, HOST, OP.READ, GROUP, "g-1"))
        await two.delete_acls([AclBindingFilter(resource_type=TOPIC)])
        assert await until(lambda: not one.authorize(ALICE, HOST, OP.READ, TOPIC, "t"))
        assert one.authorize(ALICE, HOST, OP.READ, GROUP, "g-1")
        one.shutdown()
        two.shutdown()

    try:
        asyncio.run(scenario())
    finally:
        for s in stores:
            s.close()
