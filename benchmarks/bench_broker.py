"""Broker benchmarks against a real klog broker process, each with a baseline in the same run.

- produce: 1 KiB records to one partition, acks=1, librdkafka (confluent_kafka) with large
  batches (linger.ms 50, batch.size 1 MiB, no compression). Figure: the broker process's CPU
  seconds per GB appended, against a raw socket-to-file sink -- a small Python process doing
  ``recv_into`` + ``os.write`` of the same number of bytes sent over loopback -- measured
  the same way (target <= 3x). MB/s is reported too.
- fetch: a confluent_kafka consumer reads the partition the produce run filled. Figure: the
  broker's CPU seconds per GB served, against a raw ``sendfile`` loop process serving the
  same segment files over loopback in chunks of the consumer's fetch size (target <= 3x).
- latency: p99 produce latency at 10k msg/s of 1 KiB records, acks=1, linger.ms=0 (a paced
  producer; latency is librdkafka's ``Message.latency()``, produce() to the delivery
  report -- which reaches the application at its next poll, so up to one 1 ms tick more
  than the broker's round trip) (target <= 5 ms). Ten rounds of 6 s, each after a round
  of the same harness against the floor server (benchmarks/latency_floor.c: native code
  that reads Produce requests, appends their batches to a file and answers -- the least
  any broker does). Each round reports the host's steal time (/proc/stat), which the tail
  follows on a shared virtual machine, for the floor as for klog: at 5% and more even the
  floor's p99 passes 5 ms. So the rounds are summed up by bands of steal (each side's
  median p99 among its rounds at < 2%, 2-5%, >= 5%), and the figure is klog's median p99
  among the rounds at < 2% (the baseline: the floor's, same band) -- the broker's figure,
  not the host's. With fewer than two such rounds there is no verdict ("host too busy");
  the median over all rounds is always shown too (``all_rounds``).
- start-up: time from starting ``klog broker start`` to its port accepting connections,
  several runs on an empty data directory (target <= 1 s); and once with 1,000 partitions.
- idle: RSS and open file descriptors of an idle broker hosting 1,000 partitions, next to
  those of an idle broker with none (report only).
- metrics (``--only metrics``): the produce figure with metrics on (metrics.http.listener
  set) against a broker with metrics off, both running, rounds alternating between them.
  Twice: with the produce benchmark's large batches (1 MiB, few requests) and with small
  ones (batch.size 16 KiB, linger.ms 0: ~16 records a request, where per-request counting
  costs the most). Target: metrics on within 5% of off. Then the cost of a scrape apart:
  the metrics broker's CPU over back-to-back GETs of /metrics once it hosts the rounds'
  topics (report only; at Prometheus' usual 15 s interval it is that divided by 15 s).

CPU is read from /proc/<pid>/stat (utime + stime of every thread of the process, in clock
ticks) just before and just after the measured traffic; neither side fsyncs, and both write
to the same file system (the page cache). Clients run in this process; their CPU is not
counted on either side. The sink reads 256 KiB per call, as asyncio's transport does for
the broker. Produce and fetch run in rounds (one topic each), each round followed by its
baseline, and each side's best round is compared, as the storage benchmarks take the best
of their runs: a busy moment of a shared machine then disturbs neither side alone. What a
broker pays once in its life is left out of the measured windows: the first produce and
the first fetch (which load their entity classes) happen before, as does one unmeasured
start-up that compiles the bytecode cache.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import WORK, Result, report
from klog.testing import KlogBroker

RECORD_SIZE = 1024
FETCH_SIZE = 1 << 20  # the consumer's max.partition.fetch.bytes; the baseline's sendfile size
SINK_BUFFER = 256 << 10  # asyncio's socket read size; the sink reads as much per call
_TICK = os.sysconf("SC_CLK_TCK")

# Children run from cached bytecode, as an installed klog does (a session that sets
# PYTHONDONTWRITEBYTECODE would recompile on every start and bill it to the broker).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process ``pid`` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)


def process_status(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open file descriptors) of ``pid``."""
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def _log_bytes(broker: KlogBroker, topic: str, partition: int = 0) -> int:
    directory = broker.log_dir / f"{topic}-{partition}"
    return sum(p.stat().st_size for p in directory.glob("*.log"))


def _segments(broker: KlogBroker, topic: str, partition: int = 0) -> list[Path]:
    return sorted((broker.log_dir / f"{topic}-{partition}").glob("*.log"))


# --- baselines: small processes measured from outside, like the broker --------------------

_SINK = """
import os, socket, sys
path, size = sys.argv[1], int(sys.argv[2])
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
buf = bytearray(size)
view = memoryview(buf)
while n := conn.recv_into(buf):
    os.write(fd, view[:n])
os.close(fd)
print("done", flush=True)
sys.stdin.read()
"""

_SENDFILE = """
import os, socket, sys
chunk, paths = int(sys.argv[1]), sys.argv[2:]
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
for path in paths:
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    offset = 0
    while offset < size:
        offset += os.sendfile(conn.fileno(), fd, offset, min(chunk, size - offset))
    os.close(fd)
conn.shutdown(socket.SHUT_WR)
print("done", flush=True)
sys.stdin.read()
"""


class _Helper:
    """A baseline process: prints its port, serves one connection, prints done, then waits
    for stdin to close (so that its /proc entry is still there to be read)."""

    def __init__(self, code: str, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", code, *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def wait_done(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "done":
            raise RuntimeError(f"baseline process failed ({line!r})")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(10)


def warm_memory(size: int) -> None:
    """Write and delete ``size`` bytes of file, so that the page-cache pages both sides
    write into have been touched before (on a VM, a guest page's first use costs several
    times a reuse, and would be billed to whichever side ran first)."""
    path = WORK / "warm.bin"
    chunk = bytes(8 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for _ in range(max(1, size // len(chunk))):
            os.write(fd, chunk)
    finally:
        os.close(fd)
        path.unlink()


def raw_sink_cpu(total: int) -> float:
    """CPU seconds of a recv_into + write loop process receiving ``total`` bytes."""
    path = WORK / "sink.bin"
    sink = _Helper(_SINK, str(path), str(SINK_BUFFER))
    try:
        before = process_cpu(sink.proc.pid)
        chunk = memoryview(os.urandom(FETCH_SIZE))
        with socket.create_connection(("127.0.0.1", sink.port)) as sock:
            sent = 0
            while sent < total:
                n = min(len(chunk), total - sent)
                sock.sendall(chunk[:n])
                sent += n
        sink.wait_done()
        cpu = process_cpu(sink.proc.pid) - before
    finally:
        sink.close()
        path.unlink(missing_ok=True)
    return cpu


def raw_sendfile_cpu(paths: list[Path]) -> tuple[float, int]:
    """CPU seconds of a sendfile loop process serving ``paths``, and the bytes received."""
    server = _Helper(_SENDFILE, str(FETCH_SIZE), *map(str, paths))
    try:
        before = process_cpu(server.proc.pid)
        buf = bytearray(1 << 20)
        received = 0
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            while n := sock.recv_into(buf):
                received += n
        server.wait_done()
        cpu = process_cpu(server.proc.pid) - before
    finally:
        server.close()
    return cpu, received


# --- produce and fetch --------------------------------------------------------------------


def _producer(broker: KlogBroker, **settings: Any) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": 1,
                     "compression.type": "none", **settings})


def produce_bytes(broker: KlogBroker, topic: str, total: int,
                  settings: dict[str, Any] | None = None,
                  cpu_clock: Callable[[int], float] | None = None) -> tuple[float, float, int]:
    """Produce ``total`` bytes of 1 KiB records -> (broker CPU s, wall s, bytes appended).
    ``settings`` override the producer's (large batches by default); ``cpu_clock`` reads
    the broker's CPU seconds (``process_cpu`` by default)."""
    clock = cpu_clock or process_cpu
    producer = _producer(broker, **{
        "linger.ms": 50,
        "batch.size": 1 << 20,
        "message.max.bytes": 2 << 20,
        "queue.buffering.max.kbytes": 256 << 10,
        "queue.buffering.max.messages": 1_000_000,
        **(settings or {}),
    })
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    value = os.urandom(RECORD_SIZE)
    producer.produce(topic, value, partition=0, on_delivery=delivered)  # creates the topic
    if producer.flush(30) or failures:
        raise RuntimeError(f"warm-up produce failed: {failures[:3]}")
    pid = broker.process.pid  # type: ignore[union-attr]
    log_before = _log_bytes(broker, topic)
    cpu_before = clock(pid)
    start = time.perf_counter()
    produce = producer.produce
    for _ in range(total // RECORD_SIZE):
        while True:
            try:
                produce(topic, value, partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(120):
        raise RuntimeError("produce did not complete within 120 s")
    wall = time.perf_counter() - start
    cpu = clock(pid) - cpu_before
    if failures:
        raise RuntimeError(f"{len(failures)} records failed: {failures[:3]}")
    return cpu, wall, _log_bytes(broker, topic) - log_before


def _consumer(broker: KlogBroker) -> Any:
    from confluent_kafka import Consumer

    return Consumer({
        "bootstrap.servers": broker.bootstrap_servers,
        "group.id": "bench",
        "enable.auto.commit": False,
        "max.partition.fetch.bytes": FETCH_SIZE,
        "fetch.max.bytes": 50 << 20,
    })


def consume_all(broker: KlogBroker, topic: str, records: int) -> tuple[float, float]:
    """Consume ``records`` records from offset 0 -> (broker CPU s, wall s)."""
    from confluent_kafka import TopicPartition

    # Warm-up, unmeasured: the first fetch loads the Fetch entities (a one-off ~0.1 s that
    # a broker pays once in its life, not per GB).
    consumer = _consumer(broker)
    try:
        consumer.assign([TopicPartition(topic, 0, records - 1)])
        deadline = time.monotonic() + 30
        while not any(m.error() is None for m in consumer.consume(1, 0.5)):
            if time.monotonic() > deadline:
                raise RuntimeError("warm-up consume got nothing within 30 s")
    finally:
        consumer.close()
    consumer = _consumer(broker)
    try:
        pid = broker.process.pid  # type: ignore[union-attr]
        cpu_before = process_cpu(pid)
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        deadline = time.monotonic() + 120
        while got < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {got} of {records} records within 120 s")
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is None:
                    got += 1
        wall = time.perf_counter() - start
        cpu = process_cpu(pid) - cpu_before
    finally:
        consumer.close()
    return cpu, wall


def bench_produce_fetch(total: int, rounds: int) -> list[Result]:
    """Produce ``total`` bytes in ``rounds`` topics, then consume each; every figure is the
    best of its rounds, the broker's as its baselines' (each baseline runs right after the
    broker's round of the same kind), so that a busy moment of a shared machine disturbs
    neither side's figure alone."""
    data = WORK / "broker"
    shutil.rmtree(data, ignore_errors=True)
    warm_memory(2 * total)
    part = total // rounds
    records = part // RECORD_SIZE + 1  # + the warm-up record
    produced: list[tuple[float, float, int]] = []
    sinks: list[float] = []
    fetched: list[tuple[float, float]] = []
    sendfiles: list[tuple[float, int]] = []
    with KlogBroker(data / "data") as broker:
        topics = [f"bench-{i}" for i in range(rounds)]
        for topic in topics:
            produced.append(produce_bytes(broker, topic, part))
            sinks.append(raw_sink_cpu(produced[-1][2]))
        for topic in topics:
            fetched.append(consume_all(broker, topic, records))
            sendfiles.append(raw_sendfile_cpu(_segments(broker, topic)))
    shutil.rmtree(data, ignore_errors=True)
    cpu_per_gb = min(cpu / (size / 1e9) for cpu, _wall, size in produced)
    sink_per_gb = min(cpu / (size / 1e9) for cpu, (_c, _w, size) in zip(sinks, produced,
                                                                      strict=True))
    appended = sum(size for _c, _w, size in produced)
    mb_s = max(size / 1e6 / wall for _cpu, wall, size in produced)
    produce = Result(
        f"produce, 1 KiB records, acks=1 ({rounds} x {appended / rounds / 1e6:,.0f} MB)",
        cpu_per_gb, "CPU s/GB", sink_per_gb, "<= 3x raw recv+write sink",
        cpu_per_gb <= 3 * sink_per_gb,
        {"MB/s": round(mb_s, 1), "ratio_x": round(cpu_per_gb / max(sink_per_gb, 1e-9), 2),
         "broker_s_per_gb_rounds": [round(c / (z / 1e9), 2) for c, _w, z in produced],
         "sink_s_per_gb_rounds": [round(c / (z / 1e9), 2)
                                  for c, (_a, _b, z) in zip(sinks, produced, strict=True)]},
    )
    served = [size for _cpu, size in sendfiles]
    fetch_per_gb = min(cpu / (size / 1e9) for (cpu, _wall), size in zip(fetched, served,
                                                                       strict=True))
    raw_per_gb = min(cpu / (size / 1e9) for cpu, size in sendfiles)
    mb_s = max(size / 1e6 / wall for (_cpu, wall), size in zip(fetched, served, strict=True))
    fetch = Result(
        f"fetch, confluent_kafka consumer ({rounds} x {sum(served) / rounds / 1e6:,.0f} MB)",
        fetch_per_gb, "CPU s/GB", raw_per_gb, "<= 3x raw sendfile loop",
        fetch_per_gb <= 3 * raw_per_gb,
        {"MB/s": round(mb_s, 1), "ratio_x": round(fetch_per_gb / max(raw_per_gb, 1e-9), 2),
         "broker_s_per_gb_rounds": [round(c / (z / 1e9), 2)
                                    for (c, _w), z in zip(fetched, served, strict=True)],
         "sendfile_s_per_gb_rounds": [round(c / (z / 1e9), 2) for c, z in sendfiles]},
    )
    return [produce, fetch]


# --- metrics on vs off ---------------------------------------------------------------------

#: The producer settings of the small-batch case: one request per ~16 records.
SMALL_BATCHES = {"linger.ms": 0, "batch.size": 16 << 10}


def threads_cpu(pid: int) -> float:
    """CPU seconds the live threads of ``pid`` have run, in nanoseconds' precision
    (/proc/<pid>/task/*/schedstat) rather than /proc/<pid>/stat's 10 ms ticks: the metrics
    comparison looks for differences of a few percent of rounds of a few hundred ms. A
    thread that ended is left out (none does while a broker appends)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended meanwhile
    return total / 1e9


def scrape_cost(broker: KlogBroker, url: str, scrapes: int) -> tuple[float, int]:
    """The broker's CPU seconds per GET of /metrics (``scrapes`` back to back), and the
    size of one answer."""
    import urllib.request

    pid = broker.process.pid  # type: ignore[union-attr]
    size = 0
    before = process_cpu(pid)
    for _ in range(scrapes):
        with urllib.request.urlopen(url, timeout=10) as resp:
            size = len(resp.read())
    return (process_cpu(pid) - before) / scrapes, size


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_metrics_cost(total: int, rounds: int) -> list[Result]:
    """Produce CPU per GB, metrics on against metrics off, in alternating rounds on two
    brokers running side by side; for large and for small batches. Each side's best round
    is its figure (as bench_produce_fetch does)."""
    data = WORK / "metrics"
    shutil.rmtree(data, ignore_errors=True)
    warm_memory(total)
    port = _free_port()
    results: list[Result] = []
    with KlogBroker(data / "off") as off, \
            KlogBroker(data / "on", overrides={"metrics.http.listener": f"127.0.0.1:{port}"}
                       ) as on:
        for case, settings, size in (("large batches (1 MiB)", None, total),
                                     ("small batches (16 KiB, linger.ms 0)", SMALL_BATCHES,
                                      total // 2)):
            part = size // rounds
            per_gb: dict[str, list[float]] = {"off": [], "on": []}
            steal_before, ticks_before = cpu_steal()
            load = os.getloadavg()[0]
            for i in range(rounds):
                for name, broker in (("off", off), ("on", on)):
                    topic = f"m-{name}-{len(results)}-{i}"
                    cpu, _wall, appended = produce_bytes(broker, topic, part, settings,
                                                         threads_cpu)
                    per_gb[name].append(cpu / (appended / 1e9))
            best_on, best_off = min(per_gb["on"]), min(per_gb["off"])
            steal, ticks = cpu_steal()
            steal_pct = 100 * (steal - steal_before) / max(1, ticks - ticks_before)
            results.append(Result(
                f"produce CPU per GB with metrics on, {case} ({rounds} x "
                f"{part / 1e6:,.0f} MB each side)",
                best_on, "CPU s/GB", best_off, "<= 1.05x metrics off",
                best_on <= 1.05 * best_off,
                {"on_rounds": [round(x, 3) for x in per_gb["on"]],
                 "off_rounds": [round(x, 3) for x in per_gb["off"]],
                 "ratio_x": round(best_on / best_off, 3), "steal_pct": round(steal_pct, 1),
                 "load_at_start": round(load, 1)}))
        per_scrape, size = scrape_cost(on, f"http://127.0.0.1:{port}/metrics", 200)
        results.append(Result(
            f"one scrape of /metrics ({size:,} bytes, {2 * rounds} topics hosted)",
            per_scrape * 1000, "CPU ms", None, "report", None,
            {"core_share_at_15s": round(per_scrape / 15, 5)}))
    shutil.rmtree(data, ignore_errors=True)
    return results


# --- latency ------------------------------------------------------------------------------


def bench_latency(rate: int, seconds: float, rounds: int) -> Result:
    """klog's rounds alternate with rounds against the native floor server (same harness,
    same host, minutes apart): the floor's p99 is what the host allows any broker."""
    from benchmarks.floor import FloorServer

    data = WORK / "latency"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    with KlogBroker(data / "data") as broker, FloorServer(data) as floor:
        sides = {"klog": _PacedProducer(broker.bootstrap_servers, broker.process.pid),
                 "floor": _PacedProducer(floor.bootstrap_servers, floor.process.pid)}
        measured: dict[str, list[dict[str, float]]] = {"klog": [], "floor": []}
        for _ in range(rounds):
            for side in ("floor", "klog"):
                measured[side].append(sides[side].round(rate, seconds))
        for side in sides.values():
            side.close()
        sides.clear()
    shutil.rmtree(data, ignore_errors=True)
    by_steal = _by_steal(measured)
    quiet = by_steal[_band_name(*STEAL_BANDS[0])]
    klog_quiet, floor_quiet = quiet["klog"], quiet["floor"]
    extra = {
        "all_rounds": {side: statistics.median(r["p99_ms"] for r in rounds)
                       for side, rounds in measured.items()},
        "by_steal": by_steal, "rounds": measured["klog"], "floor_rounds": measured["floor"],
    }
    name = (f"p99 produce latency, {rate:,} msg/s of 1 KiB, acks=1, linger.ms=0 (median of "
            f"the rounds at < {STEAL_BANDS[0][1]:g}% host steal; baseline: the native floor "
            f"server's)")
    if klog_quiet["rounds"] < 2:
        # Too few rounds on a quiet host to judge the broker: no verdict, all figures shown.
        return Result(name + f" -- host too busy: {klog_quiet['rounds']} such round(s)",
                      extra["all_rounds"]["klog"], "ms", extra["all_rounds"]["floor"],
                      "<= 5 ms", None, extra)
    p99 = klog_quiet["median_p99_ms"]
    return Result(name, p99, "ms", floor_quiet["median_p99_ms"], "<= 5 ms", p99 <= 5.0, extra)


# Bands of host steal time (% of all CPU time, /proc/stat) the rounds are summed up by. An
# idle VM here shows 0-2%; the verdict is taken in the first band, where the figure is the
# broker's rather than the host's.
STEAL_BANDS = ((0.0, 2.0), (2.0, 5.0), (5.0, 100.0))


def _band_name(low: float, high: float) -> str:
    return f"steal {low:g}-{high:g}%"


def _by_steal(measured: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, Any]]:
    """Each side's median p99 over its rounds in each band of host steal time: on a shared
    VM the tail follows steal, so like is compared with like."""
    bands: dict[str, dict[str, Any]] = {}
    for low, high in STEAL_BANDS:
        band: dict[str, Any] = {}
        for side, rounds in measured.items():
            p99s = [r["p99_ms"] for r in rounds if low <= r["steal_pct"] < high]
            band[side] = {"rounds": len(p99s),
                          "median_p99_ms": statistics.median(p99s) if p99s else None}
        bands[_band_name(low, high)] = band
    return bands


def cpu_steal() -> tuple[int, int]:
    """(steal ticks, all ticks) of the machine so far, from /proc/stat: time a virtual
    CPU was ready to run but the host ran something else."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    return fields[7], sum(fields)


class _PacedProducer:
    """A producer sending ``rate`` records/s in 1 ms ticks to partition 0 of "latency" on
    one server (process ``pid``), a round at a time."""

    def __init__(self, bootstrap_servers: str, pid: int) -> None:
        from confluent_kafka import Producer

        self.pid = pid
        self.producer = Producer({"bootstrap.servers": bootstrap_servers, "acks": 1,
                                  "compression.type": "none", "linger.ms": 0})
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.value = os.urandom(RECORD_SIZE)
        self.producer.produce("latency", self.value, partition=0, on_delivery=self._delivered)
        if self.producer.flush(30) or self.failures:
            raise RuntimeError(f"warm-up produce failed: {self.failures[:3]}")

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(str(err))
        else:
            self.latencies.append(msg.latency())

    def round(self, rate: int, seconds: float) -> dict[str, float]:
        producer, value, delivered = self.producer, self.value, self._delivered
        self.latencies.clear()
        total = int(rate * seconds)
        cpu_before = process_cpu(self.pid)
        steal_before, ticks_before = cpu_steal()
        sent = 0
        start = time.perf_counter()
        # Paced in 1 ms ticks: every tick sends the records whose time has come.
        while sent < total:
            due = min(total, int((time.perf_counter() - start) * rate) + 1)
            while sent < due:
                producer.produce("latency", value, partition=0, on_delivery=delivered)
                sent += 1
            producer.poll(0)
            time.sleep(0.001)
        elapsed = time.perf_counter() - start
        producer.flush(30)
        cpu = process_cpu(self.pid) - cpu_before
        steal, ticks = cpu_steal()
        if self.failures:
            raise RuntimeError(f"{len(self.failures)} records failed: {self.failures[:3]}")
        ms = sorted(x * 1000 for x in self.latencies)

        def pct(q: float) -> float:
            return ms[min(len(ms) - 1, int(q * len(ms)))]

        return {
            "p50_ms": round(pct(0.5), 2), "p99_ms": round(pct(0.99), 2),
            "p99.9_ms": round(pct(0.999), 2), "max_ms": round(ms[-1], 2),
            "achieved_msg_s": round(sent / elapsed), "server_cpu_share": round(cpu / elapsed, 2),
            "steal_pct": round(100 * (steal - steal_before) / max(1, ticks - ticks_before), 1),
            "records": len(ms),
        }

    def close(self) -> None:
        """Flush and destroy the producer while its server is still up (a producer left
        alive would log failed reconnects once the server stops)."""
        self.producer.flush(10)
        del self.producer


# --- start-up and idle --------------------------------------------------------------------


def bench_startup(runs: int) -> Result:
    times = []
    for i in range(-1, runs):  # run -1 warms the bytecode cache, as an install has it
        data = WORK / f"startup-{i}"
        shutil.rmtree(data, ignore_errors=True)
        broker = KlogBroker(data / "data")
        start = time.perf_counter()
        broker.start()
        if i >= 0:
            times.append(time.perf_counter() - start)
        broker.close()
        shutil.rmtree(data, ignore_errors=True)
    worst = max(times)
    return Result(
        f"start-up to open port, empty data dir ({runs} runs, worst)", worst * 1000, "ms",
        None, "<= 1 s", worst <= 1.0,
        {"median_ms": round(statistics.median(times) * 1000),
         "runs_ms": [round(t * 1000) for t in times]},
    )


def _wait_for_partitions(broker: KlogBroker, topic: str, count: int, timeout: float) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and len(meta.partitions) == count and all(
                p.leader >= 0 for p in meta.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{topic} did not get {count} partitions with leaders in {timeout} s")


def bench_idle(partitions: int, settle: float) -> list[Result]:
    data = WORK / "idle"
    shutil.rmtree(data, ignore_errors=True)
    with KlogBroker(data / "empty") as empty:
        time.sleep(settle)
        base_rss, base_fds = process_status(empty.process.pid)  # type: ignore[union-attr]
    broker = KlogBroker(data / "data", overrides={"num.partitions": partitions})
    with broker:
        producer = _producer(broker)
        producer.produce("idle", b"x", partition=0)  # auto-creates the topic
        if producer.flush(60):
            raise RuntimeError("could not create the idle topic")
        del producer
        _wait_for_partitions(broker, "idle", partitions, 120)
        time.sleep(settle)
        pid = broker.process.pid  # type: ignore[union-attr]
        cpu_before = process_cpu(pid)
        time.sleep(settle)
        idle_cpu = (process_cpu(pid) - cpu_before) / settle
        rss, fds = process_status(pid)
        broker.stop()
        start = time.perf_counter()
        broker.start()
        restart = time.perf_counter() - start
    shutil.rmtree(data, ignore_errors=True)
    return [
        Result(f"idle broker, {partitions:,} partitions: RSS", rss / 1024, "MiB",
               base_rss / 1024, "report", None,
               {"open_fds": fds, "open_fds_no_partitions": base_fds,
                "idle_cpu_share": round(idle_cpu, 3)}),
        Result(f"start-up to open port, {partitions:,} partitions", restart * 1000, "ms",
               None, "report", None),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, a smoke test")
    parser.add_argument("--only", choices=["throughput", "latency", "startup", "idle",
                                           "metrics"],
                        action="append", help="run only these (repeatable)")
    args = parser.parse_args()
    only = set(args.only or ["throughput", "latency", "startup", "idle", "metrics"])
    WORK.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    if "throughput" in only:
        if args.quick:
            results += bench_produce_fetch(256 << 20, rounds=2)
        else:
            results += bench_produce_fetch(3 << 29, rounds=3)  # 3 x 512 MiB
        report(results[-2:])
    if "latency" in only:
        results.append(bench_latency(10_000, 3.0 if args.quick else 6.0,
                                     1 if args.quick else 10))
        report(results[-1:])
    if "startup" in only:
        results.append(bench_startup(3 if args.quick else 7))
        report(results[-1:])
    if "idle" in only:
        idle = bench_idle(1000, 1.0 if args.quick else 3.0)
        results += idle
        report(idle)
    if "metrics" in only:
        cost = bench_metrics_cost(128 << 20 if args.quick else 2 << 30,
                                  rounds=2 if args.quick else 10)
        results += cost
        report(cost)
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
