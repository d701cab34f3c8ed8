"""TransactionStateManager: transactional ids' state in ``__transaction_state``.

Owns, for the partitions of ``__transaction_state`` this broker leads (Kafka's
TransactionStateManager; where an id lives, the topic's creation, leadership and loading
being CoordinatorPartitions' machinery, klog/daemon/coordinator_partitions.py, shared
with the group coordinator):

- the topic's settings: compacted, uncompressed,
  ``min.insync.replicas`` = ``transaction.state.log.min.isr``, ``segment.bytes`` =
  ``transaction.state.log.segment.bytes``, replication factor
  ``transaction.state.log.replication.factor``;
- the cache: partition -> transactional id -> ``TransactionMetadata``, with the
  coordinator epoch of the partition (its leader epoch when this broker became leader);
- what a partition's load reads (``transaction.state.log.load.buffer.size`` at a time,
  in a worker thread) and installs; the coordinator's ``on_loaded`` hook then
  resumes the transactions found in PrepareCommit/PrepareAbort. Leadership lost: the
  partition's ids are dropped (``on_unloaded``);
- writing a transition: key TransactionLogKey v0, value TransactionLogValue v0 (a
  tombstone for Dead), one record per batch, acks=all through the replica manager
  (``origin=AppendOrigin.COORDINATOR``) within ``request.timeout.ms``; the metadata takes the new
  state only once the write is acknowledged and the partition is still ours at the same
  coordinator epoch (else NOT_COORDINATOR), and its pending state is dropped on failure.

Runs on the broker's event loop; the loader thread builds its own result.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.daemon.admin_rules import TopicSpec
from klog.daemon.coordinator_partitions import (
    APPEND_ERRORS,
    CoordinatorPartitions,
    read_partition,
)
from klog.daemon.transaction.metadata import (
    DEAD,
    TransactionMetadata,
    TxnTransitMetadata,
)
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import (
    InternalTopicError,
    TransactionLogKey,
    TransactionLogValue,
)
from klog.protocol.records.batch import BatchHeader
from klog.protocol.records.decode import iter_records
from klog.protocol.records.v2 import BatchBuilder
from klog.storage.validator import AppendOrigin

if TYPE_CHECKING:
    from klog.daemon.admin import AdminManager
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.metadata_cache import MetadataCache
    from klog.daemon.replica_manager import ReplicaManager
    from klog.storage.log import PartitionLog

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
TopicPartition = tuple[str, int]

# Append errors -> what the coordinator answers (Kafka's appendTransactionToLog).
_APPEND_ERRORS = {
    **APPEND_ERRORS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


@dataclass(slots=True)
class LoadResult:
    """The last value per transactional id in one partition (None: a tombstone)."""

    values: dict[str, TransactionLogValue | None]
    records: int = 0
    skipped: int = 0


def read_transaction_state_partition(plog: PartitionLog, buffer_size: int,
                                     is_stopped: Callable[[], bool] = lambda: False
                                     ) -> LoadResult:
    """Read a whole ``__transaction_state`` partition (any thread)."""
    result = LoadResult({})

    def visit(view: memoryview, h: BatchHeader, position: int) -> None:
        if h.is_control:
            return
        h.ensure_valid(view)
        for record in iter_records(view, h):
            if record.offset < position:
                continue
            result.records += 1
            if record.key is None:
                result.skipped += 1
                continue
            try:
                key = TransactionLogKey.decode(record.key)
                result.values[key.transactional_id] = None if record.value is None \
                    else TransactionLogValue.decode(record.value)
            except InternalTopicError as exc:
                log.warning("skipping an undecodable %s record: %s",
                            TRANSACTION_STATE_TOPIC, exc)
                result.skipped += 1

    _end, corrupt = read_partition(plog, buffer_size, is_stopped, visit)
    result.skipped += corrupt
    return result


class TransactionStateManager(CoordinatorPartitions[LoadResult]):
    """See the module docstring. Lives on the broker's event loop thread."""

    topic = TRANSACTION_STATE_TOPIC
    # The coordinator epoch is the leader epoch a partition was loaded at: a newer one
    # reloads it.
    reload_on_new_epoch = True

    def __init__(self, broker_id: int, config: DynamicBrokerConfig,
                 metadata_cache: MetadataCache, replica_manager: ReplicaManager,
                 admin: AdminManager) -> None:
        super().__init__(broker_id, config, metadata_cache, replica_manager, admin)
        self.clock: Callable[[], int] = lambda: int(time.time() * 1000)
        # partition -> transactional id -> metadata, for loaded partitions only.
        self._cache: dict[int, dict[str, TransactionMetadata]] = {}
        # Hooks the coordinator sets: a partition loaded (its epoch and ids), unloaded.
        self.on_loaded: Callable[[int, int, list[TransactionMetadata]], None] = \
            lambda p, e, m: None
        self.on_unloaded: Callable[[int], None] = lambda p: None

    # -- ids -------------------------------------------------------------------------------

    def get(self, transactional_id: str
            ) -> tuple[ErrorCode | None, int, TransactionMetadata | None]:
        """(error, coordinator epoch, metadata or None) -- Kafka's getTransactionState."""
        error = self.coordinator_error(transactional_id)
        if error is not None:
            return error, -1, None
        partition = self.partition_for(transactional_id)
        return None, self._epochs[partition], self._cache[partition].get(transactional_id)

    def put_if_absent(self, metadata: TransactionMetadata) -> TransactionMetadata:
        ids = self._cache[self.partition_for(metadata.transactional_id)]
        return ids.setdefault(metadata.transactional_id, metadata)

    def is_current(self, transactional_id: str, coordinator_epoch: int) -> bool:
        """Still this broker's id, at the coordinator epoch given?"""
        partition = self.partition_for(transactional_id)
        return partition in self._owned and partition not in self._loading \
            and self._epochs.get(partition) == coordinator_epoch

    def all_metadata(self) -> Iterator[TransactionMetadata]:
        """Every loaded id's metadata (loaded partitions only)."""
        for ids in self._cache.values():
            yield from ids.values()

    # -- the topic and its partitions --------------------------------------------------------

    def _configured_partitions(self) -> int:
        return self.config.transaction_state_log_num_partitions

    def _load_buffer_size(self) -> int:
        return self.config.transaction_state_log_load_buffer_size

    def _topic_spec(self) -> TopicSpec:
        return TopicSpec(
            TRANSACTION_STATE_TOPIC,
            num_partitions=self.config.transaction_state_log_num_partitions,
            replication_factor=self.config.transaction_state_log_replication_factor,
            configs=self.topic_configs())

    def topic_configs(self) -> dict[str, str | None]:
        return {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(self.config.transaction_state_log_min_isr),
            "segment.bytes": str(self.config.transaction_state_log_segment_bytes),
            "unclean.leader.election.enable": "false",
        }

    def _drop(self, partition: int, was_held: bool) -> None:
        self._cache.pop(partition, None)
        if was_held:
            self.on_unloaded(partition)

    def _read(self, plog: PartitionLog, buffer_size: int, is_stopped: Callable[[], bool]
              ) -> LoadResult:
        return read_transaction_state_partition(plog, buffer_size, is_stopped)

    def _install(self, partition: int, epoch: int, result: LoadResult,
                 started: float) -> None:
        ids: dict[str, TransactionMetadata] = {}
        for txn_id, value in result.values.items():
            if value is not None:
                ids[txn_id] = TransactionMetadata.from_log_value(txn_id, value)
        self._mark_loaded(partition)
        self._cache[partition] = ids
        log.log(logging.INFO if result.records else logging.DEBUG,
                "loaded %s-%d at coordinator epoch %d in %.3f s: %d record(s), "
                "%d transactional id(s)", TRANSACTION_STATE_TOPIC, partition,
                epoch, time.monotonic() - started, result.records, len(ids))
        try:
            self.on_loaded(partition, epoch, list(ids.values()))
        except Exception:
            log.exception("the coordinator failed to take %s-%d", TRANSACTION_STATE_TOPIC,
                          partition)

    # -- writing -----------------------------------------------------------------------------

    async def append(self, metadata: TransactionMetadata, coordinator_epoch: int,
                     transit: TxnTransitMetadata) -> ErrorCode:
        """Write ``transit`` (acks=all); on success it becomes the metadata's state. The
        coordinator's error code (NONE on success); the pending state is dropped on
        failure."""
        txn_id = metadata.transactional_id
        partition = self.partition_for(txn_id)
        tp = (TRANSACTION_STATE_TOPIC, partition)
        value = None if transit.state == DEAD else transit.to_log_value().encode()
        builder = BatchBuilder()
        builder.append(self.clock(), TransactionLogKey(txn_id).encode(), value)
        rm = self.replica_manager
        code: ErrorCode
        try:
            results = rm.append_records({tp: builder.build()}, -1, origin=AppendOrigin.COORDINATOR)
            results = await rm.wait_for_isr(results, self.config.request_timeout_ms)
            raw = results[tp].error_code
            try:
                code = ErrorCode(raw)
            except ValueError:
                code = ErrorCode.UNKNOWN_SERVER_ERROR
        except Exception:
            log.exception("appending to %s-%d failed", TRANSACTION_STATE_TOPIC, partition)
            code = ErrorCode.UNKNOWN_SERVER_ERROR
        if code is ErrorCode.NONE and not self.is_current(txn_id, coordinator_epoch):
            # Deposed (or reloaded at a newer epoch) while the write was waiting.
            code = ErrorCode.NOT_COORDINATOR
        if code is not ErrorCode.NONE:
            code = _APPEND_ERRORS.get(code, code)
            log.info("writing %s of %s to %s-%d failed: %s", transit.state_name, txn_id,
                     TRANSACTION_STATE_TOPIC, partition, code.name)
            if metadata.pending_state == transit.state:
                metadata.abort_transition()
            return code
        metadata.complete_transition(transit)
        if transit.state == DEAD:
            ids = self._cache.get(partition)
            if ids is not None and ids.get(txn_id) is metadata:
                del ids[txn_id]
        return code

    # -- lifecycle ---------------------------------------------------------------------------

    async def shutdown(self) -> None:
        await super().shutdown()
        self._cache.clear()
