"""Helpers shared by the benchmarks: synthetic segments, timing, result lines.

Every benchmark measures a baseline in the same run (a raw write/read/crc loop over the
same bytes) and reports klog's figure as a ratio of it, so results compare across
machines.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from klog.protocol.records.batch import patch_base_offset
from klog.protocol.records.v2 import build_batch

WORK = Path(os.environ.get("KLOG_BENCH_DIR", Path(__file__).parent / ".work"))


def batch_of(records: int, record_size: int, base_offset: int = 0) -> bytes:
    """A v2 batch of ``records`` uncompressed records with ``record_size``-byte values."""
    now = int(time.time() * 1000)
    value = os.urandom(record_size)
    return build_batch(((now, None, value, ()) for _ in range(records)), base_offset=base_offset)


def write_segment(path: Path, size: int, records_per_batch: int, record_size: int) -> int:
    """Write a segment of about ``size`` bytes of identical batches; returns record count.

    One batch is built and copied with its baseOffset patched: the CRC does not cover
    baseOffset, so every copy stays valid and generation runs at disk speed.
    """
    template = bytearray(batch_of(records_per_batch, record_size))
    chunk_batches = max(1, (8 << 20) // len(template))
    chunk = bytearray(template * chunk_batches)
    offset = 0
    written = 0
    with open(path, "wb") as f:
        while written < size:
            for i in range(chunk_batches):
                patch_base_offset(chunk, i * len(template), offset)
                offset += records_per_batch
            f.write(chunk)
            written += len(chunk)
    return offset


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def best_of(runs: int, fn: Callable[[], float]) -> float:
    """The best (smallest) of ``runs`` timings: the least disturbed by the machine."""
    return min(fn() for _ in range(runs))


def best_of_interleaved(
    runs: int, baseline: Callable[[], float], subject: Callable[[], float]
) -> tuple[float, float]:
    """The best of ``runs`` timings of each, run in turns (baseline, subject, baseline,
    ...), so a slow spell of the shared machine falls on both rather than on one."""
    base_times, subject_times = [], []
    for _ in range(runs):
        base_times.append(baseline())
        subject_times.append(subject())
    return min(base_times), min(subject_times)


@dataclass
class Result:
    name: str
    figure: float
    unit: str
    baseline: float | None = None
    target: str = ""
    ok: bool | None = None
    extra: dict[str, object] = field(default_factory=dict)

    def line(self) -> str:
        parts = [f"{self.name}: {self.figure:,.1f} {self.unit}"]
        if self.baseline is not None:
            parts.append(f"baseline {self.baseline:,.1f} {self.unit}")
            parts.append(f"ratio {self.figure / self.baseline:.0%}")
        if self.target:
            parts.append(f"target {self.target}")
        if self.ok is not None:
            parts.append("PASS" if self.ok else "MISS")
        if self.extra:
            parts.append(json.dumps(self.extra))
        return " | ".join(parts)


def report(results: list[Result]) -> None:
    for r in results:
        print(r.line(), flush=True)
