"""Client benchmarks: klog's producer against confluent-kafka's in the same run.

- produce: ``klog perf produce``'s measurement (klog.client.producer.measure_produce, the
  same code the command runs) sends N records of 1 KiB to a one-partition topic of a real
  klog broker, then a confluent_kafka (librdkafka) producer sends the same N records to a
  second topic of the same broker. Both use the same settings: acks=1, linger.ms 5 and
  batch.size 1,000,000 (librdkafka's defaults; klog's batch.size default is the Java
  producer's 16 KiB, so ``--batch-size 16384`` compares at that size). Each runs in a
  fresh child process, one at a time, so neither pays for the other. Figure: records/s;
  target: klog >= 50% of confluent-kafka. Rounds alternate
  the two sides and each side's best round is compared (a shared machine's busy moment
  then disturbs neither side alone).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

from benchmarks.common import Result, report
from klog.testing import KlogBroker

RECORD_SIZE = 1024

_KLOG = textwrap.dedent("""
    import asyncio, json, sys
    from klog.client.producer import measure_produce
    bootstrap, topic, n, size, props = sys.argv[1], sys.argv[2], int(sys.argv[3]), \\
        int(sys.argv[4]), json.loads(sys.argv[5])
    result = asyncio.run(measure_produce(bootstrap, topic, n, size, **props))
    print(json.dumps({"records_per_sec": result["records_per_sec"],
                      "errors": result["errors"]}))
""")

_CONFLUENT = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import Producer
    bootstrap, topic, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    errors = 0
    def done(err, msg):
        global errors
        if err is not None:
            errors += 1
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                         "batch.size": int(sys.argv[5]), "client.id": "bench-confluent"})
    producer.list_topics(topic, timeout=10)
    start = time.monotonic()
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=done)
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    producer.flush(60)
    elapsed = time.monotonic() - start
    print(json.dumps({"records_per_sec": n / elapsed, "errors": errors}))
""")


def _run(script: str, *args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", script, *args], check=True,
                         capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_produce(broker: KlogBroker, records: int, rounds: int, batch_size: int) -> Result:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    topics = [f"bench-{side}-{batch_size}-{i}" for i in range(rounds)
              for side in ("klog", "confluent")]
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(30)
    klog_rates: list[float] = []
    confluent_rates: list[float] = []
    props = json.dumps({"acks": 1, "linger_ms": 5, "batch_size": batch_size})
    for i in range(rounds):
        k = _run(_KLOG, broker.bootstrap_servers, f"bench-klog-{batch_size}-{i}", str(records),
                 str(RECORD_SIZE), props)
        c = _run(_CONFLUENT, broker.bootstrap_servers, f"bench-confluent-{batch_size}-{i}",
                 str(records), str(RECORD_SIZE), str(batch_size))
        if k["errors"] or c["errors"]:
            raise SystemExit(f"delivery errors: klog {k['errors']}, confluent {c['errors']}")
        klog_rates.append(k["records_per_sec"])
        confluent_rates.append(c["records_per_sec"])
    best_klog, best_confluent = max(klog_rates), max(confluent_rates)
    return Result(
        f"perf produce, {records:,} x 1 KiB records, acks=1, batch.size {batch_size:,} "
        "(klog producer vs confluent-kafka)",
        best_klog, "records/s", baseline=best_confluent,
        target=">= 50% of confluent-kafka", ok=best_klog >= 0.5 * best_confluent,
        extra={"klog_rounds": [round(r) for r in klog_rates],
               "confluent_rounds": [round(r) for r in confluent_rates]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, action="append",
                        help="batch.size of both producers (repeatable; default 1000000)")
    args = parser.parse_args()
    records, rounds = (20_000, 1) if args.quick else (args.records, args.rounds)
    with KlogBroker() as broker:
        report([bench_produce(broker, records, rounds, size)
                for size in args.batch_size or [1_000_000]])


if __name__ == "__main__":
    main()
