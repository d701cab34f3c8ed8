"""Replica fetchers: how a follower copies its leader's log (Kafka's ReplicaFetcherThread).

``ReplicaFetcherManager`` owns the fetchers of one broker: num.replica.fetchers per source
broker, a partition going to fetcher ``hash(topic, partition) % num.replica.fetchers`` of
its leader (Kafka's getFetcherId). Each ``ReplicaFetcher`` is one asyncio task with one
connection to its leader, looping over:

1. truncation, for partitions just handed to it (a new leader or leader epoch): an
   OffsetForLeaderEpoch request names the follower's latest epoch; the leader answers with
   the largest epoch <= it and where that epoch ends on the leader; the follower truncates
   to min(that end, its own end of that epoch, its log end offset) -- and asks again with
   an older epoch when the leader's epoch is one the follower does not have (Kafka's
   getOffsetTruncationState). Never blindly to the high watermark: only a follower with no
   leader epochs at all (old message formats) falls back to it, as Kafka does;
2. a Fetch with this broker's replica id from each partition's log end offset (waiting up
   to replica.fetch.wait.max.ms for replica.fetch.min.bytes): the batches are appended as
   they are (offsets and leader epochs kept, the epoch cache following the batches), the
   follower's high watermark becomes min(the leader's, its log end offset), and its log
   start offset follows the leader's.

Errors: OFFSET_OUT_OF_RANGE truncates to the leader's log end offset when the follower is
past it, else starts over empty at the leader's log start offset; FENCED_LEADER_EPOCH
drops the partition until the next LeaderAndIsr; NOT_LEADER_OR_FOLLOWER,
UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION and connection failures back off
replica.fetch.backoff.ms and retry.

Replication throttle (klog/daemon/replication_quota.py, Kafka's shouldFollowerThrottle):
with the follower quota exceeded, a partition it throttles is left out of fetches unless
it is in sync (its lag behind the leader's high watermark was 0 at the last fetch); when
nothing else can be fetched the fetcher sleeps until the rate is back under the bound (at
most replica.fetch.backoff.ms). The bytes appended for throttled partitions are recorded.
Nothing is looked up while no topic is throttled (``quota.throttled`` is empty).

Everything runs on the broker's event loop: appends and truncations go through the
ReplicaManager like the produce path's. The connection speaks the wire protocol with
klog.protocol and reads its frames with klog.client.frames.FrameReader, the reader of
every client connection (a fetch response is received straight into its own buffer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric

from klog.client.frames import FrameReader
from klog.client.security import ClientSecurity, SaslAuthenticationError
from klog.daemon.replication_quota import ReplicationQuotaManager
from klog.daemon.tasks import stop_task
from klog.protocol import apis, entities, framing
from klog.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from klog.daemon.config.broker import BrokerConfig
    from klog.daemon.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

FETCH = 1
OFFSET_FOR_LEADER_EPOCH = 23
# Pinned, not negotiated: the newest Fetch that names topics. v13+ name them by id, and a
# follower learns ids only from LeaderAndIsr, which may come after it starts fetching (and
# a ZooKeeper-era topic may have none): names always work, and every klog broker serves
# v12. A follower's identity is its replica id here (v15+ would carry it in ReplicaState;
# the leader reads either, see protocol/fetch.py request_replica_id).
FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
MAX_RESPONSE_BYTES = 1 << 30


#: SaslHandshake v1 and SaslAuthenticate v0-2 (a fetcher sends no ApiVersions first).
_SASL_VERSIONS = {17: (0, 1), 36: (0, 2)}


class FetcherConnectionError(Exception):
    """The connection to the leader failed or answered nonsense."""


class LeaderConnection:
    """One connection to a leader: one request at a time, strictly in order."""

    def __init__(self, host: str, port: int, client_id: str, timeout_ms: int,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        #: The inter-broker listener's TLS and SASL (None: PLAINTEXT).
        self.security = security
        self.client_id = client_id
        self.timeout = timeout_ms / 1000
        self._protocol: FrameReader | None = None
        self._correlation_id = 0

    async def request(self, api_key: int, version: int, values: dict[str, Any],
                      extra_timeout_ms: int = 0) -> Any:
        try:
            return await asyncio.wait_for(self._request(api_key, version, values),
                                          self.timeout + extra_timeout_ms / 1000)
        except (OSError, TimeoutError, KafkaError, ValueError, SaslAuthenticationError) as exc:
            self.close()
            raise FetcherConnectionError(
                f"{apis.spec_for(api_key).name} to {self.host}:{self.port} failed: "
                f"{exc or type(exc).__name__}") from None

    async def _request(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        protocol = self._protocol
        if protocol is None or protocol.transport is None or protocol.transport.is_closing():
            protocol = await self._connect()
        return await self._exchange(protocol, api_key, version, values)

    async def _connect(self) -> FrameReader:
        security = self.security
        tls: dict[str, Any] = {}
        if security is not None and security.ssl_context is not None:
            tls = {"ssl": security.ssl_context,
                   "server_hostname": self.host if security.check_hostname else ""}
        _transport, protocol = await asyncio.get_running_loop().create_connection(
            lambda: FrameReader(MAX_RESPONSE_BYTES), self.host, self.port, **tls)
        if security is not None and security.uses_sasl:
            async def request(api_key: int, version: int, values: Mapping[str, Any]) -> Any:
                return await self._exchange(protocol, api_key, version, dict(values))

            try:
                # Every broker that has an inter-broker SASL listener speaks these versions.
                await security.authenticate(request, _SASL_VERSIONS)
            except BaseException:
                if protocol.transport is not None:
                    protocol.transport.close()
                raise
        self._protocol = protocol
        return protocol

    async def _exchange(self, protocol: FrameReader, api_key: int, version: int,
                        values: dict[str, Any]) -> Any:
        assert protocol.transport is not None
        entity = entities.build(apis.spec_for(api_key).request_entity(version), values)
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        cid = self._correlation_id
        protocol.transport.write(framing.encode_request(api_key, version, cid, self.client_id,
                                                        apis.encode_request(entity)))
        frame = await protocol.next_frame()
        got, offset = framing.parse_response_header(
            frame, apis.response_header_version(api_key, version))
        if got != cid:
            raise ValueError(f"correlation id {got} answers no request (expected {cid})")
        return apis.decode_response(api_key, version, memoryview(frame)[offset:])

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None


@dataclass(slots=True)
class PartitionFetchState:
    leader_epoch: int
    truncating: bool = True
    delayed_until: float = 0.0  # loop time before which the partition is not fetched
    lag: int | None = None  # leader's high watermark - our log end, after the last fetch

    @property
    def in_sync(self) -> bool:
        # Kafka's PartitionFetchState.isReplicaInSync: a known lag of 0.
        return self.lag is not None and self.lag <= 0


class ReplicaFetcher:
    """Fetches the partitions one leader leads for this broker (one task, one socket)."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, fetcher_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: LeaderConnection | None = None
        self._endpoint: tuple[str, int] | None = None

    @property
    def name(self) -> str:
        return (f"ReplicaFetcher-{self.fetcher_id} of broker {self.manager.broker_id} "
                f"from leader {self.leader_id}")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = PartitionFetchState(leader_epoch)
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def stop(self) -> None:
        if self._task is not None:
            await stop_task(self._task, what=self.name)
        if self._conn is not None:
            self._conn.close()

    # -- the loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = self.manager.backoff_ms / 1000
        while True:
            if not self.partitions:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                conn = await self._connection()
                if any(s.truncating for s in self.partitions.values()):
                    await self._truncate(conn)
                ready = self._fetchable()
                if ready:
                    await self._fetch(conn, ready)
                else:
                    await self._sleep_until_fetchable()
            except asyncio.CancelledError:
                raise
            except FetcherConnectionError as exc:
                log.warning("%s: %s; retrying in %d ms", self.name, exc,
                            self.manager.backoff_ms)
                self._conn = None
                await asyncio.sleep(backoff)
            except Exception:
                log.exception("%s failed; retrying", self.name)
                await asyncio.sleep(backoff)

    async def _connection(self) -> LeaderConnection:
        endpoint = await self.manager.endpoint_for(self.leader_id)
        if endpoint is None:
            raise FetcherConnectionError(f"no endpoint known for broker {self.leader_id}")
        if self._conn is None or endpoint != self._endpoint:
            if self._conn is not None:
                self._conn.close()
            self._endpoint = endpoint
            self._conn = LeaderConnection(
                endpoint[0], endpoint[1], f"broker-{self.manager.broker_id}-fetcher-"
                f"{self.fetcher_id}", self.manager.socket_timeout_ms, self.manager.security)
        return self._conn

    def _fetchable(self) -> list[TopicPartition]:
        now = asyncio.get_running_loop().time()
        ready = [tp for tp, s in self.partitions.items()
                 if not s.truncating and s.delayed_until <= now]
        quota = self.manager.quota
        if ready and quota is not None and quota.throttled:
            ready = self._unthrottled(ready, quota)
        return ready

    def _unthrottled(self, ready: list[TopicPartition], quota: ReplicationQuotaManager
                     ) -> list[TopicPartition]:
        exceeded: bool | None = None
        out = []
        for tp in ready:
            if quota.is_throttled(*tp) and not self.partitions[tp].in_sync:
                if exceeded is None:
                    exceeded = quota.is_quota_exceeded()
                if exceeded:
                    continue
            out.append(tp)
        return out

    async def _sleep_until_fetchable(self) -> None:
        now = asyncio.get_running_loop().time()
        waits = [s.delayed_until for s in self.partitions.values() if not s.truncating]
        if not waits:
            return
        if min(waits) <= now:
            # Ready but held back by the follower quota: until the rate is under its bound.
            quota = self.manager.quota
            hold = quota.throttle_time() if quota is not None else 0.0
            waits = [w if w > now else now + min(max(hold, 0.005),
                                                 self.manager.backoff_ms / 1000)
                     for w in waits]
        delay = max(min(waits) - now, 0.001)
        self._wakeup.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), delay)

    def _delay(self, tp: TopicPartition) -> None:
        state = self.partitions.get(tp)
        if state is not None:
            state.delayed_until = (asyncio.get_running_loop().time()
                                   + self.manager.backoff_ms / 1000)

    # -- truncation -------------------------------------------------------------------------

    async def _truncate(self, conn: LeaderConnection) -> None:
        rm = self.manager.replica_manager
        asks: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (current epoch, asked epoch)
        for tp, state in list(self.partitions.items()):
            if not state.truncating:
                continue
            p = rm.get_partition(*tp)
            if p is None or p.is_leader:
                self.partitions.pop(tp, None)
                continue
            latest = p.log.leader_epoch_cache.latest_epoch
            if latest is None:
                # No epochs (an empty log, or one written before leader epochs existed):
                # Kafka's fallback is the high watermark.
                rm.truncate_to(tp, p.high_watermark)
                state.truncating = False
                continue
            asks[tp] = (state.leader_epoch, latest)
        # A partition re-added (new LeaderAndIsr) while the request is in flight has a new
        # fetch state: the answer to the old one must not touch it.
        asked = {tp: self.partitions[tp] for tp in asks}
        if not asks:
            return
        topics: dict[str, list[dict[str, int]]] = {}
        for (topic, partition), (current, epoch) in asks.items():
            topics.setdefault(topic, []).append(
                {"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch})
        response = await conn.request(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.manager.broker_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        })
        for topic in response.topics:
            for r in topic.partitions:
                tp = (str(topic.topic), int(r.partition))
                if tp not in asks or self.partitions.get(tp) is not asked[tp]:
                    continue
                self._on_epoch_end_offset(tp, int(r.error_code), int(r.leader_epoch),
                                          int(r.end_offset))

    def _on_epoch_end_offset(self, tp: TopicPartition, error: int, leader_epoch: int,
                             end_offset: int) -> None:
        rm = self.manager.replica_manager
        state = self.partitions[tp]
        if error:
            self._on_partition_error(tp, error, "OffsetForLeaderEpoch")
            return
        p = rm.get_partition(*tp)
        if p is None or p.is_leader:
            self.partitions.pop(tp, None)
            return
        log_end = p.log_end_offset
        if end_offset == UNDEFINED_EPOCH_OFFSET:
            # The leader knows no epoch <= ours: keep what we have (Kafka truncates to the
            # initial fetch offset, which is the log end offset).
            target, done = log_end, True
        elif leader_epoch == UNDEFINED_EPOCH:
            target, done = min(end_offset, log_end), True
        else:
            cache = p.log.leader_epoch_cache
            follower_epoch, follower_end = cache.end_offset_for(leader_epoch, log_end)
            if follower_end == UNDEFINED_EPOCH_OFFSET:
                target, done = min(end_offset, log_end), True
            elif follower_epoch != leader_epoch:
                # We never had the leader's epoch: cut back to the end of our last epoch
                # before it and ask again about that one.
                target, done = min(follower_end, log_end), False
            else:
                target, done = min(end_offset, follower_end, log_end), True
        if target < log_end:
            log.info("%s: truncating %s-%d to %d (leader epoch %d ends at %d on leader %d)",
                     self.name, tp[0], tp[1], target, leader_epoch, end_offset, self.leader_id)
        latest_before = p.log.leader_epoch_cache.latest_epoch
        rm.truncate_to(tp, target)
        latest_after = p.log.leader_epoch_cache.latest_epoch
        if done or latest_after is None or latest_before is None or latest_after >= latest_before:
            # Done, or nothing older left to ask about (each round must go back an epoch).
            state.truncating = False

    # -- fetching ---------------------------------------------------------------------------

    async def _fetch(self, conn: LeaderConnection, tps: list[TopicPartition]) -> None:
        rm = self.manager.replica_manager
        manager = self.manager
        topics: dict[str, list[dict[str, int]]] = {}
        offsets: dict[TopicPartition, int] = {}
        # The fetch state each partition was fetched with (see _truncate's ``asked``).
        sent: dict[TopicPartition, PartitionFetchState] = {}
        for tp in tps:
            p = rm.get_partition(*tp)
            if p is None or p.is_leader:
                self.partitions.pop(tp, None)
                continue
            offsets[tp] = p.log_end_offset
            sent[tp] = self.partitions[tp]
            topics.setdefault(tp[0], []).append({
                "partition": tp[1],
                "current_leader_epoch": self.partitions[tp].leader_epoch,
                "fetch_offset": p.log_end_offset,
                "last_fetched_epoch": -1,
                "log_start_offset": p.log_start_offset,
                "partition_max_bytes": manager.fetch_max_bytes,
            })
        if not offsets:
            return
        response = await conn.request(FETCH, FETCH_VERSION, {
            "replica_id": manager.broker_id,
            "max_wait": manager.fetch_wait_max_ms,
            "min_bytes": manager.fetch_min_bytes,
            "max_bytes": manager.fetch_response_max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }, extra_timeout_ms=manager.fetch_wait_max_ms)
        if int(response.error_code):
            raise FetcherConnectionError(f"fetch answered {ErrorCode(int(response.error_code))!r}")
        quota = manager.quota
        for topic in response.responses:
            for pd in topic.partitions:
                tp = (str(topic.topic), int(pd.partition_index))
                state = self.partitions.get(tp)
                if state is None or tp not in offsets or state is not sent[tp]:
                    continue  # removed or re-added while the fetch was in flight
                p = rm.get_partition(*tp)
                if p is None or p.is_leader or p.log_end_offset != offsets[tp]:
                    continue  # role or log changed meanwhile: the next fetch starts afresh
                error = int(pd.error_code)
                if error == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._on_out_of_range(tp, int(pd.log_start_offset), int(pd.high_watermark))
                    continue
                if error:
                    self._on_partition_error(tp, error, "Fetch")
                    continue
                try:
                    rm.append_as_follower(tp, pd.records, int(pd.high_watermark),
                                          int(pd.log_start_offset))
                except KafkaError as exc:
                    log.error("%s: appending to %s-%d at %d failed: %s", self.name, tp[0],
                              tp[1], offsets[tp], exc)
                    self._delay(tp)
                    continue
                state.lag = max(0, int(pd.high_watermark) - p.log_end_offset)
                if quota is not None and quota.throttled and quota.is_throttled(*tp):
                    quota.record(len(pd.records) if pd.records else 0)

    def _on_out_of_range(self, tp: TopicPartition, leader_start: int, leader_hw: int) -> None:
        # Kafka's handleOutOfRangeError: a follower past the leader's end truncates to it
        # (asked for by OffsetForLeaderEpoch first); one behind the leader's start starts
        # over there.
        rm = self.manager.replica_manager
        p = rm.get_partition(*tp)
        if p is None:
            return
        if p.log_end_offset < leader_start:
            rm.truncate_fully_and_start_at(tp, leader_start)
        else:
            self.partitions[tp].truncating = True

    def _on_partition_error(self, tp: TopicPartition, error: int, what: str) -> None:
        name = ErrorCode(error).name if error in ErrorCode._value2member_map_ else str(error)
        if error == ErrorCode.FENCED_LEADER_EPOCH:
            # Our epoch is older than the leader's: a LeaderAndIsr is on its way.
            log.info("%s: %s of %s-%d fenced (epoch %d); waiting for LeaderAndIsr", self.name,
                     what, tp[0], tp[1], self.partitions[tp].leader_epoch)
            self.partitions.pop(tp, None)
            return
        log.info("%s: %s of %s-%d answered %s; retrying", self.name, what, tp[0], tp[1], name)
        self._delay(tp)


EndpointLookup = Callable[[int], Awaitable[tuple[str, int] | None]]  # broker id -> (host, port)


class ReplicaFetcherManager:
    """The fetchers of one broker (Kafka's ReplicaFetcherManager)."""

    def __init__(self, broker_id: int, replica_manager: ReplicaManager,
                 endpoint_for: EndpointLookup, *,
                 num_fetchers: int = 1, fetch_max_bytes: int = 1_048_576,
                 fetch_response_max_bytes: int = 10_485_760, fetch_wait_max_ms: int = 500,
                 fetch_min_bytes: int = 1, backoff_ms: int = 1000,
                 socket_timeout_ms: int = 30_000,
                 quota: ReplicationQuotaManager | None = None,
                 security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        #: How to reach leaders on the inter-broker listener (TLS, SASL); None: PLAINTEXT.
        self.security = security
        self.replica_manager = replica_manager
        self.endpoint_for = endpoint_for
        self.num_fetchers = max(1, num_fetchers)
        self.fetch_max_bytes = fetch_max_bytes
        self.fetch_response_max_bytes = fetch_response_max_bytes
        self.fetch_wait_max_ms = fetch_wait_max_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.backoff_ms = backoff_ms
        self.socket_timeout_ms = socket_timeout_ms
        self.quota = quota  # the follower replication quota (None: never throttled)
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self._where: dict[TopicPartition, tuple[int, int]] = {}
        self._stopped: list[ReplicaFetcher] = []

    @classmethod
    def from_config(cls, broker_id: int, replica_manager: ReplicaManager,
                    endpoint_for: EndpointLookup, config: BrokerConfig,
                    quota: ReplicationQuotaManager | None = None,
                    security: ClientSecurity | None = None
                    ) -> ReplicaFetcherManager:
        get = config.get
        return cls(broker_id, replica_manager, endpoint_for,
                   num_fetchers=get("num.replica.fetchers"),
                   fetch_max_bytes=get("replica.fetch.max.bytes"),
                   fetch_response_max_bytes=get("replica.fetch.response.max.bytes"),
                   fetch_wait_max_ms=get("replica.fetch.wait.max.ms"),
                   fetch_min_bytes=get("replica.fetch.min.bytes"),
                   backoff_ms=get("replica.fetch.backoff.ms"),
                   socket_timeout_ms=get("replica.socket.timeout.ms"),
                   quota=quota, security=security)

    def fetcher_id(self, tp: TopicPartition) -> int:
        # Kafka: Utils.abs(31 * topic.hashCode + partition) % numFetchers; any stable
        # spread will do here (Python's str hash is salted per process, so not that).
        h = 0
        for ch in tp[0].encode():
            h = (31 * h + ch) & 0xFFFFFFFF
        return (31 * h + tp[1]) % self.num_fetchers

    def add_partitions(self, partitions: dict[TopicPartition, tuple[int, int]]) -> None:
        """Start fetching each partition from (leader id, leader epoch), truncating first."""
        for tp, (leader_id, leader_epoch) in partitions.items():
            self.remove_partitions([tp])
            key = (leader_id, self.fetcher_id(tp))
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                fetcher = self.fetchers[key] = ReplicaFetcher(self, leader_id, key[1])
                fetcher.start()
            fetcher.add(tp, leader_epoch)
            self._where[tp] = key
            log.info("broker %d follows leader %d (epoch %d) for %s-%d", self.broker_id,
                     leader_id, leader_epoch, tp[0], tp[1])

    def remove_partitions(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            key = self._where.pop(tp, None)
            if key is None:
                continue
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                continue
            fetcher.remove(tp)
            if not fetcher.partitions:
                # Idle fetchers go (Kafka's shutdownIdleFetcherThreads).
                del self.fetchers[key]
                self._stopped.append(fetcher)
                asyncio.get_running_loop().create_task(fetcher.stop())

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        key = self._where.get(tp)
        fetcher = self.fetchers.get(key) if key is not None else None
        return fetcher.partitions.get(tp) if fetcher is not None else None

    async def shutdown(self) -> None:
        fetchers = list(self.fetchers.values()) + self._stopped
        self.fetchers.clear()
        self._where.clear()
        self._stopped = []
        for fetcher in fetchers:
            await fetcher.stop()


class FetcherLagCollector:
    """kafka.server:type=FetcherLagMetrics,name=ConsumerLag: per followed partition, the
    leader's high watermark minus this replica's log end after its last fetch."""

    def __init__(self, fetchers: ReplicaFetcherManager) -> None:
        self.fetchers = fetchers

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kafka_server_fetcherlagmetrics_consumerlag",
            "kafka.server:type=FetcherLagMetrics,name=ConsumerLag",
            labels=["clientId", "topic", "partition"])
        for fetcher in list(self.fetchers.fetchers.values()):
            # Kafka's replica fetcher thread name is its client id.
            client_id = f"ReplicaFetcherThread-{fetcher.fetcher_id}-{fetcher.leader_id}"
            for (topic, partition), state in fetcher.partitions.items():
                if state.lag is not None:
                    family.add_metric([client_id, topic, str(partition)], state.lag)
        yield family
