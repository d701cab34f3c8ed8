"""This broker's view of the cluster: live brokers, topics, partition leaders and ISRs.

Filled only by UpdateMetadata from the controller (in standalone mode the in-process
controller calls ``update`` directly with the same content), read by Metadata, Produce,
Fetch and the admin handlers; listeners hear of each update once it is whole. Owned by
the event loop thread: no locking. Readers get
immutable values (PartitionState, BrokerInfo), replaced wholesale on each update, so a
handler never sees half an update.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    listener_name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None

    def endpoint(self, listener_name: str) -> BrokerEndpoint | None:
        for ep in self.endpoints:
            if ep.listener_name == listener_name:
                return ep
        return None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leader, epoch and replica sets of one partition, as the controller decided them."""

    topic: str
    partition: int
    leader: int  # -1: no leader (offline)
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    controller_epoch: int = 0
    zk_version: int = 0
    offline_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(slots=True)
class MetadataCache:
    broker_id: int
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)
    # topic -> partition -> state
    topics: dict[str, dict[int, PartitionState]] = field(default_factory=dict)
    # Changed only through update_partitions / set_topic_ids / remove_topic, which keep
    # _names_by_id (the reverse, for Fetch v13+'s per-request id lookups) in step.
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    _names_by_id: dict[uuid.UUID, str] = field(default_factory=dict)
    # Called after each whole update (the admin manager wakes requests waiting for topics).
    _listeners: list[Callable[[], None]] = field(default_factory=list)
    #: Whether the controller's view of the brokers has arrived (the first UpdateMetadata;
    #: standalone, the in-process controller's, before the broker serves). Until then a
    #: cluster-mode broker knows only itself, and the controller's id from ZooKeeper.
    from_controller: bool = False

    # -- updates (controller / UpdateMetadata) ---------------------------------------------

    def add_listener(self, on_changed: Callable[[], None]) -> None:
        self._listeners.append(on_changed)

    def changed(self) -> None:
        """An update is complete: tell the listeners."""
        for listener in self._listeners:
            listener()

    def update_brokers(self, brokers: Iterable[BrokerInfo], controller_id: int) -> None:
        self.brokers = {b.broker_id: b for b in brokers}
        self.controller_id = controller_id
        self.from_controller = True

    def update_partitions(self, states: Iterable[PartitionState],
                          topic_ids: dict[str, uuid.UUID] | None = None) -> None:
        for state in states:
            self.topics.setdefault(state.topic, {})[state.partition] = state
        if topic_ids:
            self.set_topic_ids(topic_ids)

    def set_topic_ids(self, topic_ids: dict[str, uuid.UUID]) -> None:
        """Topic ids as the controller assigned them (a re-created topic: a new id)."""
        for name, tid in topic_ids.items():
            old = self.topic_ids.get(name)
            if old is not None and self._names_by_id.get(old) == name:
                del self._names_by_id[old]
            self.topic_ids[name] = tid
            self._names_by_id[tid] = name

    def remove_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)
        tid = self.topic_ids.pop(topic, None)
        if tid is not None and self._names_by_id.get(tid) == topic:
            del self._names_by_id[tid]

    # -- reads ------------------------------------------------------------------------------

    def contains_topic(self, topic: str) -> bool:
        return topic in self.topics

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    def partitions(self, topic: str) -> dict[int, PartitionState]:
        return self.topics.get(topic, {})

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        parts = self.topics.get(topic)
        return None if parts is None else parts.get(partition)

    def alive_broker_ids(self) -> list[int]:
        return sorted(self.brokers)

    def alive_broker_racks(self) -> dict[int, str | None]:
        """Each live broker's rack (None: broker.rack unset), by broker id: what replica
        placement is given (Kafka's getAliveBrokers with their racks)."""
        return {b: self.brokers[b].rack for b in sorted(self.brokers)}

    def broker(self, broker_id: int) -> BrokerInfo | None:
        return self.brokers.get(broker_id)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        return self.topic_ids.get(topic)

    def topic_by_id(self, topic_id: uuid.UUID) -> str | None:
        return self._names_by_id.get(topic_id)
