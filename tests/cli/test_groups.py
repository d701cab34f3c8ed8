"""`klog groups` against a real klog broker: groups made by klog's consumer (committed
offsets) and by a live confluent-kafka member."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from klog.cli.groups import parse_topic_partitions
from klog.testing import KlogBroker

pytestmark = pytest.mark.timeout(90)

runner = CliRunner()
BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z; record i of a partition at + i minutes


def klog(broker: KlogBroker | None, *args: str) -> tuple[int, str, str]:
    env = {"COLUMNS": "250"}
    if broker is not None:
        env["KLOG_BOOTSTRAP_SERVER"] = broker.bootstrap_servers
    result = runner.invoke(app, list(args), env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


class LiveMember:
    """A confluent-kafka member polling on a thread, so the group stays Stable."""

    def __init__(self, bs: str, group: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({
            "bootstrap.servers": bs, "group.id": group, "client.id": "live-client",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 100,
            "partition.assignment.strategy": "range", "auto.offset.reset": "earliest",
            "enable.auto.commit": False})
        self.consumer.subscribe([topic])
        self.assigned = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.05)
            if self.consumer.assignment():
                self.assigned.set()
        self.consumer.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(15)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    from klog.client.admin import AdminClient, NewTopic
    from klog.client.consumer import Consumer, OffsetAndMetadata
    from klog.client.producer import Producer

    async def setup(bs: str) -> None:
        async with AdminClient(bs) as admin:
            await admin.create_topics([NewTopic("cg", 3, 1), NewTopic("live", 2, 1)])
        async with Producer(bs) as producer:
            for p in range(3):
                for i in range(10):
                    await producer.send("cg", value=b"v", partition=p,
                                        timestamp_ms=BASE_TS + i * 60_000)
            await producer.flush()
        # Group "cli-g": committed 10 on partition 0, 5 on partition 1, nothing on 2.
        async with Consumer(bs, group_id="cli-g", session_timeout_ms=6000,
                            heartbeat_interval_ms=100, enable_auto_commit=False) as consumer:
            consumer.subscribe(["cg"])
            await consumer.getmany(timeout_ms=5000)
            await consumer.commit({("cg", 0): 10, ("cg", 1): OffsetAndMetadata(5, "m")})

    with KlogBroker(tmp_path_factory.mktemp("cli-groups"), overrides={
            "group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3,
            "group.min.session.timeout.ms": 1000}) as b:
        asyncio.run(asyncio.wait_for(setup(b.bootstrap_servers), 60))
        member = LiveMember(b.bootstrap_servers, "live-g", "live")
        try:
            assert member.assigned.wait(30), "the live member got no assignment"
            yield b
        finally:
            member.close()


def committed(broker: KlogBroker, group: str) -> dict[int, int]:
    code, out, _ = klog(broker, "groups", "describe", group, "--json")
    assert code == 0
    return {r["partition"]: r["current_offset"] for r in json.loads(out)[0]["partitions"]}


# --- without a broker -------------------------------------------------------------------------


def test_topic_partition_arguments() -> None:
    assert parse_topic_partitions(["t", "u:0,2,4-6"]) == [("t", []), ("u", [0, 2, 4, 5, 6])]


@pytest.mark.parametrize("args, message", [
    (["reset-offsets", "g", "--topic", "t"], "exactly one of"),
    (["reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"], "exactly one"),
    (["reset-offsets", "g", "--to-earliest"], "--topic or --all-topics"),
    (["reset-offsets", "g", "-t", "t", "--to-earliest", "--execute", "--dry-run"], "exclude"),
    (["reset-offsets", "g", "-t", "t:x", "--to-earliest"], "partitions must be numbers"),
    (["reset-offsets", "g", "-t", "t", "--to-offset", "-1"], "must not be negative"),
    (["reset-offsets", "g", "-t", "t", "--to-datetime", "soon"], "--to-datetime 'soon' is"),
    (["describe"], "--all-groups"),
    (["describe", "g", "--members", "--state"], "choose one"),
])
def test_usage_errors_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    code, out, err = klog(None, "groups", *args)
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1 and out == ""


# --- against the broker -----------------------------------------------------------------------


def test_list(broker: KlogBroker) -> None:
    code, out, _ = klog(broker, "groups", "list", "--json")
    assert code == 0
    rows = {r["group"]: r for r in json.loads(out)}
    assert rows["cli-g"] == {"group": "cli-g", "protocol_type": "consumer", "state": "Empty"}
    assert rows["live-g"]["state"] == "Stable"
    code, out, _ = klog(broker, "groups", "list", "--state", "Stable")
    assert code == 0
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["GROUP", "PROTOCOL-TYPE", "STATE"]
    assert ["live-g", "consumer", "Stable"] in lines
    assert not any(line[0] == "cli-g" for line in lines)


def test_describe_offsets_view_of_an_empty_group(broker: KlogBroker) -> None:
    code, out, err = klog(broker, "groups", "describe", "cli-g")
    assert code == 0
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                        "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[1:] == [["cli-g", "cg", "0", "10", "10", "0", "-", "-", "-"],
                         ["cli-g", "cg", "1", "5", "10", "5", "-", "-", "-"]]
    assert "Consumer group 'cli-g' has no active members." in err


def test_describe_a_live_group_members_and_state(broker: KlogBroker) -> None:
    code, out, _ = klog(broker, "groups", "describe", "live-g", "--json")
    assert code == 0
    doc = json.loads(out)[0]
    assert doc["state"] == "Stable" and doc["assignment_strategy"] == "range"
    assert doc["members"] == 1
    rows = doc["partitions"]
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in rows
            ] == [(0, None, 0, None), (1, None, 0, None)]
    assert {r["client_id"] for r in rows} == {"live-client"}
    assert all(r["host"] == "/127.0.0.1" and r["consumer_id"] for r in rows)

    code, out, _ = klog(broker, "groups", "describe", "live-g", "--members", "--verbose")
    assert code == 0
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                        "#PARTITIONS", "ASSIGNMENT"]
    assert lines[1][0] == "live-g" and lines[1][2:] == [
        "-", "/127.0.0.1", "live-client", "2", "live(0,1)"]

    code, out, _ = klog(broker, "groups", "describe", "live-g", "cli-g", "--state")
    assert code == 0
    lines = [line.split() for line in out.splitlines()]
    assert lines[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                        "#MEMBERS"]
    port = broker.bootstrap_servers.rsplit(":", 1)[1]
    assert lines[1] == ["live-g", f"127.0.0.1:{port}", "(0)", "range", "Stable", "1"]
    assert lines[2] == ["cli-g", f"127.0.0.1:{port}", "(0)", "-", "Empty", "0"]


def test_describe_all_groups_and_a_missing_group(broker: KlogBroker) -> None:
    code, out, _ = klog(broker, "groups", "describe", "--all-groups", "--state", "--json")
    assert code == 0
    assert {"cli-g", "live-g"} <= {d["group"] for d in json.loads(out)}
    code, out, err = klog(broker, "groups", "describe", "no-such-group")
    assert code == 1
    assert "consumer group 'no-such-group' does not exist" in err


def test_reset_offsets_dry_run_then_execute(broker: KlogBroker) -> None:
    code, out, err = klog(broker, "groups", "reset-offsets", "cli-g", "--topic", "cg",
                          "--to-earliest")
    assert code == 0
    lines = [line.split() for line in out.splitlines()]
    assert lines == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                     ["cli-g", "cg", "0", "0"], ["cli-g", "cg", "1", "0"],
                     ["cli-g", "cg", "2", "0"]]
    assert "dry run" in err
    assert committed(broker, "cli-g") == {0: 10, 1: 5}  # nothing changed

    code, out, _ = klog(broker, "groups", "reset-offsets", "cli-g", "-t", "cg:0,1",
                        "--to-offset", "3", "--execute", "--json")
    assert code == 0
    assert json.loads(out)["executed"] is True
    assert committed(broker, "cli-g") == {0: 3, 1: 3}

    # --all-topics: the partitions with committed offsets; shifted, and clamped at 0.
    code, out, _ = klog(broker, "groups", "reset-offsets", "cli-g", "--all-topics",
                        "--shift-by", "-5", "--execute")
    assert code == 0
    assert committed(broker, "cli-g") == {0: 0, 1: 0}

    # Kafka refuses to shift a partition with nothing committed (partition 2).
    code, out, err = klog(broker, "groups", "reset-offsets", "cli-g", "-t", "cg",
                          "--shift-by", "1")
    assert code == 1 and out == ""
    assert "cannot shift the offset of cg-2: group 'cli-g' has no committed offset" in err

    # By time: record 4 of each partition is the first at or after +3.5 minutes.
    code, out, _ = klog(broker, "groups", "reset-offsets", "cli-g", "-t", "cg",
                        "--to-datetime", "2026-01-01T00:03:30", "--execute", "--json")
    assert code == 0
    assert committed(broker, "cli-g") == {0: 4, 1: 4, 2: 4}

    code, out, _ = klog(broker, "groups", "reset-offsets", "cli-g", "-t", "cg:2",
                        "--to-latest", "--execute")
    assert code == 0
    assert committed(broker, "cli-g") == {0: 4, 1: 4, 2: 10}


def test_reset_offsets_refuses_an_active_group(broker: KlogBroker) -> None:
    code, _out, err = klog(broker, "groups", "reset-offsets", "live-g", "-t", "live",
                          "--to-earliest", "--execute")
    assert code == 1
    assert "can only be reset if the group 'live-g' is inactive" in err
    assert "Stable" in err and len(err.strip().splitlines()) == 1


def test_reset_offsets_unknown_topic(broker: KlogBroker) -> None:
    code, _, err = klog(broker, "groups", "reset-offsets", "cli-g", "-t", "nope",
                        "--to-earliest")
    assert code == 1 and "topic 'nope' does not exist" in err
    code, _, err = klog(broker, "groups", "reset-offsets", "cli-g", "-t", "cg:7",
                        "--to-earliest")
    assert code == 1 and "has no partition 7" in err


def test_delete(broker: KlogBroker) -> None:
    code, out, _ = klog(broker, "groups", "delete", "live-g", "--json")
    assert code == 1
    assert "NON_EMPTY_GROUP" in json.loads(out)[0]["error"]

    from klog.client.admin import AdminClient

    async def make_group() -> None:
        async with AdminClient(broker.bootstrap_servers) as admin:
            errors = await admin.alter_group_offsets("doomed-g", {("cg", 0): 1})
            assert errors == {("cg", 0): None}

    asyncio.run(make_group())
    code, out, _ = klog(broker, "groups", "delete", "doomed-g")
    assert code == 0
    assert [line.split() for line in out.splitlines()] == [
        ["GROUP", "STATUS"], ["doomed-g", "deleted"]]
    code, _, err = klog(broker, "groups", "describe", "doomed-g")
    assert code == 1 and "does not exist" in err


def test_delete_offsets(broker: KlogBroker) -> None:
    from klog.client.admin import AdminClient

    async def commit() -> None:
        async with AdminClient(broker.bootstrap_servers) as admin:
            errors = await admin.alter_group_offsets("del-off", {("cg", 0): 7, ("cg", 1): 8,
                                                                 ("cg", 2): 9})
            assert all(e is None for e in errors.values())

    asyncio.run(commit())
    code, out, err = klog(broker, "groups", "delete-offsets", "del-off", "--topic", "cg:0,2")
    assert code == 0, err
    assert [line.split() for line in out.splitlines()] == [
        ["TOPIC", "PARTITION", "STATUS"], ["cg", "0", "Successful"], ["cg", "2", "Successful"]]
    assert committed(broker, "del-off") == {1: 8}
    # The live member consumes "live": Kafka refuses to forget offsets it uses.
    code, out, _ = klog(broker, "groups", "delete-offsets", "live-g", "-t", "live", "--json")
    assert code == 1
    assert all("GROUP_SUBSCRIBED_TO_TOPIC" in r["error"]
               for r in json.loads(out)["partitions"])
    code, _, err = klog(broker, "groups", "delete-offsets", "del-off")
    assert code == 2 and "--topic" in err
    code, _, err = klog(broker, "groups", "delete-offsets", "del-off", "-t", "nope")
    assert code == 1 and "topic 'nope' does not exist" in err
