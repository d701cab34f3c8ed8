"""GroupMetadataManager: consumer group offsets and group metadata in ``__consumer_offsets``.

Owns, for the partitions of ``__consumer_offsets`` this broker leads (where a group lives,
the topic's creation, leadership and loading being CoordinatorPartitions' machinery,
klog/daemon/coordinator_partitions.py, shared with the transaction coordinator):

- the topic's settings: compacted, ``offsets.topic.*``;
- the offsets cache (group -> (topic, partition) -> OffsetAndMetadata) and the last group
  metadata value stored or loaded per group;
- writing offset commits, group metadata and their tombstones as Kafka 3.x does: key
  OffsetCommitKey v1 / GroupMetadataKey v2, value OffsetCommitValue v3 (v1 when the commit
  carries an explicit expire timestamp) / GroupMetadataValue v3, in one v2 batch per call,
  record timestamps = the commit time, codec ``offsets.topic.compression.codec``;
- what a partition's load reads (``offsets.load.buffer.size`` at a time, in a worker
  thread) and installs on the loop. Transactional offset commits count once their COMMIT
  marker is read (aborted ones are dropped), as in Kafka; those with no marker yet stay
  pending.
  Leadership lost: the partition's groups are dropped (``on_partition_unloaded``);
- transactional offset commits (TxnOffsetCommit): written as Kafka writes them, one
  transactional batch carrying the producer id and epoch (never grouped with other
  stores: a batch has one producer), kept pending per offsets partition and producer id,
  invisible to OffsetFetch until ``complete_transaction`` (called by the transaction
  coordinator once its marker is in the partition) makes them committed (COMMIT) or drops
  them (ABORT). A plain commit stored after a transactional one (before its marker) stays:
  Kafka compares the append offsets of both, klog the commit times (``_newer_than``);
- offsets expiration every ``offsets.retention.check.interval.ms`` with Kafka 3.x's rules
  (KIP-211): offsets of a group without a protocol (simple commits) expire
  ``offsets.retention.minutes`` after their commit; of an Empty group that long after it
  became Empty; of a Stable consumer group only for topics no member subscribes to; an
  explicit v1 expire timestamp wins. Expired offsets get tombstones; an Empty group left
  without offsets becomes Dead: its metadata gets a tombstone too (``on_group_removed``).

Group state comes from the coordinator when it holds the group (the ``group_state_of``
hook it sets), else from the last stored metadata value (no members = Empty).

Runs on the broker's event loop thread (all state is touched there only; the loader thread
builds its own result and hands it back). Appends to one partition are grouped: the records
of every store that arrives while the event loop works through its ready callbacks (the
requests read from all connections in one poll) go out as one batch, appended once, and
each store resumes with that append's outcome in the order it joined. Under load this
turns many one-record appends into few larger ones (Kafka appends each commit alone; its
appends cost far less than ours). A cache update follows its own append's outcome.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from klog.daemon.admin_rules import TopicSpec
from klog.daemon.coordinator_partitions import (
    APPEND_ERRORS,
    CoordinatorPartitions,
    read_partition,
)
from klog.daemon.coordinator_partitions import java_string_hash as java_string_hash
from klog.daemon.coordinator_partitions import kafka_abs as kafka_abs
from klog.daemon.tasks import stop_task
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolSubscription,
    GroupMetadataKey,
    GroupMetadataValue,
    InternalTopicError,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownVersionError,
    read_offsets_key,
)
from klog.protocol.records.batch import NO_SEQUENCE, BatchHeader, CompressionType
from klog.protocol.records.decode import iter_records
from klog.protocol.records.v2 import BatchBuilder
from klog.storage.validator import AppendOrigin

if TYPE_CHECKING:
    from klog.daemon.admin import AdminManager
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.metadata_cache import MetadataCache
    from klog.daemon.replica_manager import ReplicaManager
    from klog.storage.log import PartitionLog
    from klog.storage.producer_state import VerificationGuard

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TopicPartition = tuple[str, int]

# Control record key: version int16, type int16 (0 = abort, 1 = commit).
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_COMMIT = 1
# Expiration yields to the loop after this many groups.
_EXPIRE_SLICE = 200

# Append errors -> what an offset commit answers (Kafka's GroupMetadataManager.storeOffsets).
_COMMIT_ERRORS = {
    # A transactional commit's verification (KIP-890) that could not reach the transaction
    # coordinator: retriable, and without a coordinator lookup, as Kafka answers it.
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    **APPEND_ERRORS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}
# ... and what a group metadata write answers (storeGroup).
_GROUP_ERRORS = {
    **_COMMIT_ERRORS,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset as the cache holds it (times in ms since the epoch)."""

    offset: int
    leader_epoch: int = -1  # -1 = none
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int | None = None  # only commits of OffsetCommit v1..v4 carry one


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_V3_HEAD = struct.Struct(">hqi")  # version 3, offset, leader epoch
_KEY_V1 = b"\x00\x01"


def _short_string(s: str) -> bytes:
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
    return _I16.pack(len(data)) + data


def offset_commit_record(group_id: str, tp: TopicPartition,
                         om: OffsetAndMetadata | None) -> tuple[bytes, bytes | None]:
    """Key and value bytes of an offset commit (value None: tombstone), as Kafka 3.x:
    key v1, value v3 (v1 when the commit has an expire timestamp). The common v3 shapes
    are packed directly (commits are the coordinator's hot path); they are byte for byte
    what internal_topics' OffsetCommitKey/OffsetCommitValue encode (tests check it)."""
    key = _KEY_V1 + _short_string(group_id) + _short_string(tp[0]) + _I32.pack(tp[1])
    if om is None:
        return key, None
    if om.expire_timestamp is not None:
        value = OffsetCommitValue(om.offset, om.metadata, om.commit_timestamp,
                                  expire_timestamp=om.expire_timestamp, version=1).encode()
    else:
        value = (_VALUE_V3_HEAD.pack(3, om.offset, om.leader_epoch)
                 + _short_string(om.metadata) + _I64.pack(om.commit_timestamp))
    return key, value


def group_metadata_record(group_id: str,
                          value: GroupMetadataValue | None) -> tuple[bytes, bytes | None]:
    key = GroupMetadataKey(group_id).encode()
    return key, None if value is None else value.encode()


def _offset_from_value(value: OffsetCommitValue) -> OffsetAndMetadata:
    expire = value.expire_timestamp if value.version == 1 and value.expire_timestamp >= 0 \
        else None
    leader_epoch = value.leader_epoch if value.version >= 3 else -1
    return OffsetAndMetadata(value.offset, leader_epoch, value.metadata or "",
                             value.commit_timestamp, expire)


_KEY_HEAD = struct.Struct(">hh")  # version, group length


def _fast_commit_key(buf: bytes) -> tuple[str, TopicPartition] | None:
    """An OffsetCommitKey v0/v1 read directly (loading is this per record), or None to
    leave the record to the schema-driven decoder."""
    n = len(buf)
    if n < 10:
        return None
    version, length = _KEY_HEAD.unpack_from(buf, 0)
    pos = 4
    if version not in (0, 1) or length < 0 or pos + length + 2 > n:
        return None
    group = buf[pos:pos + length].decode("utf-8", "replace")
    pos += length
    (length,) = _I16.unpack_from(buf, pos)
    pos += 2
    if length < 0 or pos + length + 4 > n:
        return None
    topic = buf[pos:pos + length].decode("utf-8", "replace")
    (partition,) = _I32.unpack_from(buf, pos + length)
    return group, (topic, partition)


def _fast_commit_value(buf: bytes) -> OffsetAndMetadata | None:
    """An OffsetCommitValue v0-v3 read directly, or None (v4, bad bytes: the slow path)."""
    n = len(buf)
    if n < 12:
        return None
    (version,) = _I16.unpack_from(buf, 0)
    if version == 3:
        if n < 16:
            return None
        _version, offset, leader_epoch = _VALUE_V3_HEAD.unpack_from(buf, 0)
        pos = 14
    elif 0 <= version <= 2:
        (offset,) = _I64.unpack_from(buf, 2)
        leader_epoch = -1
        pos = 10
    else:
        return None
    (length,) = _I16.unpack_from(buf, pos)
    pos += 2
    if length < 0 or pos + length + (16 if version == 1 else 8) > n:
        return None
    metadata = buf[pos:pos + length].decode("utf-8", "replace")
    pos += length
    (commit_timestamp,) = _I64.unpack_from(buf, pos)
    expire = None
    if version == 1:
        (expire_timestamp,) = _I64.unpack_from(buf, pos + 8)
        expire = expire_timestamp if expire_timestamp >= 0 else None
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_timestamp, expire)


@dataclass(slots=True)
class LoadResult:
    """What reading one partition of ``__consumer_offsets`` found (built off the loop)."""

    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = field(default_factory=dict)
    # Last group metadata value per group; None = the last record was a tombstone.
    groups: dict[str, GroupMetadataValue | None] = field(default_factory=dict)
    # Transactional commits with no marker yet: producer id -> (group, tp) -> offset.
    pending_txn: dict[int, dict[tuple[str, TopicPartition], OffsetAndMetadata | None]] = \
        field(default_factory=dict)
    records: int = 0
    skipped: int = 0
    end_offset: int = 0

    def apply(self, record_key: bytes | None, record_value: bytes | None,
              pending: dict[tuple[str, TopicPartition], OffsetAndMetadata | None] | None = None
              ) -> None:
        """One record; into ``pending`` (a transaction's) instead when given."""
        self.records += 1
        if record_key is None:
            self.skipped += 1
            return
        fast_key = _fast_commit_key(record_key)
        if fast_key is not None:
            om = None if record_value is None else _fast_commit_value(record_value)
            if om is not None or record_value is None:
                group, tp = fast_key
                if pending is not None:
                    pending[(group, tp)] = om
                else:
                    self.put_offset(group, tp, om)
                return
        # Everything else (group metadata, flexible values, bad bytes) takes the
        # schema-driven decoders, which also say what is wrong.
        try:
            key = read_offsets_key(record_key)
            if isinstance(key, OffsetCommitKey):
                tp = (key.topic, key.partition)
                om = None if record_value is None else _offset_from_value(
                    OffsetCommitValue.decode(record_value))
                if pending is not None:
                    pending[(key.group, tp)] = om
                else:
                    self.put_offset(key.group, tp, om)
            else:
                self.groups[key.group] = None if record_value is None else \
                    GroupMetadataValue.decode(record_value)
        except UnknownVersionError:
            # Newer record types (KIP-848 consumer groups, ...): not ours to load.
            self.skipped += 1
        except InternalTopicError as exc:
            log.warning("skipping an undecodable __consumer_offsets record: %s", exc)
            self.skipped += 1

    def put_offset(self, group: str, tp: TopicPartition, om: OffsetAndMetadata | None) -> None:
        if om is None:
            offsets = self.offsets.get(group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self.offsets[group]
        else:
            self.offsets.setdefault(group, {})[tp] = om


def read_offsets_partition(plog: PartitionLog, buffer_size: int,
                           is_stopped: Callable[[], bool] = lambda: False) -> LoadResult:
    """Read a whole ``__consumer_offsets`` partition (any thread): offsets and groups."""
    result = LoadResult()
    pending: dict[int, dict[tuple[str, TopicPartition], OffsetAndMetadata | None]] = {}

    def visit(view: memoryview, h: BatchHeader, position: int) -> None:
        h.ensure_valid(view)
        if h.is_control:
            txn = pending.pop(h.producer_id, {})
            for record in iter_records(view, h):
                if record.key is not None and len(record.key) >= _CONTROL_KEY.size:
                    _version, kind = _CONTROL_KEY.unpack_from(record.key)
                    if kind == _CONTROL_COMMIT:
                        for (group, tp), om in txn.items():
                            current = result.offsets.get(group, {}).get(tp)
                            if not _newer_than(current, om):
                                result.put_offset(group, tp, om)
            return
        txn_offsets = pending.setdefault(h.producer_id, {}) if h.is_transactional else None
        for record in iter_records(view, h):
            if record.offset >= position:
                result.apply(record.key, record.value, txn_offsets)

    result.end_offset, corrupt = read_partition(plog, buffer_size, is_stopped, visit)
    result.skipped += corrupt
    result.pending_txn = {pid: txn for pid, txn in pending.items() if txn}
    return result


class GroupMetadataManager(CoordinatorPartitions[LoadResult]):
    """See the module docstring. Lives on the broker's event loop thread."""

    topic = OFFSETS_TOPIC

    def __init__(self, broker_id: int, config: DynamicBrokerConfig,
                 metadata_cache: MetadataCache, replica_manager: ReplicaManager,
                 admin: AdminManager) -> None:
        super().__init__(broker_id, config, metadata_cache, replica_manager, admin)
        self.clock: Callable[[], int] = lambda: int(time.time() * 1000)
        # group -> (topic, partition) -> committed offset; groups of owned partitions only.
        self._offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        # group -> the last group metadata value stored or loaded (absent after a tombstone).
        self._group_values: dict[str, GroupMetadataValue] = {}
        # offsets partition -> producer id -> group -> (topic, partition) -> the offset a
        # transaction committed, pending until its marker (complete_transaction).
        self._txn_offsets: dict[int, dict[int, dict[str, dict[TopicPartition,
                                                               OffsetAndMetadata]]]] = {}
        # offsets partition -> markers announced while it was loading: (producer id,
        # committed), applied once the load is installed (the load may have read the log
        # before the marker was appended).
        self._deferred_markers: dict[int, list[tuple[int, bool]]] = {}
        # offsets partition -> records waiting for the grouped append, and its outcome.
        self._pending: dict[int, tuple[list[tuple[bytes, bytes | None]],
                                       asyncio.Future[ErrorCode], int]] = {}
        self._expire_task: asyncio.Task[None] | None = None
        # Hooks the group coordinator sets (no-ops until then).
        self.on_group_loaded: Callable[[str, GroupMetadataValue], None] = lambda g, v: None
        self.on_partition_unloaded: Callable[[int], None] = lambda p: None
        # An Empty group whose last offsets expired: Kafka makes it Dead and forgets it.
        self.on_group_removed: Callable[[str], None] = lambda g: None
        # The state of a group the coordinator holds (None: it holds no such group).
        self.group_state_of: Callable[[str], str | None] = lambda g: None

    @property
    def num_offsets(self) -> int:
        """Committed offsets held for the groups coordinated here (Kafka's NumOffsets)."""
        return sum(len(offsets) for offsets in self._offsets.values())

    # -- the topic ---------------------------------------------------------------------------

    def _configured_partitions(self) -> int:
        return self.config.offsets_topic_num_partitions

    def _load_buffer_size(self) -> int:
        return self.config.offsets_load_buffer_size

    def _topic_spec(self) -> TopicSpec:
        return TopicSpec(OFFSETS_TOPIC,
                         num_partitions=self.config.offsets_topic_num_partitions,
                         replication_factor=self.config.offsets_topic_replication_factor,
                         configs=self.offsets_topic_configs())

    def offsets_topic_configs(self) -> dict[str, str | None]:
        return {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.config.offsets_topic_segment_bytes),
        }

    # -- leadership ---------------------------------------------------------------------------

    def _drop(self, partition: int, was_held: bool) -> None:
        for group in [g for g in self._offsets if self.partition_for(g) == partition]:
            del self._offsets[group]
        for group in [g for g in self._group_values if self.partition_for(g) == partition]:
            del self._group_values[group]
        self._txn_offsets.pop(partition, None)
        self._deferred_markers.pop(partition, None)
        if was_held:
            self.on_partition_unloaded(partition)

    def _read(self, plog: PartitionLog, buffer_size: int, is_stopped: Callable[[], bool]
              ) -> LoadResult:
        return read_offsets_partition(plog, buffer_size, is_stopped)

    def _install(self, partition: int, epoch: int, result: LoadResult,
                 started: float) -> None:
        for group, offsets in result.offsets.items():
            self._offsets[group] = offsets
        txns: dict[int, dict[str, dict[TopicPartition, OffsetAndMetadata]]] = {}
        for pid, txn in result.pending_txn.items():
            for (group, tp), om in txn.items():
                if om is not None:  # a transaction writes no tombstones
                    txns.setdefault(pid, {}).setdefault(group, {})[tp] = om
        if txns:
            self._txn_offsets[partition] = txns
        loaded_groups = 0
        for group, value in result.groups.items():
            if value is None:
                self._group_values.pop(group, None)
                continue
            self._group_values[group] = value
            loaded_groups += 1
            try:
                self.on_group_loaded(group, value)
            except Exception:
                log.exception("the coordinator failed to take group %s", group)
        self._mark_loaded(partition)
        for producer_id, committed in self._deferred_markers.pop(partition, ()):
            self.complete_transaction(partition, producer_id, committed)
        # An empty partition (most of the 50, usually) is not worth a line at INFO.
        log.log(logging.INFO if result.records else logging.DEBUG,
                "loaded %s-%d in %.3f s: %d record(s), %d group(s) with offsets, "
                "%d group(s) with metadata%s", OFFSETS_TOPIC, partition,
                time.monotonic() - started, result.records, len(result.offsets),
                loaded_groups, f", {result.skipped} skipped" if result.skipped else "")

    # -- writing ---------------------------------------------------------------------------

    def _codec(self) -> CompressionType:
        try:
            return CompressionType(self.config.offsets_topic_compression_codec)
        except ValueError:
            return CompressionType.NONE

    async def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]],
                      timestamp: int) -> ErrorCode:
        """Append ``records`` to the group's partition, grouped with the other stores of
        this turn of the event loop (see the module docstring); the raw error code."""
        partition = self.partition_for(group_id)
        pending = self._pending.get(partition)
        if pending is None:
            future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
            pending = self._pending[partition] = ([], future, timestamp)
            # Runs after the callbacks already queued: handlers of requests that arrived
            # together reach this point first and join the batch.
            asyncio.get_running_loop().call_soon(self._start_append, partition)
        pending[0].extend(records)
        return await asyncio.shield(pending[1])

    def _start_append(self, partition: int) -> None:
        records, future, timestamp = self._pending.pop(partition)
        task = asyncio.get_running_loop().create_task(
            self._append_now(partition, records, timestamp))

        def done(task: asyncio.Task[ErrorCode]) -> None:
            if task.cancelled():
                future.set_result(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            elif task.exception() is not None:
                log.error("appending to %s-%d failed", OFFSETS_TOPIC, partition,
                          exc_info=task.exception())
                future.set_result(ErrorCode.UNKNOWN_SERVER_ERROR)
            else:
                future.set_result(task.result())

        task.add_done_callback(done)

    async def _append_now(self, partition: int, records: list[tuple[bytes, bytes | None]],
                          timestamp: int) -> ErrorCode:
        rm = self.replica_manager
        builder = BatchBuilder(compression=self._codec())
        for key, value in records:
            builder.append(timestamp, key, value)
        tp = (OFFSETS_TOPIC, partition)
        acks = self.config.offsets_commit_required_acks
        results = rm.append_records({tp: builder.build()}, acks, origin=AppendOrigin.COORDINATOR)
        if acks == -1:
            results = await rm.wait_for_isr(results, self.config.offsets_commit_timeout_ms)
        code = results[tp].error_code
        try:
            return ErrorCode(code)
        except ValueError:
            return ErrorCode.UNKNOWN_SERVER_ERROR

    async def store_group(self, group_id: str, value: GroupMetadataValue | None) -> ErrorCode:
        """Append the group's metadata (None: its tombstone); NONE on success."""
        error = self.coordinator_error(group_id)
        if error is not None:
            return error
        code = await self._append(group_id, [group_metadata_record(group_id, value)],
                                  self.clock())
        if code is ErrorCode.NONE:
            if value is None:
                self._group_values.pop(group_id, None)
            else:
                self._group_values[group_id] = value
            return code
        log.warning("storing metadata of group %s failed: %s", group_id, code.name)
        return _GROUP_ERRORS.get(code, code)

    async def store_offsets(self, group_id: str,
                            offsets: Mapping[TopicPartition, OffsetAndMetadata]
                            ) -> dict[TopicPartition, ErrorCode]:
        """Append the commits (one batch), then cache them; an error per partition."""
        error = self.coordinator_error(group_id)
        if error is not None:
            return {tp: error for tp in offsets}
        out: dict[TopicPartition, ErrorCode] = {}
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        max_metadata = self.config.offset_metadata_max_bytes
        records = []
        for tp, om in offsets.items():
            if om.metadata is None:  # a null metadata string is stored as "" (Kafka)
                om = replace(om, metadata="")
            if len(om.metadata) > max_metadata:
                out[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            try:
                records.append(offset_commit_record(group_id, tp, om))
            except ValueError:  # over an int16 string length: cannot be stored at all
                out[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            valid[tp] = om
        if not valid:
            return out
        code = await self._append(group_id, records, self.clock())
        if code is ErrorCode.NONE:
            # Still ours? The partition may have moved while waiting for the ISR.
            if self.partition_for(group_id) in self._owned:
                self._offsets.setdefault(group_id, {}).update(valid)
        else:
            log.warning("storing offsets of group %s failed: %s", group_id, code.name)
            code = _COMMIT_ERRORS.get(code, code)
        for tp in valid:
            out[tp] = code
        return out

    async def store_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                offsets: Mapping[TopicPartition, OffsetAndMetadata],
                                transactional_id: str | None = None, abortable: bool = False
                                ) -> dict[TopicPartition, ErrorCode]:
        """A transaction's offset commits (TxnOffsetCommit): appended as one transactional
        batch of ``producer_id``/``producer_epoch``, then pending until
        ``complete_transaction``; an error per partition. With ``transactional_id``, while
        the broker verifies transactions (KIP-890), the transaction coordinator first
        confirms that the group's offsets partition is in the ongoing transaction (the
        AddOffsetsToTxn before), so a late commit cannot open a transaction in
        ``__consumer_offsets`` that nobody ends."""
        error = self.coordinator_error(group_id)
        if error is not None:
            return {tp: error for tp in offsets}
        partition = self.partition_for(group_id)
        out: dict[TopicPartition, ErrorCode] = {}
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        records = []
        for tp, om in offsets.items():
            if len(om.metadata) > self.config.offset_metadata_max_bytes:
                out[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            try:
                records.append(offset_commit_record(group_id, tp, om))
            except ValueError:
                out[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            valid[tp] = om
        if not valid:
            return out
        code, guards = await self._verify(partition, transactional_id, producer_id,
                                          producer_epoch, abortable)
        if code is ErrorCode.NONE:
            code = self._check_producer_epoch(partition, producer_id, producer_epoch)
        if code is ErrorCode.NONE:
            code = await self._append_transactional(partition, producer_id, producer_epoch,
                                                    records, guards)
        if code is ErrorCode.NONE:
            if partition in self._owned:
                txn = self._txn_offsets.setdefault(partition, {}).setdefault(producer_id, {})
                txn.setdefault(group_id, {}).update(valid)
        else:
            log.warning("storing transactional offsets of group %s (producer %d) failed: %s",
                        group_id, producer_id, code.name)
            code = _COMMIT_ERRORS.get(code, code)
        for tp in valid:
            out[tp] = code
        return out

    async def _verify(self, partition: int, transactional_id: str | None, producer_id: int,
                      producer_epoch: int, abortable: bool
                      ) -> tuple[ErrorCode, dict[TopicPartition, VerificationGuard] | None]:
        """KIP-890 for a transactional commit (Kafka's handleTxnCommitOffsets): the
        coordinator's error, else NONE and the guards to append with (None: the broker does
        not verify)."""
        rm = self.replica_manager
        if transactional_id is None or not rm.verifies_transactions:
            return ErrorCode.NONE, None
        tp = (OFFSETS_TOPIC, partition)
        errors, guards = await rm.verify_transaction(
            transactional_id, producer_id, producer_epoch, {tp: NO_SEQUENCE}, abortable)
        return errors.get(tp, ErrorCode.NONE), guards

    def _check_producer_epoch(self, partition: int, producer_id: int,
                              producer_epoch: int) -> ErrorCode:
        """INVALID_PRODUCER_EPOCH for an epoch older than the partition has seen from this
        producer: Kafka's log refuses such a coordinator append (a fenced zombie's commit);
        klog's log checks epochs of client appends only, so the check is made here."""
        replica = self.replica_manager.get_partition(OFFSETS_TOPIC, partition)
        if replica is None:
            return ErrorCode.NONE  # the append answers NOT_LEADER_OR_FOLLOWER
        entry = replica.log.producer_state.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return ErrorCode.NONE

    async def _append_transactional(self, partition: int, producer_id: int,
                                    producer_epoch: int,
                                    records: list[tuple[bytes, bytes | None]],
                                    guards: dict[TopicPartition, VerificationGuard] | None
                                    ) -> ErrorCode:
        # Sequence 0 as Kafka: coordinator appends are not sequence-checked.
        builder = BatchBuilder(compression=self._codec(), producer_id=producer_id,
                               producer_epoch=producer_epoch, base_sequence=0,
                               is_transactional=True)
        timestamp = self.clock()
        for key, value in records:
            builder.append(timestamp, key, value)
        rm = self.replica_manager
        tp = (OFFSETS_TOPIC, partition)
        acks = self.config.offsets_commit_required_acks
        results = rm.append_records({tp: builder.build()}, acks, origin=AppendOrigin.COORDINATOR,
                                    verification_guards=guards)
        if acks == -1:
            results = await rm.wait_for_isr(results, self.config.offsets_commit_timeout_ms)
        try:
            return ErrorCode(results[tp].error_code)
        except ValueError:
            return ErrorCode.UNKNOWN_SERVER_ERROR

    def complete_transaction(self, offsets_partition: int, producer_id: int,
                             committed: bool) -> None:
        """A transaction marker of ``producer_id`` is in ``offsets_partition``: its pending
        offset commits become committed (COMMIT) or are dropped (ABORT). Called by the
        transaction coordinator after the marker's append; a producer with nothing pending
        here is a no-op."""
        if offsets_partition in self._loading:
            self._deferred_markers.setdefault(offsets_partition, []).append(
                (producer_id, committed))
            return
        txns = self._txn_offsets.get(offsets_partition)
        if txns is None:
            return
        txn = txns.pop(producer_id, None)
        if not txns:
            del self._txn_offsets[offsets_partition]
        if txn is None or not committed or offsets_partition not in self._owned:
            return
        for group, offsets in txn.items():
            cached = self._offsets.setdefault(group, {})
            for tp, om in offsets.items():
                if not _newer_than(cached.get(tp), om):
                    cached[tp] = om

    def has_pending_txn_offset(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction has committed an offset for the group's ``tp``
        (OffsetFetch's require_stable answers UNSTABLE_OFFSET_COMMIT for it)."""
        txns = self._txn_offsets.get(self.partition_for(group_id))
        if not txns:
            return False
        return any(tp in txn.get(group_id, ()) for txn in txns.values())

    def pending_txn_producers(self, offsets_partition: int) -> set[int]:
        """Producer ids with pending transactional commits in ``offsets_partition``."""
        return set(self._txn_offsets.get(offsets_partition, {}))

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None
                      ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (None: all of them); partitions without one are
        absent. The caller checks ``coordinator_error`` first."""
        offsets = self._offsets.get(group_id)
        if not offsets:
            return {}
        if partitions is None:
            return dict(offsets)
        return {tp: offsets[tp] for tp in partitions if tp in offsets}

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                             ) -> ErrorCode:
        """Tombstones for the given partitions' offsets (those the group has)."""
        error = self.coordinator_error(group_id)
        if error is not None:
            return error
        offsets = self._offsets.get(group_id, {})
        doomed = [tp for tp in dict.fromkeys(partitions) if tp in offsets]
        return await self._remove_offsets(group_id, doomed)

    async def delete_group_offsets(self, group_id: str) -> ErrorCode:
        """Tombstones for all the group's offsets."""
        error = self.coordinator_error(group_id)
        if error is not None:
            return error
        return await self._remove_offsets(group_id, list(self._offsets.get(group_id, {})))

    async def _remove_offsets(self, group_id: str, doomed: list[TopicPartition],
                              group_tombstone: bool = False) -> ErrorCode:
        records = [offset_commit_record(group_id, tp, None) for tp in doomed]
        if group_tombstone:
            records.append(group_metadata_record(group_id, None))
        if not records:
            return ErrorCode.NONE
        code = await self._append(group_id, records, self.clock())
        if code is not ErrorCode.NONE:
            log.warning("writing tombstones for group %s failed: %s", group_id, code.name)
            return _GROUP_ERRORS.get(code, code)
        offsets = self._offsets.get(group_id)
        if offsets is not None:
            for tp in doomed:
                offsets.pop(tp, None)
            if not offsets:
                del self._offsets[group_id]
        if group_tombstone:
            self._group_values.pop(group_id, None)
        return code

    def groups_with_offsets(self) -> set[str]:
        return {g for g, offsets in self._offsets.items() if offsets}

    def group_value(self, group_id: str) -> GroupMetadataValue | None:
        """The last group metadata stored or loaded for the group (None: none/tombstone)."""
        return self._group_values.get(group_id)

    # -- expiration -------------------------------------------------------------------------

    def startup(self) -> None:
        """Start the expiration task (on the broker's loop)."""
        super().startup()
        if self._expire_task is None:
            self._expire_task = asyncio.get_running_loop().create_task(self._expire_loop())

    async def shutdown(self) -> None:
        self._shutting_down = True
        if self._expire_task is not None:
            await stop_task(self._expire_task, what="a group metadata task")
        self._expire_task = None
        await super().shutdown()
        self._offsets.clear()
        self._txn_offsets.clear()
        self._deferred_markers.clear()
        self._group_values.clear()

    async def _expire_loop(self) -> None:
        interval = max(self.config.offsets_retention_check_interval_ms, 10) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                removed = await self.expire_offsets()
                if removed:
                    log.info("removed %d expired offset(s)", removed)
            except Exception:
                log.exception("offsets expiration failed")

    def _group_state(self, group_id: str) -> tuple[str | None, bool]:
        """(state, known to the coordinator) -- state None for a group nobody knows."""
        state = self.group_state_of(group_id)
        if state is not None:
            return state, True
        # Not a group the coordinator holds: the last stored metadata tells.
        value = self._group_values.get(group_id)
        if value is None:
            return None, False
        return ("Stable" if value.members else "Empty"), True

    def expired_offsets(self, group_id: str, now: int) -> list[TopicPartition]:
        """Which of the group's offsets expired at ``now`` (Kafka 3.x's rules)."""
        offsets = self._offsets.get(group_id)
        if not offsets:
            return []
        retention_ms = self.config.offsets_retention_minutes * 60_000
        state, _known = self._group_state(group_id)
        value = self._group_values.get(group_id)
        protocol_type = value.protocol_type if value is not None else None

        def is_expired(om: OffsetAndMetadata, base: int) -> bool:
            if om.expire_timestamp is not None:
                return now >= om.expire_timestamp
            return now - base >= retention_ms

        if not protocol_type and state in (None, "Empty", "Dead"):
            # A standalone group (commits without membership): from each commit.
            return [tp for tp, om in offsets.items() if is_expired(om, om.commit_timestamp)]
        if state == "Empty":
            since = value.current_state_timestamp if value is not None and not value.members \
                and value.current_state_timestamp >= 0 else None
            return [tp for tp, om in offsets.items()
                    if is_expired(om, om.commit_timestamp if since is None else since)]
        if state == "Stable" and protocol_type == CONSUMER_PROTOCOL_TYPE and value is not None:
            subscribed = _subscribed_topics(value)
            if subscribed is None:
                return []
            return [tp for tp, om in offsets.items()
                    if tp[0] not in subscribed and is_expired(om, om.commit_timestamp)]
        return []

    async def expire_offsets(self, now: int | None = None) -> int:
        """One expiration pass over the groups of owned partitions; offsets removed."""
        now = self.clock() if now is None else now
        removed = 0
        for i, group in enumerate(list(self._offsets)):
            if i and i % _EXPIRE_SLICE == 0:
                await asyncio.sleep(0)  # let requests in between slices
            if self.partition_for(group) not in self._owned:
                continue
            doomed = self.expired_offsets(group, now)
            if not doomed:
                continue
            state, _known = self._group_state(group)
            left = len(self._offsets.get(group, {})) - len(doomed)
            # An Empty (or simple-commit) group losing its last offsets is Dead: as in
            # Kafka its metadata key gets a tombstone too.
            dead = left == 0 and state in (None, "Empty")
            code = await self._remove_offsets(group, doomed, group_tombstone=dead)
            if code is ErrorCode.NONE:
                removed += len(doomed)
                if dead:
                    try:
                        self.on_group_removed(group)
                    except Exception:
                        log.exception("the coordinator failed to drop group %s", group)
        return removed


def _newer_than(current: OffsetAndMetadata | None, pending: OffsetAndMetadata | None) -> bool:
    """Whether the committed offset ``current`` was stored after the transaction's
    ``pending`` one, so the transaction's COMMIT must not replace it. Kafka compares the
    two records' append offsets; klog's cache keeps the commit time instead (the broker's
    clock at each commit, so log order but for commits in the same millisecond, which
    the transaction wins)."""
    return current is not None and pending is not None \
        and current.commit_timestamp > pending.commit_timestamp


def _subscribed_topics(value: GroupMetadataValue) -> set[str] | None:
    """Topics the members subscribe to; None when a subscription does not parse."""
    topics: set[str] = set()
    for member in value.members:
        try:
            topics.update(ConsumerProtocolSubscription.decode(member.subscription).topics)
        except InternalTopicError:
            return None
    return topics

