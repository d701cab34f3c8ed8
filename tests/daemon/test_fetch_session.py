"""Tests for klog.daemon.fetch_session: KIP-227 contexts and the cache's bounds and eviction,
with a fake clock (no broker); over a real socket at the end (Fetch v12 sessions)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klog.daemon.fetch_session import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionCache,
    next_epoch,
)
from klog.protocol.errors import ErrorCode
from klog.protocol.records.v2 import build_batch
from tests.daemon.wire import InProcessBroker, WireClient, fetch_values

A0 = ("a", 0, 0, 1000, -1)
A1 = ("a", 1, 5, 1000, -1)
B0 = ("b", 0, 7, 1000, -1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _cache(slots: int = 10) -> tuple[FetchSessionCache, Clock]:
    clock = Clock()
    return FetchSessionCache(slots, clock=clock, rng=random.Random(7)), clock


def _open(cache: FetchSessionCache, wanted: list[Any], privileged: bool = False) -> int:
    context = cache.new_context(0, INITIAL_EPOCH, wanted, [], privileged)
    assert context.error_code == 0 and context.wanted == wanted
    session_id, keep = context.respond([(0, 10, 0, 0)] * len(wanted))
    assert keep == list(range(len(wanted)))  # a full response holds every partition
    return session_id


def test_a_full_fetch_opens_a_session_at_epoch_1() -> None:
    cache, _ = _cache()
    session_id = _open(cache, [A0, A1])
    assert session_id != 0 and len(cache) == 1
    session = cache.get(session_id)
    assert session is not None and session.epoch == 1


def test_incremental_fetches_read_the_whole_session_and_answer_what_changed() -> None:
    cache, _ = _cache()
    session_id = _open(cache, [A0, A1])
    # epoch 1: adds b-0, changes a-1's offset; reads all three
    context = cache.new_context(session_id, 1, [B0, ("a", 1, 6, 1000, -1)], [], False)
    assert context.error_code == 0
    assert [(t, p, o) for t, p, o, _m, _e in context.wanted] == [
        ("a", 0, 0), ("a", 1, 6), ("b", 0, 7)]
    # a-0 unchanged (hw 10, lso 0, no data), a-1 has records, b-0 is new (hw -1 cached)
    sid, keep = context.respond([(0, 10, 0, 0), (0, 10, 0, 100), (0, 3, 0, 0)])
    assert sid == session_id and keep == [1, 2]
    # those that answered went to the end of the session's order
    context = cache.new_context(session_id, 2, [], [("b", 0)], False)
    assert [(t, p) for t, p, *_r in context.wanted] == [("a", 0), ("a", 1)]
    _sid, keep = context.respond([(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, 0),
                                  (0, 10, 0, 0)])
    assert keep == [0]  # an error is always answered


def test_session_errors_as_kafka_answers_them() -> None:
    cache, _ = _cache()
    session_id = _open(cache, [A0])
    unknown = cache.new_context(session_id + 1, 1, [], [], False)
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and unknown.wanted == []
    stale = cache.new_context(session_id, 5, [], [], False)
    assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    ok = cache.new_context(session_id, 1, [], [], False)
    assert ok.error_code == 0
    ok.respond([(0, 10, 0, 0)])
    assert cache.new_context(session_id, 1, [], [], False).error_code \
        == ErrorCode.INVALID_FETCH_SESSION_EPOCH


def test_a_full_fetch_closes_the_session_it_names_and_final_epoch_opens_none() -> None:
    cache, _ = _cache()
    session_id = _open(cache, [A0])
    context = cache.new_context(session_id, FINAL_EPOCH, [A0], [], False)
    assert context.respond([(0, 10, 0, 0)]) == (0, [0])
    assert len(cache) == 0
    again = _open(cache, [A0])
    replaced = cache.new_context(again, INITIAL_EPOCH, [A1], [], False)
    new_id, _keep = replaced.respond([(0, 1, 0, 0)])
    assert cache.get(again) is None and cache.get(new_id) is not None and len(cache) == 1


def test_forgetting_every_partition_closes_the_session() -> None:
    cache, _ = _cache()
    session_id = _open(cache, [A0])
    context = cache.new_context(session_id, 1, [], [("a", 0)], False)
    assert context.respond([]) == (0, [])
    assert len(cache) == 0


def test_the_cache_holds_at_most_its_slots() -> None:
    cache, clock = _cache(slots=3)
    ids = [_open(cache, [A0, A1]) for _ in range(3)]
    assert all(ids) and len(cache) == 3
    # full, nothing stale, nothing two minutes old: a fourth client gets no session
    assert _open(cache, [A0, A1, B0]) == 0
    assert len(cache) == 3
    # two minutes later every session is evictable by a bigger one, not by a smaller one
    clock.now += EVICTION_MS + 1
    for session_id in ids:
        context = cache.new_context(session_id, 1, [], [], False)
        context.respond([(0, 10, 0, 0)] * 2)  # used: not stale
    assert _open(cache, [A0]) == 0
    bigger = _open(cache, [A0, A1, B0])
    assert bigger != 0 and len(cache) == 3


def test_a_stale_session_gives_way_and_followers_are_privileged() -> None:
    cache, clock = _cache(slots=2)
    first = _open(cache, [A0])
    clock.now += 1000
    second = _open(cache, [A0])
    # a follower's session may evict a client's at once
    follower = _open(cache, [A0], privileged=True)
    assert follower != 0 and len(cache) == 2
    assert cache.get(first) is None or cache.get(second) is None
    # a client cannot evict the follower; once stale, the least recently used goes
    clock.now += EVICTION_MS + 10
    newest = _open(cache, [A0, A1])
    assert newest != 0 and len(cache) == 2


def test_zero_slots_means_no_sessions() -> None:
    cache, _ = _cache(slots=0)
    assert _open(cache, [A0]) == 0


ID_A = uuid.UUID(int=0xA)
ID_B = uuid.UUID(int=0xB)


def test_a_session_of_topic_ids_keys_partitions_by_id() -> None:
    # Fetch v13+: the session holds the ids the request used (a topic re-created under
    # the same name has another id and is another topic)
    cache, _ = _cache()
    wanted = [(ID_A, 0, 0, 1000, -1), (ID_B, 0, 3, 1000, -1)]
    context = cache.new_context(0, INITIAL_EPOCH, wanted, [], False, uses_topic_ids=True)
    session_id, _keep = context.respond([(0, 10, 0, 0), (0, 10, 0, 0)])
    session = cache.get(session_id)
    assert session is not None and session.uses_topic_ids
    assert list(session.partitions) == [(ID_A, 0), (ID_B, 0)]
    nxt = cache.new_context(session_id, 1, [(ID_A, 0, 4, 1000, -1)], [(ID_B, 0)], False,
                            uses_topic_ids=True)
    assert nxt.error_code == 0 and nxt.wanted == [(ID_A, 0, 4, 1000, -1)]


def test_a_session_is_used_with_ids_or_without_never_both() -> None:
    # Kafka's FetchManager.newContext: FETCH_SESSION_TOPIC_ID_ERROR when an incremental
    # fetch's version does not match the session's use of topic ids
    cache, _ = _cache()
    by_name = _open(cache, [A0])
    wrong = cache.new_context(by_name, 1, [], [], False, uses_topic_ids=True)
    assert wrong.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR and wrong.wanted == []
    by_id_ctx = cache.new_context(0, INITIAL_EPOCH, [(ID_A, 0, 0, 1000, -1)], [], False,
                                  uses_topic_ids=True)
    by_id, _keep = by_id_ctx.respond([(0, 10, 0, 0)])
    assert cache.new_context(by_id, 1, [], [], False).error_code \
        == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    # the refused fetches moved neither session's epoch
    assert cache.new_context(by_name, 1, [], [], False).error_code == 0
    assert cache.new_context(by_id, 1, [], [], False, uses_topic_ids=True).error_code == 0


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(0) == 1 and next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1


# -- over a real socket ----------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = InProcessBroker(tmp_path, {"num.partitions": 2,
                                   "max.incremental.fetch.session.cache.slots": 1})
    b.start()
    yield b
    b.stop()


def _fetch(client: WireClient, session_id: int, epoch: int, partitions: list[tuple[int, int]],
           forgotten: list[int] | None = None) -> Any:
    values = fetch_values("s", 0, 0)
    values.update(session_id=session_id, session_epoch=epoch, max_wait=0)
    values["topics"] = [{"topic": "s", "partitions": [
        {"partition": p, "current_leader_epoch": -1, "fetch_offset": o,
         "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
        for p, o in partitions]}] if partitions else []
    values["forgotten_topics_data"] = [{"topic": "s", "partitions": forgotten}] \
        if forgotten else []
    return client.call(1, 12, values)


def test_incremental_fetch_sessions_over_the_wire(broker: InProcessBroker) -> None:
    with broker.connect() as client, broker.connect() as other:
        client.create_topic("s")
        client.produce("s", 0, build_batch([(1, None, b"x")]))
        full = _fetch(client, 0, INITIAL_EPOCH, [(0, 0), (1, 0)])
        assert full.error_code == ErrorCode.NONE and full.session_id != 0
        assert sorted(p.partition_index for p in full.responses[0].partitions) == [0, 1]
        session_id = full.session_id
        # the client moves past partition 0's record; nothing else changed: an
        # incremental fetch answers no partitions
        quiet = _fetch(client, session_id, 1, [(0, 1)])
        assert quiet.error_code == ErrorCode.NONE and quiet.session_id == session_id
        assert quiet.responses == ()
        # a new record on partition 1: only partition 1 comes back (at the session's offset)
        client.produce("s", 1, build_batch([(1, None, b"y")]))
        changed = _fetch(client, session_id, 2, [])
        parts = changed.responses[0].partitions
        assert [(p.partition_index, p.high_watermark) for p in parts] == [(1, 1)]
        assert parts[0].records
        # the one slot is taken: another client's full fetch gets no session
        assert _fetch(other, 0, INITIAL_EPOCH, [(0, 0)]).session_id == 0
        # errors for a wrong epoch and an unknown session
        assert _fetch(client, session_id, 9, []).error_code \
            == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert _fetch(client, session_id + 1, 1, []).error_code \
            == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        # sessionless (epoch -1) fetches as before
        plain = _fetch(client, 0, FINAL_EPOCH, [(0, 0)])
        assert plain.session_id == 0 and len(plain.responses[0].partitions) == 1


def _topic_id(client: WireClient, topic: str) -> uuid.UUID:
    (meta,) = client.metadata([topic]).topics
    return meta.topic_id


def _fetch_by_id(client: WireClient, version: int, session_id: int, epoch: int,
                 topic_id: uuid.UUID, partitions: list[tuple[int, int]],
                 forgotten: list[int] | None = None) -> Any:
    values = fetch_values("s", 0, 0)
    values.update(session_id=session_id, session_epoch=epoch, max_wait=0,
                  replica_state={"replica_id": -1, "replica_epoch": -1})
    values["topics"] = [{"topic_id": topic_id, "partitions": [
        {"partition": p, "current_leader_epoch": -1, "fetch_offset": o,
         "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
        for p, o in partitions]}] if partitions else []
    values["forgotten_topics_data"] = [{"topic_id": topic_id, "partitions": forgotten}] \
        if forgotten else []
    return client.call(1, version, values)


@pytest.mark.parametrize("version", [13, 15, 17])
def test_fetch_sessions_by_topic_id_over_the_wire(broker: InProcessBroker, version: int
                                                  ) -> None:
    with broker.connect() as client:
        client.create_topic("s")
        client.produce("s", 0, build_batch([(1, None, b"x")]))
        sid_topic = _topic_id(client, "s")
        full = _fetch_by_id(client, version, 0, INITIAL_EPOCH, sid_topic, [(0, 0), (1, 0)])
        assert full.error_code == ErrorCode.NONE and full.session_id != 0
        (topic,) = full.responses
        assert topic.topic_id == sid_topic  # answered by id, as asked
        assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(0, 0), (1, 0)]
        assert topic.partitions[0].records
        session_id = full.session_id
        quiet = _fetch_by_id(client, version, session_id, 1, sid_topic, [(0, 1)])
        assert quiet.error_code == ErrorCode.NONE and quiet.responses == ()
        client.produce("s", 1, build_batch([(1, None, b"y")]))
        changed = _fetch_by_id(client, version, session_id, 2, sid_topic, [])
        assert [(t.topic_id, [p.partition_index for p in t.partitions])
                for t in changed.responses] == [(sid_topic, [1])]
        # the session was made with ids: a v12 fetch (names) may not continue it
        assert _fetch(client, session_id, 3, []).error_code \
            == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


@pytest.mark.parametrize("version", [13, 17])
def test_an_unknown_topic_id_answers_unknown_topic_id(broker: InProcessBroker, version: int
                                                      ) -> None:
    with broker.connect() as client:
        client.create_topic("s")
        known = _topic_id(client, "s")
        stranger = uuid.uuid4()
        values = fetch_values("s", 0, 0)
        values.update(max_wait=0, replica_state={"replica_id": -1, "replica_epoch": -1})
        part = {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1000}
        values["topics"] = [{"topic_id": stranger, "partitions": [part]},
                            {"topic_id": known, "partitions": [part]},
                            {"topic_id": uuid.UUID(int=0), "partitions": [part]}]
        response = client.call(1, version, values)
        assert [(t.topic_id, [int(p.error_code) for p in t.partitions])
                for t in response.responses] == [
            (stranger, [ErrorCode.UNKNOWN_TOPIC_ID]), (known, [ErrorCode.NONE]),
            (None, [ErrorCode.UNKNOWN_TOPIC_ID])]  # kio reads the zero id as None
