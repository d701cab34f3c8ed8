"""`klog elect-leaders`: kafka-leader-election.sh's option rules, JSON file checks and
output lines (pure), and a run against a real standalone klog broker (every partition
is led by its only, preferred, replica there: no election is needed)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from klog.cli import elect_leaders as cli
from klog.cli.app import app
from klog.client.errors import error_for
from klog.protocol.errors import ErrorCode
from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(60)

runner = CliRunner()


def klog(bootstrap: str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, ["elect-leaders", *args], env={
        "KLOG_BOOTSTRAP_SERVER": bootstrap, "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


# -- pure parts


def test_json_file_is_read_as_kafka_does() -> None:
    assert cli.parse_election_json(
        '{"partitions": [{"topic": "foo", "partition": 1}, {"topic": "bar", "partition": 0}]}'
    ) == [("foo", 1), ("bar", 0)]
    assert cli.parse_election_json('{"partitions": []}') == []
    with pytest.raises(ValueError, match='missing "partitions" field'):
        cli.parse_election_json('{"version": 1}')
    with pytest.raises(ValueError, match="duplicate partitions: foo-1"):
        cli.parse_election_json('{"partitions": [{"topic": "foo", "partition": 1},'
                                ' {"topic": "foo", "partition": 1}]}')
    with pytest.raises(ValueError, match="integer"):
        cli.parse_election_json('{"partitions": [{"topic": "foo", "partition": "1"}]}')
    with pytest.raises(ValueError, match="not valid JSON"):
        cli.parse_election_json('{"partitions": [')
    with pytest.raises(ValueError, match="empty"):
        cli.parse_election_json("null")


def test_lines_are_kafkas() -> None:
    results = {
        ("foo", 0): None,
        ("bar", 0): None,
        ("foo", 1): error_for(ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed"),
        ("baz", 2): error_for(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                              "Failed to elect leader for partition baz-2"),
    }
    assert cli.report_lines("preferred", results) == [
        "Successfully completed leader election (PREFERRED) for partitions bar-0, foo-0",
        "Valid replica already elected for partitions foo-1",
        "Error completing leader election (PREFERRED) for partition: baz-2: "
        "PREFERRED_LEADER_NOT_AVAILABLE: Failed to elect leader for partition baz-2",
    ]
    doc = cli.report_json("preferred", results)
    assert doc["election_type"] == "PREFERRED"
    assert doc["succeeded"] == [{"topic": "bar", "partition": 0}, {"topic": "foo", "partition": 0}]
    assert doc["not_needed"] == [{"topic": "foo", "partition": 1}]
    assert doc["failed"][0]["error"] == "PREFERRED_LEADER_NOT_AVAILABLE"
    assert cli.report_lines("unclean", {}) == []


@pytest.mark.parametrize(("args", "message"), [
    (["--all-topic-partitions"], "Missing required option(s): --election-type"),
    (["--election-type", "dirty", "--all-topic-partitions"], "unknown election type"),
    (["--election-type", "preferred"], "One and only one of the following options"),
    (["--election-type", "preferred", "--all-topic-partitions", "--topic", "t",
      "--partition", "0"], "One and only one of the following options"),
    (["--election-type", "preferred", "--topic", "t"], "Missing required option(s): --partition"),
    (["--election-type", "preferred", "--all-topic-partitions", "--partition", "0"],
     "Option --partition is only allowed if --topic is used"),
    (["--election-type", "preferred", "--path-to-json-file", "/nonexistent/e.json"],
     "cannot read"),
])
def test_option_rules(args: list[str], message: str) -> None:
    code, out, err = klog("127.0.0.1:1", *args)
    assert code == 2 and message in err and out == ""


def test_bad_json_file_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "e.json"
    f.write_text('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}')
    code, _, err = klog("127.0.0.1:1", "--election-type", "preferred", "--path-to-json-file",
                        str(f))
    assert code == 2 and "duplicate partitions: t-0" in err


# -- against a broker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    with KlogBroker(tmp_path_factory.mktemp("cli-elect")) as b:
        yield b


def test_against_a_standalone_broker(broker: KlogBroker, tmp_path: Path) -> None:
    bs = broker.bootstrap_servers
    assert runner.invoke(app, ["topic", "create", "el", "--partitions", "2"],
                         env={"KLOG_BOOTSTRAP_SERVER": bs}).exit_code == 0
    # Every partition already has its preferred leader: "all" lists nothing.
    assert klog(bs, "--election-type", "preferred", "--all-topic-partitions") == (0, "", "")
    code, out, _ = klog(bs, "--election-type", "PREFERRED", "--topic", "el", "--partition", "1")
    assert (code, out) == (0, "Valid replica already elected for partitions el-1\n")
    f = tmp_path / "e.json"
    f.write_text(json.dumps({"partitions": [{"topic": "el", "partition": 0},
                                            {"topic": "el", "partition": 9}]}))
    code, out, err = klog(bs, "--election-type", "unclean", "--path-to-json-file", str(f))
    assert code == 1
    assert out.splitlines() == [
        "Valid replica already elected for partitions el-0",
        "Error completing leader election (UNCLEAN) for partition: el-9: "
        "UNKNOWN_TOPIC_OR_PARTITION: The partition does not exist.",
    ]
    assert "1 replica(s) could not be elected" in err
    code, out, _ = klog(bs, "--election-type", "preferred", "--path-to-json-file", str(f),
                        "--json")
    doc = json.loads(out)
    assert code == 1
    assert doc["not_needed"] == [{"topic": "el", "partition": 0}]
    assert [(e["partition"], e["error"]) for e in doc["failed"]] == [
        (9, "UNKNOWN_TOPIC_OR_PARTITION")]


def test_admin_config_timeout_is_used_and_other_keys_warned(broker: KlogBroker,
                                                            tmp_path: Path) -> None:
    props = tmp_path / "admin.properties"
    props.write_text("request.timeout.ms=5000\nsecurity.protocol=PLAINTEXT\n"
                     "sasl.kerberos.service.name=kafka\n")
    code, _, err = klog(broker.bootstrap_servers, "--election-type", "preferred",
                        "--all-topic-partitions", "--admin.config", str(props))
    # security settings are taken (tests/cli/test_command_config.py), others warned
    assert code == 0 and "sasl.kerberos.service.name is not used" in err
    assert "security.protocol" not in err
