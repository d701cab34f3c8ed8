"""The on-disk side of the differential test: the same produce sequence written to klog and
to Apache Kafka, then their log dirs compared structurally.

The sequence (over the wire, the same bytes to both): plain batches over several segments,
batches in each codec, transactions committed and aborted, and a compacted topic cleaned
once it is all written (its min.compaction.lag.ms lowered only then, so each broker cleans
the same segments in one go). Both brokers are then stopped cleanly and each partition's
files are read with klog's own ``dump-segment --json`` (segments with every record,
indexes, time indexes, transaction indexes, producer snapshots), the leader epoch
checkpoint, and the log dir's offset checkpoints; producer ids and the brokers' own
timestamps are normalised as the protocol test does (harness.py). Of the compacted topic
only the batches and records are compared: how the cleaner grouped its segments depends
on when its passes ran.

What differs is listed in README's "Answers that differ from Apache Kafka 4.1" under cases
named ``On disk: <what>``; this test keeps that list honest as test_protocol.py does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from klog.protocol.records.batch import CompressionType
from klog.protocol.records.v2 import build_batch
from klog.storage.checkpoints import read_offset_checkpoint
from tests.differential.conftest import Pair, start_pair
from tests.differential.corpus import (
    BASE_TS,
    create_topic,
    create_topics,
    init_producer_id,
    produce,
    records,
)
from tests.differential.harness import (
    Side,
    differences,
    is_now,
    matching,
    normalise,
    wait_for,
)
from tests.differential.test_protocol import DUMP, accepted

SEGMENT = 1 << 20  # Kafka 4's smallest segment.bytes
TOPICS: dict[str, dict[str, str]] = {
    "disk-plain": {"segment.bytes": str(SEGMENT)},
    "disk-codecs": {},
    "disk-txn": {},
    "disk-compact": {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT),
                     "min.cleanable.dirty.ratio": "0.01",
                     # nothing is cleanable until the whole sequence is written
                     "min.compaction.lag.ms": str(24 * 3600 * 1000)},
}
#: The brokers' settings for this module: a cleaner that looks often.
OVERRIDES = {"log.cleaner.backoff.ms": "500"}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    """Both brokers after the sequence, stopped cleanly."""
    pair = start_pair(tmp_path_factory.mktemp("on-disk"), OVERRIDES, OVERRIDES)
    def write_and_clean(side: Side) -> None:
        _write(side)
        _clean(side, _log_dir(pair, side.name))

    try:
        # each side on its own (their states depend on their own answers alone)
        with ThreadPoolExecutor(2, thread_name_prefix="on-disk") as pool:
            for done in [pool.submit(write_and_clean, side) for side in pair.sides()]:
                done.result()
    finally:
        pair.klog.stop()
        pair.kafka.stop()
    yield pair


def _produce(side: Side, values: Any, what: str) -> None:
    """One Produce, sent again while its partition answers a retriable error (Kafka's
    replica manager may take over a new partition after its metadata names the leader)."""
    deadline = time.monotonic() + 30
    while True:
        response = side.call(0, 9, values)
        (p,) = [p for t in response.responses for p in t.partition_responses]
        if int(p.error_code) not in (5, 6, 7) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert p.error_code == 0, f"{side.name}: {what}: {p}"


def _write(side: Side) -> None:
    r = side.call(19, 7, create_topics(*(create_topic(name, 1, configs=configs)
                                         for name, configs in TOPICS.items())))
    assert all(t.error_code == 0 for t in r.topics), f"{side.name}: {r}"
    wait_for(f"{side.name}: the topics", lambda: all(
        t.error_code == 0 and t.partitions and t.partitions[0].leader_id >= 0
        for t in side.call(3, 12, {"topics": [{"name": n} for n in TOPICS],
                                   "allow_auto_topic_creation": False,
                                   "include_topic_authorized_operations": False}).topics))
    # plain: ~2.5 MB in 1 MiB segments (indexes every 4 KiB)
    for i in range(120):
        _produce(side, produce("disk-plain", 0, records(
            20, f"plain-{i}", value_size=1000), acks=-1), "plain")
    # each codec, a few times over
    for i in range(4):
        for codec in (CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY,
                      CompressionType.LZ4, CompressionType.ZSTD):
            _produce(side, produce("disk-codecs", 0, records(
                15, f"codec-{i}-{int(codec)}", compression=codec, value_size=300),
                acks=-1), "codecs")
    # transactions: committed and aborted in turn, each of three batches
    # the coordinator first, as a producer finds it (this creates __transaction_state)
    _retry(lambda: side.call(10, 3, {"key": "disk-txn-id", "key_type": 1}), timeout=60)
    r = _retry(lambda: side.call(22, 4, init_producer_id("disk-txn-id")), timeout=60)
    pid, epoch = r.producer_id, r.producer_epoch
    for i in range(6):
        _retry(lambda: side.call(24, 3, {
            "v3_and_below_transactional_id": "disk-txn-id", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "disk-txn", "partitions": [0]}]}))
        for b in range(3):
            _produce(side, produce("disk-txn", 0, records(
                4, f"txn-{i}-{b}", producer_id=pid, producer_epoch=epoch,
                base_sequence=12 * i + 4 * b, transactional=True), acks=-1,
                transactional_id="disk-txn-id"), "transactional")
        _retry(lambda i=i: side.call(26, 3, {"transactional_id": "disk-txn-id",
                                             "producer_id": pid, "producer_epoch": epoch,
                                             "committed": i % 2 == 0}))
        wait_for(f"{side.name}: transaction {i} complete", lambda: side.call(
            65, 0, {"transactional_ids": ["disk-txn-id"]}).transaction_states[0]
            .transaction_state in ("CompleteCommit", "CompleteAbort"))
    # compacted: 200 keys overwritten, some deleted (tombstones), over several segments
    for i in range(90):
        keyed = records(30, f"compact-{i}", value_size=1000)
        _produce(side, produce("disk-compact", 0, keyed, acks=-1), "compact")
    _produce(side, produce("disk-compact", 0, _tombstones(), acks=-1), "tombstones")


def _tombstones() -> bytes:
    return build_batch((BASE_TS + i, f"k{i}".encode(), None, ()) for i in range(2))


def _retry(call: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        r = call()
        code = int(getattr(r, "error_code", 0))
        for t in getattr(r, "results_by_topic_v3_and_below", ()):
            code = code or max(int(p.partition_error_code) for p in t.results_by_partition)
        if code not in (14, 15, 16, 51) or time.monotonic() > deadline:
            assert code == 0, f"{r}"
            return r
        time.sleep(0.1)


def _clean(side: Side, log_dir: Path) -> None:
    """Let the compacted topic be cleaned (its lag lowered now that all is written) and
    wait until the cleaner has cleaned it (its checkpoint names the partition)."""
    r = side.call(44, 1, {"resources": [{"resource_type": 2, "resource_name": "disk-compact",
                                         "configs": [{"name": "min.compaction.lag.ms",
                                                      "config_operation": 0, "value": "0"}]}],
                          "validate_only": False})
    assert r.responses[0].error_code == 0, r
    checkpoint = log_dir / "cleaner-offset-checkpoint"

    def cleaned() -> bool:
        return checkpoint.exists() and read_offset_checkpoint(checkpoint).get(
            ("disk-compact", 0), 0) > 0

    wait_for(f"{side.name}: disk-compact cleaned", cleaned, timeout=120)


def _log_dir(pair: Pair, name: str) -> Path:
    return pair.klog.log_dir if name == "klog" else pair.kafka.nodes[0].log_dir


def _cleaned(pair: Pair) -> None:
    """Each broker's cleaner checkpoint names disk-compact (read after the stop: the
    broker writes it as it cleans and again at shutdown)."""
    for name in ("klog", "kafka"):
        path = _log_dir(pair, name) / "cleaner-offset-checkpoint"
        assert path.exists() and ("disk-compact", 0) in read_offset_checkpoint(path), \
            f"{name} never cleaned disk-compact"


def _dump(files: list[Path]) -> list[dict[str, Any]]:
    if not files:
        return []
    done = subprocess.run([sys.executable, "-m", "klog", "dump-segment", "--json",
                           "--deep-iteration", "--print-data-log", *map(str, files)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _structure(side: Side, log_dir: Path) -> dict[str, Any]:
    """What is compared of one broker's log dir, by case name."""
    out: dict[str, Any] = {}
    # One dump-segment for every file (a process per file cost most of the test's time).
    wanted = [f for topic in TOPICS
              for suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
              for f in sorted((log_dir / f"{topic}-0").glob(f"*{suffix}"))]
    by_file: dict[str, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] = []
    for e in _dump(wanted):
        if e.get("type") == "file":
            current = by_file.setdefault(str(e.get("path")), [])
        current.append(e)
    missing = [str(f) for f in wanted if str(f) not in by_file]
    assert not missing, f"{side.name}: dump-segment named none of {missing[:3]}"
    for topic in TOPICS:
        directory = log_dir / f"{topic}-0"
        # The compacted topic: which segments the cleaner merged depends on when each of its
        # passes ran (two runs of Kafka itself left different layouts), so its batches and
        # records are compared, not its files or where in them they lie.
        compacted = topic == "disk-compact"
        if not compacted:
            out[f"On disk: {topic} files"] = sorted(p.name for p in directory.iterdir())
        for suffix in (".log",) if compacted else (".log", ".index", ".timeindex",
                                                   ".txnindex", ".snapshot"):
            files = sorted(directory.glob(f"*{suffix}"))
            entries = [e for f in files for e in by_file.get(str(f), [])]
            for e in entries:
                e.pop("path", None)
                if compacted:
                    e.pop("position", None)
                if e.get("type") == "batch" and is_now(e.get("maxTimestamp")):
                    # a transaction marker: its timestamp is each broker's clock, and the
                    # CRC covers it
                    e["crc"] = "<covers the broker's clock>"
            if compacted:
                entries = [e for e in entries if e.get("type") in ("batch", "record")]
            out[f"On disk: {topic} {suffix}"] = normalise(side, entries)
        checkpoint = directory / "leader-epoch-checkpoint"
        out[f"On disk: {topic} leader-epoch-checkpoint"] = \
            checkpoint.read_text().split("\n") if checkpoint.exists() else None
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                 "log-start-offset-checkpoint", "cleaner-offset-checkpoint"):
        path = log_dir / name
        entries = read_offset_checkpoint(path) if path.exists() else {}
        out[f"On disk: {name}"] = {f"{t}-{p}": o for (t, p), o in sorted(entries.items())
                                   if t in TOPICS}
    return out


@pytest.mark.timeout(600)
def test_the_logs_are_kafkas(written: Pair) -> None:
    _cleaned(written)
    klog_side, kafka_side = written.sides()
    ours = _structure(klog_side, _log_dir(written, "klog"))
    theirs = _structure(kafka_side, _log_dir(written, "kafka"))
    if DUMP:
        Path(DUMP + ".disk.json").write_text(json.dumps({"klog": ours, "kafka": theirs},
                                                        indent=1, default=repr))
    listed = accepted()
    found = {name: differences(ours[name], theirs[name]) for name in ours}
    found = {name: diff for name, diff in found.items() if diff}
    unlisted = {name: diff for name, diff in found.items() if not matching(listed, name)}
    stale = [p for entry in listed for p in entry.patterns if p.startswith("On disk:")
             and not any(entry.matches(n) for n in found)]
    report = [f"{len(found)} of {len(ours)} on-disk comparisons differ"]
    for name, diff in unlisted.items():
        report.append(f"- {name}:")
        report += [f"    {path}: klog {a!r} / kafka {b!r}" for path, a, b in diff[:8]]
    report += [f"- README lists `{p}`, which no longer differs" for p in stale]
    assert not unlisted and not stale, "\n".join(report)
