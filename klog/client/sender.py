"""The producer's Sender: the one task that turns accumulated batches into Produce requests.

As Kafka's ``Sender``: each round it expires batches past ``delivery_timeout_ms``, asks
the accumulator which leaders have something ready, refreshes metadata for partitions
without a known leader, drains one batch per partition for every ready leader that has a
free in-flight slot into one Produce request per broker, and sleeps until the next batch
could become ready (linger, backoff) or it is woken (a batch filled, a response came, a
flush or close began).

Responses are handled per partition: success completes the batch's futures; a retriable
error (leader moved, broker down, request timed out, ...) puts the batch back at the head of
its deque for another attempt after ``retry_backoff_ms`` while retries and the delivery
timeout allow, and asks for fresh metadata; anything else fails the batch.

An idempotent producer first gets a producer id and epoch (InitProducerId), then numbers
each partition's batches with sequences; the broker drops duplicates of retried batches.

Runs on the producer's event loop; state shared with ``Producer.send`` (the accumulator)
is only touched from that loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import TYPE_CHECKING, Any

from klog.client.accumulator import ProducerBatch, RecordAccumulator, now_ms
from klog.client.errors import (
    INVALID_METADATA,
    RETRIABLE,
    KafkaClientError,
    KafkaTimeoutError,
    error_for,
)
from klog.protocol import produce
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.client.network import BrokerConnection, KafkaClient
    from klog.client.transactions import TransactionManager

TopicPartition = tuple[str, int]

log = logging.getLogger(__name__)

PRODUCE = 0
INIT_PRODUCER_ID = 22


class Sender:
    """Drains the accumulator to the brokers; see the module docstring."""

    def __init__(
        self,
        client: KafkaClient,
        accumulator: RecordAccumulator,
        *,
        acks: int,
        retries: int,
        request_timeout_ms: int,
        max_in_flight: int,
        max_request_size: int,
        retry_backoff_ms: float,
        idempotent: bool,
        transaction_timeout_ms: int = 60000,
    ) -> None:
        self.client = client
        self.accumulator = accumulator
        self.acks = acks
        self.retries = retries
        self.request_timeout_ms = request_timeout_ms
        self.max_in_flight = max_in_flight
        self.max_request_size = max_request_size
        self.retry_backoff_ms = retry_backoff_ms
        self.idempotent = idempotent
        self.transaction_timeout_ms = transaction_timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1
        self._wakeup = asyncio.Event()
        self._in_flight_requests: dict[int, int] = {}
        self._requests: set[asyncio.Task[None]] = set()
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_topics: set[str] = set()
        self._running = True
        self._force_close = False
        self._task: asyncio.Task[None] | None = None
        self.fatal_error: BaseException | None = None
        #: A transactional producer's coordinator requests (set by the producer): a
        #: partition's batches go out only once it is added to the transaction.
        self.txn: TransactionManager | None = None
        #: Why the current transaction cannot commit (an AddPartitionsToTxn refused).
        self.txn_error: BaseException | None = None
        self._adding: asyncio.Task[None] | None = None

    # ---------------------------------------------------------------- life cycle

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="klog-sender")

    def wakeup(self) -> None:
        self._wakeup.set()

    async def close(self, force: bool = False) -> None:
        """Stop once everything is sent (or at once with ``force``, failing what is left)."""
        self._running = False
        self._force_close = force
        self.wakeup()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def in_flight_requests(self) -> int:
        return sum(self._in_flight_requests.values())

    # ---------------------------------------------------------------- the loop

    async def _run(self) -> None:
        try:
            while self._running:
                await self._run_once()
            # Closing: keep going until everything queued and in flight is done.
            while not self._force_close and (
                self.accumulator.incomplete or self._requests
            ):
                await self._run_once()
        except Exception as exc:  # a bug here must not leave futures hanging forever
            log.exception("producer sender failed")
            self.fatal_error = exc
        finally:
            if self.accumulator.incomplete:
                self.accumulator.abort_all(
                    self.fatal_error or KafkaClientError("the producer was closed"))
            for task in list(self._requests):
                task.cancel()
            if self._metadata_task is not None:
                self._metadata_task.cancel()

    async def _run_once(self) -> None:
        acc = self.accumulator
        now = now_ms()
        acc.expire(now)
        if acc.needs_sequence_reset and not self._requests and not acc.has_in_flight():
            # Nothing in flight any more (requests written at once are in flight too,
            # without a task in _requests): start over under a new producer id.
            log.info("producer id %d: a batch failed for good, getting a new producer id",
                     self.producer_id)
            acc.reset_sequences()
            self.producer_id = self.producer_epoch = -1
        if acc.needs_sequence_reset:
            # Wait for the requests in flight; new batches would only widen the gap.
            await self._sleep(self.retry_backoff_ms)
            return
        if self.idempotent and self.producer_id < 0:
            if self.txn is not None:
                # init_transactions sets the producer id; nothing goes out before it.
                await self._sleep(self.retry_backoff_ms)
                return
            if acc.incomplete:
                await self._init_producer_id()
            else:
                await self._sleep(None)
            return
        cluster = self.client.cluster
        ready, next_delay, unknown = acc.ready(cluster.leader_for, now)
        if unknown:
            self._refresh_metadata(unknown)
            next_delay = min(next_delay, self.retry_backoff_ms)
        if self.txn is not None:
            ready = self._in_transaction(ready)
        sendable = {
            node: tps for node, tps in ready.items()
            if self._in_flight_requests.get(node, 0) < self.max_in_flight
        }
        if sendable:
            drained = acc.drain(sendable, self.max_request_size, now,
                                self.producer_id, self.producer_epoch)
            for node, batches in drained.items():
                self._in_flight_requests[node] = self._in_flight_requests.get(node, 0) + 1
                conn = self.client.connection(node)
                if conn is not None and conn.has_free_slot:
                    # The common case: written now, answered through a callback.
                    self._write_produce(conn, node, batches, slot_taken=False)
                    continue
                task = asyncio.get_running_loop().create_task(self._produce(node, batches))
                self._requests.add(task)
                task.add_done_callback(self._requests.discard)
            if drained:
                # Let the requests go out before looking again.
                await asyncio.sleep(0)
                return
        if ready and not sendable:
            next_delay = min(next_delay, self.retry_backoff_ms)  # woken by a response
        # Batches may also still be waiting to expire.
        if acc.incomplete and next_delay == float("inf") and not self._requests:
            next_delay = self.retry_backoff_ms
        await self._sleep(next_delay)

    async def _sleep(self, delay_ms: float | None) -> None:
        if self._wakeup.is_set():
            self._wakeup.clear()
            return
        if delay_ms is not None and delay_ms <= 0:
            await asyncio.sleep(0)
            return
        timeout = None if delay_ms is None or delay_ms == float("inf") else delay_ms / 1000
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        self._wakeup.clear()

    # ---------------------------------------------------------------- metadata

    def _refresh_metadata(self, topics: set[str]) -> None:
        self._metadata_topics |= topics
        if self._metadata_task is not None and not self._metadata_task.done():
            return
        self._metadata_task = asyncio.get_running_loop().create_task(self._metadata())

    async def _metadata(self) -> None:
        topics = sorted(self._metadata_topics)
        self._metadata_topics = set()
        try:
            await self.client.refresh_metadata(topics, allow_auto_topic_creation=True)
        except KafkaClientError as exc:
            log.debug("producer metadata refresh failed: %s", exc)
            await asyncio.sleep(self.retry_backoff_ms / 1000)
        self.wakeup()

    # ---------------------------------------------------------------- idempotence

    async def _init_producer_id(self) -> None:
        try:
            response = await self.client.send(None, INIT_PRODUCER_ID, {
                "transactional_id": None,
                "transaction_timeout": self.transaction_timeout_ms,
                "producer_id": -1,
                "producer_epoch": -1,
            })
            code = int(response.error_code)
            if code:
                raise error_for(code, "InitProducerId")
        except KafkaClientError as exc:
            if exc.error_code is not None and exc.error_code not in RETRIABLE:
                # e.g. UNSUPPORTED_VERSION or CLUSTER_AUTHORIZATION_FAILED: nothing will
                # ever be delivered.
                self.accumulator.abort_all(exc)
                return
            log.debug("InitProducerId failed, retrying: %s", exc)
            await asyncio.sleep(self.retry_backoff_ms / 1000)
            return
        self.producer_id = int(response.producer_id)
        self.producer_epoch = int(response.producer_epoch)
        log.debug("producer id %d epoch %d", self.producer_id, self.producer_epoch)

    # ---------------------------------------------------------------- transactions

    def _in_transaction(self, ready: dict[int, list[TopicPartition]]
                        ) -> dict[int, list[TopicPartition]]:
        """The ready partitions already in the transaction; the others are added first
        (one AddPartitionsToTxn at a time, for all of them), as Kafka's client does."""
        txn = self.txn
        assert txn is not None
        added = txn.partitions
        missing = {tp for tps in ready.values() for tp in tps if tp not in added}
        if missing and (self._adding is None or self._adding.done()):
            self._adding = asyncio.get_running_loop().create_task(
                self._add_partitions(missing))
        return {node: kept for node, tps in ready.items()
                if (kept := [tp for tp in tps if tp in added])}

    async def _add_partitions(self, tps: set[TopicPartition]) -> None:
        assert self.txn is not None
        try:
            await self.txn.add_partitions(tps)
        except KafkaClientError as exc:
            # The transaction cannot commit: fail what waits (Kafka's abortable error).
            log.warning("adding partitions to the transaction failed: %s", exc)
            self.txn_error = exc
            self.accumulator.abort_all(exc)
        self.wakeup()

    # ---------------------------------------------------------------- produce

    async def _produce(self, node: int, batches: list[ProducerBatch]) -> None:
        """The slow path: connect to ``node`` and wait for an in-flight slot first."""
        try:
            conn = await self.client.connect_to(node)
            await conn.acquire_slot(self.request_timeout_ms / 1000)
        except KafkaClientError as exc:
            self._failed_request(batches, exc)
            self._request_done(node)
            return
        except OSError as exc:
            self._failed_request(batches, KafkaClientError(
                f"produce to node {node} failed: {exc}", ErrorCode.NETWORK_EXCEPTION))
            self._request_done(node)
            return
        self._write_produce(conn, node, batches, slot_taken=True)

    def _write_produce(self, conn: BrokerConnection, node: int, batches: list[ProducerBatch],
                       *, slot_taken: bool) -> None:
        """One Produce request of ``batches``, encoded by hand (klog/protocol/produce.py:
        the batches are written as they are, never copied into a request entity)."""
        topics: dict[str, list[tuple[int, bytes | bytearray]]] = {}
        for batch in batches:
            assert batch.payload is not None
            topics.setdefault(batch.topic, []).append((batch.partition, batch.payload))
        try:
            version = self.client.api_version(node, PRODUCE)
            # A transaction's batches name their transactional id, as Kafka's producer
            # does: the leader checks it (Write on it; KIP-890's verification with its
            # coordinator), and refuses transactional records without one.
            body = produce.encode_produce_request(
                version, self.acks, self.request_timeout_ms, list(topics.items()),
                None if self.txn is None else self.txn.transactional_id)
            future = conn.send_nowait(
                PRODUCE, version, body, timeout=self.request_timeout_ms / 1000,
                expect_response=self.acks != 0, decode=produce.decode_produce_response,
                slot_taken=slot_taken)
        except KafkaClientError as exc:
            self._failed_request(batches, exc)
            self._request_done(node)
            return
        if future is None:  # acks=0: sent is all we will know
            for batch in batches:
                self.accumulator.complete(batch, -1)
            self._request_done(node)
            return
        future.add_done_callback(functools.partial(self._on_response, node, batches))

    def _on_response(self, node: int, batches: list[ProducerBatch],
                     future: asyncio.Future[Any]) -> None:  # Any: a kio ProduceResponse
        try:
            if future.cancelled():
                self._failed_request(batches, KafkaClientError(
                    f"produce to node {node} was cancelled", ErrorCode.NETWORK_EXCEPTION))
                return
            exc = future.exception()
            if exc is not None:
                if not isinstance(exc, KafkaClientError):
                    exc = KafkaClientError(f"produce to node {node} failed: {exc}",
                                           ErrorCode.NETWORK_EXCEPTION)
                self._failed_request(batches, exc)
                return
            topics, _throttle_ms = future.result()
            self._handle_response(batches, {
                (name, part.index): part for name, parts in topics for part in parts})
        except Exception as exc:  # a bug here must not leave the batches hanging
            log.exception("handling a produce response failed")
            for batch in batches:
                self.accumulator.fail(batch, exc)
        finally:
            self._request_done(node)

    def _request_done(self, node: int) -> None:
        self._in_flight_requests[node] -= 1
        self.wakeup()

    def _failed_request(self, batches: list[ProducerBatch], exc: KafkaClientError) -> None:
        code = exc.error_code if exc.error_code is not None else ErrorCode.NETWORK_EXCEPTION
        if code == ErrorCode.BROKER_NOT_AVAILABLE:
            # The leader the batches were drained for left the metadata before the
            # connection was made (a broker restarting): nothing was sent, so, as Kafka's
            # client, wait for the new leader instead of failing the records for good.
            code = ErrorCode.NETWORK_EXCEPTION
        for batch in batches:
            self._complete_with_error(batch, int(code), str(exc), exc)
        self.client.request_metadata_refresh()

    def _handle_response(self, batches: list[ProducerBatch],
                         results: dict[tuple[str, int], produce.PartitionResponse]) -> None:
        for batch in batches:
            part = results.get(batch.tp)
            if part is None:
                self._complete_with_error(
                    batch, ErrorCode.UNKNOWN_SERVER_ERROR,
                    "the produce response does not mention the partition", None)
                continue
            code = part.error_code
            if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                self.accumulator.complete(batch, part.base_offset, part.log_append_time_ms)
            else:
                self._complete_with_error(batch, code, part.error_message, None)

    def _complete_with_error(self, batch: ProducerBatch, code: int, message: str | None,
                             exc: KafkaClientError | None) -> None:
        acc = self.accumulator
        now = now_ms()
        retriable = code in RETRIABLE
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and (
            acc.has_earlier_incomplete(batch) or acc.needs_sequence_reset
        ):
            # An earlier batch of this partition is being retried, or failed for good and
            # the sequences start again: the broker refused this one for the gap; it goes
            # again after the earlier one, or renumbered.
            retriable = True
        if code in INVALID_METADATA or code == ErrorCode.NETWORK_EXCEPTION:
            self.client.request_metadata_refresh()
            self._metadata_topics.add(batch.topic)
        if (
            retriable
            and not self._force_close
            and batch.attempts < self.retries
            and not acc.delivery_expired(batch, now)
        ):
            log.debug("retrying %r after %s", batch, message or code)
            acc.reenqueue(batch, now)
            return
        if acc.delivery_expired(batch, now) and retriable:
            error: BaseException = KafkaTimeoutError(
                f"expiring {batch.record_count} record(s) for {batch.topic}-"
                f"{batch.partition}: delivery.timeout.ms passed (last error: "
                f"{message or code})")
        elif exc is not None:
            error = exc
        else:
            error = error_for(code, message)
        acc.fail(batch, error)
