"""Metrics of a replicated cluster (klog/daemon/metrics): follower fetches and replication
bytes, fetcher lag, the controller's gauges on the controller only, and an ISR shrink
counted and seen as an under-replicated partition, on 2 real broker processes over
ZooKeeper."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.conftest import Cluster

pytestmark = pytest.mark.timeout(240)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _one(got: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
         **labels: str) -> float:
    return got.get((name, frozenset(labels.items())), -1.0)


def test_replication_and_controller_figures(cluster: Callable[..., Cluster]) -> None:
    ports = {1: _free_port(), 2: _free_port()}
    c = cluster(2, overrides={"zookeeper.session.timeout.ms": 30_000},
                per_broker={b: {"metrics.http.listener": f"127.0.0.1:{p}"}
                            for b, p in ports.items()})
    c.create_topic("rep", partitions=1, replication_factor=2)
    c.wait_for_isr("rep", 0, [1, 2])
    producer = ck.Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
    for i in range(20):
        producer.produce("rep", b"r%d" % i, partition=0)
    assert producer.flush(30) == 0
    leader = c.leader("rep", 0)
    follower = 3 - leader

    def caught_up() -> Any:
        got = _scrape(ports[follower])
        lag = _one(got, "kafka_server_fetcherlagmetrics_consumerlag",
                   clientId=f"ReplicaFetcherThread-0-{leader}", topic="rep", partition="0")
        return got if lag == 0 else None

    on_follower = c.wait(caught_up, what="the follower's lag to read 0")
    assert _one(on_follower, "kafka_server_brokertopicmetrics_replicationbytesin_total") > 0
    assert _one(on_follower, "kafka_server_replicamanager_leadercount") == 0
    on_leader = _scrape(ports[leader])
    assert _one(on_leader, "kafka_server_brokertopicmetrics_messagesin_total",
                topic="rep") == 20
    assert _one(on_leader, "kafka_server_brokertopicmetrics_replicationbytesout_total") > 0
    follower_fetches = sum(v for (n, ls), v in on_leader.items()
                           if n == "kafka_network_requestmetrics_requests_total"
                           and ("request", "FetchFollower") in ls)
    assert follower_fetches > 0
    assert _one(on_leader, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    # One controller, and only it reports the cluster's counts.
    active = {b: _one(_scrape(p), "kafka_controller_kafkacontroller_activecontrollercount")
              for b, p in ports.items()}
    assert sorted(active.values()) == [0, 1]
    controller = next(b for b, v in active.items() if v == 1)
    assert _one(_scrape(ports[controller]),
                "kafka_controller_kafkacontroller_globaltopiccount") >= 1
    assert _one(_scrape(ports[3 - controller]),
                "kafka_controller_kafkacontroller_globaltopiccount") == 0

    # The follower goes away: the leader shrinks the ISR (replica.lag.time.max.ms 3 s).
    c.kill(follower)
    # A follower whose log end is the leader's stays in sync (Kafka's isCaughtUp): new
    # records make it lag, and after replica.lag.time.max.ms (3 s) the leader shrinks the
    # ISR itself. The long ZooKeeper session keeps the controller from removing the dead
    # broker first (a controller's removal is no leader's shrink, in Kafka either).
    one = ck.Producer({"bootstrap.servers": c.broker(leader).bootstrap_servers, "acks": 1})
    one.produce("rep", b"after", partition=0)
    assert one.flush(30) == 0

    def shrunk() -> Any:
        got = _scrape(ports[leader])
        return got if _one(got, "kafka_server_replicamanager_underreplicatedpartitions") \
            == 1 else None

    after = c.wait(shrunk, timeout=60, what="an under-replicated partition on the leader")
    assert _one(after, "kafka_server_replicamanager_isrshrinks_total") == 1
