"""`klog log-dirs describe`, `klog delete-records` and `klog api-versions` against a real
klog broker, in the formats of kafka-log-dirs.sh, kafka-delete-records.sh and
kafka-broker-api-versions.sh."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner

from klog.cli.api_versions import describe_versions
from klog.cli.app import app
from klog.cli.delete_records import parse_offsets_json
from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(60)

runner = CliRunner()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    with KlogBroker(tmp_path_factory.mktemp("cli-ops"), overrides={"num.partitions": 2}) as b:
        producer = Producer({"bootstrap.servers": b.bootstrap_servers})
        for i in range(20):
            producer.produce("ops", value=b"%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        yield b


def klog(broker: KlogBroker, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={
        "KLOG_BOOTSTRAP_SERVER": broker.bootstrap_servers, "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_log_dirs_json_is_kafkas_document(broker: KlogBroker) -> None:
    code, out, err = klog(broker, "log-dirs", "describe", "--topic-list", "ops", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["version"] == 1
    [b] = doc["brokers"]
    assert b["broker"] == 0
    [d] = b["logDirs"]
    assert d["error"] is None and Path(d["logDir"]).resolve() == broker.log_dir.resolve()
    parts = {p["partition"]: p for p in d["partitions"]}
    assert set(parts) == {"ops-0", "ops-1"}
    assert all(p["size"] > 0 and p["offsetLag"] == 0 and p["isFuture"] is False
               for p in parts.values())
    code, out, _ = klog(broker, "log-dirs", "describe", "--broker-list", "0")
    assert code == 0 and "ops-0" in out and "LOG DIR" in out
    code, _, err = klog(broker, "log-dirs", "describe", "--broker-list", "zero")
    assert code == 2 and "--broker-list" in err


def test_delete_records_one_partition_and_from_a_file(broker: KlogBroker,
                                                      tmp_path: Path) -> None:
    code, out, err = klog(broker, "delete-records", "ops", "--partition", "0", "--offset", "4")
    assert code == 0, err
    assert out.splitlines() == ["Executing records delete operation",
                                "Records delete operation completed:",
                                "partition: ops-0\tlow_watermark: 4"]
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "ops", "partition": 1, "offset": -1},
        {"topic": "ops", "partition": 0, "offset": 1000}]}))
    code, out, _ = klog(broker, "delete-records", "--offset-json-file", str(plan), "--json")
    assert code == 1  # partition 0's offset is past its high watermark
    rows = {(r["topic"], r["partition"]): r for r in json.loads(out)["partitions"]}
    assert rows[("ops", 1)]["low_watermark"] == 10  # -1: up to the high watermark
    assert "OFFSET_OUT_OF_RANGE" in rows[("ops", 0)]["error"]
    code, _, err = klog(broker, "delete-records", "ops", "--partition", "0")
    assert code == 2 and "--offset" in err


def test_parse_offsets_json_refuses_what_kafka_refuses() -> None:
    good = '{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}'
    assert parse_offsets_json(good, "f") == {("t", 0): 5}
    for bad, why in [("[]", "partitions"), ('{"partitions": []}', "no partitions"),
                     ('{"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}',
                      "integer"),
                     ('{"partitions": [{"topic": "t", "partition": 0, "offset": 1},'
                      ' {"topic": "t", "partition": 0, "offset": 2}]}', "duplicate"),
                     ("{", "not valid JSON")]:
        with pytest.raises(ValueError, match=why):
            parse_offsets_json(bad, "f")


def test_api_versions_lists_every_api_with_usable_versions(broker: KlogBroker) -> None:
    code, out, err = klog(broker, "api-versions")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"{broker.bootstrap_servers} (id: 0 rack: null) -> (")
    from klog.protocol.apis import ADVERTISED, API_TABLE

    for key in (0, 18):  # what the broker announces, and usable up to klog's own maximum
        lo, hi = ADVERTISED[key]
        usable = min(hi, API_TABLE[key].max_version)
        assert f"\t{API_TABLE[key].name}({key}): {lo} to {hi} [usable: {usable}]," in lines
    assert lines[-1] == ")"
    code, out, _ = klog(broker, "api-versions", "--json")
    [b] = json.loads(out)["brokers"]
    fetch = next(a for a in b["apis"] if a["api_key"] == 1)
    assert fetch["max_version"] >= 12 and fetch["usable"] == fetch["max_version"]


def test_versions_table_marks_unsupported_and_unusable() -> None:
    rows = describe_versions({0: (3, 9), 1: (4, 12), 68: (0, 1)}, {0: (0, 11), 1: (13, 16)})
    by_key = {r["api_key"]: r for r in rows}
    assert by_key[0]["usable"] == 9
    assert by_key[1]["usable"] is None  # no version both speak
    assert by_key[68]["max_version"] is None  # the broker does not announce it
