"""Produce and fetch over SASL_SSL against PLAINTEXT, on one broker, in the same run.

- throughput: librdkafka (confluent_kafka) produces 1 KiB records (acks=1, large batches)
  and then consumes them, once through the broker's PLAINTEXT listener and once through its
  SASL_SSL listener (SASL PLAIN, TLS 1.3), rounds alternating; figure: MB/s over SASL_SSL
  as a share of MB/s over PLAINTEXT, for produce and for fetch (best round each). Target:
  >= 50%.
- TLS CPU: the broker's CPU seconds per GB received over SASL_SSL, against a small Python
  process receiving the same number of bytes on a TLS socket (Python's ``ssl``, the same
  certificate) and discarding them: what any Python TLS receiver pays.

Certificates are made with the openssl command line (tests/daemon/security/certs.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import ssl
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_broker import RECORD_SIZE, process_cpu
from benchmarks.common import WORK, Result, report
from klog.testing import KlogBroker, free_port
from tests.daemon.security.certs import make_pki

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret";')


def _client(kind: str, port: int, ca: Path) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": f"127.0.0.1:{port}"}
    if kind == "sasl_ssl":
        settings.update({"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca),
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                         "sasl.password": "admin-secret"})
    return settings


def _produce(settings: dict[str, Any], topic: str, total: int, pid: int
             ) -> tuple[float, float]:
    from confluent_kafka import Producer

    producer = Producer({**settings, "acks": 1, "linger.ms": 50, "batch.size": 1 << 20,
                         "message.max.bytes": 2 << 20, "queue.buffering.max.kbytes": 256 << 10,
                         "queue.buffering.max.messages": 1_000_000})
    value = os.urandom(RECORD_SIZE)
    producer.produce(topic, value, partition=0)
    if producer.flush(30):
        raise RuntimeError("warm-up produce failed")
    cpu = process_cpu(pid)
    start = time.perf_counter()
    for _ in range(total // RECORD_SIZE):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.005)
    if producer.flush(120):
        raise RuntimeError("produce did not complete")
    return time.perf_counter() - start, process_cpu(pid) - cpu


def _consume(settings: dict[str, Any], topic: str, records: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**settings, "group.id": "bench", "enable.auto.commit": False,
                         "max.partition.fetch.bytes": 1 << 20, "fetch.max.bytes": 50 << 20})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        start = time.perf_counter()
        deadline = start + 120
        while got < records and time.perf_counter() < deadline:
            got += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
        if got < records:
            raise RuntimeError(f"consumed {got} of {records}")
        return time.perf_counter() - start
    finally:
        consumer.close()


_TLS_SINK = textwrap.dedent('''
    import os, socket, ssl, sys
    cert, port = sys.argv[1], int(sys.argv[2])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert)
    srv = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    conn, _ = srv.accept()
    tls = ctx.wrap_socket(conn, server_side=True)
    buf = bytearray(256 << 10)
    total = int(sys.argv[3])
    got = 0
    while got < total:
        n = tls.recv_into(buf)
        if not n:
            break
        got += n
    print("done", flush=True)
''')


def tls_sink_cpu(keystore: Path, ca: Path, total: int) -> float:
    """CPU seconds of a Python process receiving ``total`` bytes over TLS."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", _TLS_SINK, str(keystore), str(port),
                             str(total)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        before = process_cpu(proc.pid)
        ctx = ssl.create_default_context(cafile=str(ca))
        chunk = memoryview(os.urandom(1 << 20))
        with socket.create_connection(("127.0.0.1", port)) as raw, \
                ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            sent = 0
            while sent < total:
                n = min(len(chunk), total - sent)
                tls.sendall(chunk[:n])
                sent += n
            proc.stdout.readline()  # "done": every byte received
        return process_cpu(proc.pid) - before
    finally:
        proc.kill()
        proc.wait()


def bench(total: int, rounds: int) -> list[Result]:
    data = WORK / "security"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    pki = make_pki(data / "pki")
    plain_port, tls_port = free_port(), free_port()
    overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_SSL://127.0.0.1:{tls_port}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
    }
    rates: dict[str, dict[str, list[float]]] = {
        k: {"produce": [], "fetch": [], "cpu_per_gb": []} for k in ("plaintext", "sasl_ssl")}
    with KlogBroker(data / "broker", port=plain_port, overrides=overrides) as broker:
        pid = broker.process.pid  # type: ignore[union-attr]
        for r in range(rounds):
            for kind, port in (("plaintext", plain_port), ("sasl_ssl", tls_port)):
                settings = _client(kind, port, pki.ca_cert)
                topic = f"{kind}-{r}"
                wall, cpu = _produce(settings, topic, total, pid)
                rates[kind]["produce"].append(total / wall / 1e6)
                rates[kind]["cpu_per_gb"].append(cpu / (total / 1e9))
                rates[kind]["fetch"].append(total / _consume(settings, topic,
                                                             total // RECORD_SIZE) / 1e6)
    sink = tls_sink_cpu(pki.server_keystore, pki.ca_cert, total) / (total / 1e9)
    shutil.rmtree(data, ignore_errors=True)
    out = []
    for what in ("produce", "fetch"):
        tls, plain = max(rates["sasl_ssl"][what]), max(rates["plaintext"][what])
        out.append(Result(
            f"{what} over SASL_SSL (PLAIN, TLS), 1 KiB records, acks=1 (baseline: the same "
            f"over PLAINTEXT, same broker, rounds alternating)", tls, "MB/s", plain,
            ">= 50% of baseline", tls >= 0.5 * plain,
            {"sasl_ssl_rounds": [round(x) for x in rates["sasl_ssl"][what]],
             "plaintext_rounds": [round(x) for x in rates["plaintext"][what]]}))
    tls_cpu = min(rates["sasl_ssl"]["cpu_per_gb"])
    out.append(Result(
        "broker CPU per GB produced over SASL_SSL (baseline: a Python ssl socket receiving "
        "and discarding the same bytes)", tls_cpu, "CPU s/GB", sink, extra={
            "plaintext_cpu_per_gb": round(min(rates["plaintext"]["cpu_per_gb"]), 2)}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=256, help="MB produced per round and side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="64 MB, one round")
    args = parser.parse_args()
    mb, rounds = (64, 1) if args.quick else (args.mb, args.rounds)
    report(bench(mb << 20, rounds))


if __name__ == "__main__":
    main()
