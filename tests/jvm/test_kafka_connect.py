"""Kafka Connect (connect-runtime, the version pinned in tests/jvm/pom.xml) in distributed
mode against klog: two workers (JVMs of their own, REST on loopback) with
exactly.once.source.support=enabled (KIP-618: source records and their offsets in one
transaction on klog). Their config, offset and status topics are created compacted on klog
and used; FileStreamSource copies a file to a topic and FileStreamSink the topic back to a
file, through the JSON converter; the source is paused, resumed and restarted through the
REST API; the worker running the source task is killed -9 and started again, and the copy
goes on from its committed offsets with every line in the topic exactly once."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from klog.testing import KlogBroker, free_port
from tests.interop.conftest import stored_batches
from tests.jvm.driver import JavaProcess

pytestmark = pytest.mark.timeout(300)

GROUP = "connect-cluster"
INTERNAL = {"config": "connect-configs", "offset": "connect-offsets", "status": "connect-status"}
TOPIC = "connect-lines"


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    return {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@dataclass
class Worker:
    """One Connect worker process: ConnectDistributed with its properties file."""

    name: str
    port: int
    properties: Path
    log: Path
    process: JavaProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def worker_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    def launch(self) -> None:
        self.process = JavaProcess.main(
            "org.apache.kafka.connect.cli.ConnectDistributed", str(self.properties),
            log=self.log, options=["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                                   "-Dorg.slf4j.simpleLogger.showDateTime=true"])

    def wait_ready(self) -> None:
        wait(lambda: isinstance(rest(self, "GET", "/connectors"), list), 90,
             f"worker {self.name}'s REST API", self)

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop(30)


def rest(worker: Worker, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(worker.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return json.loads(raw) if raw else None


def wait(predicate: Any, timeout: float, what: str, *workers: Worker) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = predicate()
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            last = e
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {w.name}:\n" + "\n".join(
                w.log.read_text(errors="replace").splitlines()[-40:]) for w in workers
                if w.log.exists())
            pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})\n"
                        f"{logs}")
        time.sleep(0.2)


def worker_properties(path: Path, bootstrap: str, port: int) -> None:
    settings = {
        "bootstrap.servers": bootstrap,
        "group.id": GROUP,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "config.storage.topic": INTERNAL["config"],
        "offset.storage.topic": INTERNAL["offset"],
        "status.storage.topic": INTERNAL["status"],
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "5",
        "status.storage.partitions": "3",
        "offset.flush.interval.ms": "1000",
        "exactly.once.source.support": "enabled",
        "listeners": f"http://127.0.0.1:{port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(port),
        # A dead worker's tasks move after 3 s, not Connect's default 5 minutes.
        "scheduled.rebalance.max.delay.ms": "3000",
        "session.timeout.ms": "10000",
        "heartbeat.interval.ms": "1000",
        "plugin.discovery": "service_load",
    }
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


@pytest.fixture
def workers(broker: KlogBroker, tmp_path: Path) -> Iterator[list[Worker]]:
    made = []
    for name in ("w1", "w2"):
        port = free_port()
        properties = tmp_path / f"{name}.properties"
        worker_properties(properties, broker.bootstrap_servers, port)
        made.append(Worker(name, port, properties, tmp_path / f"{name}.log"))
    try:
        for w in made:  # both JVMs start at once
            w.launch()
        for w in made:
            w.wait_ready()
        yield made
    finally:
        for w in made:
            w.stop()


def status(worker: Worker, connector: str) -> dict[str, Any]:
    result: dict[str, Any] = rest(worker, "GET", f"/connectors/{connector}/status")
    return result


def states(worker: Worker, connector: str) -> list[str]:
    s = status(worker, connector)
    return [s["connector"]["state"], *[t["state"] for t in s["tasks"]]]


def lines_in(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def append(path: Path, first: int, last: int) -> None:
    with open(path, "a") as f:
        f.writelines(f"line-{i}\n" for i in range(first, last + 1))


def committed_values(bootstrap: str) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        out = []
        while True:
            message = consumer.poll(5)
            assert message is not None, "no end of partition within 5 s"
            if message.error() is not None:
                assert message.error().code() == -191, message.error()  # _PARTITION_EOF
                return out
            out.append(json.loads(message.value()))
    finally:
        consumer.close()


def test_file_connectors_through_pause_restart_and_a_worker_kill(
        broker: KlogBroker, workers: list[Worker], tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    w1, w2 = workers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    internal = [ConfigResource("topic", t) for t in INTERNAL.values()]
    for resource, future in zip(internal, admin.describe_configs(internal).values(),
                                strict=True):
        assert future.result(10)["cleanup.policy"].value == "compact", resource.name

    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("")
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        future.result(15)
    rest(w1, "POST", "/connectors", {"name": "source", "config": {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "tasks.max": "1", "file": str(source_file), "topic": TOPIC,
        "exactly.once.support": "required", "transaction.boundary": "poll"}})
    rest(w2, "POST", "/connectors", {"name": "sink", "config": {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1", "file": str(sink_file), "topics": TOPIC}})
    for name in ("source", "sink"):
        wait(lambda name=name: states(w1, name) == ["RUNNING", "RUNNING"], 60,
             f"{name} and its task running", w1, w2)
    assert sorted(rest(w2, "GET", "/connectors")) == ["sink", "source"]

    append(source_file, 1, 100)
    wait(lambda: len(lines_in(sink_file)) >= 100, 60, "100 lines copied", w1, w2)
    assert lines_in(sink_file) == [f"line-{i}" for i in range(1, 101)]
    values = committed_values(bootstrap)
    assert values[0] == {"schema": {"type": "string", "optional": False}, "payload": "line-1"}
    assert [v["payload"] for v in values] == [f"line-{i}" for i in range(1, 101)]
    # Exactly-once source: the records went in transactions, with commit markers.
    batches = stored_batches(broker.log_dir, TOPIC)
    assert any(b.is_transactional and not b.is_control for b in batches)
    assert any(b.is_control for b in batches)

    # Pause: nothing more is copied until the connector is resumed.
    rest(w2, "PUT", "/connectors/source/pause")
    wait(lambda: states(w1, "source") == ["PAUSED", "PAUSED"], 30, "source paused", w1, w2)
    append(source_file, 101, 120)
    time.sleep(2)
    assert len(lines_in(sink_file)) == 100
    rest(w1, "PUT", "/connectors/source/resume")
    wait(lambda: len(lines_in(sink_file)) >= 120, 60, "the lines written while paused", w1, w2)

    # Restart the connector and its task through the REST API.
    restarted = rest(w1, "POST", "/connectors/source/restart?includeTasks=true")
    assert restarted is None or restarted["connector"]["state"] in ("RESTARTING", "RUNNING")
    wait(lambda: states(w2, "source") == ["RUNNING", "RUNNING"], 60, "source running again",
         w1, w2)
    append(source_file, 121, 140)
    wait(lambda: len(set(lines_in(sink_file))) >= 140, 60, "lines after the restart", w1, w2)

    # Kill -9 the worker running the source task; lines keep coming; start it again.
    task_worker = status(w1, "source")["tasks"][0]["worker_id"]
    victim = w1 if task_worker == w1.worker_id else w2
    survivor = w2 if victim is w1 else w1
    victim.kill()
    append(source_file, 141, 170)
    victim.start()
    append(source_file, 171, 200)
    wait(lambda: states(survivor, "source") == ["RUNNING", "RUNNING"], 90,
         "source running after the kill", w1, w2)
    wait(lambda: set(lines_in(sink_file)) >= {f"line-{i}" for i in range(1, 201)}, 90,
         "every line in the sink's file", w1, w2)
    payloads = [v["payload"] for v in committed_values(bootstrap)]
    repeated = {p: n for p, n in Counter(payloads).items() if n > 1}
    assert not repeated, f"lines in the topic more than once: {sorted(repeated)[:10]}"
    assert payloads == [f"line-{i}" for i in range(1, 201)]

    for name in ("source", "sink"):
        rest(survivor, "DELETE", f"/connectors/{name}")
    wait(lambda: rest(victim, "GET", "/connectors") == [], 30, "connectors deleted", w1, w2)
