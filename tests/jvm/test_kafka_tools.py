"""Kafka's own command-line tools (kafka-tools and kafka_2.13, the version pinned in
tests/jvm/pom.xml) against klog, run in one driver JVM by their main classes as the
kafka-*.sh scripts run them, and compared with what klog's equivalents print (their
--json): topics, consumer groups, configs, ACLs, delete-records, get-offsets, log-dirs,
broker-api-versions, the producer and consumer perf tests, transactions (list, describe,
describe-producers, find-hanging, abort), and reassign-partitions (generate, execute,
verify) and leader-election on a 3-broker cluster."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from typer.testing import CliRunner

from klog.cli.app import app
from klog.protocol.records.v2 import BatchBuilder
from klog.storage.validator import AppendOrigin
from tests.cluster.conftest import Cluster
from tests.daemon.wire import InProcessBroker
from tests.jvm.conftest import wait_until_settled
from tests.jvm.driver import Jvm

pytestmark = pytest.mark.timeout(240)

TOOLS = "org.apache.kafka.tools."
TOPICS = TOOLS + "TopicCommand"
GROUPS = TOOLS + "consumer.group.ConsumerGroupCommand"
CONFIGS = "kafka.admin.ConfigCommand"
ACLS = TOOLS + "AclCommand"
DELETE_RECORDS = TOOLS + "DeleteRecordsCommand"
GET_OFFSETS = TOOLS + "GetOffsetShell"
LOG_DIRS = TOOLS + "LogDirsCommand"
API_VERSIONS = TOOLS + "BrokerApiVersionsCommand"
PRODUCER_PERF = TOOLS + "ProducerPerformance"
CONSUMER_PERF = TOOLS + "ConsumerPerformance"
TRANSACTIONS = TOOLS + "TransactionsCommand"
REASSIGN = TOOLS + "reassign.ReassignPartitionsCommand"
ELECT = TOOLS + "LeaderElectionCommand"


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    # The ACL authorizer, with every (unauthenticated) client a super user: the ACL tools
    # have ACLs to manage and nothing else is refused.
    return {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS"}


@dataclass
class Ran:
    exit: int
    stdout: str
    stderr: str


def kafka(jvm: Jvm, main: str, *argv: str, ok: bool = True) -> Ran:
    """One of Kafka's tools; with ``ok``, it must exit 0."""
    got = jvm.call("tool", main=main, argv=list(argv))
    ran = Ran(got["exit"], got["stdout"], got["stderr"])
    if ok:
        assert ran.exit == 0, f"{main.split('.')[-1]} {' '.join(argv)} exited {ran.exit}:\n" \
                              f"{ran.stdout}\n{ran.stderr}"
    return ran


def klog(bootstrap: str, *args: str) -> Any:
    """A klog command with --json; its document."""
    result = CliRunner().invoke(app, [*args, "--json"],
                                env={"COLUMNS": "250", "KLOG_BOOTSTRAP_SERVER": bootstrap})
    assert result.exit_code == 0, f"klog {' '.join(args)}: {result.output}"
    return json.loads(result.stdout)


def topic_id(kafka_id: str) -> str:
    """Kafka prints a topic id in URL-safe base64; klog as a UUID."""
    return str(uuid.UUID(bytes=base64.urlsafe_b64decode(kafka_id + "==")))


def fields(line: str) -> dict[str, str]:
    """``Key: value`` fields of a tab-separated line, as kafka-topics prints them."""
    out = {}
    for part in line.strip().split("\t"):
        key, _, value = part.partition(": ")
        out[key] = value
    return out


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1,
            timestamp: int | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions,
                         timestamp=0 if timestamp is None else timestamp + i * 1000)
    assert producer.flush(20) == 0


def test_kafka_topics(jvm: Jvm, bootstrap: str, topic: str) -> None:
    bs = ("--bootstrap-server", bootstrap)
    created = kafka(jvm, TOPICS, *bs, "--create", "--topic", topic, "--partitions", "3",
                    "--replication-factor", "1", "--config", "retention.ms=1000000")
    # (After Kafka's warning about '.' and '_' in topic names: ours have '_'.)
    assert created.stdout.strip().endswith(f"\nCreated topic {topic}.")
    again = kafka(jvm, TOPICS, *bs, "--create", "--topic", topic, "--partitions", "1", ok=False)
    assert again.exit == 1 and "already exists" in again.stderr
    assert topic in kafka(jvm, TOPICS, *bs, "--list").stdout.split()

    kafka(jvm, TOPICS, *bs, "--alter", "--topic", topic, "--partitions", "4")
    lines = kafka(jvm, TOPICS, *bs, "--describe", "--topic", topic).stdout.strip().splitlines()
    header, rows = fields(lines[0]), [fields(line) for line in lines[1:]]
    ours = klog(bootstrap, "topic", "describe", topic)
    assert topic_id(header["TopicId"]) == ours["topic_id"]
    assert int(header["PartitionCount"]) == ours["partitions"] == 4
    assert int(header["ReplicationFactor"]) == ours["replicas"] == 1
    dynamic = {c["name"]: c["value"] for c in ours["configs"]
               if c["source"] == "DYNAMIC_TOPIC_CONFIG"}
    assert header["Configs"] == ",".join(f"{k}={v}" for k, v in dynamic.items()) \
        == "retention.ms=1000000"
    assert [(int(r["Partition"]), int(r["Leader"]), r["Replicas"], r["Isr"]) for r in rows] \
        == [(p["partition"], p["leader"], ",".join(map(str, p["replicas"])),
             ",".join(map(str, p["isr"]))) for p in ours["partition_details"]]
    listed = {t["topic"] for t in klog(bootstrap, "topic", "list")}
    assert topic in listed

    kafka(jvm, TOPICS, *bs, "--alter", "--topic", topic, "--partitions", "2", ok=False)
    kafka(jvm, TOPICS, *bs, "--delete", "--topic", topic)
    assert topic not in kafka(jvm, TOPICS, *bs, "--list").stdout.split()
    assert topic not in {t["topic"] for t in klog(bootstrap, "topic", "list")}


def table(text: str) -> list[list[str]]:
    """The rows of a whitespace-aligned table after its header line."""
    lines = [line for line in text.splitlines() if line.strip()]
    return [line.split() for line in lines[1:]]


def test_kafka_consumer_groups(jvm: Jvm, bootstrap: str, topic: str) -> None:
    bs = ("--bootstrap-server", bootstrap)
    kafka(jvm, TOPICS, *bs, "--create", "--topic", topic, "--partitions", "2")
    produce(bootstrap, topic, 20, partitions=2, timestamp=1_700_000_000_000)
    group = f"g-{topic}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    read = 0
    while read < 15:
        read += len(consumer.consume(15 - read, timeout=1))
    consumer.commit(asynchronous=False)
    consumer.close()

    assert group in kafka(jvm, GROUPS, *bs, "--list").stdout.split()
    described = kafka(jvm, GROUPS, *bs, "--describe", "--group", group)
    ours = {(p["topic"], p["partition"]): p
            for p in klog(bootstrap, "groups", "describe", group)[0]["partitions"]}
    rows = table(described.stdout)
    assert len(rows) == len(ours) == 2
    for g, t, p, current, end, lag, *_ in rows:
        mine = ours[(t, int(p))]
        assert (g, int(current), int(end), int(lag)) == (
            group, mine["current_offset"], mine["log_end_offset"], mine["lag"])
    state = table(kafka(jvm, GROUPS, *bs, "--describe", "--group", group, "--state").stdout)
    assert state[0][0] == group and state[0][-2:] == ["Empty", "0"]

    shifted = kafka(jvm, GROUPS, *bs, "--reset-offsets", "--group", group, "--topic", topic,
                    "--shift-by", "-3", "--dry-run")
    ours_dry = klog(bootstrap, "groups", "reset-offsets", group, "--topic", topic,
                    "--shift-by", "-3", "--dry-run")
    assert sorted((r[1], int(r[2]), int(r[3])) for r in table(shifted.stdout)) == sorted(
        (p["topic"], p["partition"], p["new_offset"]) for p in ours_dry["partitions"])
    kafka(jvm, GROUPS, *bs, "--reset-offsets", "--group", group, "--topic", topic,
          "--to-datetime", "2023-11-14T22:13:24.000", "--execute")
    after = klog(bootstrap, "groups", "describe", group)[0]["partitions"]
    by_time = {p["partition"]: p["current_offset"] for p in after}
    # 22:13:24 UTC is 1_700_000_004_000: record 4 (partition 0, offset 2) onwards.
    assert by_time == {0: 2, 1: 2}
    kafka(jvm, GROUPS, *bs, "--reset-offsets", "--group", group, "--all-topics",
          "--to-earliest", "--execute")
    assert {p["current_offset"] for p in klog(bootstrap, "groups", "describe", group)[0][
        "partitions"]} == {0}

    deleted = kafka(jvm, GROUPS, *bs, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." \
        in deleted.stdout
    assert group not in {g["group"] for g in klog(bootstrap, "groups", "list")}
    missing = kafka(jvm, GROUPS, *bs, "--describe", "--group", group, ok=False)
    assert "does not exist" in missing.stdout + missing.stderr


def test_kafka_configs(jvm: Jvm, bootstrap: str, topic: str) -> None:
    bs = ("--bootstrap-server", bootstrap)
    kafka(jvm, TOPICS, *bs, "--create", "--topic", topic)
    kafka(jvm, CONFIGS, *bs, "--alter", "--entity-type", "topics", "--entity-name", topic,
          "--add-config", "retention.ms=5000,cleanup.policy=[compact,delete]")
    described = kafka(jvm, CONFIGS, *bs, "--describe", "--entity-type", "topics",
                      "--entity-name", topic).stdout.splitlines()
    assert described[0] == f"Dynamic configs for topic {topic} are:"
    theirs = dict(re.match(r"\s+([\w.]+)=(\S*) ", line).groups()  # type: ignore[union-attr]
                  for line in described[1:])
    ours = {c["name"]: c["value"] for c in klog(bootstrap, "configs", "describe", "topic",
                                                 topic)["configs"]
            if c["source"] == "DYNAMIC_TOPIC_CONFIG"}
    assert theirs == ours == {"retention.ms": "5000", "cleanup.policy": "compact,delete"}
    kafka(jvm, CONFIGS, *bs, "--alter", "--entity-type", "topics", "--entity-name", topic,
          "--delete-config", "retention.ms")
    assert "retention.ms" not in kafka(jvm, CONFIGS, *bs, "--describe", "--entity-type",
                                       "topics", "--entity-name", topic).stdout

    kafka(jvm, CONFIGS, *bs, "--alter", "--entity-type", "brokers", "--entity-default",
          "--add-config", "log.cleaner.backoff.ms=20000")
    defaults = kafka(jvm, CONFIGS, *bs, "--describe", "--entity-type", "brokers",
                     "--entity-default").stdout
    assert "log.cleaner.backoff.ms=20000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_" \
           "CONFIG:log.cleaner.backoff.ms=20000, DEFAULT_CONFIG:log.cleaner.backoff.ms=15000}" \
        in defaults
    ours_broker = {c["name"]: c for c in klog(bootstrap, "configs", "describe", "broker",
                                              "0")["configs"]}
    assert ours_broker["log.cleaner.backoff.ms"]["value"] == "20000"
    kafka(jvm, CONFIGS, *bs, "--alter", "--entity-type", "brokers", "--entity-default",
          "--delete-config", "log.cleaner.backoff.ms")

    # Users: SCRAM credentials and quotas (Kafka's tool alters them one kind at a time).
    kafka(jvm, CONFIGS, *bs, "--alter", "--entity-type", "users", "--entity-name", "alice",
          "--add-config", "SCRAM-SHA-512=[iterations=8192,password=alice-secret]")
    kafka(jvm, CONFIGS, *bs, "--alter", "--entity-type", "users", "--entity-name", "alice",
          "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    kafka(jvm, CONFIGS, *bs, "--alter", "--entity-type", "clients", "--entity-name", "c1",
          "--add-config", "request_percentage=50")
    user = kafka(jvm, CONFIGS, *bs, "--describe", "--entity-type", "users", "--entity-name",
                 "alice").stdout
    assert "Quota configs for user-principal 'alice' are consumer_byte_rate=2048.0, " \
           "producer_byte_rate=1024.0" in user
    assert "SCRAM credential configs for user-principal 'alice' are " \
           "SCRAM-SHA-512=iterations=8192" in user
    ours_user = klog(bootstrap, "configs", "describe", "user", "alice")
    assert ours_user["users"] == [{"user": "alice", "credentials": [
        {"mechanism": "SCRAM-SHA-512", "iterations": 8192}]}]
    assert ours_user["quotas"] == [{"entity": {"user": "alice"}, "values": {
        "consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0}}]
    client = kafka(jvm, CONFIGS, *bs, "--describe", "--entity-type", "clients",
                   "--entity-name", "c1").stdout
    assert "Quota configs for client-id 'c1' are request_percentage=50.0" in client


def test_kafka_configs_broker_loggers(jvm: Jvm, bootstrap: str) -> None:
    bs = ("--bootstrap-server", bootstrap)
    logger = "klog.daemon.admin"
    which = ("--entity-type", "broker-loggers", "--entity-name", "0")

    def theirs() -> dict[str, str]:
        out = kafka(jvm, CONFIGS, *bs, "--describe", *which).stdout.splitlines()
        assert out[0] == "Dynamic configs for broker-logger 0 are:"
        return dict(re.match(r"\s+(\S+)=(\S*) sensitive=false synonyms=\{\}$",  # type: ignore[union-attr]
                             line).groups() for line in out[1:])

    def ours() -> dict[str, str]:
        return {c["name"]: c["value"]
                for c in klog(bootstrap, "configs", "describe", "broker-logger", "0")["configs"]}

    before = theirs()
    assert before == ours()
    root = before["root"]
    assert logger in before and before[logger] == root
    altered = kafka(jvm, CONFIGS, *bs, "--alter", *which, "--add-config", f"{logger}=DEBUG")
    assert altered.stdout.strip() == "Completed updating config for broker-logger 0."
    assert theirs()[logger] == ours()[logger] == "DEBUG"
    kafka(jvm, CONFIGS, *bs, "--alter", *which, "--delete-config", logger)
    assert theirs()[logger] == ours()[logger] == root
    refused = kafka(jvm, CONFIGS, *bs, "--alter", *which, "--add-config", f"{logger}=LOUD",
                    ok=False)
    assert refused.exit == 1
    assert f"Cannot set the log level of {logger} to LOUD" in refused.stderr


def test_kafka_acls(jvm: Jvm, bootstrap: str, topic: str) -> None:
    bs = ("--bootstrap-server", bootstrap)
    kafka(jvm, ACLS, *bs, "--add", "--allow-principal", "User:alice", "--operation", "Read",
          "--operation", "Write", "--topic", topic)
    kafka(jvm, ACLS, *bs, "--add", "--allow-principal", "User:alice", "--operation", "Read",
          "--group", "app-", "--resource-pattern-type", "prefixed")
    kafka(jvm, ACLS, *bs, "--add", "--deny-principal", "User:mallory", "--deny-host",
          "10.0.0.1", "--operation", "All", "--topic", "*")
    listed = kafka(jvm, ACLS, *bs, "--list").stdout
    theirs = set()
    resource = None
    for line in listed.splitlines():
        found = re.match(r"Current ACLs for resource `ResourcePattern\(resourceType=(\w+), "
                         r"name=(.*), patternType=(\w+)\)`:", line)
        if found:
            resource = found.groups()
            continue
        entry = re.match(r"\s+\(principal=(.*), host=(.*), operation=(\w+), "
                         r"permissionType=(\w+)\)", line)
        if entry:
            assert resource is not None
            theirs.add((*resource, *entry.groups()))
    ours = {(r["resource_type"].upper(), r["name"], r["pattern_type"].upper(), r["principal"],
             r["host"], r["operation"].upper(), r["permission"].upper())
            for r in klog(bootstrap, "acls", "list")}
    assert theirs == ours
    assert ("TOPIC", topic, "LITERAL", "User:alice", "*", "WRITE", "ALLOW") in theirs
    assert ("GROUP", "app-", "PREFIXED", "User:alice", "*", "READ", "ALLOW") in theirs
    assert ("TOPIC", "*", "LITERAL", "User:mallory", "10.0.0.1", "ALL", "DENY") in theirs
    kafka(jvm, ACLS, *bs, "--remove", "--force", "--allow-principal", "User:alice",
          "--operation", "Write", "--topic", topic)
    after = {(r["name"], r["operation"].upper()) for r in klog(bootstrap, "acls", "list")}
    assert (topic, "WRITE") not in after and (topic, "READ") in after
    kafka(jvm, ACLS, *bs, "--remove", "--force", "--topic", topic)
    kafka(jvm, ACLS, *bs, "--remove", "--force", "--topic", "*")
    kafka(jvm, ACLS, *bs, "--remove", "--force", "--group", "app-",
          "--resource-pattern-type", "prefixed")
    assert klog(bootstrap, "acls", "list") == []


def test_kafka_delete_records_and_get_offsets(jvm: Jvm, bootstrap: str, topic: str,
                                              tmp_path: Path) -> None:
    bs = ("--bootstrap-server", bootstrap)
    base = 1_700_000_000_000
    kafka(jvm, TOPICS, *bs, "--create", "--topic", topic, "--partitions", "2")
    produce(bootstrap, topic, 20, partitions=2, timestamp=base)
    plan = tmp_path / "delete.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 4}]}))
    deleted = kafka(jvm, DELETE_RECORDS, *bs, "--offset-json-file", str(plan)).stdout
    assert f"partition: {topic}-0\tlow_watermark: 4" in deleted

    def shell(*extra: str) -> dict[int, int]:
        out = kafka(jvm, GET_OFFSETS, *bs, "--topic", topic, *extra).stdout
        return {int(p): int(o) for _, p, o in (line.rsplit(":", 2)
                                               for line in out.split())}

    ours = {p["partition"]: p for p in klog(bootstrap, "offsets", topic, "--time",
                                            str(base + 5000))["partitions"]}
    assert shell() == {p: o["latest"] for p, o in ours.items()} == {0: 10, 1: 10}
    assert shell("--time", "-2") == {p: o["earliest"] for p, o in ours.items()} == {0: 4, 1: 0}
    assert shell("--time", str(base + 5000)) == {p: o["offset"] for p, o in ours.items()} \
        == {0: 4, 1: 2}
    assert shell("--time", "-3") == {0: 9, 1: 9}  # the max timestamp's record


def test_kafka_log_dirs_and_broker_api_versions(jvm: Jvm, bootstrap: str, broker: Any,
                                                topic: str) -> None:
    bs = ("--bootstrap-server", bootstrap)
    kafka(jvm, TOPICS, *bs, "--create", "--topic", topic, "--partitions", "2")
    produce(bootstrap, topic, 10, partitions=2)
    out = kafka(jvm, LOG_DIRS, *bs, "--describe", "--topic-list", topic).stdout
    theirs = json.loads(out.splitlines()[-1])
    ours = klog(bootstrap, "log-dirs", "describe", "--topic-list", topic)
    assert theirs["version"] == ours["version"] == 1
    [their_broker] = theirs["brokers"]
    [our_broker] = ours["brokers"]
    [their_dir] = their_broker["logDirs"]
    [our_dir] = our_broker["logDirs"]
    assert their_dir["logDir"] == our_dir["logDir"] == str(broker.log_dir)
    assert sorted(their_dir["partitions"], key=lambda p: p["partition"]) == sorted(
        our_dir["partitions"], key=lambda p: p["partition"])
    assert {p["partition"] for p in their_dir["partitions"]} == {f"{topic}-0", f"{topic}-1"}
    assert all(p["size"] > 0 for p in their_dir["partitions"])

    versions = kafka(jvm, API_VERSIONS, *bs).stdout
    theirs_api: dict[int, tuple[int, int] | None] = {}
    for key, rest in re.findall(r"\t\w+\((\d+)\): ([^,\n]+)", versions):
        if rest.startswith("UNSUPPORTED"):
            theirs_api[int(key)] = None
            continue
        numbers = [int(n) for n in re.findall(r"\d+", rest.split("[")[0])]
        theirs_api[int(key)] = (numbers[0], numbers[-1])
    [our_broker_apis] = klog(bootstrap, "api-versions")["brokers"]
    # klog lists the ZooKeeper-era inter-broker APIs (4-7) with no versions for clients;
    # Kafka 4's client knows them no longer.
    ours_api = {a["api_key"]: (a["min_version"], a["max_version"])
                for a in our_broker_apis["apis"] if a["min_version"] is not None}
    served = {k: v for k, v in theirs_api.items() if v is not None}
    assert served == ours_api


def test_kafka_perf_tools(jvm: Jvm, bootstrap: str, topic: str) -> None:
    kafka(jvm, TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", topic,
          "--partitions", "2")
    produced = kafka(jvm, PRODUCER_PERF, "--topic", topic, "--num-records", "20000",
                     "--record-size", "100", "--throughput", "-1", "--producer-props",
                     f"bootstrap.servers={bootstrap}", "acks=all", "compression.type=lz4")
    assert re.search(r"^20000 records sent, ", produced.stdout, re.MULTILINE), produced.stdout
    offsets = klog(bootstrap, "offsets", topic)["partitions"]
    assert sum(p["latest"] for p in offsets) == 20000
    consumed = kafka(jvm, CONSUMER_PERF, "--bootstrap-server", bootstrap, "--topic", topic,
                     "--messages", "20000", "--timeout", "20000")
    header, row = consumed.stdout.strip().splitlines()[-2:]
    stats = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in row.split(",")],
                     strict=True))
    assert int(stats["data.consumed.in.nMsg"]) == 20000
    assert float(stats["data.consumed.in.MB"]) == pytest.approx(20000 * 100 / 2**20, rel=1e-3)
    ours = klog(bootstrap, "perf", "consume", "--topic", topic, "--messages", "20000")
    assert ours["records"] == int(stats["data.consumed.in.nMsg"])
    assert ours["mb"] == pytest.approx(float(stats["data.consumed.in.MB"]), abs=1e-4)


OLD_TS = 1_700_000_000_000
HANGING_PID, HANGING_EPOCH = 777, 2


@pytest.fixture
def txn_broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    """A broker (in this process) whose topic "hang", partition 0, holds a transaction no
    coordinator knows: a hanging transaction, as a producer that died mid-transaction and
    whose id expired leaves it."""
    from klog.client.admin import AdminClient, NewTopic

    b = InProcessBroker(tmp_path / "txn").start()
    try:
        async def create() -> None:
            async with AdminClient(f"127.0.0.1:{b.port}") as admin:
                await admin.create_topics([NewTopic("hang", 1, 1), NewTopic("open", 1, 1)])

        asyncio.run(create())
        txn = BatchBuilder(producer_id=HANGING_PID, producer_epoch=HANGING_EPOCH,
                           base_sequence=0, is_transactional=True)
        txn.append(OLD_TS, None, b"in-txn")
        rm = b.broker.replica_manager
        result = b.call(lambda: rm.append_records({("hang", 0): txn.build()}, 1,
                                                  origin=AppendOrigin.COORDINATOR))
        assert result[("hang", 0)].error_code == 0
        yield b
    finally:
        b.stop()


def test_kafka_transactions(jvm: Jvm, txn_broker: InProcessBroker) -> None:
    bootstrap = f"127.0.0.1:{txn_broker.port}"
    bs = ("--bootstrap-server", bootstrap)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tools-tx",
                         "transaction.timeout.ms": 600000})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("open", b"r0", partition=0)
    assert producer.flush(20) == 0

    listed = table(kafka(jvm, TRANSACTIONS, *bs, "list").stdout)
    ours = klog(bootstrap, "transactions", "list")
    assert [[r[0], r[1], r[2], r[3]] for r in listed] == [
        [t["transactional_id"], str(t["coordinator"]), str(t["producer_id"]), t["state"]]
        for t in ours] == [["tools-tx", "0", str(ours[0]["producer_id"]), "Ongoing"]]
    # --duration-filter (ListTransactions v1, KIP-994): running longer than 0 ms, an hour.
    assert [r[0] for r in table(kafka(jvm, TRANSACTIONS, *bs, "list", "--duration-filter",
                                      "0").stdout)] == ["tools-tx"]
    assert table(kafka(jvm, TRANSACTIONS, *bs, "list", "--duration-filter",
                       "3600000").stdout) == []
    assert [t["transactional_id"] for t in klog(bootstrap, "transactions", "list",
                                                 "--duration-filter", "0")] == ["tools-tx"]
    assert klog(bootstrap, "transactions", "list", "--duration-filter", "3600000") == []
    described = table(kafka(jvm, TRANSACTIONS, *bs, "describe", "--transactional-id",
                            "tools-tx").stdout)[0]
    mine = klog(bootstrap, "transactions", "describe", "--transactional-id", "tools-tx")
    assert described[:6] == ["0", "tools-tx", str(mine["producer_id"]),
                             str(mine["producer_epoch"]), "Ongoing", "600000"]
    assert described[-1] == "open-0"
    producers = table(kafka(jvm, TRANSACTIONS, *bs, "describe-producers", "--topic", "hang",
                            "--partition", "0").stdout)
    assert producers == [[str(HANGING_PID), str(HANGING_EPOCH), "-1", "0", str(OLD_TS), "0"]]

    hanging = table(kafka(jvm, TRANSACTIONS, *bs, "find-hanging", "--broker-id", "0",
                          "--max-transaction-timeout", "0").stdout)
    ours_hanging = klog(bootstrap, "transactions", "find-hanging", "--broker-id", "0",
                        "--max-transaction-timeout", "0")
    assert [r[:6] for r in hanging] == [
        [h["topic"], str(h["partition"]), str(h["producer_id"]), str(h["producer_epoch"]),
         str(h["coordinator_epoch"]), str(h["start_offset"])] for h in ours_hanging] == [
        ["hang", "0", str(HANGING_PID), str(HANGING_EPOCH), "-1", "0"]]
    kafka(jvm, TRANSACTIONS, *bs, "abort", "--topic", "hang", "--partition", "0",
          "--start-offset", "0")
    assert table(kafka(jvm, TRANSACTIONS, *bs, "find-hanging", "--broker-id", "0",
                       "--max-transaction-timeout", "0").stdout) == []
    assert klog(bootstrap, "transactions", "find-hanging", "--broker-id", "0",
                "--max-transaction-timeout", "0") == []
    producer.commit_transaction(20)
    after = table(kafka(jvm, TRANSACTIONS, *bs, "describe", "--transactional-id",
                        "tools-tx").stdout)[0]
    assert after[4] == "CompleteCommit"


def test_kafka_reassign_partitions_and_leader_election(
        jvm: Jvm, cluster: Callable[..., Cluster], topic: str, tmp_path: Path) -> None:
    c = cluster(brokers=3)
    wait_until_settled(c)
    c.create_topic(topic, partitions=3, replication_factor=2)
    bootstrap = c.bootstrap_servers
    bs = ("--bootstrap-server", bootstrap)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generated = kafka(jvm, REASSIGN, *bs, "--generate", "--topics-to-move-json-file",
                      str(topics), "--broker-list", "1,2,3").stdout.splitlines()
    current = json.loads(generated[generated.index("Current partition replica assignment")
                                   + 1])
    proposed = json.loads(generated[generated.index("Proposed partition reassignment "
                                                    "configuration") + 1])
    described = klog(bootstrap, "topic", "describe", topic)["partition_details"]
    assert sorted((p["partition"], p["replicas"]) for p in current["partitions"]) == sorted(
        (p["partition"], p["replicas"]) for p in described)
    assert sorted(p["partition"] for p in proposed["partitions"]) == [0, 1, 2]

    # Move every partition to the two brokers it does not start with first.
    plan = {"version": 1, "partitions": [
        {"topic": topic, "partition": p["partition"],
         "replicas": [b for b in c.ids if b != p["replicas"][0]][:2]} for p in described]}
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    executed = kafka(jvm, REASSIGN, *bs, "--execute", "--reassignment-json-file",
                     str(plan_file)).stdout
    assert "Successfully started partition reassignments" in executed

    def verified() -> bool:
        out = kafka(jvm, REASSIGN, *bs, "--verify", "--reassignment-json-file",
                    str(plan_file)).stdout
        return all(f"Reassignment of partition {topic}-{p} is completed." in out
                   for p in range(3))

    c.wait(verified, 45, "kafka-reassign-partitions --verify to say every move completed")
    ours = klog(bootstrap, "reassign", "verify", "--reassignment-json-file", str(plan_file))
    assert ours["done"] is True
    assert [(p["partition"], p["status"], p["current_replicas"]) for p in ours["partitions"]] \
        == [(p["partition"], "completed", p["replicas"]) for p in plan["partitions"]]
    after = klog(bootstrap, "topic", "describe", topic)["partition_details"]
    assert [p["replicas"] for p in after] == [p["replicas"] for p in plan["partitions"]]

    # Leadership off the preferred replica of partition 0, then back with Kafka's tool.
    preferred = after[0]["replicas"][0]
    c.stop(preferred)
    c.wait_for_leader(topic, 0, exclude={preferred})
    c.start(preferred)
    c.wait_for_isr(topic, 0, after[0]["replicas"])
    elected = kafka(jvm, ELECT, *bs, "--election-type", "preferred",
                    "--all-topic-partitions").stdout
    done = re.search(r"Successfully completed leader election \(PREFERRED\) for partitions "
                     r"(.*)", elected)
    assert done is not None and f"{topic}-0" in done.group(1).split(", "), elected
    assert c.leader(topic, 0) == preferred
    again = kafka(jvm, ELECT, *bs, "--election-type", "preferred", "--topic", topic,
                  "--partition", "0").stdout
    assert f"Valid replica already elected for partitions {topic}-0" in again
