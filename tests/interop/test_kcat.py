"""kcat (the command-line client on librdkafka) against one klog broker, via subprocess:
metadata listing, producing from stdin with keys, headers and codecs, consuming with
JSON envelopes from the beginning, the end and a timestamp, and offset queries."""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from klog.protocol.records.batch import CompressionType
from klog.testing import KlogBroker
from tests.interop.conftest import KCAT, stored_batches

pytestmark = pytest.mark.timeout(60)


def _librdkafka_version() -> tuple[int, ...]:
    out = subprocess.run([KCAT, "-V"], capture_output=True, timeout=10, check=True).stdout
    found = re.search(rb"librdkafka (\d+)\.(\d+)\.(\d+)", out)
    assert found is not None, out
    return tuple(int(x) for x in found.groups())


def _codec_librdkafka_sends(codec: str) -> CompressionType:
    """What kcat's librdkafka really sends when asked for ``codec``: the codec itself.
    Before 2.12 librdkafka checks gzip, snappy and lz4 against Produce v0 (and lz4 also
    against FindCoordinator, its proxy for "Kafka 0.8.2 or later"); with a broker whose
    floor is Produce v3 (Kafka 4.0) it sends them uncompressed. klog serves Produce from v0,
    as Kafka 3.x does, so every librdkafka compresses as asked."""
    return CompressionType[codec.upper()]


def kcat(bootstrap: str, *args: str, stdin: bytes | None = None,
         timeout: float = 20.0) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run([KCAT, "-b", bootstrap, "-m", "10", *args], input=stdin,
                            capture_output=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result


def consume_json(bootstrap: str, topic: str, *args: str) -> list[dict[str, Any]]:
    """Every message of partition 0 from the given start (``-o ...`` in ``args``) to the
    end, as kcat's JSON envelopes."""
    out = kcat(bootstrap, "-C", "-t", topic, "-p", "0", "-e", "-J", *args).stdout
    return [json.loads(line) for line in out.decode().splitlines() if line.strip()]


def test_metadata_listing(bootstrap: str, broker: KlogBroker, topic: str) -> None:
    # Producing to a new topic creates it.
    kcat(bootstrap, "-P", "-t", topic, "-p", "0", stdin=b"hello\n")
    listing = json.loads(kcat(bootstrap, "-L", "-J").stdout)
    assert listing["brokers"] == [{"id": 0, "name": f"127.0.0.1:{broker.port}"}]
    assert listing["controllerid"] == 0
    [entry] = [t for t in listing["topics"] if t["topic"] == topic]
    assert entry["partitions"] == [
        {"partition": 0, "leader": 0, "replicas": [{"id": 0}], "isrs": [{"id": 0}]}]
    one = json.loads(kcat(bootstrap, "-L", "-J", "-t", topic).stdout)
    assert [t["topic"] for t in one["topics"]] == [topic]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume(bootstrap: str, broker: KlogBroker, topic: str, codec: str) -> None:
    lines = [f"key{i}:" + f"payload-{i} " * (i % 9 + 1) for i in range(100)]
    lines[7] = "key7:"  # empty value, sent as NULL (-Z)
    stdin = ("\n".join(lines) + "\n").encode()
    kcat(bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-Z", "-z", codec,
         "-H", "source=kcat", "-H", "empty=", "-X", "linger.ms=50", stdin=stdin)
    got = consume_json(bootstrap, topic, "-o", "beginning")
    assert [m["offset"] for m in got] == list(range(100))
    for i, (line, msg) in enumerate(zip(lines, got, strict=True)):
        key, _, value = line.partition(":")
        assert msg["key"] == key
        assert msg["payload"] == (None if i == 7 else value)
        assert msg["headers"] == ["source", "kcat", "empty", ""]
        assert msg["tstype"] == "create"
    expected = _codec_librdkafka_sends(codec)
    codecs = {b.compression for b in stored_batches(broker.log_dir, topic)}
    assert expected in codecs and codecs <= {expected, CompressionType.NONE}


def test_consume_from_end_and_relative(bootstrap: str, topic: str) -> None:
    kcat(bootstrap, "-P", "-t", topic, "-p", "0",
         stdin=b"".join(b"m%d\n" % i for i in range(10)))
    assert consume_json(bootstrap, topic, "-o", "end") == []
    tail = consume_json(bootstrap, topic, "-o", "-3")
    assert [(m["offset"], m["payload"]) for m in tail] == [(7, "m7"), (8, "m8"), (9, "m9")]
    from_five = consume_json(bootstrap, topic, "-o", "5", "-c", "2")
    assert [m["payload"] for m in from_five] == ["m5", "m6"]


def test_timestamps_query_and_consume(bootstrap: str, topic: str) -> None:
    base_ts = int(time.time() * 1000) - 3_600_000
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(30):
        producer.produce(topic, value=f"v{i}".encode(), timestamp=base_ts + 1000 * i)
    assert producer.flush(20) == 0
    # -Q: the offset of the first record at or after a timestamp
    out = kcat(bootstrap, "-Q", "-t", f"{topic}:0:{base_ts + 12_500}").stdout.decode()
    assert f"{topic} [0] offset 13" in out
    got = consume_json(bootstrap, topic, "-o", f"s@{base_ts + 20_000}")
    assert [(m["offset"], m["ts"]) for m in got] == [(i, base_ts + 1000 * i)
                                                     for i in range(20, 30)]
    until = consume_json(bootstrap, topic, "-o", "beginning", "-o", f"e@{base_ts + 3_000}")
    assert [m["payload"] for m in until] == ["v0", "v1", "v2"]
