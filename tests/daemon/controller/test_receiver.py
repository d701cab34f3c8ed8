"""Controller-request fencing on the broker side (klog/daemon/controller/receiver.py):
controller epochs, broker epochs, leader epochs, deletions, and the wire entities of every
version turned back into PartitionState / BrokerInfo."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from klog.client.network import build_request
from klog.daemon.controller import channel, receiver
from klog.daemon.handlers.update_metadata import live_brokers
from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache, PartitionState
from klog.protocol import apis, inter_broker
from klog.protocol.errors import ErrorCode


@dataclass
class FakePartition:
    leader_epoch: int


@dataclass
class FakeReplicaManager:
    """What the receiver calls on the replica manager, recording the calls."""

    partitions: dict[tuple[str, int], FakePartition] = field(default_factory=dict)
    applied: list[PartitionState] = field(default_factory=list)
    stopped: list[tuple[list[tuple[str, int]], bool]] = field(default_factory=list)

    def get_partition(self, topic: str, partition: int) -> FakePartition | None:
        return self.partitions.get((topic, partition))

    def become_leader_or_follower(self, states: list[PartitionState]
                                  ) -> dict[tuple[str, int], int]:
        self.applied += states
        for s in states:
            self.partitions[(s.topic, s.partition)] = FakePartition(s.leader_epoch)
        return {(s.topic, s.partition): 0 for s in states}

    def stop_replicas(self, tps: list[tuple[str, int]], delete: bool) -> None:
        self.stopped.append((tps, delete))


@dataclass
class FakeTopicConfigs:
    loaded: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def load_missing(self, topics: Any) -> None:
        self.loaded += sorted(set(topics) - set(self.loaded))

    def remove(self, topic: str) -> None:
        self.removed.append(topic)


class Fixture:
    """A real ControlRequestReceiver over fakes; this broker is 1, at broker epoch 500."""

    def __init__(self) -> None:
        self.rm = FakeReplicaManager()
        self.cache = MetadataCache(1)
        self.topic_configs = FakeTopicConfigs()
        self.receiver = receiver.ControlRequestReceiver(
            1, self.rm, self.cache, self.topic_configs)  # type: ignore[arg-type]
        self.receiver.broker_epoch = 500


def state(topic: str = "t", partition: int = 0, leader: int = 1, epoch: int = 0,
          replicas: tuple[int, ...] = (1, 2), controller_epoch: int = 3) -> PartitionState:
    return PartitionState(topic, partition, leader, epoch, replicas, replicas, controller_epoch)


def fake() -> Fixture:
    return Fixture()


def test_newer_controller_epoch_is_obeyed_and_remembered() -> None:
    b = fake()
    error, errors = b.receiver.leader_and_isr(2, 3, -1, [state()], {})
    assert (error, errors) == (0, {("t", 0): 0})
    assert b.receiver.controller_epoch == 3
    assert [s.leader for s in b.rm.applied] == [1]


def test_older_controller_epoch_is_refused_everywhere() -> None:
    b = fake()
    b.receiver.controller_epoch = 5
    stale = int(ErrorCode.STALE_CONTROLLER_EPOCH)
    assert b.receiver.leader_and_isr(2, 4, -1, [state()], {}) == (stale, {("t", 0): stale})
    assert b.receiver.update_metadata(2, 4, -1, [], [state()], {}) == stale
    assert b.receiver.stop_replica(4, -1, [(("t", 0), 0, True)]) == (stale, {("t", 0): stale})
    assert b.rm.applied == [] and b.rm.stopped == [] and b.cache.topics == {}
    assert b.receiver.controller_epoch == 5


def test_older_broker_epoch_is_refused_unknown_is_not() -> None:
    b = fake()
    code = int(ErrorCode.STALE_BROKER_EPOCH)
    assert b.receiver.leader_and_isr(2, 3, 499, [state()], {})[0] == code
    assert b.receiver.update_metadata(2, 3, 499, [], [], {}) == code
    assert b.receiver.leader_and_isr(2, 3, -1, [state()], {})[0] == 0
    assert b.receiver.leader_and_isr(2, 3, 501, [state(epoch=1)], {})[0] == 0


def test_only_newer_leader_epochs_apply() -> None:
    b = fake()
    b.receiver.leader_and_isr(2, 3, -1, [state(epoch=4)], {})
    error, errors = b.receiver.leader_and_isr(
        2, 3, -1, [state(epoch=4), state(epoch=3, partition=0), state(partition=1)], {})
    assert error == 0
    assert errors[("t", 0)] == ErrorCode.STALE_CONTROLLER_EPOCH
    assert errors[("t", 1)] == 0
    assert [(s.partition, s.leader_epoch) for s in b.rm.applied] == [(0, 4), (1, 0)]


def test_state_without_this_broker_is_unknown_partition() -> None:
    b = fake()
    _, errors = b.receiver.leader_and_isr(2, 3, -1, [state(replicas=(2, 3), leader=2)], {})
    assert errors == {("t", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert b.rm.applied == []


def test_update_metadata_removes_topics_being_deleted() -> None:
    b = fake()
    brokers = [BrokerInfo(1, (BrokerEndpoint("PLAINTEXT", "h", 1),))]
    assert b.receiver.update_metadata(2, 3, -1, brokers, [state("a"), state("b")], {}) == 0
    assert b.cache.topic_names() == ["a", "b"]
    assert b.cache.controller_id == 2
    gone = state("a", leader=receiver.LEADER_DURING_DELETE)
    assert b.receiver.update_metadata(2, 3, -1, brokers, [gone], {}) == 0
    assert b.cache.topic_names() == ["b"]
    assert b.topic_configs.removed == ["a"]


def test_stop_replica_fences_older_leader_epochs() -> None:
    b = fake()
    b.receiver.leader_and_isr(2, 3, -1, [state(epoch=5), state(partition=1, epoch=5)], {})
    error, errors = b.receiver.stop_replica(3, -1, [
        (("t", 0), 4, False), (("t", 1), 5, False), (("t", 2), receiver.EPOCH_DURING_DELETE,
                                                     True)])
    assert error == 0
    assert errors == {("t", 0): ErrorCode.FENCED_LEADER_EPOCH, ("t", 1): 0, ("t", 2): 0}
    assert b.rm.stopped == [([("t", 1)], False), ([("t", 2)], True)]


STATES = [PartitionState("t", 0, 1, 3, (1, 2, 3), (1, 2), 5, 7),
          PartitionState("u", 1, 2, 0, (2,), (2,), 5, 0)]
BROKERS = [BrokerInfo(1, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092),), "r1"),
           BrokerInfo(2, (BrokerEndpoint("INTERNAL", "h", 9093, "SSL"),))]


def roundtrip(api_key: int, version: int, values: dict[str, Any]) -> Any:
    entity = build_request(apis.spec_for(api_key).request_entity(version), values)
    return apis.decode_request(api_key, version, memoryview(apis.encode_request(entity)))


@pytest.mark.parametrize("version", range(7))
def test_leader_and_isr_every_version(version: int) -> None:
    topic_id = uuid.uuid4()
    values = channel.leader_and_isr_values(1, 5, 100, STATES, {"t": topic_id}, BROKERS,
                                           "PLAINTEXT")
    request = roundtrip(inter_broker.LEADER_AND_ISR, version, values)
    states, ids = receiver.request_partition_states(request)
    assert states == STATES
    assert ids == ({"t": topic_id} if version >= 5 else {})
    assert request.controller_epoch == 5
    assert getattr(request, "broker_epoch", 100) == 100
    assert [(lead.broker_id, lead.port) for lead in request.live_leaders] == [(1, 9092),
                                                                             (2, 9093)]


@pytest.mark.parametrize("version", range(8))
def test_update_metadata_every_version(version: int) -> None:
    values = channel.update_metadata_values(1, 5, 100, BROKERS, STATES, {})
    request = roundtrip(inter_broker.UPDATE_METADATA, version, values)
    states, _ = receiver.request_partition_states(request)
    assert states == STATES
    brokers = live_brokers(request)
    assert [b.broker_id for b in brokers] == [1, 2]
    assert brokers[0].endpoints[0].port == 9092
    assert brokers[0].rack == ("r1" if version >= 2 else None)
    second = brokers[1].endpoints[0]
    if version >= 3:
        assert (second.listener_name, second.security_protocol) == ("INTERNAL", "SSL")
    elif version >= 1:
        assert second.security_protocol == "SSL"


@pytest.mark.parametrize("version", range(4))
def test_stop_replica_every_version(version: int) -> None:
    values = channel.stop_replica_values(1, 5, 100, [(("t", 0), 3), (("t", 1), 3)], True)
    request = roundtrip(inter_broker.STOP_REPLICA, version, values)
    assert request.controller_epoch == 5
    if version == 0:
        assert [(p.topic_name, p.partition_index) for p in request.ungrouped_partitions] == [
            ("t", 0), ("t", 1)]
    elif version < 3:
        assert request.delete_partitions
        assert [tuple(t.partition_indexes) for t in request.topics] == [(0, 1)]
    else:
        parts = request.topic_states[0].partition_states
        assert [(p.partition_index, p.leader_epoch, p.delete_partition) for p in parts] == [
            (0, receiver.EPOCH_DURING_DELETE, True), (1, receiver.EPOCH_DURING_DELETE, True)]
