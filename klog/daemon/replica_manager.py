"""ReplicaManager: the partitions this broker hosts, and produce and fetch against them.

Owns the map of hosted Partitions and applies LeaderAndIsr / StopReplica decisions from the
controller. Owns produce and fetch end to end, as Kafka's ReplicaManager: the handlers hand
it a request's partitions and await the answer (ProduceResult, FetchResult: their shapes
and the rules of a refused append are klog/daemon/replica_results.py's).

Produce (``produce``; ``append_records`` for the broker's own appends): each partition's
batches are validated once (klog/storage/validator.py, Kafka's LogValidator), appended by
its leader Partition, and for acks=-1 a DelayedProduce waits in the produce purgatory until
the ISR has them (``wait_for_isr``). A transactional produce is first verified with the
transaction coordinator (KIP-890 part 1, klog/daemon/txn_verification.py). Runs on the
event loop thread, except the validations that would hold it (inflating, recompressing, a
big uncompressed walk): the record checker's threads run those, and the appends they
precede still happen on the loop, in each partition's arrival order
(klog/daemon/record_checker.py).

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
the ISR of the partitions led here is shrunk, written and announced by ``isr_manager``
(klog/daemon/isr.py).

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
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from klog.daemon.delayed import DelayedFetch, DelayedProduce, FetchKey, FetchParams
from klog.daemon.isr import IsrChangeCounts, IsrManager, IsrStore
from klog.daemon.log_dirs import LogDirInfo, describe_log_dirs
from klog.daemon.metadata_cache import PartitionState
from klog.daemon.metrics.counters import BYTES_IN, MESSAGES_IN, TOTAL_PRODUCE
from klog.daemon.partition import (
    FetchIsolation,
    NotLeaderOrFollowerError,
    Partition,
    ProducerStateInfo,
    ReplicaSelector,
    UnknownLeaderEpochError,
)
from klog.daemon.purgatory import DelayedOperationPurgatory, Timer
from klog.daemon.record_checker import INLINE_CHECK_BYTES, RecordChecker
from klog.daemon.replica_results import (
    FetchResult,
    ProduceResult,
    ProduceResults,
    apply_isr_errors,
    fetch_satisfied,
    refused,
)
from klog.daemon.replica_selector import ClientMetadata
from klog.daemon.replication_quota import ReplicationQuotaManager
from klog.daemon.txn_verification import (
    TransactionVerifier,
    guard_for,
    transactional_producers,
    verification_refusal,
    verify_partitions,
)
from klog.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    KafkaError,
    KafkaStorageError,
    OffsetOutOfRangeError,
)
from klog.storage.config import LogConfig
from klog.storage.log import LogAppendInfo
from klog.storage.log_manager import LogManager
from klog.storage.producer_state import VerificationGuard
from klog.storage.validator import (
    AppendOrigin,
    RecordsBuffer,
    ValidatedRecords,
    inline_weight,
    validate_records,
)
from klog.storage.values import FetchDataInfo, LogOffsetMetadata

if TYPE_CHECKING:
    from klog.daemon.metrics.counters import BrokerTopicMetrics

log = logging.getLogger(__name__)

#: Logs created per worker-thread step (about 30-100 ms of directory and file creation).
LOG_CREATION_BATCH = 100

TopicPartition = tuple[str, int]

# Module constants: an enum member read through its class costs more, once per fetch.
_LOG_END = FetchIsolation.LOG_END
_TXN_COMMITTED = FetchIsolation.TXN_COMMITTED


UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class UnknownTopicOrPartitionError(KafkaError):
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class FetcherManager(Protocol):
    """The follower side's fetchers (klog.daemon.replica_fetcher.ReplicaFetcherManager)."""

    def add_partitions(self, partitions: dict[TopicPartition, tuple[int, int]]) -> None: ...

    def remove_partitions(self, tps: list[TopicPartition]) -> None: ...


class LogDirMoves(Protocol):
    """Moves between log dirs (klog.daemon.log_dir_mover.LogDirMover), told which
    partitions came and went."""

    def partitions_hosted(self, tps: Iterable[TopicPartition]) -> None: ...

    def partitions_stopped(self, tps: Iterable[TopicPartition]) -> None: ...


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
        isr_metrics: IsrChangeCounts | None = None,
    ) -> None:
        self.broker_id = broker_id
        # Kafka's BrokerTopicStats and the ISR change counts (klog/daemon/metrics); None
        # when metrics are off: produce and fetch then skip them at one test.
        self.topic_metrics = topic_metrics
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.leader_quota = leader_quota
        self._owns_timer = timer is None
        self.timer = Timer() if timer is None else timer
        self.fetch_purgatory: DelayedOperationPurgatory[DelayedFetch[list[FetchResult]]] = \
            DelayedOperationPurgatory("Fetch", self.timer, fetch_purge_interval)
        self.produce_purgatory: DelayedOperationPurgatory[DelayedProduce] = \
            DelayedOperationPurgatory("Produce", self.timer, produce_purge_interval)
        self.partitions: dict[TopicPartition, Partition] = {}
        # Partitions whose log could not be created here, with the reason (an OSError's
        # text); cleared when the log is made or the replica stopped.
        self.log_creation_failures: dict[TopicPartition, str] = {}
        self.clock: Callable[[], int] = lambda: int(time.time() * 1000)
        # The replica fetchers (klog.daemon.replica_fetcher.ReplicaFetcherManager); the
        # broker sets it (the fetchers need the replica manager first).
        self.fetcher_manager: FetcherManager | None = None
        # Shrinks, writes and announces the ISR of the partitions led here (daemon/isr.py).
        self.isr_manager = IsrManager(
            broker_id, self.partitions, store=isr_store,
            replica_lag_time_max_ms=replica_lag_time_max_ms, clock=lambda: self.clock(),
            on_high_watermark_moved=self.try_complete_delayed_requests, metrics=isr_metrics)
        # Validates a client's heavy produce in worker threads (daemon/record_checker.py).
        self.record_checker: RecordChecker[ProduceResult] = RecordChecker(lambda: self.clock())
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
                    partition.isr_updater = self.isr_manager.updater
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
        """DescribeProducers of a partition hosted here, leader or follower;
        UNKNOWN_TOPIC_OR_PARTITION when it is not hosted."""
        p = self.partitions.get((topic, partition))
        if p is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []
        return ErrorCode.NONE, p.active_producers()

    # -- log dirs ---------------------------------------------------------------------------

    def describe_log_dirs(self, wanted: set[TopicPartition] | None) -> list[LogDirInfo]:
        """DescribeLogDirs (klog/daemon/log_dirs.py); blocking: a worker thread."""
        return describe_log_dirs(self.log_manager, set(self.partitions), wanted)

    # -- produce ----------------------------------------------------------------------------

    def append_records(
        self,
        entries: Mapping[TopicPartition, RecordsBuffer | None],
        required_acks: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
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
                validated = validate_records(records, partition.log.config, origin,
                                             self.clock())
            except KafkaError as exc:
                results[tp] = self._refused(tp, exc, records)
                continue
            results[tp] = self._append_validated(tp, validated, required_acks,
                                                 guard_for(verification_guards, tp))
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
            weight = inline_weight(records, partition.log.config)
            if weight is not None and weight <= budget and not self.record_checker.busy(tp):
                budget -= weight
                inline[tp] = records
            else:
                later[tp] = self._append_in_order(tp, records, required_acks,
                                                  guard_for(verification_guards, tp))
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
        """KIP-890's verification of the partitions a producer writes to (mapped to the
        first sequence it writes there): (errors of the partitions that may not be
        appended, the guards to append the others with); daemon/txn_verification.py.
        Call only while ``verifies_transactions``."""
        verifier = self.txn_verifier
        assert verifier is not None
        return await verify_partitions(self.leader_partition, verifier, transactional_id,
                                       producer_id, producer_epoch, first_sequences, abortable)

    async def _verify_produce(self, entries: Mapping[TopicPartition, RecordsBuffer | None],
                              transactional_id: str, abortable: bool
                              ) -> tuple[ProduceResults, dict[TopicPartition,
                                                              VerificationGuard]]:
        """The produce side of ``verify_transaction`` (Kafka's handleProduceAppend): the
        refused partitions' results, with the coordinator's errors as a producer knows
        them, and the guards of the rest."""
        producers, first_sequences = transactional_producers(entries)
        if not producers:
            return {}, {}
        if len(producers) > 1:
            message = "Transactional records contained more than one producer ID"
            return {tp: ProduceResult(int(ErrorCode.INVALID_PRODUCER_ID_MAPPING),
                                      error_message=message) for tp in entries}, {}
        ((producer_id, producer_epoch),) = producers
        errors, guards = await self.verify_transaction(
            transactional_id, producer_id, producer_epoch, first_sequences, abortable)
        refused = {tp: verification_refusal(code) for tp, code in errors.items()}
        return {tp: ProduceResult(code, error_message=message)
                for tp, (code, message) in refused.items()}, guards

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
        apply_isr_errors(results, errors)
        if not required:
            return None
        loop = asyncio.get_running_loop()
        replicated: asyncio.Future[dict[TopicPartition, int]] = loop.create_future()
        final: asyncio.Future[ProduceResults] = loop.create_future()

        def answer(f: asyncio.Future[dict[TopicPartition, int]]) -> None:
            if not final.done():
                apply_isr_errors(results, f.result())
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
        """Records validated by the record checker's threads, appended in arrival order."""
        size = len(records)

        def finish(checked: ValidatedRecords | KafkaError) -> ProduceResult:
            if isinstance(checked, KafkaError):
                return self._refused(tp, checked, size)
            try:
                self.leader_partition(*tp)  # leadership may have moved while it was checked
            except KafkaError as exc:
                return self._refused(tp, exc, size)
            return self._append_validated(tp, checked, required_acks, verification_guard)

        return self.record_checker.append_in_order(tp, records, self.partitions[tp].log.config,
                                                   finish)

    def _append_validated(self, tp: TopicPartition, validated: ValidatedRecords,
                          required_acks: int,
                          verification_guard: VerificationGuard | None = None
                          ) -> ProduceResult:
        records = validated.records
        try:
            partition = self.leader_partition(*tp)
            config = partition.log.config
            info = partition.append_records_to_leader(
                validated, required_acks, config.min_insync_replicas, verification_guard
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
        """The result of an append refused with ``exc`` (klog/daemon/replica_results.py)."""
        return refused(tp[0], exc, records, self.partitions.get(tp), self.topic_metrics)

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
        if max_wait > 0 and wanted and not fetch_satisfied(results, params.min_bytes):
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
                                                   min_one_message, follower_log_start_offset,
                                                   current_leader_epoch)
            else:
                p = self._partition_for_fetch(topic, partition_index, current_leader_epoch,
                                              False)
                if self.replica_selector is not None and p.is_leader:
                    preferred = p.preferred_read_replica(
                        self.replica_selector, client_metadata, fetch_offset, self.clock())
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
            if replica_id < 0:
                # Kafka answers a consumer's OFFSET_OUT_OF_RANGE with unknown offsets (its
                # createLogReadResult); the consumer resets through ListOffsets.
                return FetchResult(int(exc.error_code))
            # klog's followers start over from the leader's log start offset it carries
            # (Kafka's ask for it with ListOffsets).
            p2 = self.partitions.get((topic, partition_index))
            return FetchResult(int(exc.error_code),
                               p2.high_watermark if p2 else -1,
                               p2.last_stable_offset if p2 else -1,
                               p2.log_start_offset if p2 else -1)
        except UnknownTopicOrPartitionError as exc:
            # Kafka answers a partition its metadata does not have before any read, with
            # an empty list of aborted transactions rather than none (v4+).
            return FetchResult(int(exc.error_code), aborted_transactions=[])
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
                           follower_log_start_offset: int = -1,
                           current_leader_epoch: int = -1) -> FetchResult:
        if replica_id not in p.remote_replicas:
            # Kafka's followerReplicaOrThrow: a fetch from a broker that is not one of the
            # partition's replicas reads nothing: UNKNOWN_LEADER_EPOCH when it names the
            # epoch (a replica this leader may not know yet, it retries), else
            # NOT_LEADER_OR_FOLLOWER.
            log.warning("leader %d refusing a fetch of %s-%d from broker %d: not one of its "
                        "replicas %s", self.broker_id, p.topic, p.partition, replica_id,
                        list(p.replicas))
            message = f"broker {replica_id} is not a replica of {p.topic}-{p.partition}"
            if current_leader_epoch >= 0:
                raise UnknownLeaderEpochError(message)
            raise NotLeaderOrFollowerError(message)
        leader_end = p.log_end_offset
        data = p.read(fetch_offset, max_bytes, isolation_committed=False, from_follower=True,
                      min_one_message=min_one_message)
        moved = p.update_follower_fetch_state(replica_id, fetch_offset, leader_end,
                                              self.clock(), follower_log_start_offset)
        if moved is None:  # no longer the leader meanwhile
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
        """OffsetForLeaderEpoch of a hosted partition: (error code, leader epoch, end
        offset), Partition.last_offset_for_leader_epoch."""
        p = self.partitions.get((topic, partition_index))
        if p is None:
            return (int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), UNDEFINED_EPOCH,
                    UNDEFINED_EPOCH_OFFSET)
        return p.last_offset_for_leader_epoch(current_leader_epoch, leader_epoch)

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

    def startup(self) -> None:
        """Start the ISR manager's isr-expiration and ISR change propagation tasks."""
        self.isr_manager.startup()

    def shutdown(self) -> None:
        self.isr_manager.shutdown()
        self.record_checker.shutdown()
        self.partitions.clear()
        # Waiting requests are not answered: their connections are closed by now.
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        if self._owns_timer:
            self.timer.close()
