"""`klog configs describe|alter` against a real klog broker (one per module)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.testing import KlogBroker
from tests.daemon.security.certs import Pki
from tests.daemon.wire import InProcessBroker

pytestmark = pytest.mark.timeout(60)

runner = CliRunner()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    with KlogBroker(tmp_path_factory.mktemp("cli-configs"),
                    overrides={"num.partitions": 3}) as b:
        yield b


def klog(broker: KlogBroker, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={
        "KLOG_BOOTSTRAP_SERVER": broker.bootstrap_servers, "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def configs_of(broker: KlogBroker, *args: str) -> dict[str, tuple[str | None, str]]:
    code, out, err = klog(broker, "configs", "describe", *args, "--json")
    assert code == 0, err
    return {c["name"]: (c["value"], c["source"]) for c in json.loads(out)["configs"]}


def test_topic_describe_and_alter(broker: KlogBroker) -> None:
    assert klog(broker, "topic", "create", "cfg", "-c", "retention.ms=60000")[0] == 0
    assert configs_of(broker, "topic", "cfg") == {
        "retention.ms": ("60000", "DYNAMIC_TOPIC_CONFIG")}
    everything = configs_of(broker, "topic", "cfg", "--all")
    assert everything["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")
    assert len(everything) > 20
    code, out, _ = klog(broker, "configs", "describe", "topic", "cfg")
    lines = [line.split() for line in out.splitlines()]
    assert lines == [["KEY", "VALUE", "SOURCE"], ["retention.ms", "60000", "DYNAMIC_TOPIC_CONFIG"]]

    code, out, err = klog(broker, "configs", "alter", "topic", "cfg", "--set",
                          "segment.bytes=1048576", "--delete", "retention.ms")
    assert code == 0, err
    assert out.strip() == "altered topic cfg: 2 change(s)"
    assert configs_of(broker, "topic", "cfg") == {
        "segment.bytes": ("1048576", "DYNAMIC_TOPIC_CONFIG")}
    code, out, _ = klog(broker, "configs", "alter", "topic", "cfg", "--set",
                        "retention.ms=1", "--dry-run")
    assert code == 0 and "(dry run)" in out
    assert "retention.ms" not in configs_of(broker, "topic", "cfg")
    keyed = configs_of(broker, "topic", "cfg", "-k", "retention.ms", "-k", "segment.bytes")
    assert set(keyed) == {"retention.ms", "segment.bytes"}


def test_broker_describe(broker: KlogBroker) -> None:
    keyed = configs_of(broker, "broker", "0", "--key", "num.partitions", "--key", "broker.id")
    assert keyed["num.partitions"][0] == "3"
    assert keyed["broker.id"][0] == "0"
    everything = configs_of(broker, "broker", "0", "-a")
    assert "log.dirs" in everything


def test_broker_describe_marks_what_klog_does_not_implement(broker: KlogBroker) -> None:
    """A Kafka broker config klog accepts but does not implement is set as in Kafka, and
    describe says so: JSON "implemented": false, the table's NOTE column."""
    name = "sasl.kerberos.min.time.before.relogin"
    code, _, err = klog(broker, "configs", "alter", "broker", "0", "--set", f"{name}=120000")
    assert code == 0, err
    try:
        code, out, err = klog(broker, "configs", "describe", "broker", "0", "--json")
        assert code == 0, err
        configs = {c["name"]: c for c in json.loads(out)["configs"]}
        assert configs[name]["value"] == "120000" and configs[name]["implemented"] is False
        everything = klog(broker, "configs", "describe", "broker", "0", "-a", "--json")[1]
        implemented = {c["name"]: c["implemented"] for c in json.loads(everything)["configs"]}
        assert implemented["num.partitions"] is True
        assert implemented["log.cleaner.enable"] is True
        assert implemented["background.threads"] is False
        code, out, _ = klog(broker, "configs", "describe", "broker", "0")
        rows = [line.rstrip().split(None, 3) for line in out.splitlines()]
        assert rows[0] == ["KEY", "VALUE", "SOURCE", "NOTE"]
        assert [name, "120000", "DYNAMIC_BROKER_CONFIG", "accepted, not implemented"] in rows
    finally:
        assert klog(broker, "configs", "alter", "broker", "0", "--delete", name)[0] == 0


def test_errors(broker: KlogBroker) -> None:
    code, _, err = klog(broker, "configs", "describe", "topic", "cfg-nope")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = klog(broker, "configs", "alter", "topic", "cfg-nope", "--set", "a=b")
    assert code == 1 and err.startswith("error:")
    code, _, err = klog(broker, "configs", "describe", "group", "g")
    assert code == 2 and "topic, broker, broker-logger or user" in err
    code, _, err = klog(broker, "configs", "describe", "broker", "zero")
    assert code == 2 and "not a number" in err
    code, _, err = klog(broker, "configs", "alter", "topic", "x")
    assert code == 2 and "nothing to alter" in err
    code, _, err = klog(broker, "configs", "alter", "topic", "x", "--set", "novalue")
    assert code == 2 and "key=value" in err


def test_broker_entity_default(broker: KlogBroker) -> None:
    code, out, err = klog(broker, "configs", "alter", "broker", "--entity-default", "--set",
                          "log.retention.ms=7200000")
    assert code == 0, err
    assert out.strip() == "altered broker <default>: 1 change(s)"
    assert configs_of(broker, "broker", "--entity-default") == {
        "log.retention.ms": ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")}
    # The default reaches the broker's own view (below any per-broker value).
    assert configs_of(broker, "broker", "0", "--key", "log.retention.ms")[
        "log.retention.ms"] == ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    code, _, err = klog(broker, "configs", "alter", "broker", "--entity-default", "--delete",
                        "log.retention.ms")
    assert code == 0, err
    assert configs_of(broker, "broker", "--entity-default") == {}
    code, _, err = klog(broker, "configs", "describe", "topic", "--entity-default")
    assert code == 2 and "--entity-default" in err
    code, _, err = klog(broker, "configs", "describe", "broker")
    assert code == 2 and "--entity-default" in err


# -- users: SCRAM credentials, and --command-config against a secured listener ------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path_factory.mktemp("cli-users"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }).start()
    try:
        yield running
    finally:
        running.stop()


def klog_at(port: int, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "-b", f"127.0.0.1:{port}"], env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_user_scram_credentials_and_command_config(secured: InProcessBroker, pki: Pki,
                                                   tmp_path: Path) -> None:
    plain = secured.broker.server.bound["PLAINTEXT"][1]
    sasl = secured.broker.server.bound["SASL_SSL"][1]
    code, out, err = klog_at(plain, "configs", "alter", "user", "bob", "--set",
                             "SCRAM-SHA-512=[password=bob-secret,iterations=8192]")
    assert code == 0, err
    assert out.strip() == "altered user bob: 1 SCRAM credential change(s)"

    settings = tmp_path / "client.properties"
    settings.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                        f"sasl.username=bob\nsasl.password=bob-secret\n"
                        f"ssl.ca.location={pki.ca_cert}\n")
    code, out, err = klog_at(sasl, "configs", "describe", "user", "bob", "--json",
                             "--command-config", str(settings))
    assert code == 0, err
    assert json.loads(out) == {"users": [{"user": "bob", "credentials": [
        {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]}
    # Java's spelling of the same credentials
    settings.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram."
                        'ScramLoginModule required username="bob" password="bob-secret";\n'
                        f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca_cert}\n")
    code, out, err = klog_at(sasl, "configs", "describe", "user", "bob",
                             "--command-config", str(settings))
    assert code == 0, err
    assert "SCRAM-SHA-512=iterations=8192" in out

    settings.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                        f"sasl.username=bob\nsasl.password=wrong\n"
                        f"ssl.ca.location={pki.ca_cert}\n")
    code, out, err = klog_at(sasl, "configs", "describe", "user", "bob",
                             "--command-config", str(settings))
    assert code != 0
    assert "authentication" in err and "failed" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    # without --command-config the secured listener does not answer the CLI
    code, _out, err = klog_at(sasl, "configs", "describe", "user", "bob")
    assert code != 0 and "Traceback" not in err

    code, out, err = klog_at(plain, "configs", "alter", "user", "bob", "--delete",
                             "SCRAM-SHA-512")
    assert code == 0, err
    code, out, err = klog_at(plain, "configs", "describe", "user", "bob")
    assert code != 0 and "does not exist" in err


@pytest.mark.parametrize("args, message", [
    (["--set", "SCRAM-SHA-1=[password=x]"], "SCRAM"),
    (["--set", "SCRAM-SHA-256=[iterations=4096]"], "password"),
    (["--delete", "PLAIN"], "SCRAM"),
    ([], "nothing to alter"),
])
def test_user_alter_usage_errors(secured: InProcessBroker, args: list[str],
                                 message: str) -> None:
    plain = secured.broker.server.bound["PLAINTEXT"][1]
    code, _out, err = klog_at(plain, "configs", "alter", "user", "bob", *args)
    assert code != 0 and message in err


# -- client quotas: users and client ids (Describe/AlterClientQuotas) ------------------------


def test_client_and_user_quotas(broker: KlogBroker) -> None:
    code, out, err = klog(broker, "configs", "alter", "client", "app", "--set",
                          "producer_byte_rate=1024", "--set", "request_percentage=50")
    assert code == 0, err
    assert out.strip() == "altered client-id 'app': 2 quota change(s)"
    code, out, err = klog(broker, "configs", "describe", "client", "app", "--json")
    assert code == 0, err
    assert json.loads(out) == {"quotas": [{"entity": {"client-id": "app"}, "values": {
        "producer_byte_rate": 1024.0, "request_percentage": 50.0}}]}
    code, out, err = klog(broker, "configs", "describe", "client", "app")
    assert out.strip() == ("Quota configs for client-id 'app' are "
                           "producer_byte_rate=1024.0,request_percentage=50.0")
    # defaults, and a user's client id
    code, out, err = klog(broker, "configs", "alter", "user", "--entity-default", "--set",
                          "consumer_byte_rate=2048")
    assert code == 0, err
    code, out, err = klog(broker, "configs", "alter", "user", "alice", "--client-default",
                          "--set", "consumer_byte_rate=4096")
    assert code == 0, err
    code, out, err = klog(broker, "configs", "describe", "user", "--entity-default")
    assert out.strip() == "Quota configs for the default user-principal are " \
                          "consumer_byte_rate=2048.0"
    code, out, err = klog(broker, "configs", "describe", "user", "alice", "--client-default",
                          "--json")
    assert json.loads(out)["quotas"] == [{"entity": {"user": "alice", "client-id": None},
                                          "values": {"consumer_byte_rate": 4096.0}}]
    # a user with quotas and no SCRAM credentials
    code, out, err = klog(broker, "configs", "alter", "user", "alice", "--set",
                          "producer_byte_rate=10")
    assert code == 0 and out.strip() == "altered user alice: 1 quota change(s)"
    code, out, err = klog(broker, "configs", "describe", "user", "alice")
    assert code == 0, err
    assert out.strip() == "Quota configs for user-principal 'alice' are producer_byte_rate=10.0"
    # removal
    code, out, err = klog(broker, "configs", "alter", "client", "app", "--delete",
                          "producer_byte_rate", "--delete", "request_percentage")
    assert code == 0, err
    code, out, err = klog(broker, "configs", "describe", "client", "app", "--json")
    assert json.loads(out) == {"quotas": []}
    # the broker's refusals and the CLI's usage errors: one line, no traceback
    code, _out, err = klog(broker, "configs", "alter", "client", "app", "--set",
                           "producer_byte_rate=1.5")
    assert code == 1 and "INVALID_REQUEST" in err and "Long" in err
    code, _out, err = klog(broker, "configs", "alter", "client", "app", "--set", "retention=1")
    assert code == 2 and "quotas (producer_byte_rate" in err
    code, _out, err = klog(broker, "configs", "alter", "client", "app", "--set",
                           "SCRAM-SHA-256=[password=x]")
    assert code == 2
    code, _out, err = klog(broker, "configs", "describe", "client")
    assert code == 2 and "--entity-default" in err
