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
what serialises it; the controller epoch is only touched here.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from klog.daemon.metadata_cache import BrokerInfo, MetadataCache, PartitionState
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.replica_manager import ReplicaManager
    from klog.daemon.topic_configs import TopicConfigs

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: Kafka's LeaderAndIsr.LeaderDuringDelete: the partition's topic is being deleted.
LEADER_DURING_DELETE = -2
#: Kafka's LeaderAndIsr.EpochDuringDelete (StopReplica v3 leader epoch of a deletion).
EPOCH_DURING_DELETE = -2
#: AbstractControlRequest.UNKNOWN_BROKER_EPOCH.
UNKNOWN_BROKER_EPOCH = -1


class LeadershipListener(Protocol):
    """Told of leadership changes after they are applied (the group metadata manager loads
    and unloads the offsets partitions it leads: Kafka's onLeadershipChange)."""

    def on_leader_and_isr(self, states: list[PartitionState],
                          errors: dict[TopicPartition, int]) -> None: ...

    def on_stop_replica(self, tps: list[TopicPartition]) -> None: ...


class ControlRequestReceiver:
    """This broker's side of LeaderAndIsr, UpdateMetadata and StopReplica (module docstring):
    the controller and broker epochs it fences with, and the components a decision reaches."""

    def __init__(self, broker_id: int, replica_manager: ReplicaManager,
                 metadata_cache: MetadataCache, topic_configs: TopicConfigs) -> None:
        self.broker_id = broker_id
        self.replica_manager = replica_manager
        self.metadata_cache = metadata_cache
        self.topic_configs = topic_configs
        #: The newest controller epoch obeyed.
        self.controller_epoch = -1
        #: This broker's epoch: the czxid of its /brokers/ids registration (set by the
        #: broker when it registers).
        self.broker_epoch = -1
        self._listeners: list[LeadershipListener] = []

    def add_leadership_listener(self, listener: LeadershipListener) -> None:
        self._listeners.append(listener)

    def fence(self, controller_epoch: int, broker_epoch: int) -> int:
        """The error that refuses this control request, or 0 (NONE) to obey it."""
        if broker_epoch != UNKNOWN_BROKER_EPOCH and broker_epoch < self.broker_epoch:
            log.warning("ignoring a controller request for broker epoch %d (current %d)",
                        broker_epoch, self.broker_epoch)
            return int(ErrorCode.STALE_BROKER_EPOCH)
        if controller_epoch < self.controller_epoch:
            log.warning("ignoring a request from controller epoch %d: the latest known is %d",
                        controller_epoch, self.controller_epoch)
            return int(ErrorCode.STALE_CONTROLLER_EPOCH)
        return 0

    def controller_elected(self, epoch: int) -> None:
        """This broker won the controller election at ``epoch``."""
        self.controller_epoch = max(self.controller_epoch, epoch)

    # -- LeaderAndIsr ------------------------------------------------------------------------

    async def prepare_logs(self, states: Iterable[PartitionState]) -> None:
        """Before a LeaderAndIsr is applied: create the logs it will need here, off the
        event loop (klog/daemon/replica_manager.py ``create_logs``)."""
        mine = [s for s in states if self.broker_id in s.replicas]
        # The logs are made with their topics' configs.
        self.topic_configs.load_missing({s.topic for s in mine})
        await self.replica_manager.create_logs(mine)

    async def handle_leader_and_isr(self, controller_id: int, controller_epoch: int,
                                    broker_epoch: int, states: list[PartitionState],
                                    topic_ids: dict[str, uuid.UUID]
                                    ) -> tuple[int, dict[TopicPartition, int]]:
        """A LeaderAndIsr from the wire: fence, make the new logs off the event loop
        (thousands of files), then apply."""
        if self.fence(controller_epoch, broker_epoch) == 0:
            await self.prepare_logs(states)
        return self.leader_and_isr(controller_id, controller_epoch, broker_epoch, states,
                                   topic_ids)

    def leader_and_isr(self, controller_id: int, controller_epoch: int, broker_epoch: int,
                       states: list[PartitionState], topic_ids: dict[str, uuid.UUID]
                       ) -> tuple[int, dict[TopicPartition, int]]:
        """Apply a LeaderAndIsr request: (top-level error, error per partition)."""
        error = self.fence(controller_epoch, broker_epoch)
        if error:
            return error, {(s.topic, s.partition): error for s in states}
        self.controller_epoch = controller_epoch
        rm = self.replica_manager
        errors: dict[TopicPartition, int] = {}
        accepted: list[PartitionState] = []
        for s in states:
            tp = (s.topic, s.partition)
            if self.broker_id not in s.replicas:
                errors[tp] = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            current = rm.get_partition(s.topic, s.partition)
            if current is not None and s.leader_epoch <= current.leader_epoch:
                # Already applied (e.g. a new controller re-sending every state) or older.
                log.debug("ignoring LeaderAndIsr for %s-%d from controller %d: leader epoch "
                          "%d is not newer than %d", s.topic, s.partition, controller_id,
                          s.leader_epoch, current.leader_epoch)
                errors[tp] = int(ErrorCode.STALE_CONTROLLER_EPOCH)
                continue
            accepted.append(s)
        if accepted:
            errors.update(self.become_leader_or_follower(accepted, topic_ids))
        return 0, errors

    def become_leader_or_follower(self, states: list[PartitionState],
                                  topic_ids: dict[str, uuid.UUID]) -> dict[TopicPartition, int]:
        """Take the roles the controller decided (creating logs as needed), past fencing."""
        self.topic_configs.load_missing({s.topic for s in states})
        errors = self.replica_manager.become_leader_or_follower(states)
        self.metadata_cache.set_topic_ids(topic_ids)
        for listener in self._listeners:
            listener.on_leader_and_isr(states, errors)
        return errors

    # -- UpdateMetadata ----------------------------------------------------------------------

    def update_metadata(self, controller_id: int, controller_epoch: int, broker_epoch: int,
                        brokers: list[BrokerInfo], states: list[PartitionState],
                        topic_ids: dict[str, uuid.UUID]) -> int:
        """Apply an UpdateMetadata request; returns its error code."""
        error = self.fence(controller_epoch, broker_epoch)
        if error:
            return error
        self.controller_epoch = controller_epoch
        deleted = {s.topic for s in states if s.leader == LEADER_DURING_DELETE}
        live = [s for s in states if s.leader != LEADER_DURING_DELETE]
        cache = self.metadata_cache
        cache.update_brokers(brokers, controller_id)
        cache.update_partitions(live, topic_ids)
        for topic in deleted:
            self.topic_deleted(topic)
        cache.changed()
        return 0

    def topic_deleted(self, topic: str) -> None:
        """The topic is gone from the cluster: forget its metadata and configs."""
        self.metadata_cache.remove_topic(topic)
        self.topic_configs.remove(topic)
        self.metadata_cache.changed()

    # -- StopReplica -------------------------------------------------------------------------

    def stop_replica(self, controller_epoch: int, broker_epoch: int,
                     partitions: Iterable[tuple[TopicPartition, int, bool]]
                     ) -> tuple[int, dict[TopicPartition, int]]:
        """Apply a StopReplica request: ``partitions`` are (tp, leader epoch, delete)."""
        partitions = list(partitions)
        error = self.fence(controller_epoch, broker_epoch)
        if error:
            return error, {tp: error for tp, _, _ in partitions}
        self.controller_epoch = controller_epoch
        rm = self.replica_manager
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
            self.stop_replicas(keep, False)
        if delete:
            self.stop_replicas(delete, True)
        return 0, errors

    def stop_replicas(self, tps: list[TopicPartition], delete: bool) -> None:
        """Stop hosting (and with ``delete``, delete) these replicas, past fencing."""
        for listener in self._listeners:
            listener.on_stop_replica(tps)
        self.replica_manager.stop_replicas(tps, delete)


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
