"""`klog reassign`: usage errors without a cluster, then generate / execute (throttled) /
list / verify / cancel against a real ZooKeeper and four real klog brokers, checking
kafka-reassign-partitions.sh's lines, the throttle configs it writes and removes, the
progress view and the JSON twins."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from klog.cli.app import app
from tests.cluster.conftest import Cluster, cluster, wait_until  # noqa: F401 - the fixture
from tests.zkserver import zk_server  # noqa: F401 - the fixture

runner = CliRunner()


def klog(bootstrap: str | None, *args: str) -> tuple[int, str, str]:
    env = {"COLUMNS": "250"}
    if bootstrap is not None:
        env["KLOG_BOOTSTRAP_SERVER"] = bootstrap
    result = runner.invoke(app, ["reassign", *args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _plan(tmp_path: Path, name: str, partitions: dict[tuple[str, int], list[int]]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": rs} for (t, p), rs in partitions.items()]}))
    return str(path)


# --- without a cluster: refusals before anything is sent -------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["execute", "--reassignment-json-file", "{missing}"], "--reassignment-json-file"),
    (["execute", "--reassignment-json-file", "{bad}"], "not valid JSON"),
    (["execute", "--reassignment-json-file", "{empty}"],
     "Partition reassignment list cannot be empty."),
    (["execute", "--reassignment-json-file", "{dup}"],
     "Partition reassignment contains duplicate topic partitions: t-0"),
    (["generate", "--topics-to-move-json-file", "{topics}", "--broker-list", "1,1"],
     "Broker list contains duplicate entries: 1"),
    (["generate", "--topics-to-move-json-file", "{bad}", "--broker-list", "1"],
     "not valid JSON"),
    (["verify", "--reassignment-json-file", "{dup}", "--interval", "0"], "--interval"),
])
def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                              message: str) -> None:
    files = {"missing": tmp_path / "nope.json", "bad": tmp_path / "bad.json",
             "empty": tmp_path / "empty.json",
             "dup": tmp_path / "dup.json", "topics": tmp_path / "topics.json"}
    files["bad"].write_text("{\"partitions\": [")
    files["empty"].write_text('{"version":1,"partitions":[]}')
    files["dup"].write_text('{"version":1,"partitions":[{"topic":"t","partition":0,'
                            '"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}')
    files["topics"].write_text('{"version":1,"topics":[{"topic":"t"}]}')
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in args]
    # An unreachable bootstrap: had anything been sent, the error would be a connect failure.
    code, out, err = klog("127.0.0.1:1", *args)
    assert code == 2, (out, err)
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and out == ""


# --- against a real cluster -----------------------------------------------------------------


def _admin(c: Cluster, fn: Callable[[Any], Any]) -> Any:
    from klog.client.admin import AdminClient

    async def run() -> Any:
        async with AdminClient(c.bootstrap_servers) as admin:
            return await fn(admin)

    return asyncio.run(run())


def _configs(c: Cluster, kind: str, name: str) -> dict[str, str | None]:
    from klog.client.admin import ConfigResource

    resource = ConfigResource.of(kind, name)

    async def ask(admin: Any) -> dict[str, str | None]:
        entries = (await admin.describe_configs([resource], include_synonyms=False))[resource]
        return {e.name: e.value for e in entries if e.source.startswith("DYNAMIC")}

    return _admin(c, ask)


def _replicas(c: Cluster, topic: str, partition: int) -> list[int]:
    from klog.daemon.metastore import paths

    data, _ = c.store.get(paths.topic_path(topic))
    return list(paths.TopicAssignment.decode(data).partitions[partition].replicas)


def _produce(c: Cluster, topic: str, partition: int, count: int, size: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                         "linger.ms": 5, "compression.type": "none"})
    payload = b"x" * size
    for i in range(count):
        producer.produce(topic, payload, key=str(i).encode(), partition=partition)
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


@pytest.mark.timeout(240)
def test_generate_execute_throttled_list_verify_cancel(cluster: Any,  # noqa: F811
                                                       tmp_path: Path) -> None:
    from klog.client.admin import NewTopic

    racks = {1: "rack-a", 2: "rack-a", 3: "rack-b", 4: "rack-b"}
    c: Cluster = cluster(brokers=4, per_broker={b: {"broker.rack": r} for b, r in racks.items()})
    bs = c.bootstrap_servers

    async def create(admin: Any) -> None:
        result = await admin.create_topics([NewTopic(
            "t", replica_assignment={0: [1, 2, 3], 1: [2, 3, 1]})])
        assert result["t"] is None

    _admin(c, create)
    c.wait_for_leader("t", 0)
    c.wait_for_leader("t", 1)
    _produce(c, "t", 0, 1500, 1000)  # ~1.5 MB to move
    _produce(c, "t", 1, 1500, 1000)

    # generate: Kafka's two blocks; the proposal spreads both partitions over 2,3,4
    topics = tmp_path / "topics.json"
    topics.write_text('{"version":1,"topics":[{"topic":"t"}]}')
    code, out, err = klog(bs, "generate", "--topics-to-move-json-file", str(topics),
                          "--broker-list", "2,3,4")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1]) == {"version": 1, "partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2, 3], "log_dirs": ["any"] * 3},
        {"topic": "t", "partition": 1, "replicas": [2, 3, 1], "log_dirs": ["any"] * 3}]}
    assert lines[2] == "" and lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])["partitions"]
    assert [(p["topic"], p["partition"], sorted(p["replicas"])) for p in proposed] == [
        ("t", 0, [2, 3, 4]), ("t", 1, [2, 3, 4])]
    # rack-aware: the first two replicas of each partition are in different racks
    assert all(racks[p["replicas"][0]] != racks[p["replicas"][1]] for p in proposed)
    code, out, err = klog(bs, "generate", "--topics-to-move-json-file", str(topics),
                          "--broker-list", "1,2", "--disable-rack-aware")
    assert code == 1 and "Replication factor: 3 larger than available brokers: 2." in err
    code, out, _ = klog(bs, "generate", "--topics-to-move-json-file", str(topics),
                        "--broker-list", "2,3,4", "--json")
    assert code == 0 and set(json.loads(out)) == {"current", "proposed"}
    code, _, err = klog(bs, "generate", "--topics-to-move-json-file", str(topics),
                        "--broker-list", "3,4")
    assert code == 1 and "Replication factor: 3 larger than available brokers: 2." in err

    # execute, throttled to 20 kB/s: ~1.5 MB takes over a minute, so it is still moving
    move = _plan(tmp_path, "move.json", {("t", 0): [2, 3, 4]})
    code, out, err = klog(bs, "execute", "--reassignment-json-file", move,
                          "--throttle", "20000")
    assert code == 0, err
    assert out.splitlines() == [
        "Current partition replica assignment", "",
        '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3],'
        '"log_dirs":["any","any","any"]}]}', "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Warning: You must run --verify periodically, until the reassignment completes, to "
        "ensure the throttle is removed.",
        "The inter-broker throttle limit was set to 20000 B/s",
        "Successfully started partition reassignment for t-0"]
    topic_configs = _configs(c, "topic", "t")
    assert topic_configs["leader.replication.throttled.replicas"] == "0:1,0:2,0:3"
    assert topic_configs["follower.replication.throttled.replicas"] == "0:4"
    for b in (1, 2, 3, 4):
        broker_configs = _configs(c, "broker", str(b))
        assert broker_configs["leader.replication.throttled.rate"] == "20000"
        assert broker_configs["follower.replication.throttled.rate"] == "20000"

    # list: Kafka's line; --progress shows the new replica on broker 4 behind its leader
    code, out, err = klog(bs, "list")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Current partition reassignments:"
    assert lines[1].startswith("t-0: replicas: ") and lines[1].endswith(
        " adding: 4. removing: 1."), lines
    assert sorted(int(b) for b in lines[1].split("replicas: ")[1].split(".")[0].split(",")) \
        == [1, 2, 3, 4]
    code, out, err = klog(bs, "list", "--progress", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["reassignments"][0]["adding_replicas"] == [4]
    assert doc["reassignments"][0]["removing_replicas"] == [1]
    [row] = doc["progress"]
    assert (row["topic"], row["partition"], row["broker"]) == ("t", 0, 4)
    assert row["leader_bytes"] > 1_000_000
    assert 0 <= row["moved_bytes"] < row["leader_bytes"]
    assert row["remaining_bytes"] == row["leader_bytes"] - row["moved_bytes"]

    # verify while moving: in progress, throttles stay
    code, out, err = klog(bs, "verify", "--reassignment-json-file", move, "--progress")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == ["Status of partition reassignment:",
                         "Reassignment of partition t-0 is still in progress."]
    assert "PARTITION" in lines[2] and "REMAINING" in lines[2]
    assert not any(line.startswith("Clearing") for line in lines)
    assert _configs(c, "broker", "4").get("follower.replication.throttled.rate") == "20000"

    # a second execute is refused without --additional; with it, it raises the throttle
    code, _, err = klog(bs, "execute", "--reassignment-json-file", move)
    assert code == 1
    assert "Cannot execute because there is an existing partition assignment." in err
    code, out, err = klog(bs, "execute", "--reassignment-json-file", move, "--additional",
                          "--throttle", "100000000")
    assert code == 0, err
    assert "The inter-broker throttle limit was set to 100000000 B/s" in out
    # the resubmitted move keeps its origin as the leader-throttled replicas
    assert _configs(c, "topic", "t")["leader.replication.throttled.replicas"] == "0:1,0:2,0:3"

    # verify --wait: completes, then the throttles go
    code, out, err = klog(bs, "verify", "--reassignment-json-file", move, "--wait",
                          "--interval", "0.3", "--timeout", "90000")
    assert code == 0, err
    assert out.splitlines() == [
        "Status of partition reassignment:",
        "Reassignment of partition t-0 is completed.", "",
        "Clearing broker-level throttles on brokers 1,2,3,4",
        "Clearing topic-level throttles on topic t"]
    assert _replicas(c, "t", 0) == [2, 3, 4]
    for b in (1, 2, 3, 4):
        assert not any("throttled" in k for k in _configs(c, "broker", str(b)))
    assert not any("throttled" in k for k in _configs(c, "topic", "t"))
    code, out, _ = klog(bs, "list")
    assert code == 0 and out == "No partition reassignments found.\n"
    code, out, _ = klog(bs, "verify", "--reassignment-json-file", move, "--json")
    doc = json.loads(out)
    assert doc["done"] is True and doc["partitions"] == [
        {"topic": "t", "partition": 0, "status": "completed",
         "current_replicas": [2, 3, 4], "target_replicas": [2, 3, 4]}]
    assert doc["throttles_cleared"] == {"brokers": [1, 2, 3, 4], "topics": ["t"]}

    # cancel half-way: t-1 [2,3,1] -> [4,3,2], held back by a tiny throttle
    back = _plan(tmp_path, "back.json", {("t", 1): [4, 3, 2]})
    code, out, err = klog(bs, "execute", "--reassignment-json-file", back,
                          "--throttle", "10000", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["started"] == ["t-1"] and doc["throttle"] == 10000
    assert doc["current"]["partitions"][0]["replicas"] == [2, 3, 1]
    code, out, err = klog(bs, "cancel", "--reassignment-json-file", back)
    assert code == 0, err
    assert out.splitlines() == [
        "Successfully cancelled partition reassignment for: t-1",
        "Clearing broker-level throttles on brokers 1,2,3,4",
        "Clearing topic-level throttles on topic t"]
    # Back on the original replicas; in the order of Kafka's originReplicas (the
    # reassignment's full set minus the adding ones), which need not be the first order.
    wait_until(lambda: sorted(_replicas(c, "t", 1)) == [1, 2, 3], 30, "t-1 back on 1,2,3")
    now = ",".join(map(str, _replicas(c, "t", 1)))
    code, out, _ = klog(bs, "verify", "--reassignment-json-file", back)
    assert out.splitlines()[1] == ("There is no active reassignment of partition t-1, but "
                                   f"replica set is {now} rather than 4,3,2.")
    code, out, _ = klog(bs, "cancel", "--reassignment-json-file", back, "--json",
                        "--preserve-throttles")
    assert code == 0 and json.loads(out) == {"cancelled": [], "cancelled_log_dir_moves": [],
                                             "throttles_cleared": None}
    code, out, _ = klog(bs, "cancel", "--reassignment-json-file", back, "--preserve-throttles")
    assert out == "None of the specified partition reassignments are active.\n"

    # refusals from the cluster: unknown partition and broker
    code, _, err = klog(bs, "execute", "--reassignment-json-file",
                        _plan(tmp_path, "p9.json", {("t", 9): [1]}))
    assert code == 1 and "Unable to find partition: t-9" in err
    code, _, err = klog(bs, "execute", "--reassignment-json-file",
                        _plan(tmp_path, "b9.json", {("t", 0): [9]}))
    assert code == 1 and "Unknown broker id 9" in err
