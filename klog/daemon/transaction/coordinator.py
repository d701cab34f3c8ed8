"""TransactionCoordinator: Kafka's transaction coordinator APIs (work in progress).

The read-only view used by DescribeTransactions and ListTransactions (``describe``,
``list_transactions``) is settled first so that tools can be written against it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One transactional id as DescribeTransactions answers it (Kafka's
    DescribeTransactionsResponse TransactionState). With an error (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, TRANSACTIONAL_ID_NOT_FOUND,
    INVALID_REQUEST for "") the other fields are Kafka's defaults."""

    transactional_id: str
    error_code: int = 0
    #: Kafka's state name: "Empty", "Ongoing", "PrepareCommit", ... ("" with an error).
    state: str = ""
    timeout_ms: int = 0
    #: When the ongoing transaction started (ms since the epoch); -1 when none.
    start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    #: The partitions in the transaction: topic -> sorted partition ids.
    topics: dict[str, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transactional id as ListTransactions answers it."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionList:
    """ListTransactions' answer: error_code COORDINATOR_LOAD_IN_PROGRESS while a partition
    of __transaction_state loads (as Kafka), COORDINATOR_NOT_AVAILABLE when the coordinator
    is not running; state filter names Kafka does not know are echoed back."""

    error_code: int
    unknown_state_filters: list[str]
    transactions: list[TransactionListing]


class TransactionCoordinator:
    """Kafka's TransactionCoordinator (see the module docstring)."""

    def describe(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """DescribeTransactions: one description per id, in order."""
        raise NotImplementedError

    def list_transactions(self, states_filter: Iterable[str] = (),
                          producer_ids_filter: Iterable[int] = ()) -> TransactionList:
        """ListTransactions over the ids this broker coordinates (Dead ones never)."""
        raise NotImplementedError
