"""Partition: one hosted replica -- its PartitionLog plus leader/follower state.

Owns the replica's role (leader or follower), the leader epoch, the replica set and ISR
the controller assigned, and the high watermark rule: on the leader the high watermark is
the smallest log end offset among the ISR (the leader's own, when the ISR is the leader
alone, as in standalone mode); on a follower it is min(the leader's, its own log end
offset), set by the replica fetcher.

Leader side of replication (Kafka's Partition.scala): followers' fetch positions arrive
through ``update_follower_fetch_state`` (Fetch with a replica id); a follower that reaches
the high watermark (and this leader's epoch start) joins the ISR, one that has not caught
up for replica.lag.time.max.ms leaves it (``maybe_shrink_isr``). An ISR change is only
*proposed* here: ``isr_updater`` (klog/daemon/isr.py's IsrManager) writes it to the partition state
znode with compare-and-set and calls ``complete_isr_update``. While a change is pending,
the high watermark is computed over the union of the old and proposed ISR (Kafka's
"maximal ISR"), so it never advances on the strength of a change not yet committed.

Fetches (``read``) stop where their FetchIsolation says: followers at the log end offset,
consumers at the high watermark, read_committed ones at the last stable offset;
``end_offset_metadata`` places that end in a segment, for the waiting fetches
(klog/daemon/delayed.py) to compare their position with. A leader also answers the
replica's questions that Kafka's Partition answers: OffsetForLeaderEpoch
(``last_offset_for_leader_epoch``), ListOffsets by timestamp
(``fetch_offset_for_timestamp``, which decodes the one batch the time index leads to),
DescribeProducers (``active_producers``) and a consumer's preferred read replica (KIP-392).

A leader's append (``append_records_to_leader``) takes records validated by
klog/storage/validator.py (or validates them through the log).

Everything runs on the event loop thread; the PartitionLog has its own lock for off-loop
flushes.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Protocol

from klog.daemon.metadata_cache import PartitionState
from klog.daemon.replica_selector import ClientMetadata, ReplicaView
from klog.protocol.errors import ErrorCode, KafkaError, OffsetOutOfRangeError
from klog.protocol.records.batch import MAGIC_V2, read_batch_header
from klog.protocol.records.decode import iter_records as iter_any_records
from klog.protocol.records.v2 import record_columns
from klog.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from klog.storage.log import MAX_TIMESTAMP, LogAppendInfo, PartitionLog
from klog.storage.producer_state import VerificationGuard
from klog.storage.validator import RecordsBuffer, ValidatedRecords
from klog.storage.values import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset

log = logging.getLogger(__name__)


class NotLeaderOrFollowerError(KafkaError):
    error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class NotEnoughReplicasError(KafkaError):
    error_code = ErrorCode.NOT_ENOUGH_REPLICAS


class FencedLeaderEpochError(KafkaError):
    error_code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(KafkaError):
    error_code = ErrorCode.UNKNOWN_LEADER_EPOCH


class FetchIsolation(enum.Enum):
    """How far a fetch may read (Kafka's FetchIsolation): a follower to the log end offset,
    a consumer to the high watermark, a read_committed consumer to the last stable offset."""

    LOG_END = "log end"
    HIGH_WATERMARK = "high watermark"
    TXN_COMMITTED = "last stable offset"


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of a follower: its log end offset and when it caught up."""

    broker_id: int
    log_end_offset: int = -1
    # As the follower's fetches say (Fetch v5+); -1 unknown. KIP-392's read replica
    # choice needs a follower's log to cover the consumer's offset.
    log_start_offset: int = -1
    last_caught_up_time_ms: int = 0
    last_fetch_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = 0

    def update_fetch_state(self, fetch_offset: int, leader_end_offset: int,
                           now_ms: int) -> None:
        # Kafka's Replica.updateFetchState: a fetch from the leader's log end offset means
        # caught up now; a fetch reaching the log end offset the *previous* fetch saw means
        # the follower was caught up as of that previous fetch.
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms,
                                              self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms

    def is_caught_up(self, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
        return (self.log_end_offset == leader_end_offset
                or now_ms - self.last_caught_up_time_ms <= max_lag_ms)


def _now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaSelector(Protocol):
    """KIP-392's choice of a consumer's read replica
    (klog.daemon.replica_selector.RackAwareReplicaSelector)."""

    def preferred_read_replica(self, client: ClientMetadata, leader: ReplicaView,
                               followers: Iterable[ReplicaView]) -> int | None: ...


@dataclass(frozen=True, slots=True)
class ProducerStateInfo:
    """One producer's state in a partition, as DescribeProducers answers it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction


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
    # The ISR change being written (None: none); see the module docstring.
    pending_isr: tuple[int, ...] | None = None
    # Proposes an ISR change: (partition, new ISR) -> None; it must end with a call to
    # complete_isr_update. None: changes apply at once (no metastore, e.g. unit tests).
    isr_updater: Callable[[Partition, tuple[int, ...]], None] | None = None
    # Offset at which this replica's current leadership began (the leader epoch's start).
    leader_epoch_start_offset: int = -1
    # The topic's produce counts (klog/daemon/metrics/counters.py BrokerTopicMetrics),
    # added to by the replica manager's appends; None when metrics are off.
    topic_counts: list[int] | None = None

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
        new_leader = not self.is_leader
        new_epoch = state.leader_epoch != self.leader_epoch or new_leader
        self._take_state(state)
        self.pending_isr = None
        now = _now_ms()
        if new_epoch:
            # As Kafka's resetReplicaState: followers in the ISR count as caught up now
            # (else they would be shrunk out at once), the others not. A new leader knows
            # nothing of its followers' positions; a leader that stays (the controller
            # shrank the ISR, e.g. of a dead broker) keeps them, so the high watermark
            # moves over the new ISR at once instead of after the followers' next fetch.
            kept = {} if new_leader else self.remote_replicas
            self.remote_replicas = {}
            for r in state.replicas:
                if r == self.local_broker_id:
                    continue
                caught_up = now if r in state.isr else 0
                old = kept.get(r)
                self.remote_replicas[r] = ReplicaState(r, last_caught_up_time_ms=caught_up) \
                    if old is None else replace(old, last_caught_up_time_ms=caught_up)
            # The new epoch starts at the current log end offset.
            self.leader_epoch_start_offset = self.log.log_end_offset
            if state.leader_epoch >= 0:
                self.log.leader_epoch_cache.assign(state.leader_epoch,
                                                   self.leader_epoch_start_offset)
        else:
            self.remote_replicas = {
                r: self.remote_replicas.get(r) or ReplicaState(
                    r, last_caught_up_time_ms=now if r in state.isr else 0)
                for r in state.replicas if r != self.local_broker_id
            }
        self.maybe_increment_high_watermark()
        return new_epoch

    def _take_state(self, state: PartitionState) -> None:
        """The controller's decision for this partition, leader or follower."""
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.replicas = state.replicas
        self.isr = state.isr
        self.controller_epoch = state.controller_epoch
        self.zk_version = state.zk_version

    def make_follower(self, state: PartitionState) -> bool:
        changed = state.leader != self.leader_id or state.leader_epoch != self.leader_epoch
        self._take_state(state)
        self.remote_replicas = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = -1
        return changed

    # -- follower side ----------------------------------------------------------------------

    def append_records_to_follower(self, records: bytes | bytearray | memoryview,
                                   leader_high_watermark: int,
                                   leader_log_start_offset: int) -> LogAppendInfo | None:
        """A replica fetch's data: append as is, then the follower's high watermark is
        min(the leader's, our log end offset), and the log start follows the leader's."""
        info = None
        if records:
            info = self.log.append_as_follower(records)
        self.update_follower_high_watermark(leader_high_watermark)
        if leader_log_start_offset > self.log.log_start_offset:
            try:
                self.log.maybe_increment_log_start_offset(
                    min(leader_log_start_offset, self.log.high_watermark))
            except KafkaError as exc:
                log.debug("log start of %s-%d not moved: %s", self.topic, self.partition, exc)
        return info

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        if leader_high_watermark >= 0:
            self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))

    # -- leader side ------------------------------------------------------------------------

    def append_records_to_leader(
        self, records: ValidatedRecords | RecordsBuffer, required_acks: int,
        min_insync_replicas: int, verification_guard: VerificationGuard | None = None,
    ) -> LogAppendInfo:
        """Append on the leader (Kafka's Partition.appendRecordsToLeader): ``records``
        validated (storage/validator.py), or a client's, which the log validates."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.partition}"
            )
        if required_acks == -1 and len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"the size of the ISR {list(self.isr)} is below min.insync.replicas "
                f"({min_insync_replicas}) for {self.topic}-{self.partition}"
            )
        info = self.log.append_as_leader(records, self.leader_epoch,
                                         verification_guard=verification_guard)
        self.maybe_increment_high_watermark()
        return info

    def maybe_start_transaction_verification(self, producer_id: int, sequence: int,
                                             epoch: int) -> VerificationGuard:
        """KIP-890 on the leader (Kafka's Partition.maybeStartTransactionVerification):
        see ``PartitionLog.maybe_start_transaction_verification``."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(
                f"broker {self.local_broker_id} is not the leader of {self.topic}-{self.partition}"
            )
        return self.log.maybe_start_transaction_verification(producer_id, sequence, epoch)

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the lowest log end offset of the ISR; True if moved."""
        if not self.is_leader:
            return False
        hw = self.log.log_end_offset
        isr = self.isr if self.pending_isr is None else self.maximal_isr
        for replica_id in isr:
            if replica_id == self.local_broker_id:
                continue
            remote = self.remote_replicas.get(replica_id)
            hw = min(hw, remote.log_end_offset if remote is not None else -1)
        if hw > self.log.high_watermark:
            self.log.update_high_watermark(hw)
            return True
        return False

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR, plus the members of a pending change (Kafka's maximal ISR)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int,
                                    leader_end_offset: int, now_ms: int | None = None,
                                    log_start_offset: int = -1) -> bool | None:
        """A follower fetched from ``fetch_offset``: record its position (and its log start
        offset, when the fetch says it), maybe add it to the ISR, maybe move the high
        watermark. None if ``replica_id`` is not a replica of this partition (Kafka then
        answers with empty records); else whether the HW moved."""
        remote = self.remote_replicas.get(replica_id)
        if remote is None or not self.is_leader:
            return None
        if log_start_offset >= 0:
            remote.log_start_offset = log_start_offset
        remote.update_fetch_state(fetch_offset, leader_end_offset,
                                  _now_ms() if now_ms is None else now_ms)
        self.maybe_expand_isr(remote)
        return self.maybe_increment_high_watermark()

    def maybe_expand_isr(self, remote: ReplicaState) -> None:
        """Kafka's isFollowerInSync: at or past the high watermark and this leader's epoch
        start -- then propose the ISR with the follower added."""
        if (self.pending_isr is not None or remote.broker_id in self.isr
                or remote.broker_id not in self.replicas):
            return
        end = remote.log_end_offset
        if end >= self.log.high_watermark and end >= self.leader_epoch_start_offset >= 0:
            log.info("expanding the ISR of %s-%d from %s to %s", self.topic, self.partition,
                     list(self.isr), [*self.isr, remote.broker_id])
            self.propose_isr((*self.isr, remote.broker_id))

    def out_of_sync_replicas(self, max_lag_ms: int, now_ms: int | None = None) -> list[int]:
        now = _now_ms() if now_ms is None else now_ms
        end = self.log.log_end_offset
        out = []
        for replica_id in self.isr:
            if replica_id == self.local_broker_id:
                continue
            remote = self.remote_replicas.get(replica_id)
            if remote is None or not remote.is_caught_up(end, now, max_lag_ms):
                out.append(replica_id)
        return out

    def maybe_shrink_isr(self, max_lag_ms: int, now_ms: int | None = None) -> bool:
        """Propose the ISR without the followers that have not caught up within
        ``max_lag_ms`` (replica.lag.time.max.ms); True if a change was proposed."""
        if not self.is_leader or self.pending_isr is not None:
            return False
        out = self.out_of_sync_replicas(max_lag_ms, now_ms)
        if not out:
            return False
        new_isr = tuple(r for r in self.isr if r not in out)
        log.info("shrinking the ISR of %s-%d from %s to %s (out of sync: %s; high watermark "
                 "%d, log end offset %d)", self.topic, self.partition, list(self.isr),
                 list(new_isr), out, self.log.high_watermark, self.log.log_end_offset)
        self.propose_isr(new_isr)
        return True

    def propose_isr(self, new_isr: tuple[int, ...]) -> None:
        if self.isr_updater is None:
            self.isr = new_isr
            self.maybe_increment_high_watermark()
            return
        self.pending_isr = new_isr
        self.isr_updater(self, new_isr)

    def complete_isr_update(self, new_isr: tuple[int, ...], leader_epoch: int,
                            zk_version: int | None) -> bool:
        """The write of a proposed ISR finished: ``zk_version`` is the znode's new version,
        or None when the compare-and-set failed (the controller changed the state: its
        LeaderAndIsr will tell us). Returns whether the high watermark moved."""
        if self.pending_isr != new_isr or leader_epoch != self.leader_epoch:
            return False  # a LeaderAndIsr overtook the write; it is authoritative
        self.pending_isr = None
        if zk_version is None:
            return False
        self.isr = new_isr
        self.zk_version = zk_version
        return self.maybe_increment_high_watermark()

    def check_enough_replicas_reach_offset(self, required_offset: int,
                                           min_insync_replicas: int) -> tuple[bool, int]:
        """Kafka's checkEnoughReplicasReachOffset for DelayedProduce: (done, error code)."""
        if not self.is_leader:
            return True, int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if self.log.high_watermark >= required_offset:
            if len(self.maximal_isr) >= min_insync_replicas:
                return True, 0
            return True, int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        return False, 0

    def fetch_offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets' lookup (Kafka's Partition.fetchOffsetForTimestamp): earliest (-2),
        latest (-1), max timestamp (-3), or the first record whose timestamp is >=
        ``timestamp``.

        Kafka answers with the exact record, not the batch holding it: a timestamp lookup
        decodes the records of the one batch the time index leads to, and the max-timestamp
        answer is the first record of its batch carrying that timestamp. These are the only
        reads that look inside batches, one batch per lookup.
        """
        plog = self.log
        if timestamp >= 0:
            return plog.fetch_offset_by_timestamp(timestamp, _record_offsets_and_timestamps)
        found = plog.fetch_offset_by_timestamp(timestamp)
        if timestamp != MAX_TIMESTAMP or found is None or found.offset < 0:
            return found
        try:
            region = plog.read(found.offset, 1, None, True)
        except OffsetOutOfRangeError:  # removed by retention meanwhile
            return found
        data = region.read_bytes()
        if not data:
            return found
        for offset, ts in _record_offsets_and_timestamps(data):
            if ts == found.timestamp:
                return TimestampAndOffset(ts, offset, found.leader_epoch)
        return found

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int
                                     ) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch: (error code, leader epoch, end offset) -- the largest epoch
        <= ``leader_epoch`` this leader knows and where it ends (Kafka's
        Partition.lastOffsetForLeaderEpoch, leader only)."""
        try:
            # as Kafka: only -1 means "no epoch given"
            self.check_leader_epoch(current_leader_epoch, only_minus_one_absent=True)
            if not self.is_leader:
                raise NotLeaderOrFollowerError(
                    f"not the leader of {self.topic}-{self.partition}")
        except KafkaError as exc:
            return int(exc.error_code), UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        epoch, end = self.log.leader_epoch_cache.end_offset_for(leader_epoch,
                                                                 self.log_end_offset)
        if end == UNDEFINED_EPOCH_OFFSET:
            return 0, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return 0, epoch, end

    def active_producers(self) -> list[ProducerStateInfo]:
        """The producer state of this replica's log, leader or follower (Kafka's
        activeProducerState reads the local log), by producer id."""
        producers = self.log.producer_state.active_producers()
        return [
            ProducerStateInfo(
                pid, entry.producer_epoch, entry.last_seq, entry.last_timestamp,
                entry.coordinator_epoch,
                -1 if entry.current_txn_first_offset is None
                else entry.current_txn_first_offset)
            for pid, entry in sorted(producers.items())]

    def preferred_read_replica(self, selector: ReplicaSelector, client: ClientMetadata,
                               fetch_offset: int, now: int) -> int | None:
        """Kafka's findPreferredReadReplica on a leader: ``selector`` picks among the
        leader and the in-sync followers whose log covers ``fetch_offset``."""
        followers = []
        for broker_id in self.isr:
            state = self.remote_replicas.get(broker_id)
            if state is not None and state.log_start_offset <= fetch_offset \
                    <= state.log_end_offset:
                followers.append(ReplicaView(broker_id, state.log_end_offset,
                                             now - state.last_caught_up_time_ms))
        leader = ReplicaView(self.local_broker_id, self.log_end_offset, 0)
        return selector.preferred_read_replica(client, leader, followers)

    def check_leader_epoch(self, current_leader_epoch: int, *,
                           only_minus_one_absent: bool = False) -> None:
        """Kafka's fencing of requests that carry the epoch the client believes current.

        Fetch takes any negative epoch for "none given" (Kafka's FetchRequest.optionalEpoch);
        ListOffsets and OffsetForLeaderEpoch only -1 (``only_minus_one_absent``): there
        another negative epoch is older than any leader's, so FENCED_LEADER_EPOCH.
        """
        if current_leader_epoch == -1 or (current_leader_epoch < 0
                                          and not only_minus_one_absent):
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

    def end_offset_metadata(self, isolation: FetchIsolation) -> LogOffsetMetadata:
        """Where a fetch of this ``isolation`` may read up to, with its segment and position
        (Kafka's fetchOffsetSnapshot): what a waiting fetch compares its position with."""
        plog = self.log
        if isolation is FetchIsolation.LOG_END:
            return plog.log_end_offset_metadata
        if isolation is FetchIsolation.TXN_COMMITTED:
            return plog.offset_metadata(self.last_stable_offset)
        return plog.offset_metadata(plog.high_watermark)

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.log.producer_state.first_unstable_offset
        hw = self.log.high_watermark
        return hw if first_unstable is None else min(hw, first_unstable)


def _record_offsets_and_timestamps(batch: bytes) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of the first batch in ``batch`` (the record
    locator of timestamp lookups): column-wise for v2, record by record for v0/v1."""
    header = read_batch_header(batch, 0)
    if header.magic == MAGIC_V2:
        columns = record_columns(batch, header)
        return zip(columns.offsets, columns.timestamps, strict=True)
    return ((r.offset, r.timestamp) for r in iter_any_records(batch, header))
