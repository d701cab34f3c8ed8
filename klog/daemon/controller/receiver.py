"""The broker side of controller requests: epoch fencing, then applying the decision.

Owns the checks Kafka's KafkaApis and ReplicaManager make before a broker obeys its
controller, shared by the wire handlers (leader_and_isr, update_metadata, stop_replica)
and by the in-process path the controller uses for its own broker. A request from the wire
reaches these only once klog/daemon/controller/identity.py has found it comes from the
controller ZooKeeper names (standalone: never); then:

- broker epoch: a request carrying a broker epoch (the czxid of this broker's
  ``/brokers/ids/<id>`` registration, -1 = unknown) older than this broker's current one
  was meant for an earlier incarnation of this broker: STALE_BROKER_EPOCH;
- controller epoch: a request from a controller epoch older than the newest this broker
  has obeyed comes from a deposed controller: STALE_CONTROLLER_EPOCH, nothing applied;
  otherwise the request's epoch becomes the newest;
- LeaderAndIsr, per partition: only a leader epoch newer than the one this broker holds
  is applied (else STALE_CONTROLLER_EPOCH for that partition, as Kafka answers); a state
  whose replicas do not include this broker gets UNKNOWN_TOPIC_OR_PARTITION;
- UpdateMetadata: a partition whose leader is -2 (Kafka's LeaderDuringDelete) is being
  deleted and leaves the metadata cache;
- StopReplica v3+: a leader epoch older than the partition's is FENCED_LEADER_EPOCH.

Everything runs on the event loop thread (handlers and the controller's task), which is
what serialises it; ``Broker.controller_epoch`` is only touched here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from klog.daemon.metadata_cache import BrokerInfo, PartitionState
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.broker import Broker

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: Kafka's LeaderAndIsr.LeaderDuringDelete: the partition's topic is being deleted.
LEADER_DURING_DELETE = -2
#: Kafka's LeaderAndIsr.EpochDuringDelete (StopReplica v3 leader epoch of a deletion).
EPOCH_DURING_DELETE = -2
#: AbstractControlRequest.UNKNOWN_BROKER_EPOCH.
UNKNOWN_BROKER_EPOCH = -1


def fence(broker: Broker, controller_epoch: int, broker_epoch: int) -> int:
    """The error that refuses this control request, or 0 (NONE) to obey it."""
    if broker_epoch != UNKNOWN_BROKER_EPOCH and broker_epoch < broker.broker_epoch:
        log.warning("ignoring a controller request for broker epoch %d (current %d)",
                    broker_epoch, broker.broker_epoch)
        return int(ErrorCode.STALE_BROKER_EPOCH)
    if controller_epoch < broker.controller_epoch:
        log.warning("ignoring a request from controller epoch %d: the latest known is %d",
                    controller_epoch, broker.controller_epoch)
        return int(ErrorCode.STALE_CONTROLLER_EPOCH)
    return 0


def leader_and_isr(broker: Broker, controller_id: int, controller_epoch: int,
                   broker_epoch: int, states: list[PartitionState],
                   topic_ids: dict[str, uuid.UUID]) -> tuple[int, dict[TopicPartition, int]]:
    """Apply a LeaderAndIsr request: (top-level error, error per partition)."""
    error = fence(broker, controller_epoch, broker_epoch)
    if error:
        return error, {(s.topic, s.partition): error for s in states}
    broker.controller_epoch = controller_epoch
    rm = broker.replica_manager
    assert rm is not None
    errors: dict[TopicPartition, int] = {}
    accepted: list[PartitionState] = []
    for s in states:
        tp = (s.topic, s.partition)
        if broker.broker_id not in s.replicas:
            errors[tp] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            continue
        current = rm.get_partition(s.topic, s.partition)
        if current is not None and s.leader_epoch <= current.leader_epoch:
            # Already applied (e.g. a new controller re-sending every state) or older.
            log.debug("ignoring LeaderAndIsr for %s-%d from controller %d: leader epoch %d "
                      "is not newer than %d", s.topic, s.partition, controller_id,
                      s.leader_epoch, current.leader_epoch)
            errors[tp] = int(ErrorCode.STALE_CONTROLLER_EPOCH)
            continue
        accepted.append(s)
    if accepted:
        errors.update(broker.apply_leader_and_isr(accepted, topic_ids))
    return 0, errors


def update_metadata(broker: Broker, controller_id: int, controller_epoch: int,
                    broker_epoch: int, brokers: list[BrokerInfo],
                    states: list[PartitionState], topic_ids: dict[str, uuid.UUID]) -> int:
    """Apply an UpdateMetadata request; returns its error code."""
    error = fence(broker, controller_epoch, broker_epoch)
    if error:
        return error
    broker.controller_epoch = controller_epoch
    deleted = {s.topic for s in states if s.leader == LEADER_DURING_DELETE}
    live = [s for s in states if s.leader != LEADER_DURING_DELETE]
    broker.apply_update_metadata(brokers, controller_id, live, topic_ids)
    for topic in deleted:
        broker.apply_topic_deletion(topic)
    return 0


def stop_replica(broker: Broker, controller_epoch: int, broker_epoch: int,
                 partitions: Iterable[tuple[TopicPartition, int, bool]]
                 ) -> tuple[int, dict[TopicPartition, int]]:
    """Apply a StopReplica request: ``partitions`` are (tp, leader epoch, delete)."""
    partitions = list(partitions)
    error = fence(broker, controller_epoch, broker_epoch)
    if error:
        return error, {tp: error for tp, _, _ in partitions}
    broker.controller_epoch = controller_epoch
    rm = broker.replica_manager
    assert rm is not None
    errors: dict[TopicPartition, int] = {}
    keep: list[TopicPartition] = []
    delete: list[TopicPartition] = []
    for tp, leader_epoch, remove in partitions:
        current = rm.get_partition(*tp)
        if (current is not None and leader_epoch not in (-1, EPOCH_DURING_DELETE)
                and leader_epoch < current.leader_epoch):
            errors[tp] = int(ErrorCode.FENCED_LEADER_EPOCH)
            continue
        (delete if remove else keep).append(tp)
        errors[tp] = 0
    if keep:
        broker.apply_stop_replica(keep, False)
    if delete:
        broker.apply_stop_replica(delete, True)
    return 0, errors


# -- wire entities -> values ----------------------------------------------------------------

#: Kafka's SecurityProtocol ids, as UpdateMetadata carries them.
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
SECURITY_PROTOCOL_IDS = {name: i for i, name in SECURITY_PROTOCOLS.items()}


def partition_state(topic: str, s: Any) -> PartitionState:
    """A LeaderAndIsr / UpdateMetadata partition state entity as a PartitionState."""
    return PartitionState(
        topic, int(s.partition_index), int(s.leader), int(s.leader_epoch),
        tuple(int(r) for r in s.replicas), tuple(int(r) for r in s.isr),
        int(s.controller_epoch), int(s.zk_version),
        offline_replicas=tuple(int(r) for r in getattr(s, "offline_replicas", ())),
        adding_replicas=tuple(int(r) for r in getattr(s, "adding_replicas", ())),
        removing_replicas=tuple(int(r) for r in getattr(s, "removing_replicas", ())),
    )


def request_partition_states(request: Any) -> tuple[list[PartitionState],
                                                      dict[str, uuid.UUID]]:
    """The partition states of a LeaderAndIsr or UpdateMetadata request (any version),
    and the topic ids it carries."""
    states: list[PartitionState] = []
    topic_ids: dict[str, uuid.UUID] = {}
    for s in getattr(request, "ungrouped_partition_states", ()):
        states.append(partition_state(s.topic_name, s))
    for t in getattr(request, "topic_states", ()):
        topic_id = getattr(t, "topic_id", None)
        if topic_id is not None and topic_id.int:
            topic_ids[t.topic_name] = topic_id
        for s in t.partition_states:
            states.append(partition_state(t.topic_name, s))
    return states, topic_ids
