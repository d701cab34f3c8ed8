"""The consumer's side of the classic group protocol: membership, rebalances, offsets.

Owns, for one Consumer with a ``group_id``, everything Kafka's ConsumerCoordinator does:
finding the coordinator (FindCoordinator), joining (JoinGroup, answering MEMBER_ID_REQUIRED
with the member id the broker hands out), the leader's assignment (SyncGroup; the assignors
are ``klog.client.assignors``'), heartbeats, leaving (LeaveGroup on close and unsubscribe;
static members with a ``group_instance_id`` do not leave, so a restart within the session
timeout causes no rebalance), rebalance listener callbacks, committed offsets (OffsetCommit
/ OffsetFetch), auto commit, and the starting position of newly assigned partitions (the
committed offset, else ``auto_offset_reset``).

Rebalance protocols (KIP-429): with only assignors that support it (cooperative-sticky),
the protocol is cooperative -- a member keeps its partitions across a rebalance, revokes only
those its new assignment lacks, and rejoins at once so they can go to their new owner; else
it is eager -- everything is revoked before JoinGroup.

The coordinator gets its own connections (as the Java client's coordinator node does), so a
heartbeat or a commit never queues behind a long-polling Fetch to the same broker, nor behind
a JoinGroup that waits for the whole group (joins go on a second connection).

A background task (``_run``) joins, heartbeats, auto commits and rejoins; the application's
getmany() calls ``poll()``, which waits for a first assignment and surfaces fatal errors
(FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, ...). Listener callbacks (plain or async
functions) run on the background task. One event loop; not thread-safe.

The request builders and parsers at the bottom (``offset_commit_values``,
``offset_fetch_values``, ``parse_offset_fetch``, ...) are shared with klog.client.admin.

``Any`` below is a Kafka message (a kio entity chosen by api key and version at runtime, or
the nested mapping of values a request is built from), or a keyword argument passed through.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import time
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from klog.client.assignors import (
    COOPERATIVE,
    EAGER,
    PartitionAssignor,
    decode_assignment,
    decode_subscription,
    encode_subscription,
    get_assignor,
    run_assignor,
)
from klog.client.errors import KafkaClientError, KafkaConnectionError, error_for, error_name
from klog.client.fetcher import Fetcher, TopicPartition
from klog.client.network import BrokerConnection, KafkaClient, build_request
from klog.protocol import apis
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import InternalTopicError

log = logging.getLogger(__name__)

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP = 8, 9, 10, 11
HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 12, 13, 14

#: Highest versions klog's group client uses: OffsetCommit v10 and OffsetFetch v10 name
#: topics by id only.
MAX_VERSIONS = {OFFSET_COMMIT: 9, OFFSET_FETCH: 9}

COORDINATOR_ERRORS = frozenset(int(c) for c in (
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT))

#: JoinGroup / SyncGroup / Heartbeat answers after which the consumer cannot go on.
FATAL_ERRORS = frozenset(int(c) for c in (
    ErrorCode.FENCED_INSTANCE_ID, ErrorCode.GROUP_MAX_SIZE_REACHED,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ErrorCode.INVALID_SESSION_TIMEOUT,
    ErrorCode.GROUP_AUTHORIZATION_FAILED, ErrorCode.INVALID_GROUP_ID,
    ErrorCode.UNSUPPORTED_VERSION, ErrorCode.TOPIC_AUTHORIZATION_FAILED))


class CommitFailedError(KafkaClientError):
    """A commit the group no longer accepts: this member was removed or a rebalance moved
    on (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID)."""


class GroupError(KafkaClientError):
    """A fatal group error: the consumer cannot stay in the group."""


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset: the next record to consume, and the commit's metadata string."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class ConsumerRebalanceListener:
    """Callbacks around rebalances (override any; plain or ``async`` methods).

    ``on_partitions_revoked``: partitions this member gives up (all of them before an eager
    rebalance; only the moved ones in a cooperative one) -- commit their work here.
    ``on_partitions_assigned``: partitions newly added (all of them, eager), positions
    already set from the committed offsets (a seek here wins).
    ``on_partitions_lost``: partitions that other members may already own (the member was
    removed from the group); by default the same as revoked.
    """

    # Each may be a plain or an async method: what it returns is awaited when awaitable.

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Awaitable[None] | None:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Awaitable[None] | None:
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Awaitable[None] | None:
        return self.on_partitions_revoked(lost)


class ConsumerCoordinator:
    """Group membership and offsets for one consumer (see the module docstring)."""

    def __init__(
        self,
        client: KafkaClient,
        fetcher: Fetcher,
        *,
        group_id: str,
        group_instance_id: str | None = None,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 3000,
        max_poll_interval_ms: int = 300000,
        rebalance_timeout_ms: int | None = None,
        partition_assignment_strategy: Sequence[str | PartitionAssignor] = (
            "range", "cooperative-sticky"),
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30000,
        require_stable: bool = False,
        client_rack: str | None = None,
    ) -> None:
        self.check_settings(group_id=group_id, session_timeout_ms=session_timeout_ms,
                            heartbeat_interval_ms=heartbeat_interval_ms,
                            partition_assignment_strategy=partition_assignment_strategy)
        self.client = client
        self.fetcher = fetcher
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.rebalance_timeout_ms = (max_poll_interval_ms if rebalance_timeout_ms is None
                                     else rebalance_timeout_ms)
        self.assignors = [get_assignor(a) for a in partition_assignment_strategy]
        common = set.intersection(*(set(a.rebalance_protocols) for a in self.assignors))
        self.protocol = COOPERATIVE if COOPERATIVE in common else EAGER
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self.retry_backoff = retry_backoff_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.require_stable = require_stable
        self.client_rack = client_rack

        # Membership (the generation this member belongs to).
        self.member_id = ""
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.owned: set[TopicPartition] = set()
        self._pending_lost: set[TopicPartition] | None = None  # lost, listener not told yet

        # Subscription.
        self._topics: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._listener: ConsumerRebalanceListener | None = None
        self._subscribed_topics: set[str] = set()  # resolved (pattern) at the last join
        self._metadata_snapshot: dict[str, int] = {}

        self._coordinator: BrokerConnection | None = None
        # JoinGroup waits for the whole group; a broker answers a connection's requests in
        # order, so joins get a connection of their own and commits, offset fetches and
        # heartbeats never queue behind one.
        self._join_conn: BrokerConnection | None = None
        self._coordinator_id: int | None = None
        self._coordinator_lock = asyncio.Lock()
        self._rejoin_needed = True
        self._join_prepared = False
        self._wake = asyncio.Event()
        self._assigned = asyncio.Event()  # a first assignment arrived for this subscription
        self._last_poll = time.monotonic()
        self._poll_timed_out = False
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        self._fatal: KafkaClientError | None = None
        self._task: asyncio.Task[None] | None = None
        self._commit_task: asyncio.Task[None] | None = None
        self._closed = False

    @staticmethod
    def check_settings(*, group_id: str, session_timeout_ms: int = 45000,
                       heartbeat_interval_ms: int = 3000,
                       partition_assignment_strategy: Sequence[str | PartitionAssignor] = (
                           "range",), **_ignored: Any) -> None:
        """ValueError for settings Kafka's consumer refuses at construction."""
        if not group_id:
            raise ValueError("group_id must not be empty")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        assignors = [get_assignor(a) for a in partition_assignment_strategy]
        if not assignors:
            raise ValueError("partition_assignment_strategy must name an assignor")
        if not set.intersection(*(set(a.rebalance_protocols) for a in assignors)):
            raise ValueError("the assignors share no rebalance protocol")

    # -- subscription (called by the Consumer)

    @property
    def subscribed(self) -> bool:
        return bool(self._topics) or self._pattern is not None

    def subscription(self) -> set[str]:
        """The topics subscribed to (a pattern's matches as of the last metadata)."""
        return set(self._resolve_topics()) if self.subscribed else set()

    def subscribe(self, topics: Iterable[str] = (), pattern: str | re.Pattern[str] | None = None,
                  listener: ConsumerRebalanceListener | None = None) -> None:
        topics = {t for t in topics}
        if topics and pattern is not None:
            raise ValueError("subscribe to topics or to a pattern, not both")
        if not topics and pattern is None:
            raise ValueError("subscribe needs topics or a pattern (unsubscribe() to stop)")
        self._topics = topics
        self._pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        self._listener = listener
        self._assigned.clear()
        self.request_rejoin("subscription changed")
        self._start()

    def unsubscribe(self) -> None:
        """Stop consuming: the background task revokes, leaves the group and forgets the
        assignment (the fetcher stops at once)."""
        self._topics, self._pattern = set(), None
        self._assigned.clear()
        self.fetcher.assign([])
        self._wake.set()

    def request_rejoin(self, reason: str) -> None:
        if not self._rejoin_needed:
            log.info("group %s: rejoining (%s)", self.group_id, reason)
        self._rejoin_needed = True
        self._wake.set()

    def _resolve_topics(self) -> list[str]:
        if self._pattern is None:
            return sorted(self._topics)
        cluster = self.client.cluster
        return sorted(t for t in cluster.topics
                      if t not in cluster.internal_topics and self._pattern.fullmatch(t))

    # -- what the application's poll does

    async def poll(self, timeout: float) -> None:
        """Note the poll (max.poll.interval.ms), raise a fatal group error, and wait up to
        ``timeout`` seconds for a first assignment."""
        self._raise_fatal()
        self._last_poll = time.monotonic()
        if self._poll_timed_out:
            self._poll_timed_out = False
            self.request_rejoin("polled again after max.poll.interval.ms")
        if self.subscribed and not self._assigned.is_set():
            self._start()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._assigned.wait(), max(timeout, 0.0))
            self._raise_fatal()
        elif (not self.subscribed and self.enable_auto_commit
              and self._last_poll >= self._next_auto_commit
              and (self._commit_task is None or self._commit_task.done())):
            # assign() with a group id: auto commit rides on the application's polls, as
            # in Kafka's consumer (there is no membership task to do it).
            self._commit_task = asyncio.get_running_loop().create_task(
                self._auto_commit(sync=False))

    def _raise_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    # -- life cycle

    def _start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self, *, autocommit: bool = True) -> None:
        """Commit (auto commit), revoke, leave the group (dynamic members) and stop."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._commit_task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._commit_task
        if self._join_conn is not None:  # a join cut short: its answer is of no use
            self._join_conn.close()
            self._join_conn = None
        try:
            if autocommit and self.enable_auto_commit and self._positions():
                await self._auto_commit(sync=True)
            if self.owned:
                await self._invoke("on_partitions_revoked", set(self.owned))
            await self._leave("the consumer is closing")
        except KafkaClientError as exc:
            log.warning("group %s: leaving on close failed: %s", self.group_id, exc)
        finally:
            self._coordinator_dead()

    # -- the background task

    async def _run(self) -> None:
        while not self._closed:
            try:
                if not self.subscribed:
                    if (self.member_id and self.generation_id >= 0) or self.owned:
                        await self._leave_on_unsubscribe()
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if self._poll_timed_out:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                await self.ensure_coordinator()
                if self._rejoin_needed:
                    await self._join_group()
                    continue
                await self._heartbeat_cycle()
            except asyncio.CancelledError:
                raise
            except GroupError as exc:
                log.error("group %s: %s", self.group_id, exc)
                self._fatal = exc
                self._assigned.set()  # wake poll(): it raises the error
                return
            except KafkaClientError as exc:
                log.info("group %s: %s; retrying", self.group_id, exc)
                if exc.error_code in COORDINATOR_ERRORS or isinstance(
                        exc, KafkaConnectionError):
                    self._coordinator_dead()
                await asyncio.sleep(self.retry_backoff)
            except Exception:
                log.exception("group %s: the membership task failed", self.group_id)
                self._fatal = GroupError("the group membership task failed; see the log")
                self._assigned.set()
                return

    async def _heartbeat_cycle(self) -> None:
        """Wait for the next heartbeat (or a reason to rejoin), auto commit when due, check
        the poll interval and the subscription's metadata, and heartbeat."""
        now = time.monotonic()
        wait = self.heartbeat_interval_ms / 1000
        if self.enable_auto_commit:
            wait = min(wait, max(0.0, self._next_auto_commit - now))
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), wait)
        if self._rejoin_needed or not self.subscribed or self._closed:
            return
        now = time.monotonic()
        if now - self._last_poll > self.max_poll_interval_ms / 1000:
            log.warning("group %s: no poll for more than max.poll.interval.ms (%d ms); "
                        "leaving the group", self.group_id, self.max_poll_interval_ms)
            await self._leave("consumer poll timeout has expired")
            self._lose_partitions()
            self._poll_timed_out = True
            await self._invoke_pending()
            return
        if self.enable_auto_commit and now >= self._next_auto_commit:
            await self._auto_commit(sync=False)
        if self._metadata_changed():
            self.request_rejoin("the subscribed topics or their partitions changed")
            return
        await self._heartbeat()

    def _metadata_changed(self) -> bool:
        topics = set(self._resolve_topics())
        if topics != self._subscribed_topics:
            return True
        cluster = self.client.cluster
        current = {t: len(cluster.topics.get(t, {})) for t in self._metadata_snapshot}
        return current != self._metadata_snapshot

    # -- coordinator

    async def ensure_coordinator(self) -> BrokerConnection:
        """A live connection to the group's coordinator (FindCoordinator, retried)."""
        conn = self._coordinator
        if conn is not None and conn.connected:
            return conn
        async with self._coordinator_lock:
            conn = self._coordinator
            if conn is not None and conn.connected:
                return conn
            deadline = time.monotonic() + self.request_timeout_ms / 1000
            while True:
                try:
                    node_id, host, port = await find_coordinator(self.client, self.group_id)
                    conn = BrokerConnection(node_id, host, port, client_id=self.client.client_id,
                                            security=self.client.security)
                    await conn.connect(self.request_timeout_ms / 1000)
                    self._coordinator, self._coordinator_id = conn, node_id
                    log.debug("group %s: coordinator is node %d (%s:%d)", self.group_id,
                              node_id, host, port)
                    return conn
                except KafkaClientError as exc:
                    if exc.error_code in FATAL_ERRORS:  # GROUP_AUTHORIZATION_FAILED...
                        raise GroupError(str(exc), exc.error_code) from None
                    if not exc.retriable or time.monotonic() >= deadline:
                        raise
                    log.debug("group %s: finding the coordinator: %s", self.group_id, exc)
                    await asyncio.sleep(self.retry_backoff)

    def _coordinator_dead(self) -> None:
        for conn in (self._coordinator, self._join_conn):
            if conn is not None:
                conn.close()
        self._coordinator = self._join_conn = None

    async def _send(self, api_key: int, values: Mapping[str, Any], *,
                    timeout_ms: int | None = None, join: bool = False) -> Any:
        conn = await self.ensure_coordinator()
        if join:
            if self._join_conn is None or not self._join_conn.connected:
                joiner = BrokerConnection(conn.node_id, conn.host, conn.port,
                                          client_id=self.client.client_id,
                                          security=self.client.security)
                await joiner.connect(self.request_timeout_ms / 1000)
                self._join_conn = joiner
            conn = self._join_conn
        version = pick_version(conn, api_key)
        entity = build_request(apis.spec_for(api_key).request_entity(version), values)
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        try:
            return await conn.request(api_key, version, entity, timeout=timeout)
        except KafkaClientError:
            self._coordinator_dead()
            raise

    # -- joining

    def _protocols(self) -> list[dict[str, Any]]:
        topics = self._resolve_topics()
        owned = sorted(self.owned)
        return [{"name": a.name,
                 "metadata": encode_subscription(
                     topics, owned_partitions=owned, generation_id=self.generation_id,
                     user_data=a.subscription_user_data(topics), rack_id=self.client_rack)}
                for a in self.assignors]

    async def _join_group(self) -> None:
        if not self._join_prepared:
            await self._on_join_prepare()
            self._join_prepared = True
        if self._pattern is not None:
            with contextlib.suppress(KafkaClientError):
                await self.client.refresh_metadata(None)
        else:
            with contextlib.suppress(KafkaClientError):
                await self.client.refresh_metadata(sorted(self._topics))
        topics = self._resolve_topics()
        self._subscribed_topics = set(topics)
        self._metadata_snapshot = {t: len(self.client.cluster.topics.get(t, {}))
                                   for t in topics}
        values = {
            "group_id": self.group_id,
            "session_timeout": self.session_timeout_ms,
            "rebalance_timeout": self.rebalance_timeout_ms,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "protocol_type": "consumer",
            "protocols": self._protocols(),
            "reason": "joining the group",
        }
        # The broker holds JoinGroup until the whole group has joined (up to the rebalance
        # timeout): Kafka's client allows that plus 5 s.
        timeout = max(self.request_timeout_ms, self.rebalance_timeout_ms + 5000)
        response = await self._send(JOIN_GROUP, values, timeout_ms=timeout, join=True)
        code = int(response.error_code)
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id  # KIP-394: join again with it at once
            return
        if code:
            self._join_failed(code, "JoinGroup")
            return
        self.member_id = response.member_id
        self.generation_id = int(response.generation_id)
        self.protocol_name = response.protocol_name
        self.leader_id = response.leader
        if self.leader_id == self.member_id and not getattr(response, "skip_assignment", False):
            assignments = await self._assign(response)
        else:
            assignments = []
        response = await self._send(SYNC_GROUP, join=True, values={
            "group_id": self.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "protocol_type": "consumer",
            "protocol_name": self.protocol_name,
            "assignments": [{"member_id": m, "assignment": blob}
                            for m, blob in assignments],
        })
        code = int(response.error_code)
        if code:
            self._join_failed(code, "SyncGroup")
            return
        try:
            assignment = set(decode_assignment(response.assignment))
        except InternalTopicError as exc:
            raise GroupError(f"undecodable assignment from the group leader: {exc}") from None
        self._rejoin_needed = False
        self._join_prepared = False
        log.info("group %s: generation %d, member %s, assigned %s", self.group_id,
                 self.generation_id, self.member_id, sorted(assignment))
        await self._on_join_complete(assignment)

    def _join_failed(self, code: int, what: str) -> None:
        if code in FATAL_ERRORS:
            raise GroupError(f"{error_name(code)}: {what} for group {self.group_id!r}", code)
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            self._reset_generation(forget_member=code == ErrorCode.UNKNOWN_MEMBER_ID)
            return  # join again
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return  # join again
        raise error_for(code, f"{what} for group {self.group_id!r}")

    async def _assign(self, response: Any) -> list[tuple[str, bytes]]:
        """The leader's part: run the group's assignor over every member's subscription."""
        assignor = next((a for a in self.assignors if a.name == self.protocol_name), None)
        if assignor is None:
            raise GroupError(f"the group chose assignor {self.protocol_name!r}, which this "
                             "consumer does not have")
        members = [(m.member_id, getattr(m, "group_instance_id", None), bytes(m.metadata))
                   for m in response.members]
        topics: set[str] = set()
        for _m, _i, blob in members:
            with contextlib.suppress(InternalTopicError):
                topics.update(decode_subscription(blob).topics)
        with contextlib.suppress(KafkaClientError):
            await self.client.refresh_metadata(sorted(topics))
        cluster = self.client.cluster
        partitions = {t: len(cluster.topics[t]) for t in topics if cluster.topics.get(t)}
        # The leader watches every member's topics, not only its own.
        self._metadata_snapshot = dict(partitions)
        blobs = run_assignor(assignor, partitions, members)
        return sorted(blobs.items())

    async def _on_join_prepare(self) -> None:
        """Before JoinGroup: commit, then revoke everything (eager) or what the new
        subscription drops (cooperative); partitions of a lost generation are lost."""
        if self.enable_auto_commit and self.owned and self.generation_id >= 0:
            try:
                await self._auto_commit(sync=True)
            except KafkaClientError as exc:
                log.info("group %s: commit before rebalancing failed: %s", self.group_id, exc)
        if self.generation_id < 0:
            self._lose_partitions()
        await self._invoke_pending()
        if not self.owned:
            return
        if self.protocol == EAGER:
            revoked = set(self.owned)
        else:
            wanted = set(self._resolve_topics())
            revoked = {tp for tp in self.owned if tp.topic not in wanted}
        if revoked:
            self.owned -= revoked
            self.fetcher.assign(sorted(self.owned))
            await self._invoke("on_partitions_revoked", revoked)

    async def _on_join_complete(self, assignment: set[TopicPartition]) -> None:
        revoked = self.owned - assignment
        added = assignment - self.owned
        if revoked:
            if self.enable_auto_commit:
                with contextlib.suppress(KafkaClientError):
                    await self.commit(self._positions(revoked))
            self.owned -= revoked
            self.fetcher.assign(sorted(self.owned))
            await self._invoke("on_partitions_revoked", revoked)
            if self.protocol == COOPERATIVE:
                # Their new owners get them in the next round.
                self.request_rejoin("partitions were revoked")
        committed = await self._committed_for(added)
        self.owned |= added
        for assignor in self.assignors:
            if assignor.name == self.protocol_name:
                assignor.on_assignment(sorted(assignment), self.generation_id)
        # No await between assigning and seeking: the fetcher must not resolve a reset for
        # a partition that has a committed offset.
        self.fetcher.assign(sorted(self.owned))
        for tp, found in committed.items():
            if found is not None and found.offset >= 0:
                self.fetcher.seek(tp, found.offset)
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        await self._invoke("on_partitions_assigned", added)
        self._assigned.set()

    async def _committed_for(self, partitions: set[TopicPartition]
                             ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        if not partitions:
            return {}
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while True:
            try:
                return await self.committed(partitions)
            except KafkaClientError as exc:
                if not exc.retriable or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(self.retry_backoff)

    # -- heartbeats and leaving

    async def _heartbeat(self) -> None:
        if self.generation_id < 0:
            self.request_rejoin("no generation")
            return
        response = await self._send(HEARTBEAT, {
            "group_id": self.group_id, "generation_id": self.generation_id,
            "member_id": self.member_id, "group_instance_id": self.group_instance_id,
        }, timeout_ms=min(self.request_timeout_ms, self.session_timeout_ms))
        code = int(response.error_code)
        if code == ErrorCode.NONE:
            return
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("the group is rebalancing")
        elif code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            log.info("group %s: heartbeat answered %s; rejoining", self.group_id,
                     error_name(code))
            self._reset_generation(forget_member=code == ErrorCode.UNKNOWN_MEMBER_ID)
            self.request_rejoin(error_name(code))
        elif code in FATAL_ERRORS:
            raise GroupError(f"{error_name(code)}: heartbeat for group {self.group_id!r}",
                             code)
        else:
            raise error_for(code, f"heartbeat for group {self.group_id!r}")

    def _reset_generation(self, *, forget_member: bool) -> None:
        self.generation_id = -1
        if forget_member:
            self.member_id = ""
        # Partitions of a lost generation: other members may own them already.
        self._lose_partitions()

    def _lose_partitions(self) -> None:
        if self.owned:
            self._pending_lost = set(self.owned)
            self.owned = set()
            self.fetcher.assign([])

    async def _invoke_pending(self) -> None:
        lost, self._pending_lost = self._pending_lost, None
        if lost:
            await self._invoke("on_partitions_lost", lost)

    async def _leave(self, reason: str) -> None:
        """LeaveGroup (dynamic members only: a static member's place waits for it)."""
        if not self.member_id or self.group_instance_id is not None:
            self._reset_generation(forget_member=self.group_instance_id is None)
            return
        member = self.member_id
        self._reset_generation(forget_member=True)
        try:
            response = await self._send(LEAVE_GROUP, {
                "group_id": self.group_id, "member_id": member,
                "members": [{"member_id": member, "group_instance_id": None,
                             "reason": reason}],
            }, timeout_ms=min(self.request_timeout_ms, 5000))
            code = int(response.error_code)
            if code:
                log.info("group %s: LeaveGroup answered %s", self.group_id, error_name(code))
        except KafkaClientError as exc:
            log.info("group %s: LeaveGroup failed: %s", self.group_id, exc)

    async def _leave_on_unsubscribe(self) -> None:
        owned = set(self.owned)
        if owned:
            if self.enable_auto_commit:
                with contextlib.suppress(KafkaClientError):
                    await self.commit(self._positions(owned))
            self.owned = set()
            await self._invoke("on_partitions_revoked", owned)
        await self._leave("the consumer unsubscribed")
        self._pending_lost = None
        self._rejoin_needed = True

    async def _invoke(self, method: str, partitions: set[TopicPartition]) -> None:
        if method != "on_partitions_lost":
            await self._invoke_pending()
        listener = self._listener
        if listener is None:
            return
        try:
            result = getattr(listener, method)(set(partitions))
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("group %s: rebalance listener %s failed", self.group_id, method)

    # -- offsets

    def _positions(self, partitions: Iterable[TopicPartition] | None = None
                   ) -> dict[TopicPartition, OffsetAndMetadata]:
        if partitions is None:  # assign() with a group id: every assigned partition
            partitions = self.owned if self.subscribed else list(self.fetcher.states)
        out = {}
        for tp in partitions:
            state = self.fetcher.states.get(tp)
            if state is not None and state.position is not None:
                out[tp] = OffsetAndMetadata(state.position)
        return out

    async def _auto_commit(self, *, sync: bool) -> None:
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        offsets = self._positions()
        if not offsets:
            return
        try:
            await self.commit(offsets, retry=sync)
        except KafkaClientError as exc:
            log.info("group %s: auto commit failed: %s", self.group_id, exc)
            if sync:
                raise

    # Two Mappings: a Mapping's key type is invariant, and callers key by TopicPartition
    # or by plain (topic, partition) tuples.
    async def commit(self, offsets: Mapping[tuple[str, int], int | OffsetAndMetadata]
                     | Mapping[TopicPartition, int | OffsetAndMetadata]
                     | None = None, *, retry: bool = True) -> None:
        """Commit ``offsets`` (default: the positions of every assigned partition).

        As a member of an active generation, with its member id and generation; otherwise
        (assign() with a group id) as a simple consumer (generation -1). Retriable errors
        are retried (finding the coordinator again) until the request timeout; a commit
        the group no longer accepts raises CommitFailedError.
        """
        chosen = self._positions() if offsets is None else offsets
        wanted = {TopicPartition(*tp): (o if isinstance(o, OffsetAndMetadata)
                                        else OffsetAndMetadata(int(o)))
                  for tp, o in chosen.items()}
        if not wanted:
            return
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while True:
            in_group = self.generation_id >= 0 and bool(self.member_id)
            values = offset_commit_values(
                self.group_id, wanted,
                generation_id=self.generation_id if in_group else -1,
                member_id=self.member_id if in_group else "",
                group_instance_id=self.group_instance_id if in_group else None)
            try:
                response = await self._send(OFFSET_COMMIT, values)
            except KafkaClientError as exc:
                if not retry or not exc.retriable or time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(self.retry_backoff)
                continue
            errors = parse_offset_commit(response)
            failed = {tp: code for tp, code in errors.items() if code}
            if not failed:
                return
            code = next(iter(failed.values()))
            what = f"committing offsets of group {self.group_id!r}"
            if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
                        ErrorCode.FENCED_INSTANCE_ID):
                if code != ErrorCode.FENCED_INSTANCE_ID:
                    self._reset_generation(forget_member=code == ErrorCode.UNKNOWN_MEMBER_ID)
                    self.request_rejoin(error_name(code))
                raise CommitFailedError(f"{error_name(code)}: {what}: the group has moved "
                                        "on without this member", code)
            if code == ErrorCode.REBALANCE_IN_PROGRESS:
                self.request_rejoin("the group is rebalancing")
                raise CommitFailedError(f"REBALANCE_IN_PROGRESS: {what}", code)
            err = error_for(code, what)
            if code in COORDINATOR_ERRORS:
                self._coordinator_dead()
            if not retry or not err.retriable or time.monotonic() >= deadline:
                raise err
            await asyncio.sleep(self.retry_backoff)

    async def committed(self, partitions: Iterable[tuple[str, int]]
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offset of each partition (None: nothing committed)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        if not wanted:
            return {}
        response = await self._send(OFFSET_FETCH, offset_fetch_values(
            self.group_id, wanted, require_stable=self.require_stable))
        found = parse_offset_fetch(response, self.group_id)
        if found.error:
            if found.error in COORDINATOR_ERRORS:
                self._coordinator_dead()
            raise error_for(found.error, f"fetching offsets of group {self.group_id!r}")
        out: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for tp in wanted:
            hit = found.offsets.get(tp)
            code = found.partition_errors.get(tp, 0)
            if code:
                raise error_for(code, f"fetching the offset of {tp.topic}-{tp.partition}")
            out[tp] = hit if hit is not None and hit.offset >= 0 else None
        return out


# --- requests shared with the admin client --------------------------------------------------


def pick_version(conn: BrokerConnection, api_key: int) -> int:
    """The highest version of ``api_key`` klog and the broker behind ``conn`` both speak."""
    lo, hi = apis.KNOWN[api_key]
    hi = min(hi, MAX_VERSIONS.get(api_key, hi))
    theirs = conn.api_versions.get(api_key)
    if theirs is None or max(lo, theirs[0]) > min(hi, theirs[1]):
        raise KafkaClientError(
            f"node {conn.node_id} does not support {apis.spec_for(api_key).name}",
            ErrorCode.UNSUPPORTED_VERSION)
    return min(hi, theirs[1])


async def find_coordinator(client: KafkaClient, group_id: str,
                           key_type: int = 0) -> tuple[int, str, int]:
    """(node id, host, port) of the group's coordinator (``key_type`` 1: of the
    transactional id ``group_id``); KafkaClientError when the answer is an error
    (COORDINATOR_NOT_AVAILABLE while __consumer_offsets is being created...)."""
    response = await client.send(None, FIND_COORDINATOR, {
        "key": group_id, "key_type": key_type, "coordinator_keys": [group_id]})
    coordinators = getattr(response, "coordinators", None)
    entry = coordinators[0] if coordinators else response
    code = int(entry.error_code)
    if code:
        message = getattr(entry, "error_message", None)
        what = "transactional id" if key_type == 1 else "group"
        raise error_for(code, f"finding the coordinator of {what} {group_id!r}"
                        + (f" ({message})" if message else ""))
    return int(entry.node_id), entry.host, int(entry.port)


def offset_commit_values(group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                         *, generation_id: int = -1, member_id: str = "",
                         group_instance_id: str | None = None) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    now = int(time.time() * 1000)
    for tp, om in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "committed_offset": om.offset,
            "committed_leader_epoch": om.leader_epoch, "commit_timestamp": now,
            "committed_metadata": om.metadata})
    return {
        "group_id": group_id,
        "generation_id_or_member_epoch": generation_id,
        "generation_id": generation_id,
        "member_id": member_id,
        "group_instance_id": group_instance_id,
        "retention_time_ms": -1,
        "topics": [{"name": t, "topic_id": None, "partitions": ps}
                   for t, ps in by_topic.items()],
    }


def parse_offset_commit(response: Any) -> dict[TopicPartition, int]:
    return {TopicPartition(t.name, int(p.partition_index)): int(p.error_code)
            for t in response.topics for p in t.partitions}


def offset_fetch_values(group_id: str, partitions: Sequence[TopicPartition] | None, *,
                        require_stable: bool = False) -> dict[str, Any]:
    """OffsetFetch for one group (``partitions`` None: all its committed offsets), in the
    fields of every version (v8+ batch groups; older ones name the group at the top)."""
    if partitions is None:
        topics = None
    else:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "topic_id": None, "partition_indexes": sorted(ps)}
                  for t, ps in sorted(by_topic.items())]
    return {
        "group_id": group_id,
        "topics": topics,
        "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1,
                    "topics": topics}],
        "require_stable": require_stable,
    }


@dataclass
class FetchedOffsets:
    """An OffsetFetch answer for one group."""

    error: int
    offsets: dict[TopicPartition, OffsetAndMetadata]
    partition_errors: dict[TopicPartition, int]


def parse_offset_fetch(response: Any, group_id: str) -> FetchedOffsets:
    groups = getattr(response, "groups", None)
    if groups is not None:
        group = next((g for g in groups if g.group_id == group_id), None)
        if group is None:
            return FetchedOffsets(ErrorCode.UNKNOWN_SERVER_ERROR, {}, {})
        error, topics = int(group.error_code), group.topics
    else:
        error, topics = int(getattr(response, "error_code", 0) or 0), response.topics
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    partition_errors: dict[TopicPartition, int] = {}
    for t in topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            if int(p.error_code):
                partition_errors[tp] = int(p.error_code)
                continue
            offsets[tp] = OffsetAndMetadata(
                int(p.committed_offset), p.metadata or "",
                int(getattr(p, "committed_leader_epoch", -1)))
    return FetchedOffsets(error, offsets, partition_errors)


__all__ = [
    "CommitFailedError",
    "ConsumerCoordinator",
    "ConsumerRebalanceListener",
    "FetchedOffsets",
    "GroupError",
    "OffsetAndMetadata",
    "find_coordinator",
    "offset_commit_values",
    "offset_fetch_values",
    "parse_offset_commit",
    "parse_offset_fetch",
    "pick_version",
]
