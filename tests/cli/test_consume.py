"""``klog consume`` against a real klog broker (records written by kafka-python)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.testing import KlogBroker

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

pytestmark = pytest.mark.timeout(90)

runner = CliRunner()
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    running = KlogBroker(tmp_path_factory.mktemp("klog") / "data",
                         overrides={"num.partitions": "2"})
    running.start()
    try:
        producer = kafka.KafkaProducer(bootstrap_servers=running.bootstrap_servers,
                                       request_timeout_ms=10_000)
        for i in range(10):  # t: partition 0 gets even i, 1 odd i; timestamps T0 + i s
            producer.send("t", key=f"k{i}".encode(), value=f"v{i}".encode(),
                          headers=[("h", f"{i}".encode())], partition=i % 2,
                          timestamp_ms=T0 + 1000 * i)
        producer.send("t", key=None, value=b"\xff\x00bin", partition=0, timestamp_ms=T0 + 20_000)
        producer.flush(timeout=15)
        producer.close(timeout=5)
        yield running
    finally:
        running.stop()


def _consume(broker: KlogBroker, *args: str) -> tuple[int, bytes, str]:
    result = runner.invoke(app, ["consume", "t", "-b", broker.bootstrap_servers, *args])
    return result.exit_code, result.stdout_bytes, result.stderr if result.stderr_bytes else ""


def test_from_beginning_to_the_end(broker: KlogBroker) -> None:
    code, out, _ = _consume(broker, "-o", "beginning", "-e")
    assert code == 0
    lines = out.split(b"\n")
    assert lines[-1] == b""
    assert sorted(lines[:-1]) == sorted([f"v{i}".encode() for i in range(10)] + [b"\xff\x00bin"])
    # offset order within a partition
    assert [x for x in lines if x in (b"v0", b"v2", b"v4", b"v6", b"v8")] == [
        b"v0", b"v2", b"v4", b"v6", b"v8"]


def test_format_partition_and_last_n(broker: KlogBroker) -> None:
    code, out, _ = _consume(broker, "-p", "0", "-o", "-2", "-e",
                            "-f", "%t|%p|%o|%k|%s|%h|%T|%K|%S%%\\n")
    assert code == 0
    assert out == (f"t|0|4|k8|v8|h=8|{T0 + 8000}|2|2%\n".encode()
                   + f"t|0|5||\xff\x00bin||{T0 + 20_000}|-1|5%\n".encode("latin-1"))


def test_absolute_offset_count_and_json(broker: KlogBroker) -> None:
    code, out, _ = _consume(broker, "-p", "1", "-o", "2", "-n", "2", "--json")
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows == [
        {"topic": "t", "partition": 1, "offset": 2, "timestamp": T0 + 5000,
         "timestamp_type": "CreateTime", "key": "k5", "value": "v5",
         "headers": [{"key": "h", "value": "5"}]},
        {"topic": "t", "partition": 1, "offset": 3, "timestamp": T0 + 7000,
         "timestamp_type": "CreateTime", "key": "k7", "value": "v7",
         "headers": [{"key": "h", "value": "7"}]},
    ]
    code, out, _ = _consume(broker, "-p", "0", "-o", "5", "-e", "--json")
    (row,) = [json.loads(line) for line in out.splitlines()]
    assert row["key"] is None and row["headers"] == []
    assert row["value"] == "/wBiaW4=" and row["value_encoding"] == "base64"


def test_timestamp_offset(broker: KlogBroker) -> None:
    code, out, _ = _consume(broker, "-o", f"@{T0 + 6500}", "-e", "-f", "%p:%o\\n")
    assert code == 0
    assert sorted(out.split()) == [b"0:4", b"0:5", b"1:3", b"1:4"]
    # past every record: nothing, and -e still ends
    code, out, _ = _consume(broker, "-o", f"@{T0 + 99_000}", "-e")
    assert (code, out) == (0, b"")


def test_offset_beyond_the_end_is_clamped(broker: KlogBroker) -> None:
    code, out, _ = _consume(broker, "-p", "1", "-o", "1000", "--timeout", "0.5")
    assert (code, out) == (0, b"")


def test_timeout_without_records_ends(broker: KlogBroker) -> None:
    started = time.monotonic()
    code, out, _ = _consume(broker, "--timeout", "0.5")
    assert (code, out) == (0, b"")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(("args", "code", "message"), [
    (["-o", "bogus"], 2, "offset must be"),
    (["-p", "9", "-e"], 1, "has no partition 9"),
    (["-f", "%x", "-e"], 2, "unknown format field %x"),
])
def test_errors_are_one_line(broker: KlogBroker, args: list[str], code: int, message: str
                             ) -> None:
    result = runner.invoke(app, ["consume", "t", "-b", broker.bootstrap_servers, *args])
    assert result.exit_code == code
    assert message in result.output
    assert "Traceback" not in result.output


def test_unknown_topic_and_unreachable_broker(broker: KlogBroker) -> None:
    result = runner.invoke(app, ["consume", "missing", "-b", broker.bootstrap_servers, "-e"])
    assert result.exit_code == 1 and "does not exist" in result.output
    # ... and asking did not create it
    result = runner.invoke(app, ["consume", "missing", "-b", broker.bootstrap_servers, "-e"])
    assert "does not exist" in result.output
    from klog.testing import free_port

    result = runner.invoke(app, ["consume", "t", "-b", f"127.0.0.1:{free_port()}", "-e"])
    assert result.exit_code == 1 and "cannot reach" in result.output


def test_bootstrap_from_the_environment_in_a_real_process(broker: KlogBroker) -> None:
    env = {"KLOG_BOOTSTRAP_SERVER": broker.bootstrap_servers, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "klog", "consume", "t", "-p", "1", "-o", "beginning", "-n",
         "3", "-f", "%k "],
        capture_output=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b"k1 k3 k5 "


def test_perf_consume(broker: KlogBroker) -> None:
    # klog/cli/perf_consume.py is added to the `perf` group by that group's module; here
    # it hangs off a group of its own.
    import typer

    from klog.cli import perf_consume

    perf_app = typer.Typer()
    perf_app.command("noop")(lambda: None)  # a group, not a lone command
    perf_consume.register(perf_app)
    result = runner.invoke(perf_app, ["consume", "--topic", "t", "--messages", "11",
                                      "-b", broker.bootstrap_servers, "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["records"] == 11 and row["topic"] == "t"
    assert row["bytes"] == sum(len(f"k{i}v{i}") for i in range(10)) + 5
    assert row["records_per_sec"] > 0 and row["mb_per_sec"] > 0
    result = runner.invoke(perf_app, ["consume", "--topic", "t", "--messages", "4", "-p", "1",
                                      "-b", broker.bootstrap_servers])
    assert result.exit_code == 0
    assert result.stdout.startswith("4 records, ") and "records/sec" in result.stdout
    result = runner.invoke(perf_app, ["consume", "--topic", "nope", "--messages", "1",
                                      "-b", broker.bootstrap_servers])
    assert result.exit_code == 1 and "does not exist" in result.output


def test_same_lines_as_kcat(broker: KlogBroker) -> None:
    import shutil

    kcat = shutil.which("kcat") or "/usr/bin/kcat"
    fmt = "%t %p %o %k %s %T %K %S\\n"
    proc = subprocess.run(
        [kcat, "-C", "-b", broker.bootstrap_servers, "-t", "t", "-o", "beginning", "-e",
         "-q", "-f", fmt.replace("\\n", "\n")],
        capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    code, out, _ = _consume(broker, "-o", "beginning", "-e", "-f", fmt)
    assert code == 0
    assert sorted(out.splitlines()) == sorted(proc.stdout.splitlines())
    assert len(out.splitlines()) == 11


# -- --group (kafka-console-consumer --group) -----------------------------------------------


def test_group_reads_from_the_beginning_then_from_its_committed_offsets(
        broker: KlogBroker) -> None:
    code, out, err = _consume(broker, "--group", "cli-group", "--from-beginning", "-e")
    assert code == 0, err
    values = out.split(b"\n")[:-1]
    assert sorted(values) == sorted([f"v{i}".encode() for i in range(10)] + [b"\xff\x00bin"])
    # The group committed what it read: a second run starts there, and finds nothing new.
    code, out, _ = _consume(broker, "--group", "cli-group", "--from-beginning", "-e",
                            "--timeout", "3")
    assert code == 0 and out == b""
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    producer.send("t", value=b"late", partition=1)
    producer.flush(timeout=15)
    producer.close(timeout=5)
    code, out, _ = _consume(broker, "--group", "cli-group", "-n", "1", "--json")
    assert code == 0 and json.loads(out)["value"] == "late"
    # A new group without --from-beginning starts at the end: nothing old.
    code, out, _ = _consume(broker, "--group", "cli-group-2", "-e", "--timeout", "3")
    assert code == 0 and out == b""


def test_group_committed_offsets_are_visible_to_the_groups_tool(broker: KlogBroker) -> None:
    code, _, err = _consume(broker, "--group", "cli-lag", "--from-beginning", "-e")
    assert code == 0, err
    result = runner.invoke(app, ["groups", "describe", "cli-lag", "-b",
                                 broker.bootstrap_servers, "--json"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    text = json.dumps(doc)
    assert '"t"' in text and "lag" in text
    lags = [p["lag"] for g in (doc if isinstance(doc, list) else [doc])
            for p in g.get("partitions", g.get("offsets", [])) if "lag" in p]
    assert lags and all(lag == 0 for lag in lags)


def test_consumer_properties_and_group_usage_errors(broker: KlogBroker,
                                                   tmp_path: pytest.TempPathFactory) -> None:
    code, _, err = _consume(broker, "-X", "no.such.property=1", "-e")
    assert code == 2 and "unknown consumer property 'no.such.property'" in err
    code, _, err = _consume(broker, "-X", "fetch.min.bytes", "-e")
    assert code == 2 and "not key=value" in err
    code, _, err = _consume(broker, "--group", "g", "-p", "0", "-e")
    assert code == 2 and "--partition" in err
    code, _, err = _consume(broker, "--group", "g", "-o", "5", "-e")
    assert code == 2 and "beginning or end" in err
    config = tmp_path / "consumer.properties"  # type: ignore[operator]
    config.write_text("group.id=from-file\nauto.offset.reset=earliest\n")
    code, out, err = _consume(broker, "--consumer.config", str(config), "-e", "-n", "3")
    assert code == 0, err
    assert len(out.split(b"\n")[:-1]) == 3


def test_isolation_level_hides_aborted_records(broker: KlogBroker) -> None:
    """--exit ends at the partition's end even when the log ends with transaction markers
    (they hand out no record but move the position)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap_servers,
                         "transactional.id": "cli-consume-txn"})
    producer.init_transactions(30)
    for value, commit in ((b"kept", True), (b"aborted", False)):
        producer.begin_transaction()
        producer.produce("txn-cli", value=value, partition=0)
        assert producer.flush(30) == 0  # sent before the end, abort included
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    result = runner.invoke(app, ["consume", "txn-cli", "-b", broker.bootstrap_servers,
                                 "-o", "beginning", "-e", "--isolation-level",
                                 "read_committed"])
    assert result.exit_code == 0 and result.stdout_bytes == b"kept\n"
    result = runner.invoke(app, ["consume", "txn-cli", "-b", broker.bootstrap_servers,
                                 "-o", "beginning", "-e"])
    assert result.exit_code == 0 and result.stdout_bytes == b"kept\naborted\n"
    result = runner.invoke(app, ["consume", "txn-cli", "-b", broker.bootstrap_servers,
                                 "--isolation-level", "serializable", "-e"])
    assert result.exit_code == 2
