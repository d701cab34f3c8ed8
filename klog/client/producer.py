"""klog's Kafka producer: ``Producer`` (asyncio) and ``SyncProducer`` (threads).

Following Kafka's design: ``send`` serializes the key and value, picks the partition
(explicit, murmur2 of the key as the Java client does, or the sticky partition for null
keys), reserves room in ``buffer_memory`` (waiting up to ``max_block_ms``) and appends the
record to its partition's open batch in the ``RecordAccumulator``; it returns at once with
a future of the record's ``RecordMetadata``. The ``Sender`` task sends batches when they
fill up or have lingered ``linger_ms``, retries what failed with retriable errors, and
completes the futures (and ``on_delivery`` callbacks) of each partition in produce order.

    async with Producer("127.0.0.1:9092") as producer:
        future = await producer.send("events", b"value", key=b"user-1")
        metadata = await future          # RecordMetadata(topic, partition, offset, ...)

Idempotence (on by default, as in Kafka 3.x, unless acks, retries or the in-flight limit
rule it out): the producer gets a producer id and numbers every partition's batches, so a
batch retried after a lost response is written once.

``Producer`` belongs to the event loop it was started on. ``SyncProducer`` runs one on a
private event loop in a background thread; its methods may be called from any thread.

``Any`` below: a record's key and value are whatever the application's serializers take
(bytes or str without one), and ``**kwargs``/``**config`` are Producer's or send()'s
keyword arguments passed through, each its own type.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from klog.client.accumulator import (
    _RECORD_OVERHEAD,
    DeliveryCallback,
    ProducerBatch,
    RecordAccumulator,
    RecordMetadata,
    estimate_record_size,
)
from klog.client.errors import KafkaClientError, KafkaTimeoutError, WouldBlockError, error_name
from klog.client.partitioner import StickyPartitionCache, partition_for_key
from klog.client.properties import boolean, keywords
from klog.client.sender import Sender
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import CompressionType

if TYPE_CHECKING:
    from klog.client.network import KafkaClient
    from klog.client.security import ClientSecurity
    from klog.client.transactions import TransactionManager

__all__ = ["COMPRESSION_TYPES", "Producer", "RecordMetadata", "SyncProducer"]

#: compression.type names -> the batch attribute codec.
COMPRESSION_TYPES: dict[str | None, CompressionType] = {
    None: CompressionType.NONE,
    "none": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}

#: Any: a serializer takes whatever the application gives send() for it.
Serializer = Callable[[Any], "bytes | None"]
HeadersArg = Mapping[str, "bytes | str | None"] | Sequence[tuple[str, "bytes | str | None"]]

MAX_INT = 2**31 - 1
_T = TypeVar("_T")
_NO_HEADERS: list[tuple[str, bytes | None]] = []


def _to_bytes(value: object, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"{what} must be bytes or str without a {what}_serializer, "
                    f"not {type(value).__name__}")


def _acks(acks: int | str) -> int:
    if acks == "all":
        return -1
    value = int(acks)
    if value not in (-1, 0, 1):
        raise ValueError(f"acks must be -1 (all), 0 or 1, not {acks!r}")
    return value


class Producer:
    """An asyncio Kafka producer; see the module docstring. Not thread-safe."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
        *,
        client_id: str = "klog-producer",
        acks: int | str = -1,
        linger_ms: float = 5,
        batch_size: int = 16384,
        buffer_memory: int = 32 * 1024 * 1024,
        compression_type: str | None = None,
        max_in_flight_requests_per_connection: int = 5,
        retries: int = MAX_INT,
        retry_backoff_ms: float = 100,
        delivery_timeout_ms: float = 120000,
        request_timeout_ms: int = 30000,
        enable_idempotence: bool | None = None,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        max_block_ms: float = 60000,
        max_request_size: int = 1048576,
        metadata_max_age_ms: int = 300000,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.acks = _acks(acks)
        if compression_type not in COMPRESSION_TYPES:
            raise ValueError(
                f"compression_type must be one of none, gzip, snappy, lz4, zstd, "
                f"not {compression_type!r}")
        if batch_size < 0 or buffer_memory <= 0 or max_request_size <= 0:
            raise ValueError("batch_size, buffer_memory and max_request_size must be positive")
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be at least 1")
        if delivery_timeout_ms < linger_ms + request_timeout_ms:
            raise ValueError(
                f"delivery_timeout_ms ({delivery_timeout_ms}) must be at least linger_ms + "
                f"request_timeout_ms ({linger_ms + request_timeout_ms})")
        conflicts = []
        if self.acks != -1:
            conflicts.append("acks=all")
        if max_in_flight_requests_per_connection > 5:
            conflicts.append("max_in_flight_requests_per_connection <= 5")
        if retries <= 0:
            conflicts.append("retries > 0")
        if enable_idempotence and conflicts:
            raise ValueError("enable_idempotence requires " + ", ".join(conflicts))
        if transactional_id is not None and (conflicts or enable_idempotence is False):
            raise ValueError("transactional_id requires idempotence: "
                             + ", ".join(conflicts or ["enable_idempotence not False"]))
        # As in Kafka 3.x: on by default, quietly off when other settings rule it out.
        self.idempotent = (not conflicts) if enable_idempotence is None else enable_idempotence
        self.bootstrap_servers = bootstrap_servers
        #: TLS and SASL (klog/client/security.py); None: PLAINTEXT.
        self.security = security
        self.client_id = client_id
        self.linger_ms = linger_ms
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.compression_type = compression_type
        self.max_in_flight = max_in_flight_requests_per_connection
        self.retries = retries
        self.retry_backoff_ms = retry_backoff_ms
        self.delivery_timeout_ms = delivery_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        self.max_block_ms = max_block_ms
        self.max_request_size = max_request_size
        self.metadata_max_age_ms = metadata_max_age_ms
        self.accumulator = RecordAccumulator(
            batch_size=batch_size,
            linger_ms=linger_ms,
            compression=COMPRESSION_TYPES[compression_type],
            buffer_memory=buffer_memory,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            # With one request in flight per connection, Kafka promises order across
            # retries by sending one batch per partition at a time; idempotence keeps
            # order with more in flight through sequences.
            guarantee_order=max_in_flight_requests_per_connection == 1,
            idempotent=self.idempotent,
            transactional=transactional_id is not None,
        )
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        #: A transactional producer's state: None (not transactional), "uninitialized",
        #: "ready" (between transactions), "in_transaction", "ending".
        self._txn_state: str | None = None if transactional_id is None else "uninitialized"
        self._txn: TransactionManager | None = None
        self._sticky = StickyPartitionCache()
        #: topic -> the open batch of its sticky partition: ``send``'s fast path appends
        #: a plain record (no key, partition, headers, timestamp or serializer) to it
        #: without the general path's steps, while it is open and has room.
        self._sticky_batches: dict[str, ProducerBatch] = {}
        self._plain_allowed = key_serializer is None and value_serializer is None
        # send()'s fast path skips the transaction state check: a transactional producer
        # takes it only inside a transaction.
        self._plain = self._plain_allowed and transactional_id is None
        self._client: KafkaClient | None = None  # from start() on
        self._sender: Sender | None = None
        self._started = False
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---------------------------------------------------------------- life cycle

    async def start(self) -> None:
        """Connect to the cluster (NoBrokersAvailable when no bootstrap server answers)."""
        if self._started:
            return
        from klog.client.network import KafkaClient

        self._client = KafkaClient(
            self.bootstrap_servers,
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            metadata_max_age_ms=self.metadata_max_age_ms,
            max_in_flight_requests_per_connection=self.max_in_flight,
            security=self.security,
        )
        await self._client.start()
        self._sender = Sender(
            self._client,
            self.accumulator,
            acks=self.acks,
            retries=self.retries,
            request_timeout_ms=self.request_timeout_ms,
            max_in_flight=self.max_in_flight,
            max_request_size=self.max_request_size,
            retry_backoff_ms=self.retry_backoff_ms,
            idempotent=self.idempotent,
            transaction_timeout_ms=self.transaction_timeout_ms,
        )
        if self.transactional_id is not None:
            from klog.client.transactions import TransactionManager

            self._txn = self._sender.txn = TransactionManager(
                self._client, self.transactional_id,
                transaction_timeout_ms=self.transaction_timeout_ms,
                retry_backoff_ms=self.retry_backoff_ms, max_wait_ms=self.max_block_ms)
        self._sender.start()
        self._started = True

    # ---------------------------------------------------------------- transactions

    async def init_transactions(self) -> None:
        """Get the transactional id's producer id and epoch from its coordinator (fencing
        older producers of the id; a transaction they left open is aborted by it)."""
        if self._txn_state is None:
            raise KafkaClientError("init_transactions needs a transactional_id")
        await self.start()
        assert self._txn is not None and self._sender is not None
        pid, epoch = await self._txn.init_producer_id()
        self._sender.producer_id, self._sender.producer_epoch = pid, epoch
        self._txn_state = "ready"

    def begin_transaction(self) -> None:
        if self._txn_state != "ready":
            raise KafkaClientError(f"cannot begin a transaction in state {self._txn_state}")
        self._txn_state = "in_transaction"
        self._plain = self._plain_allowed

    async def commit_transaction(self) -> None:
        """Send everything of the transaction, then commit it (EndTxn); raises if a record
        of it failed (the transaction must then be aborted)."""
        await self._end_transaction(True)

    async def abort_transaction(self) -> None:
        """Abort the transaction: what was sent of it is never read by read_committed
        consumers (records still buffered are sent first, then aborted with the rest)."""
        await self._end_transaction(False)

    async def _end_transaction(self, committed: bool) -> None:
        if self._txn_state != "in_transaction":
            raise KafkaClientError(f"no transaction to end (state {self._txn_state})")
        assert self._txn is not None and self._sender is not None
        self._txn_state = "ending"
        self._plain = False
        try:
            await self.flush()
            failed = self._sender.txn_error or self._sender.fatal_error
            if committed and failed is not None:
                raise KafkaClientError(f"cannot commit: the transaction failed: {failed}")
            await self._txn.end(committed)
            self._sender.txn_error = None
            self._txn_state = "ready"
        except BaseException:
            self._txn_state = "in_transaction"  # the caller may abort it
            raise

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def client(self) -> KafkaClient | None:
        """The underlying ``KafkaClient`` (metadata, connections); None before ``start``."""
        return self._client

    @property
    def producer_id(self) -> int:
        return self._sender.producer_id if self._sender is not None else -1

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything buffered now (linger_ms ignored) and wait for its outcome.

        Failures are reported through each record's future, not here;
        KafkaTimeoutError when ``timeout`` (seconds) passes first.
        """
        acc = self.accumulator
        futures = list(acc.incomplete_futures())
        if not futures:
            return
        acc.flushes_in_progress += 1
        try:
            if self._sender is not None:
                self._sender.wakeup()
            _, pending = await asyncio.wait(futures, timeout=timeout)
            if pending:
                raise KafkaTimeoutError(
                    f"flush timed out with {len(pending)} batch(es) undelivered")
        finally:
            acc.flushes_in_progress -= 1

    async def close(self, timeout: float | None = None) -> None:
        """Send what is buffered, then disconnect; after ``timeout`` seconds give up and
        fail the rest. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.accumulator.closed = True
        if self._sender is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._sender.close()), timeout)
            except TimeoutError:
                await self._sender.close(force=True)
        else:
            self.accumulator.abort_all(KafkaClientError("the producer was never started"))
        if self._client is not None:
            await self._client.close()

    # ---------------------------------------------------------------- sending

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        headers: HeadersArg | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; returns the future of its RecordMetadata.

        Waits only for metadata of a topic not seen before and for buffer memory, each
        at most ``max_block_ms``. ``on_delivery(metadata, exc)`` is called when the record
        is acknowledged or has failed, in produce order within a partition.
        """
        # This is the per-record hot path: checks and conversions are inlined.
        if (key is None and partition is None and headers is None and timestamp_ms is None
                and type(value) is bytes and self._plain):
            appended = self._append_plain(topic, value, on_delivery, True)
            if appended is not None:
                future, full = appended
                if full:
                    await self._batch_ready()
                assert future is not None
                return future
        self._check_can_send()
        sender = self._sender
        if sender is None:
            await self.start()
            sender = self._sender
            assert sender is not None
        if sender.fatal_error is not None:
            raise KafkaClientError(f"the producer failed: {sender.fatal_error}")
        client = self._client
        assert client is not None  # started: the sender exists
        known = client.cluster.topics.get(topic)
        deadline = 0.0
        if not known or (partition is not None and partition not in known):
            deadline = time.monotonic() + self.max_block_ms / 1000
            await self._wait_on_metadata(topic, partition, deadline)
            known = client.cluster.topics[topic]
        key, value, header_list, size = self._serialize(key, value, headers)
        acc = self.accumulator
        if not acc.pool.try_allocate(size):
            if not deadline:
                deadline = time.monotonic() + self.max_block_ms / 1000
            sender.wakeup()  # memory is short: the sender sends eagerly
            await acc.pool.allocate(size, max(0.0, (deadline - time.monotonic()) * 1000))
        future, wakeup = self._append_record(topic, partition, len(known), key, value,
                                             header_list, size, timestamp_ms, on_delivery,
                                             True)
        if wakeup:
            await self._batch_ready()
        assert future is not None
        return future

    def _check_can_send(self) -> None:
        """Refuse a record the producer may not take now (closed, or outside a transaction
        of a transactional producer)."""
        if self._closed:
            raise KafkaClientError("cannot send: the producer is closed")
        if self._txn_state is not None and self._txn_state != "in_transaction":
            raise KafkaClientError(f"cannot send outside a transaction (state "
                                   f"{self._txn_state}): call begin_transaction first")

    def send_nowait(self, topic: str, value: Any = None, key: Any = None, *,
                    headers: HeadersArg | None = None, partition: int | None = None,
                    timestamp_ms: int | None = None,
                    on_delivery: DeliveryCallback | None = None) -> bool:
        """Queue one record without waiting and without a future (as librdkafka's
        ``produce``): ``on_delivery`` alone reports its outcome. The parameters are
        ``send``'s.

        Raises ``WouldBlockError`` when queueing would mean waiting -- for the topic's
        metadata, for buffer memory, or for ``start()`` -- so the caller can ``await
        send(...)`` instead (which waits). Returns True when a batch is ready to go: the
        caller should then yield to the event loop (``await asyncio.sleep(0)``) so the
        sender can send it, as ``send`` does by itself.
        """
        if (key is None and partition is None and headers is None and timestamp_ms is None
                and type(value) is bytes and self._plain):
            # _append_plain without a future, inlined: this runs once per record.
            batch = self._sticky_batches.get(topic)
            if batch is not None and batch.payload is None and not batch.done:
                size = _RECORD_OVERHEAD + len(value)
                sender = self._sender
                if (batch.size + size <= self.batch_size and not self._closed
                        and sender is not None and sender.fatal_error is None
                        and self.accumulator.pool.try_allocate(size)):
                    batch.append_value(time.time_ns() // 1_000_000, value, size, on_delivery,
                                       None)
                    if batch.size + _RECORD_OVERHEAD >= self.batch_size:
                        sender.wakeup()  # full (no room for another record)
                        return True
                    return False
        self._check_can_send()
        sender = self._sender
        if sender is None:
            raise WouldBlockError("the producer is not started")
        if sender.fatal_error is not None:
            raise KafkaClientError(f"the producer failed: {sender.fatal_error}")
        client = self._client
        assert client is not None  # started: the sender exists
        known = client.cluster.topics.get(topic)
        if not known or (partition is not None and partition not in known):
            raise WouldBlockError(f"no metadata yet for {topic!r}")
        key, value, header_list, size = self._serialize(key, value, headers)
        if not self.accumulator.pool.try_allocate(size):
            sender.wakeup()  # memory is short: the sender sends eagerly
            raise WouldBlockError("buffer memory is full")
        _, wakeup = self._append_record(topic, partition, len(known), key, value,
                                        header_list, size, timestamp_ms, on_delivery, False)
        if wakeup:
            sender.wakeup()
        return wakeup

    def _append_plain(self, topic: str, value: bytes, on_delivery: DeliveryCallback | None,
                      with_future: bool
                      ) -> tuple[asyncio.Future[RecordMetadata] | None, bool] | None:
        """The fast path of a plain record (no key, partition, headers, timestamp or
        serializer): appended to its topic's open sticky batch when that has room and
        memory is free; None when the general path must decide. Returns (future,
        full): ``full`` when the batch has no room left (the sender has been woken)."""
        batch = self._sticky_batches.get(topic)
        # Open: not drained (payload), not expired or aborted (done).
        if batch is None or batch.payload is not None or batch.done or self._closed:
            return None
        size = _RECORD_OVERHEAD + len(value)
        if batch.size + size > self.batch_size:
            return None
        sender = self._sender
        if sender is None or sender.fatal_error is not None:
            return None
        pool = self.accumulator.pool
        if not pool.try_allocate(size):
            return None
        future = None
        if with_future:
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            future = loop.create_future()
        batch.append_value(time.time_ns() // 1_000_000, value, size, on_delivery, future)
        if batch.size + _RECORD_OVERHEAD >= self.batch_size:
            sender.wakeup()  # full (no room for another record): the sender's turn
            return future, True
        return future, False

    def _serialize(self, key: Any, value: Any, headers: HeadersArg | None
                   ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]:
        """Key and value as bytes, the headers as a list, and the record's size bound."""
        if self.key_serializer is not None:
            key = self.key_serializer(key)
        elif key is not None and type(key) is not bytes:
            key = _to_bytes(key, "key")
        if self.value_serializer is not None:
            value = self.value_serializer(value)
        elif value is not None and type(value) is not bytes:
            value = _to_bytes(value, "value")
        if headers:
            header_list = _headers(headers)
            size = estimate_record_size(key, value, header_list)
        else:
            header_list = _NO_HEADERS
            size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
        if size > self.max_request_size:
            raise KafkaClientError(
                f"the record is {size} bytes when serialized, more than max_request_size "
                f"({self.max_request_size})", ErrorCode.MESSAGE_TOO_LARGE)
        return key, value, header_list, size

    def _append_record(self, topic: str, partition: int | None, num_partitions: int,
                       key: bytes | None, value: bytes | None,
                       header_list: list[tuple[str, bytes | None]], size: int,
                       timestamp_ms: int | None, on_delivery: DeliveryCallback | None,
                       with_future: bool) -> tuple[asyncio.Future[RecordMetadata] | None, bool]:
        """Append a record whose ``size`` is reserved in the pool (released on failure)."""
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        acc = self.accumulator
        try:
            if partition is None:
                if key is None:
                    return self._append_sticky(topic, timestamp_ms, value, header_list, size,
                                               on_delivery, with_future)
                # Partition ids are 0 .. n-1, so the index is the id, as in Java.
                partition = partition_for_key(key, num_partitions)
            appended = acc.append(topic, partition, timestamp_ms, key, value, header_list,
                                  size, on_delivery, with_future=with_future)
        except BaseException:
            acc.pool.release(size)
            raise
        assert appended is not None
        return appended

    async def _batch_ready(self) -> None:
        assert self._sender is not None
        self._sender.wakeup()
        # Let the sender run before queueing more, as Kafka's sender thread would; a
        # caller that never awaits anything else would otherwise only fill the buffer.
        await asyncio.sleep(0)

    def _append_sticky(self, topic: str, timestamp_ms: int, value: bytes | None,
                       headers: list[tuple[str, bytes | None]], size: int,
                       on_delivery: DeliveryCallback | None, with_future: bool,
                       ) -> tuple[asyncio.Future[RecordMetadata] | None, bool]:
        acc = self.accumulator
        current = self._sticky.current(topic)
        if current is not None:
            appended = acc.append(topic, current, timestamp_ms, None, value, headers, size,
                                  on_delivery, abort_on_new_batch=True,
                                  with_future=with_future)
            if appended is not None:
                self._sticky_batches[topic] = acc.batches[(topic, current)][-1]
                return appended
        # The sticky partition's batch is full or already sent: move on (KIP-480).
        client = self._client
        assert client is not None  # records are appended only once started
        cluster = client.cluster
        partitions = cluster.partitions_for(topic) or []
        available = [p for p in partitions if cluster.leader_for(topic, p) is not None]
        chosen = self._sticky.next_partition(topic, partitions, available, current)
        appended = acc.append(topic, chosen, timestamp_ms, None, value, headers, size,
                              on_delivery, with_future=with_future)
        assert appended is not None
        self._sticky_batches[topic] = acc.batches[(topic, chosen)][-1]
        return appended

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                            **kwargs: Any) -> RecordMetadata:
        """Send one record and wait for its acknowledgement (linger_ms still applies)."""
        future = await self.send(topic, value, key, **kwargs)
        sender = self._sender
        if sender is not None:
            self.accumulator.flushes_in_progress += 1
            sender.wakeup()
            try:
                return await future
            finally:
                self.accumulator.flushes_in_progress -= 1
        return await future

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids (waiting for its metadata up to max_block_ms)."""
        if not self._started:
            await self.start()
        return await self._wait_on_metadata(
            topic, None, time.monotonic() + self.max_block_ms / 1000)

    async def _wait_on_metadata(self, topic: str, partition: int | None,
                                deadline: float) -> list[int]:
        client = self._client
        assert client is not None  # called once started
        partitions: list[int] | None = client.cluster.partitions_for(topic)
        if partitions and (partition is None or partition in partitions):
            return partitions
        while True:
            # Brokers unreachable for now: keep trying until max_block_ms.
            with contextlib.suppress(KafkaClientError):
                await client.refresh_metadata([topic], allow_auto_topic_creation=True)
            partitions = client.cluster.partitions_for(topic)
            code = client.cluster.topic_errors.get(topic)
            if code and code not in (ErrorCode.LEADER_NOT_AVAILABLE,
                                     ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                raise KafkaClientError(f"{error_name(code)}: topic {topic!r}", code)
            if partitions:
                if partition is None or partition in partitions:
                    return partitions
                raise KafkaClientError(
                    f"partition {partition} of topic {topic!r} does not exist "
                    f"(it has {len(partitions)})", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"topic {topic!r} not present in metadata after "
                    f"{self.max_block_ms:.0f} ms")
            await asyncio.sleep(min(self.retry_backoff_ms / 1000,
                                    max(0.0, deadline - time.monotonic())))


def _headers(headers: HeadersArg | None) -> list[tuple[str, bytes | None]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[tuple[str, bytes | None]] = []
    for header_key, header_value in items:
        if not isinstance(header_key, str):
            raise TypeError(f"header keys are str, not {type(header_key).__name__}")
        out.append((header_key, _to_bytes(header_value, "header value")))
    return out


class SyncProducer:
    """A ``Producer`` on its own event loop in a background thread, for blocking code.

    ``send`` returns a ``concurrent.futures.Future`` of RecordMetadata; ``flush`` and
    ``close`` block. Use as a context manager, or call ``close``: the thread lives until
    then.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str] = "127.0.0.1:9092",
                 **config: Any) -> None:  # Any: Producer's keyword arguments
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="klog-producer", daemon=True)
        self._thread.start()
        self._producer: Producer | None = None
        self._closed = False
        try:
            self._producer = self._call(self._create(bootstrap_servers, config))
        except BaseException:
            self._stop_loop()
            raise

    async def _create(self, bootstrap_servers: str | Sequence[str],
                      config: dict[str, Any]) -> Producer:
        producer = Producer(bootstrap_servers, **config)
        try:
            await producer.start()
        except BaseException:
            await producer.close()
            raise
        return producer

    # Any: a coroutine's send and yield types, which only the event loop sees.
    def _call(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @property
    def producer(self) -> Producer:
        assert self._producer is not None
        return self._producer

    def send(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any
             ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue a record; blocks only while the producer waits for metadata or memory."""
        result: concurrent.futures.Future[RecordMetadata] = concurrent.futures.Future()

        async def send() -> None:
            try:
                future = await self.producer.send(topic, value, key, **kwargs)
            except BaseException as exc:
                result.set_exception(exc)
                return
            future.add_done_callback(lambda f: _copy_outcome(f, result))

        self._call(send())
        return result

    def send_and_wait(self, topic: str, value: Any = None, key: Any = None,
                      **kwargs: Any) -> RecordMetadata:
        return self._call(self.producer.send_and_wait(topic, value, key, **kwargs))

    def partitions_for(self, topic: str) -> list[int]:
        return self._call(self.producer.partitions_for(topic))

    def flush(self, timeout: float | None = None) -> None:
        self._call(self.producer.flush(timeout))

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._producer is not None:
                self._call(self._producer.close(timeout))
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _copy_outcome(source: asyncio.Future[RecordMetadata],
                  target: concurrent.futures.Future[RecordMetadata]) -> None:
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
    else:
        target.set_result(source.result())


# ---------------------------------------------------------------------------------------
# Kafka-style properties (for the CLI's --producer-prop) and the perf measurement

#: Kafka producer property -> (Producer keyword, converter).
#: Any: each converter gives its keyword's type (int, float, bool, str...).
PRODUCER_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "acks": ("acks", lambda v: _acks(v.strip().lower())),
    "linger.ms": ("linger_ms", float),
    "batch.size": ("batch_size", int),
    "buffer.memory": ("buffer_memory", int),
    "compression.type": ("compression_type", lambda v: None if v == "none" else v),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", int),
    "retries": ("retries", int),
    "retry.backoff.ms": ("retry_backoff_ms", float),
    "delivery.timeout.ms": ("delivery_timeout_ms", float),
    "request.timeout.ms": ("request_timeout_ms", int),
    "enable.idempotence": ("enable_idempotence", boolean),
    "max.block.ms": ("max_block_ms", float),
    "max.request.size": ("max_request_size", int),
    "metadata.max.age.ms": ("metadata_max_age_ms", int),
    "client.id": ("client_id", str),
    "transactional.id": ("transactional_id", str),
    "transaction.timeout.ms": ("transaction_timeout_ms", int),
}


def producer_config(properties: Mapping[str, str]) -> dict[str, Any]:
    """Producer keywords from Kafka property names (``linger.ms`` -> ``linger_ms``).

    ValueError names the property that is unknown or has a bad value.
    """
    return keywords(properties, PRODUCER_PROPERTIES, "producer", security=True)


def perf_payload(record_size: int, seed: int = 0) -> bytes:
    """A payload of random upper-case letters, as kafka-producer-perf-test sends."""
    import random

    rng = random.Random(seed)
    return bytes(rng.randrange(65, 91) for _ in range(record_size))


async def measure_produce(
    bootstrap_servers: str | Sequence[str],
    topic: str,
    num_records: int,
    record_size: int,
    *,
    throughput: float = -1,
    report: Callable[[dict[str, float]], None] | None = None,
    report_interval: float = 5.0,
    transaction_duration_ms: float = 3000,
    **producer_options: Any,
) -> dict[str, float]:
    """Send ``num_records`` records of ``record_size`` bytes as kafka-producer-perf-test
    does and measure them: records/s, MB/s (MiB, as Kafka counts), and the latency from
    ``send`` to acknowledgement (avg, max, p50, p95, p99, p99.9 in ms).

    ``throughput`` caps records per second (-1: as fast as possible). ``report`` gets a
    window summary every ``report_interval`` seconds. Records that fail are counted in
    ``errors`` (the first error is raised if every record failed).

    With a ``transactional_id`` among the producer options the records go in
    transactions, as kafka-producer-perf-test's --transactional-id: one begins before a
    record when none is open, and is committed once it has lasted
    ``transaction_duration_ms`` (and at the end); the result adds the number of commits
    and their latency (``commit_p50_ms``, ``commit_p99_ms``, ``commit_max_ms``).
    """
    from array import array

    payload = perf_payload(record_size)
    # Per record: its latency in ms once acknowledged, -1 before. Callbacks do nothing
    # else (they run once per record); the window reports read the array.
    latencies = array("d", [-1.0]) * num_records
    errors: list[BaseException] = []
    monotonic = time.monotonic

    def done(index: int, sent_at: float) -> DeliveryCallback:
        def callback(metadata: RecordMetadata | None, exc: BaseException | None) -> None:
            latencies[index] = (monotonic() - sent_at) * 1000
            if exc is not None:
                errors.append(exc)
        return callback

    window_start = 0.0
    scanned = 0  # latencies before this index are counted in an earlier window

    def report_window(now: float) -> None:
        # Acknowledgements arrive in send order within a partition: count the completed
        # run since the last window (a record still in flight ends it).
        nonlocal scanned, window_start
        count, total, worst = 0, 0.0, 0.0
        while scanned < num_records and latencies[scanned] >= 0:
            latency = latencies[scanned]
            count += 1
            total += latency
            if latency > worst:
                worst = latency
            scanned += 1
        if count and report is not None:
            elapsed = now - window_start
            report({
                "records": count,
                "records_per_sec": count / elapsed,
                "mb_per_sec": count * record_size / elapsed / (1 << 20),
                "avg_latency_ms": total / count,
                "max_latency_ms": worst,
            })
            window_start = now

    options: dict[str, Any] = {"client_id": "klog-perf-produce", **producer_options}
    transactional = options.get("transactional_id") is not None
    commits: list[float] = []  # commit latencies, ms
    async with Producer(bootstrap_servers, **options) as producer:
        await producer.partitions_for(topic)  # metadata first: not part of the measure
        if transactional:
            await producer.init_transactions()
        txn_started: float | None = None
        txn_duration = transaction_duration_ms / 1000
        start = window_start = monotonic()
        send, send_nowait = producer.send, producer.send_nowait
        sleep = asyncio.sleep
        for i in range(num_records):
            if transactional:
                if txn_started is None:
                    producer.begin_transaction()
                    txn_started = monotonic()
                elif monotonic() - txn_started >= txn_duration:
                    began = monotonic()
                    await producer.commit_transaction()
                    commits.append((monotonic() - began) * 1000)
                    producer.begin_transaction()
                    txn_started = monotonic()
            # librdkafka's produce() style: queue without a future, and wait (send) only
            # when queueing would block; yield when a batch is ready, as send() does.
            callback = done(i, monotonic())
            try:
                if send_nowait(topic, payload, on_delivery=callback):
                    await sleep(0)
            except WouldBlockError:
                await send(topic, payload, on_delivery=callback)
            if throughput > 0:
                ahead = start + (i + 1) / throughput - monotonic()
                if ahead > 0.002:
                    await asyncio.sleep(ahead)
            if report is not None and i % 1000 == 0:
                now = monotonic()
                if now - window_start >= report_interval:
                    report_window(now)
        if txn_started is not None:
            began = monotonic()
            await producer.commit_transaction()
            commits.append((monotonic() - began) * 1000)
        await producer.flush()
        elapsed = max(monotonic() - start, 1e-9)
    if errors and len(errors) == num_records:
        raise errors[0]
    ordered = sorted(latencies)

    def percentile(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else 0.0

    commit_stats: dict[str, float] = {}
    if transactional:
        commits.sort()
        commit_stats = {
            "transactions": len(commits),
            "commit_p50_ms": commits[len(commits) // 2] if commits else 0.0,
            "commit_p99_ms": commits[min(len(commits) - 1, int(0.99 * len(commits)))]
            if commits else 0.0,
            "commit_max_ms": commits[-1] if commits else 0.0,
        }
    return {
        **commit_stats,
        "records": num_records,
        "errors": len(errors),
        "record_size": record_size,
        "seconds": elapsed,
        "records_per_sec": num_records / elapsed,
        "mb_per_sec": num_records * record_size / elapsed / (1 << 20),
        "avg_latency_ms": sum(ordered) / len(ordered) if ordered else 0.0,
        "max_latency_ms": ordered[-1] if ordered else 0.0,
        "p50_ms": percentile(0.5),
        "p95_ms": percentile(0.95),
        "p99_ms": percentile(0.99),
        "p999_ms": percentile(0.999),
    }
