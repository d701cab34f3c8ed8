"""Log cleaner benchmarks, against a baseline measured in the same run.

- throughput: MB/s of dirty log cleaned by ``Cleaner.clean`` (1 KiB records in batches of
  16, 10% distinct keys, every segment but an empty active one dirty) vs a raw read +
  write of the same bytes (read each segment, write it to a new file, fsync it: what any
  rewrite of the log costs at least). Target: >= 50%. The cleaning's time includes both
  of its passes (the offset map, then the rewrite), the fsync of each cleaned segment and
  the swaps. Run with the C extension and, for comparison, the Python reference.
- offset map memory: bytes per slot and per key mapped (Kafka: 24 per entry).

Files live in the page cache on both sides. Each timed run cleans a fresh copy of the same
dirty log (the copy is not timed); runs alternate with the baseline's (best of ``--runs``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import tracemalloc
from pathlib import Path

from benchmarks.common import WORK, Result, best_of_interleaved, report
from klog.protocol.records.v2 import build_batch
from klog.storage import cleaner as cleaner_module
from klog.storage.cleaner import (
    BYTES_PER_ENTRY,
    DEFAULT_IO_BUFFER_LOAD_FACTOR,
    Cleaner,
    LogToClean,
    OffsetMap,
    cleanable_offsets,
)
from klog.storage.config import LogConfig
from klog.storage.log import PartitionLog

RECORD_SIZE = 1024
RECORDS_PER_BATCH = 16
CONFIG = LogConfig(cleanup_policy=("compact",), segment_bytes=64 << 20, file_delete_delay_ms=0)


def make_dirty_log(path: Path, size: int) -> tuple[int, int]:
    """A log of ``size`` bytes of keyed 1 KiB records, 10% distinct keys; returns
    (records, distinct keys)."""
    shutil.rmtree(path, ignore_errors=True)
    log = PartitionLog(path / "bench-0", CONFIG)
    batch_bytes = RECORDS_PER_BATCH * (RECORD_SIZE + 40)
    batches = max(1, size // batch_bytes)
    records = batches * RECORDS_PER_BATCH
    keys = max(1, records // 10)
    value = os.urandom(RECORD_SIZE - 16)
    now = int(time.time() * 1000)
    n = 0
    for _ in range(batches):
        items = []
        for _ in range(RECORDS_PER_BATCH):
            # Keys spread so that every key recurs across the whole log.
            items.append((now, b"key-%012d" % (n * 7919 % keys), value + n.to_bytes(16, "big")))
            n += 1
        log.append_as_leader(build_batch(items), leader_epoch=0)
    log.roll()
    log.close()
    return records, keys


def _copy(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)


def bench_throughput(size: int, runs: int, use_c: bool, dedupe: int) -> Result:
    source = WORK / "cleaner" / "source"
    records, keys = make_dirty_log(source, size)
    work = WORK / "cleaner" / "work"
    segments = sorted((source / "bench-0").glob("*.log"))
    dirty = sum(s.stat().st_size for s in segments)
    cleaner = Cleaner(dedupe, use_c=use_c)
    kept: list[int] = []

    def raw() -> float:
        target = WORK / "cleaner" / "raw.bin"
        start = time.perf_counter()
        with open(target, "wb") as out:
            for segment in segments:
                with open(segment, "rb") as f:
                    while chunk := f.read(1 << 20):
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        elapsed = time.perf_counter() - start
        target.unlink()
        return elapsed

    def clean() -> float:
        _copy(source, work)
        log = PartitionLog(work / "bench-0", CONFIG)
        log.update_high_watermark(log.log_end_offset)
        offsets = cleanable_offsets(log, None, int(time.time() * 1000))
        to_clean = LogToClean(log, offsets.first_dirty_offset,
                              offsets.first_uncleanable_dirty_offset)
        start = time.perf_counter()
        stats = cleaner.clean(to_clean)
        elapsed = time.perf_counter() - start
        assert stats.end_offset == offsets.first_uncleanable_dirty_offset, "map too small"
        kept.append(stats.messages_written)
        log.delete_pending(2**62)
        log.close()
        return elapsed

    base, subject = best_of_interleaved(runs, raw, clean)
    mb = dirty / 1e6
    shutil.rmtree(WORK / "cleaner", ignore_errors=True)
    return Result(
        f"cleaner throughput ({'C' if use_c else 'Python'}), {mb:,.0f} MB dirty, "
        f"{records:,} records, {keys:,} keys",
        mb / subject,
        "MB/s",
        baseline=mb / base,
        target=">= 50% of raw read + write" if use_c else "(reference)",
        ok=(mb / subject) >= 0.5 * (mb / base) if use_c else None,
        extra={"kept": kept[-1], "dedupe_buffer_bytes": dedupe},
    )


def bench_map_memory(keys: int) -> Result:
    memory = int(keys * BYTES_PER_ENTRY / DEFAULT_IO_BUFFER_LOAD_FACTOR) + BYTES_PER_ENTRY
    # Measured, not computed: what Python allocated for the map and its filling.
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    offset_map = OffsetMap(memory)
    for i in range(keys):
        offset_map.put(b"key-%d" % i, i)
    allocated = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    per_slot = allocated / offset_map.slots
    per_key = allocated / offset_map.size
    return Result(
        f"offset map memory, {keys:,} keys at load factor {DEFAULT_IO_BUFFER_LOAD_FACTOR}",
        per_slot,
        "bytes per entry",
        target="Kafka: 24",
        ok=per_slot <= 24.01,
        extra={"bytes_per_key_mapped": round(per_key, 1), "allocated_bytes": allocated},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=256 << 20, help="dirty log bytes")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="32 MiB, one run")
    parser.add_argument("--dedupe-buffer-size", type=int, default=16 << 20)
    args = parser.parse_args()
    size, runs = (32 << 20, 1) if args.quick else (args.size, args.runs)
    results = []
    if cleaner_module._c is not None:
        results.append(bench_throughput(size, runs, True, args.dedupe_buffer_size))
    results.append(bench_throughput(min(size, 64 << 20), 1, False, args.dedupe_buffer_size))
    results.append(bench_map_memory(100_000))
    report(results)


if __name__ == "__main__":
    main()
