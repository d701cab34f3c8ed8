"""The replica manager's delayed operations: requests that wait in a purgatory.

DelayedFetch (Kafka's DelayedFetch.scala) is a long-polled Fetch: the first read found less
than min_bytes, so the fetch waits until enough is readable, or max_wait_ms passes. Whether
it is enough is decided by comparing offsets, never by reading the log: at the first read
each partition's fetch offset got its LogOffsetMetadata (segment base offset and file
position), and each check compares it with where the fetch may read up to now -- the log
end offset for a follower, the high watermark for a consumer, the last stable offset for a
read_committed one:

- the end is the fetch offset: nothing new;
- the end sits on an older segment than the fetch offset (the log was truncated under it),
  or on a newer one (the fetch falls behind, or a segment was rolled): complete at once;
- same segment, the end past the fetch offset: the bytes between them
  (``end.position - fetch.position``, at most the partition's max bytes) accumulate, and
  the fetch completes once they reach min_bytes;
- leadership lost, the partition gone, a fenced or unknown leader epoch, a storage error:
  complete at once (the read answers the error).

A partition a replication throttle holds back for this follower counts nothing (Kafka's
shouldLeaderThrottle). Only ``on_complete`` reads the log, once, and resolves the fetch's
future with the results.

DelayedProduce (acks=-1) waits until every partition's high watermark has reached the end
of what the request appended -- i.e. the whole ISR has it -- or the request's timeout passes
(Kafka's DelayedProduce).

Both are completed by the replica manager (klog/daemon/replica_manager.py), which owns
their purgatories; everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from klog.daemon.partition import FetchIsolation
from klog.daemon.purgatory import DelayedOperation
from klog.protocol.errors import ErrorCode, KafkaError
from klog.storage.values import LogOffsetMetadata

if TYPE_CHECKING:
    from klog.daemon.replica_selector import ClientMetadata

TopicPartition = tuple[str, int]
# One partition of a fetch: topic, partition, fetch offset, partition max bytes, and the
# leader epoch the fetcher believes current (-1: none).
FetchKey = tuple[str, int, int, int, int]
R = TypeVar("R")


@dataclass(slots=True)
class FetchParams:
    """What a whole fetch asks (Kafka's FetchParams). ``replica_id`` >= 0: a follower's."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: FetchIsolation
    #: A consumer's Fetch v11+ (KIP-392): its rack and listener. A consumer fetch without
    #: it (Fetch v0-v10) may only be answered by the leader (Kafka's fetchOnlyLeader).
    client_metadata: ClientMetadata | None = None
    #: A follower's fetch: its log start offset per partition (Fetch v5+), which the
    #: leader keeps to pick preferred read replicas whose log covers a consumer's offset.
    follower_log_start_offsets: dict[TopicPartition, int] | None = None

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def fetch_only_leader(self) -> bool:
        """Kafka's FetchParams.fetchOnlyLeader: a follower's fetch, or a consumer's without
        client metadata; a consumer's Fetch v11+ may read from a follower."""
        return self.replica_id >= 0 or self.client_metadata is None


class FetchOffsets(Protocol):
    """What a DelayedFetch asks of the replica manager at each check."""

    def end_offset_metadata(self, topic: str, partition: int, current_leader_epoch: int,
                            isolation: FetchIsolation, fetch_only_leader: bool = True
                            ) -> LogOffsetMetadata:
        """Where a fetch may read up to on ``topic``-``partition``; a KafkaError when the
        partition cannot be fetched here (not the leader when ``fetch_only_leader``, gone,
        epoch mismatch)."""

    def should_leader_throttle(self, topic: str, partition: int, replica_id: int) -> bool:
        """Whether the leader's replication throttle holds this partition back from
        follower ``replica_id`` now."""


class DelayedFetch(DelayedOperation, Generic[R]):
    """A fetch waiting for min_bytes: ``wanted[i]`` was read from ``starts[i]`` (its fetch
    offset's metadata at the first read). ``read`` is the final read; its result resolves
    ``done`` (or its exception does). A ``done`` already resolved (the client went away)
    completes the operation without reading."""

    def __init__(self, delay_ms: int, params: FetchParams, wanted: Sequence[FetchKey],
                 starts: Sequence[LogOffsetMetadata], offsets: FetchOffsets,
                 read: Callable[[], R], done: asyncio.Future[R]) -> None:
        super().__init__(delay_ms)
        self.params = params
        self._wanted = wanted
        self._starts = starts
        self._offsets = offsets
        self._read = read
        self._done = done

    def try_complete(self) -> bool:
        if self._done.done():
            return self.force_complete()
        params = self.params
        isolation = params.isolation
        replica_id = params.replica_id
        only_leader = params.fetch_only_leader
        offsets = self._offsets
        accumulated = 0
        for (topic, partition, _offset, max_bytes, epoch), start in zip(
                self._wanted, self._starts, strict=True):
            if start.segment_base_offset < 0:
                continue  # where the fetch offset sits is unknown: nothing to compare
            try:
                end = offsets.end_offset_metadata(topic, partition, epoch, isolation,
                                                  only_leader)
            except (KafkaError, OSError):
                return self.force_complete()  # the read answers the error
            if end.message_offset == start.message_offset:
                # Compared first: a segment just rolled puts the same end on a new segment.
                continue
            if end.segment_base_offset < start.segment_base_offset:
                return self.force_complete()  # truncated under the fetch offset
            same_segment = end.segment_base_offset == start.segment_base_offset
            if same_segment and end.message_offset < start.message_offset:
                continue  # the fetch is ahead of what it may read
            if replica_id >= 0 and offsets.should_leader_throttle(topic, partition,
                                                                  replica_id):
                continue  # held back: counts nothing
            if not same_segment:
                # Behind the end's segment: at least the rest of a segment is readable.
                return self.force_complete()
            accumulated += min(end.relative_position_in_segment
                               - start.relative_position_in_segment, max_bytes)
        if accumulated >= max(params.min_bytes, 1):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        done = self._done
        if done.done():
            return
        try:
            results = self._read()
        except Exception as exc:  # the waiting request must hear of it, not hang
            done.set_exception(exc)
            return
        done.set_result(results)


class DelayedProduce(DelayedOperation):
    """Waits for ``required`` (partition -> offset the high watermark must reach).

    ``check(tp, offset)`` answers (done, error code) for one partition, as Kafka's
    Partition.checkEnoughReplicasReachOffset: done with no error once the high watermark
    has reached the offset and the ISR still has min.insync.replicas members; done with
    NOT_ENOUGH_REPLICAS_AFTER_APPEND when it reached it on a smaller ISR; done with
    NOT_LEADER_OR_FOLLOWER when leadership moved. A partition still pending at the timeout
    answers REQUEST_TIMED_OUT, as in Kafka. ``done`` gets partition -> error code.
    """

    def __init__(self, delay_ms: int, required: dict[TopicPartition, int],
                 check: Callable[[TopicPartition, int], tuple[bool, int]],
                 done: asyncio.Future[dict[TopicPartition, int]]) -> None:
        super().__init__(delay_ms)
        self._pending = dict(required)
        self._errors: dict[TopicPartition, int] = {}
        self._check = check
        self._done = done

    def try_complete(self) -> bool:
        for tp, offset in list(self._pending.items()):
            finished, error = self._check(tp, offset)
            if finished:
                del self._pending[tp]
                self._errors[tp] = error
        if not self._pending or self._done.done():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        for tp in self._pending:
            self._errors[tp] = int(ErrorCode.REQUEST_TIMED_OUT)
        if not self._done.done():
            self._done.set_result(self._errors)
