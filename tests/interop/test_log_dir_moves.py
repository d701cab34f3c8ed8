"""Moving a replica between two log dirs of a real klog broker (AlterReplicaLogDirs) with
real clients: ``klog reassign execute`` with ``log_dirs`` and a
--replica-alter-log-dirs-throttle, while librdkafka produces (acks=all, idempotent) and
consumes; the broker is killed (SIGKILL) or restarted in the middle of the move, which then
goes on from where its future log stood; ``klog log-dirs describe`` shows the move,
``klog reassign verify`` its completion. Every acknowledged record is read back, in order,
from the moved log. Then kafka-python's KafkaAdminClient: alter_replica_log_dirs answered
as Kafka answers it, a move it asks for, describe_log_dirs after it (kafka-python's own
integration test ``test_alter_replica_log_dirs`` is run against klog as README says)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(300)

TOPIC = "moving"
THROTTLE = 300_000  # bytes/s: the preloaded ~3 MB take ~10 s to copy
runner = CliRunner()


def _klog(broker: KlogBroker, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--bootstrap-server", broker.bootstrap_servers],
                           env={"COLUMNS": "250"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KlogBroker]:
    dirs = [tmp_path / "disk-a", tmp_path / "disk-b"]
    b = KlogBroker(tmp_path / "data", overrides={
        "log.dirs": ",".join(map(str, dirs)), "num.partitions": "1",
        "log.segment.bytes": str(1 << 20)})
    b.start()
    try:
        yield b
    finally:
        b.kill()


def _log_dirs(broker: KlogBroker) -> dict[str, Any]:
    code, out, err = _klog(broker, "log-dirs", "describe", "--json")
    assert code == 0, err
    (entry,) = json.loads(out)["brokers"]
    return {d["logDir"]: {p["partition"]: p for p in d["partitions"]}
            for d in entry["logDirs"]}


def _where(broker: KlogBroker) -> tuple[str | None, str | None, int, int]:
    """(the dir of moving-0, the dir of its future log, their sizes)."""
    current = future = None
    sizes = [0, 0]
    for log_dir, parts in _log_dirs(broker).items():
        p = parts.get(f"{TOPIC}-0")
        if p is not None:
            if p["isFuture"]:
                future, sizes[1] = log_dir, p["size"]
            else:
                current, sizes[0] = log_dir, p["size"]
    return current, future, sizes[0], sizes[1]


class Load:
    """A producer (acks=all, idempotent) and a consumer running in threads."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.consumed: list[bytes] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]

    def start(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def _produce(self) -> None:
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                                "enable.idempotence": True, "linger.ms": 5,
                                "message.timeout.ms": 120_000})

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.acked.append(msg.value())
            else:
                self.failed.append(str(err))

        i = 0
        while not self.stop.is_set():
            producer.produce(TOPIC, b"live-%08d" % i + b"y" * 90, partition=0,
                             on_delivery=delivered)
            i += 1
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(120)

    def _consume(self) -> None:
        consumer = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "watch",
                                "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([ck.TopicPartition(TOPIC, 0, 0)])
        try:
            while not self.stop.is_set():
                for msg in consumer.consume(500, timeout=0.5):
                    if msg.error() is None:
                        self.consumed.append(msg.value())
        finally:
            consumer.close()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(180)


def _read_all(bootstrap: str, count: int) -> list[bytes]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([ck.TopicPartition(TOPIC, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 90
    try:
        while len(out) < count and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1.0):
                assert msg.error() is None, msg.error()
                out.append(msg.value())
    finally:
        consumer.close()
    return out


def _wait(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


@pytest.mark.parametrize("restart", ["kill", "stop"])
def test_a_replica_moves_under_load_across_a_restart(broker: KlogBroker, tmp_path: Path,
                                                     restart: str) -> None:
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    preload = [b"pre-%08d" % i + b"x" * 1000 for i in range(3000)]
    for value in preload:
        producer.produce(TOPIC, value, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    source, future, _size, _ = _where(broker)
    assert source is not None and future is None
    target = next(d for d in _log_dirs(broker) if d != source)
    load = Load(broker.bootstrap_servers).start()
    try:
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": TOPIC, "partition": 0, "replicas": [0], "log_dirs": [target]}]}))
        code, out, err = _klog(broker, "reassign", "execute", "--reassignment-json-file",
                               str(plan), "--replica-alter-log-dirs-throttle", str(THROTTLE))
        assert code == 0, err
        assert f"The replica-alter-dir throttle limit was set to {THROTTLE} B/s" in out
        assert (f"Successfully started moving log directory to {target} for replica "
                f"{TOPIC}-0 with broker 0") in out
        # The throttle holds the move back: caught in the middle, part copied.
        current, future, size, copied = _wait(
            lambda: (w := _where(broker))[1] is not None and w[3] > 0 and w, 30,
            "the move to start copying")
        assert (current, future) == (source, target) and 0 < copied < size
        code, out, _ = _klog(broker, "log-dirs", "describe")
        assert code == 0 and "Moves between log dirs in progress" in out
        code, out, _ = _klog(broker, "reassign", "verify", "--reassignment-json-file",
                             str(plan), "--preserve-throttles")
        assert f"Reassignment of replica {TOPIC}-0-0 is still in progress." in out
        if restart == "kill":
            broker.kill()
        else:
            broker.stop()
        broker.start()
        # The future log was loaded where the copy stood; the move goes on.
        current, future, _size, after = _wait(
            lambda: (w := _where(broker))[0] is not None and w, 30, "the broker back")
        assert current == source and future == target and after > 0
        _wait(lambda: f"resuming the move of {TOPIC}-0" in broker.log_tail(400), 30,
              "the move to resume")
        # Lift the throttle (a dynamic broker config) and let the move finish.
        code, _out, err = _klog(broker, "configs", "alter", "broker", "0", "--delete",
                                "replica.alter.log.dirs.io.max.bytes.per.second")
        assert code == 0, err
        code, out, err = _klog(broker, "reassign", "verify", "--reassignment-json-file",
                               str(plan), "--wait", "--timeout", "120000")
        assert code == 0, err
        assert f"Reassignment of replica {TOPIC}-0-0 completed successfully." in out
        assert "Clearing broker-level throttles" in out
        time.sleep(1.0)  # load goes on a moment against the moved log
    finally:
        load.finish()
    current, future, _size, _ = _where(broker)
    assert (current, future) == (target, None)
    assert not [p for p in Path(source).iterdir() if p.name == f"{TOPIC}-0"]
    assert not load.failed, load.failed[:3]
    acked = set(load.acked)
    everything = _read_all(broker.bootstrap_servers, len(preload) + len(acked))
    assert everything[:len(preload)] == preload
    live = everything[len(preload):]
    assert acked <= set(live), f"{len(acked - set(live))} acknowledged records missing"
    assert live == sorted(live)  # the producer's order, no duplicates
    # The consumer read while the replica moved and across the restart.
    assert set(load.consumed) <= set(everything) and len(load.consumed) > len(preload)
    assert os.path.isdir(os.path.join(target, f"{TOPIC}-0"))


def test_kafka_pythons_alter_replica_log_dirs(broker: KlogBroker) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import KafkaAdminClient
        from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError
        from kafka.structs import TopicPartitionReplica

    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all"})
    for i in range(200):
        producer.produce(TOPIC, b"kp-%04d" % i, partition=0)
    assert producer.flush(30) == 0
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers,
                             request_timeout_ms=20000)
    try:
        source, _future, _size, _ = _where(broker)
        assert source is not None
        target = next(d for d in _log_dirs(broker) if d != source)
        here = TopicPartitionReplica(TOPIC, 0, 0)
        assert admin.alter_replica_log_dirs({here: source}) == {here: NoError}
        missing = TopicPartitionReplica(TOPIC, 5, 0)
        answers = admin.alter_replica_log_dirs({missing: target})
        assert answers[missing] is ReplicaNotAvailableError
        answers = admin.alter_replica_log_dirs({here: "/no/such/dir"})
        assert answers[here] is LogDirNotFoundError
        assert admin.alter_replica_log_dirs({here: target}) == {here: NoError}
        _wait(lambda: _where(broker)[:2] == (target, None), 60, "the move to finish")
        (per_broker,) = admin.describe_log_dirs()
        dirs = {d["log_dir"]: d for d in per_broker["log_dirs"]}
        moved = [p for t in dirs[target]["topics"] if t["name"] == TOPIC
                 for p in t["partitions"]]
        assert [(p["partition_index"], p["is_future_key"]) for p in moved] == [(0, False)]
    finally:
        admin.close()
    assert _read_all(broker.bootstrap_servers, 200) == [b"kp-%04d" % i for i in range(200)]
