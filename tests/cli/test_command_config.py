"""Every client command reaches a secured listener: --command-config on the admin
commands (klog/cli/topic.py's load_client_security and with_admin), the security settings
of --producer.config / --consumer.config on produce, consume and perf (klog/client/
properties.py), and --admin.config on elect-leaders. A SASL_SSL listener (PLAIN) that
answers nothing before authentication: a command that ignored its settings would fail."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from tests.daemon.security.certs import Pki
from tests.daemon.wire import InProcessBroker

pytestmark = pytest.mark.timeout(120)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[InProcessBroker]:
    running = InProcessBroker(tmp_path_factory.mktemp("cli-secured"), {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "security.inter.broker.protocol": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_cert),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
    }).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Path:
    path = tmp_path_factory.mktemp("cli-settings") / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                    "sasl.username=admin\nsasl.password=admin-secret\n"
                    f"ssl.ca.location={pki.ca_cert}\n")
    return path


def run(secured: InProcessBroker, *args: str) -> tuple[int, str, str]:
    port = secured.broker.server.bound["SASL_SSL"][1]
    result = CliRunner().invoke(app, [*args], env={
        "KLOG_BOOTSTRAP_SERVER": f"localhost:{port}", "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_admin_commands_take_command_config(secured: InProcessBroker, settings: Path) -> None:
    cc = ("--command-config", str(settings))
    code, _, err = run(secured, "topic", "create", "secure", "--partitions", "2", *cc)
    assert code == 0, err
    code, out, err = run(secured, "topic", "describe", "secure", "--json", *cc)
    assert code == 0, err
    assert json.loads(out)["partitions"] == 2
    for args in (("topic", "list", "--json"), ("groups", "list", "--json"),
                 ("api-versions", "--json"), ("log-dirs", "describe", "--json"),
                 ("offsets", "secure", "--json"), ("transactions", "list", "--json"),
                 ("acls", "list", "--json"), ("reassign", "list", "--json")):
        code, out, err = run(secured, *args, *cc)
        assert code == 0, (args, err)
        json.loads(out)
    # without the settings the listener answers nothing: one line and a non-zero exit
    code, _, err = run(secured, "topic", "list", "--json")
    assert code != 0 and "Traceback" not in err


def test_produce_consume_and_perf_take_security_from_their_config_files(
        secured: InProcessBroker, settings: Path) -> None:
    code, _, err = run(secured, "topic", "create", "flow", "--command-config", str(settings))
    assert code == 0, err
    result = CliRunner().invoke(app, [
        "produce", "flow", "--producer.config", str(settings),
        "-b", f"localhost:{secured.broker.server.bound['SASL_SSL'][1]}"],
        input="one\ntwo\nthree\n")
    assert result.exit_code == 0, result.stderr
    code, out, err = run(secured, "consume", "flow", "--from-beginning", "--max-messages", "3",
                         "--consumer.config", str(settings))
    assert code == 0, err
    assert out.split() == ["one", "two", "three"]
    code, out, err = run(secured, "perf", "consume", "--topic", "flow", "--messages", "3",
                         "--json", "--consumer.config", str(settings))
    assert code == 0, err
    assert json.loads(out)["records"] == 3


def test_elect_leaders_admin_config_carries_security(secured: InProcessBroker,
                                                     settings: Path, tmp_path: Path) -> None:
    admin = tmp_path / "admin.properties"
    admin.write_text(settings.read_text() + "request.timeout.ms=20000\n")
    code, _, err = run(secured, "topic", "create", "elect", "--command-config", str(settings))
    assert code == 0, err
    code, out, err = run(secured, "elect-leaders", "--election-type", "preferred",
                         "--all-topic-partitions", "--json", "--admin.config", str(admin))
    assert code == 0, err
    assert "not used" not in err  # the security and timeout settings are all taken
    json.loads(out)
