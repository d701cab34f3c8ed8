"""RecordChecker: validation in its worker threads, each partition's appends finished in
arrival order, a refusal handed to ``finish`` as the KafkaError to answer."""

from __future__ import annotations

import asyncio
import time

from klog.daemon.record_checker import RecordChecker
from klog.protocol.errors import ErrorCode, KafkaError
from klog.protocol.records.batch import CompressionType
from klog.protocol.records.v2 import build_batch
from klog.storage.config import LogConfig
from klog.storage.validator import ValidatedRecords

NOW = int(time.time() * 1000)


def test_appends_finish_in_arrival_order_and_refusals_reach_finish() -> None:
    big = build_batch([(NOW, b"k", b"v" * 100)] * 20_000, compression=CompressionType.ZSTD)
    small = build_batch([(NOW, b"k", b"v")])
    keyless = build_batch([(NOW, None, b"v")])

    async def go() -> list[tuple[str, object]]:
        checker: RecordChecker[tuple[str, object]] = RecordChecker(lambda: NOW)
        finished: list[tuple[str, object]] = []

        def finish(name: str):  # type: ignore[no-untyped-def]
            def done(checked: ValidatedRecords | KafkaError) -> tuple[str, object]:
                outcome = checked.error_code if isinstance(checked, KafkaError) \
                    else len(checked.records)
                finished.append((name, outcome))
                return name, outcome
            return done

        compacted = LogConfig(cleanup_policy=("compact",))
        first = checker.append_in_order(("t", 0), big, LogConfig(), finish("big"))
        assert checker.busy(("t", 0)) and not checker.busy(("t", 1))
        second = checker.append_in_order(("t", 0), small, LogConfig(), finish("small"))
        other = checker.append_in_order(("t", 1), keyless, compacted, finish("keyless"))
        await asyncio.gather(first, second, other)
        assert not checker.busy(("t", 0))
        checker.shutdown()
        return finished

    finished = asyncio.run(go())
    assert [n for n, _ in finished if n != "keyless"] == ["big", "small"]
    assert ("keyless", ErrorCode.INVALID_RECORD) in finished
    assert ("small", len(small)) in finished
