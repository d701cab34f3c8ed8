"""ReplicaManager._validate: the one-batch shortcut decides as the walk over the headers."""

from __future__ import annotations

import dataclasses
import struct
import time
from types import SimpleNamespace
from typing import Any

import pytest

from klog.daemon.replica_manager import ReplicaManager
from klog.protocol.errors import KafkaError
from klog.protocol.records.batch import CompressionType, iter_batch_headers
from klog.protocol.records.v2 import build_batch
from klog.storage.config import LogConfig

NOW = int(time.time() * 1000)


def _validate(records: Any, config: LogConfig, origin: str = "client") -> Any:
    manager: Any = SimpleNamespace(clock=lambda: NOW, _recompress=ReplicaManager._recompress)
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
CASES = {
    "good": GOOD,
    "magic 1": _patched(GOOD, ">b", 16, 1),
    "magic 3": _patched(GOOD, ">b", 16, 3),
    "negative delta": _patched(GOOD, ">i", 23, -1),
    "length too long": _patched(GOOD, ">i", 8, len(GOOD)),
    "length too short": _patched(GOOD, ">i", 8, len(GOOD) - 20),
    "two batches": GOOD + GOOD,
    "tiny": GOOD[:40],
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
    with pytest.raises(KafkaError, match="magic 2"):
        _validate(memoryview(CASES["magic 1"]), LogConfig())


def test_broker_side_compression_still_recompresses() -> None:
    out = _validate(memoryview(GOOD), LogConfig(compression_type="zstd"))
    headers = list(iter_batch_headers(out))
    assert len(headers) == 1 and headers[0].compression is CompressionType.ZSTD


def test_a_leader_and_isr_that_shrinks_the_isr_wakes_waiting_produces(tmp_path: Any) -> None:
    # acks=all produces wait for the high watermark; a LeaderAndIsr without a dead
    # follower moves it, and the purgatories must hear so then, not at their timeout.
    from klog.daemon.metadata_cache import PartitionState
    from klog.storage.log_manager import LogManager

    moved: list[tuple[str, int]] = []
    logs = LogManager([tmp_path])
    manager = ReplicaManager(1, logs, lambda topic: LogConfig(), on_high_watermark=moved.append)
    try:
        manager.become_leader_or_follower([PartitionState("t", 0, 1, 0, (1, 2), (1, 2))])
        manager.append_records({("t", 0): memoryview(bytearray(GOOD))}, -1)
        assert manager.partitions[("t", 0)].high_watermark == 0 and moved == []
        manager.become_leader_or_follower([PartitionState("t", 0, 1, 1, (1, 2), (1,))])
        assert manager.partitions[("t", 0)].high_watermark == 2
        assert moved == [("t", 0)]
    finally:
        logs.close()
