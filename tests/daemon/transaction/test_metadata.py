"""Tests for klog.daemon.transaction.metadata: Kafka's transaction state machine as data."""

from __future__ import annotations

import pytest

from klog.daemon.transaction.metadata import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    DEAD,
    EMPTY,
    MAX_PRODUCER_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    PREPARE_EPOCH_FENCE,
    VALID_PREVIOUS,
    IllegalTransitionError,
    TransactionMetadata,
    is_epoch_exhausted,
)
from klog.protocol.internal_topics import TransactionLogValue, TxnPartitions


def test_valid_previous_states_are_kafkas() -> None:
    # TransactionMetadata.scala's validPreviousStates, state by state.
    assert {
        EMPTY: {EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
        ONGOING: {ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT},
        PREPARE_COMMIT: {ONGOING},
        PREPARE_ABORT: {ONGOING, PREPARE_EPOCH_FENCE},
        COMPLETE_COMMIT: {PREPARE_COMMIT},
        COMPLETE_ABORT: {PREPARE_ABORT},
        DEAD: {EMPTY, COMPLETE_ABORT, COMPLETE_COMMIT},
        PREPARE_EPOCH_FENCE: {ONGOING},
    } == VALID_PREVIOUS


def _applied(md: TransactionMetadata, transit) -> TransactionMetadata:  # type: ignore[no-untyped-def]
    md.complete_transition(transit)
    return md


def test_a_transaction_from_init_to_commit() -> None:
    md = TransactionMetadata("t", 7, txn_last_update_timestamp=0)
    transit = md.prepare_increment_producer_epoch(5000, None, now=10)
    assert transit is not None and md.pending_state == EMPTY
    with pytest.raises(IllegalTransitionError):  # one transition at a time
        md.prepare_add_partitions({("a", 0)}, now=11)
    _applied(md, transit)
    assert (md.producer_epoch, md.txn_timeout_ms, md.pending_state) == (0, 5000, None)
    _applied(md, md.prepare_add_partitions({("a", 0)}, now=20))
    _applied(md, md.prepare_add_partitions({("b", 1)}, now=30))
    assert md.state == ONGOING and md.partitions == {("a", 0), ("b", 1)}
    assert md.txn_start_timestamp == 20  # the first add started it
    _applied(md, md.prepare_abort_or_commit(PREPARE_COMMIT, now=40))
    value = md.prepare_complete(now=50)
    assert value.state == COMPLETE_COMMIT and value.partitions == frozenset()
    _applied(md, value)
    assert md.state == COMPLETE_COMMIT and md.txn_last_update_timestamp == 50
    with pytest.raises(IllegalTransitionError):
        md.prepare_abort_or_commit(PREPARE_ABORT, now=60)


def test_epoch_bumps_kip_360() -> None:
    md = TransactionMetadata("t", 7, producer_epoch=4, last_producer_epoch=3)
    # An expected epoch equal to the current one: bumped, the current one remembered.
    transit = md.prepare_increment_producer_epoch(1000, 4, now=1)
    assert transit is not None and (transit.producer_epoch, transit.last_producer_epoch) == (5, 4)
    _applied(md, transit)
    # The retry of that call (expected = the last epoch): the same epoch again.
    transit = md.prepare_increment_producer_epoch(1000, 4, now=2)
    assert transit is not None and (transit.producer_epoch, transit.last_producer_epoch) == (5, 4)
    md.abort_transition()
    # Anything else is fenced.
    assert md.prepare_increment_producer_epoch(1000, 2, now=3) is None
    assert md.pending_state is None
    # No expected epoch (a new producer): bumped, and the last epoch forgotten.
    transit = md.prepare_increment_producer_epoch(1000, None, now=4)
    assert transit is not None and (transit.producer_epoch, transit.last_producer_epoch) == (6, -1)


def test_epoch_fence_and_exhaustion() -> None:
    md = TransactionMetadata("t", 7, producer_epoch=3, state=ONGOING, partitions={("a", 0)})
    fence = md.prepare_fence_producer_epoch()
    assert (fence.state, fence.producer_epoch, fence.last_producer_epoch) == (
        PREPARE_EPOCH_FENCE, 4, -1)
    md.abort_transition()
    md.has_failed_epoch_fence = True  # a fence whose write failed: its epoch is reused
    assert md.prepare_fence_producer_epoch().producer_epoch == 3
    assert is_epoch_exhausted(MAX_PRODUCER_EPOCH - 1) and not is_epoch_exhausted(100)
    done = TransactionMetadata("t", 7, producer_epoch=MAX_PRODUCER_EPOCH - 1)
    with pytest.raises(IllegalTransitionError):
        done.prepare_increment_producer_epoch(1000, None, now=1)
    rotated = done.prepare_producer_id_rotation(8, 1000, now=1, record_last_epoch=True)
    assert (rotated.producer_id, rotated.last_producer_id, rotated.producer_epoch,
            rotated.last_producer_epoch) == (8, 7, 0, MAX_PRODUCER_EPOCH - 1)


def test_log_values_are_kafkas() -> None:
    md = TransactionMetadata("t", 7, producer_epoch=2, txn_timeout_ms=9000, state=ONGOING,
                             partitions={("b", 1), ("a", 3), ("a", 0)},
                             txn_start_timestamp=100, txn_last_update_timestamp=200)
    value = md.prepare_abort_or_commit(PREPARE_ABORT, now=300).to_log_value()
    assert value == TransactionLogValue(
        producer_id=7, producer_epoch=2, transaction_timeout_ms=9000,
        transaction_status=PREPARE_ABORT,
        transaction_partitions=(TxnPartitions("a", (0, 3)), TxnPartitions("b", (1,))),
        transaction_last_update_timestamp_ms=300, transaction_start_timestamp_ms=100)
    # Empty: null partitions; CompleteAbort: an empty array (TransactionLog.valueToBytes).
    md.abort_transition()
    md.state = PREPARE_ABORT
    complete = md.prepare_complete(now=400).to_log_value()
    assert complete.transaction_partitions == ()
    empty = TransactionMetadata("u", 1).prepare_increment_producer_epoch(5, None, 1)
    assert empty is not None and empty.to_log_value().transaction_partitions is None
    # Loaded back: the same state.
    loaded = TransactionMetadata.from_log_value("t", value)
    assert (loaded.state, loaded.partitions, loaded.producer_epoch) == (
        PREPARE_ABORT, {("a", 0), ("a", 3), ("b", 1)}, 2)
