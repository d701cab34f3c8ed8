"""Follower fetching (KIP-392): which replica a consumer should read a partition from.

Owns ``replica.selector.class``: Kafka ships one selector, ``RackAwareReplicaSelector``, and
so does klog (``selector_for`` refuses other names; the broker config refuses them first).
A consumer's Fetch v11+ carries its ``client.rack`` (``ClientMetadata``); the leader of a
partition, when a selector is configured, asks it which replica the consumer should read
from. Kafka's rules (ReplicaManager.findPreferredReadReplica, RackAwareReplicaSelector):

- candidates are the leader and the followers in the ISR whose log reaches the fetch
  offset (log end offset >= fetch offset >= their log start offset);
- a replica counts only when its broker is alive with an endpoint on the listener the
  consumer came on (its rack is that endpoint's);
- a consumer without a rack, or with a rack no candidate has, reads from the leader; a
  rack that holds the leader keeps the leader; otherwise the most caught-up follower in
  the rack (largest log end offset, then the one caught up most recently);
- the leader itself is never named as the preferred read replica (the answer is then "no
  preferred replica": the consumer keeps reading from the leader).

The replica manager (klog/daemon/replica_manager.py) asks on each consumer fetch of a
partition it leads, and answers a partition that has a preferred replica with no records
and that replica's id; the consumer then fetches from the follower, which serves it up to
its own high watermark. No I/O: broker racks come from the metadata cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.daemon.config.specs import RACK_AWARE_REPLICA_SELECTOR

if TYPE_CHECKING:
    from klog.daemon.metadata_cache import MetadataCache


@dataclass(frozen=True, slots=True)
class ClientMetadata:
    """What a consumer's Fetch v11+ tells of it (Kafka's ClientMetadata): its rack
    ("" when it has none) and the listener it came on."""

    rack_id: str
    listener_name: str


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One candidate replica (Kafka's ReplicaView): how far its log reaches, and how long
    ago it was last caught up with the leader (0 for the leader)."""

    broker_id: int
    log_end_offset: int
    time_since_last_caught_up_ms: int


class RackAwareReplicaSelector:
    """Kafka's org.apache.kafka.common.replica.RackAwareReplicaSelector over the racks the
    metadata cache knows (see the module docstring)."""

    class_name = RACK_AWARE_REPLICA_SELECTOR

    def __init__(self, metadata_cache: MetadataCache) -> None:
        self.metadata_cache = metadata_cache

    def preferred_read_replica(self, client: ClientMetadata, leader: ReplicaView,
                               followers: Iterable[ReplicaView]) -> int | None:
        """The follower ``client`` should read from, or None for the leader. ``followers``
        are the in-sync followers whose log covers the fetch offset."""
        rack = client.rack_id
        if not rack:
            return None
        cache = self.metadata_cache
        listener = client.listener_name

        def rack_of(broker_id: int) -> str | None:
            info = cache.broker(broker_id)
            if info is None or info.endpoint(listener) is None:
                return None  # no endpoint to send the consumer to (Node.noNode)
            return info.rack

        if rack_of(leader.broker_id) == rack:
            return None
        best: ReplicaView | None = None
        for view in followers:
            if rack_of(view.broker_id) != rack:
                continue
            if best is None or (view.log_end_offset, -view.time_since_last_caught_up_ms) > (
                    best.log_end_offset, -best.time_since_last_caught_up_ms):
                best = view
        return None if best is None else best.broker_id


def selector_for(class_name: str | None, metadata_cache: MetadataCache
                 ) -> RackAwareReplicaSelector | None:
    """The selector ``replica.selector.class`` names (None when unset: consumers read from
    leaders). Any other class is refused: BrokerConfig refuses it before this is asked."""
    if not class_name:
        return None
    if class_name != RACK_AWARE_REPLICA_SELECTOR:
        raise ValueError(f"replica.selector.class={class_name} is not a replica selector "
                         f"klog has; use {RACK_AWARE_REPLICA_SELECTOR}")
    return RackAwareReplicaSelector(metadata_cache)
