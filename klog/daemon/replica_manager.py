"""ReplicaManager: the partitions this broker hosts, and produce/fetch against them.

Owns the map of hosted Partitions, applies LeaderAndIsr / StopReplica decisions from the
controller, validates produced batches the way Kafka's LogValidator does the parts that
need no record decoding (magic, timestamps from the batch header), recompresses when the
topic's compression.type asks for a codec other than the producer's, appends, and wakes
delayed fetches when new data arrives. Runs on the event loop thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from klog.daemon.metadata_cache import PartitionState
from klog.daemon.partition import NotLeaderOrFollowerError, Partition
from klog.protocol.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    KafkaError,
    OffsetOutOfRangeError,
)
from klog.protocol.records.batch import (
    MAGIC_V2,
    CompressionType,
    TimestampType,
    iter_batch_headers,
    read_batch_header,
)
from klog.protocol.records.decode import iter_records as iter_any_records
from klog.protocol.records.v2 import BatchBuilder, iter_records, record_columns
from klog.storage.config import LogConfig
from klog.storage.log import LogAppendInfo
from klog.storage.log_manager import LogManager
from klog.storage.segment import FetchDataInfo, TimestampAndOffset

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

MAX_TIMESTAMP = -3  # ListOffsets: the record with the largest timestamp (KIP-734)

_CODEC_BY_NAME = {
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}


class InvalidTimestampError(KafkaError):
    error_code = ErrorCode.INVALID_TIMESTAMP


class UnknownTopicOrPartitionError(KafkaError):
    error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@dataclass(slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    info: LogAppendInfo | None = None


@dataclass(slots=True)
class FetchResult:
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    data: FetchDataInfo | None = None
    aborted_transactions: list[tuple[int, int]] | None = None

    @property
    def size(self) -> int:
        return self.data.size if self.data is not None else 0


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        topic_config: Callable[[str], LogConfig],
        on_new_data: Callable[[TopicPartition], None] | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        self.topic_config = topic_config
        self.on_new_data = on_new_data or (lambda tp: None)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.clock: Callable[[], int] = lambda: int(time.time() * 1000)

    # -- controller decisions --------------------------------------------------------------

    def become_leader_or_follower(self, states: Iterable[PartitionState]) -> dict[TopicPartition,
                                                                                  int]:
        """Apply LeaderAndIsr: create missing logs, take the given roles. Returns errors."""
        errors: dict[TopicPartition, int] = {}
        for state in states:
            tp = (state.topic, state.partition)
            if self.broker_id not in state.replicas:
                continue
            try:
                partition = self._get_or_create(tp)
                if state.leader == self.broker_id:
                    partition.make_leader(state)
                else:
                    partition.make_follower(state)
                errors[tp] = 0
            except KafkaError as exc:
                errors[tp] = int(exc.error_code)
            except OSError as exc:
                log.error("cannot open log for %s-%d: %s", tp[0], tp[1], exc)
                errors[tp] = int(ErrorCode.KAFKA_STORAGE_ERROR)
        return errors

    def _get_or_create(self, tp: TopicPartition) -> Partition:
        partition = self.partitions.get(tp)
        if partition is None:
            plog = self.log_manager.get_or_create_log(tp[0], tp[1], self.topic_config(tp[0]))
            partition = Partition(tp[0], tp[1], self.broker_id, plog)
            self.partitions[tp] = partition
        return partition

    def stop_replicas(self, tps: Iterable[TopicPartition], delete: bool) -> None:
        for tp in tps:
            self.partitions.pop(tp, None)
            if delete:
                self.log_manager.delete_log(tp[0], tp[1])

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
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} is not hosted here")
        if not p.is_leader:
            raise NotLeaderOrFollowerError(f"not the leader of {topic}-{partition}")
        return p

    # -- produce ----------------------------------------------------------------------------

    def append_records(
        self,
        entries: dict[TopicPartition, Any],
        required_acks: int,
        origin: str = "client",
    ) -> dict[TopicPartition, ProduceResult]:
        """Append each partition's batches on its leader replica; errors per partition."""
        results: dict[TopicPartition, ProduceResult] = {}
        for tp, records in entries.items():
            try:
                partition = self.leader_partition(*tp)
                config = partition.log.config
                if records is None:
                    raise CorruptRecordError("null records in a produce request")
                records = self._validate(records, config, origin)
                info = partition.append_records_to_leader(
                    records, required_acks, config.min_insync_replicas, origin
                )
                if info.duplicate:
                    # Kafka answers a retried batch with the timestamp it remembered for
                    # the original (its max timestamp, i.e. the append time under
                    # LogAppendTime), whatever the topic's timestamp type.
                    append_time = info.max_timestamp
                else:
                    append_time = info.log_append_time if config.log_append_time else -1
                results[tp] = ProduceResult(
                    0,
                    info.first_offset,
                    append_time,
                    info.log_start_offset,
                    info=info,
                )
                if not info.duplicate:
                    self.on_new_data(tp)
            except KafkaError as exc:
                results[tp] = ProduceResult(int(exc.error_code), error_message=str(exc))
            except OSError as exc:
                log.error("append to %s-%d failed: %s", tp[0], tp[1], exc)
                results[tp] = ProduceResult(int(ErrorCode.KAFKA_STORAGE_ERROR),
                                            error_message=str(exc))
        return results

    def _validate(self, records: Any, config: LogConfig, origin: str) -> Any:
        """LogValidator's checks that the batch header answers, and recompression."""
        view = memoryview(records)
        target = None if config.compression_type == "producer" else _CODEC_BY_NAME[
            config.compression_type]
        max_diff = config.message_timestamp_difference_max_ms
        check_ts = not config.log_append_time and max_diff < 2**63 - 1
        now = self.clock()
        recompress = False
        for h in iter_batch_headers(view):
            if origin == "client" and h.magic != MAGIC_V2:
                raise InvalidRecordError(
                    "produce requests v3+ may only contain record batches of magic 2"
                )
            if check_ts and h.timestamp_type is TimestampType.CREATE_TIME:
                for ts in (h.base_timestamp, h.max_timestamp):
                    if ts >= 0 and abs(ts - now) > max_diff:
                        raise InvalidTimestampError(
                            f"timestamp {ts} of a batch is out of range: more than "
                            f"message.timestamp.difference.max.ms ({max_diff}) from {now}"
                        )
            if target is not None and h.compression is not target and not h.is_control:
                recompress = True
        if recompress:
            assert target is not None
            return self._recompress(view, target)
        return records

    @staticmethod
    def _recompress(view: memoryview, target: CompressionType) -> bytearray:
        """Rewrite every batch with the topic's codec (Kafka's broker-side recompression).
        Producer id, epoch, sequence, transactional flag and timestamps are kept."""
        out = bytearray()
        for h in iter_batch_headers(view):
            h.ensure_valid(view)
            if h.is_control or h.compression is target:
                out += view[h.position:h.end]
                continue
            builder = BatchBuilder(
                compression=target,
                timestamp_type=h.timestamp_type,
                producer_id=h.producer_id,
                producer_epoch=h.producer_epoch,
                base_sequence=h.base_sequence,
                is_transactional=h.is_transactional,
            )
            for record in iter_records(view, h):
                builder.append(record.timestamp, record.key, record.value,
                               record.headers,
                               offset=record.offset)
            out += builder.build()
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
    ) -> FetchResult:
        try:
            p = self.partitions.get((topic, partition_index))
            if p is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{partition_index} is not hosted")
            if not p.is_leader:
                raise NotLeaderOrFollowerError(f"not the leader of {topic}-{partition_index}")
            p.check_leader_epoch(current_leader_epoch)
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

    def shutdown(self) -> None:
        self.partitions.clear()


def _record_offsets_and_timestamps(batch: bytes) -> Iterator[tuple[int, int]]:
    """(offset, timestamp) of each record of the first batch in ``batch`` (the record
    locator of timestamp lookups): column-wise for v2, record by record for v0/v1."""
    header = read_batch_header(batch, 0)
    if header.magic == MAGIC_V2:
        columns = record_columns(batch, header)
        return zip(columns.offsets, columns.timestamps, strict=True)
    return ((r.offset, r.timestamp) for r in iter_any_records(batch, header))
