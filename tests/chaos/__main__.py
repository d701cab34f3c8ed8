"""``python -m tests.chaos --seed N --duration SECONDS --json FILE``: one chaos run.

Prints the schedule, each nemesis event as it happens, then the per-nemesis table and the
anomalies; writes the result document to --json. Exit status: 0 no anomaly, 1 anomalies
found, 2 the harness failed, 3 the harness cannot run here (no root / no namespaces),
with the reason.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from tests.chaos import checker
from tests.chaos.nemesis import KINDS
from tests.chaos.net import unavailable_reason
from tests.chaos.runner import Options, run

EXIT_OK, EXIT_ANOMALIES, EXIT_HARNESS, EXIT_UNAVAILABLE = 0, 1, 2, 3


def _pair(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    return float(low), float(high or low)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--seed", type=int, default=None,
                        help="the schedule's seed (default: a random one, printed)")
    parser.add_argument("--duration", type=float, default=300.0,
                        help="seconds of nemesis activity (default 300)")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    parser.add_argument("--zookeepers", type=int, choices=(1, 3), default=3)
    parser.add_argument("--nemeses", default=",".join(KINDS),
                        help=f"comma-separated kinds (default all: {','.join(KINDS)})")
    parser.add_argument("--acks", choices=("all", "1"), default="all",
                        help="acks=1 reports loss as information, not failure")
    parser.add_argument("--unclean", action="store_true",
                        help="unclean.leader.election.enable=true: loss is information")
    parser.add_argument("--hold", type=_pair, default=(6.0, 15.0),
                        help="a fault holds LOW,HIGH seconds (default 6,15)")
    parser.add_argument("--quiet", type=_pair, default=(4.0, 8.0),
                        help="the quiet after a fault lasts LOW,HIGH seconds (default 4,8)")
    parser.add_argument("--rate", type=float, default=40.0,
                        help="records per second per producer (default 40)")
    parser.add_argument("--out", type=Path, default=None,
                        help="the run's directory (default: a new one under /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the logs of a passing run")
    args = parser.parse_args(argv)
    reason = unavailable_reason()
    if reason is not None:
        print(f"chaos harness cannot run here: {reason}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    nemeses = [k.strip() for k in args.nemeses.split(",") if k.strip()]
    result = run(Options(seed=seed, duration=args.duration, json_path=args.json,
                         zookeepers=args.zookeepers, nemeses=nemeses, acks=args.acks,
                         unclean=args.unclean, out=args.out, keep=args.keep,
                         hold=args.hold, quiet=args.quiet, rate=args.rate))
    if "table" in result:
        print()
        print(checker.table(result["table"]))
        print()
        print(json.dumps(result["workloads"], indent=1))
    for line in result.get("informational", []):
        print(f"info: {line}")
    for line in result.get("anomalies", []):
        print(f"ANOMALY: {line}")
    if "error" in result:
        print(f"harness error: {result['error']}", file=sys.stderr)
        print(f"seed {seed}; logs kept in {result.get('logs')}", file=sys.stderr)
        return EXIT_HARNESS
    verdict = "valid" if result["valid"] else "ANOMALIES FOUND"
    print(f"\n{verdict}: seed {seed}, {result['wall_time_s']} s"
          + (f"; logs kept in {result['logs']}" if result.get("logs") else ""))
    return EXIT_OK if result["valid"] else EXIT_ANOMALIES


if __name__ == "__main__":
    sys.exit(main())
