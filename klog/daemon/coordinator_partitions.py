"""CoordinatorPartitions: the partitions of an internal topic a coordinator leads here.

The group coordinator's ``__consumer_offsets`` (group/metadata_manager.py) and the
transaction coordinator's ``__transaction_state`` (transaction/state_manager.py) hold
their state the same way, as Kafka's GroupMetadataManager and TransactionStateManager
do; this base class is that shared machinery, written once:

- where a key lives: partition ``abs(String.hashCode(key)) % partitions`` (Kafka's
  ``Utils.abs``: Integer.MIN_VALUE maps to 0), the partition count being the topic's once
  it exists, the ``*.num.partitions`` config before; the answer is remembered per key;
- creating the topic on first use (FindCoordinator), once however many ask;
- leadership from LeaderAndIsr and StopReplica: a partition led here is loaded, one not
  led (or stopped) is unloaded. A load reads the whole partition in a worker thread
  (``read_partition``, ``*.load.buffer.size`` at a time) so the event loop is never
  blocked; meanwhile the partition's keys get COORDINATOR_LOAD_IN_PROGRESS. Each load has
  a generation: a resignation bumps it, so a read finishing afterwards is dropped;
- the coordinator error for a key (COORDINATOR_NOT_AVAILABLE while shutting down,
  COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, None when the partition is owned).

A subclass names its topic and configs, reads a partition (``_read``), installs what it
read (``_install``, which calls ``_mark_loaded`` at the point its keys become served) and
drops a partition's state (``_drop``). Runs on the broker's event loop thread; the loader
thread builds its own result and hands it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Generic, TypeVar

from klog.daemon.admin_rules import TopicSpec
from klog.daemon.tasks import stop_task
from klog.protocol.errors import CorruptRecordError, ErrorCode
from klog.protocol.records.batch import BatchHeader, iter_batch_headers

if TYPE_CHECKING:
    from klog.daemon.admin import AdminManager
    from klog.daemon.config.broker import BrokerConfig
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.metadata_cache import MetadataCache, PartitionState
    from klog.daemon.replica_manager import ReplicaManager
    from klog.storage.log import PartitionLog

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
R = TypeVar("R")

# How long FindCoordinator's topic creation waits for leaders before answering
# COORDINATOR_NOT_AVAILABLE (clients retry that).
_CREATE_WAIT_MS = 3000
#: A failed append to the topic -> what a coordinator answers (Kafka's
#: appendTransactionToLog, GroupMetadataManager's storeGroup and storeOffsets); each adds
#: its own answer to the size errors.
APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}
# Keys whose partition is remembered (the hash is per character; asked on every request,
# a transactional id on every transactional produce by KIP-890's check).
_PARTITION_CACHE_SIZE = 100_000


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, int32 arithmetic."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: Math.abs, except Integer.MIN_VALUE -> 0."""
    return 0 if n == -(2**31) else abs(n)


def read_partition(plog: PartitionLog, buffer_size: int, is_stopped: Callable[[], bool],
                   visit: Callable[[memoryview, BatchHeader, int], None]) -> tuple[int, int]:
    """Walk a whole partition log from its start, ``buffer_size`` bytes at a time (any
    thread), calling ``visit(view, header, position)`` for each batch that ends at or after
    ``position`` (the chunk's first offset; records before it were visited already). A
    batch whose visit raises CorruptRecordError is logged and skipped. Returns (the offset
    reached, the corrupt batches skipped)."""
    position = plog.log_start_offset
    end = plog.log_end_offset
    corrupt = 0
    buffer_size = max(buffer_size, 1)
    while position < end and not is_stopped():
        data = plog.read(position, buffer_size, None, True).read_bytes()
        if not data:
            break
        view = memoryview(data)
        next_position = position
        for h in iter_batch_headers(view):
            next_position = max(next_position, h.last_offset + 1)
            if h.last_offset < position:
                continue
            try:
                visit(view, h, position)
            except CorruptRecordError as exc:
                log.error("%s: skipping a corrupt batch at offset %s: %s", plog.dir.name,
                          h.base_offset, exc)
                corrupt += 1
        if next_position <= position:
            break  # nothing whole in the chunk: a torn tail; never spin
        position = next_position
    return position, corrupt


class CoordinatorPartitions(Generic[R]):
    """See the module docstring. ``R`` is what reading one partition gives."""

    #: The internal topic.
    topic: str
    #: A newer leader epoch of a partition loaded (or loading) here reloads it (the
    #: transaction coordinator's epoch is the leader epoch it loaded at); else it stays.
    reload_on_new_epoch = False

    def __init__(self, broker_id: int, config: DynamicBrokerConfig,
                 metadata_cache: MetadataCache, replica_manager: ReplicaManager,
                 admin: AdminManager) -> None:
        self.broker_id = broker_id
        self._config = config
        self.metadata_cache = metadata_cache
        self.replica_manager = replica_manager
        # Creates the topic when a coordinator first needs it.
        self.admin = admin
        self._owned: set[int] = set()
        # partition -> the load generation under way.
        self._loading: dict[int, int] = {}
        self._generation: dict[int, int] = {}
        # partition -> the leader epoch it was loaded (or is loading) at.
        self._epochs: dict[int, int] = {}
        self._load_tasks: set[asyncio.Task[None]] = set()
        self._partition_count: int | None = None
        self._partition_cache: dict[str, int] = {}  # for _partition_cache_count partitions
        self._partition_cache_count = 0
        self._creating: asyncio.Task[None] | None = None
        self._shutting_down = False

    @property
    def config(self) -> BrokerConfig:
        return self._config.current

    # -- what a subclass says ------------------------------------------------------------

    def _configured_partitions(self) -> int:
        """The topic's partition count before it exists."""
        raise NotImplementedError

    def _topic_spec(self) -> TopicSpec:
        """The topic as it is created."""
        raise NotImplementedError

    def _load_buffer_size(self) -> int:
        raise NotImplementedError

    def _read(self, plog: PartitionLog, buffer_size: int, is_stopped: Callable[[], bool]
              ) -> R:
        """Read one whole partition (in a worker thread)."""
        raise NotImplementedError

    def _install(self, partition: int, epoch: int, result: R, started: float) -> None:
        """Take a read partition on the loop; calls ``_mark_loaded(partition)``."""
        raise NotImplementedError

    def _drop(self, partition: int, was_held: bool) -> None:
        """Forget a partition's keys (``was_held``: it was loaded or loading here)."""
        raise NotImplementedError

    # -- where keys live -----------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        if self._partition_count is not None:
            return self._partition_count
        existing = len(self.metadata_cache.partitions(self.topic))
        if existing:
            # Fixed once the topic exists (as Kafka reads it once from ZooKeeper).
            self._partition_count = existing
            return existing
        return self._configured_partitions()

    def partition_for(self, key: str) -> int:
        count = self.num_partitions
        cache = self._partition_cache
        if self._partition_cache_count != count:
            cache.clear()
            self._partition_cache_count = count
        partition = cache.get(key)
        if partition is None:
            if len(cache) >= _PARTITION_CACHE_SIZE:
                cache.clear()
            partition = kafka_abs(java_string_hash(key)) % count
            cache[key] = partition
        return partition

    def coordinator_error(self, key: str) -> ErrorCode | None:
        if self._shutting_down:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(key)
        if partition in self._loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition in self._owned:
            return None
        return ErrorCode.NOT_COORDINATOR

    def is_loading(self, partition: int) -> bool:
        return partition in self._loading

    def loading_partitions(self) -> set[int]:
        return set(self._loading)

    def owned_partitions(self) -> set[int]:
        return set(self._owned)

    # -- the topic -----------------------------------------------------------------------

    async def ensure_topic(self) -> None:
        """Create the topic if it does not exist (once, however many ask) and wait a
        little for its leaders; failures are logged (callers see no coordinator)."""
        if self.metadata_cache.contains_topic(self.topic):
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(self._create_topic())
        with contextlib.suppress(Exception):
            await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        spec = self._topic_spec()
        results = await self.admin.create_topics([spec], timeout_ms=_CREATE_WAIT_MS)
        result = results[self.topic]
        if result.error_code not in (0, int(ErrorCode.TOPIC_ALREADY_EXISTS)):
            log.warning("cannot create %s: %s (%s)", self.topic,
                        ErrorCode(result.error_code).name, result.error_message)
        else:
            log.info("created %s (%d partitions, replication factor %d)", self.topic,
                     spec.num_partitions, spec.replication_factor)

    # -- leadership ----------------------------------------------------------------------

    def on_leader_and_isr(self, states: Iterable[PartitionState],
                          errors: Mapping[TopicPartition, int]) -> None:
        """After LeaderAndIsr: load the partitions led here, unload the others."""
        broker_id = self.broker_id
        for state in states:
            if state.topic != self.topic or broker_id not in state.replicas:
                continue
            if errors.get((state.topic, state.partition), 0) == 0 \
                    and state.leader == broker_id:
                self.become_leader(state.partition, state.leader_epoch)
            else:
                self.resign(state.partition)

    def on_stop_replica(self, tps: Iterable[TopicPartition]) -> None:
        for topic, partition in tps:
            if topic == self.topic:
                self.resign(partition)

    def become_leader(self, partition: int, epoch: int = -1) -> None:
        """Start loading ``partition`` (no-op when loaded or loading already, at the same
        epoch when ``reload_on_new_epoch``)."""
        if self._shutting_down:
            return
        held = partition in self._owned or partition in self._loading
        if held and (not self.reload_on_new_epoch or self._epochs.get(partition) == epoch):
            return
        if held:
            self.resign(partition)
        generation = self._generation.get(partition, 0) + 1
        self._generation[partition] = generation
        self._loading[partition] = generation
        self._epochs[partition] = epoch
        task = asyncio.get_running_loop().create_task(
            self._load(partition, generation, epoch))
        self._load_tasks.add(task)
        task.add_done_callback(self._load_tasks.discard)

    def resign(self, partition: int) -> None:
        """Leadership of ``partition`` is gone: drop its keys."""
        self._generation[partition] = self._generation.get(partition, 0) + 1
        was_loading = self._loading.pop(partition, None) is not None
        was_owned = partition in self._owned
        self._owned.discard(partition)
        self._epochs.pop(partition, None)
        if was_owned or was_loading:
            log.info("unloaded %s-%d", self.topic, partition)
        self._drop(partition, was_owned or was_loading)

    def _mark_loaded(self, partition: int) -> None:
        del self._loading[partition]
        self._owned.add(partition)

    async def _load(self, partition: int, generation: int, epoch: int) -> None:
        started = time.monotonic()
        replica = self.replica_manager.get_partition(self.topic, partition)
        if replica is None:
            self._loading.pop(partition, None)
            return

        def stale() -> bool:
            return self._generation.get(partition) != generation

        try:
            result = await asyncio.to_thread(self._read, replica.log,
                                             self._load_buffer_size(), stale)
        except Exception:
            log.exception("loading %s-%d failed", self.topic, partition)
            if self._loading.get(partition) == generation:
                del self._loading[partition]
            return
        if self._loading.get(partition) != generation:
            return  # resigned (or re-elected) while reading: a newer load owns it
        self._install(partition, epoch, result, started)

    # -- lifecycle -----------------------------------------------------------------------

    def startup(self) -> None:
        self._shutting_down = False

    async def shutdown(self) -> None:
        """Stop the loads and the topic's creation; forget which partitions are held (a
        subclass extending this clears its own caches)."""
        self._shutting_down = True
        for task in [t for t in (self._creating, *self._load_tasks) if t is not None]:
            await stop_task(task, what=f"a {self.topic} task")
        self._loading.clear()
        self._owned.clear()
        self._epochs.clear()
