"""AddPartitionsToTxnManager: a partition leader asks the transaction coordinator (KIP-890).

KIP-890 part 1 (``transaction.partition.verification.enable``, on by default, dynamic):
before a leader appends the first transactional batch of a producer to a partition, the
producer's transaction coordinator must confirm that the partition is in the producer's
ongoing transaction. Without it, a write that arrives late -- a hung or zombie producer's
batch of a transaction already aborted -- would open a transaction nobody will end, and
the partition's last stable offset would stay there for good (read_committed consumers
stuck, ``klog transactions find-hanging`` needed).

``verify`` answers for one producer's partitions, as Kafka's AddPartitionsToTxnManager:

- The coordinator is the leader of the id's ``__transaction_state`` partition in this
  broker's metadata; none, or one not alive: COORDINATOR_NOT_AVAILABLE.
- When this broker is the coordinator, it is asked in-process
  (``TransactionCoordinator.verify_partitions_in_transaction``).
- Otherwise an AddPartitionsToTxn v4+ request with ``verify_only`` goes to it over the
  inter-broker listener (its TLS and SASL), batched per coordinator: one request in flight
  per broker, the transactions that come meanwhile go together in the next. A second
  verification of one transactional id while the first waits replaces it: the waiting one
  is answered INVALID_PRODUCER_EPOCH when the new one has a higher epoch, NETWORK_EXCEPTION
  (retriable: the client is likely retrying) for the same epoch; a new one with a lower
  epoch is INVALID_PRODUCER_EPOCH at once.
- Failures: no connection, a lost one or no answer within request.timeout.ms:
  NETWORK_EXCEPTION; an authentication failure: its code; a broker that does not speak
  v4+: not verified, the produce goes on (as Kafka, for a cluster being upgraded); a
  top-level error: it, for every partition -- CLUSTER_AUTHORIZATION_FAILED as
  INVALID_TXN_STATE (the producer cannot act on the brokers' own authorization).
- Per partition, the coordinator's code with Kafka's translations for producers:
  PRODUCER_FENCED is INVALID_PRODUCER_EPOCH (what producers handle on a produce), and
  TRANSACTION_ABORTABLE is INVALID_TXN_STATE unless the caller's client understands it
  (``abortable``: Produce v11+, TxnOffsetCommit v4+).

Nothing is cached: every verification asks. The callers (ReplicaManager.produce, the group
coordinator's transactional offset commits) turn these codes into their APIs' answers.
Runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from klog.client.errors import KafkaClientError
from klog.client.network import build_request
from klog.daemon.tasks import stop_task
from klog.daemon.transaction.connections import BrokerConnections
from klog.protocol import apis
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.config.broker import BrokerConfig
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.metadata_cache import MetadataCache
    from klog.daemon.transaction.coordinator import TransactionCoordinator

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
ADD_PARTITIONS_TO_TXN = 24
#: AddPartitionsToTxn versions of the brokers' batched form (v5 only adds
#: TRANSACTION_ABORTABLE, which the coordinator answers a verification with in both).
FIRST_BROKER_VERSION, LAST_BROKER_VERSION = 4, 5
TRANSACTION_STATE_TOPIC = "__transaction_state"


@dataclass(slots=True)
class _Waiting:
    """One transactional id's verification waiting for its coordinator's answer."""

    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition]
    abortable: bool
    answer: asyncio.Future[dict[TopicPartition, ErrorCode]]

    def settle(self, unverified: dict[TopicPartition, ErrorCode]) -> None:
        if not self.answer.done():  # its produce may be gone (connection closed)
            self.answer.set_result(unverified)

    def fail(self, code: ErrorCode) -> None:
        self.settle(dict.fromkeys(self.partitions, code))


class AddPartitionsToTxnManager:
    """See the module docstring."""

    def __init__(self, broker_id: int, config: DynamicBrokerConfig,
                 metadata_cache: MetadataCache, coordinator: TransactionCoordinator,
                 connections: BrokerConnections) -> None:
        self.broker_id = broker_id
        self._config = config
        self.metadata_cache = metadata_cache
        self.coordinator = coordinator
        self.connections = connections
        # coordinator broker id -> transactional id -> verification waiting to be sent.
        self._waiting: dict[int, dict[str, _Waiting]] = {}
        # coordinator broker id -> the task sending to it (one request in flight each).
        self._senders: dict[int, asyncio.Task[None]] = {}
        self._closed = False

    @property
    def enabled(self) -> bool:
        """transaction.partition.verification.enable, as it is now (a dynamic config)."""
        return bool(self._config.current.transaction_partition_verification_enable)

    def reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        """A dynamic config change (read at each produce; this only says so, as Kafka)."""
        before = old.transaction_partition_verification_enable
        after = new.transaction_partition_verification_enable
        if before != after:
            log.info("Reconfigure transaction.partition.verification.enable from %s to %s",
                     str(before).lower(), str(after).lower())

    def coordinator_node(self, transactional_id: str) -> int | None:
        """The broker coordinating ``transactional_id``, if it has one alive."""
        partition = self.coordinator.state_manager.partition_for(transactional_id)
        state = self.metadata_cache.partition_state(TRANSACTION_STATE_TOPIC, partition)
        if state is None or state.leader < 0:
            return None
        if state.leader != self.broker_id and self.metadata_cache.broker(state.leader) is None:
            return None
        return int(state.leader)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], abortable: bool
                     ) -> dict[TopicPartition, ErrorCode]:
        """The partitions the coordinator did not confirm, each with its error (see the
        module docstring); empty when all are in the producer's ongoing transaction."""
        wanted = list(dict.fromkeys(partitions))
        if not wanted:
            return {}
        node = self.coordinator_node(transactional_id)
        if node is None or self._closed:
            return dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if node == self.broker_id:
            return unverified(self.coordinator.verify_partitions_in_transaction(
                transactional_id, producer_id, producer_epoch, wanted), abortable)
        waiting = self._waiting.setdefault(node, {})
        earlier = waiting.get(transactional_id)
        if earlier is not None:
            if producer_epoch < earlier.producer_epoch:
                return dict.fromkeys(wanted, ErrorCode.INVALID_PRODUCER_EPOCH)
            earlier.fail(ErrorCode.INVALID_PRODUCER_EPOCH
                         if earlier.producer_epoch < producer_epoch
                         else ErrorCode.NETWORK_EXCEPTION)
        loop = asyncio.get_running_loop()
        entry = _Waiting(producer_id, producer_epoch, wanted, abortable, loop.create_future())
        waiting[transactional_id] = entry
        sender = self._senders.get(node)
        if sender is None or sender.done():
            self._senders[node] = loop.create_task(self._send_all(node),
                                                   name=f"txn-verification-{node}")
        return await entry.answer

    async def _send_all(self, node: int) -> None:
        """Send what waits for ``node``, one request at a time, until nothing does."""
        while True:
            batch = self._waiting.pop(node, None)
            if not batch:
                return
            try:
                answers = await self._send(node, batch)
            except asyncio.CancelledError:
                for entry in batch.values():
                    entry.fail(ErrorCode.NETWORK_EXCEPTION)
                raise
            except Exception:
                log.exception("verifying transactions with broker %d failed", node)
                answers = {}
            for txn_id, entry in batch.items():
                found = answers.get(txn_id)
                if found is None:
                    entry.fail(ErrorCode.UNKNOWN_SERVER_ERROR)
                else:
                    entry.settle(found)

    async def _send(self, node: int, batch: Mapping[str, _Waiting]
                    ) -> dict[str, dict[TopicPartition, ErrorCode]]:
        """One AddPartitionsToTxn (verify_only) to ``node`` for ``batch``: each id's
        unverified partitions."""

        def everyone(code: ErrorCode) -> dict[str, dict[TopicPartition, ErrorCode]]:
            return {txn_id: dict.fromkeys(e.partitions, code) for txn_id, e in batch.items()}

        try:
            conn = await self.connections.get(node)
        except (KafkaClientError, OSError) as exc:
            log.warning("cannot verify transactions with broker %d: %s", node, exc)
            code = getattr(exc, "error_code", None)
            return everyone(ErrorCode.SASL_AUTHENTICATION_FAILED
                            if code == ErrorCode.SASL_AUTHENTICATION_FAILED
                            else ErrorCode.NETWORK_EXCEPTION)
        theirs = conn.api_versions.get(ADD_PARTITIONS_TO_TXN)
        if theirs is None or theirs[1] < FIRST_BROKER_VERSION:
            # A coordinator that cannot verify (an older broker): the produce goes on.
            log.warning("broker %d does not speak AddPartitionsToTxn v%d+: transactions it "
                        "coordinates are not verified", node, FIRST_BROKER_VERSION)
            return {txn_id: {} for txn_id in batch}
        version = min(LAST_BROKER_VERSION, theirs[1])
        values: dict[str, Any] = {"transactions": [{
            "transactional_id": txn_id, "producer_id": e.producer_id,
            "producer_epoch": e.producer_epoch, "verify_only": True,
            "topics": _by_topic(e.partitions),
        } for txn_id, e in batch.items()]}
        entity = build_request(apis.spec_for(ADD_PARTITIONS_TO_TXN).request_entity(version),
                               values)
        try:
            response = await conn.request(ADD_PARTITIONS_TO_TXN, version, entity,
                                          timeout=self.connections.timeout_s)
        except (KafkaClientError, OSError) as exc:
            log.warning("verifying transactions with broker %d failed: %s", node, exc)
            self.connections.drop(node)
            return everyone(ErrorCode.NETWORK_EXCEPTION)
        top = int(response.error_code)
        if top:
            log.error("AddPartitionsToTxn to broker %d failed: %s", node, _name(top))
            return everyone(ErrorCode.INVALID_TXN_STATE
                            if top == ErrorCode.CLUSTER_AUTHORIZATION_FAILED else _code(top))
        out: dict[str, dict[TopicPartition, ErrorCode]] = {}
        for result in response.results_by_transaction:
            entry = batch.get(result.transactional_id)
            if entry is None:
                continue
            answers = {(t.name, int(p.partition_index)): int(p.partition_error_code)
                       for t in result.topic_results for p in t.results_by_partition}
            # A partition the coordinator did not answer for is not verified.
            out[result.transactional_id] = unverified(
                {tp: answers.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                 for tp in entry.partitions}, entry.abortable)
        return out

    async def shutdown(self) -> None:
        self._closed = True
        for task in list(self._senders.values()):
            await stop_task(task, what="a transaction verification sender")
        self._senders.clear()
        for waiting in self._waiting.values():
            for entry in waiting.values():
                entry.fail(ErrorCode.NETWORK_EXCEPTION)
        self._waiting.clear()
        self.connections.close()


def unverified(answers: Mapping[TopicPartition, int], abortable: bool
               ) -> dict[TopicPartition, ErrorCode]:
    """The coordinator's per-partition answers as a partition leader acts on them: the
    partitions not confirmed, with Kafka's translations (see the module docstring)."""
    out: dict[TopicPartition, ErrorCode] = {}
    for tp, code in answers.items():
        if code == ErrorCode.NONE:
            continue
        if code == ErrorCode.PRODUCER_FENCED:
            out[tp] = ErrorCode.INVALID_PRODUCER_EPOCH
        elif code == ErrorCode.TRANSACTION_ABORTABLE and not abortable:
            out[tp] = ErrorCode.INVALID_TXN_STATE
        else:
            out[tp] = _code(code)
    return out


def _code(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _by_topic(partitions: list[TopicPartition]) -> list[dict[str, Any]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]
