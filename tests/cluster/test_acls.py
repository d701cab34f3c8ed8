"""ACLs on a 3-broker ZooKeeper cluster with the ACL authorizer: an ACL created through one
broker reaches the others (ZooKeeper's /kafka-acl-changes, watched by each), and
replication and controller traffic keep working under ACLs that grant ClusterAction.

On PLAINTEXT every connection is User:ANONYMOUS, brokers included: the ACLs seeded before
start grant it what brokers and this test's clients need on the cluster and the topics."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from klog.daemon.security import acl_store
from klog.protocol.acls import AccessControlEntry, PatternType, ResourcePattern
from klog.protocol.acls import AclOperation as Op
from klog.protocol.acls import AclPermissionType as Permission
from klog.protocol.acls import ResourceType as Kind
from klog.protocol.errors import ErrorCode
from tests.cluster.conftest import Cluster
from tests.daemon.wire import WireClient, fetch_values

pytestmark = pytest.mark.timeout(180)


#: Brokers (and this test's admin clients) connect from 127.0.0.1; the "outsider" client
#: from 127.0.0.2 -- the same principal on PLAINTEXT, told apart by the ACLs' host.
BROKER_HOST, OUTSIDER_HOST = "127.0.0.1", "127.0.0.2"


class OutsiderClient(WireClient):
    """A raw client whose connections come from OUTSIDER_HOST."""

    def __init__(self, address: tuple[str, int], timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout,
                                             source_address=(OUTSIDER_HOST, 0))
        self._correlation = 0
        self._buffer = bytearray()


def _seed(c: Cluster) -> None:
    grants = {
        # Everything on the cluster (ClusterAction included) from the brokers' host only.
        ResourcePattern(Kind.CLUSTER, "kafka-cluster", PatternType.LITERAL):
            ((Op.ALL, BROKER_HOST),),
        ResourcePattern(Kind.TOPIC, "*", PatternType.LITERAL): ((Op.ALL, "*"),),
        ResourcePattern(Kind.GROUP, "*", PatternType.LITERAL): ((Op.ALL, "*"),),
    }
    for pattern, ops in grants.items():
        entries = frozenset(AccessControlEntry("User:ANONYMOUS", host, op, Permission.ALLOW)
                            for op, host in ops)
        acl_store.update_resource(c.store, pattern, lambda _current, e=entries: e)


def test_an_acl_reaches_every_broker_and_replication_goes_on(
        cluster: Callable[..., Cluster]) -> None:
    c = cluster(brokers=3, start=False, overrides={
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    _seed(c)
    c.start_all()
    c.wait_for_registered(c.ids)
    c.create_topic("open", partitions=1, replication_factor=3)
    c.create_topic("secret", partitions=1, replication_factor=3)
    c.wait_for_isr("open", 0, c.ids)

    # Through broker 1 only: deny Describe (and so everything Metadata tells) on "secret".
    admin = AdminClient({"bootstrap.servers": c.bootstrap_of([1])})
    for future in admin.create_acls([AclBinding(
            ResourceType.TOPIC, "secret", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
            AclOperation.DESCRIBE, AclPermissionType.DENY)]).values():
        future.result(timeout=30)

    def refused_everywhere() -> bool:
        for broker_id in c.ids:
            b = c.broker(broker_id)
            with WireClient((b.host, b.port)) as client:
                topics = {t.name: t.error_code for t in client.metadata(["secret", "open"])
                          .topics}
            if topics != {"secret": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "open": 0}:
                return False
        return True

    c.wait(refused_everywhere, 30, "the deny on every broker")

    # Replication under ACLs: acks=all needs the followers' fetches (ClusterAction).
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                         "message.timeout.ms": 20000})
    for i in range(10):
        producer.produce("open", str(i).encode(), on_delivery=lambda e, _m: errors.append(e))
    producer.flush(30)
    assert errors == [None] * 10
    c.wait_for_isr("open", 0, c.ids)

    # A client claiming to be follower 2 from a host without ClusterAction reads nothing
    # (Kafka's answer: TOPIC_AUTHORIZATION_FAILED); the same client as a consumer reads.
    leader = c.broker(c.leader("open", 0))
    with OutsiderClient((leader.host, leader.port)) as outsider:
        as_consumer = outsider.fetch("open", 0, 0)
        assert as_consumer.responses[0].partitions[0].error_code == 0
        assert as_consumer.responses[0].partitions[0].records
        forged = outsider.call(1, 12, {**fetch_values("open", 0, 0), "replica_id": 2})
        part = forged.responses[0].partitions[0]
        assert part.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not part.records
    c.wait_for_isr("open", 0, c.ids)  # the forged fetch moved no follower out or in
