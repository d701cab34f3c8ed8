"""Tests for klog/cli/compact.py: ``klog compact`` options, output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from klog.cli.app import app
from klog.cli.compact import local_topic_configs
from klog.daemon.metastore.local import LocalMetadataStore
from klog.storage.log_manager import LogManager
from tests.tools.test_compact import COMPACT, DELETE, make_log_dir, records
from tests.zkserver import ZooKeeperServer, zk_server  # noqa: F401 - the fixture

runner = CliRunner()


def write_topic_configs(log_dir: Path, configs: dict[str, dict[str, str]], *,
                        snapshot_bytes: int = 1 << 20) -> None:
    """Topic configs as a standalone broker keeps them (its metastore beside the data)."""
    store = LocalMetadataStore(log_dir / ".klog-metastore", snapshot_bytes=snapshot_bytes)
    store.start()
    try:
        for topic, config in configs.items():
            data = json.dumps({"version": 1, "config": config}).encode()
            store.create(f"/config/topics/{topic}", data, make_parents=True)
    finally:
        store.close()


def test_json_summary_per_partition(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "logs", {"changelog": COMPACT, "events": DELETE})
    result = runner.invoke(app, ["compact", str(log_dir), "--topic", "changelog", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    parts = {p["partition"]: p for p in doc["partitions"]}
    assert parts["changelog-0"]["records_removed"] > 0
    assert parts["events-0"]["skipped"] == "not a compacted topic"
    assert doc["bytes_after"] < doc["bytes_before"]
    assert doc["records_removed"] == parts["changelog-0"]["records_removed"]


def test_configs_come_from_the_standalone_metadata(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "logs", {"changelog": DELETE, "events": DELETE})
    # The first session's config ends in the snapshot (tiny snapshot size), the second's
    # in the journal after it.
    write_topic_configs(log_dir, {"changelog": {"cleanup.policy": "compact"}}, snapshot_bytes=64)
    write_topic_configs(log_dir, {"events": {"retention.ms": "1000"}})
    assert (log_dir / ".klog-metastore" / "snapshot").stat().st_size > 8
    assert (log_dir / ".klog-metastore" / "journal").stat().st_size > 8
    assert local_topic_configs(log_dir) == {
        "changelog": {"cleanup.policy": "compact"}, "events": {"retention.ms": "1000"}
    }
    before = len(records(log_dir / "changelog-0"))
    result = runner.invoke(app, ["compact", str(log_dir)])
    assert result.exit_code == 0, result.output
    assert "changelog-0" in result.stdout and "events-0" not in result.stdout
    assert "1 partitions compacted" in result.stdout
    assert len(records(log_dir / "changelog-0")) < before


def test_configs_come_from_zookeeper(
    tmp_path: Path, zk_server: ZooKeeperServer  # noqa: F811 - the imported fixture
) -> None:
    from kazoo.client import KazooClient

    chroot = "/compact-test"
    client = KazooClient(hosts=zk_server.connect)
    client.start(timeout=15)
    try:
        client.create(f"{chroot}/config/topics/changelog", makepath=True,
                      value=json.dumps({"version": 1,
                                        "config": {"cleanup.policy": "compact"}}).encode())
    finally:
        client.stop()
        client.close()
    log_dir = make_log_dir(tmp_path / "logs", {"changelog": DELETE, "events": DELETE})
    result = runner.invoke(app, ["compact", str(log_dir), "--zookeeper-connect",
                                 zk_server.connect + chroot, "--json"])
    assert result.exit_code == 0, result.output
    parts = {p["partition"]: p for p in json.loads(result.stdout)["partitions"]}
    assert parts["changelog-0"]["records_removed"] > 0
    assert parts["events-0"]["skipped"] == "not a compacted topic"


def test_dry_run_says_so_and_changes_nothing(tmp_path: Path) -> None:
    log_dir = make_log_dir(tmp_path / "logs", {"changelog": COMPACT})
    before = {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()}
    result = runner.invoke(app, ["compact", str(log_dir), "--topic", "changelog",
                                 "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "dry run" in result.stdout and "would be compacted" in result.stdout
    assert {p: p.read_bytes() for p in log_dir.rglob("*") if p.is_file()} == before


def test_errors_are_one_line_and_exit_non_zero(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["compact", str(tmp_path / "empty")])
    assert result.exit_code == 2
    assert "error:" in result.stderr and "Traceback" not in result.output
    log_dir = make_log_dir(tmp_path / "logs", {"changelog": COMPACT})
    with LogManager([log_dir]):
        result = runner.invoke(app, ["compact", str(log_dir), "--topic", "changelog"])
    assert result.exit_code == 1
    assert "running" in result.stderr


def test_a_stopped_klog_broker_compacted_then_started_again(tmp_path: Path) -> None:
    """End to end: a real standalone broker writes a compacted topic (its config in the
    broker's own metadata) with confluent-kafka, stops cleanly; ``klog compact`` cleans it;
    the broker starts again on the dir and a consumer from the beginning sees one record
    per key, the latest."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from klog.testing import KlogBroker

    # The broker's own cleaner stays off: the offline tool is what is tested.
    broker = KlogBroker(tmp_path / "data", overrides={"log.roll.ms": "600000",
                                                      "log.cleaner.enable": "false"})
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        futures = admin.create_topics([NewTopic(
            "state", num_partitions=1, replication_factor=1,
            config={"cleanup.policy": "compact", "segment.bytes": "2000"},
        )])
        futures["state"].result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
        for n in range(300):
            producer.produce("state", key=b"k%d" % (n % 10), value=b"v%d" % n)
            if n % 20 == 0:
                producer.flush(30)
        producer.produce("state", key=b"k0", value=None)  # a tombstone
        assert producer.flush(30) == 0
        broker.stop()
        result = runner.invoke(app, ["compact", str(broker.log_dir), "--json"])
        assert result.exit_code == 0, result.output
        parts = {p["partition"]: p for p in json.loads(result.stdout)["partitions"]}
        part = parts["state-0"]
        # Everything below the active segment (where the batches fell decides how much):
        # at most one record per key kept there, the rest removed.
        assert part["records_kept"] <= 10
        assert part["records_removed"] == part["records_read"] - part["records_kept"]
        assert part["records_removed"] >= 150
        broker.start()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe(["state"])
        seen: list[tuple[bytes | None, bytes | None]] = []
        try:
            while len(seen) < 301:
                msg = consumer.poll(5)
                if msg is None:
                    break
                if msg.error() is None:
                    seen.append((msg.key(), msg.value()))
        finally:
            consumer.close()
    latest = dict(seen)
    assert latest == {b"k0": None} | {b"k%d" % k: b"v%d" % (290 + k) for k in range(1, 10)}
    # Cleaned below the active segment: what was kept there, then the active segment whole.
    assert len(seen) == part["records_kept"] + 301 - part["next_dirty_offset"] < 301
