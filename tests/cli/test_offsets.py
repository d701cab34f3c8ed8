"""`klog offsets` against a real klog broker, with records produced by confluent-kafka."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(60)

runner = CliRunner()
BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    from confluent_kafka import Producer

    with KlogBroker(tmp_path_factory.mktemp("cli-offsets"),
                    overrides={"num.partitions": 2}) as b:
        producer = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 5})
        for i in range(10):  # partition 0: 10 records a minute apart; partition 1: empty
            producer.produce("off", value=b"v%d" % i, partition=0,
                             timestamp=BASE_TS + i * 60_000)
        assert producer.flush(15) == 0
        yield b


def klog(broker: KlogBroker, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={
        "KLOG_BOOTSTRAP_SERVER": broker.bootstrap_servers, "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_earliest_and_latest(broker: KlogBroker) -> None:
    code, out, _ = klog(broker, "offsets", "off")
    assert code == 0
    assert [line.split() for line in out.splitlines()] == [
        ["PARTITION", "EARLIEST", "LATEST"], ["0", "0", "10"], ["1", "0", "0"]]
    code, out, _ = klog(broker, "offsets", "off", "-p", "1", "--json")
    assert json.loads(out) == {"topic": "off", "partitions": [
        {"partition": 1, "earliest": 0, "latest": 0}]}


def test_by_time_in_ms_and_iso(broker: KlogBroker) -> None:
    code, out, _ = klog(broker, "offsets", "off", "--time", str(BASE_TS + 150_000), "--json")
    assert code == 0
    rows = {r["partition"]: r for r in json.loads(out)["partitions"]}
    assert (rows[0]["offset"], rows[0]["timestamp"]) == (3, BASE_TS + 180_000)
    assert rows[1]["offset"] is None and rows[1]["timestamp"] is None
    code, out, _ = klog(broker, "offsets", "off", "-p", "0", "-t", "2026-01-01T00:05:00")
    assert code == 0
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["PARTITION", "EARLIEST", "LATEST", "OFFSET-AT-TIME", "TIMESTAMP"]
    assert lines[1] == ["0", "0", "10", "5", str(BASE_TS + 300_000)]
    code, out, _ = klog(broker, "offsets", "off", "-p", "0", "-t", "2030-01-01T00:00:00Z")
    assert out.splitlines()[1].split() == ["0", "0", "10", "-", "-"]


def test_errors(broker: KlogBroker) -> None:
    code, _, err = klog(broker, "offsets", "no-such-topic")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err and "Traceback" not in err
    code, _, err = klog(broker, "offsets", "off", "-p", "7")
    assert code == 1 and "no partition 7" in err
    code, _, err = klog(broker, "offsets", "off", "-t", "yesterday")
    assert code == 2 and "ISO-8601" in err
