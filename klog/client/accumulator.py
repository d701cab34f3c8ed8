"""The producer's RecordAccumulator: records waiting to be sent, grouped in batches.

As in Kafka's ``RecordAccumulator``: one deque of ``ProducerBatch`` per partition; a record
joins the last open batch of its partition or starts a new one (``batch_size`` bytes, or one
record when a single record is bigger); the sender asks which leaders have something ready
(a batch full, lingered ``linger_ms``, a flush or close in progress, memory exhausted),
drains one batch per partition for each ready leader into one Produce request, and puts
batches that failed with a retriable error back at the head of their deque (in sequence
order, for an idempotent producer) to be retried after ``retry_backoff_ms``.

``BufferPool`` bounds the bytes of records not yet acknowledged (``buffer.memory``): an
append waits for room, up to ``max_block_ms``.

A batch encodes each record as it is appended (the v2 record grammar, the same bytes as
``klog.protocol.records.v2.BatchBuilder`` writes: tests hold them equal) straight into one
list of byte pieces behind a placeholder for the batch header: this is the producer's
per-record hot path, so varints come from a table, not a function call, and a value is
never copied until the batch is built (one join). The batch is finished when drained,
after its producer id, epoch and base sequence are known: the header is written into the
room left for it (or, compressed, in front of the compressed records) and the bytes are
kept for retries, so a retried batch keeps its sequence.

Everything here runs on the producer's event loop; there is no locking.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from klog.client.errors import KafkaClientError, KafkaTimeoutError
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    CompressionType,
    crc32c,
)
from klog.protocol.records.compression import compress
from klog.protocol.records.varint import write_varint, write_varlong

__all__ = [
    "BufferPool",
    "ProducerBatch",
    "RecordAccumulator",
    "RecordMetadata",
    "TopicPartition",
    "estimate_record_size",
]

TopicPartition = tuple[str, int]

_log = logging.getLogger(__name__)

#: Upper bound of a record's framing in a v2 batch: length, attributes, timestamp and
#: offset deltas, key/value lengths, header count (varints at their widest).
_RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 5

#: Its return value is ignored (``object``: any callable fits).
DeliveryCallback = Callable[["RecordMetadata | None", "BaseException | None"], object]


_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence

# zigzag varints of -1 .. 16383, the lengths and deltas of nearly every record: a lookup
# instead of an encoding call (index = value + 1).
_SMALL_VARINTS: tuple[bytes, ...] = tuple(write_varint(v) for v in range(-1, 1 << 14))
_SMALL_LIMIT = (1 << 14) - 1
_NULL = b"\x01"  # zigzag(-1): a null key, value or header value
_HEADER_ROOM = bytes(RECORD_BATCH_OVERHEAD)  # replaced by the header when the batch is built
_ATTRIBUTES = b"\x00"  # record attributes: unused in v2


def _varint(value: int) -> bytes:
    return _SMALL_VARINTS[value + 1] if -1 <= value < _SMALL_LIMIT else write_varint(value)


def _varlong(value: int) -> bytes:
    return _SMALL_VARINTS[value + 1] if -1 <= value < _SMALL_LIMIT else write_varlong(value)


def now_ms() -> float:
    return time.monotonic() * 1000.0


class RecordMetadata(NamedTuple):
    """Where a record was written: Kafka's RecordMetadata.

    ``offset`` is -1 with acks=0 (the broker does not answer). ``timestamp`` is the
    broker's append time for LogAppendTime topics, else the record's own timestamp.
    (A NamedTuple: one is made per record, and a frozen dataclass costs several times more.)
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1


def estimate_record_size(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> int:
    """An upper bound of the record's size in a batch (Kafka's estimateSizeInBytesUpperBound)."""
    size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for header_key, header_value in headers:
        size += 10 + len(header_key) * 4 + (len(header_value) if header_value else 0)
    return size


class ProducerBatch:
    """Records for one partition travelling together; their delivery futures, in order."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "base_timestamp",
        "completion",
        "compression",
        "created_ms",
        "done",
        "drained_ms",
        "in_flight",
        "last_attempt_ms",
        "max_timestamp",
        "memory",
        "partition",
        "payload",
        "pieces",
        "producer_id",
        "records",
        "size",
        "topic",
        "transactional",
    )

    def __init__(self, topic: str, partition: int, compression: CompressionType,
                 created_ms: float, transactional: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.compression = compression
        #: A transactional producer's batch: the isTransactional attribute bit is set.
        self.transactional = transactional
        #: Per record: (future or None, timestamp, key size, value size, callback).
        self.records: list[tuple[asyncio.Future[RecordMetadata] | None, int, int, int,
                                 DeliveryCallback | None]] = []
        #: A placeholder for the batch header, then the encoded records in pieces.
        self.pieces: list[bytes] = [_HEADER_ROOM]
        self.base_timestamp = -1
        self.max_timestamp = -1
        self.size = RECORD_BATCH_OVERHEAD
        self.memory = 0
        self.created_ms = created_ms
        self.last_attempt_ms = created_ms
        self.drained_ms: float | None = None
        self.attempts = 0
        self.base_sequence: int | None = None
        #: The producer id the batch was built (or restamped) with; -1 before.
        self.producer_id = -1
        self.payload: bytes | bytearray | None = None  # set when drained; kept for retries
        self.in_flight = False
        self.done = False
        #: Resolved (None) when the batch is completed or failed; made on demand (flush).
        self.completion: asyncio.Future[None] | None = None

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def futures(self) -> list[asyncio.Future[RecordMetadata]]:
        return [entry[0] for entry in self.records if entry[0] is not None]

    def completion_future(self) -> asyncio.Future[None]:
        """A future resolved when every record of the batch has its outcome."""
        if self.completion is None:
            self.completion = asyncio.get_running_loop().create_future()
            if self.done:
                self.completion.set_result(None)
        return self.completion

    def _resolve_completion(self) -> None:
        if self.completion is not None and not self.completion.done():
            self.completion.set_result(None)

    @property
    def closed(self) -> bool:
        return self.payload is not None

    def has_room_for(self, size: int, batch_size: int) -> bool:
        # A batch always takes its first record, however large (Kafka does the same).
        return not self.records or self.size + size <= batch_size

    def append(
        self,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        size: int,
        callback: DeliveryCallback | None,
        future: asyncio.Future[RecordMetadata] | None,
    ) -> None:
        records = self.records
        if not records:
            self.base_timestamp = timestamp
        count = len(records)
        offset_delta = _SMALL_VARINTS[count + 1] if count < _SMALL_LIMIT else write_varint(count)
        delta = timestamp - self.base_timestamp
        timestamp_delta = (_SMALL_VARINTS[delta + 1] if -1 <= delta < _SMALL_LIMIT
                           else write_varlong(delta))
        if key is None:
            key_length, key_size, key_bytes = _NULL, -1, b""
        else:
            key_size = len(key)
            key_length, key_bytes = _varint(key_size), key
        if value is None:
            value_length, value_size, value_bytes = _NULL, -1, b""
        else:
            value_size = len(value)
            value_length, value_bytes = _varint(value_size), value
        if headers:
            parts = [_varint(len(headers))]
            for header_key, header_value in headers:
                encoded_key = header_key.encode("utf-8")
                parts.append(_varint(len(encoded_key)))
                parts.append(encoded_key)
                if header_value is None:
                    parts.append(_NULL)
                else:
                    parts.append(_varint(len(header_value)))
                    parts.append(header_value)
            header_bytes = b"".join(parts)
        else:
            header_bytes = b"\x00"
        body_length = (
            1 + len(timestamp_delta) + len(offset_delta) + len(key_length)
            + len(key_bytes) + len(value_length) + len(value_bytes) + len(header_bytes)
        )
        self.pieces += (_varint(body_length), _ATTRIBUTES, timestamp_delta, offset_delta,
                        key_length, key_bytes, value_length, value_bytes, header_bytes)
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        self.size += size
        records.append((future, timestamp, key_size, value_size, callback))

    def append_value(self, timestamp: int, value: bytes, size: int,
                     callback: DeliveryCallback | None,
                     future: asyncio.Future[RecordMetadata] | None) -> None:
        """``append`` of the most common record: no key, no headers, a bytes value."""
        records = self.records
        count = len(records)
        if count:
            delta = timestamp - self.base_timestamp
            if timestamp > self.max_timestamp:
                self.max_timestamp = timestamp
        else:
            delta = 0
            self.base_timestamp = self.max_timestamp = timestamp
        timestamp_delta = (_SMALL_VARINTS[delta + 1] if -1 <= delta < _SMALL_LIMIT
                           else write_varlong(delta))
        offset_delta = _SMALL_VARINTS[count + 1] if count < _SMALL_LIMIT else write_varint(count)
        value_size = len(value)
        value_length = (_SMALL_VARINTS[value_size + 1] if value_size < _SMALL_LIMIT
                        else write_varint(value_size))
        # attributes, deltas, null key (1), value length, value, no headers (1)
        body_length = 3 + len(timestamp_delta) + len(offset_delta) + len(value_length) \
            + value_size
        self.pieces += (
            _SMALL_VARINTS[body_length + 1] if body_length < _SMALL_LIMIT
            else write_varint(body_length),
            _ATTRIBUTES, timestamp_delta, offset_delta, _NULL, value_length, value, b"\x00")
        self.size += size
        self.memory += size
        records.append((future, timestamp, -1, value_size, callback))

    def close(self, producer_id: int = -1, producer_epoch: int = -1,
              base_sequence: int = -1) -> bytes | bytearray:
        """Freeze the batch and build its bytes (compressing them), once."""
        if self.payload is None:
            pieces = self.pieces
            self.pieces = []
            if self.compression is CompressionType.NONE:
                buffer = bytearray().join(pieces)  # the one copy of each record
            else:
                pieces[0] = b""
                buffer = bytearray(_HEADER_ROOM) + compress(self.compression, b"".join(pieces))
            count = len(self.records)
            _V2_HEADER.pack_into(
                buffer, 0,
                0,  # base offset: the broker assigns it
                len(buffer) - LOG_OVERHEAD,
                NO_PARTITION_LEADER_EPOCH,
                MAGIC_V2,
                0,  # CRC, below
                # CreateTime, not control; transactional for a transactional producer.
                int(self.compression) | (TRANSACTIONAL_FLAG_MASK if self.transactional else 0),
                max(count - 1, 0),
                self.base_timestamp,
                self.max_timestamp,
                producer_id,
                producer_epoch,
                base_sequence,
                count,
            )
            _CRC.pack_into(buffer, CRC_OFFSET, crc32c(memoryview(buffer)[ATTRIBUTES_OFFSET:]))
            self.base_sequence = base_sequence if base_sequence >= 0 else None
            self.producer_id = producer_id
            # Never written to again (a restamp makes new bytes): kept as it is, no copy.
            self.payload = buffer
        return self.payload

    def restamp(self, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
        """Give a built batch a new producer id, epoch and base sequence (after the
        producer's sequences were reset): patch the header, recompute the CRC."""
        assert self.payload is not None
        batch = bytearray(self.payload)
        _PRODUCER.pack_into(batch, PRODUCER_ID_OFFSET, producer_id, producer_epoch,
                            base_sequence)
        _CRC.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
        self.base_sequence = base_sequence
        self.producer_id = producer_id
        self.payload = bytes(batch)
        return self.payload

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        """Resolve every record's future (and callback), in produce order."""
        if self.done:
            return
        self.done = True
        topic, partition = self.topic, self.partition
        # Per record: this loop runs once for every record produced, so RecordMetadata is
        # made with tuple.__new__ (no NamedTuple __new__ frame) and callbacks are called
        # here rather than through a helper.
        self._resolve_completion()
        make = tuple.__new__
        offset = base_offset if base_offset >= 0 else -1
        step = 1 if base_offset >= 0 else 0
        for future, timestamp, key_size, value_size, callback in self.records:
            metadata = make(RecordMetadata, (
                topic, partition, offset,
                log_append_time if log_append_time >= 0 else timestamp,
                key_size, value_size))
            offset += step
            if future is not None and not future.done():
                future.set_result(metadata)
            if callback is not None:
                try:
                    callback(metadata, None)
                except Exception:  # a user's callback must not break delivery of the others
                    _log.exception("delivery callback raised")

    def fail(self, exc: BaseException) -> None:
        if self.done:
            return
        self.done = True
        self._resolve_completion()
        for future, _, _, _, callback in self.records:
            if future is not None and not future.done():
                future.set_exception(exc)
                # Fire-and-forget sends are normal for a producer: do not let asyncio log
                # "exception was never retrieved" for each; awaiting still raises it.
                future.exception()
            if callback is not None:
                _call(callback, None, exc)

    def __repr__(self) -> str:
        return (f"ProducerBatch({self.topic}-{self.partition}, records={self.record_count}, "
                f"seq={self.base_sequence}, attempts={self.attempts})")


def _call(callback: DeliveryCallback, metadata: RecordMetadata | None,
          exc: BaseException | None) -> None:
    try:
        callback(metadata, exc)
    except Exception:  # a user's callback must not break delivery of the others
        _log.exception("delivery callback raised")


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class BufferPool:
    """``buffer.memory``: bytes reserved by records not yet acknowledged.

    Waiters are served first come, first served, so a big record is not starved by a
    stream of small ones.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.available = total
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def queued(self) -> int:
        """How many appends wait for memory (the accumulator then sends eagerly)."""
        return len(self._waiters)

    def try_allocate(self, size: int) -> bool:
        if not self._waiters and size <= self.available:
            self.available -= size
            return True
        return False

    async def allocate(self, size: int, max_block_ms: float) -> None:
        if size > self.total:
            raise KafkaClientError(
                f"the record is {size} bytes when serialized, more than buffer.memory "
                f"({self.total})", ErrorCode.RECORD_LIST_TOO_LARGE)
        if self.try_allocate(size):
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        timer = loop.call_later(max_block_ms / 1000.0, _time_out, waiter)
        try:
            await waiter
        except TimeoutError:
            raise KafkaTimeoutError(
                f"failed to allocate {size} bytes within max.block.ms ({max_block_ms:.0f} ms)"
            ) from None
        finally:
            timer.cancel()
            if entry in self._waiters:
                self._waiters.remove(entry)
                self._grant()

    def release(self, size: int) -> None:
        self.available += size
        self._grant()

    def _grant(self) -> None:
        while self._waiters:
            size, waiter = self._waiters[0]
            if waiter.done():
                self._waiters.popleft()
                continue
            if size > self.available:
                return
            self.available -= size
            self._waiters.popleft()
            waiter.set_result(None)


class RecordAccumulator:
    """Per-partition deques of batches; see the module docstring."""

    def __init__(
        self,
        *,
        batch_size: int = 16384,
        linger_ms: float = 5,
        compression: CompressionType = CompressionType.NONE,
        buffer_memory: int = 32 * 1024 * 1024,
        retry_backoff_ms: float = 100,
        delivery_timeout_ms: float = 120000,
        guarantee_order: bool = False,
        idempotent: bool = False,
        transactional: bool = False,
    ) -> None:
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.compression = compression
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.guarantee_order = guarantee_order
        self.idempotent = idempotent
        self.transactional = transactional
        self.pool = BufferPool(buffer_memory)
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        #: Batches sent and not answered, per partition (for muting and sequence order).
        self.in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        #: Next base sequence per partition (idempotent producer).
        self.next_sequence: dict[TopicPartition, int] = {}
        self.flushes_in_progress = 0
        self.closed = False
        #: A batch with a sequence failed for good: the partition's sequence now has a
        #: gap the broker would refuse, so the sender gets a new producer id and the
        #: sequences start again (Kafka bumps the epoch for the same reason, KIP-360).
        self.needs_sequence_reset = False
        #: The partitions whose batch failed for good: their retries are renumbered at
        #: the reset (Kafka's partitionsToRewriteSequences).
        self._partitions_to_renumber: set[TopicPartition] = set()
        self._drain_index = 0
        self._loop: asyncio.AbstractEventLoop | None = None  # the producer's, on first append

    # ---------------------------------------------------------------- appending

    def append(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        size: int,
        callback: DeliveryCallback | None = None,
        *,
        abort_on_new_batch: bool = False,
        now: float | None = None,
        with_future: bool = True,
    ) -> tuple[asyncio.Future[RecordMetadata] | None, bool] | None:
        """Add a record whose ``size`` bytes the caller has reserved in ``pool``.

        Returns (future, wakeup): ``wakeup`` when the sender should look again (this
        record filled its batch or began a new one); the future is None without
        ``with_future`` (the callback alone reports the outcome). With
        ``abort_on_new_batch`` (sticky partitioning) returns None instead of starting a
        new batch, so the caller can move to another partition first.
        """
        if self.closed:
            raise KafkaClientError("the producer is closed")
        tp = (topic, partition)
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = deque()
        future: asyncio.Future[RecordMetadata] | None = None
        if with_future:
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            future = loop.create_future()
        if dq:
            last = dq[-1]
            if not last.closed and last.has_room_for(size, self.batch_size):
                was_full = last.size >= self.batch_size
                last.append(timestamp, key, value, headers, size, callback, future)
                last.memory += size
                # Wake the sender once, when the batch fills up (Kafka wakes it on every
                # append behind a full batch; a thread wakeup is cheap, a yield is not).
                return future, not was_full and last.size >= self.batch_size
        if abort_on_new_batch:
            return None
        batch = ProducerBatch(topic, partition, self.compression,
                              now if now is not None else now_ms(), self.transactional)
        batch.append(timestamp, key, value, headers, size, callback, future)
        batch.memory = size
        dq.append(batch)
        self.incomplete.add(batch)
        return future, True

    # ---------------------------------------------------------------- the sender's side

    def ready(
        self, leader_for: Callable[[str, int], int | None], now: float
    ) -> tuple[dict[int, list[TopicPartition]], float, set[str]]:
        """Which leaders have a batch to send now.

        Returns (leader -> its partitions with batches, ms until something may become
        ready, topics of partitions whose leader is unknown).
        """
        ready: dict[int, list[TopicPartition]] = {}
        next_delay = float("inf")
        unknown: set[str] = set()
        exhausted = self.pool.queued > 0
        eager = exhausted or self.closed or self.flushes_in_progress > 0
        for tp, dq in self.batches.items():
            if not dq:
                continue
            leader = leader_for(*tp)
            if leader is None or leader < 0:
                unknown.add(tp[0])
                continue
            if self.guarantee_order and self.in_flight.get(tp):
                continue  # muted until its batch in flight is answered
            first = dq[0]
            if first.attempts > 0:
                wait = self.retry_backoff_ms
                waited = now - first.last_attempt_ms
            else:
                wait = self.linger_ms
                waited = now - first.created_ms
            full = len(dq) > 1 or first.size >= self.batch_size
            backing_off = first.attempts > 0 and waited < wait
            sendable = (full or waited >= wait or eager) and not backing_off
            if sendable:
                ready.setdefault(leader, []).append(tp)
            else:
                next_delay = min(next_delay, wait - waited)
        if ready:
            # Partitions with nothing sendable on a ready leader ride along (Kafka drains
            # every partition of a ready node), so gather them too.
            for tp, dq in self.batches.items():
                if dq:
                    leader = leader_for(*tp)
                    if leader in ready and tp not in ready[leader]:
                        ready[leader].append(tp)
        return ready, next_delay, unknown

    def drain(
        self,
        ready: dict[int, list[TopicPartition]],
        max_request_size: int,
        now: float,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> dict[int, list[ProducerBatch]]:
        """Take at most one batch per partition for each ready leader, up to the size limit."""
        drained: dict[int, list[ProducerBatch]] = {}
        self._drain_index += 1
        for node, tps in ready.items():
            batches: list[ProducerBatch] = []
            size = 0
            # Start at a rotating position so no partition is always last in line.
            start = self._drain_index % len(tps)
            for tp in tps[start:] + tps[:start]:
                dq = self.batches.get(tp)
                if not dq:
                    continue
                in_flight = self.in_flight.get(tp)
                if self.guarantee_order and in_flight:
                    continue
                first = dq[0]
                if first.attempts > 0 and now - first.last_attempt_ms < self.retry_backoff_ms:
                    continue
                if self.idempotent:
                    if producer_id < 0:
                        continue
                    seq = first.base_sequence
                    if seq is not None and in_flight and any(
                        b.producer_id == first.producer_id and (b.base_sequence or 0) < seq
                        for b in in_flight
                    ):
                        # A retried batch goes out only after every earlier one of its
                        # partition is answered, or the broker would see a gap.
                        continue
                    if seq is None and in_flight and any(
                        b.producer_id != producer_id for b in in_flight
                    ):
                        # Batches sent under the producer id before a reset are answered
                        # first: a new one must not overtake them (Kafka's client waits for
                        # in-flight batches of a stale epoch the same way).
                        continue
                if batches and size + first.size > max_request_size:
                    break
                dq.popleft()
                if self.idempotent and first.base_sequence is None:
                    base = self.next_sequence.get(tp, 0)
                    self.next_sequence[tp] = (base + first.record_count) & 0x7FFFFFFF
                    if first.payload is None:
                        first.close(producer_id, producer_epoch, base)
                    else:  # built before a sequence reset
                        first.restamp(producer_id, producer_epoch, base)
                else:
                    first.close()
                first.drained_ms = now
                first.in_flight = True
                self.in_flight.setdefault(tp, []).append(first)
                size += len(first.payload or b"")
                batches.append(first)
            if batches:
                drained[node] = batches
        return drained

    def in_flight_done(self, batch: ProducerBatch) -> None:
        batch.in_flight = False
        in_flight = self.in_flight.get(batch.tp)
        if in_flight and batch in in_flight:
            in_flight.remove(batch)

    def reenqueue(self, batch: ProducerBatch, now: float) -> None:
        """Put a batch back for a retry: at the head, or in sequence order if it has one."""
        self.in_flight_done(batch)
        batch.attempts += 1
        batch.last_attempt_ms = now
        dq = self.batches.setdefault(batch.tp, deque())
        seq = batch.base_sequence
        if seq is None:
            dq.appendleft(batch)
            return
        position = 0
        for position, queued in enumerate(dq):  # noqa: B007 - the index is the answer
            queued_seq = queued.base_sequence
            if queued_seq is None or queued_seq > seq:
                break
        else:
            position = len(dq)
        dq.insert(position, batch)

    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time: int = -1
                 ) -> None:
        self.in_flight_done(batch)
        batch.complete(base_offset, log_append_time)
        self._deallocate(batch)

    def fail(self, batch: ProducerBatch, exc: BaseException) -> None:
        if self.idempotent and batch.base_sequence is not None:
            self.needs_sequence_reset = True
            self._partitions_to_renumber.add(batch.tp)
        self.in_flight_done(batch)
        dq = self.batches.get(batch.tp)
        if dq and batch in dq:
            dq.remove(batch)
        batch.fail(exc)
        self._deallocate(batch)

    def _deallocate(self, batch: ProducerBatch) -> None:
        if batch in self.incomplete:
            self.incomplete.discard(batch)
            self.pool.release(batch.memory)
            batch.memory = 0

    def expire(self, now: float) -> list[ProducerBatch]:
        """Fail queued batches older than ``delivery_timeout_ms``; returns them."""
        expired: list[ProducerBatch] = []
        for dq in self.batches.values():
            while dq and now - dq[0].created_ms >= self.delivery_timeout_ms:
                expired.append(dq.popleft())
        for batch in expired:
            self.fail(batch, KafkaTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.topic}-{batch.partition}: "
                f"{now - batch.created_ms:.0f} ms has passed since batch creation"))
        return expired

    def delivery_expired(self, batch: ProducerBatch, now: float) -> bool:
        return now - batch.created_ms >= self.delivery_timeout_ms

    def has_earlier_incomplete(self, batch: ProducerBatch) -> bool:
        """Whether an earlier-sequenced batch of the same partition is still pending."""
        seq = batch.base_sequence
        if seq is None:
            return False
        tp = batch.tp
        pid = batch.producer_id
        for other in self.in_flight.get(tp, ()):
            if other is not batch and other.base_sequence is not None and \
                    other.producer_id == pid and other.base_sequence < seq:
                return True
        for other in self.batches.get(tp, ()):
            if other.base_sequence is not None and other.producer_id == pid and \
                    other.base_sequence < seq:
                return True
        return False

    def reset_sequences(self) -> None:
        """Forget every partition's sequence (with no batch in flight), for a new producer
        id. In the partitions where a batch failed for good, queued batches that had a
        sequence are numbered again under the new id when drained: the broker refused
        them for the gap. Elsewhere a queued retry keeps its producer id and sequence:
        an earlier attempt may have been written with its response lost, and only the
        same id and sequence let the broker recognise it (renumbered, it was written
        twice); new batches of its partition wait until it is answered (drain)."""
        assert not any(self.in_flight.values())
        self.next_sequence.clear()
        for tp, dq in self.batches.items():
            if tp in self._partitions_to_renumber:
                for batch in dq:
                    batch.base_sequence = None
        self._partitions_to_renumber.clear()
        self.needs_sequence_reset = False

    def has_in_flight(self) -> bool:
        """Whether any batch is in a request not yet answered."""
        return any(self.in_flight.values())

    def has_undrained(self) -> bool:
        return any(self.batches.values())

    def abort_all(self, exc: BaseException) -> None:
        for batch in list(self.incomplete):
            self.fail(batch, exc)

    def incomplete_futures(self) -> Iterable[asyncio.Future[None]]:
        """One future per incomplete batch (its completion): a batch's records are all
        resolved together, and waiting on each would add a callback to every record."""
        for batch in list(self.incomplete):
            if batch.records:
                yield batch.completion_future()
