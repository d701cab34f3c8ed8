"""Brokers talk to each other over a SASL_SSL inter-broker listener: the replica fetchers
and the controller channel connect with TLS and authenticate with the broker's own JAAS
credentials (sasl.mechanism.inter.broker.protocol); clients use a PLAINTEXT listener."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck

from klog.daemon.security import acl_store
from klog.protocol.acls import AccessControlEntry, PatternType, ResourcePattern
from klog.protocol.acls import AclOperation as Op
from klog.protocol.acls import AclPermissionType as Permission
from klog.protocol.acls import ResourceType as Kind
from klog.protocol.errors import ErrorCode
from klog.testing import free_port
from tests.cluster.conftest import Cluster
from tests.daemon.security.certs import Pki
from tests.daemon.wire import WireClient, fetch_values

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="broker" password="broker-secret" user_broker="broker-secret";')


def secured_cluster(cluster: Callable[..., Cluster], pki: Pki, brokers: int = 2,
                    seed: Callable[[Cluster], None] | None = None, **extra: Any) -> Cluster:
    c = cluster(brokers=brokers, start=False, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "min.insync.replicas": "2",
        **extra,
    })
    for broker in c.brokers.values():
        broker.overrides["listeners"] = (f"PLAINTEXT://127.0.0.1:{broker.port},"
                                         f"INTERNAL://127.0.0.1:{free_port()}")
    if seed is not None:
        seed(c)
    return c.start_all()


def test_replication_and_controller_traffic_over_sasl_ssl(
        cluster: Callable[..., Cluster], pki: Pki) -> None:
    c = secured_cluster(cluster, pki)
    c.create_topic("secure", partitions=2, replication_factor=2)
    # LeaderAndIsr reached the follower over the controller channel, and its fetcher
    # caught up over SASL_SSL: both replicas in the ISR, so acks=all with
    # min.insync.replicas=2 succeeds.
    for partition in (0, 1):
        c.wait_for_isr("secure", partition, [1, 2])
    producer = ck.Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                            "message.timeout.ms": 20000})
    delivered: list[Any] = []
    for i in range(50):
        producer.produce("secure", f"m{i}".encode(), partition=i % 2,
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 50
    # a transaction over both partitions (one led by each broker): the coordinator writes
    # the other leader's marker with WriteTxnMarkers over the SASL_SSL listener
    transactional = ck.Producer({"bootstrap.servers": c.bootstrap_servers,
                                 "transactional.id": "secure-txn",
                                 "transaction.timeout.ms": 20000})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for partition in (0, 1):
        transactional.produce("secure", b"in-txn", partition=partition)
    transactional.commit_transaction(30)
    consumer = ck.Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "g",
                            "isolation.level": "read_committed",
                            "auto.offset.reset": "earliest"})
    consumer.subscribe(["secure"])
    committed = 0
    deadline = time.monotonic() + 30
    while committed < 2 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None and message.value() == b"in-txn":
            committed += 1
    consumer.close()
    assert committed == 2


def test_a_broker_with_the_wrong_inter_broker_password_cannot_replicate(
        cluster: Callable[..., Cluster], pki: Pki) -> None:
    c = secured_cluster(cluster, pki)
    # broker 2 logs in with a wrong password (its own listener still knows the right one)
    c.broker(2).overrides["listener.name.internal.plain.sasl.jaas.config"] = JAAS.replace(
        'password="broker-secret"', 'password="wrong"')
    c.restart(2)
    c.wait_for_registered([1, 2])
    c.create_topic("refused", partitions=2, replication_factor=2)
    c.wait(lambda: "Invalid username or password" in c.broker(2).log_tail(400)
           and "authentication of connection" in c.broker(1).log_tail(400),
           what="broker 2's failed logins to broker 1")
    # broker 1 refused every one of broker 2's logins: broker 2 never fetches what broker 1
    # leads, and drops out of that partition's ISR (replica.lag.time.max.ms)
    led_by_1 = [p for p in (0, 1) if c.leader("refused", p) == 1]
    assert led_by_1  # placement spreads two partitions over the two brokers
    c.wait_for_isr("refused", led_by_1[0], [1])


def _grant_clients_topics_and_groups(c: Cluster) -> None:
    # Clients (User:ANONYMOUS on PLAINTEXT) may do anything to topics and groups and
    # nothing on the cluster: ClusterAction is the brokers' alone, as super users.
    for kind in (Kind.TOPIC, Kind.GROUP):
        entries = frozenset({AccessControlEntry("User:ANONYMOUS", "*", Op.ALL,
                                                Permission.ALLOW)})
        acl_store.update_resource(c.store, ResourcePattern(kind, "*", PatternType.LITERAL),
                                  lambda _current, e=entries: e)


def test_three_brokers_sasl_ssl_and_acls_refuse_a_forged_replica_fetch(
        cluster: Callable[..., Cluster], pki: Pki) -> None:
    # Issue 22's cluster case in one: inter-broker SASL_SSL, the ACL authorizer, brokers
    # authorized as User:broker (super.users) over their authenticated listener.
    c = secured_cluster(cluster, pki, brokers=3, seed=_grant_clients_topics_and_groups,
                        **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                           "super.users": "User:broker"})
    c.create_topic("guarded", partitions=1, replication_factor=3)
    c.wait_for_isr("guarded", 0, c.ids)  # LeaderAndIsr and fetches over SASL_SSL, authorized
    producer = ck.Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                            "message.timeout.ms": 20000})
    delivered: list[Any] = []
    for i in range(20):
        producer.produce("guarded", f"m{i}".encode(),
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 20
    leader_id = c.leader("guarded", 0)
    leader = c.broker(leader_id)
    follower = next(i for i in c.ids if i != leader_id)
    with WireClient((leader.host, leader.port)) as client:  # PLAINTEXT: User:ANONYMOUS
        assert client.fetch("guarded", 0, 0).responses[0].partitions[0].records
        forged = client.call(1, 12, {**fetch_values("guarded", 0, 0),
                                     "replica_id": follower})
        part = forged.responses[0].partitions[0]
        assert part.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not part.records
    c.wait_for_isr("guarded", 0, c.ids)  # the forged fetch moved no follower
