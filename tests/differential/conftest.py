"""Fixtures of the differential test: a klog broker and an Apache Kafka broker (the release
tests/jvm/pom.xml pins, run by benchmarks/kafka_reference.py) started side by side from
empty log dirs with the same settings where they matter.

Both run as node 1 with an ACL authorizer that allows everything no ACL denies (the corpus
denies User:ANONYMOUS a topic, a group and a transactional id), no initial rebalance
delay, and one partition for each internal topic (so every group and transaction has the
same coordinator partition on both). Kafka 4 runs KRaft (broker and controller in one
process): it has no ZooKeeper mode, and klog's standalone broker is its nearest
counterpart. A missing build is a failure saying to run ``make setup``, never a skip.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchmarks.kafka_reference import (
    SHARED_SETTINGS,
    KafkaCluster,
    KafkaUnavailable,
    broker_classpath,
)
from klog.testing import KlogBroker
from tests.differential.corpus import NODE_ID
from tests.differential.harness import Side

#: The settings both brokers get (Kafka's listeners and quorum come from KafkaNode).
SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    # Kafka 4 made one hour the default (Kafka 3.x: unlimited, as klog's default): the
    # same on both, so that the check itself is compared.
    "log.message.timestamp.after.max.ms": "3600000",
}


@dataclass
class Pair:
    klog: KlogBroker
    kafka: KafkaCluster

    def sides(self) -> tuple[Side, Side]:
        host, port = self.klog.bootstrap_servers.split(":")
        node = self.kafka.nodes[0]
        return (Side("klog", host, int(port), NODE_ID),
                Side("kafka", "127.0.0.1", node.port, node.node_id))


#: Which Kafka the test compares with: "kraft" (Kafka 4, the default and CI's) or, with
#: KLOG_DIFFERENTIAL_REFERENCE=zk, Kafka 3.9 in ZooKeeper mode -- the mode klog follows; run
#: by hand to tell what Kafka 4 changed from where klog differs from Kafka 3.x.
REFERENCE = os.environ.get("KLOG_DIFFERENTIAL_REFERENCE", "kraft")
#: ZooKeeper mode's name for the ACL authorizer.
_ZK_SETTINGS = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}


def start_pair(root: Path, klog_overrides: dict[str, Any] | None = None,
               kafka_overrides: dict[str, Any] | None = None, mode: str = REFERENCE) -> Pair:
    """Both brokers, started at once (Kafka's JVM takes seconds to tens of seconds here,
    klog about one)."""
    try:
        broker_classpath(mode)
    except KafkaUnavailable as exc:
        pytest.fail(str(exc))
    kafka = KafkaCluster(root / "kafka", 1, profile="test", mode=mode,
                         overrides={**SETTINGS, **(_ZK_SETTINGS if mode == "zk" else {}),
                                    **(kafka_overrides or {})})
    failure: list[BaseException] = []

    def start_kafka() -> None:
        try:
            kafka.start(timeout=240)
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=start_kafka, name="kafka-start")
    thread.start()
    klog = KlogBroker(root / "klog" / "data", overrides={
        "broker.id": str(NODE_ID), **SHARED_SETTINGS, **SETTINGS, **(klog_overrides or {})})
    try:
        klog.start()
    finally:
        thread.join()
    if failure:
        klog.stop()
        raise failure[0]
    return Pair(klog, kafka)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    running = start_pair(tmp_path_factory.mktemp("differential"))
    try:
        yield running
    finally:
        running.klog.stop()
        running.kafka.stop()
