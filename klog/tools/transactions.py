"""The logic of ``klog transactions``: Kafka's TransactionsCommand without its printing.

- ``abort_spec``: the producer whose open transaction starts at a given offset of a
  partition (DescribeProducers), as ``abort --start-offset`` needs it;
- ``find_hanging``: open transactions that look abandoned. As Kafka's
  ``find-hanging``: the partitions to search are those of ``--topic`` (and
  ``--partition``), or of every (non-internal) topic with a replica on ``--broker-id``;
  a candidate is a producer with an open transaction whose last write is older than the
  maximum transaction timeout; it is hanging when no coordinator knows its producer id
  (ListTransactions), its transactional id is not found, or its transaction does not
  include the partition (DescribeTransactions) -- a coordinator that still lists the
  partition will write the marker itself.

Reaches the cluster through klog.client.admin only.
"""

from __future__ import annotations

from dataclasses import dataclass

from klog.client.admin import AdminClient, ProducerState, TransactionDescription
from klog.client.errors import KafkaClientError
from klog.protocol.errors import ErrorCode

TopicPartition = tuple[str, int]

#: Kafka's default --max-transaction-timeout (minutes): transaction.max.timeout.ms's default.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15
#: DescribeProducers requests carry at most this many partitions (Kafka's MAX_BATCH_SIZE).
MAX_BATCH_SIZE = 500


class TransactionToolError(Exception):
    """What the command cannot do, in one line (the CLI prints it and exits 1)."""


@dataclass(frozen=True)
class AbortSpec:
    """Kafka's AbortTransactionSpec: which producer's transaction to abort, where."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


@dataclass(frozen=True)
class OpenTransaction:
    topic: str
    partition: int
    producer: ProducerState


async def abort_spec(admin: AdminClient, tp: TopicPartition, start_offset: int) -> AbortSpec:
    """The transaction of ``tp`` starting at ``start_offset``, from its leader's state."""
    result = (await admin.describe_producers([tp])).get(tp)
    if isinstance(result, KafkaClientError) or result is None:
        raise TransactionToolError(
            f"Failed to validate producer state for partition {tp[0]}-{tp[1]}: {result}")
    for state in result:
        if state.current_transaction_start_offset == start_offset:
            # Kafka: a producer with no marker yet has coordinator epoch -1; 0 is <= any.
            return AbortSpec(tp[0], tp[1], state.producer_id, state.producer_epoch,
                             max(state.coordinator_epoch, 0))
    raise TransactionToolError(f"Could not find any open transactions starting at offset "
                               f"{start_offset} on partition {tp[0]}-{tp[1]}")


async def partitions_to_search(admin: AdminClient, broker_id: int | None, topic: str | None,
                               partition: int | None) -> list[TopicPartition]:
    if topic is not None and partition is not None:
        return [(topic, partition)]
    topics = [topic] if topic is not None else sorted(await admin.list_topics())
    described = await admin.describe_topics(topics) if topics else {}
    return [(name, p.partition) for name, d in sorted(described.items())
            for p in d.partitions if broker_id is None or broker_id in p.replicas]


async def find_hanging(admin: AdminClient, *, broker_id: int | None, topic: str | None,
                       partition: int | None, max_transaction_timeout_ms: int,
                       now_ms: int) -> list[OpenTransaction]:
    """Hanging transactions (see the module docstring), by topic, partition, producer."""
    if topic is None and broker_id is None:
        raise TransactionToolError("The `find-hanging` command requires either --topic or "
                                   "--broker-id to limit the scope of the search")
    if partition is not None and topic is None:
        raise TransactionToolError("The --partition argument requires --topic to be provided")
    tps = await partitions_to_search(admin, broker_id, topic, partition)
    candidates: list[OpenTransaction] = []
    for start in range(0, len(tps), MAX_BATCH_SIZE):
        batch = tps[start:start + MAX_BATCH_SIZE]
        found = await admin.describe_producers(batch, broker_id=broker_id)
        for tp in batch:
            states = found.get(tp)
            if isinstance(states, KafkaClientError):
                where = "leaders" if broker_id is None else f"broker {broker_id}"
                raise TransactionToolError(f"Failed to describe producers for {len(batch)} "
                                           f"partitions on {where}: {states}")
            for state in states or ():
                if state.current_transaction_start_offset >= 0 \
                        and now_ms - state.last_timestamp > max_transaction_timeout_ms:
                    candidates.append(OpenTransaction(tp[0], tp[1], state))
    if not candidates:
        return []
    producer_ids = sorted({c.producer.producer_id for c in candidates})
    listings = await admin.list_transactions(producer_ids=producer_ids)
    txn_ids = {t.producer_id: t.transactional_id for t in listings
               if t.producer_id in producer_ids}
    described = await admin.describe_transactions(sorted(set(txn_ids.values())))
    hanging = []
    for c in candidates:
        txn_id = txn_ids.get(c.producer.producer_id)
        if txn_id is None:
            hanging.append(c)
            continue
        d = described.get(txn_id)
        if isinstance(d, KafkaClientError):
            if d.error_code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                raise TransactionToolError(
                    f"Failed to describe {len(txn_ids)} transactions: {d}")
            hanging.append(c)
        elif not isinstance(d, TransactionDescription) \
                or (c.topic, c.partition) not in d.partitions:
            hanging.append(c)
    return sorted(hanging, key=lambda c: (c.topic, c.partition, c.producer.producer_id))


def duration_minutes(now_ms: int, last_timestamp: int) -> int:
    return max(now_ms - last_timestamp, 0) // 60_000

