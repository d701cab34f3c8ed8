"""TransactionStateManager: transactional ids' state in ``__transaction_state``.

Owns, for the partitions of ``__transaction_state`` this broker leads (Kafka's
TransactionStateManager):

- where a transactional id lives: partition ``abs(String.hashCode(id)) % partitions``
  (the group hash), the count being the topic's once it exists,
  ``transaction.state.log.num.partitions`` before;
- creating the topic on first use (FindCoordinator for a transactional id): compacted,
  uncompressed, ``min.insync.replicas`` = ``transaction.state.log.min.isr``,
  ``segment.bytes`` = ``transaction.state.log.segment.bytes``, replication factor
  ``transaction.state.log.replication.factor``;
- the cache: partition -> transactional id -> ``TransactionMetadata``, with the
  coordinator epoch of the partition (its leader epoch when this broker became leader);
- loading a partition when this broker becomes its leader (the log read in a worker
  thread, ``transaction.state.log.load.buffer.size`` at a time; the ids of a loading
  partition get COORDINATOR_LOAD_IN_PROGRESS); the coordinator's ``on_loaded`` hook then
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

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.daemon.admin import TopicSpec
from klog.daemon.group.metadata_manager import java_string_hash, kafka_abs
from klog.daemon.tasks import stop_task
from klog.daemon.transaction.metadata import (
    DEAD,
    TransactionMetadata,
    TxnTransitMetadata,
)
from klog.protocol.errors import CorruptRecordError, ErrorCode
from klog.protocol.internal_topics import (
    InternalTopicError,
    TransactionLogKey,
    TransactionLogValue,
)
from klog.protocol.records.batch import iter_batch_headers
from klog.protocol.records.decode import iter_records
from klog.protocol.records.v2 import BatchBuilder
from klog.storage.validator import AppendOrigin

if TYPE_CHECKING:
    from klog.daemon.admin import AdminManager
    from klog.daemon.config.broker import BrokerConfig
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.metadata_cache import MetadataCache, PartitionState
    from klog.daemon.replica_manager import ReplicaManager
    from klog.storage.log import PartitionLog

log = logging.getLogger(__name__)

TRANSACTION_STATE_TOPIC = "__transaction_state"
TopicPartition = tuple[str, int]

_CREATE_WAIT_MS = 3000
_PARTITION_CACHE_SIZE = 100_000

# Append errors -> what the coordinator answers (Kafka's appendTransactionToLog).
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
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
    position = plog.log_start_offset
    end = plog.log_end_offset
    buffer_size = max(buffer_size, 1)
    while position < end and not is_stopped():
        data = plog.read(position, buffer_size, None, True).read_bytes()
        if not data:
            break
        view = memoryview(data)
        next_position = position
        for h in iter_batch_headers(view):
            next_position = max(next_position, h.last_offset + 1)
            if h.last_offset < position or h.is_control:
                continue
            try:
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
            except CorruptRecordError as exc:
                log.error("%s: skipping a corrupt batch at offset %s: %s", plog.dir.name,
                          h.base_offset, exc)
                result.skipped += 1
        if next_position <= position:
            break
        position = next_position
    return result


class TransactionStateManager:
    """See the module docstring. Lives on the broker's event loop thread."""

    def __init__(self, broker_id: int, config: DynamicBrokerConfig,
                 metadata_cache: MetadataCache, replica_manager: ReplicaManager,
                 admin: AdminManager) -> None:
        self.broker_id = broker_id
        self._config = config
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        self.admin = admin
        self.clock: Callable[[], int] = lambda: int(time.time() * 1000)
        # partition -> transactional id -> metadata, for loaded partitions only.
        self._cache: dict[int, dict[str, TransactionMetadata]] = {}
        # partition -> coordinator epoch (the leader epoch it was loaded at).
        self._epochs: dict[int, int] = {}
        self._loading: dict[int, int] = {}  # partition -> load generation
        self._generation: dict[int, int] = {}
        self._load_tasks: set[asyncio.Task[None]] = set()
        self._partition_count: int | None = None
        self._partition_cache: dict[str, int] = {}
        self._partition_cache_count = 0
        self._creating: asyncio.Task[None] | None = None
        self._shutting_down = False
        # Hooks the coordinator sets: a partition loaded (its epoch and ids), unloaded.
        self.on_loaded: Callable[[int, int, list[TransactionMetadata]], None] = \
            lambda p, e, m: None
        self.on_unloaded: Callable[[int], None] = lambda p: None

    @property
    def config(self) -> BrokerConfig:
        return self._config.current

    # -- where ids live ----------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        if self._partition_count is not None:
            return self._partition_count
        existing = len(self.metadata_cache.partitions(TRANSACTION_STATE_TOPIC))
        if existing:
            self._partition_count = existing
            return existing
        return self.config.transaction_state_log_num_partitions

    def partition_for(self, transactional_id: str) -> int:
        count = self.num_partitions
        cache = self._partition_cache
        if self._partition_cache_count != count:
            cache.clear()
            self._partition_cache_count = count
        partition = cache.get(transactional_id)
        if partition is None:
            # Asked on every transactional produce (KIP-890's check): remembered.
            if len(cache) >= _PARTITION_CACHE_SIZE:
                cache.clear()
            partition = kafka_abs(java_string_hash(transactional_id)) % count
            cache[transactional_id] = partition
        return partition

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        if self._shutting_down:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(transactional_id)
        if partition in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition in self._cache:
            return None
        return ErrorCode.NOT_COORDINATOR

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
        return partition in self._cache and partition not in self._loading \
            and self._epochs.get(partition) == coordinator_epoch

    def loading_partitions(self) -> set[int]:
        return set(self._loading)

    def owned_partitions(self) -> set[int]:
        return set(self._cache)

    def all_metadata(self) -> Iterator[TransactionMetadata]:
        """Every loaded id's metadata (loaded partitions only)."""
        for ids in self._cache.values():
            yield from ids.values()

    # -- the topic ---------------------------------------------------------------------------

    def topic_configs(self) -> dict[str, str | None]:
        return {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": str(self.config.transaction_state_log_min_isr),
            "segment.bytes": str(self.config.transaction_state_log_segment_bytes),
            "unclean.leader.election.enable": "false",
        }

    async def ensure_topic(self) -> None:
        """Create ``__transaction_state`` if it does not exist (once, however many ask)."""
        if self.metadata_cache.contains_topic(TRANSACTION_STATE_TOPIC):
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(self._create_topic())
        with contextlib.suppress(Exception):
            await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        spec = TopicSpec(
            TRANSACTION_STATE_TOPIC,
            num_partitions=self.config.transaction_state_log_num_partitions,
            replication_factor=self.config.transaction_state_log_replication_factor,
            configs=self.topic_configs(),
        )
        results = await self.admin.create_topics([spec], timeout_ms=_CREATE_WAIT_MS)
        result = results[TRANSACTION_STATE_TOPIC]
        if result.error_code not in (0, int(ErrorCode.TOPIC_ALREADY_EXISTS)):
            log.warning("cannot create %s: %s (%s)", TRANSACTION_STATE_TOPIC,
                        ErrorCode(result.error_code).name, result.error_message)
        else:
            log.info("created %s (%d partitions, replication factor %d)",
                     TRANSACTION_STATE_TOPIC, spec.num_partitions, spec.replication_factor)

    # -- leadership --------------------------------------------------------------------------

    def on_leader_and_isr(self, states: Iterable[PartitionState],
                          errors: Mapping[TopicPartition, int]) -> None:
        broker_id = self.broker_id
        for state in states:
            if state.topic != TRANSACTION_STATE_TOPIC or broker_id not in state.replicas:
                continue
            if errors.get((state.topic, state.partition), 0) == 0 \
                    and state.leader == broker_id:
                self.become_leader(state.partition, state.leader_epoch)
            else:
                self.resign(state.partition)

    def on_stop_replica(self, tps: Iterable[TopicPartition]) -> None:
        for topic, partition in tps:
            if topic == TRANSACTION_STATE_TOPIC:
                self.resign(partition)

    def become_leader(self, partition: int, coordinator_epoch: int) -> None:
        """Load ``partition`` at ``coordinator_epoch`` (a newer epoch reloads it)."""
        if self._shutting_down:
            return
        if self._epochs.get(partition) == coordinator_epoch and (
                partition in self._cache or partition in self._loading):
            return
        if partition in self._cache or partition in self._loading:
            self.resign(partition)
        generation = self._generation.get(partition, 0) + 1
        self._generation[partition] = generation
        self._loading[partition] = generation
        self._epochs[partition] = coordinator_epoch
        task = asyncio.get_running_loop().create_task(
            self._load(partition, generation, coordinator_epoch))
        self._load_tasks.add(task)
        task.add_done_callback(self._load_tasks.discard)

    def resign(self, partition: int) -> None:
        self._generation[partition] = self._generation.get(partition, 0) + 1
        was_loading = self._loading.pop(partition, None) is not None
        was_owned = self._cache.pop(partition, None) is not None
        self._epochs.pop(partition, None)
        if was_owned or was_loading:
            log.info("unloaded %s-%d", TRANSACTION_STATE_TOPIC, partition)
            self.on_unloaded(partition)

    async def _load(self, partition: int, generation: int, coordinator_epoch: int) -> None:
        started = time.monotonic()
        replica = self.replica_manager.get_partition(TRANSACTION_STATE_TOPIC, partition)
        if replica is None:
            self._loading.pop(partition, None)
            return

        def stale() -> bool:
            return self._generation.get(partition) != generation

        try:
            result = await asyncio.to_thread(
                read_transaction_state_partition, replica.log,
                self.config.transaction_state_log_load_buffer_size, stale)
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC, partition)
            if self._loading.get(partition) == generation:
                del self._loading[partition]
            return
        if self._loading.get(partition) != generation:
            return
        ids: dict[str, TransactionMetadata] = {}
        for txn_id, value in result.values.items():
            if value is not None:
                ids[txn_id] = TransactionMetadata.from_log_value(txn_id, value)
        del self._loading[partition]
        self._cache[partition] = ids
        log.log(logging.INFO if result.records else logging.DEBUG,
                "loaded %s-%d at coordinator epoch %d in %.3f s: %d record(s), "
                "%d transactional id(s)", TRANSACTION_STATE_TOPIC, partition,
                coordinator_epoch, time.monotonic() - started, result.records, len(ids))
        try:
            self.on_loaded(partition, coordinator_epoch, list(ids.values()))
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

    def startup(self) -> None:
        self._shutting_down = False

    async def shutdown(self) -> None:
        self._shutting_down = True
        for task in [t for t in (self._creating, *self._load_tasks) if t is not None]:
            await stop_task(task, what="a transaction state task")
        self._loading.clear()
        self._cache.clear()
        self._epochs.clear()
