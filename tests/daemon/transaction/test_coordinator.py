"""Tests for klog.daemon.transaction.coordinator (with its state manager): Kafka's
answers and the records written to __transaction_state, over a fake replica manager
(appends recorded, acks=all answered at once or with a chosen error) and fake markers."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from types import SimpleNamespace
from typing import Any

from klog.daemon.replica_results import ProduceResult
from klog.daemon.transaction.coordinator import TransactionCoordinator
from klog.daemon.transaction.metadata import (
    COMPLETE_COMMIT,
    EMPTY,
    MAX_PRODUCER_EPOCH,
    ONGOING,
    PREPARE_COMMIT,
    TransactionMetadata,
)
from klog.daemon.transaction.state_manager import (
    TRANSACTION_STATE_TOPIC,
    TransactionStateManager,
)
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import TransactionLogKey, TransactionLogValue
from klog.protocol.records.batch import read_batch_header
from klog.protocol.records.v2 import iter_records
from klog.storage.validator import AppendOrigin

PARTITIONS = 4
NOW = 1_700_000_000_000


class FakeReplicaManager:
    def __init__(self) -> None:
        self.written: list[tuple[int, str, TransactionLogValue | None]] = []
        self.error = 0

    def append_records(self, entries: dict[tuple[str, int], Any], acks: int,
                       origin: AppendOrigin) -> dict[tuple[str, int], ProduceResult]:
        assert acks == -1 and origin is AppendOrigin.COORDINATOR
        out = {}
        for (topic, partition), records in entries.items():
            assert topic == TRANSACTION_STATE_TOPIC
            if self.error:
                out[(topic, partition)] = ProduceResult(self.error)
                continue
            data = bytes(records)
            for record in iter_records(data, read_batch_header(data)):
                key = TransactionLogKey.decode(record.key)
                value = None if record.value is None else TransactionLogValue.decode(
                    record.value)
                self.written.append((partition, key.transactional_id, value))
            out[(topic, partition)] = ProduceResult(0, len(self.written))
        return out

    async def wait_for_isr(self, results: Any, timeout_ms: int) -> Any:
        return results


class FakeProducerIds:
    def __init__(self) -> None:
        self.next = 1000

    async def generate_producer_id(self) -> int:
        self.next += 1
        return self.next


class FakeMarkers:
    """Records the markers asked for; ``gate`` (when set) holds them until released."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int, int, bool, list[tuple[str, int]]]] = []
        self.gate: asyncio.Event | None = None
        self.answer = True

    async def send_markers(self, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, committed: bool,
                           partitions: Iterable[tuple[str, int]],
                           still_current: Callable[[], bool]) -> bool:
        self.sent.append((producer_id, producer_epoch, coordinator_epoch, committed,
                          sorted(partitions)))
        if self.gate is not None:
            await self.gate.wait()
        return self.answer and still_current()

    async def shutdown(self) -> None:
        pass


class Env:
    def __init__(self) -> None:
        config = SimpleNamespace(current=SimpleNamespace(
            transaction_state_log_num_partitions=PARTITIONS, request_timeout_ms=1000,
            transaction_max_timeout_ms=60_000, transactional_id_expiration_ms=3_600_000,
            transaction_abort_timed_out_transaction_cleanup_interval_ms=10_000,
            transaction_remove_expired_transaction_cleanup_interval_ms=3_600_000,
            transaction_state_log_load_buffer_size=1 << 20))
        cache = SimpleNamespace(partitions=lambda topic: [])
        self.rm = FakeReplicaManager()
        self.sm = TransactionStateManager(0, config, cache, self.rm, None)  # type: ignore[arg-type]
        self.markers = FakeMarkers()
        self.ids = FakeProducerIds()
        self.coordinator = TransactionCoordinator(0, config, self.sm, self.ids,  # type: ignore[arg-type]
                                                  self.markers)  # type: ignore[arg-type]
        self.now = NOW
        self.sm.clock = self.coordinator.clock = lambda: self.now
        self.coordinator._active = True
        for p in range(PARTITIONS):  # loaded, at coordinator epoch 5
            self.sm._cache[p] = {}
            self.sm._owned.add(p)
            self.sm._epochs[p] = 5

    def states(self, txn_id: str) -> list[str]:
        return [v.state_name if v else "tombstone" for _p, t, v in self.rm.written
                if t == txn_id]

    def metadata(self, txn_id: str) -> TransactionMetadata:
        error, _epoch, md = self.sm.get(txn_id)
        assert error is None and md is not None
        return md


def run(test: Callable[[Env], Awaitable[None]]) -> None:
    asyncio.run(test(Env()))


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def init(env: Env, txn_id: str = "t", timeout_ms: int = 10_000,
               expected: tuple[int, int] | None = None) -> tuple[ErrorCode, int, int]:
    r = await env.coordinator.init_producer_id(txn_id, timeout_ms, expected)
    return r.error, r.producer_id, r.producer_epoch


def test_init_add_commit_and_the_records_written() -> None:
    async def go(env: Env) -> None:
        c = env.coordinator
        assert await init(env) == (ErrorCode.NONE, 1001, 0)
        assert await c.add_partitions("t", 1001, 0, {("a", 0), ("a", 1)}) is ErrorCode.NONE
        # Already in the transaction: answered without a write.
        assert await c.add_partitions("t", 1001, 0, {("a", 1)}) is ErrorCode.NONE
        assert await c.end_transaction("t", 1001, 0, committed=True) is ErrorCode.NONE
        await settle()
        assert env.markers.sent == [(1001, 0, 5, True, [("a", 0), ("a", 1)])]
        assert env.states("t") == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]
        partition, _t, prepare = env.rm.written[2]
        assert partition == env.sm.partition_for("t")
        assert prepare is not None and prepare.transaction_partitions is not None
        assert [(p.topic, p.partition_ids) for p in prepare.transaction_partitions] == [
            ("a", (0, 1))]
        assert prepare.transaction_start_timestamp_ms == NOW
        # A retried commit is fine; an abort now, or a commit of nothing, is not.
        assert await c.end_transaction("t", 1001, 0, committed=True) is ErrorCode.NONE
        assert await c.end_transaction("t", 1001, 0, committed=False) \
            is ErrorCode.INVALID_TXN_STATE
        # The next init bumps the epoch.
        assert await init(env) == (ErrorCode.NONE, 1001, 1)
        assert await c.end_transaction("t", 1001, 1, committed=True) \
            is ErrorCode.INVALID_TXN_STATE

    run(go)


def test_request_errors() -> None:
    async def go(env: Env) -> None:
        c = env.coordinator
        assert (await init(env, ""))[0] is ErrorCode.INVALID_REQUEST
        assert (await init(env, timeout_ms=60_001))[0] is ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert (await init(env, timeout_ms=0))[0] is ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert await c.add_partitions("nobody", 1, 0, {("a", 0)}) \
            is ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await c.end_transaction("nobody", 1, 0, True) \
            is ErrorCode.INVALID_PRODUCER_ID_MAPPING
        await init(env)
        assert await c.add_partitions("t", 999, 0, {("a", 0)}) \
            is ErrorCode.INVALID_PRODUCER_ID_MAPPING
        assert await c.add_partitions("t", 1001, 1, {("a", 0)}) is ErrorCode.PRODUCER_FENCED
        assert await c.end_transaction("t", 1001, 0, True) is ErrorCode.INVALID_TXN_STATE
        # Not loaded here / loading.
        p = env.sm.partition_for("t")
        env.sm._loading[p] = 1
        assert (await init(env))[0] is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        del env.sm._loading[p]
        del env.sm._cache[p]
        env.sm._owned.discard(p)
        assert await c.end_transaction("t", 1001, 0, True) is ErrorCode.NOT_COORDINATOR

    run(go)


def test_concurrent_transactions_while_the_markers_are_written() -> None:
    async def go(env: Env) -> None:
        c = env.coordinator
        await init(env)
        await c.add_partitions("t", 1001, 0, {("a", 0)})
        env.markers.gate = asyncio.Event()
        assert await c.end_transaction("t", 1001, 0, committed=False) is ErrorCode.NONE
        await settle()
        busy = ErrorCode.CONCURRENT_TRANSACTIONS
        assert await c.add_partitions("t", 1001, 0, {("a", 1)}) is busy
        assert await c.end_transaction("t", 1001, 0, committed=False) is busy
        assert (await init(env))[0] is busy
        assert c.describe(["t"])[0].state == "PrepareAbort"
        env.markers.gate.set()
        await settle()
        assert env.states("t")[-1] == "CompleteAbort"
        assert await c.end_transaction("t", 1001, 0, committed=False) is ErrorCode.NONE
        assert await c.add_partitions("t", 1001, 0, {("a", 1)}) is ErrorCode.NONE

    run(go)


def test_a_new_producer_fences_an_ongoing_transaction() -> None:
    async def go(env: Env) -> None:
        c = env.coordinator
        await init(env)
        await c.add_partitions("t", 1001, 0, {("a", 0)})
        env.markers.gate = asyncio.Event()
        # The new producer's init aborts the open transaction with a bumped epoch...
        assert (await init(env))[0] is ErrorCode.CONCURRENT_TRANSACTIONS
        assert env.states("t")[-1] == "PrepareAbort"
        assert env.rm.written[-1][2].producer_epoch == 1  # type: ignore[union-attr]
        await settle()
        assert env.markers.sent == [(1001, 1, 5, False, [("a", 0)])]
        # ... the old producer is fenced from then on ...
        assert await c.end_transaction("t", 1001, 0, committed=True) \
            is ErrorCode.PRODUCER_FENCED
        env.markers.gate.set()
        await settle()
        # ... and the retried init bumps it once more.
        assert await init(env) == (ErrorCode.NONE, 1001, 2)
        assert env.states("t") == ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort",
                                   "Empty"]

    run(go)


def test_kip_360_recovery_and_epoch_exhaustion() -> None:
    async def go(env: Env) -> None:
        await init(env)
        assert await init(env, expected=(1001, 0)) == (ErrorCode.NONE, 1001, 1)
        # The retry of that bump (its answer lost): the same epoch again.
        assert await init(env, expected=(1001, 0)) == (ErrorCode.NONE, 1001, 1)
        assert (await init(env, expected=(1001, 7)))[0] is ErrorCode.PRODUCER_FENCED
        assert (await init(env, expected=(55, 1)))[0] is ErrorCode.PRODUCER_FENCED
        # An exhausted epoch: a new producer id.
        env.metadata("t").producer_epoch = MAX_PRODUCER_EPOCH - 1
        assert await init(env) == (ErrorCode.NONE, 1002, 0)
        md = env.metadata("t")
        assert (md.last_producer_id, md.last_producer_epoch) == (1001, -1)

    run(go)


def test_a_failed_write_changes_nothing() -> None:
    async def go(env: Env) -> None:
        c = env.coordinator
        await init(env)
        env.rm.error = int(ErrorCode.NOT_ENOUGH_REPLICAS)
        assert await c.add_partitions("t", 1001, 0, {("a", 0)}) \
            is ErrorCode.COORDINATOR_NOT_AVAILABLE
        env.rm.error = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        assert (await init(env))[0] is ErrorCode.NOT_COORDINATOR
        md = env.metadata("t")
        assert (md.state, md.producer_epoch, md.pending_state, md.partitions) == (
            EMPTY, 0, None, set())

    run(go)


def test_timed_out_transactions_are_aborted_with_a_bumped_epoch() -> None:
    async def go(env: Env) -> None:
        c = env.coordinator
        await init(env, timeout_ms=1000)
        await c.add_partitions("t", 1001, 0, {("a", 0)})
        env.now += 1000
        assert await c.abort_timed_out_transactions() == 0  # not past it yet
        env.now += 1
        assert await c.abort_timed_out_transactions() == 1
        await settle()
        assert env.states("t")[-2:] == ["PrepareAbort", "CompleteAbort"]
        assert env.markers.sent == [(1001, 1, 5, False, [("a", 0)])]
        assert env.metadata("t").producer_epoch == 1
        assert await c.end_transaction("t", 1001, 0, committed=True) \
            is ErrorCode.PRODUCER_FENCED

    run(go)


def test_idle_transactional_ids_expire() -> None:
    async def go(env: Env) -> None:
        c = env.coordinator
        await init(env, "idle")
        await init(env, "busy")
        await c.add_partitions("busy", 1002, 0, {("a", 0)})
        env.now += 3_600_000
        assert await c.remove_expired_transactional_ids() == 1
        assert env.states("idle")[-1] == "tombstone"
        assert c.describe(["idle"])[0].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert c.describe(["busy"])[0].state == "Ongoing"

    run(go)


def test_a_loaded_prepare_commit_is_completed() -> None:
    async def go(env: Env) -> None:
        md = TransactionMetadata("t", 77, producer_epoch=3, state=PREPARE_COMMIT,
                                 partitions={("a", 2)}, txn_start_timestamp=NOW)
        p = env.sm.partition_for("t")
        env.sm._cache[p]["t"] = md
        env.sm.on_loaded(p, 5, [md])
        await settle()
        assert env.markers.sent == [(77, 3, 5, True, [("a", 2)])]
        assert env.states("t") == ["CompleteCommit"] and md.state == COMPLETE_COMMIT

    run(go)


def test_no_completion_once_the_partition_is_unloaded() -> None:
    async def go(env: Env) -> None:
        c = env.coordinator
        await init(env)
        await c.add_partitions("t", 1001, 0, {("a", 0)})
        env.markers.gate = asyncio.Event()
        await c.end_transaction("t", 1001, 0, committed=True)
        await settle()
        env.sm.resign(env.sm.partition_for("t"))
        env.markers.gate.set()
        await settle()
        assert env.states("t")[-1] == "PrepareCommit"

    run(go)


def test_describe_and_list() -> None:
    async def go(env: Env) -> None:
        c = env.coordinator
        await init(env, "a")
        await init(env, "b")
        await c.add_partitions("b", 1002, 0, {("x", 1), ("x", 0), ("y", 3)})
        a, b, missing, empty = c.describe(["a", "b", "zzz", ""])
        assert (a.state, a.producer_id, a.producer_epoch, a.timeout_ms, a.topics) == (
            "Empty", 1001, 0, 10_000, {})
        assert (b.state, b.start_time_ms, b.topics) == ("Ongoing", NOW,
                                                        {"x": [0, 1], "y": [3]})
        assert missing.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        assert empty.error_code == ErrorCode.INVALID_REQUEST
        listed = c.list_transactions()
        assert listed.error_code == 0 and sorted(
            (t.transactional_id, t.producer_id, t.state) for t in listed.transactions) == [
            ("a", 1001, "Empty"), ("b", 1002, "Ongoing")]
        only = c.list_transactions(["Ongoing", "Bogus"], [1002, 5])
        assert [t.transactional_id for t in only.transactions] == ["b"]
        assert only.unknown_state_filters == ["Bogus"]
        assert c.list_transactions(producer_ids_filter=[5]).transactions == []
        env.sm._loading[0] = 1
        assert c.list_transactions().error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS

    run(go)


def test_list_with_a_duration_filter_kip_994() -> None:
    """Only the ids whose transaction started more than the filter ago; an id with no
    transaction running has start time -1, so Kafka's rule lists it for any filter."""
    async def go(env: Env) -> None:
        c = env.coordinator
        await init(env, "old")
        await init(env, "new")
        await init(env, "idle")
        await c.add_partitions("old", 1001, 0, {("x", 0)})
        env.now = NOW + 60_000
        await c.add_partitions("new", 1002, 0, {("x", 1)})
        env.now = NOW + 61_000

        def listed(duration_ms: int) -> list[str]:
            return sorted(t.transactional_id
                          for t in c.list_transactions(duration_filter_ms=duration_ms)
                          .transactions)

        assert listed(-1) == ["idle", "new", "old"]
        assert listed(30_000) == ["idle", "old"]
        assert listed(61_000) == ["idle"]  # "old" ran exactly 61 s: not longer
        assert listed(0) == ["idle", "new", "old"]

    run(go)


def test_verify_partitions_in_transaction_kip_890() -> None:
    """AddPartitionsToTxn v4 with verify_only, the coordinator's side: a partition is
    confirmed only while it is in the producer's ongoing transaction."""
    async def go(env: Env) -> None:
        c = env.coordinator
        verify = c.verify_partitions_in_transaction
        assert verify("nobody", 1, 0, [("a", 0)]) == {
            ("a", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        assert verify("", 1, 0, [("a", 0)]) == {("a", 0): ErrorCode.INVALID_REQUEST}
        await init(env)
        # Empty: nothing added yet.
        assert verify("t", 1001, 0, [("a", 0)]) == {("a", 0): ErrorCode.TRANSACTION_ABORTABLE}
        await c.add_partitions("t", 1001, 0, {("a", 0)})
        assert verify("t", 1001, 0, [("a", 0), ("a", 1)]) == {
            ("a", 0): ErrorCode.NONE, ("a", 1): ErrorCode.TRANSACTION_ABORTABLE}
        assert verify("t", 999, 0, [("a", 0)]) == {
            ("a", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
        assert verify("t", 1001, 1, [("a", 0)]) == {("a", 0): ErrorCode.PRODUCER_FENCED}
        # Ending: the markers are being written.
        env.markers.gate = asyncio.Event()
        assert await c.end_transaction("t", 1001, 0, committed=False) is ErrorCode.NONE
        await settle()
        assert verify("t", 1001, 0, [("a", 0)]) == {("a", 0): ErrorCode.CONCURRENT_TRANSACTIONS}
        env.markers.gate.set()
        await settle()
        # Aborted: a late write of the partition is no longer in any transaction.
        assert env.metadata("t").state_name == "CompleteAbort"
        assert verify("t", 1001, 0, [("a", 0)]) == {("a", 0): ErrorCode.TRANSACTION_ABORTABLE}
        # Not coordinated here (moved), or loading.
        p = env.sm.partition_for("t")
        env.sm._loading[p] = 1
        assert verify("t", 1001, 0, [("a", 0)]) == {
            ("a", 0): ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
        del env.sm._loading[p]
        del env.sm._cache[p]
        env.sm._owned.discard(p)
        assert verify("t", 1001, 0, [("a", 0)]) == {("a", 0): ErrorCode.NOT_COORDINATOR}

    run(go)


def test_what_is_written_loads_back(tmp_path: Any) -> None:
    """Records as the state manager writes them, read back from a real log by the loader
    (the last value per id wins; a tombstone removes the id)."""
    from klog.daemon.transaction.state_manager import read_transaction_state_partition
    from klog.storage.config import LogConfig
    from klog.storage.log import PartitionLog

    async def go(env: Env) -> None:
        c = env.coordinator
        await init(env, "kept")
        await c.add_partitions("kept", 1001, 0, {("a", 1)})
        await init(env, "gone")
        env.now += 3_600_000
        await c.remove_expired_transactional_ids()

    env = Env()
    real_append = env.rm.append_records
    plog = PartitionLog(tmp_path / f"{TRANSACTION_STATE_TOPIC}-0", LogConfig())

    def append_records(entries: dict[tuple[str, int], Any], acks: int,
                       origin: AppendOrigin) -> dict[tuple[str, int], ProduceResult]:
        for records in entries.values():
            plog.append_as_leader(bytes(records), 0, origin=origin)
        return real_append(entries, acks, origin)

    env.rm.append_records = append_records  # type: ignore[method-assign]
    asyncio.run(go(env))
    loaded = read_transaction_state_partition(plog, 100)
    assert loaded.values["gone"] is None
    kept = loaded.values["kept"]
    assert kept is not None and kept.state_name == "Ongoing"
    md = TransactionMetadata.from_log_value("kept", kept)
    assert (md.producer_id, md.producer_epoch, md.partitions, md.state) == (
        1001, 0, {("a", 1)}, ONGOING)
