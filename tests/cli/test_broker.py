"""`klog broker start` as a user runs it: errors, clean shutdown, restart, the corpus."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from klog.testing import KlogBroker

KLOG = [sys.executable, "-m", "klog"]


def _run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KLOG, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def test_bad_override_is_one_line_and_exit_2(tmp_path) -> None:
    result = _run("broker", "start", "-o", "listeners=PLAINTEXT://127.0.0.1:notaport",
                  "-o", f"log.dirs={tmp_path}")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "listeners" in errors[0]


def test_missing_config_file(tmp_path) -> None:
    result = _run("broker", "start", "--config", str(tmp_path / "nope.properties"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr


def test_port_in_use_fails_cleanly(tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run("broker", "start", "-o", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                      "-o", f"log.dirs={tmp_path}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "error:" in result.stderr


def test_sigterm_shuts_down_cleanly_and_data_survives(tmp_path) -> None:
    from confluent_kafka import Consumer, Producer

    broker = KlogBroker(tmp_path / "data")
    with broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for i in range(100):
            producer.produce("survivor", key=str(i).encode(), value=b"v%d" % i)
        assert producer.flush(10) == 0
        assert broker.stop() == 0
        assert (broker.log_dir / ".kafka_cleanshutdown").exists()
        assert (broker.log_dir / "recovery-point-offset-checkpoint").exists()
        broker.start()
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers,
                             "group.id": "g", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        try:
            from confluent_kafka import TopicPartition

            consumer.assign([TopicPartition("survivor", 0, 0)])
            got = []
            deadline = time.monotonic() + 20
            while len(got) < 100 and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            assert got == [b"v%d" % i for i in range(100)]
        finally:
            consumer.close()


def test_logs_to_a_file_are_plain_unwrapped_log4j_lines(tmp_path) -> None:
    """Not a terminal: one line per record, "[date time,ms] LEVEL message (logger)", however
    long the message (rich's layout would wrap it at 80 columns)."""
    import re

    broker = KlogBroker(tmp_path / "data")
    with broker:
        assert broker.stop() == 0
    lines = broker.log_tail(200).splitlines()
    started = [line for line in lines if "started in" in line]
    assert len(started) == 1, lines
    assert re.fullmatch(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] INFO klog broker \d+ "
                        r"started in [\d.]+ s on 127\.0\.0\.1:\d+ \(cluster \S+\) "
                        r"\(klog\.daemon\.broker\)", started[0]), started[0]
    assert all(line.startswith("[") for line in lines if line.strip()), lines


def test_broker_serves_the_kafka_corpus(kafka_corpus, tmp_path) -> None:
    import shutil

    from confluent_kafka import Consumer, TopicPartition

    copy = tmp_path / "kafka-logs"
    shutil.copytree(kafka_corpus, copy)
    with KlogBroker(tmp_path / "d", overrides={"log.dirs": str(copy)}) as broker:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "c",
                             "enable.auto.commit": False})
        try:
            counts = {}
            for partition in range(3):
                consumer.assign([TopicPartition("first_topic", partition, 0)])
                n = 0
                empty = 0
                while empty < 3:
                    msg = consumer.poll(0.5)
                    if msg is None:
                        empty += 1
                        continue
                    if msg.error() is None:
                        n += 1
                counts[partition] = n
            assert sorted(counts.values()) == [11, 12, 18]
        finally:
            consumer.close()


@pytest.mark.usefixtures("klog_broker")
def test_the_pytest_plugin_fixture_gives_a_running_broker(klog_broker) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": klog_broker.bootstrap_servers})
    metadata = admin.list_topics(timeout=10)
    assert list(metadata.brokers) == [0]


def test_unimplemented_configs_are_one_start_up_warning_line(tmp_path) -> None:
    """Issue 23: a Kafka config klog knows but does not implement is accepted (Kafka
    accepts it: here sasl.kerberos.min.time.before.relogin by IncrementalAlterConfigs, which
    klog refused as an unknown broker config name) and said at start-up in one line that
    lists every such name set, in the file, by --override or dynamically."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    broker = KlogBroker(tmp_path / "data", overrides={
        "background.threads": "4",
    })
    with broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        resource = ConfigResource("BROKER", "0", incremental_configs=[
            ConfigEntry("sasl.kerberos.min.time.before.relogin", "120000",
                        incremental_operation=AlterConfigOpType.SET)])
        for future in admin.incremental_alter_configs([resource]).values():
            assert future.result(timeout=20) is None
        (described,) = admin.describe_configs(
            [ConfigResource("BROKER", "0")]).values()
        configs = described.result(timeout=20)
        assert configs["sasl.kerberos.min.time.before.relogin"].value == "120000"
        assert broker.stop() == 0
        broker.start()  # the dynamic config now comes from the metastore at start-up
        assert broker.stop() == 0
    lines = broker.log_tail(400).splitlines()
    warned = [line for line in lines if "accepted, not implemented:" in line]
    # first start: the override; the AlterConfigs: its name; the restart: both, one line
    assert len(warned) == 3, lines
    assert warned[0].split("accepted, not implemented: ")[1].startswith(
        "background.threads (")
    assert " WARNING accepted, not implemented: sasl.kerberos.min.time.before.relogin (" \
        in warned[1]
    assert ("WARNING accepted, not implemented: background.threads, "
            "sasl.kerberos.min.time.before.relogin (klog.daemon.broker)") in warned[2]


def test_an_unimplemented_security_config_refuses_start_up(tmp_path) -> None:
    """zookeeper.set.acl=true asks for secure znodes, which klog does not create: ignoring
    it would leave them open, so the broker does not start (one line, exit 2)."""
    result = _run("broker", "start", "-o", "zookeeper.set.acl=true",
                  "-o", f"log.dirs={tmp_path}")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "zookeeper.set.acl=true is not implemented" in errors[0]
