"""klog.tools.reassignment's pure parts: kafka-reassign-partitions.sh's JSON formats and
checks, generate's proposal (placement
itself in tests/test_placement.py), the throttles execute writes, and the
status/list lines. The parts that talk to a cluster are tested in tests/cli/test_reassign.py.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from klog.client.admin import AlterConfigOp, ConfigResource, PartitionReassignment
from klog.tools import reassignment as r

# --- JSON formats ---------------------------------------------------------------------------


def test_parse_broker_list() -> None:
    assert r.parse_broker_list("3,1,2") == [3, 1, 2]
    with pytest.raises(r.ReassignmentError, match=r"^Broker list contains duplicate entries: 1$"):
        r.parse_broker_list("1,2,1")
    with pytest.raises(r.ReassignmentError, match="broker ids separated by commas"):
        r.parse_broker_list("1,x")
    with pytest.raises(r.ReassignmentError, match="names no broker"):
        r.parse_broker_list(",")


def test_parse_topics_to_move() -> None:
    doc = '{"topics":[{"topic":"foo1"},{"topic":"foo2"}],"version":1}'
    assert r.parse_topics_to_move(doc) == ["foo1", "foo2"]
    assert r.parse_topics_to_move('{"topics":[{"topic":"a"}]}') == ["a"]  # version optional
    with pytest.raises(r.ReassignmentError, match="List of topics to reassign contains "
                                                  "duplicate entries: a"):
        r.parse_topics_to_move('{"topics":[{"topic":"a"},{"topic":"a"}]}')
    with pytest.raises(r.ReassignmentError, match="Not supported version field value 2"):
        r.parse_topics_to_move('{"version":2,"topics":[]}')
    with pytest.raises(r.ReassignmentError, match="not valid JSON"):
        r.parse_topics_to_move('{"topics":')
    with pytest.raises(r.ReassignmentError, match='needs a "topic"'):
        r.parse_topics_to_move('{"topics":[{"name":"a"}]}')


def test_parse_reassignment_with_and_without_log_dirs() -> None:
    doc = json.dumps({"version": 1, "partitions": [
        {"topic": "t", "partition": 1, "replicas": [2, 3], "log_dirs": ["any", "any"]},
        {"topic": "t", "partition": 0, "replicas": [3, 4]}]})
    targets, log_dirs = r.parse_reassignment(doc)
    assert targets == {("t", 1): [2, 3], ("t", 0): [3, 4]}
    assert log_dirs == {}
    _, dirs = r.parse_reassignment(json.dumps({"partitions": [
        {"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "/d2"]}]}))
    assert dirs == {("t", 0, 2): "/d2"}
    assert r.moving_brokers(dirs) == {2}
    changes = r.log_dir_throttle_changes([2], 1000)
    ((resource, (op,)),) = changes.items()
    assert (resource.name, op.name, op.value) == (
        "2", "replica.alter.log.dirs.io.max.bytes.per.second", "1000")


def test_log_dir_move_states_say_what_kafka_says() -> None:
    replica = ("t", 0, 2)
    states = {
        "completed": r.LogDirMoveState(replica, "/b", "/b", None),
        "in_progress": r.LogDirMoveState(replica, "/b", "/a", "/b"),
        "cancelled": r.LogDirMoveState(replica, "/b", "/a", None),
        "missing_log_dir": r.LogDirMoveState(replica, "/b", None, None),
        "missing_replica": r.LogDirMoveState(replica, "/b", None, None, found=False),
    }
    assert {name: s.state for name, s in states.items()} == {n: n for n in states}
    assert [n for n, s in states.items() if not s.done] == ["in_progress"]
    assert states["completed"].line() == \
        "Reassignment of replica t-0-2 completed successfully."
    assert states["in_progress"].line() == "Reassignment of replica t-0-2 is still in progress."
    assert r.LogDirMoveState(replica, "/b", "/a", "/c").line() == (
        "Partition t-0 on broker 2 is being moved to log dir /c instead of /b.")
    assert states["cancelled"].line() == (
        "Partition t-0 on broker 2 is not being moved from log dir /a to /b.")
    assert r.sorted_replicas([("b", 0, 1), ("a", 1, 2), ("a", 0, 2)]) == [
        ("b", 0, 1), ("a", 0, 2), ("a", 1, 2)]


@pytest.mark.parametrize(("partitions", "message"), [
    ([], "Partition reassignment list cannot be empty."),
    ([{"topic": "t", "partition": 0, "replicas": []}], "Partition replica list cannot be empty."),
    ([{"topic": "t", "partition": 0, "replicas": [1]},
      {"topic": "t", "partition": 0, "replicas": [2]}],
     "Partition reassignment contains duplicate topic partitions: t-0"),
    ([{"topic": "t", "partition": 0, "replicas": [1, 2, 1]},
      {"topic": "u", "partition": 3, "replicas": [4, 4]}],
     "Partition replica lists may not contain duplicate entries: t-0 contains multiple "
     "entries for 1. u-3 contains multiple entries for 4"),
    ([{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}],
     "Size of replicas list [1, 2] is different from size of log dirs list ['any'] for "
     "partition t-0"),
    ([{"topic": "t", "partition": "0", "replicas": [1]}], "must be an integer"),
    ([{"topic": "t", "partition": 0, "replicas": [True]}], "must be an integer"),
    ([{"topic": "t", "partition": 0}], 'needs a "replicas" list'),
])
def test_parse_reassignment_refusals(partitions: list[dict[str, object]], message: str) -> None:
    with pytest.raises(r.ReassignmentError) as info:
        r.parse_reassignment(json.dumps({"version": 1, "partitions": partitions}))
    assert message in str(info.value)


def test_parse_reassignment_without_validation_takes_an_empty_list() -> None:
    # verify and cancel read the file without execute's checks, as Kafka does.
    assert r.parse_reassignment('{"version":1,"partitions":[]}', validate=False) == ({}, {})
    with pytest.raises(r.ReassignmentError, match="no \"partitions\" list"):
        r.parse_reassignment('{"version":1}')


def test_format_reassignment_is_kafkas_compact_sorted_json() -> None:
    text = r.format_reassignment({("b", 0): [1], ("a", 10): [2, 3], ("a", 2): [3, 1]})
    assert text == (
        '{"version":1,"partitions":['
        '{"topic":"a","partition":2,"replicas":[3,1],"log_dirs":["any","any"]},'
        '{"topic":"a","partition":10,"replicas":[2,3],"log_dirs":["any","any"]},'
        '{"topic":"b","partition":0,"replicas":[1],"log_dirs":["any"]}]}')
    assert r.parse_reassignment(text)[0] == {("a", 2): [3, 1], ("a", 10): [2, 3],
                                             ("b", 0): [1]}
    assert r.tp_name(("a-b", 3)) == "a-b-3"


# --- generate -------------------------------------------------------------------------------


def test_propose_rack_aware_puts_replicas_in_distinct_racks() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    current = {("t", p): [1, 2, 3] for p in range(12)}
    proposed = r.propose(current, brokers, rng=random.Random(7))
    assert set(proposed) == set(current)
    for replicas in proposed.values():
        assert len({brokers[b] for b in replicas}) == 3
    leaders = Counter(replicas[0] for replicas in proposed.values())
    assert sorted(leaders.values()) == [2] * 6  # leaders spread evenly


def test_propose_rack_unaware_keeps_each_topics_replication_factor() -> None:
    current = {**{("a", p): [1, 2] for p in range(6)}, **{("b", p): [1] for p in range(3)}}
    proposed = r.propose(current, {4: None, 5: None, 6: None}, rng=random.Random(1))
    assert set(proposed) == set(current)
    for (topic, _), replicas in proposed.items():
        assert len(replicas) == (2 if topic == "a" else 1)
        assert len(set(replicas)) == len(replicas)
        assert set(replicas) <= {4, 5, 6}
    assert sorted(Counter(proposed[("a", p)][0] for p in range(6)).values()) == [2, 2, 2]
    # with racks ignored, racked brokers take the same rack-unaware path
    same = r.propose(current, {4: "x", 5: "y", 6: "x"}, rack_aware=False,
                     rng=random.Random(1))
    assert same == proposed


def test_propose_refusals() -> None:
    with pytest.raises(r.ReassignmentError, match=r"Not all brokers have rack information\. "
                                                  "Add --disable-rack-aware"):
        r.propose({("t", 0): [1]}, {1: "a", 2: None})
    with pytest.raises(r.ReassignmentError,
                       match=r"^Replication factor: 3 larger than available brokers: 2\.$"):
        r.propose({("t", 0): [1, 2, 3]}, {1: None, 2: None})
    with pytest.raises(r.ReassignmentError,
                       match=r"^Replication factor: 3 larger than available brokers: 2\.$"):
        r.propose({("t", 0): [1, 2, 3]}, {1: "a", 2: "b"})
    with pytest.raises(r.ReassignmentError, match="none of the brokers"):
        r.propose({("t", 0): [1]}, {})


# --- throttles ------------------------------------------------------------------------------


def test_throttles_of_a_move_as_kafka_writes_them() -> None:
    current = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 1], ("u", 0): [1]}
    proposed = {("t", 0): [2, 3, 4], ("t", 1): [2, 3, 1], ("u", 0): [3, 1]}
    moves = r.move_map({}, proposed, current)
    assert r.leader_throttles(moves) == {"t": "0:1,0:2,0:3,1:1,1:2,1:3", "u": "0:1"}
    assert r.follower_throttles(moves) == {"t": "0:4", "u": "0:3"}
    assert r.reassigning_brokers(moves) == {1, 2, 3, 4}
    changes = r.throttle_changes(moves, 1048576)
    assert changes[ConfigResource.of("topic", "t")] == [
        AlterConfigOp(r.LEADER_REPLICAS, "0:1,0:2,0:3,1:1,1:2,1:3"),
        AlterConfigOp(r.FOLLOWER_REPLICAS, "0:4")]
    for b in (1, 2, 3, 4):
        assert changes[ConfigResource.of("broker", str(b))] == [
            AlterConfigOp(r.LEADER_RATE, "1048576"), AlterConfigOp(r.FOLLOWER_RATE, "1048576")]
    assert len(changes) == 6


def test_throttle_lists_are_in_string_order_as_kafkas_treeset() -> None:
    moves = r.move_map({}, {("t", 10): [5], ("t", 2): [5]}, {("t", 10): [1], ("t", 2): [1]})
    assert r.leader_throttles(moves) == {"t": "10:1,2:1"}
    assert r.follower_throttles(moves) == {"t": "10:5,2:5"}


def test_move_map_takes_an_ongoing_reassignments_origin_as_sources() -> None:
    ongoing = {("t", 0): PartitionReassignment((1, 2, 3, 4), (4,), (1,))}
    # resubmitted (--additional): sources stay the origin, not the current full set
    moves = r.move_map(ongoing, {("t", 0): [2, 3, 4]}, {("t", 0): [1, 2, 3, 4]})
    assert moves["t"][0] == r.PartitionMove(frozenset({1, 2, 3}), frozenset({2, 3, 4}))
    # an ongoing one not resubmitted keeps its throttles too
    moves = r.move_map(ongoing, {("u", 0): [2]}, {("u", 0): [1]})
    assert r.follower_throttles(moves) == {"t": "0:4", "u": "0:2"}


def test_clearing_deletes_every_throttle_config() -> None:
    changes = r.clear_throttle_changes([2, 1, 2], ["t"])
    assert list(changes) == [ConfigResource.of("broker", "1"), ConfigResource.of("broker", "2"),
                             ConfigResource.of("topic", "t")]
    assert {op.name for op in changes[ConfigResource.of("broker", "1")]} == {
        "leader.replication.throttled.rate", "follower.replication.throttled.rate",
        "replica.alter.log.dirs.io.max.bytes.per.second"}
    assert {op.name for op in changes[ConfigResource.of("topic", "t")]} == {
        "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
    assert all(op.op == "delete" for ops in changes.values() for op in ops)


# --- lines ----------------------------------------------------------------------------------


def test_status_lines() -> None:
    done = r.PartitionStatus("t", 0, (2, 3, 4), (2, 3, 4), True)
    moving = r.PartitionStatus("t", 1, (1, 2, 3, 4), (2, 3, 4), False)
    other = r.PartitionStatus("t", 2, (1, 2), (2, 3), True)
    assert r.status_line(done) == "Reassignment of partition t-0 is completed."
    assert r.status_line(moving) == "Reassignment of partition t-1 is still in progress."
    assert r.status_line(other) == ("There is no active reassignment of partition t-2, but "
                                    "replica set is 1,2 rather than 2,3.")
    assert [s.state for s in (done, moving, other)] == ["completed", "in_progress",
                                                        "mismatch"]


def test_list_lines() -> None:
    assert r.ongoing_line(("t", 0), PartitionReassignment((1, 2, 3, 4), (4,), (1,))) == (
        "t-0: replicas: 1,2,3,4. adding: 4. removing: 1.")
    assert r.ongoing_line(("t", 1), PartitionReassignment((1, 2), (2,), ())) == (
        "t-1: replicas: 1,2. adding: 2.")
    assert r.ongoing_line(("t", 2), PartitionReassignment((1, 2), (), (2,))) == (
        "t-2: replicas: 1,2. removing: 2.")


def test_replica_progress_arithmetic() -> None:
    p = r.ReplicaProgress("t", 0, 4, 1, leader_bytes=1000, replica_bytes=250)
    assert (p.moved, p.remaining, p.percent) == (250, 750, 25.0)
    absent = r.ReplicaProgress("t", 0, 4, 1, leader_bytes=1000, replica_bytes=-1)
    assert (absent.moved, absent.remaining, absent.percent) == (0, 1000, 0.0)
    unknown = r.ReplicaProgress("t", 0, 4, -1, leader_bytes=-1, replica_bytes=10)
    assert unknown.remaining == -1
    empty = r.ReplicaProgress("t", 0, 4, 1, leader_bytes=0, replica_bytes=0)
    assert empty.percent == 100.0
    ahead = r.ReplicaProgress("t", 0, 4, 1, leader_bytes=100, replica_bytes=120)
    assert (ahead.remaining, ahead.percent) == (0, 100.0)
