"""The answers of the replica manager's produce and fetch, per partition.

``ProduceResult`` and ``FetchResult`` are what ReplicaManager (klog/daemon/replica_manager.py)
hands the produce and fetch handlers; the helpers here build the ones that need a rule:
a refused append (``refused``, as Kafka's appendToLocalLog answers it), the ISR's errors
laid over acks=-1 results (``apply_isr_errors``), and whether a fetch may answer at once
(``fetch_satisfied``). Kept apart from the replica manager, which owns hosting, appending
and reading; these own only the shape and rules of the answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from klog.protocol.errors import ErrorCode, KafkaError, RecordError
from klog.storage.log import LogAppendInfo
from klog.storage.validator import RecordsBuffer
from klog.storage.values import FetchDataInfo

if TYPE_CHECKING:
    from klog.daemon.metrics.counters import BrokerTopicMetrics
    from klog.daemon.partition import Partition

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class ProduceResult:
    error_code: int = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    info: LogAppendInfo | None = None
    # A batch refused for some of its records: each by its index in the batch (KIP-467).
    record_errors: tuple[RecordError, ...] = ()


@dataclass(slots=True)
class FetchResult:
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    data: FetchDataInfo | None = None
    aborted_transactions: list[tuple[int, int]] | None = None
    #: KIP-392: the follower the consumer should read this partition from (no records
    #: then); -1 for none.
    preferred_read_replica: int = -1

    @property
    def size(self) -> int:
        return self.data.size if self.data is not None else 0


ProduceResults = dict[TopicPartition, ProduceResult]

#: The refusals Kafka answers with its unknown append info (log start offset -1).
_UNKNOWN_APPEND_INFO = frozenset(int(c) for c in (
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.KAFKA_STORAGE_ERROR))


def refused(topic: str, exc: KafkaError, records: RecordsBuffer | int | None,
            partition: Partition | None, topic_metrics: BrokerTopicMetrics | None
            ) -> ProduceResult:
    """The result of an append to ``topic``'s ``partition`` (None: not hosted here)
    refused with ``exc``, counted when metrics are on (``records``: the refused records or
    their size)."""
    if topic_metrics is not None:
        size = records if isinstance(records, int) else \
            len(records) if records is not None else 0
        topic_metrics.record_refused(topic, int(exc.error_code), size)
    # As Kafka's appendToLocalLog answers a refused append: a message only beside record
    # errors (its RecordValidationException), and the partition's log start offset
    # except for the errors it answers before knowing the log (its UNKNOWN append info).
    code = int(exc.error_code)
    start = -1
    if code not in _UNKNOWN_APPEND_INFO and partition is not None:
        start = partition.log_start_offset
    return ProduceResult(code, log_start_offset=start,
                         error_message=str(exc) if exc.record_errors else None,
                         record_errors=exc.record_errors)


def apply_isr_errors(results: ProduceResults, errors: dict[TopicPartition, int]) -> None:
    """Lay the ISR wait's errors (acks=-1) over ``results``, in place."""
    for tp, error in errors.items():
        if error:
            r = results[tp]
            results[tp] = ProduceResult(error, r.base_offset, r.log_append_time_ms,
                                        r.log_start_offset,
                                        error_message=ErrorCode(error).name, info=r.info)


def fetch_satisfied(results: list[FetchResult], min_bytes: int) -> bool:
    """A fetch answers at once with an error to tell, a preferred read replica to name
    (KIP-392), or min_bytes (at least 1) read."""
    total = 0
    for r in results:
        if r.error_code or r.preferred_read_replica >= 0:
            return True
        total += r.size
    return total >= max(min_bytes, 1)
