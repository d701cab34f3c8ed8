"""Log cleaner benchmarks, against a baseline measured in the same run.

- throughput: MB/s of dirty log cleaned by ``Cleaner.clean`` (1 KiB records in batches of
  16, 10% distinct keys, every segment but an empty active one dirty) vs a raw read +
  write of the same bytes (read each segment, write it to a new file, fsync it: what any
  rewrite of the log costs at least). Target: >= 50%. The cleaning's time includes both
  of its passes (the offset map, then the rewrite), the fsync of each cleaned segment and
  the swaps. Run with the C extension and, for comparison, the Python reference.
- offset map memory: bytes per slot and per key mapped (Kafka: 24 per entry).
- latency: p99 produce latency at 10k msg/s of 1 KiB (acks=1, linger.ms=0, partition 0
  of "latency") on a broker whose cleaner works on another topic the whole time, vs a
  broker with log.cleaner.enable=false under the same load. Both brokers get the same
  background writer: keyed 1 KiB records to a compacted topic with small segments, so
  segments keep rolling dirty and, on the first broker, keep being cleaned. Rounds
  alternate between the two brokers. Target: <= 2x the p99 without the cleaner.

Files live in the page cache on both sides. Each timed run cleans a fresh copy of the same
dirty log (the copy is not timed); runs alternate with the baseline's (best of ``--runs``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import threading
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
from klog.testing import KlogBroker

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


def _dirtying_writer(bootstrap: str, stop: threading.Event, rate: int) -> None:
    """Keyed 1 KiB records to ``compacted`` at ``rate``/s (1,000 distinct keys), until
    ``stop``: a log that keeps turning dirty."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": 1})
    value = os.urandom(RECORD_SIZE)
    n = 0
    start = time.perf_counter()
    while not stop.is_set():
        due = int((time.perf_counter() - start) * rate)
        while n < due:
            producer.produce("compacted", value, key=b"%d" % (n % 1000), partition=0)
            n += 1
        producer.poll(0)
        time.sleep(0.005)
    producer.flush(30)


def _cleanings(broker: KlogBroker) -> int:
    """How many cleanings the broker's log reports (Kafka's log-cleaner figures block)."""
    try:
        text = broker.log_file.read_text(errors="replace")
    except OSError:
        return 0
    return text.count(" cleaned log ")


def bench_latency(rate: int, seconds: float, rounds: int, dirty_rate: int) -> Result:
    from confluent_kafka.admin import AdminClient, NewTopic

    from benchmarks.bench_broker import _PacedProducer

    data = WORK / "cleaner-latency"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    common = {"log.cleaner.backoff.ms": "200", "log.cleaner.min.cleanable.ratio": "0.01",
              "log.retention.check.interval.ms": "600000"}
    sides = {}
    brokers = {}
    stop = threading.Event()
    writers = []
    try:
        for name, enabled in (("cleaning", "true"), ("no cleaner", "false")):
            b = KlogBroker(data / name.replace(" ", "-"),
                           overrides={**common, "log.cleaner.enable": enabled})
            brokers[name] = b.start()
            admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
            admin.create_topics([NewTopic("compacted", 1, 1, config={
                "cleanup.policy": "compact", "segment.bytes": str(4 << 20),
                "min.cleanable.dirty.ratio": "0.01", "segment.ms": "1000"})])[
                "compacted"].result(30)
            w = threading.Thread(target=_dirtying_writer,
                                 args=(b.bootstrap_servers, stop, dirty_rate), daemon=True)
            w.start()
            writers.append(w)
            sides[name] = _PacedProducer(b.bootstrap_servers, b.process.pid)
        time.sleep(3)  # segments roll and the first cleanings start
        measured: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
        cleanings_before = _cleanings(brokers["cleaning"])
        for _ in range(rounds):
            for name, side in sides.items():
                measured[name].append(side.round(rate, seconds))
        cleanings = _cleanings(brokers["cleaning"]) - cleanings_before
    finally:
        stop.set()
        for w in writers:
            w.join(30)
        for side in sides.values():
            side.close()
        for b in brokers.values():
            b.close()
        shutil.rmtree(data, ignore_errors=True)
    p99 = {name: statistics.median(r["p99_ms"] for r in rs) for name, rs in measured.items()}
    return Result(
        f"p99 produce latency, {rate:,} msg/s of 1 KiB, while the cleaner cleans another "
        f"topic ({dirty_rate:,} keyed records/s make it dirty); baseline: the same without "
        f"a cleaner", p99["cleaning"], "ms", p99["no cleaner"], "<= 2x baseline",
        p99["cleaning"] <= 2 * p99["no cleaner"],
        {"cleanings_during_rounds": cleanings, "rounds": measured})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=256 << 20, help="dirty log bytes")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="32 MiB, one run")
    parser.add_argument("--dedupe-buffer-size", type=int, default=16 << 20)
    parser.add_argument("--only", choices=["throughput", "memory", "latency"])
    args = parser.parse_args()
    size, runs = (32 << 20, 1) if args.quick else (args.size, args.runs)
    results = []
    if args.only in (None, "throughput"):
        if cleaner_module._c is not None:
            results.append(bench_throughput(size, runs, True, args.dedupe_buffer_size))
        results.append(bench_throughput(min(size, 64 << 20), 1, False,
                                        args.dedupe_buffer_size))
    if args.only in (None, "memory"):
        results.append(bench_map_memory(100_000))
    if args.only in (None, "latency"):
        results.append(bench_latency(10_000, 2.0 if args.quick else 6.0,
                                     1 if args.quick else 4, 3_000))
    report(results)


if __name__ == "__main__":
    main()
