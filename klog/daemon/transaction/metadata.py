"""TransactionMetadata: one transactional id's state and Kafka's state machine, without I/O.

Kafka's ``TransactionMetadata.scala`` as data: the states (ids and names of
``internal_topics.TransactionState``), which state may follow which (``VALID_PREVIOUS``),
and the ``prepare_*`` steps that compute the next state as a ``TxnTransitMetadata`` and
mark it pending. The coordinator writes the transit to ``__transaction_state`` and only
then applies it (``complete_transition``), or drops it when the write failed
(``abort_transition``); while a transit is pending every other request for the id is
answered CONCURRENT_TRANSACTIONS. The transitions:

    Empty / CompleteCommit / CompleteAbort -> Empty            InitProducerId (epoch bump)
    Empty / CompleteCommit / CompleteAbort / Ongoing -> Ongoing AddPartitions/AddOffsets
    Ongoing -> PrepareCommit | PrepareAbort                     EndTxn (or a timeout)
    Ongoing -> PrepareEpochFence -> PrepareAbort                a timeout, or a new producer
                                                                fencing the old (pending only)
    PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort   markers all written
    Empty / CompleteCommit / CompleteAbort -> Dead              transactional.id expiration

Not thread-safe; the coordinator touches it on the broker's event loop only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from klog.protocol.internal_topics import TransactionLogValue, TransactionState, TxnPartitions

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka's Short.MaxValue: an epoch at MAX - 1 or above is exhausted (a new id is issued).
MAX_PRODUCER_EPOCH = 32767

EMPTY = TransactionState.EMPTY
ONGOING = TransactionState.ONGOING
PREPARE_COMMIT = TransactionState.PREPARE_COMMIT
PREPARE_ABORT = TransactionState.PREPARE_ABORT
COMPLETE_COMMIT = TransactionState.COMPLETE_COMMIT
COMPLETE_ABORT = TransactionState.COMPLETE_ABORT
DEAD = TransactionState.DEAD
PREPARE_EPOCH_FENCE = TransactionState.PREPARE_EPOCH_FENCE

STATE_NAMES = TransactionState.NAMES
STATES_BY_NAME = {name: state for state, name in STATE_NAMES.items()}

# Kafka's TransactionState.validPreviousStates: state -> the states it may follow.
VALID_PREVIOUS: dict[int, frozenset[int]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset({ONGOING, PREPARE_EPOCH_FENCE}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_ABORT, COMPLETE_COMMIT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}

# Which states an expired transaction can be cleaned up from, and which time out.
EXPIRABLE = frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT})

TopicPartition = tuple[str, int]


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: no room for one more bump (the
    coordinator keeps one spare for fencing)."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


class IllegalTransitionError(Exception):
    """A transition Kafka's state machine forbids: a coordinator bug, never a client's."""


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The next state of a transactional id, as written to ``__transaction_state``."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: int
    partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]

    def to_log_value(self) -> TransactionLogValue:
        """The record value Kafka 3.x writes (TransactionLogValue v0)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in self.partitions:
            by_topic.setdefault(topic, []).append(partition)
        # Kafka writes null partitions for Empty, a (maybe empty) array for the rest.
        partitions = None if self.state == EMPTY else tuple(
            TxnPartitions(topic, tuple(sorted(ps))) for topic, ps in sorted(by_topic.items()))
        return TransactionLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms,
            transaction_status=self.state,
            transaction_partitions=partitions,
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp,
            transaction_start_timestamp_ms=self.txn_start_timestamp,
            version=0,
        )


@dataclass(slots=True)
class TransactionMetadata:
    """A transactional id's current state (see the module docstring)."""

    transactional_id: str
    producer_id: int
    last_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60_000
    state: int = EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    #: The state being written, if any (Kafka's pendingState).
    pending_state: int | None = None
    #: A fence whose write failed: the next fence reuses the epoch (Kafka's
    #: hasFailedEpochFence; the bumped epoch was never handed out).
    has_failed_epoch_fence: bool = False

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @classmethod
    def from_log_value(cls, transactional_id: str,
                       value: TransactionLogValue) -> TransactionMetadata:
        """A loaded record's state (Kafka's readTxnRecordValue; the last ids are not
        stored, so they start unknown)."""
        partitions = {(p.topic, pid) for p in value.transaction_partitions or ()
                      for pid in p.partition_ids}
        return cls(transactional_id, value.producer_id, NO_PRODUCER_ID,
                   value.producer_epoch, NO_PRODUCER_EPOCH, value.transaction_timeout_ms,
                   value.transaction_status, partitions,
                   value.transaction_start_timestamp_ms,
                   value.transaction_last_update_timestamp_ms)

    # -- computing the next state ------------------------------------------------------------

    def _prepare(self, state: int, *, producer_id: int | None = None,
                 last_producer_id: int | None = None, producer_epoch: int | None = None,
                 last_producer_epoch: int | None = None, txn_timeout_ms: int | None = None,
                 partitions: frozenset[TopicPartition] | None = None,
                 txn_start_timestamp: int | None = None,
                 txn_last_update_timestamp: int | None = None) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id}: a transition to {STATE_NAMES[self.pending_state]} "
                f"is already pending (to {STATE_NAMES[state]} asked)")
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransitionError(
                f"{self.transactional_id}: {self.state_name} -> {STATE_NAMES[state]} "
                "is not a valid transition")
        transit = TxnTransitMetadata(
            producer_id=self.producer_id if producer_id is None else producer_id,
            last_producer_id=(self.last_producer_id if last_producer_id is None
                              else last_producer_id),
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            last_producer_epoch=(self.last_producer_epoch if last_producer_epoch is None
                                 else last_producer_epoch),
            txn_timeout_ms=self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            state=state,
            partitions=frozenset(self.partitions) if partitions is None else partitions,
            txn_start_timestamp=(self.txn_start_timestamp if txn_start_timestamp is None
                                 else txn_start_timestamp),
            txn_last_update_timestamp=(self.txn_last_update_timestamp
                                       if txn_last_update_timestamp is None
                                       else txn_last_update_timestamp),
        )
        self.pending_state = state
        return transit

    def prepare_increment_producer_epoch(self, txn_timeout_ms: int,
                                         expected_epoch: int | None, now: int
                                         ) -> TxnTransitMetadata | None:
        """InitProducerId on a completed transaction: the epoch bumped (Kafka's
        prepareIncrementProducerEpoch). None: the expected epoch is stale (PRODUCER_FENCED)."""
        if self.is_producer_epoch_exhausted:
            raise IllegalTransitionError(
                f"{self.transactional_id}: epoch {self.producer_epoch} is exhausted")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            # No expected epoch: bump unconditionally (a fresh producer fences the old).
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif expected_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            # KIP-360: the producer goes on after an error and nobody else initialised.
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a bump that succeeded: the current epoch again, not bumped.
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._prepare(EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
                             txn_timeout_ms=txn_timeout_ms, partitions=frozenset(),
                             txn_start_timestamp=-1, txn_last_update_timestamp=now)

    def prepare_producer_id_rotation(self, new_producer_id: int, txn_timeout_ms: int,
                                     now: int, record_last_epoch: bool) -> TxnTransitMetadata:
        """A new producer id with epoch 0, when the epoch is exhausted."""
        if self.state not in EXPIRABLE:
            raise IllegalTransitionError(
                f"{self.transactional_id}: cannot rotate the producer id in {self.state_name}")
        return self._prepare(EMPTY, producer_id=new_producer_id,
                             last_producer_id=self.producer_id, producer_epoch=0,
                             last_producer_epoch=(self.producer_epoch if record_last_epoch
                                                  else NO_PRODUCER_EPOCH),
                             txn_timeout_ms=txn_timeout_ms, partitions=frozenset(),
                             txn_start_timestamp=-1, txn_last_update_timestamp=now)

    def prepare_add_partitions(self, added: set[TopicPartition],
                               now: int) -> TxnTransitMetadata:
        start = now if self.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) \
            else self.txn_start_timestamp
        return self._prepare(ONGOING, partitions=frozenset(self.partitions | added),
                             txn_start_timestamp=start, txn_last_update_timestamp=now)

    def prepare_abort_or_commit(self, state: int, now: int) -> TxnTransitMetadata:
        return self._prepare(state, txn_last_update_timestamp=now)

    def prepare_complete(self, now: int) -> TxnTransitMetadata:
        state = COMPLETE_COMMIT if self.state == PREPARE_COMMIT else COMPLETE_ABORT
        # Written successfully so far: a failed fence is history.
        self.has_failed_epoch_fence = False
        return self._prepare(state, partitions=frozenset(), txn_last_update_timestamp=now)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(DEAD, partitions=frozenset())

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Ongoing -> PrepareEpochFence (pending only; never written): the epoch bumped,
        unless an earlier fence failed to be written (that epoch was never handed out)."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(
                f"{self.transactional_id}: cannot fence epoch {self.producer_epoch}")
        epoch = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(PREPARE_EPOCH_FENCE, producer_epoch=epoch,
                             last_producer_epoch=NO_PRODUCER_EPOCH)

    # -- applying it -------------------------------------------------------------------------

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """The transit was written: it becomes the current state."""
        self.pending_state = None
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp

    def abort_transition(self) -> None:
        """The write failed: the state stays as it was."""
        self.pending_state = None
