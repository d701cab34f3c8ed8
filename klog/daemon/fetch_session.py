"""Fetch sessions (KIP-227): incremental fetch requests, as Kafka's FetchSession.scala.

Owns the FetchSessionCache (max.incremental.fetch.session.cache.slots sessions at most,
Kafka's eviction rules) and the fetch contexts a Fetch v7+ request gets:

- ``session_epoch`` -1 (FINAL): a sessionless full fetch; a session the request names is
  closed. klog's own replica fetcher and clients always send this.
- ``session_epoch`` 0 (INITIAL): a full fetch that asks for a session; a session the
  request names is closed first. The response carries the new session's id (0 when the
  cache has no room and nothing may be evicted); the session's next epoch is 1.
- any other epoch: an incremental fetch of the session named. Unknown id:
  FETCH_SESSION_ID_NOT_FOUND; epoch not the session's: INVALID_FETCH_SESSION_EPOCH (both
  with no partitions and session id 0). Otherwise the request's partitions are added to
  the session or update their fetch offsets and max bytes, its forgotten partitions
  leave, and every partition of the session is fetched; the response holds only those
  with records, a changed high watermark or log start offset, or an error, and those that
  answered move to the end of the session's order (so that others get the fetch's bytes
  next time). A session left without partitions is closed (the fetch answers sessionless).

Topic ids (Fetch v13+): a request names topics by id, and so does its session: partitions
are keyed by (topic id, partition) -- a topic deleted and re-created under the same name is
another topic, which the session does not confuse with the old one. The session remembers
whether it was created with ids; an incremental fetch of the other kind (v13+ for a
session of names, v7-v12 for one of ids) is refused with FETCH_SESSION_TOPIC_ID_ERROR, as
Kafka's FetchManager.newContext refuses it. Resolving ids to names is the handler's (an id
unknown now may be known at the next fetch, so the session keeps it).

Eviction (FetchSessionCache.tryEvict): a new session may take the slot of one unused for
more than two minutes (the least recently used first); else of the least valuable
evictable one if the new one is worth more -- value ordered by (privileged, size), where
followers' sessions are privileged; a session is evictable by anyone once two minutes
old, and a client's is always evictable by a follower's.

Runs on the event loop only: not thread-safe. No I/O.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from klog.protocol.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Kafka's KafkaServer.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS.
EVICTION_MS = 120_000

#: A topic as a request names it: by name (Fetch v7-v12) or by id (v13+).
TopicKey = str | uuid.UUID
TopicPartition = tuple[TopicKey, int]
#: One partition of a fetch as the session holds it: FetchKey (klog/daemon/delayed.py)
#: with the topic as the request named it.
SessionKey = tuple[TopicKey, int, int, int, int]


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: wraps to 1 after 2**31-1, never back to 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: what the client asked last, what it was told last."""

    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, error_code: int, high_watermark: int, log_start_offset: int,
                     size: int, update: bool) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData."""
        respond = size > 0
        if self.high_watermark != high_watermark:
            respond = True
            if update:
                self.high_watermark = high_watermark
        if self.log_start_offset != log_start_offset:
            respond = True
            if update:
                self.log_start_offset = log_start_offset
        if error_code:
            # re-sent once the error is gone: the cached high watermark is made invalid
            if update:
                self.high_watermark = -1
            respond = True
        return respond


@dataclass(eq=False, slots=True)
class FetchSession:
    id: int
    privileged: bool
    partitions: dict[TopicPartition, CachedPartition]  # in fetch order
    creation_ms: int
    last_used_ms: int
    epoch: int
    uses_topic_ids: bool = False

    def update(self, wanted: Sequence[SessionKey], forgotten: Sequence[TopicPartition]
               ) -> None:
        for topic, partition, offset, max_bytes, leader_epoch in wanted:
            cached = self.partitions.get((topic, partition))
            if cached is None:
                self.partitions[(topic, partition)] = CachedPartition(offset, max_bytes,
                                                                      leader_epoch)
            else:
                cached.fetch_offset = offset
                cached.max_bytes = max_bytes
                cached.leader_epoch = leader_epoch
        for tp in forgotten:
            self.partitions.pop(tp, None)

    def wanted(self) -> list[SessionKey]:
        return [(t, p, c.fetch_offset, c.max_bytes, c.leader_epoch)
                for (t, p), c in self.partitions.items()]


@dataclass(slots=True)
class FetchContext:
    """What one Fetch request reads and how its response is shaped.

    ``error_code``: nonzero for a session error (answer it with no partitions). ``wanted``:
    the partitions to read, in order. After the read, ``respond`` gives the response's
    session id and the indexes (into ``wanted``) of the partitions it includes.
    """

    error_code: int
    wanted: list[SessionKey]
    _respond: Callable[[list[tuple[int, int, int, int]]], tuple[int, list[int]]] | None = \
        field(default=None, repr=False)

    def respond(self, results: list[tuple[int, int, int, int]]) -> tuple[int, list[int]]:
        """``results``: per wanted partition (error code, high watermark, log start
        offset, records size)."""
        if self._respond is None:
            return INVALID_SESSION_ID, list(range(len(results)))
        return self._respond(results)


class FetchSessionCache:
    """At most ``max_entries`` sessions (max.incremental.fetch.session.cache.slots)."""

    def __init__(self, max_entries: int, eviction_ms: int = EVICTION_MS,
                 clock: Callable[[], int] | None = None,
                 rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    # -- contexts ---------------------------------------------------------------------------

    def new_context(self, session_id: int, epoch: int, wanted: Sequence[SessionKey],
                    forgotten: Sequence[TopicPartition], privileged: bool,
                    uses_topic_ids: bool = False) -> FetchContext:
        """Kafka's FetchManager.newContext for a Fetch v7+ request; ``uses_topic_ids``:
        the request is v13+ (its keys name topics by id)."""
        now = self._clock()
        wanted = list(wanted)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return FetchContext(0, wanted)
            return FetchContext(0, wanted, lambda results: self._full_response(
                wanted, results, privileged, now, uses_topic_ids))
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext(int(ErrorCode.FETCH_SESSION_ID_NOT_FOUND), [])
        if session.epoch != epoch:
            return FetchContext(int(ErrorCode.INVALID_FETCH_SESSION_EPOCH), [])
        if session.uses_topic_ids != uses_topic_ids:
            # a session of ids cannot be read by names or the other way round
            return FetchContext(int(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR), [])
        session.update(wanted, forgotten)
        if not session.partitions:
            self.remove(session.id)
            return FetchContext(0, wanted)
        session.last_used_ms = now
        session.epoch = next_epoch(session.epoch)
        in_order = session.wanted()
        return FetchContext(0, in_order, lambda results: self._incremental_response(
            session, in_order, results))

    def _full_response(self, wanted: list[SessionKey],
                       results: list[tuple[int, int, int, int]], privileged: bool, now: int,
                       uses_topic_ids: bool) -> tuple[int, list[int]]:
        everything = list(range(len(results)))
        if not self._make_room(privileged, len(wanted), now):
            return INVALID_SESSION_ID, everything
        partitions: dict[TopicPartition, CachedPartition] = {}
        for (topic, partition, offset, max_bytes, leader_epoch), (_e, hw, lso, _s) in zip(
                wanted, results, strict=True):
            partitions[(topic, partition)] = CachedPartition(offset, max_bytes, leader_epoch,
                                                             hw, lso)
        session_id = self._new_session_id()
        self._sessions[session_id] = FetchSession(session_id, privileged, partitions, now, now,
                                                  next_epoch(INITIAL_EPOCH), uses_topic_ids)
        return session_id, everything

    @staticmethod
    def _incremental_response(session: FetchSession, wanted: list[SessionKey],
                              results: list[tuple[int, int, int, int]]
                              ) -> tuple[int, list[int]]:
        keep: list[int] = []
        for i, ((topic, partition, *_rest), (error, hw, lso, size)) in enumerate(
                zip(wanted, results, strict=True)):
            cached = session.partitions.get((topic, partition))
            if cached is None or not cached.must_respond(error, hw, lso, size, update=True):
                continue
            keep.append(i)
            # answered partitions go last: the next fetch's bytes go to the others first
            del session.partitions[(topic, partition)]
            session.partitions[(topic, partition)] = cached
        return session.id, keep

    # -- room -------------------------------------------------------------------------------

    def _make_room(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's maybeCreateSession / tryEvict: True when a new session fits."""
        if len(self._sessions) < self.max_entries:
            return True
        if not self._sessions:
            return False  # max_entries 0: sessions are off
        stalest = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stalest.last_used_ms > self.eviction_ms:
            self.remove(stalest.id)
            return True
        evictable = [s for s in self._sessions.values()
                     if now - s.creation_ms > self.eviction_ms
                     or (privileged and not s.privileged)]
        if not evictable:
            return False
        cheapest = min(evictable, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size) <= (cheapest.privileged, len(cheapest.partitions)):
            return False
        self.remove(cheapest.id)
        return True

    def _new_session_id(self) -> int:
        while True:
            candidate = self._rng.randint(1, 2**31 - 1)
            if candidate not in self._sessions:
                return candidate
