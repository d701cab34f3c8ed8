"""The consumer's fetcher: positions of assigned partitions, Fetch and ListOffsets traffic.

Owns, for one Consumer, the state of each assigned partition (position, pending offset
reset, pause, high watermark / last stable offset / log start offset as last fetched) and
the records fetched but not yet handed out. Following Kafka's Fetcher, a partition is
fetched only while it has no buffered records, with one Fetch per leader in flight: the
next Fetch for a partition goes out as soon as the application has taken its records, so
it is on the wire while the application works (prefetch).

A background task (``_run``) resolves offset resets with ListOffsets, sends the Fetches and
refreshes metadata after NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION and friends.

Follower fetching (KIP-392), as Kafka's consumer does it: with ``client_rack`` set, each
Fetch names the rack; a leader with replica.selector.class set may answer a partition with
a preferred read replica, which the partition is then fetched from until
``metadata_max_age_ms`` passes (then the leader is asked again), the replica leaves the
metadata, its fetch fails, or it answers the partition with an error -- OFFSET_OUT_OF_RANGE
from a follower sends the partition back to its leader rather than resetting it.
Everything runs on one event loop; nothing is thread-safe. A fetch answer is used only if
the partition's position is still the offset it was fetched at (a seek in between makes it
stale).

``Any`` below is a Kafka message: a kio entity chosen by api key and version at runtime, or
the nested mapping of values a request is built from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from klog.client.errors import INVALID_METADATA, KafkaClientError, error_for
from klog.client.network import KafkaClient
from klog.client.records import ConsumerRecord, Deserializer, decode_fetched
from klog.protocol.errors import ErrorCode, KafkaError, OffsetOutOfRangeError

log = logging.getLogger(__name__)

FETCH = 1
FETCH_TOPIC_IDS_FROM = 13
LIST_OFFSETS = 2

EARLIEST = -2  # ListOffsets' timestamps for "log start offset" and "end"
LATEST = -1

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None = None


class NoOffsetForPartitionError(KafkaClientError):
    """A partition has no position and auto_offset_reset is "none"."""


class _PartitionState:
    __slots__ = ("high_watermark", "last_stable_offset", "log_start_offset", "paused",
                 "position", "reset")

    def __init__(self, reset: int | None) -> None:
        self.position: int | None = None
        self.reset = reset  # EARLIEST / LATEST when the position must be looked up
        self.paused = False
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1


@dataclass(slots=True)
class _Buffered:
    """Records of one completed fetch not yet handed out."""

    position: int  # the partition's position these records continue from
    records: list[ConsumerRecord]
    index: int
    next_offset: int
    error: Exception | None


class Fetcher:
    """Fetch loop and partition state for one consumer (see the module docstring)."""

    def __init__(
        self,
        client: KafkaClient,
        *,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        isolation_level: int = READ_UNCOMMITTED,
        default_reset: int | None = LATEST,
        check_crcs: bool = True,
        key_deserializer: Deserializer | None = None,
        value_deserializer: Deserializer | None = None,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30000,
        client_rack: str | None = None,
        metadata_max_age_ms: int = 300000,
    ) -> None:
        self.client = client
        self.client_rack = client_rack or ""
        self.metadata_max_age_ms = metadata_max_age_ms
        # KIP-392: partition -> (the replica to fetch it from, until when: monotonic s)
        self._preferred: dict[TopicPartition, tuple[int, float]] = {}
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.isolation_level = isolation_level
        self.default_reset = default_reset
        self.check_crcs = check_crcs
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self.retry_backoff = retry_backoff_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.states: dict[TopicPartition, _PartitionState] = {}
        self._buffers: dict[TopicPartition, _Buffered] = {}
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()  # the fetch loop has something to look at
        self._data = asyncio.Event()  # records or errors are buffered, or a position moved
        self._metadata_stale = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._fatal: BaseException | None = None

    # -- life cycle

    def start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        self._closed = True
        tasks = [t for t in (self._task, *self._in_flight.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._in_flight.clear()
        self._task = None

    # -- assignment and positions (called by the Consumer)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = list(dict.fromkeys(partitions))
        for tp in list(self.states):
            if tp not in wanted:
                del self.states[tp]
                self._buffers.pop(tp, None)
        for tp in wanted:
            if tp not in self.states:
                self.states[tp] = _PartitionState(self.default_reset)
        self._metadata_stale = any(
            self.client.cluster.leader_for(tp.topic, tp.partition) is None for tp in wanted)
        self._wake.set()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        state = self._state(tp)
        state.position = offset
        state.reset = None
        self._buffers.pop(tp, None)
        self._wake.set()

    def request_reset(self, tp: TopicPartition, strategy: int) -> None:
        state = self._state(tp)
        state.position = None
        state.reset = strategy
        self._buffers.pop(tp, None)
        self._wake.set()

    def pause(self, tp: TopicPartition) -> None:
        self._state(tp).paused = True

    def resume(self, tp: TopicPartition) -> None:
        self._state(tp).paused = False
        self._wake.set()
        if tp in self._buffers:
            self._data.set()

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self.states.get(tp)
        if state is None:
            raise KafkaClientError(f"partition {tp.topic}-{tp.partition} is not assigned")
        return state

    async def position(self, tp: TopicPartition, timeout: float | None = None) -> int:
        """The offset of the next record to hand out; waits for a pending reset."""
        state = self._state(tp)
        deadline = None if timeout is None else time.monotonic() + timeout
        while state.position is None:
            self._raise_fatal()
            if state.reset is None:
                raise NoOffsetForPartitionError(
                    f"no offset for {tp.topic}-{tp.partition} and auto_offset_reset is none")
            self.start()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise KafkaClientError(f"timed out resolving the position of {tp}",
                                       ErrorCode.REQUEST_TIMED_OUT)
            # Polled: the data event is shared with getmany, which may clear it.
            await asyncio.sleep(0.01 if remaining is None else min(0.01, remaining))
            state = self._state(tp)
        return state.position

    # -- handing out records

    def drain(self, partitions: Iterable[TopicPartition] | None, max_records: int | None
              ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Take buffered records (at most ``max_records``; None: all), advancing positions.

        Raises a buffered error (OFFSET_OUT_OF_RANGE with no reset policy, corrupt data,
        a failed deserializer) when it is reached and no record was taken before it.
        """
        self._raise_fatal()
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        budget = max_records
        wanted = self._buffers if partitions is None else [
            tp for tp in partitions if tp in self._buffers]
        for tp in list(wanted):
            if budget is not None and budget <= 0:
                break
            buf = self._buffers[tp]
            state = self.states.get(tp)
            if state is None or state.position != buf.position:
                del self._buffers[tp]  # assignment changed or seek: stale
                continue
            if state.paused:
                continue
            records = buf.records
            take = len(records) - buf.index
            if budget is not None:
                take = min(take, budget)
            if take:
                chunk = records[buf.index:buf.index + take]
                buf.index += take
                out[tp] = chunk
                if budget is not None:
                    budget -= take
                state.position = chunk[-1].offset + 1
                buf.position = state.position
            if buf.index >= len(records):
                if buf.error is not None:
                    if out:
                        continue  # raise it on the next call, before anything else
                    del self._buffers[tp]
                    raise buf.error
                state.position = max(state.position or 0, buf.next_offset)
                del self._buffers[tp]
                self._wake.set()  # fetch this partition again
        if not self._deliverable():
            self._data.clear()
        return out

    def _deliverable(self) -> bool:
        states = self.states
        return any(tp in states and not states[tp].paused for tp in self._buffers)

    async def wait_for_data(self, timeout: float | None) -> None:
        """Wait until records or an error may be buffered, at most ``timeout`` seconds."""
        self.start()
        if self._deliverable() or self._fatal is not None:
            return
        self._data.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._data.wait(), timeout)

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    # -- the fetch loop

    async def _run(self) -> None:
        try:
            while not self._closed:
                self._wake.clear()
                delay = None
                if self._metadata_stale:
                    delay = await self._refresh_metadata()
                if any(s.reset is not None and s.position is None
                       for s in self.states.values()):
                    delay = await self._reset_offsets() or delay
                self._send_fetches()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug: make it visible to the application
            log.exception("consumer fetch loop failed")
            self._fatal = exc
            self._data.set()

    async def _refresh_metadata(self) -> float | None:
        topics = sorted({tp.topic for tp in self.states})
        try:
            await self.client.refresh_metadata(topics)
        except KafkaClientError as exc:
            log.debug("metadata refresh for %s failed: %s", topics, exc)
            return self.retry_backoff
        self._metadata_stale = any(
            self.client.cluster.leader_for(tp.topic, tp.partition) is None
            for tp in self.states)
        return self.retry_backoff if self._metadata_stale else None

    def _fetchable(self) -> dict[int, dict[TopicPartition, int]]:
        by_node: dict[int, dict[TopicPartition, int]] = {}
        for tp, state in self.states.items():
            if state.position is None or state.paused or tp in self._buffers:
                continue
            leader = self.client.cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                self._metadata_stale = True
                continue
            node = self._read_replica(tp, leader)
            if node in self._in_flight:
                continue
            by_node.setdefault(node, {})[tp] = state.position
        return by_node

    def _read_replica(self, tp: TopicPartition, leader: int) -> int:
        """Where to fetch ``tp`` from: its preferred read replica while that holds (Kafka's
        selectReadReplica: not expired, still in the metadata), else its leader."""
        preferred = self._preferred.get(tp)
        if preferred is None:
            return leader
        node, until = preferred
        if time.monotonic() >= until or node not in self.client.cluster.brokers:
            del self._preferred[tp]
            return leader
        return node

    def _send_fetches(self) -> None:
        loop = asyncio.get_running_loop()
        for node, offsets in self._fetchable().items():
            self._in_flight[node] = loop.create_task(self._fetch(node, offsets))

    async def _fetch(self, leader: int, offsets: dict[TopicPartition, int]) -> None:
        """One Fetch to node ``leader`` -- the partitions' leader, or for some partitions
        their preferred read replica (KIP-392)."""
        topics: dict[str, list[dict[str, Any]]] = {}
        for tp, offset in offsets.items():
            topics.setdefault(tp.topic, []).append({
                "partition": tp.partition,
                "fetch_offset": offset,
                "partition_max_bytes": self.max_partition_fetch_bytes,
                "current_leader_epoch": -1,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
            })
        version, ids = self._fetch_version(leader, topics)
        values = {
            "replica_id": -1,
            "max_wait": self.fetch_max_wait_ms,
            "min_bytes": self.fetch_min_bytes,
            "max_bytes": self.fetch_max_bytes,
            "isolation_level": self.isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "topic_id": ids.get(t), "partitions": ps}
                       for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": self.client_rack,
        }
        backoff = False
        try:
            response = await self.client.send(
                leader, FETCH, values, version=version,
                timeout_ms=self.request_timeout_ms + self.fetch_max_wait_ms)
            top = int(getattr(response, "error_code", 0) or 0)
            if top:
                raise error_for(top, "fetch")
            names = {tid: name for name, tid in ids.items()}
            backoff = self._handle_fetch(response, offsets, names, leader)
        except KafkaClientError as exc:
            log.debug("fetch from node %s failed: %s", leader, exc)
            for tp in offsets:  # as Kafka's handleFetchFailure: back to the leaders
                self._preferred.pop(tp, None)
            self._metadata_stale = True
            backoff = True
        finally:
            if backoff:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(self.retry_backoff)
            self._in_flight.pop(leader, None)
            self._wake.set()

    def _fetch_version(self, leader: int, topics: Mapping[str, object]
                       ) -> tuple[int, dict[str, uuid.UUID]]:
        """The Fetch version to send ``leader`` and, for v13+, the ids naming the topics.
        v13+ name topics by id (the ones the last metadata gave); while one of the topics
        has no id known, v12 (which names them) -- as Kafka's FetchSessionHandler falls
        back when a topic id is missing."""
        version = self.client.api_version(leader, FETCH)
        if version < FETCH_TOPIC_IDS_FROM:
            return version, {}
        known = self.client.cluster.topic_ids
        ids = {t: known.get(t) for t in topics}
        if any(tid is None or tid.int == 0 for tid in ids.values()):
            return FETCH_TOPIC_IDS_FROM - 1, {}
        return version, cast("dict[str, uuid.UUID]", ids)

    def _handle_fetch(self, response: Any, offsets: dict[TopicPartition, int],
                      names: Mapping[uuid.UUID, str] | None = None,
                      node: int | None = None) -> bool:
        """Fold a FetchResponse from ``node`` in (``names``: v13+'s topic ids to the names
        the request used); True when some partition wants a backoff."""
        backoff = False
        read_committed = self.isolation_level == READ_COMMITTED
        for topic in response.responses:
            name = names.get(topic.topic_id) if names else topic.topic
            if name is None:
                continue  # an id this fetch did not send
            for p in topic.partitions:
                tp = TopicPartition(name, int(p.partition_index))
                fetch_offset = offsets.get(tp)
                state = self.states.get(tp)
                if (fetch_offset is None or state is None or state.position != fetch_offset
                        or tp in self._buffers):
                    continue  # sought, reassigned or reset meanwhile
                code = int(p.error_code)
                from_follower = tp in self._preferred
                if code != ErrorCode.NONE and from_follower:
                    # Any error from a preferred read replica sends the partition back to
                    # its leader (Kafka clears the preferred replica, and an out-of-range
                    # offset there is the leader's to judge, not a reason to reset).
                    del self._preferred[tp]
                    if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                        continue
                preferred = int(getattr(p, "preferred_read_replica", -1))
                if code == ErrorCode.NONE and preferred >= 0 and preferred != node:
                    log.debug("fetching %s-%d from its preferred read replica %d", tp.topic,
                              tp.partition, preferred)
                    self._preferred[tp] = (preferred, time.monotonic()
                                           + self.metadata_max_age_ms / 1000)
                    continue
                if code == ErrorCode.NONE:
                    state.high_watermark = int(p.high_watermark)
                    state.last_stable_offset = int(p.last_stable_offset)
                    state.log_start_offset = int(p.log_start_offset)
                    aborted = [(int(a.producer_id), int(a.first_offset))
                               for a in (p.aborted_transactions or ())]
                    decoded = decode_fetched(
                        p.records, topic=tp.topic, partition=tp.partition,
                        fetch_offset=fetch_offset, read_committed=read_committed,
                        aborted_transactions=aborted, check_crcs=self.check_crcs,
                        key_deserializer=self.key_deserializer,
                        value_deserializer=self.value_deserializer)
                    if decoded.records or decoded.error is not None:
                        self._buffers[tp] = _Buffered(
                            fetch_offset, decoded.records, 0, decoded.next_offset,
                            decoded.error)
                        self._data.set()
                    elif decoded.next_offset > fetch_offset:
                        # Only control or aborted batches: nothing to hand out.
                        state.position = decoded.next_offset
                        self._data.set()
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    if self.default_reset is None:
                        error = OffsetOutOfRangeError(
                            f"offset {fetch_offset} is out of range for "
                            f"{tp.topic}-{tp.partition} and auto_offset_reset is none")
                        self._buffers[tp] = _Buffered(fetch_offset, [], 0, fetch_offset, error)
                        self._data.set()
                    else:
                        log.info("offset %d out of range for %s-%d; resetting", fetch_offset,
                                 tp.topic, tp.partition)
                        state.position = None
                        state.reset = self.default_reset
                elif code in INVALID_METADATA:
                    self._metadata_stale = True
                    backoff = True
                else:
                    err = error_for(code, f"fetching {tp.topic}-{tp.partition}")
                    if err.retriable:
                        backoff = True
                    else:
                        self._buffers[tp] = _Buffered(fetch_offset, [], 0, fetch_offset, err)
                        self._data.set()
        return backoff

    # -- offsets

    async def _reset_offsets(self) -> float | None:
        pending = {tp: s.reset for tp, s in self.states.items()
                   if s.reset is not None and s.position is None}
        try:
            found = await self.list_offsets(pending, retry=False)
        except KafkaClientError as exc:
            log.debug("offset reset failed: %s", exc)
            return self.retry_backoff
        for tp, (offset, _ts, _epoch) in found.items():
            state = self.states.get(tp)
            if state is not None and state.position is None and state.reset == pending[tp]:
                state.position = offset
                state.reset = None
        self._data.set()
        return self.retry_backoff if len(found) < len(pending) else None

    async def list_offsets(
        self, timestamps: dict[TopicPartition, int], *, retry: bool = True,
        timeout: float | None = None,
    ) -> dict[TopicPartition, tuple[int, int, int]]:
        """ListOffsets for each partition: {tp: (offset, timestamp, leader_epoch)}.

        ``timestamps`` values are EARLIEST, LATEST or a time in ms. An offset of -1 means no
        record at or after that time. With ``retry``, metadata errors are retried (with a
        refresh) until ``timeout`` (default: the request timeout); without, partitions that
        failed are simply absent from the result.
        """
        deadline = time.monotonic() + (self.request_timeout_ms / 1000 if timeout is None
                                       else timeout)
        result: dict[TopicPartition, tuple[int, int, int]] = {}
        remaining = dict(timestamps)
        while True:
            errors = await self._list_offsets_once(remaining, result)
            remaining = {tp: ts for tp, ts in remaining.items() if tp not in result}
            if not remaining or not retry:
                return result
            if time.monotonic() >= deadline:
                code, message = next(iter(errors.values()), (ErrorCode.REQUEST_TIMED_OUT, ""))
                raise error_for(code, message)
            fatal = [e for e in errors.values()
                     if e[0] not in INVALID_METADATA and not error_for(e[0]).retriable]
            if fatal:
                raise error_for(*fatal[0])
            await asyncio.sleep(self.retry_backoff)
            with contextlib.suppress(KafkaClientError):
                await self.client.refresh_metadata(sorted({tp.topic for tp in remaining}))

    async def _list_offsets_once(
        self, timestamps: dict[TopicPartition, int],
        result: dict[TopicPartition, tuple[int, int, int]],
    ) -> dict[TopicPartition, tuple[int, str]]:
        errors: dict[TopicPartition, tuple[int, str]] = {}
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, ts in timestamps.items():
            leader = self.client.cluster.leader_for(tp.topic, tp.partition)
            if leader is None:
                errors[tp] = (ErrorCode.LEADER_NOT_AVAILABLE,
                              f"{tp.topic}-{tp.partition} has no known leader")
                self._metadata_stale = True
                continue
            by_leader.setdefault(leader, {})[tp] = ts

        async def ask(leader: int, wanted: dict[TopicPartition, int]) -> None:
            topics: dict[str, list[dict[str, int]]] = {}
            for tp, ts in wanted.items():
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "current_leader_epoch": -1,
                     "timestamp": ts})
            values = {
                "replica_id": -1,
                "isolation_level": self.isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            }
            try:
                response = await self.client.send(leader, LIST_OFFSETS, values)
            except KafkaClientError as exc:
                for tp in wanted:
                    errors[tp] = (exc.error_code or ErrorCode.NETWORK_EXCEPTION, str(exc))
                return
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, int(p.partition_index))
                    if tp not in wanted:
                        continue
                    code = int(p.error_code)
                    if code:
                        errors[tp] = (code, f"{tp.topic}-{tp.partition}")
                        if code in INVALID_METADATA:
                            self._metadata_stale = True
                        continue
                    epoch = int(getattr(p, "leader_epoch", -1))
                    result[tp] = (int(p.offset), int(p.timestamp), epoch)

        await asyncio.gather(*(ask(leader, w) for leader, w in by_leader.items()))
        return errors


def reset_strategy(name: str) -> int | None:
    """auto_offset_reset's value as a ListOffsets timestamp (None for "none")."""
    strategies = {"earliest": EARLIEST, "smallest": EARLIEST, "beginning": EARLIEST,
                  "latest": LATEST, "largest": LATEST, "end": LATEST, "none": None}
    try:
        return strategies[name.lower()]
    except KeyError:
        raise ValueError(f"auto_offset_reset must be earliest, latest or none, not {name!r}"
                         ) from None


__all__ = [
    "EARLIEST",
    "LATEST",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "Fetcher",
    "KafkaError",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "TopicPartition",
    "reset_strategy",
]
