"""GroupMetadataManager on a real in-process broker: placement, store/load, tombstones,
expiration, and loading what Kafka 2.x wrote."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from klog.daemon.group.metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    OffsetAndMetadata,
    java_string_hash,
    kafka_abs,
    read_offsets_partition,
)
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import (
    ConsumerProtocolSubscription,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    read_offsets_key,
)
from klog.protocol.records.batch import iter_batch_headers
from klog.protocol.records.v2 import iter_records
from klog.storage.validator import AppendOrigin
from tests.daemon.wire import InProcessBroker

T = TypeVar("T")
DAY_MS = 86_400_000


# -- placement -------------------------------------------------------------------------------


def _reference_hash(s: str) -> int:
    """String.hashCode by its definition: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code
    units, reduced to a signed 32-bit int."""
    units = [int.from_bytes(s.encode("utf-16-be", "surrogatepass")[i:i + 2], "big")
             for i in range(0, len(s.encode("utf-16-be", "surrogatepass")), 2)]
    n = len(units)
    total = sum(u * pow(31, n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


@pytest.mark.parametrize("group", ["", "a", "my-second-application", "console-consumer-1",
                                   "group-\u00e9t\u00e9", "emoji-\U0001f600", "x" * 300,
                                   "polygenelubricants"])
def test_java_string_hash_matches_definition(group: str) -> None:
    assert java_string_hash(group) == _reference_hash(group)


def test_known_java_hash_values() -> None:
    # Values Java prints for "abc".hashCode(), "hello".hashCode(), and the classic string
    # whose hashCode is Integer.MIN_VALUE (Kafka's Utils.abs maps it to 0).
    assert java_string_hash("abc") == 96354
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5


def _placement_only(partitions: int) -> GroupMetadataManager:
    """A manager with just what placement reads: the config and an empty metadata cache."""
    from klog.daemon.config import BrokerConfig
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.metadata_cache import MetadataCache

    config = DynamicBrokerConfig(BrokerConfig.from_dict({
        "offsets.topic.num.partitions": str(partitions), "log.dirs": "/nonexistent"}))
    unused: Any = None
    return GroupMetadataManager(0, config, MetadataCache(0), unused, unused)


@pytest.mark.parametrize("group,partitions", [("my-second-application", 50), ("abc", 50),
                                              ("hello", 7), ("polygenelubricants", 50),
                                              ("emoji-\U0001f600", 50)])
def test_partition_for(group: str, partitions: int) -> None:
    manager = _placement_only(partitions)
    assert manager.partition_for(group) == abs(_reference_hash(group)) % 2**31 % partitions


def test_partition_for_corpus_group() -> None:
    # Kafka 2.x wrote this group's records to __consumer_offsets-12 (see the corpus).
    manager = _placement_only(50)
    assert manager.partition_for("my-second-application") == 12
    assert manager.coordinator_error("my-second-application") is ErrorCode.NOT_COORDINATOR


# -- on a broker -----------------------------------------------------------------------------


def _run(broker: InProcessBroker, fn: Callable[[], Coroutine[Any, Any, T]],
         timeout: float = 15.0) -> T:
    return asyncio.run_coroutine_threadsafe(fn(), broker.loop).result(timeout)


def _manager(broker: InProcessBroker) -> GroupMetadataManager:
    return broker.broker.group_manager


def _wait_coordinator(broker: InProcessBroker, group: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    mgr = _manager(broker)
    _run(broker, mgr.ensure_topic)
    while time.monotonic() < deadline:
        if broker.call(lambda: mgr.coordinator_error(group)) is None:
            return
        time.sleep(0.02)
    raise AssertionError(f"no coordinator for {group}: {mgr.coordinator_error(group)}")


def _start(data_dir: Path, **overrides: Any) -> InProcessBroker:
    settings = {"offsets.topic.num.partitions": "5"}
    settings.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
    return InProcessBroker(data_dir, settings).start()


def _member(member_id: str, topics: tuple[str, ...]) -> MemberMetadata:
    return MemberMetadata(member_id, "client", "/127.0.0.1", 10000, 30000,
                          ConsumerProtocolSubscription(topics=topics).encode(), b"")


def _offsets_records(broker: InProcessBroker, partition: int) -> list[tuple[Any, Any]]:
    """(key, value) of every record of an offsets partition, decoded."""
    def read() -> bytes:
        p = broker.broker.replica_manager.get_partition(OFFSETS_TOPIC, partition)
        return p.log.read(p.log.log_start_offset, 1 << 24, None, True).read_bytes()

    data = broker.call(read)
    out = []
    for h in iter_batch_headers(data):
        for record in iter_records(data, h):
            key = read_offsets_key(record.key)
            if record.value is None:
                out.append((key, None))
            elif isinstance(key, OffsetCommitKey):
                out.append((key, OffsetCommitValue.decode(record.value)))
            else:
                out.append((key, GroupMetadataValue.decode(record.value)))
    return out


def test_topic_created_on_first_use(tmp_path: Path) -> None:
    broker = _start(tmp_path, offsets_topic_segment_bytes=1 << 20)
    try:
        assert broker.call(lambda: broker.broker.metadata_cache.contains_topic(OFFSETS_TOPIC)) \
            is False
        _wait_coordinator(broker, "g")
        cache = broker.broker.metadata_cache
        assert len(broker.call(lambda: cache.partitions(OFFSETS_TOPIC))) == 5
        overrides = broker.call(lambda: broker.broker.topic_configs.load(OFFSETS_TOPIC))
        assert overrides["cleanup.policy"] == "compact"
        assert overrides["segment.bytes"] == str(1 << 20)
        assert broker.call(lambda: broker.broker.group_manager.owned_partitions()) \
            == {0, 1, 2, 3, 4}
    finally:
        broker.stop()


def test_store_and_load_across_restart(tmp_path: Path) -> None:
    group = "orders-app"
    value = GroupMetadataValue("consumer", 3, "range", "m-1", 1_700_000_000_000,
                               (_member("m-1", ("orders",)),))
    offsets = {
        ("orders", 0): OffsetAndMetadata(42, 5, "meta", 1_700_000_000_001),
        ("orders", 1): OffsetAndMetadata(7, -1, "", 1_700_000_000_002),
        ("other", 3): OffsetAndMetadata(9, -1, "x", 1_700_000_000_003, 1_800_000_000_000),
    }
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        assert _run(broker, lambda: mgr.store_group(group, value)) is ErrorCode.NONE
        result = _run(broker, lambda: mgr.store_offsets(group, offsets))
        assert result == {tp: ErrorCode.NONE for tp in offsets}
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == offsets
        assert broker.call(lambda: mgr.fetch_offsets(group, [("orders", 1), ("nope", 0)])) \
            == {("orders", 1): offsets[("orders", 1)]}
        records = _offsets_records(broker, mgr.partition_for(group))
        # Kafka 3.x's versions: group metadata v3, offsets v3 (v1 with an expire timestamp).
        assert records[0] == (GroupMetadataKey(group), value)
        versions = {k.topic + str(k.partition): v.version for k, v in records[1:]}
        assert versions == {"orders0": 3, "orders1": 3, "other3": 1}
    finally:
        broker.stop()

    broker = InProcessBroker(tmp_path, {"offsets.topic.num.partitions": "5"})
    loaded: list[tuple[str, GroupMetadataValue]] = []
    # As the coordinator does: hooks set before the broker starts (loading starts with it).
    broker.broker.group_manager.on_group_loaded = lambda g, v: loaded.append((g, v))
    broker.start()
    try:
        mgr = _manager(broker)
        _wait_coordinator(broker, group)
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == offsets
        assert broker.call(lambda: mgr.group_value(group)) == value
        assert broker.call(lambda: mgr.groups_with_offsets()) == {group}
        assert (group, value) in loaded
    finally:
        broker.stop()


def test_errors_when_not_coordinator(tmp_path: Path) -> None:
    broker = _start(tmp_path)
    try:
        mgr = _manager(broker)
        om = OffsetAndMetadata(1, -1, "", 1)
        # No offsets topic yet: nobody here coordinates.
        assert broker.call(lambda: mgr.coordinator_error("g")) is ErrorCode.NOT_COORDINATOR
        assert _run(broker, lambda: mgr.store_offsets("g", {("t", 0): om})) \
            == {("t", 0): ErrorCode.NOT_COORDINATOR}
        _wait_coordinator(broker, "g")
        # A loading partition answers COORDINATOR_LOAD_IN_PROGRESS.
        p = mgr.partition_for("g")
        broker.call(lambda: mgr._loading.__setitem__(p, -1))
        assert broker.call(lambda: mgr.coordinator_error("g")) \
            is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        broker.call(lambda: mgr._loading.pop(p))
        # Too much metadata: OFFSET_METADATA_TOO_LARGE for that partition only.
        big = OffsetAndMetadata(1, -1, "m" * 4097, 1)
        assert _run(broker, lambda: mgr.store_offsets("g", {("t", 0): big, ("t", 1): om})) \
            == {("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE, ("t", 1): ErrorCode.NONE}
        # Losing leadership unloads the partition's groups.
        unloaded: list[int] = []
        broker.call(lambda: setattr(mgr, "on_partition_unloaded", unloaded.append))
        broker.call(lambda: mgr.resign(p))
        assert unloaded == [p]
        assert broker.call(lambda: mgr.coordinator_error("g")) is ErrorCode.NOT_COORDINATOR
        assert broker.call(lambda: mgr.fetch_offsets("g", None)) == {}
        broker.call(lambda: mgr.become_leader(p))
        _wait_coordinator(broker, "g")
        assert broker.call(lambda: mgr.fetch_offsets("g", None)) == {("t", 1): om}
    finally:
        broker.stop()


def test_tombstones(tmp_path: Path) -> None:
    group = "tomb"
    offsets = {("t", i): OffsetAndMetadata(i * 10, -1, "", 1_700_000_000_000)
               for i in range(3)}
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        _run(broker, lambda: mgr.store_offsets(group, offsets))
        _run(broker, lambda: mgr.store_group(group, GroupMetadataValue("consumer", 1)))
        assert _run(broker, lambda: mgr.delete_offsets(group, [("t", 0), ("t", 9)])) \
            is ErrorCode.NONE
        assert set(broker.call(lambda: mgr.fetch_offsets(group, None))) == {("t", 1), ("t", 2)}
        records = _offsets_records(broker, mgr.partition_for(group))
        assert records[-1] == (OffsetCommitKey(group, "t", 0), None)
        assert _run(broker, lambda: mgr.delete_group_offsets(group)) is ErrorCode.NONE
        assert _run(broker, lambda: mgr.store_group(group, None)) is ErrorCode.NONE
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == {}
        tail = _offsets_records(broker, mgr.partition_for(group))[-3:]
        assert tail == [(OffsetCommitKey(group, "t", 1), None),
                        (OffsetCommitKey(group, "t", 2), None), (GroupMetadataKey(group), None)]
    finally:
        broker.stop()
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == {}
        assert broker.call(lambda: mgr.group_value(group)) is None
        assert broker.call(lambda: mgr.groups_with_offsets()) == set()
    finally:
        broker.stop()


def test_expiration(tmp_path: Path) -> None:
    now = 1_700_000_000_000
    old, recent = now - 8 * DAY_MS, now - DAY_MS
    broker = _start(tmp_path)  # offsets.retention.minutes: 7 days by default
    try:
        mgr = _manager(broker)
        removed: list[str] = []
        broker.call(lambda: setattr(mgr, "on_group_removed", removed.append))
        for g in ("simple", "empty", "stable", "explicit"):
            _wait_coordinator(broker, g)
        # Simple commits (no group metadata): each offset expires 7 days after its commit.
        _run(broker, lambda: mgr.store_offsets("simple", {
            ("t", 0): OffsetAndMetadata(1, -1, "", old),
            ("t", 1): OffsetAndMetadata(2, -1, "", recent)}))
        # An Empty consumer group: counted from when it became Empty, not from the commits.
        _run(broker, lambda: mgr.store_group("empty", GroupMetadataValue(
            "consumer", 4, None, None, recent, ())))
        _run(broker, lambda: mgr.store_offsets("empty", {
            ("t", 0): OffsetAndMetadata(5, -1, "", old)}))
        # A Stable group: only offsets of topics nobody subscribes to expire.
        _run(broker, lambda: mgr.store_group("stable", GroupMetadataValue(
            "consumer", 2, "range", "m", old, (_member("m", ("t",)),))))
        _run(broker, lambda: mgr.store_offsets("stable", {
            ("t", 0): OffsetAndMetadata(5, -1, "", old),
            ("gone", 0): OffsetAndMetadata(6, -1, "", old)}))
        # An explicit expire timestamp (OffsetCommit v1) wins over the retention.
        _run(broker, lambda: mgr.store_offsets("explicit", {
            ("t", 0): OffsetAndMetadata(1, -1, "", recent, now - 1),
            ("t", 1): OffsetAndMetadata(1, -1, "", old, now + 1)}))

        assert _run(broker, lambda: mgr.expire_offsets(now)) == 3
        assert set(broker.call(lambda: mgr.fetch_offsets("simple", None))) == {("t", 1)}
        assert set(broker.call(lambda: mgr.fetch_offsets("empty", None))) == {("t", 0)}
        assert set(broker.call(lambda: mgr.fetch_offsets("stable", None))) == {("t", 0)}
        assert set(broker.call(lambda: mgr.fetch_offsets("explicit", None))) == {("t", 1)}
        assert removed == []
        records = _offsets_records(broker, mgr.partition_for("simple"))
        assert (OffsetCommitKey("simple", "t", 0), None) in records

        # Later: the Empty group's offsets go, and the group with them (metadata tombstone).
        later = recent + 7 * DAY_MS
        assert _run(broker, lambda: mgr.expire_offsets(later)) == 3
        assert broker.call(lambda: mgr.groups_with_offsets()) == {"stable"}
        assert sorted(removed) == ["empty", "explicit", "simple"]
        records = _offsets_records(broker, mgr.partition_for("empty"))
        assert (GroupMetadataKey("empty"), None) in records
        assert broker.call(lambda: mgr.group_value("empty")) is None
    finally:
        broker.stop()


def test_expiration_task_runs(tmp_path: Path) -> None:
    broker = _start(tmp_path, offsets_retention_minutes=1,
                    offsets_retention_check_interval_ms=50)
    try:
        _wait_coordinator(broker, "g")
        mgr = _manager(broker)
        _run(broker, lambda: mgr.store_offsets("g", {
            ("t", 0): OffsetAndMetadata(1, -1, "", int(time.time() * 1000) - 61_000)}))
        deadline = time.monotonic() + 10
        while broker.call(lambda: mgr.fetch_offsets("g", None)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broker.call(lambda: mgr.fetch_offsets("g", None)) == {}
    finally:
        broker.stop()


def test_loads_kafka_2x_corpus(tmp_path: Path, kafka_corpus: Path) -> None:
    shutil.copytree(kafka_corpus, tmp_path / "logs")
    group = "my-second-application"
    broker = InProcessBroker(tmp_path, {"offsets.topic.num.partitions": "50"}).start()
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        assert mgr.partition_for(group) == 12
        offsets = broker.call(lambda: mgr.fetch_offsets(group, None))
        # The last commits Kafka wrote (offsets 466-468 of __consumer_offsets-12).
        assert {tp: (om.offset, om.leader_epoch, om.metadata, om.commit_timestamp)
                for tp, om in offsets.items()} == {
            ("first_topic", 0): (11, 0, "", 1587581641133),
            ("first_topic", 1): (12, 0, "", 1587581641133),
            ("first_topic", 2): (18, 0, "", 1587581641133),
        }
        value = broker.call(lambda: mgr.group_value(group))
        assert value is not None
        assert (value.protocol_type, value.generation, value.members,
                value.current_state_timestamp) == ("consumer", 8, (), 1587581641137)
        assert group in broker.call(mgr.groups_with_offsets)
    finally:
        broker.stop()


def test_read_offsets_partition_transactions(tmp_path: Path) -> None:
    """Transactional commits count only after their COMMIT marker (aborted: dropped)."""
    from klog.protocol.records.v2 import BatchBuilder
    from klog.storage.config import LogConfig
    from klog.storage.log import PartitionLog

    plog = PartitionLog(tmp_path / f"{OFFSETS_TOPIC}-0", LogConfig())
    try:
        def commit_batch(pid: int, group: str, offset: int, txn: bool) -> bytes:
            b = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0,
                             is_transactional=txn)
            b.append(1, OffsetCommitKey(group, "t", 0).encode(),
                     OffsetCommitValue(offset, "", 1).encode())
            return b.build()

        def marker(pid: int, commit: bool) -> bytes:
            b = BatchBuilder(producer_id=pid, producer_epoch=0, is_transactional=True,
                             is_control=True)
            b.append(1, (0).to_bytes(2, "big") + int(commit).to_bytes(2, "big"),
                     b"\x00\x00\x00\x00\x00\x00")
            return b.build()

        for batch in (commit_batch(-1, "plain", 1, False), commit_batch(7, "committed", 2, True),
                      commit_batch(8, "aborted", 3, True), marker(7, True), marker(8, False),
                      commit_batch(9, "open", 4, True)):
            plog.append_as_leader(batch, 0, origin=AppendOrigin.COORDINATOR)
        result = read_offsets_partition(plog, 64)
        assert {g: {tp: om.offset for tp, om in o.items()} for g, o in result.offsets.items()} \
            == {"plain": {("t", 0): 1}, "committed": {("t", 0): 2}}
    finally:
        plog.close()


@pytest.mark.parametrize("swap_after", [1, 2, 5])
def test_a_cleaning_swapped_in_while_loading_changes_nothing(tmp_path: Path,
                                                             swap_after: int) -> None:
    """The load reads the partition chunk by chunk through PartitionLog.read (each read
    finds its segment afresh, under the log's lock), so the cleaner swapping cleaned
    segments in between two chunks -- or between a chunk's read and the reading of its
    bytes, whose old segment stays open until file.delete.delay.ms -- loses nothing: the
    load gives every key's latest offset. Deterministic: the swap runs inside the
    ``swap_after``-th read."""
    from klog.daemon.group.metadata_manager import offset_commit_record
    from klog.protocol.records.v2 import BatchBuilder
    from klog.storage.cleaner import Cleaner, LogToClean, cleanable_offsets
    from klog.storage.config import LogConfig
    from klog.storage.log import PartitionLog
    from klog.storage.values import FetchDataInfo

    plog = PartitionLog(tmp_path / f"{OFFSETS_TOPIC}-0",
                        LogConfig(cleanup_policy=("compact",), segment_bytes=4096))
    try:
        latest: dict[tuple[str, int], int] = {}
        for i in range(1, 1201):
            tp = ("t", i % 4)
            b = BatchBuilder()
            b.append(i, *offset_commit_record("g", tp, OffsetAndMetadata(i, -1, "", i)))
            plog.append_as_leader(b.build(), 0, origin=AppendOrigin.COORDINATOR)
            latest[tp] = i
        plog.update_high_watermark(plog.log_end_offset)
        read = plog.read
        calls = 0

        def read_then_swap(*args: Any, **kwargs: Any) -> FetchDataInfo:
            nonlocal calls
            info = read(*args, **kwargs)
            calls += 1
            if calls == swap_after:
                offsets = cleanable_offsets(plog, None, 0)
                Cleaner(1 << 20).clean(LogToClean(plog, *offsets[:2]), now_ms=0)
            return info

        plog.read = read_then_swap  # type: ignore[method-assign]
        result = read_offsets_partition(plog, 1024)
        assert calls > swap_after and plog.pending_deletes  # the swap did happen mid-load
        assert {tp: om.offset for tp, om in result.offsets["g"].items()} == latest
    finally:
        plog.close()


@pytest.mark.parametrize("om", [
    OffsetAndMetadata(0, -1, "", 0),
    OffsetAndMetadata(2**62, 17, "m\u00e9ta \U0001f600", 1_700_000_000_000),
    OffsetAndMetadata(5, -1, "x", 1, 1_800_000_000_000),
    None,
])
def test_offset_commit_record_is_kafkas_encoding(om: OffsetAndMetadata | None) -> None:
    from klog.daemon.group.metadata_manager import offset_commit_record

    key, value = offset_commit_record("gr\u00fcppe", ("topic", 7), om)
    assert key == OffsetCommitKey("gr\u00fcppe", "topic", 7, version=1).encode()
    if om is None:
        assert value is None
    elif om.expire_timestamp is None:
        assert value == OffsetCommitValue(om.offset, om.metadata, om.commit_timestamp,
                                          om.leader_epoch, version=3).encode()
    else:
        assert value == OffsetCommitValue(om.offset, om.metadata, om.commit_timestamp,
                                          expire_timestamp=om.expire_timestamp,
                                          version=1).encode()


def test_null_and_oversized_metadata(tmp_path: Path) -> None:
    broker = _start(tmp_path, offset_metadata_max_bytes=100_000)
    try:
        _wait_coordinator(broker, "g")
        mgr = _manager(broker)
        result = _run(broker, lambda: mgr.store_offsets("g", {
            ("t", 0): OffsetAndMetadata(1, -1, None, 1),  # type: ignore[arg-type]
            ("t", 1): OffsetAndMetadata(2, -1, "\u00e9" * 20_000, 1)}))  # 40,000 bytes
        assert result == {("t", 0): ErrorCode.NONE,
                          ("t", 1): ErrorCode.OFFSET_METADATA_TOO_LARGE}
        assert broker.call(lambda: mgr.fetch_offsets("g", None)) == {
            ("t", 0): OffsetAndMetadata(1, -1, "", 1)}
    finally:
        broker.stop()


def test_leader_and_isr_moves_the_coordinator(tmp_path: Path) -> None:
    """LeaderAndIsr naming another leader unloads the partition (NOT_COORDINATOR); naming
    this broker again reloads it from the log."""
    from klog.daemon.metadata_cache import PartitionState

    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, "moving")
        mgr = _manager(broker)
        _run(broker, lambda: mgr.store_offsets("moving", {
            ("t", 0): OffsetAndMetadata(3, -1, "", 1)}))
        p = mgr.partition_for("moving")
        me = broker.broker.broker_id

        def state(leader: int, epoch: int) -> PartitionState:
            return PartitionState(OFFSETS_TOPIC, p, leader, epoch, (me, me + 1), (me, me + 1))

        broker.call(lambda: broker.broker.control_requests.become_leader_or_follower(
            [state(me + 1, 5)], {}))
        assert broker.call(lambda: mgr.coordinator_error("moving")) is ErrorCode.NOT_COORDINATOR
        assert broker.call(lambda: mgr.fetch_offsets("moving", None)) == {}
        broker.call(lambda: broker.broker.control_requests.become_leader_or_follower(
            [state(me, 6)], {}))
        _wait_coordinator(broker, "moving")
        assert broker.call(lambda: mgr.fetch_offsets("moving", None)) == {
            ("t", 0): OffsetAndMetadata(3, -1, "", 1)}
    finally:
        broker.stop()


def test_undecodable_records_are_skipped(tmp_path: Path) -> None:
    from klog.protocol.records.v2 import BatchBuilder
    from klog.storage.config import LogConfig
    from klog.storage.log import PartitionLog

    plog = PartitionLog(tmp_path / f"{OFFSETS_TOPIC}-0", LogConfig())
    try:
        b = BatchBuilder()
        b.append(1, None, b"no key")
        b.append(1, b"\x00", b"short key")
        b.append(1, b"\x00\x07garbage", b"unknown record type")  # e.g. KIP-848 records
        b.append(1, OffsetCommitKey("g", "t", 0).encode(), b"\x00\x03\x00")  # cut value
        b.append(1, OffsetCommitKey("g", "t", 1).encode(), OffsetCommitValue(9).encode())
        b.append(1, GroupMetadataKey("g").encode(), b"\x7f\x7f")  # unknown value version
        plog.append_as_leader(b.build(), 0, origin=AppendOrigin.COORDINATOR)
        result = read_offsets_partition(plog, 1 << 20)
        assert {g: {tp: om.offset for tp, om in o.items()} for g, o in result.offsets.items()} \
            == {"g": {("t", 1): 9}}
        assert (result.records, result.skipped) == (6, 5)
    finally:
        plog.close()


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_fast_commit_decoders_agree_with_the_schema(version: int) -> None:
    from klog.daemon.group.metadata_manager import (
        _fast_commit_key,
        _fast_commit_value,
        _offset_from_value,
    )

    value = OffsetCommitValue(123456789012, "m\u00e9ta", 1_700_000_000_000, 7,
                              1_800_000_000_000 if version == 1 else -1, version=version)
    data = value.encode()
    fast = _fast_commit_value(data)
    if version == 4:
        assert fast is None  # flexible: left to the schema-driven decoder
    else:
        assert fast == _offset_from_value(OffsetCommitValue.decode(data))
    for cut in range(len(data)):  # every truncation is refused, never misread
        assert _fast_commit_value(data[:cut]) is None
    for key_version in (0, 1):
        key = OffsetCommitKey("gr\u00fcppe", "t\u00f6pic", 2**31 - 1,
                              version=key_version).encode()
        assert _fast_commit_key(key) == ("gr\u00fcppe", ("t\u00f6pic", 2**31 - 1))
        for cut in range(len(key)):
            assert _fast_commit_key(key[:cut]) is None
    assert _fast_commit_key(GroupMetadataKey("g").encode()) is None


def test_compression_codec(tmp_path: Path) -> None:
    """offsets.topic.compression.codec 1 (gzip): the coordinator's batches are gzip, and
    they load back."""
    from klog.protocol.records.batch import CompressionType

    broker = _start(tmp_path, offsets_topic_compression_codec=1)
    try:
        _wait_coordinator(broker, "zipped")
        mgr = _manager(broker)
        offsets = {("t", i): OffsetAndMetadata(i, -1, "", 1) for i in range(20)}
        _run(broker, lambda: mgr.store_offsets("zipped", offsets))
        p = mgr.partition_for("zipped")

        def codecs() -> set[CompressionType]:
            part = broker.broker.replica_manager.get_partition(OFFSETS_TOPIC, p)
            data = part.log.read(0, 1 << 20, None, True).read_bytes()
            return {h.compression for h in iter_batch_headers(data)}

        assert broker.call(codecs) == {CompressionType.GZIP}
        broker.call(lambda: mgr.resign(p))
        broker.call(lambda: mgr.become_leader(p))
        _wait_coordinator(broker, "zipped")
        assert broker.call(lambda: mgr.fetch_offsets("zipped", None)) == offsets
    finally:
        broker.stop()


# -- transactional offset commits -------------------------------------------------------------


def _marker(broker: InProcessBroker, partition: int, producer_id: int, epoch: int,
            commit: bool) -> None:
    """Write a transaction marker into an offsets partition, as the transaction
    coordinator's WriteTxnMarkers does, then tell the manager (its complete_transaction)."""
    from klog.protocol.records.control import (
        ControlRecordType,
        EndTransactionMarker,
        build_control_batch,
    )

    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    batch = build_control_batch(EndTransactionMarker(kind, 3), producer_id=producer_id,
                                producer_epoch=epoch)
    rm = broker.broker.replica_manager
    tp = (OFFSETS_TOPIC, partition)
    result = broker.call(lambda: rm.append_records({tp: batch}, 1, origin=AppendOrigin.COORDINATOR))
    assert result[tp].error_code == 0
    mgr = _manager(broker)
    broker.call(lambda: mgr.complete_transaction(partition, producer_id, commit))


def test_txn_offsets_pending_until_commit_marker_dropped_on_abort(tmp_path: Path) -> None:
    group = "eos-app"
    plain = {("in", 0): OffsetAndMetadata(5, -1, "", 1)}
    txn = {("in", 0): OffsetAndMetadata(10, 2, "m", 2), ("in", 1): OffsetAndMetadata(11, -1, "", 2)}
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        p = mgr.partition_for(group)
        assert _run(broker, lambda: mgr.store_offsets(group, plain)) == {("in", 0): ErrorCode.NONE}
        assert _run(broker, lambda: mgr.store_txn_offsets(group, 1000, 0, txn)) \
            == dict.fromkeys(txn, ErrorCode.NONE)
        # Invisible while the transaction is open; OffsetFetch's require_stable sees it.
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == plain
        assert broker.call(lambda: mgr.has_pending_txn_offset(group, ("in", 1)))
        assert not broker.call(lambda: mgr.has_pending_txn_offset(group, ("in", 2)))
        assert broker.call(lambda: mgr.pending_txn_producers(p)) == {1000}
        # Written as Kafka: one transactional batch of the producer id and epoch.
        part = broker.broker.replica_manager.get_partition(OFFSETS_TOPIC, p)
        data = broker.call(lambda: part.log.read(0, 1 << 20, None, True).read_bytes())
        headers = list(iter_batch_headers(data))
        assert [(h.is_transactional, h.producer_id, h.producer_epoch) for h in headers] \
            == [(False, -1, -1), (True, 1000, 0)]
        assert headers[1].last_offset - headers[1].base_offset == 1
        _marker(broker, p, 1000, 0, commit=True)
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == txn
        assert not broker.call(lambda: mgr.has_pending_txn_offset(group, ("in", 1)))
        # An aborted transaction's commits are dropped.
        later = {("in", 0): OffsetAndMetadata(99, -1, "", 3)}
        assert _run(broker, lambda: mgr.store_txn_offsets(group, 1001, 0, later)) \
            == {("in", 0): ErrorCode.NONE}
        _marker(broker, p, 1001, 0, commit=False)
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == txn
        assert broker.call(lambda: mgr.pending_txn_producers(p)) == set()
    finally:
        broker.stop()


def test_txn_offsets_of_a_fenced_epoch_are_refused(tmp_path: Path) -> None:
    group = "zombie"
    om = {("in", 0): OffsetAndMetadata(1, -1, "", 1)}
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        assert _run(broker, lambda: mgr.store_txn_offsets(group, 7, 3, om)) \
            == {("in", 0): ErrorCode.NONE}
        assert _run(broker, lambda: mgr.store_txn_offsets(group, 7, 2, om)) \
            == {("in", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
        assert broker.call(lambda: mgr.pending_txn_producers(mgr.partition_for(group))) == {7}
    finally:
        broker.stop()


def test_loading_applies_markers_and_keeps_open_transactions_pending(tmp_path: Path) -> None:
    group = "eos-load"
    committed = {("in", 0): OffsetAndMetadata(10, -1, "", 2)}
    aborted = {("in", 1): OffsetAndMetadata(20, -1, "", 2)}
    still_open = {("in", 2): OffsetAndMetadata(30, -1, "", 2)}
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        p = mgr.partition_for(group)
        for pid, offsets in ((1, committed), (2, aborted), (3, still_open)):
            assert _run(broker, lambda pid=pid, o=offsets: mgr.store_txn_offsets(
                group, pid, 0, o)) == dict.fromkeys(offsets, ErrorCode.NONE)
        # Markers in the log only (the manager is not told): the load must apply them.
        rm = broker.broker.replica_manager
        from klog.protocol.records.control import (
            ControlRecordType,
            EndTransactionMarker,
            build_control_batch,
        )
        for pid, kind in ((1, ControlRecordType.COMMIT), (2, ControlRecordType.ABORT)):
            batch = build_control_batch(EndTransactionMarker(kind, 0), producer_id=pid,
                                        producer_epoch=0)
            broker.call(lambda b=batch: rm.append_records({(OFFSETS_TOPIC, p): b}, 1,
                                                          origin=AppendOrigin.COORDINATOR))
    finally:
        broker.stop()
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == committed
        assert broker.call(lambda: mgr.pending_txn_producers(p)) == {3}
        assert broker.call(lambda: mgr.has_pending_txn_offset(group, ("in", 2)))
        broker.call(lambda: mgr.complete_transaction(p, 3, True))
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == {**committed, **still_open}
        # Leadership lost: pending commits go with the partition.
        assert _run(broker, lambda: mgr.store_txn_offsets(group, 4, 0, aborted)) \
            == dict.fromkeys(aborted, ErrorCode.NONE)
        broker.call(lambda: mgr.resign(p))
        assert broker.call(lambda: mgr.pending_txn_producers(p)) == set()
    finally:
        broker.stop()


def test_a_marker_announced_while_the_partition_loads_is_applied_after(tmp_path: Path
                                                                       ) -> None:
    """The load may read the log before the marker lands: the completion waits for it."""
    group = "eos-race"
    offsets = {("in", 0): OffsetAndMetadata(7, -1, "", 2)}
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        p = mgr.partition_for(group)
        assert _run(broker, lambda: mgr.store_txn_offsets(group, 11, 0, offsets)) \
            == dict.fromkeys(offsets, ErrorCode.NONE)

        def reload_and_complete() -> None:
            mgr.resign(p)
            mgr.become_leader(p)  # the load task has not run yet
            mgr.complete_transaction(p, 11, True)

        broker.call(reload_and_complete)
        _wait_coordinator(broker, group)
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == offsets
        assert broker.call(lambda: mgr.pending_txn_producers(p)) == set()
    finally:
        broker.stop()


def test_a_plain_commit_after_a_transactional_one_wins(tmp_path: Path) -> None:
    """As Kafka: the COMMIT marker does not replace an offset committed after the
    transaction's (log order), neither live nor when the partition is loaded."""
    group = "eos-mixed"
    txn = {("in", 0): OffsetAndMetadata(10, -1, "", 1_000), ("in", 1): OffsetAndMetadata(
        11, -1, "", 1_000)}
    later = {("in", 0): OffsetAndMetadata(50, -1, "", 2_000)}
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        mgr = _manager(broker)
        p = mgr.partition_for(group)
        assert _run(broker, lambda: mgr.store_txn_offsets(group, 21, 0, txn)) \
            == dict.fromkeys(txn, ErrorCode.NONE)
        assert _run(broker, lambda: mgr.store_offsets(group, later)) \
            == {("in", 0): ErrorCode.NONE}
        _marker(broker, p, 21, 0, commit=True)
        expected = {("in", 0): later[("in", 0)], ("in", 1): txn[("in", 1)]}
        assert broker.call(lambda: mgr.fetch_offsets(group, None)) == expected
    finally:
        broker.stop()
    broker = _start(tmp_path)
    try:
        _wait_coordinator(broker, group)
        assert broker.call(lambda: _manager(broker).fetch_offsets(group, None)) == expected
    finally:
        broker.stop()
