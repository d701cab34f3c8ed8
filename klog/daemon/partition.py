"""Partition: one hosted replica -- its PartitionLog plus leader/follower state.

Owns the replica's role (leader or follower), the leader epoch, the replica set and ISR
the controller assigned, and the high watermark rule: on the leader the high watermark is
the smallest log end offset among the ISR (the leader's own, when the ISR is the leader
alone, as in standalone mode). Followers' fetch positions arrive through
``update_follower_fetch_state`` (replication, cluster mode). Everything runs on the event
loop thread; the PartitionLog has its own lock for off-loop flushes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from klog.daemon.metadata_cache import PartitionState
from klog.protocol.errors import ErrorCode, KafkaError
from klog.storage.log import LogAppendInfo, PartitionLog
from klog.storage.segment import FetchDataInfo


class NotLeaderOrFollowerError(KafkaError):
    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class NotEnoughReplicasError(KafkaError):
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS


class FencedLeaderEpochError(KafkaError):
    error_code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(KafkaError):
    error_code = ErrorCode.UNKNOWN_LEADER_EPOCH


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of a follower: its log end offset and when it caught up."""

    broker_id: int
    log_end_offset: int = -1
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0


@dataclass(slots=True)
class Partition:
    topic: str
    partition: int
    local_broker_id: int
    log: PartitionLog
    leader_id: int = -1
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    controller_epoch: int = 0
    zk_version: int = 0
    remote_replicas: dict[int, ReplicaState] = field(default_factory=dict)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    # -- role changes (LeaderAndIsr) --------------------------------------------------------

    def make_leader(self, state: PartitionState) -> bool:
        """Become leader for ``state``; True if this is a new leadership (epoch changed)."""
        new_epoch = state.leader_epoch != self.leader_epoch or not self.is_leader
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = state.replicas
        self.isr = state.isr
        self.controller_epoch = state.controller_epoch
        self.zk_version = state.zk_version
        now = int(time.time() * 1000)
        self.remote_replicas = {
            r: self.remote_replicas.get(r, ReplicaState(r, last_caught_up_time_ms=now))
            for r in state.replicas if r != self.local_broker_id
        }
        if new_epoch:
            # As Kafka: the new epoch starts at the current log end offset.
            self.log.leader_epoch_cache.assign(state.leader_epoch, self.log.log_end_offset)
        self.maybe_increment_high_watermark()
        return new_epoch

    def make_follower(self, state: PartitionState) -> bool:
        changed = state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = state.replicas
        self.isr = state.isr
        self.controller_epoch = state.controller_epoch
        self.zk_version = state.zk_version
        self.remote_replicas = {}
        return changed

    # -- leader side ------------------------------------------------------------------------

    def append_records_to_leader(
        self, records: bytes | bytearray | memoryview, required_acks: int,
        min_insync_replicas: int, origin: str = "client",
    ) -> LogAppendInfo:
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.partition}"
            )
        if required_acks == -1 and len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"the size of the ISR {list(self.isr)} is below min.insync.replicas "
                f"({min_insync_replicas}) for {self.topic}-{self.partition}"
            )
        info = self.log.append_as_leader(records, self.leader_epoch, origin=origin)
        self.maybe_increment_high_watermark()
        return info

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the lowest log end offset of the ISR; True if moved."""
        if not self.is_leader:
            return False
        hw = self.log.log_end_offset
        for replica_id in self.isr:
            if replica_id == self.local_broker_id:
                continue
            remote = self.remote_replicas.get(replica_id)
            hw = min(hw, remote.log_end_offset if remote is not None else -1)
        if hw > self.log.high_watermark:
            self.log.update_high_watermark(hw)
            return True
        return False

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Kafka's fencing of requests that carry the epoch the client believes current."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"leader epoch {current_leader_epoch} is older than {self.leader_epoch}"
            )
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"leader epoch {current_leader_epoch} is newer than {self.leader_epoch}"
            )

    def read(self, fetch_offset: int, max_bytes: int, *, isolation_committed: bool,
             from_follower: bool, min_one_message: bool) -> FetchDataInfo:
        """Batches from ``fetch_offset``: consumers see up to the high watermark (or the last
        stable offset under read_committed), followers up to the log end offset."""
        if from_follower:
            max_offset = None
        elif isolation_committed:
            max_offset = self.last_stable_offset
        else:
            max_offset = self.log.high_watermark
        return self.log.read(fetch_offset, max_bytes, max_offset, min_one_message,
                             include_aborted_txns=isolation_committed)

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.log.producer_state.first_unstable_offset
        hw = self.log.high_watermark
        return hw if first_unstable is None else min(hw, first_unstable)
