"""Run every benchmark (``make bench``); each prints figure, baseline, ratio and target.

Sizes default to the targets' (1 GiB segments); ``--quick`` runs small sizes as a smoke
test. Results of recorded runs are kept in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    quick = "--quick" in sys.argv[1:]
    runs = [
        [sys.executable, "-m", "benchmarks.bench_storage", *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_cleaner", *(["--quick"] if quick else [])],
        [
            sys.executable,
            "-m",
            "benchmarks.bench_tools",
            *(["--verify-size", str(64 << 20), "--dump-records", "200000"] if quick else []),
        ],
        [sys.executable, "-m", "benchmarks.bench_broker", *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_client", *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_authorizer", *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_groups", *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_security", *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_transactions",
         *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_cluster", *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_reassign", *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_elections", *(["--quick"] if quick else [])],
        [sys.executable, "-m", "benchmarks.bench_spark", *(["--quick"] if quick else [])],
        # klog against Apache Kafka in the same run (needs `make setup`'s Kafka class path)
        [sys.executable, "-m", "benchmarks.vs_kafka", *(["--quick"] if quick else []),
         "--json", str(ROOT / "benchmarks" / ".work" / "vs_kafka.json")],
    ]
    status = 0
    for cmd in runs:
        print(f"$ {' '.join(cmd[1:])}", flush=True)
        status |= subprocess.run(cmd, cwd=ROOT).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
