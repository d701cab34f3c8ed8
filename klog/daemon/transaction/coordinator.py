"""TransactionCoordinator: Kafka's transaction coordinator (ZooKeeper-mode Kafka 3.x).

The APIs, as Kafka's TransactionCoordinator answers them (handlers map PRODUCER_FENCED to
INVALID_PRODUCER_EPOCH for the versions that predate it):

- ``init_producer_id``: a new transactional id gets a producer id from the
  ``ProducerIdManager`` and epoch 0; a known one in Empty/CompleteCommit/CompleteAbort gets
  its epoch bumped (a new producer id once the epoch is exhausted), which fences the
  previous producer; in Ongoing the transaction is first aborted with a bumped epoch
  (PrepareEpochFence -> PrepareAbort) and CONCURRENT_TRANSACTIONS answered, so the client
  retries; KIP-360 recovery with the producer id and epoch in the request (a stale pair is
  PRODUCER_FENCED; a retry of a bump that succeeded gets the same epoch). The timeout must
  be in (0, ``transaction.max.timeout.ms``] (else INVALID_TRANSACTION_TIMEOUT).
- ``add_partitions`` (AddPartitionsToTxn, and AddOffsetsToTxn with the group's
  ``__consumer_offsets`` partition): Empty/Complete*/Ongoing -> Ongoing.
- ``end_transaction`` (EndTxn): Ongoing -> PrepareCommit/PrepareAbort, written, answered;
  then the markers (markers.py) and CompleteCommit/CompleteAbort written once every
  partition has its marker. A retried EndTxn of a completed transaction is NONE, of one
  still completing CONCURRENT_TRANSACTIONS; the wrong result for the state is
  INVALID_TXN_STATE.
- Unknown transactional id: INVALID_PRODUCER_ID_MAPPING; another producer id: the same;
  another epoch: PRODUCER_FENCED; a transition still being written: CONCURRENT_TRANSACTIONS.

Every state change is written to ``__transaction_state`` (acks=all) before it is answered
or acted on (state_manager.py). A partition loaded with transactions in PrepareCommit or
PrepareAbort resumes sending their markers.

Timeouts: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` Ongoing
transactions older than their timeout are aborted with a bumped epoch (the producer is
fenced); every ``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle
(Empty/CompleteCommit/CompleteAbort) for ``transactional.id.expiration.ms`` are removed
(Dead, a tombstone).

``verify_partitions_in_transaction`` answers KIP-890's question of a partition leader
(AddPartitionsToTxn v4+ with verify_only): is the partition in the producer's ongoing
transaction?

``describe`` and ``list_transactions`` are the read-only view of DescribeTransactions and
ListTransactions (v1: the duration filter of KIP-994).

Runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.daemon.tasks import stop_task
from klog.daemon.transaction.metadata import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    EXPIRABLE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    STATES_BY_NAME,
    IllegalTransitionError,
    TransactionMetadata,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from klog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from klog.daemon.config.broker import BrokerConfig
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.producer_ids import ProducerIdManager
    from klog.daemon.transaction.markers import TransactionMarkerChannelManager
    from klog.daemon.transaction.state_manager import TransactionStateManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: Wait before retrying the write of CompleteCommit/CompleteAbort (coordinator not
#: available: not enough replicas, a timeout).
COMPLETE_RETRY_S = 0.1


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One transactional id as DescribeTransactions answers it (Kafka's
    DescribeTransactionsResponse TransactionState). With an error (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, TRANSACTIONAL_ID_NOT_FOUND,
    INVALID_REQUEST for "") the other fields are Kafka's defaults."""

    transactional_id: str
    error_code: int = 0
    #: Kafka's state name: "Empty", "Ongoing", "PrepareCommit", ... ("" with an error).
    state: str = ""
    timeout_ms: int = 0
    #: When the ongoing transaction started (ms since the epoch); -1 when none.
    start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    #: The partitions in the transaction: topic -> sorted partition ids.
    topics: dict[str, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transactional id as ListTransactions answers it."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionList:
    """ListTransactions' answer: error_code COORDINATOR_LOAD_IN_PROGRESS while a partition
    of __transaction_state loads (as Kafka), COORDINATOR_NOT_AVAILABLE when the coordinator
    is not running; state filter names Kafka does not know are echoed back."""

    error_code: int
    unknown_state_filters: list[str]
    transactions: list[TransactionListing]


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionCoordinator:
    """Kafka's TransactionCoordinator (see the module docstring)."""

    def __init__(self, broker_id: int, config: DynamicBrokerConfig,
                 state_manager: TransactionStateManager, producer_ids: ProducerIdManager,
                 markers: TransactionMarkerChannelManager) -> None:
        self.broker_id = broker_id
        self._config = config
        self.state_manager = state_manager
        self.producer_ids = producer_ids
        self.markers = markers
        self.clock: Callable[[], int] = lambda: int(time.time() * 1000)
        # transactional id -> the task sending its markers and writing Complete*.
        self._completing: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._active = False
        state_manager.on_loaded = self._on_loaded
        state_manager.on_unloaded = self._on_unloaded

    @property
    def config(self) -> BrokerConfig:
        return self._config.current

    # -- InitProducerId ----------------------------------------------------------------------

    def validate_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.config.transaction_max_timeout_ms

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None
                               ) -> InitProducerIdResult:
        """InitProducerId for a transactional id; ``expected`` = (producer id, epoch)
        from a KIP-360 request (v3+), None when the request has -1/-1."""
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.INVALID_REQUEST)
        if not self.validate_timeout(timeout_ms):
            return InitProducerIdResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        sm = self.state_manager
        error, coordinator_epoch, metadata = sm.get(transactional_id)
        if error is not None:
            return InitProducerIdResult(error)
        if metadata is None:
            try:
                producer_id = await self.producer_ids.generate_producer_id()
            except KafkaError as exc:
                return InitProducerIdResult(exc.error_code)
            error, coordinator_epoch, metadata = sm.get(transactional_id)
            if error is not None:
                return InitProducerIdResult(error)
            if metadata is None:
                metadata = sm.put_if_absent(TransactionMetadata(
                    transactional_id, producer_id, txn_timeout_ms=timeout_ms,
                    txn_last_update_timestamp=self.clock()))
        try:
            result = await self._prepare_init_transit(metadata, timeout_ms, expected)
        except IllegalTransitionError as exc:
            # The state moved while a new producer id was fetched: the client retries.
            log.info("InitProducerId for %s: %s", transactional_id, exc)
            return InitProducerIdResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if isinstance(result, ErrorCode):
            return InitProducerIdResult(result)
        transit = result
        if transit.state == PREPARE_EPOCH_FENCE:
            # Abort the ongoing transaction first; the client retries and then gets the
            # epoch bumped a second time (a new producer id if that exhausts it).
            code = await self.end_transaction(transactional_id, transit.producer_id,
                                              transit.producer_epoch, committed=False,
                                              from_client=False)
            if metadata.pending_state == PREPARE_EPOCH_FENCE:
                metadata.abort_transition()  # refused before the fence was taken up
            return InitProducerIdResult(
                ErrorCode.CONCURRENT_TRANSACTIONS if code is ErrorCode.NONE else code)
        code = await sm.append(metadata, coordinator_epoch, transit)
        if code is not ErrorCode.NONE:
            return InitProducerIdResult(code)
        log.info("initialized transactional id %s with producer id %d and epoch %d on "
                 "partition %d", transactional_id, transit.producer_id,
                 transit.producer_epoch, sm.partition_for(transactional_id))
        return InitProducerIdResult(ErrorCode.NONE, transit.producer_id, transit.producer_epoch)

    async def _prepare_init_transit(self, metadata: TransactionMetadata, timeout_ms: int,
                                    expected: tuple[int, int] | None
                                    ) -> TxnTransitMetadata | ErrorCode:
        """Kafka's prepareInitProducerIdTransit."""
        if metadata.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if expected is not None:
            expected_id, expected_epoch = expected
            valid = (metadata.producer_epoch == NO_PRODUCER_EPOCH
                     or expected_id == metadata.producer_id
                     or (expected_id == metadata.last_producer_id
                         and is_epoch_exhausted(expected_epoch)))
            if not valid:
                return ErrorCode.PRODUCER_FENCED
        state = metadata.state
        if state in (PREPARE_ABORT, PREPARE_COMMIT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if state in (COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY):
            now = self.clock()
            if metadata.is_producer_epoch_exhausted and (
                    expected is None or expected[1] == metadata.producer_epoch):
                try:
                    new_id = await self.producer_ids.generate_producer_id()
                except KafkaError as exc:
                    return exc.error_code
                if metadata.pending_transition_in_progress:
                    return ErrorCode.CONCURRENT_TRANSACTIONS
                return metadata.prepare_producer_id_rotation(new_id, timeout_ms, now,
                                                             expected is not None)
            transit = metadata.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], now)
            return ErrorCode.PRODUCER_FENCED if transit is None else transit
        if state == ONGOING:
            return metadata.prepare_fence_producer_epoch()
        # Dead / PrepareEpochFence are never current states (Kafka: fatal).
        log.error("transactional id %s in state %s on InitProducerId",
                  metadata.transactional_id, metadata.state_name)
        return ErrorCode.UNKNOWN_SERVER_ERROR

    # -- AddPartitionsToTxn / AddOffsetsToTxn -------------------------------------------------

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions: Iterable[TopicPartition]
                             ) -> ErrorCode:
        """Kafka's handleAddPartitionsToTransaction: one error for all the partitions."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        wanted = set(partitions)
        sm = self.state_manager
        error, coordinator_epoch, metadata = sm.get(transactional_id)
        if error is not None:
            return error
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if metadata.pending_transition_in_progress \
                or metadata.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata.state == ONGOING and wanted <= metadata.partitions:
            return ErrorCode.NONE
        transit = metadata.prepare_add_partitions(wanted, self.clock())
        return await sm.append(metadata, coordinator_epoch, transit)

    def verify_partitions_in_transaction(
            self, transactional_id: str, producer_id: int, producer_epoch: int,
            partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 part 1 (Kafka's handleVerifyPartitionsInTransaction, AddPartitionsToTxn
        v4+ with verify_only): per partition NONE when it is in the producer's transaction,
        TRANSACTION_ABORTABLE when not (a transaction ended, or never added there: the
        write must not open one). One error for all when the transaction cannot be
        checked: NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / ..., an unknown id or
        another producer id INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED,
        a commit or abort being completed CONCURRENT_TRANSACTIONS. A pending transition
        is not waited for: the leader's log has the last word (its verification guard)."""
        wanted = list(dict.fromkeys(partitions))
        if not transactional_id:
            return dict.fromkeys(wanted, ErrorCode.INVALID_REQUEST)
        error, _epoch, metadata = self.state_manager.get(transactional_id)
        if error is None:
            if metadata is None or metadata.producer_id != producer_id:
                error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            elif metadata.producer_epoch != producer_epoch:
                error = ErrorCode.PRODUCER_FENCED
            elif metadata.state in (PREPARE_COMMIT, PREPARE_ABORT):
                error = ErrorCode.CONCURRENT_TRANSACTIONS
        if error is not None:
            log.debug("verifying %s for %s: %s", wanted, transactional_id, error.name)
            return dict.fromkeys(wanted, error)
        assert metadata is not None
        added = metadata.partitions
        return {tp: ErrorCode.NONE if tp in added else ErrorCode.TRANSACTION_ABORTABLE
                for tp in wanted}

    # -- EndTxn ------------------------------------------------------------------------------

    async def end_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, committed: bool,
                              from_client: bool = True) -> ErrorCode:
        """Kafka's endTransaction: PrepareCommit/PrepareAbort written, then the markers
        and Complete* in the background (answered after the Prepare* write)."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        sm = self.state_manager
        error, coordinator_epoch, metadata = sm.get(transactional_id)
        if error is not None:
            return error
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if (from_client and producer_epoch != metadata.producer_epoch) \
                or producer_epoch < metadata.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if metadata.pending_transition_in_progress \
                and metadata.pending_state != PREPARE_EPOCH_FENCE:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        state = metadata.state
        is_epoch_fence = False
        if state == ONGOING:
            next_state = PREPARE_COMMIT if committed else PREPARE_ABORT
            if next_state == PREPARE_ABORT and metadata.pending_state == PREPARE_EPOCH_FENCE:
                # The fence's epoch goes into the PrepareAbort record.
                is_epoch_fence = True
                metadata.pending_state = None
                metadata.producer_epoch = producer_epoch
                metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = metadata.prepare_abort_or_commit(next_state, self.clock())
        elif state == COMPLETE_COMMIT:
            return ErrorCode.NONE if committed else self._invalid(metadata, committed)
        elif state == COMPLETE_ABORT:
            return ErrorCode.NONE if not committed else self._invalid(metadata, committed)
        elif state == PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if committed \
                else self._invalid(metadata, committed)
        elif state == PREPARE_ABORT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if not committed \
                else self._invalid(metadata, committed)
        elif state == EMPTY:
            return self._invalid(metadata, committed)
        else:
            log.error("transactional id %s in state %s on EndTxn", transactional_id,
                      metadata.state_name)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        code = await sm.append(metadata, coordinator_epoch, transit)
        if code is not ErrorCode.NONE:
            if is_epoch_fence and sm.is_current(transactional_id, coordinator_epoch):
                # The bumped epoch was never handed out: the next fence reuses it.
                metadata.has_failed_epoch_fence = True
            return code
        # Kafka's sendTxnMarkersCallback checks before the markers go out.
        if not sm.is_current(transactional_id, coordinator_epoch):
            return ErrorCode.NOT_COORDINATOR
        if metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if metadata.pending_transition_in_progress:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        self._start_completion(metadata, coordinator_epoch)
        return ErrorCode.NONE

    @staticmethod
    def _invalid(metadata: TransactionMetadata, committed: bool) -> ErrorCode:
        log.debug("EndTxn(%s) for %s in state %s: INVALID_TXN_STATE",
                  "commit" if committed else "abort", metadata.transactional_id,
                  metadata.state_name)
        return ErrorCode.INVALID_TXN_STATE

    def _start_completion(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        """Markers to every partition, then Complete* (metadata in PrepareCommit/Abort)."""
        txn_id = metadata.transactional_id
        transit = metadata.prepare_complete(self.clock())
        task = asyncio.get_running_loop().create_task(
            self._complete(metadata, coordinator_epoch, transit,
                           metadata.state == PREPARE_COMMIT, set(metadata.partitions)),
            name=f"txn-markers-{txn_id}")
        old = self._completing.get(txn_id)
        if old is not None:
            old.cancel()
        self._completing[txn_id] = task

        def done(t: asyncio.Task[None]) -> None:
            if self._completing.get(txn_id) is t:
                del self._completing[txn_id]
            if not t.cancelled() and t.exception() is not None:
                log.error("completing the transaction of %s failed", txn_id,
                          exc_info=t.exception())

        task.add_done_callback(done)

    async def _complete(self, metadata: TransactionMetadata, coordinator_epoch: int,
                        transit: TxnTransitMetadata, committed: bool,
                        partitions: set[TopicPartition]) -> None:
        txn_id = metadata.transactional_id
        sm = self.state_manager

        def still_current() -> bool:
            if not sm.is_current(txn_id, coordinator_epoch):
                return False
            _e, _c, current = sm.get(txn_id)
            return current is metadata

        written = await self.markers.send_markers(
            metadata.producer_id, metadata.producer_epoch, coordinator_epoch, committed,
            partitions, still_current)
        if not written:
            log.info("stopped sending the markers of %s (no longer this coordinator's, or "
                     "fenced)", txn_id)
            return
        while True:
            if not still_current():
                return
            if metadata.pending_state is None:
                transit = metadata.prepare_complete(self.clock())
            code = await sm.append(metadata, coordinator_epoch, transit)
            if code is ErrorCode.NONE:
                log.debug("completed the transaction of %s: %s", txn_id, transit.state_name)
                return
            if code is not ErrorCode.COORDINATOR_NOT_AVAILABLE:
                log.info("not completing the transaction of %s: %s", txn_id, code.name)
                return
            await asyncio.sleep(COMPLETE_RETRY_S)

    # -- loading -----------------------------------------------------------------------------

    def _on_loaded(self, partition: int, coordinator_epoch: int,
                   metadatas: list[TransactionMetadata]) -> None:
        for metadata in metadatas:
            if metadata.state in (PREPARE_COMMIT, PREPARE_ABORT):
                log.info("resuming the %s of %s (producer id %d, epoch %d)",
                         "commit" if metadata.state == PREPARE_COMMIT else "abort",
                         metadata.transactional_id, metadata.producer_id,
                         metadata.producer_epoch)
                self._start_completion(metadata, coordinator_epoch)

    def _on_unloaded(self, partition: int) -> None:
        sm = self.state_manager
        for txn_id in [t for t in self._completing if sm.partition_for(t) == partition]:
            self._completing.pop(txn_id).cancel()

    # -- timeouts and expiration -------------------------------------------------------------

    def timed_out_transactions(self, now: int) -> list[TransactionMetadata]:
        return [m for m in self.state_manager.all_metadata()
                if m.state == ONGOING and m.pending_state is None
                and m.txn_start_timestamp + m.txn_timeout_ms < now]

    async def abort_timed_out_transactions(self, now: int | None = None) -> int:
        """Abort (with a bumped epoch) the Ongoing transactions past their timeout."""
        now = self.clock() if now is None else now
        aborted = 0
        for metadata in self.timed_out_transactions(now):
            try:
                transit = metadata.prepare_fence_producer_epoch()
            except IllegalTransitionError as exc:
                log.error("cannot abort the timed-out transaction of %s: %s",
                          metadata.transactional_id, exc)
                continue
            log.info("aborting the transaction of %s (producer id %d): older than its "
                     "timeout of %d ms", metadata.transactional_id, metadata.producer_id,
                     metadata.txn_timeout_ms)
            code = await self.end_transaction(metadata.transactional_id, transit.producer_id,
                                              transit.producer_epoch, committed=False,
                                              from_client=False)
            if metadata.pending_state == PREPARE_EPOCH_FENCE:
                metadata.abort_transition()  # refused before the fence was taken up
            if code is ErrorCode.NONE:
                aborted += 1
            else:
                log.info("aborting the timed-out transaction of %s failed: %s",
                         metadata.transactional_id, code.name)
        return aborted

    async def remove_expired_transactional_ids(self, now: int | None = None) -> int:
        """Tombstones for ids idle longer than transactional.id.expiration.ms."""
        now = self.clock() if now is None else now
        limit = now - self.config.transactional_id_expiration_ms
        sm = self.state_manager
        removed = 0
        for metadata in list(sm.all_metadata()):
            if metadata.state not in EXPIRABLE or metadata.pending_transition_in_progress \
                    or metadata.txn_last_update_timestamp > limit:
                continue
            error, coordinator_epoch, current = sm.get(metadata.transactional_id)
            if error is not None or current is not metadata:
                continue
            transit = metadata.prepare_dead()
            code = await sm.append(metadata, coordinator_epoch, transit)
            if code is ErrorCode.NONE:
                removed += 1
                log.info("removed expired transactional id %s", metadata.transactional_id)
        return removed

    async def _every(self, interval_ms: Callable[[], int],
                     work: Callable[[], Awaitable[int]]) -> None:
        while True:
            await asyncio.sleep(max(interval_ms(), 1) / 1000)
            try:
                await work()
            except Exception:
                log.exception("a transaction coordinator task failed")

    # -- the read-only view ------------------------------------------------------------------

    def describe(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """DescribeTransactions: one description per id, in order."""
        out = []
        for txn_id in transactional_ids:
            if not self._active:
                out.append(TransactionDescription(
                    txn_id, int(ErrorCode.COORDINATOR_NOT_AVAILABLE)))
                continue
            if not txn_id:
                out.append(TransactionDescription(txn_id, int(ErrorCode.INVALID_REQUEST)))
                continue
            error, _epoch, metadata = self.state_manager.get(txn_id)
            if error is not None:
                out.append(TransactionDescription(txn_id, int(error)))
                continue
            if metadata is None or metadata.state == DEAD:
                out.append(TransactionDescription(
                    txn_id, int(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)))
                continue
            topics: dict[str, list[int]] = {}
            for topic, partition in sorted(metadata.partitions):
                topics.setdefault(topic, []).append(partition)
            out.append(TransactionDescription(
                txn_id, 0, metadata.state_name, metadata.txn_timeout_ms,
                metadata.txn_start_timestamp, metadata.producer_id, metadata.producer_epoch,
                topics))
        return out

    def list_transactions(self, states_filter: Iterable[str] = (),
                          producer_ids_filter: Iterable[int] = (),
                          duration_filter_ms: int = -1) -> TransactionList:
        """ListTransactions over the ids this broker coordinates (Dead ones never); with
        ``duration_filter_ms`` >= 0 (v1, KIP-994) only those whose transaction started more
        than that long ago (Kafka compares now with the start time of every listed id,
        whatever its state)."""
        if not self._active:
            return TransactionList(int(ErrorCode.COORDINATOR_NOT_AVAILABLE), [], [])
        if self.state_manager.loading_partitions():
            return TransactionList(int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), [], [])
        state_names = list(states_filter)
        states = {STATES_BY_NAME[n] for n in state_names if n in STATES_BY_NAME}
        unknown = [n for n in state_names if n not in STATES_BY_NAME]
        producer_ids = set(producer_ids_filter)
        now = self.clock()
        listings = [
            TransactionListing(m.transactional_id, m.producer_id, m.state_name)
            for m in self.state_manager.all_metadata()
            if m.state != DEAD
            and (not producer_ids or m.producer_id in producer_ids)
            and (not state_names or m.state in states)
            and (duration_filter_ms < 0 or now - m.txn_start_timestamp > duration_filter_ms)
        ]
        return TransactionList(0, unknown, listings)

    # -- lifecycle ---------------------------------------------------------------------------

    def startup(self) -> None:
        """Start the timeout and expiration tasks (on the broker's loop)."""
        self._active = True
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._every(
                lambda: self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                self.abort_timed_out_transactions), name="txn-timeouts"),
            loop.create_task(self._every(
                lambda: self.config.transaction_remove_expired_transaction_cleanup_interval_ms,
                self.remove_expired_transactional_ids), name="txn-expiration"),
        ]

    async def shutdown(self) -> None:
        self._active = False
        for task in [*self._tasks, *self._completing.values()]:
            await stop_task(task, what="a transaction coordinator task")
        self._tasks = []
        self._completing.clear()
        await self.markers.shutdown()
