"""The client's network layer: connections to brokers, version negotiation, metadata.

Owns every socket of a client. ``BrokerConnection`` is one TCP connection (asyncio streams):
it opens with ApiVersions, numbers requests with correlation ids, pipelines up to
``max_in_flight`` of them and matches responses strictly in order (a broker answers a
connection's requests in the order it received them, so a mismatched correlation id means
the stream is broken and the connection is closed). A request that gets no answer within
its timeout closes the connection, as Kafka's NetworkClient does: whatever is in flight
behind it can no longer be trusted either.

``KafkaClient`` keeps one connection per broker node (bootstrap servers get negative ids
until metadata names them), reconnects with exponential backoff and jitter, keeps the
cluster metadata (refreshed every ``metadata_max_age_ms``, on request, and when a caller
asks about something it does not know), and picks the highest version of each API both
sides speak. Everything runs on one event loop; nothing here is thread-safe.

``Any`` below is a Kafka message: requests and responses are kio entities whose classes are
chosen by api key and version at runtime (protocol/apis.py says why), and request values
are the nested mappings ``build_request`` turns into one, each field its own type.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import logging
import random
import struct
import time
import typing
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from klog import __version__
from klog.client.errors import (
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    error_name,
)
from klog.client.frames import ConnectionClosed, FrameReader
from klog.client.security import ClientSecurity, SaslAuthenticationError
from klog.protocol import apis, entities, framing
from klog.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

API_VERSIONS = 18
METADATA = 3

#: Largest response frame accepted (a fetch answers at most fetch.max.bytes, 50 MiB by
#: default, per request; this leaves room for large max.partition.fetch.bytes settings).
MAX_RESPONSE_BYTES = 1 << 30

_INT16 = struct.Struct(">h")
_SIZE = struct.Struct(">i")


# --- metadata -----------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerMeta:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionMeta:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error_code: int
    offline_replicas: tuple[int, ...] = ()


@dataclass
class ClusterMetadata:
    """The client's view of the cluster, as the last Metadata responses described it."""

    brokers: dict[int, BrokerMeta] = field(default_factory=dict)
    topics: dict[str, dict[int, PartitionMeta]] = field(default_factory=dict)
    topic_errors: dict[str, int] = field(default_factory=dict)
    internal_topics: set[str] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None

    def leader_for(self, topic: str, partition: int) -> int | None:
        """The leader's node id, or None when unknown or leaderless (-1), or when the
        leader is not among the brokers (a partial update left a leader the latest
        response no longer lists: as Kafka's client, unknown until metadata names it)."""
        meta = self.topics.get(topic, {}).get(partition)
        if meta is None or meta.leader < 0 or meta.leader not in self.brokers:
            return None
        return meta.leader

    def partitions_for(self, topic: str) -> list[int] | None:
        """The topic's partition ids, sorted; None when the topic is unknown."""
        parts = self.topics.get(topic)
        return None if parts is None else sorted(parts)

    def update(self, response: Any, requested: Sequence[str] | None) -> None:
        """Fold a MetadataResponse in: all topics replaced when ``requested`` is None,
        else only the requested ones (a topic missing from the reply is forgotten)."""
        self.brokers = {
            int(b.node_id): BrokerMeta(int(b.node_id), b.host, int(b.port),
                                       getattr(b, "rack", None))
            for b in response.brokers
        }
        self.controller_id = int(getattr(response, "controller_id", -1))
        self.cluster_id = getattr(response, "cluster_id", None)
        if requested is None:
            self.topics, self.topic_errors = {}, {}
            self.internal_topics, self.topic_ids = set(), {}
        else:
            for name in requested:
                self.topics.pop(name, None)
                self.topic_errors.pop(name, None)
                self.internal_topics.discard(name)
        for topic in response.topics:
            name = topic.name
            if name is None:
                continue
            code = int(topic.error_code)
            if code:
                self.topic_errors[name] = code
            if getattr(topic, "is_internal", False):
                self.internal_topics.add(name)
            if getattr(topic, "topic_id", None) is not None:
                self.topic_ids[name] = topic.topic_id
            if code and not topic.partitions:
                continue
            self.topics[name] = {
                int(p.partition_index): PartitionMeta(
                    topic=name,
                    partition=int(p.partition_index),
                    leader=int(p.leader_id),
                    leader_epoch=int(getattr(p, "leader_epoch", -1)),
                    replicas=tuple(int(r) for r in p.replica_nodes),
                    isr=tuple(int(r) for r in p.isr_nodes),
                    error_code=int(p.error_code),
                    offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                )
                for p in topic.partitions
            }


# --- requests from plain values ------------------------------------------------------------


@functools.cache
def _implicit_defaults(entity_type: type) -> Mapping[str, Any]:
    """Values for fields kio declares without a default although Kafka's schema has one
    that is false or null (``include_topic_authorized_operations``, nullable strings...)."""
    hints = typing.get_type_hints(entity_type)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(entity_type):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        hint = hints[f.name]
        if hint is bool:
            out[f.name] = False
        elif type(None) in typing.get_args(hint):
            out[f.name] = None
    return MappingProxyType(out)


def build_request(entity_type: type, values: Mapping[str, Any]) -> Any:
    """``entities.build`` for requests: nested mappings allowed at any depth; fields of
    other versions ignored; booleans without a value are false, nullables null."""
    return entities.build(entity_type, _with_defaults(entity_type, values))


def _with_defaults(entity_type: type, values: Mapping[str, Any]) -> Mapping[str, Any]:
    defaults = _implicit_defaults(entity_type)
    missing = {k: v for k, v in defaults.items() if k not in values}
    merged = {**missing, **values} if missing else dict(values)
    for name, nested in _nested_types(entity_type).items():
        value = merged.get(name)
        if isinstance(value, Mapping):
            merged[name] = _with_defaults(nested, value)
        elif isinstance(value, (list, tuple)):
            merged[name] = [_with_defaults(nested, v) if isinstance(v, Mapping) else v
                            for v in value]
    return merged


@functools.cache
def _nested_types(entity_type: type) -> Mapping[str, type]:
    hints = typing.get_type_hints(entity_type)
    out = {}
    for f in dataclasses.fields(entity_type):
        stack = [hints[f.name]]
        while stack:
            hint = stack.pop()
            if dataclasses.is_dataclass(hint) and isinstance(hint, type):
                out[f.name] = hint
                break
            stack.extend(typing.get_args(hint))
    return MappingProxyType(out)


# --- one connection -----------------------------------------------------------------------


Decoder = typing.Callable[[int, memoryview], Any]


@dataclass(slots=True)
class _InFlight:
    correlation_id: int
    api_key: int
    api_version: int
    future: asyncio.Future[Any]
    #: body -> response; None: the generic kio decoder of the api and version.
    decode: Decoder | None = None
    timer: asyncio.TimerHandle | None = None


class BrokerConnection:
    """One TCP connection to one broker. Owned by a KafkaClient, used on one event loop."""

    def __init__(self, node_id: int, host: str, port: int, *, client_id: str | None = "klog",
                 max_in_flight: int = 5, max_response_bytes: int = MAX_RESPONSE_BYTES,
                 security: ClientSecurity | None = None) -> None:
        self.node_id = node_id
        #: TLS and SASL (klog/client/security.py); None: PLAINTEXT.
        self.security = security
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_in_flight = max(1, max_in_flight)
        self.max_response_bytes = max_response_bytes
        #: api_key -> (min, max) the broker advertised.
        self.api_versions: dict[int, tuple[int, int]] = {}
        self.last_used = time.monotonic()
        self._transport: asyncio.Transport | None = None
        self._protocol: FrameReader | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: collections.deque[_InFlight] = collections.deque()
        # In-flight slots: a counter and a queue of waiters (an asyncio.Semaphore would
        # make every request await, even with slots free).
        self._free_slots = self.max_in_flight
        self._slot_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._next_correlation_id = 0
        self._closed = False
        self._close_reason: KafkaClientError | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._closed

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def connect(self, timeout: float) -> None:
        """Open the socket (TLS when the security settings say so), negotiate versions
        (ApiVersions, newest first, then the version the broker names in its
        UNSUPPORTED_VERSION answer, else v0), then authenticate (SASL)."""
        security = self.security
        tls: dict[str, Any] = {}
        if security is not None and security.ssl_context is not None:
            tls = {"ssl": security.ssl_context,
                   "server_hostname": self.host if security.check_hostname else ""}
        try:
            max_response_bytes = self.max_response_bytes
            self._transport, self._protocol = await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(
                    lambda: FrameReader(max_response_bytes), self.host, self.port, **tls),
                timeout)
        except TimeoutError:
            self._closed = True
            raise KafkaTimeoutError(
                f"connecting to {self.host}:{self.port} timed out") from None
        except OSError as exc:
            self._closed = True
            raise KafkaConnectionError(
                f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        try:
            await self._negotiate(timeout)
            if security is not None and security.uses_sasl:
                await self._authenticate(security, timeout)
        except BaseException:
            self.close()
            raise

    async def _authenticate(self, security: ClientSecurity, timeout: float) -> None:
        async def request(api_key: int, version: int, values: Mapping[str, Any]) -> Any:
            entity = entities.build(apis.spec_for(api_key).request_entity(version), values)
            return await self.request(api_key, version, entity, timeout=timeout)

        try:
            await security.authenticate(request, self.api_versions)
        except SaslAuthenticationError as exc:
            raise KafkaClientError(
                f"authentication to {self.host}:{self.port} as {security.username} "
                f"({security.mechanism}) failed: {exc}", exc.error_code) from None

    async def _negotiate(self, timeout: float) -> None:
        version = apis.KNOWN[API_VERSIONS][1]
        values = {"client_software_name": "klog", "client_software_version": __version__}
        for _ in range(3):
            entity = entities.build(
                apis.spec_for(API_VERSIONS).request_entity(version), values)
            response = await self.request(API_VERSIONS, version, entity, timeout=timeout)
            code = int(response.error_code)
            if code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
                # The broker answered in v0 and named its own ApiVersions range (KIP-511).
                theirs = {int(k.api_key): int(k.max_version) for k in response.api_keys}
                version = min(theirs.get(API_VERSIONS, 0), version - 1)
                continue
            if code:
                raise KafkaClientError(f"ApiVersions failed: {error_name(code)}", code)
            self.api_versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version))
                for k in response.api_keys
            }
            return
        raise KafkaClientError("ApiVersions negotiation did not converge",
                               ErrorCode.UNSUPPORTED_VERSION)

    async def request(self, api_key: int, api_version: int, entity: Any, *,
                      timeout: float, expect_response: bool = True) -> Any:
        """Send one request and return its decoded response entity (None without one).

        Waits for a free in-flight slot first; the timeout covers the wait and the answer.
        """
        if self._closed:
            raise self._dead()
        body = apis.encode_request(entity)
        deadline = time.monotonic() + timeout
        if not self._take_slot():
            await self._wait_for_slot(timeout)
        future = self.send_nowait(api_key, api_version, (body,), timeout=timeout,
                                  expect_response=expect_response, slot_taken=True)
        if self._transport is not None and self._transport.get_write_buffer_size():
            await self._drain(deadline)
        if future is None:
            return None
        # Cancelling the caller cancels ``future``; its answer is then dropped on arrival.
        return await future

    @property
    def has_free_slot(self) -> bool:
        return self._free_slots > 0 and not self._closed

    def send_nowait(self, api_key: int, api_version: int,
                    body: Sequence[bytes | bytearray | memoryview], *, timeout: float,
                    expect_response: bool = True, decode: Decoder | None = None,
                    slot_taken: bool = False) -> asyncio.Future[Any] | None:
        """Write one request now, without waiting: the per-request path of producers.

        ``body`` is the encoded request body in pieces (written without joining them).
        Takes an in-flight slot, which must be free (``has_free_slot``) unless the caller
        took one already. Returns the future of the response -- ``decode(version, body)``
        of it, or the kio entity without ``decode`` -- or None when no response is
        expected. No answer within ``timeout`` seconds closes the connection, failing
        everything in flight, as Kafka's NetworkClient does.
        """
        if self._closed:
            if slot_taken:
                self._give_slot()
            raise self._dead()
        if not slot_taken and not self._take_slot():
            raise KafkaClientError(f"no free in-flight slot on node {self.node_id}")
        transport = self._transport
        assert transport is not None
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        header = framing.encode_request_header(api_key, api_version, correlation_id,
                                               self.client_id)
        size = len(header) + sum(len(piece) for piece in body)
        self.last_used = time.monotonic()
        if not expect_response:
            transport.writelines((_SIZE.pack(size), header, *body))
            self._give_slot()
            return None
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        entry = _InFlight(correlation_id, api_key, api_version, future, decode)
        entry.timer = loop.call_later(timeout, self._timed_out, entry, timeout)
        # Queued and written without an await between: queue order is wire order.
        self._pending.append(entry)
        transport.writelines((_SIZE.pack(size), header, *body))
        return future

    def _take_slot(self) -> bool:
        if self._free_slots > 0 and not self._slot_waiters:
            self._free_slots -= 1
            return True
        return False

    def _give_slot(self) -> None:
        waiters = self._slot_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the waiter
                return
        self._free_slots += 1

    async def acquire_slot(self, timeout: float) -> None:
        """Take an in-flight slot for a later ``send_nowait(..., slot_taken=True)``,
        waiting up to ``timeout`` seconds for one."""
        if self._closed:
            raise self._dead()
        if not self._take_slot():
            await self._wait_for_slot(timeout)

    async def _wait_for_slot(self, timeout: float) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            raise KafkaTimeoutError(
                f"no free in-flight slot on node {self.node_id} within {timeout:.3f}s"
            ) from None
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give_slot()  # granted just as we were cancelled: pass it on
            raise
        if self._closed:
            self._give_slot()
            raise self._dead()

    def _timed_out(self, entry: _InFlight, timeout: float) -> None:
        if entry.future.done():
            return
        spec = apis.spec_for(entry.api_key)
        self.close(KafkaTimeoutError(
            f"{spec.name} v{entry.api_version} to node {self.node_id} "
            f"({self.host}:{self.port}) got no response within {timeout:.3f}s"))

    async def _drain(self, deadline: float) -> None:
        assert self._protocol is not None
        try:
            await asyncio.wait_for(self._protocol.drain(), max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            error = KafkaTimeoutError(f"writing to node {self.node_id} timed out")
            self.close(error)
            raise error from None
        except (OSError, RuntimeError) as exc:
            failure = KafkaConnectionError(f"connection to node {self.node_id} failed: {exc}")
            self.close(failure)
            raise failure from None

    async def _read_loop(self) -> None:
        assert self._protocol is not None
        protocol = self._protocol
        try:
            while True:
                frame = await protocol.next_frame()
                self.last_used = time.monotonic()
                if not self._pending:
                    raise KafkaConnectionError(
                        f"node {self.node_id} sent a response nobody asked for")
                entry = self._pending.popleft()
                if entry.timer is not None:
                    entry.timer.cancel()
                self._give_slot()
                self._complete(entry, frame)
        except framing.FrameSizeError as exc:
            self.close(KafkaConnectionError(
                f"node {self.node_id} sent a response frame of {exc.size} bytes"))
        except ConnectionClosed:
            self.close(KafkaConnectionError(
                f"node {self.node_id} ({self.host}:{self.port}) closed the connection"))
        except (OSError, ConnectionError) as exc:
            self.close(KafkaConnectionError(f"connection to node {self.node_id} failed: {exc}"))
        except KafkaClientError as exc:
            self.close(exc)
        except asyncio.CancelledError:
            pass

    def _complete(self, entry: _InFlight, frame: bytearray) -> None:
        header_version = apis.response_header_version(entry.api_key, entry.api_version)
        try:
            correlation_id, offset = framing.parse_response_header(frame, header_version)
        except KafkaError as exc:
            raise KafkaConnectionError(f"bad response header from node {self.node_id}: {exc}"
                                       ) from None
        if correlation_id != entry.correlation_id:
            raise KafkaConnectionError(
                f"node {self.node_id} answered correlation id {correlation_id}, "
                f"expected {entry.correlation_id}")
        if entry.future.done():  # the caller gave up (cancelled); the answer is dropped
            return
        body = memoryview(frame)[offset:]
        version = entry.api_version
        if (entry.api_key == API_VERSIONS and version > 0 and len(body) >= 2
                and _INT16.unpack_from(body, 0)[0] == ErrorCode.UNSUPPORTED_VERSION):
            version = 0  # an ApiVersions refusal always comes back in v0
        try:
            if entry.decode is not None:
                response = entry.decode(version, body)
            else:
                response = apis.decode_response(entry.api_key, version, body)
        except KafkaError as exc:
            entry.future.set_exception(KafkaClientError(
                f"cannot decode {apis.spec_for(entry.api_key).name} v{version} response "
                f"from node {self.node_id}: {exc}"))
            return
        entry.future.set_result(response)

    def _dead(self) -> KafkaClientError:
        return self._close_reason or KafkaConnectionError(
            f"connection to node {self.node_id} is closed")

    def close(self, reason: KafkaClientError | None = None) -> None:
        """Close the socket; every request in flight fails with ``reason``."""
        if self._closed:
            return
        self._closed = True
        self._close_reason = reason or KafkaConnectionError(
            f"connection to node {self.node_id} was closed")
        pending, self._pending = self._pending, collections.deque()
        for entry in pending:
            if entry.timer is not None:
                entry.timer.cancel()
            if not entry.future.done():
                entry.future.set_exception(self._close_reason)
                entry.future.exception()  # retrieved here: nobody may be waiting any more
            self._free_slots += 1
        # Wake whoever waits for a slot: they will see the connection closed.
        waiters, self._slot_waiters = self._slot_waiters, collections.deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        if self._transport is not None:
            self._transport.close()
        task = self._read_task
        if task is not None and task is not _current_task():
            task.cancel()


def _current_task() -> asyncio.Task[Any] | None:  # Any: whatever task is running
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


# --- the client ---------------------------------------------------------------------------


def parse_bootstrap(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` or a list of ``host[:port]`` -> [(host, port), ...]."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if "://" in item:  # PLAINTEXT://host:port, as listeners are written
            item = item.split("://", 1)[1]
        if item.startswith("["):  # [::1]:9092
            host, _, rest = item[1:].partition("]")
            port = rest.lstrip(":") or "9092"
        else:
            host, sep, port = item.rpartition(":")
            if not sep:
                host, port = item, "9092"
        try:
            out.append((host, int(port)))
        except ValueError:
            raise KafkaClientError(f"bad bootstrap server {item!r}: port is not a number"
                                   ) from None
    if not out:
        raise KafkaClientError("no bootstrap servers given")
    return out


@dataclass
class _Backoff:
    failures: int = 0
    next_attempt: float = 0.0


class KafkaClient:
    """Connections to a cluster's brokers, the cluster metadata, and request routing."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        client_id: str = "klog",
        request_timeout_ms: int = 30000,
        metadata_max_age_ms: int = 300000,
        reconnect_backoff_ms: int = 50,
        reconnect_backoff_max_ms: int = 1000,
        max_in_flight_requests_per_connection: int = 5,
        connections_max_idle_ms: int = 540000,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap_servers)
        self.security = security
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.max_in_flight = max_in_flight_requests_per_connection
        self.connections_max_idle_ms = connections_max_idle_ms
        self.cluster = ClusterMetadata()
        self._conns: dict[int, BrokerConnection] = {}
        self._api_versions: dict[int, dict[int, tuple[int, int]]] = {}
        self._connect_locks: dict[int, asyncio.Lock] = {}
        self._backoff: dict[int, _Backoff] = {}
        self._metadata_lock: asyncio.Lock | None = None
        self._last_refresh = 0.0
        self._refresh_wanted: asyncio.Event | None = None
        self._housekeeper: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    async def __aenter__(self) -> KafkaClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- life cycle

    async def start(self) -> None:
        """Connect to the first bootstrap server that answers and load all topics'
        metadata; NoBrokersAvailable when none does."""
        if self._started:
            return
        self._metadata_lock = asyncio.Lock()
        self._refresh_wanted = asyncio.Event()
        failures = []
        for index, (host, port) in enumerate(self.bootstrap):
            node_id = -1 - index
            try:
                await self._connection(node_id)
                await self._refresh_from(node_id, None, False)
            except KafkaClientError as exc:
                failures.append(f"{host}:{port}: {exc}")
                self._drop(node_id)
                continue
            break
        else:
            raise NoBrokersAvailable(
                "no broker reachable (" + "; ".join(failures) + ")")
        self._started = True
        self._housekeeper = asyncio.get_running_loop().create_task(self._housekeeping())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._housekeeper is not None:
            self._housekeeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeper
        for conn in list(self._conns.values()):
            conn.close(KafkaConnectionError("client closed"))
        self._conns.clear()
        await asyncio.sleep(0)  # let the read tasks see their cancellation

    # -- versions

    def api_version(self, node_id: int, api_key: int, max_version: int | None = None) -> int:
        """The highest version of ``api_key`` that node ``node_id`` and klog both speak."""
        spec = apis.spec_for(api_key)
        theirs = self._api_versions.get(node_id)
        if theirs is None:  # not connected yet: assume it speaks what the others speak
            theirs = next(iter(self._api_versions.values()), None)
        if theirs is None:
            raise KafkaClientError(f"no API versions known for node {node_id}")
        broker_range = theirs.get(api_key)
        lo, hi = apis.KNOWN[api_key]
        if broker_range is not None:
            lo, hi = max(lo, broker_range[0]), min(hi, broker_range[1])
        if max_version is not None:
            hi = min(hi, max_version)
        if broker_range is None or hi < lo:
            raise KafkaClientError(
                f"node {node_id} and klog share no version of {spec.name}",
                ErrorCode.UNSUPPORTED_VERSION)
        return hi

    # -- requests

    async def send(self, node_id: int | None, api_key: int, values: Mapping[str, Any] | Any,
                   *, version: int | None = None, timeout_ms: int | None = None,
                   expect_response: bool = True) -> Any:
        """Send a request to node ``node_id`` (None: the least loaded broker) and return
        the decoded response entity (None when ``expect_response`` is False).

        ``values`` are plain, version-independent values (fields of other versions are
        ignored) or a ready request entity. ``version`` pins the version; by default the
        highest both sides speak.
        """
        if self._closed:
            raise KafkaClientError("client is closed")
        if node_id is None:
            node_id = self.least_loaded_node()
        conn = await self._connection(node_id)
        if version is None:
            version = self.api_version(node_id, api_key)
        spec = apis.spec_for(api_key)
        entity_type = spec.request_entity(version)
        entity = values if isinstance(values, entity_type) else build_request(
            entity_type, values)
        timeout = (self.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        try:
            return await conn.request(api_key, version, entity, timeout=timeout,
                                      expect_response=expect_response)
        except KafkaConnectionError:
            self.request_metadata_refresh()
            raise

    async def api_versions_of(self, node_id: int) -> dict[int, tuple[int, int]]:
        """The API versions ``node_id`` announced in ApiVersions (connecting first)."""
        await self._connection(node_id)
        return dict(self._api_versions.get(node_id, {}))

    def least_loaded_node(self) -> int:
        """A connected node with the fewest requests in flight, else a known broker not in
        backoff, else a bootstrap server."""
        connected = [c for c in self._conns.values() if c.connected]
        if connected:
            return min(connected, key=lambda c: (c.in_flight, c.node_id < 0)).node_id
        now = time.monotonic()
        candidates = list(self.cluster.brokers)
        random.shuffle(candidates)
        for node_id in candidates:
            if self._backoff.get(node_id, _Backoff()).next_attempt <= now:
                return node_id
        if candidates:
            return min(candidates, key=lambda n: self._backoff.get(n, _Backoff()).next_attempt)
        return -1

    async def leader_for(self, topic: str, partition: int) -> int:
        """The partition leader's node id, refreshing metadata once when it is unknown."""
        leader = self.cluster.leader_for(topic, partition)
        if leader is not None:
            return leader
        await self.refresh_metadata([topic])
        leader = self.cluster.leader_for(topic, partition)
        if leader is not None:
            return leader
        code = self.cluster.topic_errors.get(topic)
        if code:
            raise KafkaClientError(f"{error_name(code)}: topic {topic!r}", code)
        parts = self.cluster.topics.get(topic)
        if parts is None or partition not in parts:
            raise KafkaClientError(
                f"UNKNOWN_TOPIC_OR_PARTITION: {topic}-{partition}",
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        raise KafkaClientError(f"LEADER_NOT_AVAILABLE: {topic}-{partition} has no leader",
                               ErrorCode.LEADER_NOT_AVAILABLE)

    # -- metadata

    def request_metadata_refresh(self) -> None:
        """Ask for a refresh soon (after an error that says the metadata is stale)."""
        if self._refresh_wanted is not None:
            self._refresh_wanted.set()

    async def refresh_metadata(self, topics: Sequence[str] | None = None, *,
                               allow_auto_topic_creation: bool = False) -> ClusterMetadata:
        """Fetch metadata for ``topics`` (None: all topics) from the least loaded broker,
        trying the others when it fails."""
        if self._metadata_lock is None:
            self._metadata_lock = asyncio.Lock()
        async with self._metadata_lock:
            tried: list[str] = []
            order = [self.least_loaded_node()]
            order += [n for n in self.cluster.brokers if n not in order]
            order += [-1 - i for i in range(len(self.bootstrap)) if -1 - i not in order]
            last: KafkaClientError | None = None
            for node_id in order:
                try:
                    await self._refresh_from(node_id, topics, allow_auto_topic_creation)
                    return self.cluster
                except KafkaClientError as exc:
                    last = exc
                    tried.append(f"node {node_id}: {exc}")
            raise NoBrokersAvailable("metadata request failed everywhere ("
                                     + "; ".join(tried) + ")") from last

    async def _refresh_from(self, node_id: int, topics: Sequence[str] | None,
                            allow_auto_topic_creation: bool) -> None:
        conn = await self._connection(node_id)
        version = self.api_version(node_id, METADATA)
        wanted: list[dict[str, Any]] | None
        if topics is None:
            wanted = [] if version == 0 else None  # v0 has no null: an empty list is "all"
        else:
            wanted = [{"name": t, "topic_id": None} for t in topics]
        entity = build_request(apis.spec_for(METADATA).request_entity(version), {
            "topics": wanted,
            "allow_auto_topic_creation": allow_auto_topic_creation,
        })
        response = await conn.request(METADATA, version, entity,
                                      timeout=self.request_timeout_ms / 1000)
        self.cluster.update(response, None if topics is None else list(topics))
        if topics is None:
            self._last_refresh = time.monotonic()
        self._forget_moved_brokers()

    def _forget_moved_brokers(self) -> None:
        by_address = {(b.host, b.port): b.node_id for b in self.cluster.brokers.values()}
        for node_id, conn in list(self._conns.items()):
            # A bootstrap connection becomes the connection of the node it reached, so a
            # broker never has two.
            adopt = by_address.get((conn.host, conn.port))
            if node_id < 0 and adopt is not None and adopt not in self._conns:
                del self._conns[node_id]
                conn.node_id = adopt
                self._conns[adopt] = conn
                self._api_versions[adopt] = conn.api_versions
        for node_id, conn in list(self._conns.items()):
            meta = self.cluster.brokers.get(node_id)
            moved = meta is None or (meta.host, meta.port) != (conn.host, conn.port)
            # Gone from the cluster, or re-registered at another address.
            if node_id >= 0 and moved and conn.in_flight == 0:
                self._drop(node_id)

    async def _housekeeping(self) -> None:
        """Refresh metadata when it is older than metadata_max_age_ms or wanted sooner;
        close connections idle beyond connections_max_idle_ms."""
        assert self._refresh_wanted is not None
        while True:
            age_s = self.metadata_max_age_ms / 1000
            wait = max(0.0, self._last_refresh + age_s - time.monotonic())
            with contextlib.suppress(TimeoutError):
                # Wake often enough to close idle connections near their deadline.
                sweep = max(0.05, min(10.0, self.connections_max_idle_ms / 2000))
                await asyncio.wait_for(self._refresh_wanted.wait(), min(wait, sweep))
            wanted = self._refresh_wanted.is_set()
            self._refresh_wanted.clear()
            if wanted or time.monotonic() >= self._last_refresh + age_s:
                try:
                    await self.refresh_metadata(None)
                except KafkaClientError as exc:
                    log.debug("metadata refresh failed: %s", exc)
                    await asyncio.sleep(self.reconnect_backoff_ms / 1000)
            self._close_idle()

    def _close_idle(self) -> None:
        limit = self.connections_max_idle_ms / 1000
        now = time.monotonic()
        for node_id, conn in list(self._conns.items()):
            if conn.in_flight == 0 and now - conn.last_used > limit:
                self._drop(node_id)

    # -- connections

    def _address(self, node_id: int) -> tuple[str, int]:
        if node_id >= 0:
            meta = self.cluster.brokers.get(node_id)
            if meta is None:
                raise KafkaClientError(f"broker {node_id} is not in the cluster metadata",
                                       ErrorCode.BROKER_NOT_AVAILABLE)
            return meta.host, meta.port
        index = -1 - node_id
        if index >= len(self.bootstrap):
            raise KafkaClientError(f"no bootstrap server {node_id}")
        return self.bootstrap[index]

    def _drop(self, node_id: int) -> None:
        conn = self._conns.pop(node_id, None)
        if conn is not None:
            conn.close()

    def connection(self, node_id: int) -> BrokerConnection | None:
        """The live connection to ``node_id``, if any (for tests and diagnostics)."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and conn.connected else None

    async def connect_to(self, node_id: int) -> BrokerConnection:
        """Node ``node_id``'s open connection, connecting first when needed."""
        return await self._connection(node_id)

    async def _connection(self, node_id: int) -> BrokerConnection:
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        lock = self._connect_locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node_id)
            if conn is not None and conn.connected:
                return conn
            if self._closed:
                raise KafkaClientError("client is closed")
            host, port = self._address(node_id)
            backoff = self._backoff.setdefault(node_id, _Backoff())
            delay = backoff.next_attempt - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            conn = BrokerConnection(node_id, host, port, client_id=self.client_id,
                                    max_in_flight=self.max_in_flight, security=self.security)
            try:
                await conn.connect(self.request_timeout_ms / 1000)
            except KafkaClientError:
                backoff.failures += 1
                backoff.next_attempt = time.monotonic() + self._backoff_delay(backoff.failures)
                raise
            backoff.failures = 0
            backoff.next_attempt = 0.0
            self._conns[node_id] = conn
            self._api_versions[node_id] = conn.api_versions
            return conn

    def _backoff_delay(self, failures: int) -> float:
        # Kafka's ExponentialBackoff: base * 2^(failures-1), capped, with 20% jitter.
        base: float = self.reconnect_backoff_ms * (2 ** min(failures - 1, 30))
        capped = min(base, self.reconnect_backoff_max_ms)
        return capped * random.uniform(0.8, 1.2) / 1000
