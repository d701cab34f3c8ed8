"""Every example under examples/ runs as its README says, against fresh brokers: the
configs start real brokers (the cluster's three with a real ZooKeeper), the Python
examples and the pytest example exit 0, the reassignment plan is accepted by
`klog reassign execute`, the spark script exports, and the systemd unit names a command
that exists in `klog`."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klog.daemon.config import BrokerConfig
from klog.storage.properties import parse_properties
from klog.testing import KlogBroker
from tests.zkserver import ZooKeeperServer, zk_server  # noqa: F401 - the fixture

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

pytestmark = pytest.mark.timeout(180)


class ConfiguredBroker(KlogBroker):
    """A broker started with ``--config FILE`` (overrides on top, as an operator would)."""

    def __init__(self, config_file: Path, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.config_file = config_file

    def command(self) -> list[str]:
        cmd = super().command()
        return [*cmd[:5], "--config", str(self.config_file), *cmd[5:]]


def _run(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")]))}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=EXAMPLES.parent)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    data = tmp_path_factory.mktemp("standalone")
    with ConfiguredBroker(EXAMPLES / "standalone" / "server.properties", data_dir=data) as b:
        yield b


def test_the_readme_lists_every_example() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    files = [p.relative_to(EXAMPLES).as_posix() for p in EXAMPLES.rglob("*")
             if p.is_file() and p.name != "README.md" and "__pycache__" not in p.parts]
    listed = [f for f in files if f in readme
              or f.replace("broker-1", "broker-{1,2,3}").replace("broker-2", "broker-{1,2,3}")
              .replace("broker-3", "broker-{1,2,3}") in readme]
    assert sorted(listed) == sorted(files)


def test_standalone_config_serves(standalone: KlogBroker) -> None:
    settings = parse_properties((EXAMPLES / "standalone" / "server.properties").read_text())
    config = BrokerConfig.from_dict(settings)
    assert config.standalone and config.num_partitions == 3
    producer = Producer({"bootstrap.servers": standalone.bootstrap_servers})
    producer.produce("from-the-sample-config", value=b"v")
    assert producer.flush(30) == 0
    md = AdminClient({"bootstrap.servers": standalone.bootstrap_servers}).list_topics(
        "from-the-sample-config", timeout=10)
    assert len(md.topics["from-the-sample-config"].partitions) == 3  # num.partitions


@pytest.mark.parametrize("script", ["confluent_produce_consume.py", "confluent_group.py",
                                    "confluent_transactions.py", "klog_client.py",
                                    "klog_client_group.py"])
def test_python_example(standalone: KlogBroker, script: str) -> None:
    result = _run([sys.executable, str(EXAMPLES / "python" / script),
                   "--bootstrap", standalone.bootstrap_servers])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "read" in result.stdout or "copied" in result.stdout


def test_pytest_example() -> None:
    result = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   str(EXAMPLES / "pytest" / "test_with_klog.py")], timeout=150)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_reassignment_plan_is_accepted(standalone: KlogBroker) -> None:
    plan = json.loads((EXAMPLES / "reassignment" / "plan.json").read_text())
    assert plan["version"] == 1 and plan["partitions"]
    # On a cluster of one, brokers 2 and 3 do not exist: klog refuses the plan for that
    # reason (its format was read), as kafka-reassign-partitions does.
    result = _run([sys.executable, "-m", "klog", "reassign", "execute",
                   "--reassignment-json-file", str(EXAMPLES / "reassignment" / "plan.json"),
                   "--bootstrap-server", standalone.bootstrap_servers])
    assert result.returncode != 0
    out = result.stdout + result.stderr
    assert "Traceback" not in out and ("broker" in out.lower() or "orders" in out), out


def test_systemd_unit_runs_a_klog_command() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read(EXAMPLES / "systemd" / "klog-broker.service")
    exec_start = unit["Service"]["ExecStart"].split()
    assert exec_start[0].endswith("/klog") and exec_start[1:3] == ["broker", "start"]
    result = _run([sys.executable, "-m", "klog", *exec_start[1:3], "--help"])
    assert result.returncode == 0 and "--config" in result.stdout


def test_spark_export_script(standalone: KlogBroker, tmp_path: Path) -> None:
    topic = "spark-example"
    producer = Producer({"bootstrap.servers": standalone.bootstrap_servers})
    for i in range(20):
        producer.produce(topic, value=b"record %d" % i, partition=0)
    assert producer.flush(30) == 0
    bin_dir = Path(sys.executable).parent
    env_path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    result = subprocess.run(
        ["sh", str(EXAMPLES / "spark" / "export.sh"), standalone.bootstrap_servers, topic,
         str(standalone.log_dir), str(tmp_path / "out")],
        capture_output=True, text=True, timeout=170, env={**os.environ, "PATH": env_path})
    assert result.returncode == 0, result.stdout + result.stderr
    assert list((tmp_path / "out" / "live").rglob("*.parquet"))
    assert list((tmp_path / "out" / "offline").rglob("*.json"))


def test_cluster_configs(zk_server: ZooKeeperServer,  # noqa: F811 - the fixture
                         tmp_path: Path) -> None:
    brokers = []
    try:
        for i in (1, 2, 3):
            b = ConfiguredBroker(EXAMPLES / "cluster" / f"broker-{i}.properties",
                                 data_dir=tmp_path / f"b{i}",
                                 overrides={"zookeeper.connect": zk_server.connect + "/examples"})
            brokers.append(b.start())
        bootstrap = ",".join(b.bootstrap_servers for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=10).brokers) < 3:
            assert time.monotonic() < deadline, "the three brokers did not register"
            time.sleep(0.2)
        admin.create_topics([NewTopic("replicated", 3)])["replicated"].result(30)  # RF 3
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        producer.produce("replicated", value=b"on three brokers", partition=0)
        assert producer.flush(30) == 0
        md = admin.list_topics("replicated", timeout=10).topics["replicated"]
        assert all(len(p.replicas) == 3 for p in md.partitions.values())
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "examples"})
        consumer.assign([TopicPartition("replicated", 0, 0)])
        msg = consumer.poll(30)
        consumer.close()
        assert msg is not None and msg.value() == b"on three brokers"
    finally:
        for b in brokers:
            b.close()
