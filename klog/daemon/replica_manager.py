"""ReplicaManager: the partitions this broker hosts, and produce and fetch against them.

Owns the map of hosted Partitions and applies LeaderAndIsr / StopReplica decisions from the
controller. Owns produce and fetch end to end, as Kafka's ReplicaManager: the handlers hand
it a request's partitions and await the answer.

Produce (``produce``; ``append_records`` for the broker's own appends): validates batches
the way Kafka's LogValidator does (magic, sizes, timestamps, and every record:
klog/protocol/records/validate.py), recompresses when the topic's compression.type asks for
a codec other than the producer's, appends, and for acks=-1 parks a DelayedProduce in the
produce purgatory until the ISR has the records (``wait_for_isr``). A transactional
produce is first verified (KIP-890 part 1, ``transaction.partition.verification.enable``):
each partition whose log has no ongoing transaction of the producer yet gets a
verification guard from its log, ``txn_verifier`` asks the transaction coordinator whether
the partition is in the producer's ongoing transaction, and only the partitions it confirms
are appended, each with its guard (a marker written meanwhile voids the guard, so the late
write is refused instead of opening a transaction nobody will end). Runs on the event loop
thread, except the record checks that would hold it (inflating a compressed batch,
recompressing, a big uncompressed walk): those run in the record checker's two threads,
and the appends they precede still happen on the loop, in each partition's arrival order.

Fetch (``fetch_messages``; ``read`` for one partition): reads every partition within the
request's bytes, records a follower's position (which may grow the ISR and move the high
watermark), holds back what the leader's replication throttle says (``leader_quota``,
klog/daemon/replication_quota.py), and with less than min_bytes parks a DelayedFetch
(klog/daemon/delayed.py) in the fetch purgatory: it is completed by comparing offsets, and
reads the log once more only when it completes.

Both purgatories run on one Timer (klog/daemon/purgatory.py) and are completed from here:
an append tries the fetches waiting on its partition; any high watermark move (a
follower's fetch, an ISR change, a new leadership) and a lost leadership try the waiting
produces and fetches (Kafka's tryCompleteDelayedRequests).

Replication (cluster mode): LeaderAndIsr hands follower partitions to the replica fetchers
(``fetcher_manager``, klog/daemon/replica_fetcher.py) and takes leaders away from them;
ISR changes the partitions propose are written through ``isr_store`` (compare-and-set on
the partition state znode) off the loop, and the partitions whose ISR changed are announced
under /isr_change_notification in batches (Kafka's blackout of 5 s / at most every 60 s,
checked every 2.5 s).

Logs are created off the event loop: ``create_logs`` makes the missing logs of the
partitions a LeaderAndIsr is about to hand this broker in worker threads,
``LOG_CREATION_BATCH`` at a time, before the decision is applied (thousands of partitions
are thousands of directories and files: seconds of disk work). A log that cannot be made
(a full disk, no descriptors left) is reported in ``log_creation_failures`` and answered
KAFKA_STORAGE_ERROR, for LeaderAndIsr and for the CreateTopics that asked for it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import struct
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from klog.daemon.delayed import DelayedFetch, DelayedProduce, FetchKey, FetchParams
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import BadVersionError, MetadataStore, MetastoreError, NoNodeError
from klog.daemon.metrics.counters import BYTES_IN, MESSAGES_IN, TOTAL_PRODUCE
from klog.daemon.partition import FetchIsolation, NotLeaderOrFollowerError, Partition
from klog.daemon.purgatory import DelayedOperationPurgatory, Timer
from klog.daemon.replica_selector import ClientMetadata, ReplicaView
from klog.daemon.replication_quota import ReplicationQuotaManager
from klog.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    RecordError,
    RecordTooLargeError,
)
from klog.protocol.records.batch import (
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    MAGIC_V2,
    RECORD_BATCH_OVERHEAD,
    CompressionType,
    TimestampType,
    iter_batch_headers,
    read_batch_header,
)
from klog.protocol.records.convert import down_convert, is_legacy, up_convert
from klog.protocol.records.decode import iter_records as iter_any_records
from klog.protocol.records.v2 import MIN_RECORD_SIZE, record_columns
from klog.protocol.records.validate import (
    CheckedBatch,
    check_batch,
    check_records,
    recompressed,
)
from klog.protocol.records.validate import native as native_record_check
from klog.storage.config import LogConfig
from klog.storage.log import LogAppendInfo
from klog.storage.log_manager import LogManager
from klog.storage.producer_state import VerificationGuard
from klog.storage.values import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset

if TYPE_CHECKING:
    from klog.daemon.metrics.counters import BrokerTopicMetrics, IsrMetrics

# batchLength (@8), magic (@16), attributes (@21), lastOffsetDelta (@23), recordsCount (@57)
# of a v2 batch header
_ONE_BATCH = struct.Struct(">8xi4xb4xhi30xi")
assert _ONE_BATCH.size == RECORD_BATCH_OVERHEAD
# Uncompressed bytes of one produce request whose records are checked on the event loop;
# the rest goes to the record checker's threads. The C walk does a 2 MiB section of the
# smallest records (7 bytes) in about 2 ms, the Python one needs ~1 us per record.
INLINE_CHECK_BYTES = 2 << 20 if native_record_check is not None else 64 << 10
CHECK_THREADS = 2
log = logging.getLogger(__name__)

#: Logs created per worker-thread step (about 30-100 ms of directory and file creation).
LOG_CREATION_BATCH = 100

TopicPartition = tuple[str, int]

# Module constants: an enum member read through its class costs more, once per fetch.
_LOG_END = FetchIsolation.LOG_END
_TXN_COMMITTED = FetchIsolation.TXN_COMMITTED

MAX_TIMESTAMP = -3  # ListOffsets: the record with the largest timestamp (KIP-734)

# Kafka's ReplicaManager.IsrChangePropagationBlackOut / IsrChangePropagationInterval and the
# period of its "isr-change-propagation" task.
ISR_CHANGE_PROPAGATION_BLACKOUT_MS = 5_000
ISR_CHANGE_PROPAGATION_INTERVAL_MS = 60_000
ISR_CHANGE_CHECK_MS = 2_500
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

_CODEC_BY_NAME = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


class UnknownTopicOrPartitionError(KafkaError):
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class FetcherManager(Protocol):
    """The follower side's fetchers (klog.daemon.replica_fetcher.ReplicaFetcherManager)."""

    def add_partitions(self, partitions: dict[TopicPartition, tuple[int, int]]) -> None: ...

    def remove_partitions(self, tps: list[TopicPartition]) -> None: ...


class ReplicaSelector(Protocol):
    """KIP-392's choice of a consumer's read replica
    (klog.daemon.replica_selector.RackAwareReplicaSelector)."""

    def preferred_read_replica(self, client: ClientMetadata, leader: ReplicaView,
                               followers: Iterable[ReplicaView]) -> int | None: ...


class LogDirMoves(Protocol):
    """Moves between log dirs (klog.daemon.log_dir_mover.LogDirMover), told which
    partitions came and went."""

    def partitions_hosted(self, tps: Iterable[TopicPartition]) -> None: ...

    def partitions_stopped(self, tps: Iterable[TopicPartition]) -> None: ...


class TransactionVerifier(Protocol):
    """KIP-890's question to the transaction coordinator
    (klog.daemon.transaction.verification.AddPartitionsToTxnManager)."""

    @property
    def enabled(self) -> bool:
        """transaction.partition.verification.enable, as it is now (a dynamic config)."""
        ...

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], abortable: bool
                     ) -> dict[TopicPartition, ErrorCode]:
        """The partitions not verified, each with its error (none: all verified)."""
        ...


class IsrStore(Protocol):
    """Where a leader writes ISR changes (blocking calls: run off the event loop)."""

    def update_partition_state(self, topic: str, partition: int,
                               state: paths.LeaderIsrAndControllerEpoch,
                               zk_version: int) -> int | None:
        """Compare-and-set the partition state znode; its new version, None on a conflict."""

    def read_partition_state(self, topic: str, partition: int
                             ) -> tuple[paths.LeaderIsrAndControllerEpoch, int] | None:
        """The state znode and its version (None if absent)."""

    def notify_isr_change(self, tps: Iterable[TopicPartition]) -> None:
        """Tell the controller (/isr_change_notification/isr_change_<seq>)."""


class MetastoreIsrStore:
    """IsrStore on the broker's metastore (ZooKeeper in cluster mode)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def update_partition_state(self, topic: str, partition: int,
                               state: paths.LeaderIsrAndControllerEpoch,
                               zk_version: int) -> int | None:
        try:
            stat = self.store.set(paths.partition_state_path(topic, partition), state.encode(),
                                  version=zk_version)
        except (BadVersionError, NoNodeError):
            return None
        return stat.version

    def read_partition_state(self, topic: str, partition: int
                             ) -> tuple[paths.LeaderIsrAndControllerEpoch, int] | None:
        try:
            data, stat = self.store.get(paths.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return paths.LeaderIsrAndControllerEpoch.decode(data), stat.version

    def notify_isr_change(self, tps: Iterable[TopicPartition]) -> None:
        data = paths.IsrChangeNotification(tuple(sorted(tps))).encode()
        self.store.create(paths.isr_change_path(), data, sequential=True, make_parents=True)


#: A partition's record batches as a produce request or a follower fetch carries them.
RecordsBuffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    info: LogAppendInfo | None = None
    # A batch refused for some of its records: each by its index in the batch (KIP-467).
    record_errors: tuple[RecordError, ...] = ()


@dataclass(slots=True)
class FetchResult:
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    data: FetchDataInfo | None = None
    aborted_transactions: list[tuple[int, int]] | None = None
    #: KIP-392: the follower the consumer should read this partition from (no records
    #: then); -1 for none.
    preferred_read_replica: int = -1

    @property
    def size(self) -> int:
        return self.data.size if self.data is not None else 0


ProduceResults = dict[TopicPartition, ProduceResult]


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
class ReplicaInfo:
    """One partition's log in a log dir, as DescribeLogDirs reports it."""

    partition: int
    size: int
    # Log end behind the high watermark; -1 for a log no replica serves. A future log
    # (a move in progress): how far it is behind the partition's log.
    offset_lag: int
    is_future: bool = False


@dataclass(slots=True)
class LogDirInfo:
    log_dir: str
    error_code: int = 0
    total_bytes: int = -1
    usable_bytes: int = -1
    topics: dict[str, list[ReplicaInfo]] | None = None


class ReplicaManager:
    """See the module docstring. ``timer`` drives both purgatories' timeouts (a new one,
    closed at ``shutdown``, when not given); ``leader_quota`` is the leader's replication
    throttle (klog/daemon/replication_quota.py), None for none."""

    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        topic_config: Callable[[str], LogConfig],
        *,
        isr_store: IsrStore | None = None,
        replica_lag_time_max_ms: int = 30_000,
        timer: Timer | None = None,
        leader_quota: ReplicationQuotaManager | None = None,
        fetch_purge_interval: int = 1000,
        produce_purge_interval: int = 1000,
        topic_metrics: BrokerTopicMetrics | None = None,
        isr_metrics: IsrMetrics | None = None,
    ) -> None:
        self.broker_id = broker_id
        # Kafka's BrokerTopicStats and the ISR change counts (klog/daemon/metrics); None
        # when metrics are off: produce and fetch then skip them at one test.
        self.topic_metrics = topic_metrics
        self.isr_metrics = isr_metrics
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.isr_store = isr_store
        self.leader_quota = leader_quota
        self._owns_timer = timer is None
        self.timer = Timer() if timer is None else timer
        self.fetch_purgatory: DelayedOperationPurgatory[DelayedFetch[list[FetchResult]]] = \
            DelayedOperationPurgatory("Fetch", self.timer, fetch_purge_interval)
        self.produce_purgatory: DelayedOperationPurgatory[DelayedProduce] = \
            DelayedOperationPurgatory("Produce", self.timer, produce_purge_interval)
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        # Partitions whose log could not be created here, with the reason (an OSError's
        # text); cleared when the log is made or the replica stopped.
        self.log_creation_failures: dict[TopicPartition, str] = {}
        self.clock: Callable[[], int] = lambda: int(time.time() * 1000)
        # The replica fetchers (klog.daemon.replica_fetcher.ReplicaFetcherManager); the
        # broker sets it (the fetchers need the replica manager first).
        self.fetcher_manager: FetcherManager | None = None
        self.isr_changes: set[TopicPartition] = set()
        self.last_isr_change_ms = 0
        self.last_isr_propagation_ms = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._isr_writes: set[asyncio.Task[None]] = set()
        # Per partition, the last append whose records are being checked off the loop:
        # later appends to that partition wait for it (arrival order).
        self._appending: dict[TopicPartition, asyncio.Task[ProduceResult]] = {}
        self._check_pool: ThreadPoolExecutor | None = None
        # KIP-890's verification with the transaction coordinator; the broker sets it (the
        # verifier needs the coordinator, built after this). None: never verified.
        self.txn_verifier: TransactionVerifier | None = None
        # KIP-392's replica.selector.class (klog/daemon/replica_selector.py); the broker
        # sets it. None: consumers are never sent to followers.
        self.replica_selector: ReplicaSelector | None = None
        # Moves between log dirs (klog/daemon/log_dir_mover.py); the broker sets it.
        self.log_dir_mover: LogDirMoves | None = None
        # Where an I/O error met by produce or fetch is reported: the log dir failure
        # handler (klog/daemon/log_dir_failure.py) takes the dir offline. None: answered
        # KAFKA_STORAGE_ERROR only.
        self.on_io_error: Callable[[Path, OSError], None] | None = None

    # -- controller decisions --------------------------------------------------------------

    def become_leader_or_follower(self, states: Iterable[PartitionState]) -> dict[TopicPartition,
                                                                                  int]:
        """Apply LeaderAndIsr: create missing logs, take the given roles. Returns errors."""
        errors: dict[TopicPartition, int] = {}
        leaders: list[TopicPartition] = []
        moved: list[TopicPartition] = []
        followers: dict[TopicPartition, tuple[int, int]] = {}
        for state in states:
            tp = (state.topic, state.partition)
            if self.broker_id not in state.replicas:
                continue
            try:
                existing = self.partitions.get(tp)
                if existing is not None and (
                    state.leader_epoch < existing.leader_epoch
                    or (state.leader_epoch == existing.leader_epoch
                        and state.leader == existing.leader_id
                        and state.zk_version < existing.zk_version)
                ):
                    # Kafka ignores a LeaderAndIsr older than what the partition knows.
                    log.info("ignoring LeaderAndIsr for %s-%d: leader epoch %d (zk version "
                             "%d) is older than the current %d (%d)", tp[0], tp[1],
                             state.leader_epoch, state.zk_version, existing.leader_epoch,
                             existing.zk_version)
                    errors[tp] = int(ErrorCode.FENCED_LEADER_EPOCH)
                    continue
                partition = self._get_or_create(tp)
                if state.leader == self.broker_id:
                    partition.isr_updater = self._propose_isr if self.isr_store else None
                    before = partition.high_watermark
                    partition.make_leader(state)
                    leaders.append(tp)
                    if partition.high_watermark > before:
                        # A smaller ISR (a dead follower taken out by the controller) can
                        # move the high watermark: acks=all produces waiting on it are
                        # done now (Kafka's makeLeader -> tryCompleteDelayedRequests).
                        moved.append(tp)
                else:
                    changed = partition.make_follower(state)
                    if changed or existing is None or existing.is_leader:
                        followers[tp] = (state.leader, state.leader_epoch)
                errors[tp] = 0
            except KafkaError as exc:
                errors[tp] = int(exc.error_code)
            except OSError as exc:
                log.error("cannot open log for %s-%d: %s", tp[0], tp[1], exc)
                self.log_creation_failures[tp] = str(exc)
                errors[tp] = int(ErrorCode.KAFKA_STORAGE_ERROR)
        if self.fetcher_manager is not None:
            if leaders:
                self.fetcher_manager.remove_partitions(leaders)
            if followers:
                self.fetcher_manager.remove_partitions(list(followers))
                self.fetcher_manager.add_partitions(
                    {tp: le for tp, le in followers.items() if le[0] >= 0})
        for tp in [*followers, *moved]:
            # Followers: produce requests waiting for acks here can never complete: answer
            # them now. Leaders: their high watermark moved.
            self.try_complete_delayed_requests(tp)
        if self.log_dir_mover is not None:
            # A move a restart interrupted goes on once the partition is hosted again.
            self.log_dir_mover.partitions_hosted(tp for tp, e in errors.items() if not e)
        return errors

    def _get_or_create(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None:
            plog = self.log_manager.get_or_create_log(tp[0], tp[1], self.topic_config(tp[0]))
            self.log_creation_failures.pop(tp, None)
            partition = Partition(tp[0], tp[1], self.broker_id, plog)
            if self.topic_metrics is not None:
                partition.topic_counts = self.topic_metrics.counts_of(tp[0])
            self.partitions[tp] = partition
        return partition

    async def create_logs(self, states: Iterable[PartitionState]) -> None:
        """Create the missing logs of the partitions ``states`` hand this broker, in worker
        threads, LOG_CREATION_BATCH at a time, so the event loop serves other clients in
        between. Failures are recorded in ``log_creation_failures``
        (``become_leader_or_follower`` meets them again and answers KAFKA_STORAGE_ERROR)."""
        manager = self.log_manager
        missing = list({(s.topic, s.partition): s for s in states
                        if self.broker_id in s.replicas
                        and (s.topic, s.partition) not in self.partitions
                        and manager.get_log(s.topic, s.partition) is None}.values())
        for start in range(0, len(missing), LOG_CREATION_BATCH):
            batch = missing[start:start + LOG_CREATION_BATCH]
            # Topic configs are read here, on the loop; the files are made in the thread.
            configs = [self.topic_config(s.topic) for s in batch]
            failures = await asyncio.to_thread(self._create_logs, batch, configs)
            for tp, reason in failures.items():
                log.error("cannot create the log of %s-%d: %s", tp[0], tp[1], reason)
            self.log_creation_failures.update(failures)

    def _create_logs(self, states: list[PartitionState], configs: list[LogConfig]
                     ) -> dict[TopicPartition, str]:
        failures: dict[TopicPartition, str] = {}
        for s, config in zip(states, configs, strict=True):
            try:
                plog = self.log_manager.get_or_create_log(s.topic, s.partition, config)
                if s.leader == self.broker_id and s.leader_epoch >= 0:
                    # Partition.make_leader's first leader epoch entry, written (with its
                    # fsyncs) here rather than on the event loop; make_leader then finds
                    # it recorded. Nothing else knows this new log yet.
                    plog.leader_epoch_cache.assign(s.leader_epoch, plog.log_end_offset)
            except (OSError, KafkaError) as exc:  # KafkaStorageError: its dir is offline
                failures[(s.topic, s.partition)] = str(exc)
        return failures

    def stop_replicas(self, tps: Iterable[TopicPartition], delete: bool) -> None:
        tps = list(tps)
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions(tps)
        if self.log_dir_mover is not None:
            self.log_dir_mover.partitions_stopped(tps)
        for tp in tps:
            self.log_creation_failures.pop(tp, None)
            stopped = self.partitions.pop(tp, None)
            if delete:
                self.log_manager.delete_log(tp[0], tp[1])
            if stopped is not None:
                # As Kafka: requests waiting on this replica are answered now
                # (NOT_LEADER_OR_FOLLOWER), not left to their timeouts.
                self.try_complete_delayed_requests(tp)
        if delete and self.topic_metrics is not None:
            # A deleted topic's own counts go when none of its replicas is left here (as
            # Kafka's removeMetrics); the all-topics counts keep what it counted.
            hosted = {t for t, _p in self.partitions}
            for topic in {t for t, _p in tps} - hosted:
                self.topic_metrics.remove_topic(topic)

    def update_topic_config(self, topic: str) -> None:
        config = self.topic_config(topic)
        for (t, _p), partition in self.partitions.items():
            if t == topic:
                partition.log.update_config(config)

    def get_partition(self, topic: str, partition: int) -> Partition | None:
        return self.partitions.get((topic, partition))

    def leader_partition(self, topic: str, partition: int) -> Partition:
        p = self.partitions.get((topic, partition))
        if p is None:
            self._check_offline(topic, partition)
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} is not hosted here")
        if not p.is_leader:
            raise NotLeaderOrFollowerError(f"not the leader of {topic}-{partition}")
        return p

    # -- offline log dirs -------------------------------------------------------------------

    def _check_offline(self, topic: str, partition: int) -> None:
        """Kafka's HostedPartition.Offline: KAFKA_STORAGE_ERROR for a partition whose log
        is in a failed dir (klog/daemon/log_dir_failure.py)."""
        if (topic, partition) in self.log_manager.offline_partitions:
            raise KafkaStorageError(f"Partition {topic}-{partition} is in an offline log "
                                    "directory")

    def mark_offline(self, tps: Iterable[TopicPartition]) -> None:
        """Their log dir failed (Kafka's markPartitionOffline): no fetcher follows them, no
        request reads or writes them (KAFKA_STORAGE_ERROR from now on), and requests
        waiting on them are answered now."""
        tps = [tp for tp in tps if tp in self.partitions]
        if self.fetcher_manager is not None:
            self.fetcher_manager.remove_partitions(tps)
        for tp in tps:
            self.partitions.pop(tp, None)
            self.try_complete_delayed_requests(tp)

    def report_io_error(self, where: Path, exc: OSError) -> None:
        """An I/O error under ``where`` (a partition's log dir): to the failure handler."""
        if self.on_io_error is not None:
            self.on_io_error(where, exc)

    def active_producers(self, topic: str, partition: int
                         ) -> tuple[ErrorCode, list[ProducerStateInfo]]:
        """The producer state of a partition hosted here, leader or follower (Kafka's
        activeProducerState reads the local log); UNKNOWN_TOPIC_OR_PARTITION when it is
        not hosted."""
        p = self.partitions.get((topic, partition))
        if p is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []
        producers = p.log.producer_state.active_producers()
        return ErrorCode.NONE, [
            ProducerStateInfo(
                pid, entry.producer_epoch, entry.last_seq, entry.last_timestamp,
                entry.coordinator_epoch,
                -1 if entry.current_txn_first_offset is None
                else entry.current_txn_first_offset)
            for pid, entry in sorted(producers.items())]

    # -- log dirs ---------------------------------------------------------------------------

    def describe_log_dirs(self, wanted: set[TopicPartition] | None) -> list[LogDirInfo]:
        """Per log dir, the partitions it holds (those in ``wanted``, or all) with their
        sizes, and the file system's total and usable bytes. As Kafka: a requested topic
        listed in a dir without any of the requested partitions still appears, with none.
        Blocking (statvfs, directory sizes): a worker thread."""
        hosted = set(self.partitions)
        lm = self.log_manager
        by_dir: dict[str, dict[str, list[ReplicaInfo]]] = {}
        for tp, plog in sorted(lm.all_logs().items()):
            held_in = lm.log_dir_of(*tp)
            if held_in is None:
                continue
            parts = by_dir.setdefault(os.path.abspath(held_in), {}).setdefault(tp[0], [])
            if wanted is not None and tp not in wanted:
                continue
            lag = max(plog.high_watermark - plog.log_end_offset, 0) if tp in hosted else -1
            parts.append(ReplicaInfo(tp[1], plog.size, lag))
        for tp, future in sorted(lm.all_future_logs().items()):
            held_in = lm.future_log_dir_of(*tp)
            current = lm.get_log(*tp)
            if held_in is None:
                continue
            parts = by_dir.setdefault(os.path.abspath(held_in), {}).setdefault(tp[0], [])
            if wanted is not None and tp not in wanted:
                continue
            # Kafka's getLogEndOffsetLag of a future replica: the log's end minus its own.
            lag = current.log_end_offset - future.log_end_offset if current is not None else -1
            parts.append(ReplicaInfo(tp[1], future.size, lag, is_future=True))
        results = []
        offline = {os.path.abspath(d) for d in lm.offline_dirs}
        for log_dir in dict.fromkeys(os.path.abspath(d) for d in lm.log_dirs):
            if log_dir in offline:  # as Kafka: the dir, with the error and nothing else
                results.append(LogDirInfo(log_dir, int(ErrorCode.KAFKA_STORAGE_ERROR)))
                continue
            try:
                st = os.statvfs(log_dir)
            except OSError:
                results.append(LogDirInfo(log_dir, int(ErrorCode.KAFKA_STORAGE_ERROR)))
                continue
            topics = by_dir.get(log_dir, {})
            if wanted is not None:
                topics = {t: p for t, p in topics.items() if any(w[0] == t for w in wanted)}
            results.append(LogDirInfo(log_dir, 0, st.f_blocks * st.f_frsize,
                                      st.f_bavail * st.f_frsize, topics))
        return results

    # -- produce ----------------------------------------------------------------------------

    def append_records(
        self,
        entries: Mapping[TopicPartition, RecordsBuffer | None],
        required_acks: int,
        origin: str = "client",
        verification_guards: Mapping[TopicPartition, VerificationGuard] | None = None,
    ) -> dict[TopicPartition, ProduceResult]:
        """Append each partition's batches on its leader replica; errors per partition.
        Every check runs here, on the caller's thread (for the broker's own appends and
        tests; the produce handler uses ``append_records_from_client``).
        ``verification_guards``: KIP-890's guards from ``verify_transaction`` (a partition
        without one appends transactional data only to an ongoing transaction); None when
        transactions are not verified."""
        results: dict[TopicPartition, ProduceResult] = {}
        for tp, records in entries.items():
            try:
                partition = self.leader_partition(*tp)
                if records is None:
                    raise CorruptRecordError("null records in a produce request")
                records = self._validate(records, partition.log.config, origin)
            except KafkaError as exc:
                results[tp] = self._refused(tp, exc, records)
                continue
            results[tp] = self._append_validated(tp, records, required_acks, origin,
                                                 _guard(verification_guards, tp))
        return results

    async def append_records_from_client(
        self,
        entries: Mapping[TopicPartition, RecordsBuffer | None],
        required_acks: int,
        verification_guards: Mapping[TopicPartition, VerificationGuard] | None = None,
    ) -> dict[TopicPartition, ProduceResult]:
        """The produce handler's append: as ``append_records``, but a partition whose
        check is heavy -- a compressed batch to inflate, a batch to recompress, or more
        uncompressed bytes than the loop's budget for one request -- is checked in the
        record checker's worker thread, so that one client's batch never holds the event
        loop (and every other client) for long.

        Order is kept: the caller awaits this before its connection's next request, and
        appends to one partition happen in the order the requests arrived -- a request
        behind a partition's pending append waits for it (its check may run meanwhile).
        Most requests (one uncompressed batch per partition) never wait."""
        inline: dict[TopicPartition, RecordsBuffer | None] = {}
        later: dict[TopicPartition, asyncio.Task[ProduceResult]] = {}
        budget = INLINE_CHECK_BYTES
        for tp, records in entries.items():
            partition = self.partitions.get(tp)
            if partition is None or records is None:
                inline[tp] = records  # refused at once, with the right error
                continue
            weight = _check_weight(records, partition.log.config)
            if weight is not None and weight <= budget and tp not in self._appending:
                budget -= weight
                inline[tp] = records
            else:
                later[tp] = self._append_in_order(tp, records, required_acks,
                                                  _guard(verification_guards, tp))
        results = self.append_records(inline, required_acks,
                                      verification_guards=verification_guards) if inline else {}
        if later:
            # asyncio.wait, not gather: a connection that goes away does not cancel them,
            # so what was started is appended (or refused) all the same.
            await asyncio.wait(later.values())
            for tp, task in later.items():
                results[tp] = task.result()
        return results

    async def produce(self, entries: Mapping[TopicPartition, RecordsBuffer | None],
                      required_acks: int,
                      timeout_ms: int, transactional_id: str | None = None,
                      abortable: bool = False) -> ProduceResults | Awaitable[ProduceResults]:
        """A client's Produce (Kafka's handleProduceAppend): a transactional one verified
        first (KIP-890, ``verify_transaction``; ``abortable``: the client understands
        TRANSACTION_ABORTABLE, Produce v11+), then ``append_records_from_client``, then
        for acks=-1 the wait for the ISR. The results when they are final; else (acks=-1,
        a follower still missing records) an awaitable of them, which the produce
        purgatory completes within ``timeout_ms``: the caller may go on meanwhile."""
        if transactional_id is not None and self.verifies_transactions:
            refused, guards = await self._verify_produce(entries, transactional_id, abortable)
            if refused:
                entries = {tp: r for tp, r in entries.items() if tp not in refused}
            results = await self.append_records_from_client(entries, required_acks,
                                                            guards) if entries else {}
            results.update(refused)
        else:
            results = await self.append_records_from_client(entries, required_acks)
        if required_acks == -1:
            waiting = self.delayed_produce(results, timeout_ms)
            if waiting is not None:
                return waiting
        return results

    # -- transaction verification (KIP-890 part 1) ----------------------------------------

    @property
    def verifies_transactions(self) -> bool:
        """transaction.partition.verification.enable, with a verifier to ask."""
        verifier = self.txn_verifier
        return verifier is not None and verifier.enabled

    async def verify_transaction(self, transactional_id: str, producer_id: int,
                                 producer_epoch: int,
                                 first_sequences: Mapping[TopicPartition, int],
                                 abortable: bool
                                 ) -> tuple[dict[TopicPartition, ErrorCode],
                                            dict[TopicPartition, VerificationGuard]]:
        """Kafka's maybeStartTransactionVerificationForPartitions: per partition (mapped to
        the first sequence the producer writes there) a guard from its log -- none needed
        where the producer's transaction is ongoing already -- and for those that need
        one, the coordinator's answer. Returns (errors of the partitions that may not be
        appended, the guards to append the others with). Call only while
        ``verifies_transactions``."""
        verifier = self.txn_verifier
        assert verifier is not None
        errors: dict[TopicPartition, ErrorCode] = {}
        guards: dict[TopicPartition, VerificationGuard] = {}
        for tp, sequence in first_sequences.items():
            try:
                guard = self.leader_partition(*tp).maybe_start_transaction_verification(
                    producer_id, sequence, producer_epoch)
            except KafkaError as exc:
                errors[tp] = exc.error_code
                continue
            if guard is not VerificationGuard.SENTINEL:
                guards[tp] = guard
        if guards:
            errors.update(await verifier.verify(transactional_id, producer_id,
                                                producer_epoch, list(guards), abortable))
        return errors, guards

    async def _verify_produce(self, entries: Mapping[TopicPartition, RecordsBuffer | None],
                              transactional_id: str, abortable: bool
                              ) -> tuple[ProduceResults, dict[TopicPartition,
                                                              VerificationGuard]]:
        """The produce side of ``verify_transaction`` (Kafka's handleProduceAppend): the
        refused partitions' results, with the coordinator's errors as a producer knows
        them, and the guards of the rest."""
        producers: set[tuple[int, int]] = set()
        first_sequences: dict[TopicPartition, int] = {}
        for tp, records in entries.items():
            if records is None:
                continue
            try:
                headers = list(iter_batch_headers(memoryview(records)))
            except KafkaError:
                continue  # the append refuses it, with its own answer
            txn = [h for h in headers if h.has_producer_id and h.is_transactional]
            if txn:
                producers.update((h.producer_id, h.producer_epoch) for h in txn)
                first_sequences[tp] = headers[0].base_sequence
        if not producers:
            return {}, {}
        if len(producers) > 1:
            message = "Transactional records contained more than one producer ID"
            return {tp: ProduceResult(int(ErrorCode.INVALID_PRODUCER_ID_MAPPING),
                                      error_message=message) for tp in entries}, {}
        ((producer_id, producer_epoch),) = producers
        errors, guards = await self.verify_transaction(
            transactional_id, producer_id, producer_epoch, first_sequences, abortable)
        return {tp: _verification_refusal(code) for tp, code in errors.items()}, guards

    async def wait_for_isr(self, results: ProduceResults, timeout_ms: int) -> ProduceResults:
        """acks=-1: wait in the produce purgatory until each partition's high watermark
        covers its appended batches (the whole ISR has them), at most ``timeout_ms``. With
        the leader alone in the ISR (standalone) that is already true when the append
        returns, and nothing waits."""
        waiting = self.delayed_produce(results, timeout_ms)
        return await waiting if waiting is not None else results

    def delayed_produce(self, results: ProduceResults, timeout_ms: int
                        ) -> asyncio.Future[ProduceResults] | None:
        """``wait_for_isr`` in two steps: None when ``results`` are final already (they
        are updated in place), else a future of the final results (a DelayedProduce)."""
        required = {tp: r.info.last_offset + 1 for tp, r in results.items()
                    if r.error_code == 0 and r.info is not None}
        errors: dict[TopicPartition, int] = {}
        for tp, offset in list(required.items()):
            done, error = self.check_enough_replicas_reach_offset(tp, offset)
            if done:
                del required[tp]
                errors[tp] = error
        _apply_isr_errors(results, errors)
        if not required:
            return None
        loop = asyncio.get_running_loop()
        replicated: asyncio.Future[dict[TopicPartition, int]] = loop.create_future()
        final: asyncio.Future[ProduceResults] = loop.create_future()

        def answer(f: asyncio.Future[dict[TopicPartition, int]]) -> None:
            if not final.done():
                _apply_isr_errors(results, f.result())
                final.set_result(results)

        replicated.add_done_callback(answer)
        op = DelayedProduce(timeout_ms, required, self.check_enough_replicas_reach_offset,
                            replicated)
        self.produce_purgatory.try_complete_else_watch(op, list(required))
        return final

    def try_complete_delayed_requests(self, tp: TopicPartition) -> None:
        """A high watermark moved (a follower's fetch, an ISR change, a new leadership) or
        the leadership went: acks=-1 produces may be done, and fetches may have enough or
        an error to answer (Kafka's tryCompleteDelayedRequests)."""
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)

    def _append_in_order(self, tp: TopicPartition, records: RecordsBuffer,
                         required_acks: int, verification_guard: VerificationGuard | None
                         ) -> asyncio.Task[ProduceResult]:
        loop = asyncio.get_running_loop()
        config = self.partitions[tp].log.config
        checking = loop.run_in_executor(self._checker(), self._validate_in_worker, records,
                                        config)
        task = loop.create_task(self._append_checked(tp, checking, self._appending.get(tp),
                                                     required_acks, len(records),
                                                     verification_guard))
        self._appending[tp] = task

        def done(t: asyncio.Task[ProduceResult]) -> None:
            if self._appending.get(tp) is t:
                del self._appending[tp]

        task.add_done_callback(done)
        return task

    async def _append_checked(self, tp: TopicPartition,
                              checking: asyncio.Future[RecordsBuffer | KafkaError],
                              before: asyncio.Task[ProduceResult] | None,
                              required_acks: int, size: int,
                              verification_guard: VerificationGuard | None) -> ProduceResult:
        checked = await checking
        if before is not None:
            await asyncio.wait([before])
        if isinstance(checked, KafkaError):
            return self._refused(tp, checked, size)
        try:
            self.leader_partition(*tp)  # leadership may have moved while it was checked
        except KafkaError as exc:
            return self._refused(tp, exc, size)
        return self._append_validated(tp, checked, required_acks, "client",
                                      verification_guard)

    def _validate_in_worker(self, records: RecordsBuffer, config: LogConfig
                            ) -> RecordsBuffer | KafkaError:
        """``_validate`` for the worker thread: the checked records or the KafkaError."""
        try:
            return self._validate(records, config, "client")
        except KafkaError as exc:
            # Only its code and message are answered; without its traceback the refused
            # request's buffers are freed as soon as it is answered.
            return exc.with_traceback(None)
        except Exception as exc:  # a klog bug: answer it, do not lose the connection
            log.exception("checking produced records failed")
            return KafkaError(f"checking the records failed: {exc}")

    def _checker(self) -> ThreadPoolExecutor:
        """The record checker's threads (made at first use): their own pool, so that a
        flood of compressed batches cannot starve the default executor's fsyncs and
        metastore calls; two threads bound the inflated bytes held at once."""
        if self._check_pool is None:
            self._check_pool = ThreadPoolExecutor(CHECK_THREADS,
                                                  thread_name_prefix="klog-record-check")
        return self._check_pool

    def _append_validated(self, tp: TopicPartition, records: RecordsBuffer, required_acks: int,
                          origin: str, verification_guard: VerificationGuard | None = None
                          ) -> ProduceResult:
        try:
            partition = self.leader_partition(*tp)
            config = partition.log.config
            info = partition.append_records_to_leader(
                records, required_acks, config.min_insync_replicas, origin,
                verification_guard
            )
        except KafkaError as exc:
            return self._refused(tp, exc, records)
        except OSError as exc:
            log.error("append to %s-%d failed: %s", tp[0], tp[1], exc)
            self.report_io_error(partition.log.dir, exc)
            return self._refused(tp, KafkaStorageError(str(exc)), records)
        counts = partition.topic_counts
        if counts is not None:  # metrics on (BrokerTopicMetrics): Kafka's appendToLocalLog
            counts[TOTAL_PRODUCE] += 1
            counts[MESSAGES_IN] += info.record_count
            counts[BYTES_IN] += len(records)
        if info.duplicate:
            # Kafka answers a retried batch with the timestamp it remembered for the
            # original (its max timestamp, i.e. the append time under LogAppendTime),
            # whatever the topic's timestamp type.
            append_time = info.max_timestamp
        else:
            append_time = info.log_append_time if config.log_append_time else -1
            # Kafka's tryCompleteDelayedFetch: fetches waiting on this partition may have
            # enough now (a follower's at once; a consumer's when the high watermark moved).
            self.fetch_purgatory.check_and_complete(tp)
        return ProduceResult(0, info.first_offset, append_time, info.log_start_offset,
                             info=info)

    def _refused(self, tp: TopicPartition, exc: KafkaError,
                 records: RecordsBuffer | int | None) -> ProduceResult:
        """The result of an append refused with ``exc``, counted when metrics are on
        (``records``: the refused records or their size)."""
        if self.topic_metrics is not None:
            size = records if isinstance(records, int) else \
                len(records) if records is not None else 0
            self.topic_metrics.record_refused(tp[0], int(exc.error_code), size)
        return ProduceResult(int(exc.error_code), error_message=str(exc),
                             record_errors=exc.record_errors)

    def _validate(self, records: RecordsBuffer, config: LogConfig, origin: str) -> RecordsBuffer:
        """LogValidator: the batch headers, every record (validate.check_batch), the
        records' timestamps, and recompression to the topic's codec. Returns the records
        to append (``records`` itself unless recompressed). Thread-safe: it reads only
        its arguments and the clock."""
        view = memoryview(records)
        target = None if config.compression_type == "producer" else _CODEC_BY_NAME[
            config.compression_type]
        limits = config.timestamp_limits
        require_keys = config.compact
        from_client = origin == "client"
        if target is None and limits is None:
            # Then nothing is rewritten, and a produce request usually holds one
            # uncompressed batch per partition: read its header fields in place and check
            # its records section at once rather than walk the headers (same checks, same
            # outcome for that case).
            n = len(view)
            if n >= RECORD_BATCH_OVERHEAD:
                length, magic, attributes, delta, count = _ONE_BATCH.unpack_from(view, 0)
                if (length + LOG_OVERHEAD == n and magic == MAGIC_V2 and delta >= 0
                        and count == delta + 1 and not attributes & COMPRESSION_CODEC_MASK
                        and n <= config.max_message_bytes
                        and count * MIN_RECORD_SIZE <= n - RECORD_BATCH_OVERHEAD):
                    try:
                        check_records(view[RECORD_BATCH_OVERHEAD:], count,
                                      require_keys and not attributes & CONTROL_FLAG_MASK)
                    except KafkaError:
                        # the walk's answer, CRC first
                        check_batch(view, read_batch_header(view), from_client=from_client,
                                    require_keys=require_keys)
                        raise
                    return records
        now = self.clock()
        if from_client and is_legacy(view):
            # Produce v0-v2 from a pre-0.11 client: its v0/v1 message set becomes one v2
            # batch (LogValidator's conversion; Produce v3+ never gets here with one: the
            # handler refuses it), then is checked as any v2 batch is.
            return self._validate(self._up_convert(view, config, now), config, origin)
        # The range a CreateTime timestamp must lie in (Kafka's validateTimestamp): each
        # record's is judged by the walk (offenders named, KIP-467), the header's base and
        # max timestamps here (the log keeps the producer's max timestamp, which a time
        # index and time retention then go by).
        window = None if limits is None else (now - limits[0], now + limits[1])
        # Recompressed batches are written out as each is checked, so that one inflated
        # section at a time is held, never a whole request's.
        out = bytearray() if target is not None else None
        recompress = False
        for h in iter_batch_headers(view):
            if from_client and h.magic != MAGIC_V2:
                raise InvalidRecordError(
                    "produce requests v3+ may only contain record batches of magic 2"
                )
            if h.size > config.max_message_bytes:
                # The log refuses it too; here, before anything is inflated.
                raise RecordTooLargeError(
                    f"the record batch at position {h.position} is {h.size} bytes, larger "
                    f"than max.message.bytes ({config.max_message_bytes})"
                )
            batch = None
            if h.magic == MAGIC_V2:
                batch = check_batch(view, h, from_client=from_client,
                                    require_keys=require_keys, timestamp_range=window)
            if window is not None and h.timestamp_type is TimestampType.CREATE_TIME:
                for ts in (h.base_timestamp, h.max_timestamp):
                    if ts is not None and ts >= 0 and not window[0] <= ts <= window[1]:
                        raise InvalidTimestampError(
                            f"timestamp {ts} of the batch at position {h.position} is out of "
                            f"range: the topic's timestamp limits allow [{window[0]}, "
                            f"{window[1]}] now"
                        )
            if out is not None:
                assert target is not None
                if batch is None or h.is_control or h.compression is target:
                    out += view[h.position:h.end]  # v0/v1 entries (never a client's) too
                else:
                    out += self._recompress(view, batch, target)
                    recompress = True
        return out if recompress and out is not None else records

    @staticmethod
    def _up_convert(view: memoryview, config: LogConfig, now: int) -> bytearray:
        """A client's v0/v1 message set as one v2 batch in the topic's compression and
        timestamp type (records.convert.up_convert), in a writable buffer (the log patches
        offsets in place)."""
        if view.nbytes > config.max_message_bytes:
            raise RecordTooLargeError(
                f"a message set of {view.nbytes} bytes is larger than max.message.bytes "
                f"({config.max_message_bytes})")
        return bytearray(up_convert(
            view,
            timestamp_type=TimestampType.LOG_APPEND_TIME if config.log_append_time
            else TimestampType.CREATE_TIME,
            compression=None if config.compression_type == "producer"
            else _CODEC_BY_NAME[config.compression_type],
            now=now))

    @staticmethod
    def _recompress(view: memoryview, batch: CheckedBatch, target: CompressionType) -> bytes:
        """One batch rewritten with the topic's codec (Kafka's broker-side recompression)
        from the records its check inflated: producer id, epoch, sequence, transactional
        flag and timestamps are kept. Its CRC is checked first: the rewrite computes a new
        one, which must not launder bytes damaged in transit."""
        batch.header.ensure_valid(view)
        return recompressed(view, batch, target)

    # -- down-conversion (Fetch v0-v3) --------------------------------------------------------

    async def down_convert(self, wanted: list[FetchKey], results: list[FetchResult],
                           magic: int) -> dict[int, bytes]:
        """A consumer's Fetch v0-v3 (Kafka's maybeConvertFetchedData): the records of each
        partition read (index into ``results``) as a message set of ``magic``, each bounded
        by its partition max bytes (the first entry always whole). A partition of a topic
        with message.downconversion.enable=false gets UNSUPPORTED_VERSION, a zstd batch
        UNSUPPORTED_COMPRESSION_TYPE (set on its result, its records dropped). Reading and
        converting run in a worker thread: inflating and rewriting a fetch's worth of
        records must not hold the event loop."""
        jobs: list[tuple[int, FetchDataInfo, int, int]] = []
        for i, ((topic, partition, fetch_offset, max_bytes, _e), r) in enumerate(
                zip(wanted, results, strict=True)):
            if r.error_code or r.data is None or not r.size:
                continue
            hosted = self.partitions.get((topic, partition))
            if hosted is not None and not hosted.log.config.message_downconversion_enable:
                r.error_code = int(ErrorCode.UNSUPPORTED_VERSION)
                continue
            jobs.append((i, r.data, fetch_offset, max_bytes))
        if not jobs:
            return {}
        converted = await asyncio.to_thread(_down_convert_all, jobs, magic)
        out: dict[int, bytes] = {}
        for i, answer in converted.items():
            if isinstance(answer, KafkaError):
                results[i].error_code = int(answer.error_code)
            else:
                out[i] = answer
        return out

    # -- list offsets -----------------------------------------------------------------------

    @staticmethod
    def offset_for_timestamp(partition: Partition, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets' lookup: earliest (-2), latest (-1), max timestamp (-3), or the first
        record whose timestamp is >= ``timestamp``.

        Kafka answers with the exact record, not the batch holding it: a timestamp lookup
        decodes the records of the one batch the time index leads to, and the max-timestamp
        answer is the first record of its batch carrying that timestamp. These are the only
        reads that look inside batches, one batch per lookup.
        """
        plog = partition.log
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

    # -- fetch ------------------------------------------------------------------------------

    async def fetch_messages(self, params: FetchParams, wanted: list[FetchKey]
                             ) -> list[FetchResult]:
        """A Fetch (Kafka's fetchMessages): each partition of ``wanted`` read in order
        within ``params.max_bytes`` (the first non-empty one whole even if bigger). With
        less than min_bytes and a max wait, a DelayedFetch waits in the fetch purgatory;
        it compares offsets at each check and reads the log again once, when it completes
        (enough data, an error to answer, or the wait's end).

        A follower's fetch (``params.replica_id`` >= 0) records its position at the first
        and the final read. The leader's replication throttle holds back, while its quota
        is exceeded, the throttled partitions of a follower out of the ISR (no records; the
        position still counts), which then count nothing towards min_bytes; such a fetch
        waits only until the quota allows them again. The bytes of throttled partitions
        served are recorded against the quota."""
        quota = self.leader_quota
        if quota is not None and not (params.replica_id >= 0 and quota.throttled):
            quota = None  # a consumer's fetch, or nothing throttled: one truth test
        results = self._read_all(params, wanted, quota)
        max_wait = params.max_wait_ms
        if quota is not None and max_wait > 0:
            max_wait = self._throttled_wait(quota, wanted, params.replica_id, max_wait)
        if max_wait > 0 and wanted and not _satisfied(results, params.min_bytes):
            done: asyncio.Future[list[FetchResult]] = \
                asyncio.get_running_loop().create_future()
            starts = [r.data.fetch_offset_metadata if r.data is not None
                      else LogOffsetMetadata(k[2]) for k, r in zip(wanted, results, strict=True)]
            op = DelayedFetch(max_wait, params, wanted, starts, self,
                              lambda: self._read_all(params, wanted, quota), done)
            self.fetch_purgatory.try_complete_else_watch(op, {(k[0], k[1]) for k in wanted})
            results = await done
        if quota is not None:
            quota.record(sum(r.size for k, r in zip(wanted, results, strict=True)
                             if r.size and quota.is_throttled(k[0], k[1])))
        if self.topic_metrics is not None:
            self.topic_metrics.record_fetch(params.replica_id >= 0, wanted, results)
        return results

    def end_offset_metadata(self, topic: str, partition: int, current_leader_epoch: int,
                            isolation: FetchIsolation, fetch_only_leader: bool = True
                            ) -> LogOffsetMetadata:
        """DelayedFetch's check: where a fetch of ``isolation`` may read up to (Kafka's
        fetchOffsetSnapshot); the KafkaError its read would answer, if any."""
        return self._partition_for_fetch(topic, partition, current_leader_epoch,
                                         fetch_only_leader).end_offset_metadata(isolation)

    def _partition_for_fetch(self, topic: str, partition: int, current_leader_epoch: int,
                             require_leader: bool = True) -> Partition:
        """The partition a fetch reads, as Kafka checks it (Partition.getLocalLog): hosted
        here, then the epoch the client names (when it names one), then leadership unless
        a follower may answer (a consumer's Fetch v11+, KIP-392)."""
        p = self.partitions.get((topic, partition))
        if p is None:
            self._check_offline(topic, partition)
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} is not hosted")
        if current_leader_epoch >= 0:
            p.check_leader_epoch(current_leader_epoch)
        if require_leader and not p.is_leader:
            raise NotLeaderOrFollowerError(f"not the leader of {topic}-{partition}")
        return p

    def _preferred_read_replica(self, p: Partition, client: ClientMetadata,
                                fetch_offset: int) -> int | None:
        """Kafka's findPreferredReadReplica on a leader: the selector picks among the
        leader and the in-sync followers whose log covers ``fetch_offset``."""
        selector = self.replica_selector
        assert selector is not None
        now = self.clock()
        followers = []
        for broker_id in p.isr:
            state = p.remote_replicas.get(broker_id)
            if state is not None and state.log_start_offset <= fetch_offset \
                    <= state.log_end_offset:
                followers.append(ReplicaView(broker_id, state.log_end_offset,
                                             now - state.last_caught_up_time_ms))
        leader = ReplicaView(self.broker_id, p.log_end_offset, 0)
        return selector.preferred_read_replica(client, leader, followers)

    def should_leader_throttle(self, topic: str, partition: int, replica_id: int) -> bool:
        """Kafka's shouldLeaderThrottle: a throttled partition, the leader's quota exceeded,
        and ``replica_id`` out of its ISR."""
        quota = self.leader_quota
        if quota is None or not quota.is_throttled(topic, partition):
            return False
        if not quota.is_quota_exceeded():
            return False
        p = self.partitions.get((topic, partition))
        return p is None or replica_id not in p.isr

    def _throttled_wait(self, quota: ReplicationQuotaManager, wanted: list[FetchKey],
                        replica_id: int, max_wait: int) -> int:
        """A follower fetch with partitions held back by the leader quota waits only until
        the quota allows them again (not the full max_wait, which would leave the link idle
        and the rate below the bound). Fetches holding nothing back (an in-sync follower's)
        keep their max_wait."""
        wait_s = quota.throttle_time()
        if wait_s <= 0:
            return max_wait
        for topic, partition, _o, _m, _e in wanted:
            if quota.is_throttled(topic, partition):
                p = self.partitions.get((topic, partition))
                if p is not None and replica_id not in p.isr:
                    return max(1, min(max_wait, math.ceil(wait_s * 1000)))
        return max_wait

    def _read_all(self, params: FetchParams, wanted: list[FetchKey],
                  quota: ReplicationQuotaManager | None) -> list[FetchResult]:
        """Read every partition wanted, within the fetch's max bytes (Kafka's
        readFromLocalLog). ``quota`` (a follower's fetch, when a topic is throttled) holds
        back throttled partitions for an out-of-sync follower."""
        replica_id = params.replica_id
        isolation = params.isolation
        committed = isolation is _TXN_COMMITTED
        from_follower = isolation is _LOG_END
        client = params.client_metadata
        starts = params.follower_log_start_offsets
        remaining = params.max_bytes
        min_one = True
        out = []
        exceeded: bool | None = None  # asked once per read, when a throttled partition comes up
        for topic, partition, offset, part_max, epoch in wanted:
            limit = min(part_max, remaining) if remaining > 0 else 0
            held = False
            if quota is not None and quota.is_throttled(topic, partition):
                if exceeded is None:
                    exceeded = quota.is_quota_exceeded()
                if exceeded:
                    p = self.partitions.get((topic, partition))
                    # Kafka answers with no records; the follower's position still counts.
                    held = p is None or replica_id not in p.isr
            start = -1 if starts is None else starts.get((topic, partition), -1)
            if held or (limit <= 0 and not min_one):
                r = self.read(topic, partition, offset, 0, isolation_committed=committed,
                              from_follower=from_follower, min_one_message=False,
                              current_leader_epoch=epoch, replica_id=replica_id,
                              client_metadata=client, follower_log_start_offset=start)
            else:
                r = self.read(topic, partition, offset, max(limit, 0),
                              isolation_committed=committed, from_follower=from_follower,
                              min_one_message=min_one, current_leader_epoch=epoch,
                              replica_id=replica_id, client_metadata=client,
                              follower_log_start_offset=start)
            if r.size:
                min_one = False
                remaining -= r.size
            out.append(r)
        return out

    def read(
        self,
        topic: str,
        partition_index: int,
        fetch_offset: int,
        max_bytes: int,
        *,
        isolation_committed: bool,
        from_follower: bool,
        min_one_message: bool,
        current_leader_epoch: int = -1,
        replica_id: int = -1,
        client_metadata: ClientMetadata | None = None,
        follower_log_start_offset: int = -1,
    ) -> FetchResult:
        """Read for a consumer (up to the high watermark) or, with ``from_follower``, a
        follower (up to the log end offset). A ``replica_id`` >= 0 also records that
        follower's position (its fetch offset, and its log start offset) on the leader, as
        Kafka does after the read.

        KIP-392: a consumer with ``client_metadata`` (Fetch v11+) may be answered by a
        follower, up to the follower's high watermark; on the leader, a replica selector
        may name a follower for it instead (no records, ``preferred_read_replica``)."""
        try:
            if client_metadata is None or replica_id >= 0:
                p = self._partition_for_fetch(topic, partition_index, current_leader_epoch)
                if replica_id >= 0:
                    return self._read_for_follower(p, replica_id, fetch_offset, max_bytes,
                                                   min_one_message, follower_log_start_offset)
            else:
                p = self._partition_for_fetch(topic, partition_index, current_leader_epoch,
                                              False)
                if self.replica_selector is not None and p.is_leader:
                    preferred = self._preferred_read_replica(p, client_metadata,
                                                             fetch_offset)
                    if preferred is not None:
                        return FetchResult(0, p.high_watermark, p.last_stable_offset,
                                           p.log_start_offset, preferred_read_replica=preferred)
            hw = p.high_watermark
            lso = p.last_stable_offset
            data = p.read(fetch_offset, max_bytes, isolation_committed=isolation_committed,
                          from_follower=from_follower, min_one_message=min_one_message)
            aborted = None
            if isolation_committed:
                aborted = [(t.producer_id, t.first_offset)
                           for t in (data.aborted_transactions or [])]
            return FetchResult(0, hw, lso, p.log_start_offset, data, aborted)
        except OffsetOutOfRangeError as exc:
            p2 = self.partitions.get((topic, partition_index))
            return FetchResult(int(exc.error_code),
                               p2.high_watermark if p2 else -1,
                               p2.last_stable_offset if p2 else -1,
                               p2.log_start_offset if p2 else -1)
        except KafkaError as exc:
            return FetchResult(int(exc.error_code))
        except OSError as exc:
            p3 = self.partitions.get((topic, partition_index))
            log.error("reading %s-%d failed: %s", topic, partition_index, exc)
            if p3 is not None:
                self.report_io_error(p3.log.dir, exc)
            return FetchResult(int(ErrorCode.KAFKA_STORAGE_ERROR))

    def _read_for_follower(self, p: Partition, replica_id: int, fetch_offset: int,
                           max_bytes: int, min_one_message: bool,
                           follower_log_start_offset: int = -1) -> FetchResult:
        leader_end = p.log_end_offset
        data = p.read(fetch_offset, max_bytes, isolation_committed=False, from_follower=True,
                      min_one_message=min_one_message)
        moved = p.update_follower_fetch_state(replica_id, fetch_offset, leader_end,
                                              self.clock(), follower_log_start_offset)
        if moved is None:
            log.warning("leader %d ignoring a fetch of %s-%d from broker %d: not one of its "
                        "replicas %s", self.broker_id, p.topic, p.partition, replica_id,
                        list(p.replicas))
            data = FetchDataInfo(data.fetch_offset_metadata)
        elif moved:
            self.try_complete_delayed_requests((p.topic, p.partition))
        # The high watermark after this fetch's position counted: followers learn it sooner.
        return FetchResult(0, p.high_watermark, p.last_stable_offset, p.log_start_offset, data)

    # -- replication: follower side ---------------------------------------------------------

    def append_as_follower(self, tp: TopicPartition, records: RecordsBuffer,
                           leader_high_watermark: int, leader_log_start_offset: int
                           ) -> LogAppendInfo | None:
        p = self.partitions.get(tp)
        if p is None or p.is_leader:
            raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]} is not a follower here")
        if self.topic_metrics is not None:
            self.topic_metrics.record_replication_in(len(records))
        before = p.high_watermark
        try:
            info = p.append_records_to_follower(records, leader_high_watermark,
                                                leader_log_start_offset)
        except OSError as exc:
            self.report_io_error(p.log.dir, exc)
            raise KafkaStorageError(f"appending to {tp[0]}-{tp[1]} failed: {exc}") from None
        if p.high_watermark != before:
            # Consumers reading from this follower (KIP-392) wait for its high watermark
            # (Kafka's completeDelayedFetchRequests after a follower's fetch).
            self.fetch_purgatory.check_and_complete(tp)
        return info

    def truncate_to(self, tp: TopicPartition, offset: int) -> None:
        p = self.partitions.get(tp)
        if p is None or p.is_leader:
            raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]} is not a follower here")
        # Through the LogManager, which keeps the log cleaner off the log meanwhile.
        if self.log_manager.truncate_to(tp[0], tp[1], offset):
            log.info("truncated %s-%d to offset %d", tp[0], tp[1], offset)

    def truncate_fully_and_start_at(self, tp: TopicPartition, offset: int) -> None:
        p = self.partitions.get(tp)
        if p is None or p.is_leader:
            raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]} is not a follower here")
        log.info("truncating %s-%d fully, starting at offset %d", tp[0], tp[1], offset)
        self.log_manager.truncate_fully_and_start_at(tp[0], tp[1], offset)

    # -- replication: leader side -----------------------------------------------------------

    def last_offset_for_leader_epoch(self, topic: str, partition_index: int,
                                     current_leader_epoch: int, leader_epoch: int
                                     ) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch: (error code, leader epoch, end offset) -- the largest epoch
        <= ``leader_epoch`` this leader knows and where it ends (Kafka's
        Partition.lastOffsetForLeaderEpoch, leader only)."""
        try:
            p = self.partitions.get((topic, partition_index))
            if p is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{partition_index} is not hosted")
            if current_leader_epoch >= 0:
                p.check_leader_epoch(current_leader_epoch)
            if not p.is_leader:
                raise NotLeaderOrFollowerError(f"not the leader of {topic}-{partition_index}")
        except KafkaError as exc:
            return int(exc.error_code), UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        epoch, end = p.log.leader_epoch_cache.end_offset_for(leader_epoch, p.log_end_offset)
        if end == UNDEFINED_EPOCH_OFFSET:
            return 0, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return 0, epoch, end

    def check_enough_replicas_reach_offset(self, tp: TopicPartition,
                                           required_offset: int) -> tuple[bool, int]:
        """DelayedProduce's test for one partition: (done, error code)."""
        p = self.partitions.get(tp)
        if p is None:
            if tp in self.log_manager.offline_partitions:
                return True, int(ErrorCode.KAFKA_STORAGE_ERROR)
            return True, int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return p.check_enough_replicas_reach_offset(required_offset,
                                                    p.log.config.min_insync_replicas)

    def _propose_isr(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        """Partition.isr_updater: write the change off the loop, then complete it."""
        state = paths.LeaderIsrAndControllerEpoch(
            leader=self.broker_id, leader_epoch=partition.leader_epoch, isr=new_isr,
            controller_epoch=partition.controller_epoch)
        task = asyncio.get_running_loop().create_task(
            self._write_isr(partition, state, partition.zk_version))
        self._isr_writes.add(task)
        task.add_done_callback(self._isr_writes.discard)

    async def _write_isr(self, partition: Partition, state: paths.LeaderIsrAndControllerEpoch,
                         zk_version: int) -> None:
        store = self.isr_store
        assert store is not None
        tp = (partition.topic, partition.partition)
        old_isr = partition.isr
        current = None
        try:
            new_version = await asyncio.to_thread(store.update_partition_state, tp[0], tp[1],
                                                  state, zk_version)
            if new_version is None:
                current = await asyncio.to_thread(store.read_partition_state, tp[0], tp[1])
        except (MetastoreError, OSError, ValueError) as exc:
            log.warning("writing the ISR %s of %s-%d failed: %s", list(state.isr), tp[0],
                        tp[1], exc)
            new_version = None
        moved = partition.complete_isr_update(state.isr, state.leader_epoch, new_version)
        if new_version is None:
            if (current is not None and current[0].leader == self.broker_id
                    and current[0].leader_epoch == partition.leader_epoch
                    and partition.pending_isr is None and partition.is_leader):
                # The znode is this very leadership's state at a version we were not told
                # (Kafka checks the data the same way): adopt it; the next fetch or
                # expiration pass proposes the change again on top of it.
                log.info("ISR %s of %s-%d not written: zk version %d is stale; adopting the "
                         "state znode (ISR %s, version %d)", list(state.isr), tp[0], tp[1],
                         zk_version, list(current[0].isr), current[1])
                partition.isr = current[0].isr
                partition.zk_version = current[1]
                moved = partition.maybe_increment_high_watermark()
            else:
                log.info("ISR %s of %s-%d not written: the state znode moved on (%s); "
                         "waiting for the controller's LeaderAndIsr", list(state.isr), tp[0],
                         tp[1], current[0] if current is not None else "absent")
        if new_version is not None and self.partitions.get(tp) is partition:
            if self.isr_metrics is not None and partition.isr == state.isr:
                self.isr_metrics.record_change(old_isr, state.isr)
            self.isr_changes.add(tp)
            self.last_isr_change_ms = self.clock()
        if moved:
            self.try_complete_delayed_requests(tp)

    def maybe_shrink_isrs(self) -> int:
        """The isr-expiration pass: every led partition drops followers that lag."""
        now = self.clock()
        shrunk = 0
        for p in list(self.partitions.values()):
            if p.is_leader and len(p.isr) > 1 and p.maybe_shrink_isr(
                    self.replica_lag_time_max_ms, now):
                shrunk += 1
                if p.isr_updater is None:  # applied at once: the HW may have moved
                    if self.isr_metrics is not None:
                        self.isr_metrics.shrinks += 1
                    self.isr_changes.add((p.topic, p.partition))
                    self.last_isr_change_ms = now
                    self.try_complete_delayed_requests((p.topic, p.partition))
        return shrunk

    async def maybe_propagate_isr_changes(self, force: bool = False) -> bool:
        """Write one /isr_change_notification for the ISR changes since the last one, when
        none happened for 5 s or the last notification is 60 s old (Kafka's rule)."""
        if not self.isr_changes or self.isr_store is None:
            return False
        now = self.clock()
        if not (force or now - self.last_isr_change_ms > ISR_CHANGE_PROPAGATION_BLACKOUT_MS
                or now - self.last_isr_propagation_ms > ISR_CHANGE_PROPAGATION_INTERVAL_MS):
            return False
        changes, self.isr_changes = self.isr_changes, set()
        try:
            await asyncio.to_thread(self.isr_store.notify_isr_change, changes)
        except (MetastoreError, OSError) as exc:
            log.warning("writing an ISR change notification failed: %s", exc)
            self.isr_changes |= changes
            return False
        self.last_isr_propagation_ms = now
        return True

    def startup(self) -> None:
        """Start the isr-expiration (every replica.lag.time.max.ms / 2) and ISR change
        propagation tasks."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._isr_expiration()),
                       loop.create_task(self._isr_propagation())]

    async def _isr_expiration(self) -> None:
        while True:
            await asyncio.sleep(max(self.replica_lag_time_max_ms // 2, 10) / 1000)
            try:
                self.maybe_shrink_isrs()
            except Exception:
                log.exception("ISR expiration failed")

    async def _isr_propagation(self) -> None:
        while True:
            await asyncio.sleep(ISR_CHANGE_CHECK_MS / 1000)
            try:
                await self.maybe_propagate_isr_changes()
            except Exception:
                log.exception("ISR change propagation failed")

    def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []
        for task in list(self._isr_writes):
            task.cancel()
        if self._check_pool is not None:
            self._check_pool.shutdown(wait=False, cancel_futures=True)
            self._check_pool = None
        self.partitions.clear()
        # Waiting requests are not answered: their connections are closed by now.
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        if self._owns_timer:
            self.timer.close()


def _guard(guards: Mapping[TopicPartition, VerificationGuard] | None, tp: TopicPartition
           ) -> VerificationGuard | None:
    """A partition's guard for its append: None when nothing is verified, the sentinel when
    the partition needed none (its transaction is ongoing, or it has no transactional data)."""
    if guards is None:
        return None
    return guards.get(tp, VerificationGuard.SENTINEL)


#: Verification errors a producer may not retry correctly, answered as NOT_ENOUGH_REPLICAS
#: (retriable, and no metadata refresh), as Kafka's ReplicaManager does.
_RETRY_VERIFICATION = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR})


def _verification_refusal(code: ErrorCode) -> ProduceResult:
    """A partition the coordinator did not confirm, as the producer is answered (Kafka's
    handleProduceAppend postVerificationCallback)."""
    if code is ErrorCode.INVALID_TXN_STATE:
        return ProduceResult(int(code), error_message="Partition was not added to the "
                                                      "transaction")
    if code in _RETRY_VERIFICATION:
        return ProduceResult(int(ErrorCode.NOT_ENOUGH_REPLICAS), error_message=(
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {code.name}"))
    return ProduceResult(int(code))


def _satisfied(results: list[FetchResult], min_bytes: int) -> bool:
    """A fetch answers at once with an error to tell, a preferred read replica to name
    (KIP-392), or min_bytes (at least 1) read."""
    total = 0
    for r in results:
        if r.error_code or r.preferred_read_replica >= 0:
            return True
        total += r.size
    return total >= max(min_bytes, 1)


def _apply_isr_errors(results: ProduceResults, errors: dict[TopicPartition, int]) -> None:
    for tp, error in errors.items():
        if error:
            r = results[tp]
            results[tp] = ProduceResult(error, r.base_offset, r.log_append_time_ms,
                                        r.log_start_offset,
                                        error_message=ErrorCode(error).name, info=r.info)


def _down_convert_all(jobs: list[tuple[int, FetchDataInfo, int, int]], magic: int
                      ) -> dict[int, bytes | KafkaError]:
    """``ReplicaManager.down_convert``'s worker: read each region and convert it."""
    out: dict[int, bytes | KafkaError] = {}
    for i, data, fetch_offset, max_bytes in jobs:
        try:
            out[i] = down_convert(data.read_bytes(), magic, fetch_offset, max_bytes=max_bytes)
        except KafkaError as exc:
            out[i] = exc.with_traceback(None)
        except OSError as exc:
            log.error("reading records to down-convert failed: %s", exc)
            out[i] = KafkaError(f"reading the records failed: {exc}")
    return out


def _check_weight(records: RecordsBuffer, config: LogConfig) -> int | None:
    """Bytes the record check of ``records`` walks on the event loop, or None when the
    check belongs in a worker thread: a compressed batch (inflating costs what the
    producer's ratio says, up to the decompression bound) or one to recompress. Reads the
    headers only; a payload whose headers do not parse weighs nothing (refused at once)."""
    n = len(records)
    target = None if config.compression_type == "producer" else int(
        _CODEC_BY_NAME[config.compression_type])
    if n >= RECORD_BATCH_OVERHEAD:
        length, magic, attributes, _delta, _count = _ONE_BATCH.unpack_from(records, 0)
        if magic < MAGIC_V2:
            return None  # a v0/v1 message set to convert: a worker's job
        if length + LOG_OVERHEAD == n:  # one batch: the common case
            codec = attributes & COMPRESSION_CODEC_MASK
            if codec or (target is not None and codec != target
                         and not attributes & CONTROL_FLAG_MASK):
                return None
            return n
    try:
        for h in iter_batch_headers(memoryview(records)):
            if h.magic == MAGIC_V2 and (h.compression_id or (
                    target is not None and h.compression_id != target and not h.is_control)):
                return None
    except KafkaError:
        return 0
    return n


def _record_offsets_and_timestamps(batch: bytes) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of the first batch in ``batch`` (the record
    locator of timestamp lookups): column-wise for v2, record by record for v0/v1."""
    header = read_batch_header(batch, 0)
    if header.magic == MAGIC_V2:
        columns = record_columns(batch, header)
        return zip(columns.offsets, columns.timestamps, strict=True)
    return ((r.offset, r.timestamp) for r in iter_any_records(batch, header))
