"""KIP-890 part 1 on the partition side: a transactional produce's partitions verified
with the transaction coordinator before their first append (Kafka's ReplicaManager
maybeStartTransactionVerificationForPartitions and handleProduceAppend's callback).

Each partition whose log has no ongoing transaction of the producer yet gets a
verification guard from its log (``Partition.maybe_start_transaction_verification``);
``TransactionVerifier`` asks the coordinator whether those partitions are in the
producer's ongoing transaction, and only the partitions it confirms are appended, each
with its guard (a marker written meanwhile voids the guard, so the late write is refused
instead of opening a transaction nobody will end). The replica manager calls these from
``produce``; the group coordinator's transactional offset commits too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from klog.daemon.partition import Partition
from klog.protocol.errors import ErrorCode, KafkaError
from klog.protocol.records.batch import iter_batch_headers
from klog.storage.producer_state import VerificationGuard
from klog.storage.validator import RecordsBuffer

TopicPartition = tuple[str, int]


class TransactionVerifier(Protocol):
    """KIP-890's question to the transaction coordinator
    (klog.daemon.transaction.verification.AddPartitionsToTxnManager)."""

    @property
    def enabled(self) -> bool:
        """transaction.partition.verification.enable, as it is now (a dynamic config)."""
        ...

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], abortable: bool
                     ) -> dict[TopicPartition, ErrorCode]:
        """The partitions not verified, each with its error (none: all verified)."""
        ...


async def verify_partitions(leader_partition: Callable[[str, int], Partition],
                            verifier: TransactionVerifier, transactional_id: str,
                            producer_id: int, producer_epoch: int,
                            first_sequences: Mapping[TopicPartition, int], abortable: bool
                            ) -> tuple[dict[TopicPartition, ErrorCode],
                                       dict[TopicPartition, VerificationGuard]]:
    """Per partition (mapped to the first sequence the producer writes there) a guard from
    its log -- none needed where the producer's transaction is ongoing already -- and for
    those that need one, the coordinator's answer. Returns (errors of the partitions that
    may not be appended, the guards to append the others with)."""
    errors: dict[TopicPartition, ErrorCode] = {}
    guards: dict[TopicPartition, VerificationGuard] = {}
    for tp, sequence in first_sequences.items():
        try:
            guard = leader_partition(*tp).maybe_start_transaction_verification(
                producer_id, sequence, producer_epoch)
        except KafkaError as exc:
            errors[tp] = exc.error_code
            continue
        if guard is not VerificationGuard.SENTINEL:
            guards[tp] = guard
    if guards:
        errors.update(await verifier.verify(transactional_id, producer_id,
                                            producer_epoch, list(guards), abortable))
    return errors, guards


def transactional_producers(entries: Mapping[TopicPartition, RecordsBuffer | None]
                            ) -> tuple[set[tuple[int, int]], dict[TopicPartition, int]]:
    """The (producer id, epoch) of a produce's transactional batches, and per partition
    holding any the first batch's base sequence. Batches whose headers do not parse are
    left to the append, which refuses them with its own answer."""
    producers: set[tuple[int, int]] = set()
    first_sequences: dict[TopicPartition, int] = {}
    for tp, records in entries.items():
        if records is None:
            continue
        try:
            headers = list(iter_batch_headers(memoryview(records)))
        except KafkaError:
            continue
        txn = [h for h in headers if h.has_producer_id and h.is_transactional]
        if txn:
            producers.update((h.producer_id, h.producer_epoch) for h in txn)
            first_sequences[tp] = headers[0].base_sequence
    return producers, first_sequences


def guard_for(guards: Mapping[TopicPartition, VerificationGuard] | None, tp: TopicPartition
              ) -> VerificationGuard | None:
    """A partition's guard for its append: None when nothing is verified, the sentinel when
    the partition needed none (its transaction is ongoing, or it has no transactional data)."""
    if guards is None:
        return None
    return guards.get(tp, VerificationGuard.SENTINEL)


#: Verification errors a producer may not retry correctly, answered as NOT_ENOUGH_REPLICAS
#: (retriable, and no metadata refresh), as Kafka's ReplicaManager does.
_RETRY_VERIFICATION = frozenset({
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR})


def verification_refusal(code: ErrorCode) -> tuple[int, str | None]:
    """A partition the coordinator did not confirm, as the producer is answered (Kafka's
    handleProduceAppend postVerificationCallback): the error code and message."""
    if code is ErrorCode.INVALID_TXN_STATE:
        return int(code), "Partition was not added to the transaction"
    if code in _RETRY_VERIFICATION:
        return (int(ErrorCode.NOT_ENOUGH_REPLICAS),
                "Unable to verify the partition has been added to the transaction. "
                f"Underlying error: {code.name}")
    return int(code), None
