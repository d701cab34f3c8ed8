"""Transactional produce against a real klog broker, with its baseline in the same run.

- throughput: librdkafka (confluent_kafka) sends 1 KiB records with acks=all to a
  3-partition topic, in transactions of 1,000 records (begin, produce, commit), and
  figure: records/s. Baseline: the same producer idempotent but not transactional
  (acks=all, same batching), over the same number of records, rounds alternating with the
  transactional ones (best of the rounds each); the baseline flushes every 1,000 records,
  as a commit does, so the ratio is the transactions' own cost. Target: >= 70%.
- commit latency: the time of each ``commit_transaction()`` (the EndTxn round trip: the
  coordinator writes PrepareCommit with acks=all, the markers, CompleteCommit), p50 and
  p99 over the transactions of all rounds. Reported, no target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid

from benchmarks.common import Result, report
from klog.testing import KlogBroker

RECORD_SIZE = 1024
PARTITIONS = 3


def _producer(bootstrap: str, transactional: bool):  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    settings = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                "linger.ms": 5, "batch.size": 1 << 20, "compression.type": "none"}
    if transactional:
        settings["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    producer = Producer(settings)
    if transactional:
        producer.init_transactions(30)
    return producer


def _round(bootstrap: str, topic: str, records: int, per_txn: int, transactional: bool
           ) -> tuple[float, list[float]]:
    """(records/s, commit latencies in ms) of one round."""
    producer = _producer(bootstrap, transactional)
    value = os.urandom(RECORD_SIZE)
    commits: list[float] = []
    sent = 0
    start = time.perf_counter()
    while sent < records:
        if transactional:
            producer.begin_transaction()
        for _ in range(min(per_txn, records - sent)):
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.01)
            sent += 1
        if transactional:
            t0 = time.perf_counter()
            producer.commit_transaction(30)
            commits.append((time.perf_counter() - t0) * 1000)
        else:
            # The same cadence without a transaction: wait for the 1,000 records (what a
            # commit waits for too), so the difference is the transaction's own cost.
            producer.flush(30)
    if producer.flush(60):
        raise RuntimeError("records left undelivered")
    elapsed = time.perf_counter() - start
    return records / elapsed, commits


def bench(records: int, per_txn: int, rounds: int) -> list[Result]:
    from confluent_kafka.admin import AdminClient, NewTopic

    with KlogBroker() as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("txn-bench", PARTITIONS, 1)])["txn-bench"].result(30)
        _round(bootstrap, "txn-bench", per_txn, per_txn, True)  # warm-up: __transaction_state
        txn_rates, idem_rates, commits = [], [], []
        for _ in range(rounds):
            rate, _ = _round(bootstrap, "txn-bench", records, per_txn, False)
            idem_rates.append(rate)
            rate, latencies = _round(bootstrap, "txn-bench", records, per_txn, True)
            txn_rates.append(rate)
            commits += latencies
    commits.sort()

    def pct(q: float) -> float:
        return commits[min(len(commits) - 1, int(q * len(commits)))]

    best_txn, best_idem = max(txn_rates), max(idem_rates)
    return [
        Result(f"transactional produce, 1 KiB records, transactions of {per_txn:,}, acks=all "
               f"(baseline: idempotent, not transactional)", best_txn, "records/s", best_idem,
               ">= 70% of baseline", best_txn >= 0.7 * best_idem,
               {"transactional_rounds": [round(r) for r in txn_rates],
                "idempotent_rounds": [round(r) for r in idem_rates]}),
        Result("commit_transaction latency p50", pct(0.5), "ms", extra={
            "p99_ms": round(pct(0.99), 2), "max_ms": round(commits[-1], 2),
            "commits": len(commits), "median_ms": round(statistics.median(commits), 2)}),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--per-transaction", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 records, one round")
    args = parser.parse_args()
    records, rounds = (20_000, 1) if args.quick else (args.records, args.rounds)
    report(bench(records, args.per_transaction, rounds))


if __name__ == "__main__":
    main()
