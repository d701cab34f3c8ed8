"""ReplicaManager: _validate (the one-batch shortcut decides as the walk over the headers;
every record is checked) and append_records_from_client (heavy checks off the loop, in
each partition's arrival order)."""

from __future__ import annotations

import asyncio
import dataclasses
import struct
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.replica_manager import ReplicaManager
from klog.protocol.errors import ErrorCode, InvalidRecordError, KafkaError
from klog.protocol.records.batch import CompressionType, crc32c, iter_batch_headers
from klog.protocol.records.v2 import build_batch, encode_record
from klog.storage.config import LogConfig
from tests.daemon.wire import running_broker

NOW = int(time.time() * 1000)


def _validate(records: Any, config: LogConfig, origin: str = "client") -> Any:
    manager: Any = SimpleNamespace(clock=lambda: NOW, _recompress=ReplicaManager._recompress,
                                   _up_convert=ReplicaManager._up_convert)
    manager._validate = lambda r, c, o: ReplicaManager._validate(manager, r, c, o)
    return ReplicaManager._validate(manager, records, config, origin)


def _outcome(records: Any, config: LogConfig, origin: str = "client") -> Any:
    try:
        result = _validate(records, config, origin)
    except KafkaError as exc:
        return type(exc), str(exc)
    return "same" if result is records else bytes(result)


def _walked(records: bytes, config: LogConfig, origin: str = "client") -> Any:
    """What the header walk alone decides: the same records with a config that turns the
    shortcut off through a timestamp limit no int64 timestamp >= 0 can exceed. (The magic 1
    case reads its "timestamp" from bytes that depend on NOW, anywhere in the int64 range,
    so a smaller limit made that case fail on some clocks.)"""
    slow = dataclasses.replace(config, message_timestamp_difference_max_ms=2**63 - 2)
    return _outcome(records, slow, origin)


def _patched(batch: bytes, fmt: str, at: int, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


GOOD = build_batch([(NOW, b"k", b"v" * 100), (NOW, None, b"w")])


def _fixed_crc(batch: bytes) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


CASES = {
    "good": GOOD,
    "magic 1": _patched(GOOD, ">b", 16, 1),
    "magic 3": _patched(GOOD, ">b", 16, 3),
    "negative delta": _patched(GOOD, ">i", 23, -1),
    "length too long": _patched(GOOD, ">i", 8, len(GOOD)),
    "length too short": _patched(GOOD, ">i", 8, len(GOOD) - 20),
    "two batches": GOOD + GOOD,
    "tiny": GOOD[:40],
    "count disagrees": _fixed_crc(_patched(GOOD, ">i", 57, 3)),
    "bad record length": _fixed_crc(GOOD[:61] + b"\xff" * (len(GOOD) - 61)),
    "bad record, bad crc": GOOD[:61] + b"\xff" * (len(GOOD) - 61),
    "codec 7": _fixed_crc(_patched(GOOD, ">h", 21, 7)),
    "offset deltas": _fixed_crc(GOOD[:61] + encode_record(1, 0, b"k", b"v" * 100)
                                + GOOD[61 + len(encode_record(0, 0, b"k", b"v" * 100)):]),
    "too large": build_batch([(NOW, b"k", b"v" * (1 << 20))]),
    "zstd": build_batch([(NOW, b"k", b"v")], compression=CompressionType.ZSTD),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("origin", ["client", "replication"])
def test_the_shortcut_decides_as_the_walk(name: str, origin: str) -> None:
    records = CASES[name]
    config = LogConfig()
    assert _outcome(memoryview(records), config, origin) == _walked(records, config, origin)


def test_a_good_batch_comes_back_untouched_and_bad_magic_is_refused() -> None:
    view = memoryview(bytearray(GOOD))
    assert _validate(view, LogConfig()) is view
    # a client's magic 1 entry is a v0/v1 message to convert (Produce v0-v2): this one, a
    # v2 batch with its magic byte changed, fails the v1 message's CRC
    with pytest.raises(KafkaError) as caught:
        _validate(memoryview(CASES["magic 1"]), LogConfig())
    assert caught.value.error_code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError, match="magic 2"):
        _validate(memoryview(GOOD + CASES["magic 1"]), LogConfig())


def test_broker_side_compression_still_recompresses() -> None:
    out = _validate(memoryview(GOOD), LogConfig(compression_type="zstd"))
    headers = list(iter_batch_headers(out))
    assert len(headers) == 1 and headers[0].compression is CompressionType.ZSTD


@pytest.mark.parametrize(("name", "error"), [
    ("count disagrees", ErrorCode.INVALID_RECORD),
    ("bad record length", ErrorCode.CORRUPT_MESSAGE),
    ("codec 7", ErrorCode.CORRUPT_MESSAGE),
    ("offset deltas", ErrorCode.INVALID_RECORD),
    ("too large", ErrorCode.MESSAGE_TOO_LARGE),
])
def test_every_record_is_checked(name: str, error: ErrorCode) -> None:
    with pytest.raises(KafkaError) as caught:
        _validate(memoryview(CASES[name]), LogConfig())
    assert caught.value.error_code == error


def test_a_compacted_topic_needs_keys_also_on_the_shortcut() -> None:
    keyless = memoryview(build_batch([(NOW, None, b"v")]))
    assert _validate(keyless, LogConfig()) is keyless
    with pytest.raises(InvalidRecordError, match="without a key"):
        _validate(keyless, LogConfig(cleanup_policy=("compact",)))


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_every_keyless_record_is_named_on_a_compacted_topic(codec: CompressionType) -> None:
    """librdkafka's case (its test 0011): 100 records, every tenth without a key: the batch
    is refused with the ten named by their index (KIP-467), on the shortcut (one plain
    batch) and the walk (compressed, recompressed) alike."""
    records = [(NOW, None if i % 10 == 0 else b"k%d" % i, b"v") for i in range(100)]
    keyless = memoryview(bytearray(build_batch(records, compression=codec)))
    for config in (LogConfig(cleanup_policy=("compact",)),
                   LogConfig(cleanup_policy=("compact",), compression_type="gzip")):
        with pytest.raises(InvalidRecordError) as caught:
            _validate(keyless, config)
        assert [index for index, _ in caught.value.record_errors] == list(range(0, 100, 10))
        assert str(caught.value).startswith("10 of the 100 records of batch at position 0")


def test_timestamps_out_of_range_are_named_and_before_after_are_kafkas() -> None:
    """message.timestamp.before.max.ms / after.max.ms (KIP-937), falling back to
    message.timestamp.difference.max.ms while left at their defaults."""
    stamps = [NOW, NOW - 7_200_000, NOW + 30_000, NOW + 7_200_000, -1]
    batch = memoryview(build_batch([(ts, b"k", b"v") for ts in stamps]))
    cases = [
        (LogConfig(message_timestamp_difference_max_ms=3_600_000), [1, 3]),
        (LogConfig(message_timestamp_before_max_ms=3_600_000), [1]),
        (LogConfig(message_timestamp_after_max_ms=10_000), [2, 3]),
        # before left at its default: difference.max.ms (10 s) stands in for it
        (LogConfig(message_timestamp_difference_max_ms=10_000,
                   message_timestamp_after_max_ms=8_000_000), [1]),
    ]
    for config, offenders in cases:
        with pytest.raises(KafkaError) as caught:
            _validate(batch, config)
        assert caught.value.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [index for index, _ in caught.value.record_errors] == offenders
    assert _validate(batch, LogConfig(message_timestamp_before_max_ms=8_000_000,
                                      message_timestamp_after_max_ms=8_000_000)) is batch
    # LogAppendTime topics take the broker's time: no producer's time is judged
    assert _validate(batch, LogConfig(message_timestamp_type="LogAppendTime",
                                      message_timestamp_difference_max_ms=1)) is batch


def test_a_refused_batch_hands_its_record_errors_to_the_answer(tmp_path: Path) -> None:
    """Through append_records_from_client, inline and in the checker's worker thread."""
    keyless = build_batch([(NOW, None if i in (3, 7) else b"k", b"v") for i in range(9)])
    compressed = build_batch([(NOW, None if i in (3, 7) else b"k", b"v") for i in range(9)],
                             compression=CompressionType.ZSTD)
    with running_broker(tmp_path, log_cleanup_policy="compact") as broker:
        with broker.connect() as client:
            client.create_topic("c")

        async def go() -> list[Any]:
            rm = broker.broker.replica_manager
            inline = await rm.append_records_from_client({("c", 0): keyless}, 1)
            worker = await rm.append_records_from_client({("c", 0): compressed}, 1)
            return [inline[("c", 0)], worker[("c", 0)]]

        for result in asyncio.run_coroutine_threadsafe(go(), broker.loop).result(30):
            assert result.error_code == ErrorCode.INVALID_RECORD
            assert [index for index, _ in result.record_errors] == [3, 7]
            assert "has no key" in result.record_errors[0][1]
            assert result.error_message.startswith("2 of the 9 records")


def test_appends_to_a_partition_keep_arrival_order(tmp_path: Path) -> None:
    """A batch checked in a worker thread (zstd) holds back a later plain batch to the same
    partition, which would otherwise be appended first; another partition is not held."""
    big = build_batch([(NOW, b"k", b"v" * 100)] * 20_000, compression=CompressionType.ZSTD)
    with running_broker(tmp_path, num_partitions=2) as broker:
        with broker.connect() as client:
            client.create_topic("t")

        async def three() -> list[int]:
            rm = broker.broker.replica_manager
            first = asyncio.ensure_future(rm.append_records_from_client({("t", 0): big}, 1))
            await asyncio.sleep(0)  # its check is under way in the worker
            second = asyncio.ensure_future(rm.append_records_from_client(
                {("t", 0): GOOD, ("t", 1): GOOD}, 1))
            done = await second
            results = [(await first)[("t", 0)], done[("t", 0)], done[("t", 1)]]
            assert all(r.error_code == 0 for r in results), results
            return [r.base_offset for r in results]

        offsets = asyncio.run_coroutine_threadsafe(three(), broker.loop).result(30)
    assert offsets == [0, 20_000, 0]


def test_a_leader_and_isr_that_shrinks_the_isr_wakes_waiting_produces(tmp_path: Any) -> None:
    # acks=all produces wait for the high watermark; a LeaderAndIsr without a dead
    # follower moves it, and the produce purgatory must hear so then, not at the timeout.
    from klog.daemon.metadata_cache import PartitionState
    from klog.storage.log_manager import LogManager

    async def go() -> None:
        logs = LogManager([tmp_path])
        manager = ReplicaManager(1, logs, lambda topic: LogConfig())
        try:
            manager.become_leader_or_follower([PartitionState("t", 0, 1, 0, (1, 2), (1, 2))])
            waiting = await manager.produce({("t", 0): memoryview(bytearray(GOOD))}, -1,
                                            timeout_ms=600_000)
            assert isinstance(waiting, asyncio.Future)
            assert manager.partitions[("t", 0)].high_watermark == 0 and not waiting.done()
            manager.become_leader_or_follower([PartitionState("t", 0, 1, 1, (1, 2), (1,))])
            assert manager.partitions[("t", 0)].high_watermark == 2
            await asyncio.sleep(0)  # the future's answer is a loop callback
            assert waiting.done()
            assert waiting.result()[("t", 0)].error_code == 0
        finally:
            manager.shutdown()
            logs.close()

    asyncio.run(go())


def test_recompression_does_not_launder_a_bad_crc() -> None:
    """The records decode but a byte of a value changed in transit: the rewrite would give
    the batch a fresh CRC, so the old one is checked first."""
    damaged = bytearray(GOOD)
    damaged[61 + 30] ^= 0x01  # inside the first record's value
    with pytest.raises(KafkaError, match="crc") as caught:
        _validate(memoryview(damaged), LogConfig(compression_type="zstd"))
    assert caught.value.error_code == ErrorCode.CORRUPT_MESSAGE


# -- fetch_messages: the long poll, decided by offsets ---------------------------------------


class CountingLog:
    """A partition's log that counts its reads; everything else goes to the real one."""

    def __init__(self, plog: Any) -> None:
        self._plog = plog
        self.reads = 0

    def read(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return self._plog.read(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._plog, name)


def _value_batch(size: int, **kwargs: Any) -> bytearray:
    return bytearray(build_batch([(NOW, None, b"v" * size)], **kwargs))


async def _leader(tmp_path: Path, config: LogConfig) -> tuple[ReplicaManager, CountingLog]:
    from klog.daemon.metadata_cache import PartitionState
    from klog.storage.log_manager import LogManager

    manager = ReplicaManager(1, LogManager([tmp_path]), lambda topic: config)
    manager.become_leader_or_follower([PartitionState("t", 0, 1, 0, (1,), (1,))])
    partition = manager.partitions[("t", 0)]
    counting = CountingLog(partition.log)
    partition.log = counting  # type: ignore[assignment]
    return manager, counting


def _close(manager: ReplicaManager) -> None:
    manager.shutdown()
    manager.log_manager.close()


def _params(min_bytes: int, isolation: Any = None) -> Any:
    from klog.daemon.delayed import FetchParams
    from klog.daemon.partition import FetchIsolation

    return FetchParams(-1, 600_000, min_bytes, 1 << 20,
                       isolation or FetchIsolation.HIGH_WATERMARK)


def test_a_waiting_fetch_completes_when_min_bytes_accumulate_and_reads_only_then(
        tmp_path: Path) -> None:
    async def go() -> None:
        manager, log = await _leader(tmp_path, LogConfig())
        try:
            batch = _value_batch(250)
            manager.append_records({("t", 0): bytearray(batch)}, 1)
            start = log.log_end_offset
            fetch = asyncio.ensure_future(manager.fetch_messages(
                _params(3 * len(batch) + 1), [("t", 0, start, 1 << 20, -1)]))
            await asyncio.sleep(0)
            assert log.reads == 1 and manager.fetch_purgatory.delayed() == 1
            for _ in range(3):  # three batches: one byte short of min_bytes
                manager.append_records({("t", 0): bytearray(batch)}, 1)
                await asyncio.sleep(0)
                assert not fetch.done()
            assert log.reads == 1  # each append compared offsets; nothing was read
            manager.append_records({("t", 0): bytearray(batch)}, 1)
            (result,) = await asyncio.wait_for(fetch, 30)
            assert log.reads == 2
            assert result.error_code == 0 and result.size == 4 * len(batch)
            assert result.data is not None and result.data.fetch_offset_metadata[0] == start
        finally:
            _close(manager)

    asyncio.run(go())


def test_a_waiting_fetch_completes_when_the_end_moves_to_a_new_segment(
        tmp_path: Path) -> None:
    async def go() -> None:
        batch = _value_batch(250)
        manager, log = await _leader(tmp_path, LogConfig(segment_bytes=3 * len(batch)))
        try:
            for _ in range(3):  # the first segment, full
                manager.append_records({("t", 0): bytearray(batch)}, 1)
            assert log.number_of_segments == 1
            start = log.log_end_offset
            fetch = asyncio.ensure_future(manager.fetch_messages(
                _params(1 << 20), [("t", 0, start, 1 << 20, -1)]))
            await asyncio.sleep(0)
            assert log.reads == 1 and not fetch.done()
            manager.append_records({("t", 0): bytearray(batch)}, 1)  # rolls
            assert log.number_of_segments == 2
            (result,) = await asyncio.wait_for(fetch, 30)
            # Far below min_bytes, but the end left the fetch offset's segment.
            assert log.reads == 2 and result.size == len(batch)
        finally:
            _close(manager)

    asyncio.run(go())


def test_a_read_committed_fetch_waits_for_the_last_stable_offset(tmp_path: Path) -> None:
    from klog.daemon.partition import FetchIsolation
    from tests.storage.batches import build_control_batch

    async def go() -> None:
        manager, log = await _leader(tmp_path, LogConfig())
        try:
            tp = ("t", 0)
            open_txn = _value_batch(100, producer_id=7, producer_epoch=0, base_sequence=0,
                                    is_transactional=True)
            assert manager.append_records({tp: open_txn}, 1)[tp].error_code == 0
            partition = manager.partitions[tp]
            assert partition.last_stable_offset == 0 and partition.high_watermark == 1
            fetch = asyncio.ensure_future(manager.fetch_messages(
                _params(1, FetchIsolation.TXN_COMMITTED), [("t", 0, 0, 1 << 20, -1)]))
            await asyncio.sleep(0)
            assert log.reads == 1 and not fetch.done()
            # The high watermark moves, the last stable offset does not: still waiting.
            manager.append_records({tp: _value_batch(100)}, 1)
            await asyncio.sleep(0)
            assert partition.high_watermark == 2 and not fetch.done() and log.reads == 1
            marker = bytearray(build_control_batch(0, commit=True, producer_id=7,
                                                   producer_epoch=0))
            assert manager.append_records({tp: marker}, 1, origin="coordinator")[tp] \
                .error_code == 0
            (result,) = await asyncio.wait_for(fetch, 30)
            assert partition.last_stable_offset == 3
            assert log.reads == 2 and result.error_code == 0
            assert result.size == len(open_txn) + len(_value_batch(100)) + len(marker)
        finally:
            _close(manager)

    asyncio.run(go())


# -- KIP-890: a transactional produce is verified before it is appended ---------------------


class FakeVerifier:
    """The coordinator's answers: ``refused`` partitions with their codes, the rest
    verified; ``meanwhile`` runs while the question is out (a marker landing)."""

    def __init__(self, refused: dict[tuple[str, int], ErrorCode] | None = None) -> None:
        self.enabled = True
        self.refused = refused or {}
        self.calls: list[tuple[Any, ...]] = []
        self.meanwhile: Any = None

    async def verify(self, txn_id: str, pid: int, epoch: int,
                     partitions: list[tuple[str, int]], abortable: bool
                     ) -> dict[tuple[str, int], ErrorCode]:
        self.calls.append((txn_id, pid, epoch, sorted(partitions), abortable))
        await asyncio.sleep(0)
        if self.meanwhile is not None:
            self.meanwhile()
        return {tp: code for tp, code in self.refused.items() if tp in partitions}


def _txn_batch(seq: int, producer_id: int = 7) -> bytearray:
    return _value_batch(10, producer_id=producer_id, producer_epoch=0, base_sequence=seq,
                        is_transactional=True)


async def _verifying_leader(tmp_path: Path, verifier: FakeVerifier) -> ReplicaManager:
    from klog.daemon.metadata_cache import PartitionState
    from klog.storage.log_manager import LogManager

    manager = ReplicaManager(1, LogManager([tmp_path]), lambda topic: LogConfig())
    manager.become_leader_or_follower([PartitionState("t", p, 1, 0, (1,), (1,))
                                       for p in (0, 1)])
    manager.txn_verifier = verifier
    return manager


def test_a_transactional_produce_is_verified_before_its_first_append(tmp_path: Path) -> None:
    """Only partitions the coordinator confirms are appended; one whose transaction is
    ongoing in its log already is not asked about again."""
    async def go() -> None:
        verifier = FakeVerifier({("t", 1): ErrorCode.INVALID_TXN_STATE})
        manager = await _verifying_leader(tmp_path, verifier)
        try:
            results = await manager.produce({("t", 0): _txn_batch(0), ("t", 1): _txn_batch(0)},
                                            1, 0, "tx")
            assert isinstance(results, dict)
            assert results[("t", 0)].error_code == 0
            refused = results[("t", 1)]
            assert (refused.error_code, refused.error_message) == (
                ErrorCode.INVALID_TXN_STATE, "Partition was not added to the transaction")
            assert verifier.calls == [("tx", 7, 0, [("t", 0), ("t", 1)], False)]
            assert manager.partitions[("t", 1)].log.log_end_offset == 0
            # Ongoing in t-0 now: its next batch needs no question.
            results = await manager.produce({("t", 0): _txn_batch(1)}, 1, 0, "tx", True)
            assert isinstance(results, dict) and results[("t", 0)].error_code == 0
            assert len(verifier.calls) == 1
        finally:
            _close(manager)

    asyncio.run(go())


@pytest.mark.parametrize("code, answered, message", [
    # Retriable for every producer, without a metadata refresh (Kafka's choice).
    (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_ENOUGH_REPLICAS, "NOT_COORDINATOR"),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_ENOUGH_REPLICAS,
     "COORDINATOR_NOT_AVAILABLE"),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_ENOUGH_REPLICAS,
     "COORDINATOR_LOAD_IN_PROGRESS"),
    (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_ENOUGH_REPLICAS,
     "CONCURRENT_TRANSACTIONS"),
    (ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_ENOUGH_REPLICAS, "NETWORK_EXCEPTION"),
    (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_PRODUCER_EPOCH, None),
    (ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.TRANSACTION_ABORTABLE, None),
])
def test_the_coordinators_errors_as_a_producer_gets_them(
        tmp_path: Path, code: ErrorCode, answered: ErrorCode, message: str | None) -> None:
    async def go() -> None:
        manager = await _verifying_leader(tmp_path, FakeVerifier({("t", 0): code}))
        try:
            results = await manager.produce({("t", 0): _txn_batch(0)}, 1, 0, "tx", True)
            assert isinstance(results, dict)
            result = results[("t", 0)]
            assert result.error_code == answered
            if message is None:
                assert result.error_message is None
            else:
                assert result.error_message == (
                    "Unable to verify the partition has been added to the transaction. "
                    f"Underlying error: {message}")
        finally:
            _close(manager)

    asyncio.run(go())


def test_a_marker_landing_during_verification_refuses_the_write(tmp_path: Path) -> None:
    """The coordinator confirmed the partition, but aborted the transaction before the
    append: its ABORT marker reached the partition in between. The late write is refused,
    and the last stable offset is not held by a transaction nobody will end."""
    from tests.storage.batches import build_control_batch

    async def go() -> None:
        verifier = FakeVerifier()
        manager = await _verifying_leader(tmp_path, verifier)
        tp = ("t", 0)

        def abort_lands() -> None:
            marker = bytearray(build_control_batch(0, commit=False, producer_id=7,
                                                   producer_epoch=0))
            assert manager.append_records({tp: marker}, 1, origin="coordinator")[tp] \
                .error_code == 0

        verifier.meanwhile = abort_lands
        try:
            results = await manager.produce({tp: _txn_batch(0)}, 1, 0, "tx")
            assert isinstance(results, dict)
            assert results[tp].error_code == ErrorCode.INVALID_TXN_STATE
            partition = manager.partitions[tp]
            assert partition.log.log_end_offset == 1  # the marker alone
            assert partition.last_stable_offset == partition.high_watermark == 1
        finally:
            _close(manager)

    asyncio.run(go())


def test_with_verification_off_nothing_is_asked(tmp_path: Path) -> None:
    """transaction.partition.verification.enable=false: appended as before KIP-890 (a
    late write then opens a transaction the last stable offset waits on)."""
    async def go() -> None:
        verifier = FakeVerifier({("t", 0): ErrorCode.INVALID_TXN_STATE})
        verifier.enabled = False
        manager = await _verifying_leader(tmp_path, verifier)
        try:
            results = await manager.produce({("t", 0): _txn_batch(0)}, 1, 0, "tx")
            assert isinstance(results, dict) and results[("t", 0)].error_code == 0
            assert verifier.calls == []
            assert manager.partitions[("t", 0)].last_stable_offset == 0
        finally:
            _close(manager)

    asyncio.run(go())


def test_two_producers_in_one_transactional_request_are_refused(tmp_path: Path) -> None:
    async def go() -> None:
        verifier = FakeVerifier()
        manager = await _verifying_leader(tmp_path, verifier)
        try:
            results = await manager.produce(
                {("t", 0): _txn_batch(0, 7), ("t", 1): _txn_batch(0, 8)}, 1, 0, "tx")
            assert isinstance(results, dict)
            assert {r.error_code for r in results.values()} == {
                ErrorCode.INVALID_PRODUCER_ID_MAPPING}
            assert verifier.calls == []
        finally:
            _close(manager)

    asyncio.run(go())


# -- KIP-392: preferred read replicas and consumers reading from followers -------------------


def _consumer(rack: str, min_bytes: int = 1, max_wait_ms: int = 0) -> Any:
    from klog.daemon.delayed import FetchParams
    from klog.daemon.partition import FetchIsolation
    from klog.daemon.replica_selector import ClientMetadata

    return FetchParams(-1, max_wait_ms, min_bytes, 1 << 20, FetchIsolation.HIGH_WATERMARK,
                       ClientMetadata(rack, "PLAINTEXT"))


def _racked_cache() -> Any:
    from klog.daemon.metadata_cache import BrokerEndpoint, BrokerInfo, MetadataCache

    cache = MetadataCache(1)
    cache.update_brokers([BrokerInfo(b, (BrokerEndpoint("PLAINTEXT", "h", 9000 + b),), rack)
                          for b, rack in {1: "a", 2: "b", 3: "c"}.items()], 1)
    return cache


def test_a_leader_names_the_follower_in_the_consumers_rack(tmp_path: Path) -> None:
    from klog.daemon.delayed import FetchParams
    from klog.daemon.metadata_cache import PartitionState
    from klog.daemon.partition import FetchIsolation
    from klog.daemon.replica_selector import RackAwareReplicaSelector
    from klog.storage.log_manager import LogManager

    async def go() -> None:
        manager = ReplicaManager(1, LogManager([tmp_path]), lambda topic: LogConfig())
        manager.replica_selector = RackAwareReplicaSelector(_racked_cache())
        try:
            tp = ("t", 0)
            manager.become_leader_or_follower([PartitionState("t", 0, 1, 0, (1, 2, 3),
                                                              (1, 2, 3))])
            for _ in range(3):
                manager.append_records({tp: _value_batch(100)}, 1)
            end = manager.partitions[tp].log_end_offset
            # Follower 2 has everything (log start 0), follower 3 only up to offset 1.
            follower = FetchParams(2, 0, 1, 1 << 20, FetchIsolation.LOG_END,
                                   follower_log_start_offsets={tp: 0})
            await manager.fetch_messages(follower, [("t", 0, end, 1 << 20, 0)])
            await manager.fetch_messages(FetchParams(3, 0, 1, 1 << 20, FetchIsolation.LOG_END),
                                         [("t", 0, 1, 1 << 20, 0)])
            assert manager.partitions[tp].remote_replicas[2].log_start_offset == 0
            # A consumer in rack b is sent to broker 2, at once (no long poll), no records.
            (r,) = await asyncio.wait_for(manager.fetch_messages(
                _consumer("b", min_bytes=1 << 20, max_wait_ms=600_000),
                [("t", 0, 0, 1 << 20, -1)]), 10)
            assert (r.error_code, r.preferred_read_replica, r.size) == (0, 2, 0)
            assert r.high_watermark == manager.partitions[tp].high_watermark
            # Rack c: broker 3's log reaches offset 1, not 2: the leader answers there.
            (r,) = await manager.fetch_messages(_consumer("c"), [("t", 0, 1, 1 << 20, -1)])
            assert r.preferred_read_replica == 3
            (r,) = await manager.fetch_messages(_consumer("c"), [("t", 0, 2, 1 << 20, -1)])
            assert r.preferred_read_replica == -1 and r.error_code == 0
            # The leader's own rack, no rack, or a pre-v11 consumer: the leader answers.
            for params in (_consumer("a"), _consumer(""), _params(1)):
                (r,) = await manager.fetch_messages(params, [("t", 0, 0, 1 << 20, -1)])
                assert r.preferred_read_replica == -1 and r.size > 0
            # Out of the ISR: never preferred.
            manager.become_leader_or_follower([PartitionState("t", 0, 1, 1, (1, 2, 3),
                                                              (1, 3))])
            (r,) = await manager.fetch_messages(_consumer("b"), [("t", 0, 0, 1 << 20, -1)])
            assert r.preferred_read_replica == -1
        finally:
            _close(manager)

    asyncio.run(go())


def test_a_follower_serves_v11_consumers_up_to_its_high_watermark(tmp_path: Path) -> None:
    from klog.daemon.metadata_cache import PartitionState
    from klog.storage.log_manager import LogManager

    async def go() -> None:
        manager = ReplicaManager(1, LogManager([tmp_path]), lambda topic: LogConfig())
        try:
            tp = ("t", 0)
            manager.become_leader_or_follower([PartitionState("t", 0, 2, 5, (2, 1), (2, 1))])
            first = bytearray(build_batch([(NOW, None, b"a" * 50)], base_offset=0,
                                          partition_leader_epoch=5))
            second = bytearray(build_batch([(NOW, None, b"b" * 50)], base_offset=1,
                                           partition_leader_epoch=5))
            manager.append_as_follower(tp, first, 1, 0)  # the leader's high watermark: 1
            manager.append_as_follower(tp, second, 1, 0)
            p = manager.partitions[tp]
            assert (p.high_watermark, p.log_end_offset) == (1, 2)
            # A consumer without client metadata (Fetch v0-v10) is for leaders only.
            (r,) = await manager.fetch_messages(_params(1), [("t", 0, 0, 1 << 20, -1)])
            assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            # Fetch v11+: read up to the follower's high watermark.
            (r,) = await manager.fetch_messages(_consumer("b"), [("t", 0, 0, 1 << 20, 5)])
            assert r.error_code == 0 and r.size == len(first) and r.high_watermark == 1
            # Between the high watermark and the log end: nothing yet; past the log end:
            # OFFSET_OUT_OF_RANGE (the consumer goes back to the leader).
            (r,) = await manager.fetch_messages(_consumer("b"), [("t", 0, 1, 1 << 20, 5)])
            assert (r.error_code, r.size) == (0, 0)
            (r,) = await manager.fetch_messages(_consumer("b"), [("t", 0, 3, 1 << 20, 5)])
            assert r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            # The leader epoch the consumer names is checked as on a leader.
            (r,) = await manager.fetch_messages(_consumer("b"), [("t", 0, 0, 1 << 20, 4)])
            assert r.error_code == ErrorCode.FENCED_LEADER_EPOCH
            (r,) = await manager.fetch_messages(_consumer("b"), [("t", 0, 0, 1 << 20, 6)])
            assert r.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
            # A consumer waiting at the follower's high watermark is answered when the
            # next replica fetch moves it (Kafka's completeDelayedFetchRequests).
            waiting = asyncio.ensure_future(manager.fetch_messages(
                _consumer("b", max_wait_ms=600_000), [("t", 0, 1, 1 << 20, 5)]))
            await asyncio.sleep(0)
            assert manager.fetch_purgatory.delayed() == 1 and not waiting.done()
            manager.append_as_follower(tp, bytearray(), 2, 0)
            (r,) = await asyncio.wait_for(waiting, 10)
            assert r.error_code == 0 and r.size == len(second) and r.high_watermark == 2
        finally:
            _close(manager)

    asyncio.run(go())
