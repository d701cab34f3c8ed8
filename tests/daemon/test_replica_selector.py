"""klog/daemon/replica_selector.py: Kafka's RackAwareReplicaSelector over the metadata
cache's racks (KIP-392), and replica.selector.class's one accepted value."""

from __future__ import annotations

import pytest

from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache
from klog.daemon.replica_selector import (
    ClientMetadata,
    RackAwareReplicaSelector,
    ReplicaView,
    selector_for,
)

RACKS = {1: "a", 2: "b", 3: "c", 4: "c"}


def _cache(racks: dict[int, str | None]) -> MetadataCache:
    cache = MetadataCache(1)
    cache.update_brokers([BrokerInfo(b, (BrokerEndpoint("PLAINTEXT", "h", 9000 + b),), r)
                          for b, r in racks.items()], 1)
    return cache


def _pick(rack: str, followers: list[ReplicaView], racks: dict[int, str | None] = RACKS,
          listener: str = "PLAINTEXT") -> int | None:
    selector = RackAwareReplicaSelector(_cache(racks))
    return selector.preferred_read_replica(ClientMetadata(rack, listener),
                                           ReplicaView(1, 100, 0), followers)


def test_a_follower_in_the_clients_rack() -> None:
    assert _pick("b", [ReplicaView(2, 100, 0), ReplicaView(3, 100, 0)]) == 2


def test_the_leader_in_the_clients_rack_or_no_rack_means_the_leader() -> None:
    assert _pick("a", [ReplicaView(2, 100, 0)]) is None
    assert _pick("", [ReplicaView(2, 100, 0)]) is None
    assert _pick("z", [ReplicaView(2, 100, 0)]) is None  # no replica in that rack


def test_the_most_caught_up_follower_of_the_rack() -> None:
    # Largest log end offset first, then the one caught up most recently.
    assert _pick("c", [ReplicaView(3, 90, 0), ReplicaView(4, 95, 50)]) == 4
    assert _pick("c", [ReplicaView(3, 95, 10), ReplicaView(4, 95, 50)]) == 3


def test_a_broker_without_an_endpoint_on_the_listener_is_never_chosen() -> None:
    assert _pick("b", [ReplicaView(2, 100, 0)], listener="SSL") is None
    assert _pick("b", [ReplicaView(5, 100, 0)]) is None  # not a live broker


def test_replica_selector_class() -> None:
    cache = _cache(RACKS)
    assert selector_for(None, cache) is None and selector_for("", cache) is None
    selector = selector_for("org.apache.kafka.common.replica.RackAwareReplicaSelector", cache)
    assert isinstance(selector, RackAwareReplicaSelector)
    with pytest.raises(ValueError, match="is not a replica selector klog has"):
        selector_for("com.example.MySelector", cache)
