"""spark-export throughput against two baselines on the same rows, in the same run.

A klog broker gets N records (keys, 100-byte values, 4 partitions) from confluent-kafka's
producer. Then, each timed on its own:

1. ``klog spark-export`` offline (the broker's log directory) and live (Fetch through klog's
   client), Parquet, local[2] Spark; the SparkSession is started before the clock runs,
   as it is shared by all Spark figures. Every figure is the best of ``--repeat`` runs.
2. Spark writing the same rows from an in-memory DataFrame (cached and counted before the
   clock starts) to Parquet: what Spark itself costs; target: export >= 50% of it.
3. A straightforward script: confluent-kafka consumer -> Python lists -> pyarrow Table ->
   Parquet; target: export faster than it.

With ``--cold`` every klog export runs as ``klog spark-export --json`` in a process of its
own -- a new JVM whose first job it is, as a user's run is -- and its figure is the
``seconds`` that command reports (Spark start-up excluded, reported beside it); the
in-memory baseline then gets a JVM of its own too, started after the exports. Without
``--cold`` the exports share this process's JVM: with ``--repeat 1`` only the offline export
is a first job. ``--driver-memory`` (default 4g) goes to every JVM as
``spark.driver.memory``: the in-memory baseline holds all N rows in the driver (at 5M rows
the default 1 GiB runs out).

    python -m benchmarks.bench_spark [--records N] [--master local[2]] [--repeat N] [--cold]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klog import testing
from klog.spark.arrow import arrow_schema
from klog.spark.export import ExportConfig, run_export, spark_session

TOPIC = "bench"
PARTITIONS = 4


def produce(bootstrap: str, n: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "batch.size": 1 << 20, "compression.type": "lz4"})
    value = os.urandom(100)
    for i in range(n):
        while True:
            try:
                producer.produce(TOPIC, key=b"key-%d" % i, value=value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(60) == 0


def confluent_to_parquet(bootstrap: str, n: int, path: Path) -> float:
    began = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench",
                         "enable.auto.commit": False, "fetch.max.bytes": 50 << 20})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    cols: dict[str, list[Any]] = {name: [] for name in arrow_schema(False).names}
    got = 0
    while got < n:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error():
                continue
            ts_type, ts = msg.timestamp()
            cols["key"].append(msg.key())
            cols["value"].append(msg.value())
            cols["topic"].append(msg.topic())
            cols["partition"].append(msg.partition())
            cols["offset"].append(msg.offset())
            cols["timestamp"].append(ts * 1000)
            cols["timestampType"].append(ts_type - 1)
            got += 1
    consumer.close()
    table = pa.Table.from_pydict(cols, schema=arrow_schema(False))
    pq.write_table(table, path, compression="snappy")
    return time.perf_counter() - began


def spark_in_memory(spark: Any, rows: pa.Table, path: Path) -> float:
    df = spark.createDataFrame(rows).cache()
    df.count()
    began = time.perf_counter()
    df.write.parquet(str(path))
    took = time.perf_counter() - began
    df.unpersist()
    return took


def _best(results: dict[str, float], name: str, seconds: float) -> None:
    results[name] = min(results.get(name, seconds), seconds)


def export_cold(args: argparse.Namespace, output: Path, source: list[str]) -> dict[str, Any]:
    """``klog spark-export --json`` in a new process (a new JVM): what a user's run costs."""
    cmd = [sys.executable, "-m", "klog", "spark-export", *source, "--topic", TOPIC,
           "--output", str(output), "--master", args.master,
           "--conf", f"spark.driver.memory={args.driver_memory}", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs")
    parser.add_argument("--quick", action="store_true", help="100,000 records")
    parser.add_argument("--cold", action="store_true",
                        help="each klog export in a new process (a new JVM), as a user runs it")
    parser.add_argument("--driver-memory", default="4g",
                        help="spark.driver.memory of every JVM (default 4g)")
    args = parser.parse_args()
    n = 100_000 if args.quick else args.records
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="klog-bench-spark-"))
    conf = {"spark.driver.memory": args.driver_memory}
    # Warm mode: one JVM for everything, started before any clock runs. Cold mode: the
    # exports start their own; this one is started after them for the in-memory baseline.
    spark = None if args.cold else spark_session(args.master, conf)
    startups: list[float] = []
    try:
        with testing.broker() as broker:
            produce(broker.bootstrap_servers, n)
            results: dict[str, float] = {}
            # Each figure is the best of --repeat runs: the first run of a Spark job pays
            # for JIT warm-up and Python worker start-up, which a long export amortises.
            for i in range(args.repeat):
                if args.cold:
                    for name, where, source in (
                            ("offline (log dir)", "offline", ["--source", str(broker.log_dir)]),
                            ("live (Fetch)", "live",
                             ["--bootstrap-server", broker.bootstrap_servers])):
                        got = export_cold(args, work / f"{where}{i}", source)
                        assert got["rows"] == n, got["rows"]
                        _best(results, f"klog spark-export, {name}", got["seconds"])
                        startups.append(got["spark_startup_seconds"])
                else:
                    t = time.perf_counter()
                    offline = run_export(ExportConfig(output=str(work / f"offline{i}"),
                                                      source=str(broker.log_dir),
                                                      topics=[TOPIC]), spark=spark)
                    _best(results, "klog spark-export, offline (log dir)",
                          time.perf_counter() - t)
                    assert offline.rows == n, offline.rows
                    t = time.perf_counter()
                    live = run_export(ExportConfig(output=str(work / f"live{i}"),
                                                   bootstrap_server=broker.bootstrap_servers,
                                                   topics=[TOPIC]), spark=spark)
                    _best(results, "klog spark-export, live (Fetch)", time.perf_counter() - t)
                    assert live.rows == n, live.rows
                _best(results, "confluent-kafka -> pyarrow -> Parquet", confluent_to_parquet(
                    broker.bootstrap_servers, n, work / "confluent.parquet"))
        rows = pq.read_table(work / "confluent.parquet")
        if spark is None:
            spark = spark_session(args.master, conf)
        for i in range(args.repeat):
            _best(results, "Spark, in-memory DataFrame -> Parquet", spark_in_memory(
                spark, rows, work / f"inmemory{i}"))
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    mode = ("cold: each export a new JVM's first job" if args.cold
            else f"one JVM, best of {args.repeat}")
    print(f"{n:,} records, 4 partitions, keys + 100-byte values, Parquet, {args.master}, "
          f"driver memory {args.driver_memory}, {mode}")
    if startups:
        print(f"  (Spark start-up per export, not in the figures: "
              f"{', '.join(f'{s:.1f}' for s in startups)} s)")
    rates = {name: n / seconds for name, seconds in results.items()}
    for name, rate in rates.items():
        print(f"  {name:45s} {results[name]:7.2f} s  {rate:11,.0f} rows/s")
    spark_rate = rates["Spark, in-memory DataFrame -> Parquet"]
    script_rate = rates["confluent-kafka -> pyarrow -> Parquet"]
    for name in ("klog spark-export, offline (log dir)", "klog spark-export, live (Fetch)"):
        ratio = rates[name] / spark_rate
        print(f"  {name}: {ratio:.0%} of Spark in-memory (target >= 50%: "
              f"{'met' if ratio >= 0.5 else 'missed'}), {rates[name] / script_rate:.2f}x the "
              f"confluent script (target > 1: {'met' if rates[name] > script_rate else 'missed'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
