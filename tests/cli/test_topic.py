"""`klog topic` as a user runs it, against a real klog broker (one per module)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.testing import KlogBroker, free_port

pytestmark = pytest.mark.timeout(90)

KLOG = [sys.executable, "-m", "klog"]
runner = CliRunner()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    with KlogBroker(tmp_path_factory.mktemp("cli-topic")) as b:
        yield b


class Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def klog(broker: KlogBroker | None, *args: str) -> Result:
    """Run a command in-process (CliRunner: no interpreter start-up per call)."""
    env = {"KLOG_BOOTSTRAP_SERVER": broker.bootstrap_servers if broker else None,
           "COLUMNS": "200"}
    result = runner.invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Result(result.exit_code, result.stdout, result.stderr)


def one_error_line(result: Result | subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_create_list_describe_delete(broker: KlogBroker) -> None:
    created = klog(broker, "topic", "create", "cli-a", "cli-b", "-p", "3", "-r", "1",
                   "-c", "retention.ms=123456")
    assert created.returncode == 0, created.stderr
    assert created.stdout.split() == ["TOPIC", "STATUS", "cli-a", "OK", "cli-b", "OK"]

    again = klog(broker, "topic", "create", "cli-a", "--json")
    assert again.returncode == 1
    (row,) = json.loads(again.stdout)
    assert row["topic"] == "cli-a" and row["error"].startswith("TOPIC_ALREADY_EXISTS")
    assert klog(broker, "topic", "create", "cli-a", "--if-not-exists").returncode == 0
    dry = klog(broker, "topic", "create", "cli-dry", "--dry-run")
    assert dry.returncode == 0 and "OK (dry run)" in dry.stdout

    listed = klog(broker, "topic", "list")
    assert listed.returncode == 0
    rows = [line.split() for line in listed.stdout.splitlines()]
    assert rows[0] == ["NAME", "PARTITIONS", "REPLICAS"]
    assert ["cli-a", "3", "1"] in rows and ["cli-b", "3", "1"] in rows
    assert not any(r[0] == "cli-dry" for r in rows)
    as_json = json.loads(klog(broker, "topic", "list", "--json").stdout)
    assert {"topic": "cli-a", "partitions": 3, "replicas": 1, "internal": False} in as_json

    described = klog(broker, "topic", "describe", "cli-a")
    assert described.returncode == 0
    out = described.stdout
    for section in ("SUMMARY", "CONFIGS", "PARTITIONS"):
        assert section in out
    assert "retention.ms" in out and "DYNAMIC_TOPIC_CONFIG" in out and "DEFAULT_CONFIG" in out
    partitions = out[out.index("PARTITIONS\n=========="):].splitlines()[2:]
    assert partitions[0].split() == ["PARTITION", "LEADER", "EPOCH", "REPLICAS", "ISR",
                                     "LOG-START-OFFSET", "HIGH-WATERMARK"]
    assert [p.split() for p in partitions[1:]] == [
        [str(i), "0", "0", "[0]", "[0]", "0", "0"] for i in range(3)]
    only = klog(broker, "topic", "describe", "cli-a", "-p").stdout
    assert "SUMMARY" not in only and only.splitlines()[0].split()[0] == "PARTITION"

    doc = json.loads(klog(broker, "topic", "describe", "cli-a", "--json").stdout)
    assert doc["topic"] == "cli-a" and doc["partitions"] == 3 and doc["replicas"] == 1
    configs = {c["name"]: c for c in doc["configs"]}
    assert configs["retention.ms"]["value"] == "123456"
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert [p["high_watermark"] for p in doc["partition_details"]] == [0, 0, 0]

    deleted = klog(broker, "topic", "delete", "cli-b", "cli-never", "--json")
    assert deleted.returncode == 1
    result = {r["topic"]: r["error"] for r in json.loads(deleted.stdout)}
    assert result["cli-b"] is None and result["cli-never"].startswith(
        "UNKNOWN_TOPIC_OR_PARTITION")
    assert klog(broker, "topic", "delete", "cli-never", "--if-exists").returncode == 0


def test_alter_partitions_and_configs(broker: KlogBroker) -> None:
    assert klog(broker, "topic", "create", "cli-alter", "-p", "1").returncode == 0
    altered = klog(broker, "topic", "alter", "cli-alter", "-p", "3",
                   "--set", "cleanup.policy=compact", "--set", "segment.bytes=1048576")
    assert altered.returncode == 0, altered.stderr
    assert altered.stdout.startswith("altered cli-alter: partitions=3")
    doc = json.loads(klog(broker, "topic", "describe", "cli-alter", "--json").stdout)
    assert doc["partitions"] == 3
    configs = {c["name"]: (c["value"], c["source"]) for c in doc["configs"]}
    assert configs["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")
    removed = klog(broker, "topic", "alter", "cli-alter", "-d", "cleanup.policy")
    assert removed.returncode == 0
    doc = json.loads(klog(broker, "topic", "describe", "cli-alter", "--json").stdout)
    configs = {c["name"]: (c["value"], c["source"]) for c in doc["configs"]}
    assert configs["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")

    bad = klog(broker, "topic", "alter", "cli-alter", "--set", "no.such=1")
    assert bad.returncode == 1 and "INVALID_CONFIG" in one_error_line(bad)
    shrink = klog(broker, "topic", "alter", "cli-alter", "-p", "2")
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in one_error_line(shrink)
    nothing = klog(broker, "topic", "alter", "cli-alter")
    assert nothing.returncode == 2 and "nothing to alter" in one_error_line(nothing)


def test_errors_are_one_line(broker: KlogBroker) -> None:
    missing = klog(broker, "topic", "describe", "cli-nope")
    assert missing.returncode == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in one_error_line(missing)
    bad_config = klog(broker, "topic", "create", "cli-x", "-c", "retention.ms")
    assert bad_config.returncode == 2 and "key=value" in one_error_line(bad_config)
    port = free_port()
    down = klog(None, "topic", "list", "-b", f"127.0.0.1:{port}")
    assert down.returncode == 1 and f"127.0.0.1:{port}" in one_error_line(down)
    bad_address = klog(None, "topic", "list", "--bootstrap-server", "host:port")
    assert bad_address.returncode == 1 and "port" in one_error_line(bad_address)


def test_bootstrap_option_beats_environment(broker: KlogBroker) -> None:
    env = {**os.environ, "KLOG_BOOTSTRAP_SERVER": f"127.0.0.1:{free_port()}"}
    result = subprocess.run([*KLOG, "topic", "list", "-b", broker.bootstrap_servers, "--json"],
                            capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode == 0, result.stderr
    assert isinstance(json.loads(result.stdout), list)
    # and through the console script, an unreachable cluster is one line, exit 1
    down = subprocess.run([*KLOG, "topic", "describe", "x"], capture_output=True, text=True,
                          timeout=30, env=env)
    assert down.returncode == 1 and "Traceback" not in down.stderr
    assert "no broker reachable" in one_error_line(down)


# -- several topics, regexes, and kafka-topics' partition filters ----------------------------


def test_describe_several_topics_and_regexes(broker: KlogBroker) -> None:
    for name in ("orders-eu", "orders-us", "payments"):
        assert klog(broker, "topic", "create", name, "-p", "2").returncode == 0
    result = klog(broker, "topic", "describe", "orders-.*", "payments", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [t["topic"] for t in doc["topics"]] == ["orders-eu", "orders-us", "payments"]
    assert all(t["partitions"] == 2 for t in doc["topics"])
    result = klog(broker, "topic", "describe", "orders-.*", "-p")
    assert result.returncode == 0 and result.stdout.count("PARTITION") == 2
    everything = json.loads(klog(broker, "topic", "describe", "--json").stdout)
    assert {"orders-eu", "orders-us", "payments"} <= {t["topic"] for t in everything["topics"]}
    result = klog(broker, "topic", "describe", "nothing-.*")
    assert result.returncode == 1 and "no topic matches" in one_error_line(result)
    result = klog(broker, "topic", "describe", "bad[")
    assert result.returncode == 2 and "bad topic regex" in one_error_line(result)


def test_describe_partition_filters(broker: KlogBroker) -> None:
    assert klog(broker, "topic", "create", "needs-two", "-p", "2",
                "-c", "min.insync.replicas=2").returncode == 0
    assert klog(broker, "topic", "create", "needs-one", "-p", "1").returncode == 0
    result = klog(broker, "topic", "describe", "needs-.*", "--under-min-isr-partitions")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"\tTopic: needs-two\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in (0, 1)]
    result = klog(broker, "topic", "describe", "needs-.*", "--at-min-isr-partitions", "--json")
    doc = json.loads(result.stdout)
    assert doc["filter"] == "at-min-isr"
    assert [(p["topic"], p["partition"]) for p in doc["partitions"]] == [("needs-one", 0)]
    for flag in ("--under-replicated-partitions", "--unavailable-partitions"):
        result = klog(broker, "topic", "describe", "needs-.*", flag)
        assert result.returncode == 0 and result.stdout == ""
    result = klog(broker, "topic", "describe", "--under-replicated-partitions",
                  "--unavailable-partitions")
    assert result.returncode == 2 and "at most one" in one_error_line(result)


def test_partition_filters_as_kafka_defines_them() -> None:
    from klog.cli.topic import partition_selected
    from klog.client.admin import PartitionDescription

    def part(leader: int, replicas: tuple[int, ...], isr: tuple[int, ...]
             ) -> PartitionDescription:
        return PartitionDescription(0, leader, 0, replicas, isr, (), 0)

    alive = {1, 2}
    assert partition_selected(part(1, (1, 2, 3), (1, 2)), "under-replicated", alive, 2)
    assert not partition_selected(part(1, (1, 2), (1, 2)), "under-replicated", alive, 2)
    assert partition_selected(part(-1, (1,), ()), "unavailable", alive, 1)
    assert partition_selected(part(3, (3,), (3,)), "unavailable", alive, 1)  # leader dead
    assert partition_selected(part(1, (1, 2, 3), (1,)), "under-min-isr", alive, 2)
    assert partition_selected(part(1, (1, 2, 3), (1, 2)), "at-min-isr", alive, 2)
    assert not partition_selected(part(1, (1, 2, 3), (1, 2, 3)), "at-min-isr", alive, 2)
