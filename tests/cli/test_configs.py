"""`klog configs describe|alter` against a real klog broker (one per module)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.testing import KlogBroker

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


def test_errors(broker: KlogBroker) -> None:
    code, _, err = klog(broker, "configs", "describe", "topic", "cfg-nope")
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err
    code, _, err = klog(broker, "configs", "alter", "topic", "cfg-nope", "--set", "a=b")
    assert code == 1 and err.startswith("error:")
    code, _, err = klog(broker, "configs", "describe", "group", "g")
    assert code == 2 and "topic or broker" in err
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
