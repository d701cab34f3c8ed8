"""A broker killed at every step of a log cleaning and its swap, read by real consumers.

A broker cannot be killed at a chosen line of its cleaner, so the states such kills leave
are built instead, each with the broker's own code: a real broker writes the same
compacted data (plain records, tombstones, an aborted and a committed transaction) to one
topic per crash point and stops; then, in this process, ``klog.storage``'s cleaner -- the
code the broker's cleaner threads run -- cleans each topic's partition and "dies" at its
step: while writing the ``.cleaned`` segment, at each rename of the swap (``.cleaned`` ->
``.swap``, each old segment -> ``.deleted``, ``.swap`` -> live: each ``os.replace``,
whose file-system effect is exactly what a kill leaves), or just after the swap (its
``.deleted`` files and the cleaner checkpoint not yet dealt with). The dying raises
``Crash`` (a BaseException no handler catches, as for a process that is gone), and nothing
more is written: no checkpoint, no clean-shutdown marker. One broker start then recovers
every state at once, and a read_committed consumer checks every topic: each key reads as
its latest acknowledged value, every record read is the one acknowledged at its offset
(nothing duplicated, nothing aborted), and the next record goes to the old log end.

Why not an environment variable that makes the broker's cleaner exit at a named step: that
would put a test hook on the broker's storage path, and a broker restart per step (about
50 of them) costs minutes; the states built here are the same files, and one start reads
them all.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from klog.storage import checkpoints as cp
from klog.storage import cleaner as cleaning
from klog.storage.cleaner import Cleaner, LogToClean, cleanable_offsets
from klog.storage.config import LogConfig
from klog.storage.log import PartitionLog
from tests.crash.site import StandaloneSite

pytestmark = pytest.mark.timeout(240)

#: Segments as the data is written (small), and as the cleaner groups them (a few each).
WRITE_SEGMENT_BYTES = 600
CLEAN_SEGMENT_BYTES = 1800
TOPICS = 60  # crash points available; the data makes fewer (asserted)
KEYS = 6


class Crash(BaseException):
    """The process dying at that instant: no handler runs (it is not an Exception)."""


def _items() -> list[tuple[str, bytes, bytes | None]]:
    """(kind, key, value) in order: kind "plain", "abort" or "commit" (a transaction)."""
    items: list[tuple[str, bytes, bytes | None]] = []
    for n in range(60):
        # Every third record has a key of its own: its only value, in whichever segment
        # it fell, must survive (losing a segment of values compaction would remove
        # anyway is invisible to clients; losing one of these is not).
        key = b"u%02d" % n if n % 3 == 0 else b"k%d" % (n % KEYS)
        if n == 20:
            items.append(("abort", b"k1", b"aborted"))
        if n == 30:
            items.append(("commit", b"k3", b"committed"))
        # Tombstones: k2 at 44 (set again at 50), k1 at 55 (its last).
        items.append(("plain", key, None if n in (44, 55) else b"v%03d" % n))
    return items


def _produce(site: StandaloneSite, topics: list[str]) -> dict[str, dict[int, tuple[Any, Any]]]:
    """Every item to every topic, one batch per item and topic (flushed each time, so the
    topics' logs are alike byte for byte but for timestamps); what was acknowledged."""
    acked: dict[str, dict[int, tuple[Any, Any]]] = {t: {} for t in topics}

    def report(err: KafkaError | None, msg: Any) -> None:
        assert err is None, err
        acked[msg.topic()][msg.offset()] = (msg.key(), msg.value())

    plain = site.producer(**{"linger.ms": 0, "enable.idempotence": False})
    txn = site.producer(**{"transactional.id": "crash-steps", "linger.ms": 0})
    txn.init_transactions(30)
    for kind, key, value in _items():
        if kind == "plain":
            for topic in topics:
                plain.produce(topic, key=key, value=value, partition=0, on_delivery=report)
            assert plain.flush(30) == 0
            continue
        txn.begin_transaction()
        for topic in topics:
            txn.produce(topic, key=key, value=value, partition=0, on_delivery=report)
        assert txn.flush(30) == 0
        if kind == "commit":
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)
    return acked


def _clean(directory: Path, high_watermark: int | None, config: LogConfig) -> None:
    """Clean one partition as the broker's cleaner thread does (one pass over what is
    dirty). The log is not closed after: its process is "killed" right after the swap,
    before it deletes the ``.deleted`` files or writes a checkpoint."""
    log = PartitionLog(directory, config, high_watermark=high_watermark)
    offsets = cleanable_offsets(log, None, int(time.time() * 1000))
    Cleaner(1 << 20).clean(LogToClean(log, offsets.first_dirty_offset,
                                      offsets.first_uncleanable_dirty_offset))


class Steps:
    """Counts the cleaner's steps, and dies at one: step 0 is the writing of the first
    ``.cleaned`` segment (dies as its second source segment is read), steps 1..n are the
    swap's renames (``os.replace``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, die_at: int | None) -> None:
        self.renames = 0
        self.die_at = die_at
        real_replace = os.replace
        real_clean_into = cleaning._Run._clean_into
        segments_read = [0]

        def replace(src: Any, dst: Any) -> None:
            self.renames += 1
            if self.renames == self.die_at:
                raise Crash(f"killed before rename {self.renames}: {src} -> {dst}")
            real_replace(src, dst)

        def clean_into(run: Any, *args: Any, **kwargs: Any) -> None:
            segments_read[0] += 1
            if self.die_at == 0 and segments_read[0] == 2:
                raise Crash("killed while writing the .cleaned segment")
            real_clean_into(run, *args, **kwargs)

        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(cleaning._Run, "_clean_into", clean_into)


@pytest.fixture
def stopped_broker(tmp_path: Path) -> Iterator[tuple[StandaloneSite, list[str], Any]]:
    """A broker that wrote the data to TOPICS compacted topics and stopped cleanly, its
    own cleaner off (the cleanings are this test's)."""
    site = StandaloneSite(tmp_path)
    site.broker.overrides["log.cleaner.enable"] = "false"
    # One log dir (the site's brokers have two): every topic's partition in ``log_dir``.
    site.broker.overrides["log.dirs"] = str(site.broker.data_dir / "logs")
    topics = [f"crash-step-{i:02d}" for i in range(TOPICS)]
    try:
        site.start()
        futures = site.admin().create_topics([NewTopic(t, 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": str(WRITE_SEGMENT_BYTES)})
            for t in topics])
        for future in futures.values():
            future.result(30)
        acked = _produce(site, topics)
        # The cleaner groups segments by the topic's segment.bytes at cleaning time.
        resources = []
        for t in topics:
            resource = ConfigResource(ResourceType.TOPIC, t)
            resource.add_incremental_config(ConfigEntry(
                "segment.bytes", str(CLEAN_SEGMENT_BYTES),
                incremental_operation=AlterConfigOpType.SET))
            resources.append(resource)
        for future in site.admin().incremental_alter_configs(resources).values():
            future.result(30)
        site.reset_admin()
        assert site.broker.stop() == 0
        yield site, topics, acked
    finally:
        site.close()


def test_a_kill_at_every_step_of_a_clean_and_swap(
        stopped_broker: tuple[StandaloneSite, list[str], Any],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    site, topics, acked = stopped_broker
    log_dir = site.broker.log_dir
    config = LogConfig.from_properties({"cleanup.policy": "compact",
                                        "segment.bytes": str(CLEAN_SEGMENT_BYTES)})
    # (A standalone broker's partitions have no followers: their high watermark is their
    # log end, and it keeps no replication-offset-checkpoint.)
    checkpoint = log_dir / cp.REPLICATION_OFFSET_CHECKPOINT
    high_watermarks = cp.read_offset_checkpoint(checkpoint) if checkpoint.exists() else {}

    def partition(topic: str) -> Path:
        return log_dir / f"{topic}-0"

    # How many renames a whole cleaning makes (on a copy).
    scratch = tmp_path / "scratch" / f"{topics[0]}-0"
    shutil.copytree(partition(topics[0]), scratch)
    with monkeypatch.context() as m:
        counted = Steps(m, None)
        _clean(scratch, high_watermarks.get((topics[0], 0)), config)
    renames = counted.renames
    assert renames >= 12, f"only {renames} renames: the data makes too few groups"
    steps = [*range(renames + 1), None]  # 0: writing .cleaned; None: after the swap
    assert len(steps) <= TOPICS, f"{len(steps)} crash points for {TOPICS} topics"
    crashed_at: dict[str, int | None] = {}
    for topic, step in zip(topics, steps, strict=False):
        with monkeypatch.context() as m:
            Steps(m, step)
            try:
                _clean(partition(topic), high_watermarks.get((topic, 0)), config)
            except Crash:
                crashed_at[topic] = step
            else:
                assert step is None, f"{topic}: the cleaning ended before step {step}"
                crashed_at[topic] = None
    # A crash leaves no clean-shutdown marker: the next start recovers every log.
    (log_dir / cp.CLEAN_SHUTDOWN_FILE).unlink()
    left = {t: sorted(p.name for p in partition(t).iterdir()
                      if p.suffix in (".cleaned", ".swap", ".deleted")) for t in crashed_at}
    assert any(".swap" in " ".join(v) for v in left.values()), left
    print(f"{renames} renames: {len(crashed_at)} crash points")

    site.start()
    got = _read_committed(site, list(crashed_at))
    failures = []
    for topic, step in crashed_at.items():
        problem = _judge(got[topic], acked[topic])
        if problem:
            failures.append(f"{topic} (killed at step {step}, left {left[topic]}): {problem}")
    assert not failures, "\n".join(failures)
    # The next record of each goes to the old log end.
    reports: dict[str, int] = {}
    producer = site.producer()
    for topic in crashed_at:
        producer.produce(topic, key=b"k0", value=b"after", partition=0,
                         on_delivery=lambda err, msg: reports.__setitem__(msg.topic(),
                                                                          msg.offset()))
    assert producer.flush(30) == 0
    # (The data ends with plain records: the last acknowledged offset is the last one.)
    assert reports == {t: max(acked[t]) + 1 for t in crashed_at}


def _read_committed(site: StandaloneSite, topics: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    consumer = site.consumer(**{"group.id": "crash-steps", "isolation.level": "read_committed",
                                "enable.partition.eof": True})
    got: dict[str, list[tuple[Any, ...]]] = {t: [] for t in topics}
    try:
        consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
        at_end: set[str] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < len(topics):
            assert time.monotonic() < deadline, f"not at the end: {set(topics) - at_end}"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.topic())
                    continue
                raise KafkaException(msg.error())
            at_end.discard(msg.topic())
            got[msg.topic()].append((msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


def _judge(records: list[tuple[Any, ...]], acked: dict[int, tuple[Any, Any]]) -> str | None:
    """What is wrong with one topic's records, or None."""
    offsets = [r[0] for r in records]
    if offsets != sorted(set(offsets)):
        return f"offsets not ascending, each once: {offsets}"
    changed = [off for off, key, value in records if acked.get(off) != (key, value)]
    if changed:
        return f"records not as acknowledged at offsets {changed}"
    if any(value == b"aborted" for _, _, value in records):
        return "an aborted record is visible"
    latest: dict[Any, tuple[int, Any]] = {}
    for off in sorted(acked):
        key, value = acked[off]
        if value != b"aborted":
            latest[key] = (off, value)
    seen: dict[Any, tuple[int, Any]] = {}
    for off, key, value in records:
        seen[key] = (off, value)
    if seen != latest:
        return f"latest per key {seen} instead of {latest}"
    return None
