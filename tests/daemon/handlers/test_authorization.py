"""Handlers with an ACL authorizer (klog/daemon/security/authorizer.py) and fakes, no
socket: each asks what Kafka's KafkaApis asks and answers its error codes; without an
authorizer nothing is checked and KIP-430's operations are every supported one."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.admin_rules import TopicResult
from klog.daemon.handlers import (
    RequestContext,
    add_partitions_to_txn,
    create_acls,
    create_topics,
    delete_acls,
    describe_acls,
    describe_cluster,
    end_txn,
    fetch,
    leader_and_isr,
    metadata,
    produce,
)
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionState
from klog.daemon.replica_results import FetchResult, ProduceResult
from klog.daemon.security.authorizer import AclAuthorizer
from klog.daemon.security.principal import ANONYMOUS, KafkaPrincipal
from klog.protocol import apis
from klog.protocol.acls import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.framing import RequestHeader
from tests.daemon.handlers.fakes import context

TOPIC_AUTH = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
CLUSTER_AUTH = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
OP = AclOperation


@dataclass
class Conn:
    principal: KafkaPrincipal = ANONYMOUS
    peer: str = "127.0.0.1:5555"
    listener_name: str = "PLAINTEXT"

    def close(self) -> None:
        pass


def _authorizer(*grants: tuple[ResourceType, str, AclOperation], **kw: Any) -> AclAuthorizer:
    a = AclAuthorizer(None, **kw)
    asyncio.run(a.create_acls([
        AclBinding(ResourcePattern(kind, name, PatternType.LITERAL),
                   AccessControlEntry("User:ANONYMOUS", "*", op, AclPermissionType.ALLOW))
        for kind, name, op in grants]))
    return a


def _ctx(api_key: int, version: int, authorizer: AclAuthorizer | None,
         principal: KafkaPrincipal = ANONYMOUS, **components: Any) -> RequestContext:
    return context(RequestHeader(api_key, version, 1, "test", 1),
                   connection=Conn(principal), authorizer=authorizer, **components)


def _request(api_key: int, version: int, values: dict[str, Any]) -> Any:
    entity = build(apis.spec_for(api_key).request_entity(version), values)
    return apis.decode_request(api_key, version, apis.encode_request(entity))


def _respond(response: Any, api_key: int, version: int) -> Any:
    if isinstance(response, list):  # chunks (produce, fetch)
        body = b"".join(bytes(c) for c in response)
        return apis.decode_response(api_key, version, body)
    return response


# -- produce and fetch --------------------------------------------------------------------


class FakeReplicaManager:
    def __init__(self) -> None:
        self.produced: list[Any] = []
        self.fetched: list[Any] = []

    async def produce(self, entries: dict[Any, Any], acks: int, timeout_ms: int) -> Any:
        self.produced.append(sorted(entries))
        return {tp: ProduceResult(0, 7) for tp in entries}

    async def fetch_messages(self, params: Any, wanted: list[Any]) -> list[FetchResult]:
        self.fetched.append([w[0] for w in wanted])
        return [FetchResult(0, 5, 5, 0) for _ in wanted]


def _produce(ctx: RequestContext) -> Any:
    request = _request(0, 9, {"transactional_id": None, "acks": 1, "timeout": 1000,
                              "topic_data": [{"name": n, "partition_data": [
                                  {"index": 0, "records": None}]} for n in ("ok", "no")]})
    return _respond(asyncio.run(produce.handle(ctx, request)), 0, 9)


def test_produce_needs_write_on_each_topic() -> None:
    rm = FakeReplicaManager()
    response = _produce(_ctx(0, 9, _authorizer((ResourceType.TOPIC, "ok", OP.WRITE)),
                             replica_manager=rm))
    codes = {t.name: t.partition_responses[0].error_code for t in response.responses}
    assert codes == {"ok": 0, "no": TOPIC_AUTH}
    assert rm.produced == [[("ok", 0)]]  # the denied topic never reached the log


def test_produce_without_an_authorizer_checks_nothing() -> None:
    rm = FakeReplicaManager()
    response = _produce(_ctx(0, 9, None, replica_manager=rm))
    assert [t.partition_responses[0].error_code for t in response.responses] == [0, 0]


# Fetch v13+ name topics by id, and v15+ carry the replica id in ReplicaState (KIP-903):
# the checks must hold whichever field carries the id.
FETCH_VERSIONS = (11, 13, 15, 17)
TOPIC_IDS = {"ok": uuid.UUID(int=1), "no": uuid.UUID(int=2)}


def _fetch_cache() -> MetadataCache:
    cache = MetadataCache(0)
    cache.set_topic_ids(TOPIC_IDS)
    return cache


def _fetch(ctx: RequestContext, replica_id: int, version: int = 11) -> Any:
    request = _request(1, version, {
        "replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
        "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
        "forgotten_topics_data": [],
        "topics": [{"topic": n, "topic_id": TOPIC_IDS[n], "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
             "log_start_offset": -1, "partition_max_bytes": 1000}]} for n in ("ok", "no")]})
    return _respond(asyncio.run(fetch.handle(ctx, request)), 1, version)


def _codes(response: Any) -> dict[str, int]:
    names = {v: k for k, v in TOPIC_IDS.items()}
    return {getattr(t, "topic", None) or names[t.topic_id]: t.partitions[0].error_code
            for t in response.responses}


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_needs_read_on_each_topic(version: int) -> None:
    rm = FakeReplicaManager()
    response = _fetch(_ctx(1, version, _authorizer((ResourceType.TOPIC, "ok", OP.READ)),
                           replica_manager=rm, config={"fetch_max_bytes": 1 << 20},
                           metadata_cache=_fetch_cache()), -1, version)
    assert _codes(response) == {"ok": 0, "no": TOPIC_AUTH}
    assert rm.fetched == [["ok"]]


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_a_forged_follower_fetch_reads_nothing(version: int) -> None:
    # A client claiming replica id 1 without ClusterAction: every partition refused (as
    # Kafka: TOPIC_AUTHORIZATION_FAILED), no read, no follower position recorded.
    rm = FakeReplicaManager()
    a = _authorizer((ResourceType.TOPIC, "ok", OP.ALL), (ResourceType.TOPIC, "no", OP.ALL))
    response = _fetch(_ctx(1, version, a, replica_manager=rm, metadata_cache=_fetch_cache(),
                           config={"fetch_max_bytes": 1 << 20}), 1, version)
    assert _codes(response) == {"ok": TOPIC_AUTH, "no": TOPIC_AUTH}
    assert rm.fetched == []
    # With ClusterAction (a broker's principal) the follower fetch goes through.
    asyncio.run(a.create_acls([AclBinding(
        ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
        AccessControlEntry("User:ANONYMOUS", "*", OP.CLUSTER_ACTION, AclPermissionType.ALLOW))]))
    response = _fetch(_ctx(1, version, a, replica_manager=rm, metadata_cache=_fetch_cache(),
                           config={"fetch_max_bytes": 1 << 20}), 1, version)
    assert _codes(response) == {"ok": 0, "no": 0}
    assert rm.fetched == [["ok", "no"]]


# -- control requests -----------------------------------------------------------------------


def test_leader_and_isr_needs_cluster_action() -> None:
    identity = SimpleNamespace(checked=[])

    async def check(controller_id: int, epoch: int, authorized: bool = True) -> int:
        identity.checked.append(authorized)
        return 0 if authorized else CLUSTER_AUTH

    identity.check = check
    request = _request(4, 6, {"controller_id": 1, "is_k_raft_controller": False,
                              "controller_epoch": 1, "broker_epoch": 1, "type": 0,
                              "topic_states": [], "live_leaders": []})
    ctx = _ctx(4, 6, _authorizer(), controller_identity=identity,
               metadata_cache=MetadataCache(0))
    response = asyncio.run(leader_and_isr.handle(ctx, request))
    assert response.error_code == CLUSTER_AUTH and identity.checked == [False]


# -- metadata and KIP-430 -----------------------------------------------------------------


def _cache() -> MetadataCache:
    cache = MetadataCache(broker_id=0, cluster_id="c")
    cache.update_brokers([BrokerInfo(0, (BrokerEndpoint("PLAINTEXT", "h", 9092),), None)],
                         controller_id=0)
    cache.update_partitions([PartitionState("seen", 0, 0, 0, (0,), (0,)),
                             PartitionState("hidden", 0, 0, 0, (0,), (0,))],
                            {"seen": uuid.UUID(int=1), "hidden": uuid.UUID(int=2)})
    return cache


def _metadata(ctx: RequestContext, topics: list[str] | None, version: int = 10) -> Any:
    request = _request(3, version, {
        "topics": None if topics is None else [{"name": n, "topic_id": None} for n in topics],
        "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
        "include_topic_authorized_operations": True})
    return asyncio.run(metadata.handle(ctx, request))


def test_metadata_hides_topics_the_caller_may_not_describe() -> None:
    a = _authorizer((ResourceType.TOPIC, "seen", OP.READ))
    config = {"auto_create_topics_enable": False}
    everything = _metadata(_ctx(3, 10, a, metadata_cache=_cache(), config=config), None)
    assert [t.name for t in everything.topics] == ["seen"]
    assert everything.topics[0].topic_authorized_operations == (1 << 3) | (1 << 8)
    assert everything.cluster_authorized_operations == 0  # no Describe on the cluster
    named = _metadata(_ctx(3, 10, a, metadata_cache=_cache(), config=config),
                      ["seen", "hidden", "absent"])
    codes = {t.name: t.error_code for t in named.topics}
    assert codes == {"seen": 0, "hidden": TOPIC_AUTH, "absent": TOPIC_AUTH}
    hidden = next(t for t in named.topics if t.name == "hidden")
    assert hidden.partitions == () and hidden.topic_id is None  # its id is not told


def test_metadata_by_topic_id_refuses_with_the_id() -> None:
    a_version = 12
    # By id (v12), a topic the caller may not describe is refused with its id, which Kafka
    # does not count as secret, and no name.
    a = _authorizer((ResourceType.TOPIC, "seen", OP.READ))
    request = _request(3, a_version, {
        "topics": [{"name": None, "topic_id": uuid.UUID(int=i)} for i in (1, 2)],
        "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": True})
    response = asyncio.run(metadata.handle(_ctx(3, a_version, a, metadata_cache=_cache(),
                                                config={}), request))
    seen, hidden = response.topics
    assert (seen.name, seen.error_code, seen.topic_authorized_operations) == (
        "seen", 0, (1 << 3) | (1 << 8))
    assert (hidden.name, hidden.error_code, hidden.topic_id, hidden.partitions) == (
        None, TOPIC_AUTH, uuid.UUID(int=2), ())


def test_without_an_authorizer_kip430_answers_every_supported_operation() -> None:
    config = {"auto_create_topics_enable": False}
    response = _metadata(_ctx(3, 10, None, metadata_cache=_cache(), config=config), None)
    assert {t.topic_authorized_operations for t in response.topics} == {
        sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))}  # 8 topic operations
    assert response.cluster_authorized_operations == sum(
        1 << op for op in (5, 7, 8, 9, 10, 11, 12))  # 7 cluster operations
    request = _request(60, 0, {"include_cluster_authorized_operations": True})
    described = asyncio.run(describe_cluster.handle(
        _ctx(60, 0, None, metadata_cache=_cache()), request))
    assert described.cluster_authorized_operations == response.cluster_authorized_operations


def test_describe_cluster_answers_the_callers_operations() -> None:
    a = _authorizer((ResourceType.CLUSTER, "kafka-cluster", OP.ALTER))
    request = _request(60, 0, {"include_cluster_authorized_operations": True})
    described = asyncio.run(describe_cluster.handle(
        _ctx(60, 0, a, metadata_cache=_cache()), request))
    assert described.cluster_authorized_operations == (1 << 7) | (1 << 8)


# -- the ACL APIs ---------------------------------------------------------------------------


def _create(ctx: RequestContext, principal: str = "User:alice") -> Any:
    request = _request(30, 3, {"creations": [
        {"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
         "principal": principal, "host": "*", "operation": 3, "permission_type": 3}]})
    return asyncio.run(create_acls.handle(ctx, request))


def test_acl_apis_without_an_authorizer_are_security_disabled() -> None:
    response = _create(_ctx(30, 3, None))
    assert response.results[0].error_code == ErrorCode.SECURITY_DISABLED
    request = _request(29, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                               "pattern_type_filter": 1, "principal_filter": None,
                               "host_filter": None, "operation": 1, "permission_type": 1})
    described = asyncio.run(describe_acls.handle(_ctx(29, 3, None), request))
    assert described.error_code == ErrorCode.SECURITY_DISABLED


def test_acl_apis_need_alter_and_describe_on_the_cluster() -> None:
    a = _authorizer()
    assert _create(_ctx(30, 3, a)).results[0].error_code == CLUSTER_AUTH
    assert a.acls() == []


def test_create_describe_delete_acls_round_trip() -> None:
    a = _authorizer(super_users={"User:admin"})
    admin = KafkaPrincipal("User", "admin")
    assert _create(_ctx(30, 3, a, admin)).results[0].error_code == 0
    assert _create(_ctx(30, 3, a, admin), principal="nobody").results[0].error_code == \
        ErrorCode.INVALID_REQUEST
    request = _request(29, 3, {"resource_type_filter": 2, "resource_name_filter": None,
                               "pattern_type_filter": 1, "principal_filter": None,
                               "host_filter": None, "operation": 1, "permission_type": 1})
    described = asyncio.run(describe_acls.handle(_ctx(29, 3, a, admin), request))
    assert described.error_code == 0
    (resource,) = described.resources
    assert (resource.resource_name, resource.acls[0].principal) == ("t", "User:alice")
    request = _request(31, 3, {"filters": [
        {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
         "principal_filter": "User:alice", "host_filter": None, "operation": 1,
         "permission_type": 1}]})
    deleted = asyncio.run(delete_acls.handle(_ctx(31, 3, a, admin), request))
    assert [m.resource_name for m in deleted.filter_results[0].matching_acls] == ["t"]
    assert a.acls() == []


# -- transactions -------------------------------------------------------------------------


class FakeTxnCoordinator:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def end_transaction(self, *args: Any) -> ErrorCode:
        self.calls.append("end")
        return ErrorCode.NONE

    async def add_partitions(self, *args: Any) -> ErrorCode:
        self.calls.append("add")
        return ErrorCode.NONE


def test_transaction_apis_need_write_on_the_transactional_id() -> None:
    coordinator = FakeTxnCoordinator()
    a = _authorizer((ResourceType.TOPIC, "t", OP.WRITE))
    end = _request(26, 3, {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0,
                           "committed": True})
    response = asyncio.run(end_txn.handle(
        _ctx(26, 3, a, transaction_coordinator=coordinator), end))
    assert response.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    add = _request(24, 3, {"v3_and_below_transactional_id": "tx",
                           "v3_and_below_producer_id": 1, "v3_and_below_producer_epoch": 0,
                           "v3_and_below_topics": [{"name": "t", "partitions": [0]}],
                           "transactions": []})
    cache = MetadataCache(0)
    cache.update_partitions([PartitionState("t", 0, 0, 0, (0,), (0,))], {"t": uuid.UUID(int=1)})
    response = asyncio.run(add_partitions_to_txn.handle(
        _ctx(24, 3, a, transaction_coordinator=coordinator, metadata_cache=cache), add))
    codes = [p.partition_error_code for t in response.results_by_topic_v3_and_below
             for p in t.results_by_partition]
    assert codes == [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED]
    assert coordinator.calls == []
    # Write on the id but not on the topic: the topic is refused, nothing is attempted.
    asyncio.run(a.create_acls([AclBinding(
        ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx", PatternType.LITERAL),
        AccessControlEntry("User:ANONYMOUS", "*", OP.WRITE, AclPermissionType.ALLOW))]))
    other = _request(24, 3, {"v3_and_below_transactional_id": "tx",
                             "v3_and_below_producer_id": 1, "v3_and_below_producer_epoch": 0,
                             "v3_and_below_topics": [{"name": "t", "partitions": [0]},
                                                     {"name": "u", "partitions": [0]}],
                             "transactions": []})
    cache.update_partitions([PartitionState("u", 0, 0, 0, (0,), (0,))], {"u": uuid.UUID(int=2)})
    response = asyncio.run(add_partitions_to_txn.handle(
        _ctx(24, 3, a, transaction_coordinator=coordinator, metadata_cache=cache), other))
    codes = {t.name: t.results_by_partition[0].partition_error_code
             for t in response.results_by_topic_v3_and_below}
    assert codes == {"t": ErrorCode.OPERATION_NOT_ATTEMPTED,
                     "u": ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    assert coordinator.calls == []
    response = asyncio.run(end_txn.handle(
        _ctx(26, 3, a, transaction_coordinator=coordinator), end))
    assert response.error_code == 0 and coordinator.calls == ["end"]


def test_create_topics_needs_create_and_describe_configs_to_tell_the_configs() -> None:
    created: list[str] = []

    class Admin:
        is_controller = True

        async def create_topics(self, specs: list[Any], **kw: Any) -> dict[str, Any]:
            created.extend(s.name for s in specs)
            return {s.name: TopicResult(0, None, 1, 1, uuid.UUID(int=9)) for s in specs}

    a = _authorizer((ResourceType.TOPIC, "mine", OP.CREATE),
                    (ResourceType.TOPIC, "seen", OP.CREATE),
                    (ResourceType.TOPIC, "seen", OP.DESCRIBE_CONFIGS))
    request = _request(19, 7, {"timeout": 1000, "validate_only": False, "topics": [
        {"name": n, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": []} for n in ("mine", "seen", "theirs")]})
    response = asyncio.run(create_topics.handle(_ctx(19, 7, a, admin=Admin()), request))
    by_name = {t.name: t for t in response.topics}
    assert created == ["mine", "seen"]
    assert by_name["theirs"].error_code == TOPIC_AUTH
    assert by_name["mine"].error_code == 0 and by_name["mine"].num_partitions == -1
    assert by_name["mine"].topic_config_error_code == TOPIC_AUTH
    assert by_name["seen"].num_partitions == 1 and by_name["seen"].topic_config_error_code == 0


# -- the transaction tools' APIs (TxnOffsetCommit, DescribeProducers, DescribeTransactions,
# ListTransactions), as Kafka's KafkaApis checks them ---------------------------------------


def test_txn_offset_commit_needs_transactional_id_group_and_topic() -> None:
    from klog.daemon.handlers import txn_offset_commit

    cache = MetadataCache(0)
    cache.update_partitions([PartitionState(t, 0, 0, 0, (0,), (0,)) for t in ("a", "b")])
    calls: list[Any] = []

    async def commit_txn_offsets(*args: Any) -> dict[Any, ErrorCode]:
        calls.append(args)
        return {tp: ErrorCode.NONE for tp in args[6]}  # the offsets

    coordinator = SimpleNamespace(commit_txn_offsets=commit_txn_offsets)
    request = _request(28, 3, {
        "transactional_id": "tx", "group_id": "g", "producer_id": 1, "producer_epoch": 0,
        "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                               "committed_leader_epoch": -1,
                                               "committed_metadata": ""}]}
                   for t in ("a", "b")]})

    def errors(authorizer: AclAuthorizer) -> dict[str, int]:
        ctx = _ctx(28, 3, authorizer, metadata_cache=cache, group_coordinator=coordinator)
        response = asyncio.run(txn_offset_commit.handle(ctx, request))
        return {t.name: int(t.partitions[0].error_code) for t in response.topics}

    assert errors(_authorizer()) == dict.fromkeys(
        "ab", int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    assert errors(_authorizer((ResourceType.TRANSACTIONAL_ID, "tx", OP.WRITE))) == \
        dict.fromkeys("ab", int(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    assert not calls
    assert errors(_authorizer((ResourceType.TRANSACTIONAL_ID, "tx", OP.WRITE),
                              (ResourceType.GROUP, "g", OP.READ),
                              (ResourceType.TOPIC, "a", OP.READ))) == {"a": 0, "b": TOPIC_AUTH}
    assert [sorted(c[6]) for c in calls] == [[("a", 0)]]


def test_add_partitions_to_txn_v4_is_for_brokers_only() -> None:
    """KIP-890's batched form needs ClusterAction (brokers verifying with the
    coordinator); without it the whole request is CLUSTER_AUTHORIZATION_FAILED and no
    transaction is looked at. v3 and below stay the producers' (Write on the id)."""
    from klog.daemon.handlers import add_partitions_to_txn
    from klog.protocol.acls import CLUSTER_NAME

    calls: list[Any] = []

    def verify(*args: Any) -> dict[Any, ErrorCode]:
        calls.append(args)
        return dict.fromkeys(args[3], ErrorCode.NONE)

    coordinator = SimpleNamespace(verify_partitions_in_transaction=verify)
    cache = MetadataCache(0)
    cache.update_partitions([PartitionState("a", 0, 0, 0, (0,), (0,))])
    request = _request(24, 4, {"transactions": [
        {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "verify_only": True,
         "topics": [{"name": "a", "partitions": [0]}]}]})
    writer_only = _authorizer((ResourceType.TRANSACTIONAL_ID, "tx", OP.WRITE),
                              (ResourceType.TOPIC, "a", OP.WRITE))
    response = _respond(asyncio.run(add_partitions_to_txn.handle(
        _ctx(24, 4, writer_only, transaction_coordinator=coordinator, metadata_cache=cache),
        request)), 24, 4)
    assert int(response.error_code) == CLUSTER_AUTH and response.results_by_transaction == ()
    assert calls == []
    broker = _authorizer((ResourceType.CLUSTER, CLUSTER_NAME, OP.CLUSTER_ACTION))
    response = _respond(asyncio.run(add_partitions_to_txn.handle(
        _ctx(24, 4, broker, transaction_coordinator=coordinator, metadata_cache=cache),
        request)), 24, 4)
    assert int(response.error_code) == 0 and len(calls) == 1
    assert [int(p.partition_error_code) for r in response.results_by_transaction
            for t in r.topic_results for p in t.results_by_partition] == [0]


def test_describe_producers_needs_read_on_the_topic() -> None:
    from klog.daemon.handlers import describe_producers

    rm = SimpleNamespace(active_producers=lambda t, p: (ErrorCode.NONE, []))
    request = _request(61, 0, {"topics": [{"name": t, "partition_indexes": [0]}
                                          for t in ("a", "b")]})
    ctx = _ctx(61, 0, _authorizer((ResourceType.TOPIC, "a", OP.READ)), replica_manager=rm,
               metadata_cache=MetadataCache(0))
    response = asyncio.run(describe_producers.handle(ctx, request))
    assert {t.name: int(t.partitions[0].error_code) for t in response.topics} == {
        "a": 0, "b": TOPIC_AUTH}


def test_describe_and_list_transactions_show_only_describable_ids() -> None:
    from klog.daemon.handlers import describe_transactions, list_transactions
    from klog.daemon.transaction.coordinator import TransactionDescription

    described = {i: TransactionDescription(i, 0, "Ongoing", 60000, 1, 7, 0,
                                           {"a": [0], "secret": [1]}) for i in ("tx", "other")}
    coordinator = SimpleNamespace(
        describe=lambda ids: [described[i] for i in ids],
        list_transactions=lambda states, pids, duration: SimpleNamespace(
            error_code=0, unknown_state_filters=[],
            transactions=[SimpleNamespace(transactional_id=i, producer_id=7, state="Ongoing")
                          for i in ("tx", "other")]))
    authorizer = _authorizer((ResourceType.TRANSACTIONAL_ID, "tx", OP.DESCRIBE),
                             (ResourceType.TOPIC, "a", OP.DESCRIBE))
    ctx = _ctx(65, 0, authorizer, transaction_coordinator=coordinator)
    response = asyncio.run(describe_transactions.handle(
        ctx, _request(65, 0, {"transactional_ids": ["tx", "other"]})))
    by_id = {s.transactional_id: s for s in response.transaction_states}
    assert int(by_id["other"].error_code) == int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    assert [t.topic for t in by_id["tx"].topics] == ["a"]  # "secret" may not be described
    ctx = _ctx(66, 0, authorizer, transaction_coordinator=coordinator)
    response = asyncio.run(list_transactions.handle(
        ctx, _request(66, 0, {"state_filters": [], "producer_id_filters": []})))
    assert [s.transactional_id for s in response.transaction_states] == ["tx"]


def test_scram_credential_apis_need_describe_and_alter_on_the_cluster() -> None:
    from klog.daemon.handlers import alter_user_scram_credentials, describe_user_scram_credentials
    from klog.protocol.acls import CLUSTER_NAME

    calls: list[str] = []

    async def describe(users: Any) -> list[Any]:
        calls.append("describe")
        return []

    async def alter(deletions: Any, upsertions: Any) -> list[Any]:
        calls.append("alter")
        return []

    manager = SimpleNamespace(describe=describe, alter=alter)
    describe_request = _request(50, 0, {"users": None})
    alter_request = _request(51, 0, {"deletions": [{"name": "alice", "mechanism": 2}],
                                     "upsertions": []})
    nobody = _authorizer()
    ctx = _ctx(50, 0, nobody, scram_credentials=manager)
    response = asyncio.run(describe_user_scram_credentials.handle(ctx, describe_request))
    assert int(response.error_code) == CLUSTER_AUTH
    ctx = _ctx(51, 0, nobody, scram_credentials=manager)
    response = asyncio.run(alter_user_scram_credentials.handle(ctx, alter_request))
    assert [(r.user, int(r.error_code)) for r in response.results] == [("alice", CLUSTER_AUTH)]
    assert calls == []
    allowed = _authorizer((ResourceType.CLUSTER, CLUSTER_NAME, OP.ALTER))  # implies Describe
    asyncio.run(describe_user_scram_credentials.handle(
        _ctx(50, 0, allowed, scram_credentials=manager), describe_request))
    asyncio.run(alter_user_scram_credentials.handle(
        _ctx(51, 0, allowed, scram_credentials=manager), alter_request))
    assert calls == ["describe", "alter"]


def test_client_quota_apis_need_describe_configs_and_alter_configs_on_the_cluster() -> None:
    from klog.daemon.handlers import alter_client_quotas, describe_client_quotas
    from klog.daemon.quota_store import AlterResult
    from klog.protocol.acls import CLUSTER_NAME

    calls: list[Any] = []

    async def describe(components: Any, strict: bool) -> list[Any]:
        calls.append(("describe", [(c.entity_type, c.match_type, c.match)
                                   for c in components], strict))
        return [([("user", "alice")], {"producer_byte_rate": 1024.0})]

    async def alter(entries: Any, validate_only: bool) -> list[Any]:
        calls.append(("alter", [(parts, [(o.key, o.value, o.remove) for o in ops])
                                for parts, ops in entries], validate_only))
        return [AlterResult(parts) for parts, _ops in entries]

    admin = SimpleNamespace(describe=describe, alter=alter)
    for version in (0, 1):
        describe_request = _request(48, version, {"components": [
            {"entity_type": "user", "match_type": 0, "match": "alice"}], "strict": True})
        alter_request = _request(49, version, {"entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": None}],
            "ops": [{"key": "consumer_byte_rate", "value": 2048.0, "remove": False}]}],
            "validate_only": False})
        nobody = _authorizer()
        response = asyncio.run(describe_client_quotas.handle(
            _ctx(48, version, nobody, client_quota_admin=admin), describe_request))
        assert int(response.error_code) == CLUSTER_AUTH and response.entries is None
        response = asyncio.run(alter_client_quotas.handle(
            _ctx(49, version, nobody, client_quota_admin=admin), alter_request))
        assert [(int(e.error_code), [(d.entity_type, d.entity_name) for d in e.entity])
                for e in response.entries] == [(CLUSTER_AUTH, [("client-id", None)])]
        assert calls == []
        # Kafka: DescribeConfigs / AlterConfigs on the cluster (Alter does not imply them)
        altering = _authorizer((ResourceType.CLUSTER, CLUSTER_NAME, OP.ALTER))
        response = asyncio.run(alter_client_quotas.handle(
            _ctx(49, version, altering, client_quota_admin=admin), alter_request))
        assert int(response.entries[0].error_code) == CLUSTER_AUTH
        allowed = _authorizer((ResourceType.CLUSTER, CLUSTER_NAME, OP.ALTER_CONFIGS),
                              (ResourceType.CLUSTER, CLUSTER_NAME, OP.DESCRIBE_CONFIGS))
        response = asyncio.run(describe_client_quotas.handle(
            _ctx(48, version, allowed, client_quota_admin=admin), describe_request))
        assert int(response.error_code) == 0
        assert [([(d.entity_type, d.entity_name) for d in e.entity],
                 [(v.key, v.value) for v in e.values]) for e in response.entries] == [
            ([("user", "alice")], [("producer_byte_rate", 1024.0)])]
        response = asyncio.run(alter_client_quotas.handle(
            _ctx(49, version, allowed, client_quota_admin=admin), alter_request))
        assert int(response.entries[0].error_code) == 0
        assert calls == [
            ("describe", [("user", 0, "alice")], True),
            ("alter", [([("client-id", None)], [("consumer_byte_rate", 2048.0, False)])],
             False)]
        calls.clear()
