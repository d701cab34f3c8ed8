"""``klog produce`` and ``klog perf produce`` against a real klog broker; what they wrote is
read back with kafka-python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.testing import KlogBroker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    from kafka.partitioner.default import murmur2

pytestmark = pytest.mark.timeout(90)

runner = CliRunner()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    running = KlogBroker(tmp_path_factory.mktemp("klog") / "data",
                         overrides={"num.partitions": "3"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _read(broker: KlogBroker, topic: str, count: int) -> list[Any]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap_servers,
                                   consumer_timeout_ms=5000, enable_auto_commit=False)
    try:
        tps = [kafka.TopicPartition(topic, p) for p in range(3)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = []
        for msg in consumer:
            got.append(msg)
            if len(got) >= count:
                break
        return got
    finally:
        consumer.close()


def test_lines_from_a_file_with_keys_headers_and_offsets(broker: KlogBroker,
                                                         tmp_path: Path) -> None:
    source = tmp_path / "lines.txt"
    source.write_bytes(b"k1:v1\nk2:v:2\nno key\n\n\xff\x00binary:x\nlast line")
    result = runner.invoke(app, [
        "produce", "lines", "-b", broker.bootstrap_servers, "-f", str(source),
        "-K", ":", "-H", "a=b", "-H", "empty=", "--print-offsets"])
    assert result.exit_code == 0, result.output
    printed = [line.split("\t") for line in result.stdout.splitlines()]
    assert len(printed) == 6 and all(t == "lines" for t, _, _ in printed)
    got = _read(broker, "lines", 6)
    by_value = {m.value: m for m in got}
    assert set(by_value) == {b"v1", b"v:2", b"no key", b"", b"x", b"last line"}
    assert by_value[b"v1"].key == b"k1" and by_value[b"v:2"].key == b"k2"
    assert by_value[b"no key"].key is None and by_value[b""].key is None
    assert by_value[b"x"].key == b"\xff\x00binary"
    assert all(list(m.headers) == [("a", b"b"), ("empty", b"")] for m in got)
    # Keyed records are where the Java partitioner puts them, and printed where written.
    assert by_value[b"v1"].partition == (murmur2(b"k1") & 0x7FFFFFFF) % 3
    assert sorted((int(p), int(o)) for _, p, o in printed) == sorted(
        (m.partition, m.offset) for m in got)


def test_stdin_partition_compression_acks_and_json(broker: KlogBroker) -> None:
    env = {**os.environ, "KLOG_BOOTSTRAP_SERVER": broker.bootstrap_servers}
    proc = subprocess.run(
        [sys.executable, "-m", "klog", "produce", "piped", "-p", "2", "-z", "zstd",
         "--acks", "1", "-v", "--json"],
        input=b"".join(b"record %d\n" % i for i in range(100)),
        capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [
        ("piped", 2, i) for i in range(100)]
    got = _read(broker, "piped", 100)
    assert [m.value for m in got] == [b"record %d" % i for i in range(100)]


def test_acks_zero_prints_unknown_offsets(broker: KlogBroker, tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.write_bytes(b"a\nb\n")
    result = runner.invoke(app, ["produce", "fire", "-b", broker.bootstrap_servers, "-f",
                                 str(source), "--acks", "0", "-p", "0", "-v"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["fire\t0\t-1", "fire\t0\t-1"]


@pytest.mark.parametrize("args", [
    ["-H", "novalue"],
    ["-X", "no.such.property=1"],
    ["-X", "linger.ms=soon"],
    ["-z", "brotli"],
    ["--acks", "2"],
    ["-f", "/nonexistent/file"],
])
def test_usage_errors(broker: KlogBroker, args: list[str]) -> None:
    result = runner.invoke(app, ["produce", "t", "-b", broker.bootstrap_servers, *args])
    assert result.exit_code == 2
    assert "error:" in result.output
    assert "Traceback" not in result.output


def test_unreachable_broker_is_one_error_line(tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.write_bytes(b"a\n")
    result = runner.invoke(app, ["produce", "t", "-b", "127.0.0.1:1", "-f", str(source)])
    assert result.exit_code == 1
    assert "error:" in result.output and "Traceback" not in result.output


def test_perf_produce_text_and_json(broker: KlogBroker) -> None:
    result = runner.invoke(app, [
        "perf", "produce", "--topic", "perf", "--num-records", "2000", "--record-size", "100",
        "-b", broker.bootstrap_servers, "-X", "linger.ms=2", "-X", "acks=1"])
    assert result.exit_code == 0, result.output
    last = result.stdout.splitlines()[-1]
    assert last.startswith("2000 records sent, ")
    for part in ("records/sec", "MB/sec", "ms avg latency", "ms max latency", "ms 50th",
                 "ms 99th"):
        assert part in last
    result = runner.invoke(app, [
        "perf", "produce", "--topic", "perf", "--num-records", "300", "--record-size", "10",
        "--throughput", "1000", "-b", broker.bootstrap_servers, "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout)
    assert stats["records"] == 300 and stats["errors"] == 0
    assert stats["seconds"] >= 0.25  # throttled to 1000 records/s
    assert stats["p50_ms"] <= stats["p99_ms"] <= stats["max_latency_ms"]
    got = _read(broker, "perf", 2300)
    assert len(got) == 2300
    assert {len(m.value) for m in got} == {100, 10}
    assert all(m.key is None and m.value.isalpha() and m.value.isupper() for m in got)


def test_perf_produce_usage_errors(broker: KlogBroker) -> None:
    result = runner.invoke(app, ["perf", "produce", "--topic", "p", "--num-records", "1",
                                 "--record-size", "1", "--throughput", "0"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["perf", "produce", "--topic", "p", "--num-records", "1",
                                 "--record-size", "1", "-X", "bogus"])
    assert result.exit_code == 2


def test_kafka_spelling_of_producer_properties(broker: KlogBroker, tmp_path: Path) -> None:
    config = tmp_path / "producer.properties"
    config.write_text("# as kafka-console-producer reads it\nlinger.ms=1\nacks=1\n")
    source = tmp_path / "lines"
    source.write_text("a\nb\n")
    result = runner.invoke(app, [
        "produce", "spelled", "-b", broker.bootstrap_servers, "-f", str(source),
        "--producer.config", str(config), "--producer-property", "compression.type=lz4"])
    assert result.exit_code == 0, result.output
    assert [m.value for m in _read(broker, "spelled", 2)] == [b"a", b"b"]
    result = runner.invoke(app, [
        "perf", "produce", "--topic", "spelled-perf", "--num-records", "50",
        "--record-size", "10", "-b", broker.bootstrap_servers, "--producer.config",
        str(config), "--producer-props", "batch.size=1000", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["records"] == 50
    bad = tmp_path / "bad.properties"
    bad.write_text("no.such.producer.thing=1\n")
    result = runner.invoke(app, ["produce", "spelled", "-b", broker.bootstrap_servers,
                                 "-f", str(source), "--producer.config", str(bad)])
    assert result.exit_code == 2 and "unknown producer property" in result.output
    result = runner.invoke(app, ["produce", "spelled", "-b", broker.bootstrap_servers,
                                 "--producer.config", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "cannot read" in result.output
