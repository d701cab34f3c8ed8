"""The broker's listeners: the only module that owns listening sockets.

One accept loop per configured listener (``listeners``), each handing accepted
sockets to a ``Connection``; socket.listen.backlog.size is each listening socket's backlog,
socket.send.buffer.bytes and socket.receive.buffer.bytes the accepted sockets' buffers
when set (-1: the system's; unset, the send buffer is the system's and the receive buffer
1 MiB, klog's own default). Also owns the broker-wide request accounting behind
queued.max.requests (connections pause reading while the broker is at the limit) and the
idle sweep behind connections.max.idle.ms.

Binding, as Kafka binds: a listener with an empty host (``PLAINTEXT://:9092``) or ``::``
listens on every interface, IPv4 and IPv6, through one dual-stack socket (so one port,
even when the port is 0); ``0.0.0.0`` listens on every IPv4 interface only; a name is
resolved and bound at its first address. Every security protocol is served: each
listener's ``ListenerSecurity`` (klog/daemon/security/listener.py: its TLS context, SASL
settings, certificate principal mapping) is built before anything is bound, and a
setting klog cannot honour stops the start with one line (``ListenerError``). TLS
listeners hand accepted sockets to asyncio's TLS transport (the handshake happens before
the connection is served, within connections.max.idle.ms and at most
TLS_HANDSHAKE_TIMEOUT_SECONDS).

Accepting is klog's own loop on each listening socket (``Acceptor``), not asyncio's
``create_server``, for two reasons. Connection limits (``ConnectionQuotas``: max.connections,
per listener and per address, max.connection.creation.rate) decide before each accept
whether to accept at all, as Kafka's acceptor does. And running out of descriptors
(EMFILE/ENFILE, or the kernel's ENOBUFS/ENOMEM) pauses every listener with one warning
until a connection closes or a short backoff passes: asyncio's accept loop, on the same
error, logs a traceback and schedules a retry for each of up to ``backlog`` further
failing accepts in the same callback, each retry doing so again -- 124,652 tracebacks
(55 MB) in 15 s at the descriptor limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import socket
import ssl
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric

from klog.daemon.config import LISTENER_SECURITY_CONFIGS, BrokerConfig, ConfigSource
from klog.daemon.connection import CLOSE_GRACE_SECONDS, Connection, TlsConnection
from klog.daemon.connection_quotas import ConnectionQuotas, normalize_address
from klog.daemon.security.listener import (
    ListenerConfigError,
    ListenerSecurity,
    certificate_warning,
    check_reconfiguration,
    inter_broker_client_security,
    listener_security,
    store_stamps,
)
from klog.daemon.security.sasl import SUPPORTED_MECHANISMS

if TYPE_CHECKING:
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.handlers import BrokerServices, Handler
    from klog.daemon.metrics.counters import RequestMetrics
    from klog.daemon.security.credentials import ScramCredentialCache

log = logging.getLogger(__name__)

#: SO_RCVBUF of accepted sockets unless socket.receive.buffer.bytes is set (Kafka's
#: default, 100 KiB, is below what a fast producer's pipelined batches need in flight).
DEFAULT_RECEIVE_BUFFER = 1 << 20

#: Accepts per wake-up of a listener before other callbacks get the loop (asyncio's
#: accept loop takes up to its backlog at once; a burst of thousands of connects should
#: not hold every connected client's requests back for that long).
ACCEPTS_PER_WAKEUP = 64

#: Out of descriptors, accepting resumes after this long even if no connection closed
#: (descriptors also free up as segments close); asyncio waits one second too.
DESCRIPTOR_BACKOFF_SECONDS = 1.0

#: A condition logged as a warning (descriptors exhausted, addresses over their limit) is
#: logged again at most this often, with the count of what happened meanwhile.
WARNING_INTERVAL_SECONDS = 60.0

#: Longest a client may take over its TLS handshake (asyncio's default is 60 s: a client
#: that opens connections and never speaks should not hold them that long).
TLS_HANDSHAKE_TIMEOUT_SECONDS = 10.0

#: accept() errors that mean "no descriptor or kernel memory for one more socket".
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Server:
    """The listeners and their connections; each request goes to its handler in
    ``handlers`` with ``services``, the broker's components."""

    def __init__(self, dynamic_config: DynamicBrokerConfig, handlers: Mapping[int, Handler],
                 services: BrokerServices, credentials: ScramCredentialCache | None = None,
                 request_metrics: RequestMetrics | None = None) -> None:
        config = dynamic_config.current
        self.config = dynamic_config
        self.credentials = credentials
        #: listener name -> its security (TLS context, SASL settings), built at start.
        self.security: dict[str, ListenerSecurity] = {}
        self.handlers = handlers
        self.services = services
        # Kafka's RequestMetrics (klog/daemon/metrics); None: metrics off, nothing timed.
        self.request_metrics = request_metrics
        # What ApiVersions announces is all that is accepted: a request for any other API
        # closes the connection before it is decoded (services.api_versions).
        self.advertised = services.api_versions
        self.max_request_bytes = config.socket_request_max_bytes
        self.queued_max_requests = max(1, config.queued_max_requests)
        self.connections_max_idle_ms = config.connections_max_idle_ms
        self.connections: set[Connection] = set()
        self.paused: set[Connection] = set()
        self.queued = 0
        self.bound: dict[str, tuple[str, int]] = {}
        self.acceptors: list[Acceptor] = []
        self.quotas = ConnectionQuotas(config)
        self.backlog = config.socket_listen_backlog_size  # the kernel caps it at somaxconn
        self.receive_buffer = (config.socket_receive_buffer_bytes
                               if config.source_of("socket.receive.buffer.bytes")
                               is not ConfigSource.DEFAULT_CONFIG else DEFAULT_RECEIVE_BUFFER)
        self.send_buffer = config.socket_send_buffer_bytes \
            if config.source_of("socket.send.buffer.bytes") is not ConfigSource.DEFAULT_CONFIG \
            else -1
        self._serving = False
        self._out_of_descriptors = False
        self._resume_handle: asyncio.TimerHandle | None = None
        self._starting: set[asyncio.Task[Any]] = set()
        self._exhausted_log = _OccasionalWarning(
            logging.WARNING,
            "cannot accept connections: %s (%d connections open); accepting paused until "
            "a connection closes, retried every %.0f s")
        self._per_ip_log = _OccasionalWarning(
            logging.INFO,
            "rejected connection from %s: the address already has the configured maximum "
            "of %d connections (max.connections.per.ip)")
        self._idle_task: asyncio.Task[None] | None = None
        dynamic_config.add_validator(self._validate_security)
        dynamic_config.add_reconfigurable(self._reconfigure_security)
        # Key stores rewritten in place, then set again unchanged: rebuilt where changed.
        dynamic_config.add_file_reloader(lambda config: self._reconfigure_security(config,
                                                                                   config))

    def _validate_security(self, old: BrokerConfig, new: BrokerConfig) -> None:
        """Refuse (AlterConfigs answers INVALID_REQUEST) a listener security change that
        cannot be served or that Kafka's SslFactory refuses (check_reconfiguration)."""
        for endpoint in new.listeners:
            name = endpoint.listener_name
            if not self._security_changed(old, new, name):
                continue
            try:
                listener_security(new, endpoint, self.credentials)
                check_reconfiguration(old, new, endpoint, self.security[name])
            except ListenerConfigError as exc:
                raise ValueError(str(exc)) from None

    def _reconfigure_security(self, old: BrokerConfig, new: BrokerConfig) -> None:
        """A dynamic change of a listener's security configs (``klog configs alter broker
        N --set listener.name.ssl.ssl.keystore.location=...``, as Kafka's dynamic key
        store update): the listener's security is rebuilt and new connections use it;
        open connections keep theirs. AlterConfigs has refused what ``_validate_security``
        refuses; a change that still cannot be used (a file changed in between) is logged
        and the listener keeps what it had. A certificate that has expired or is not valid
        yet is taken, as Kafka takes it, with one warning."""
        for endpoint in new.listeners:
            name = endpoint.listener_name
            if not self._security_changed(old, new, name):
                continue
            try:
                self.security[name] = listener_security(new, endpoint, self.credentials)
            except ListenerConfigError as exc:
                log.warning("listener %s keeps its previous security settings: %s", name, exc)
                continue
            log.info("listener %s: security settings reloaded; new connections use them",
                     name)
            warning = certificate_warning(new, endpoint)
            if warning is not None:
                log.warning("%s", warning)

    def _security_changed(self, old: BrokerConfig, new: BrokerConfig, name: str) -> bool:
        """Whether a dynamic update changes listener ``name``'s security: one of its values,
        or -- the same paths set again -- a store file rewritten in place since the
        listener was built (Kafka's way to rotate a certificate without a new path)."""
        current = self.security.get(name)
        if current is None:
            return False
        return _security_settings(old, name) != _security_settings(new, name) or (
            bool(current.store_stamps) and store_stamps(new, name) != current.store_stamps)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.security = check_listeners(self.config.current, self.credentials)
        for endpoint in self.config.current.listeners:
            name = endpoint.listener_name
            warning = certificate_warning(self.config.current, endpoint)
            if warning is not None:
                log.warning("%s", warning)
            sock = await listen_socket(endpoint.host, endpoint.port, self.receive_buffer)
            # Listening now, before the broker registers: the controller reaches a broker
            # as soon as ZooKeeper names it (its connection and first requests wait in the
            # backlog), as Kafka binds and listens before registering. Accepted and
            # served only once the broker is ready (``serve``): Kafka too serves no
            # request before start-up ends.
            sock.listen(self.backlog)
            bound_port = sock.getsockname()[1]
            self.bound[name] = (endpoint.host, bound_port)
            self.acceptors.append(Acceptor(self, name, sock))
            log.info("listening on %s://%s:%d", name, _display(sock), bound_port)
        if self.connections_max_idle_ms >= 0:  # -1: no idle limit
            self._idle_task = loop.create_task(self._idle_sweep())

    async def serve(self) -> None:
        """Start accepting connections on every listener (after ``start``)."""
        self._serving = True
        for acceptor in self.acceptors:
            acceptor.resume()

    # -- accepting --------------------------------------------------------------------------

    def may_accept(self, acceptor: Acceptor) -> bool:
        """Whether ``acceptor`` may accept a connection now; if not, it is paused and
        resumed when the reason ends (a connection closes, the rate allows, a backoff)."""
        if self._out_of_descriptors:
            acceptor.pause()
            return False
        self.quotas.configure(self.config.current)  # dynamic changes apply at once
        wait = self.quotas.slot_wait(acceptor.name)
        if wait <= 0:
            return True
        # At a connection limit only a close makes room (``connection_closed``); the
        # timer also catches a limit raised by a dynamic config change.
        acceptor.pause(retry_after=1.0 if wait == math.inf else wait)
        return False

    # peer, address: Any as the socket module has them (a tuple for IPv4 and IPv6, whose
    # length differs; a str for a Unix socket).
    def accepted(self, acceptor: Acceptor, sock: socket.socket, peer: Any) -> None:
        """A socket ``acceptor`` has just accepted: count it, then serve it or close it."""
        address = normalize_address(str(peer[0])) if isinstance(peer, tuple) else str(peer)
        over = self.quotas.inc(acceptor.name, address)
        if over is not None:
            self._per_ip_log.emit(address, over)
            sock.close()
            return
        if self.send_buffer > 0:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
        security = self.security.get(acceptor.name)
        tls = security is not None and security.ssl_context is not None
        conn = (TlsConnection if tls else Connection)(self, acceptor.name, address, security)
        task = asyncio.get_running_loop().create_task(self._start_connection(conn, sock))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)
        if self.quotas.max_connections_exceeded() and self.quotas.is_protected(acceptor.name):
            self._close_least_recently_active()

    async def _start_connection(self, conn: Connection, sock: socket.socket) -> None:
        # Public API, so asyncio keeps making the transport (and turning Nagle off: the
        # accepted socket is IPPROTO_TCP, see _bind).
        try:
            context = conn.security.ssl_context
            if context is None:
                await asyncio.get_running_loop().connect_accepted_socket(lambda: conn, sock)
            else:
                idle = self.connections_max_idle_ms / 1000
                timeout = (min(TLS_HANDSHAKE_TIMEOUT_SECONDS, idle) if idle > 0
                           else TLS_HANDSHAKE_TIMEOUT_SECONDS)
                # A TLS close waits for the peer's close_notify no longer than a plaintext
                # close waits for its last bytes to go out (asyncio's default: 30 s).
                await asyncio.get_running_loop().connect_accepted_socket(
                    lambda: conn, sock, ssl=context, ssl_handshake_timeout=timeout,
                    ssl_shutdown_timeout=CLOSE_GRACE_SECONDS)
        except asyncio.CancelledError:  # the server is closing
            self._drop(conn, sock)
            raise
        except Exception as exc:
            self._drop(conn, sock)
            if isinstance(exc, (ssl.SSLError, TimeoutError)):  # a failed TLS handshake
                log.info("TLS handshake with %s on listener %s failed: %s",
                         conn.address or "a client", conn.listener_name, exc)
            elif not isinstance(exc, OSError):  # the peer went away; anything else is a bug
                log.error("cannot serve an accepted connection", exc_info=exc)
            return
        if conn.transport is None and not conn.closed:
            # A guard: asyncio's TLS protocol resolves the handshake's waiter without an
            # error when its socket is lost error-free during the handshake; then
            # connection_made never came, nothing will call connection_lost, and the slot
            # is given back here.
            self._drop(conn, sock)

    @staticmethod
    def _drop(conn: Connection, sock: socket.socket) -> None:
        conn.release()
        if conn.transport is None:  # else the transport closes the socket
            sock.close()

    def connection_closed(self, conn: Connection) -> None:
        """``conn`` no longer counts against the limits: a paused listener may resume."""
        self.quotas.dec(conn.listener_name, conn.address or "")
        if self._out_of_descriptors:
            self._descriptors_available()
        elif self._serving:
            for acceptor in self.acceptors:
                if acceptor.paused:
                    acceptor.resume()

    def out_of_descriptors(self, exc: OSError) -> None:
        """accept() failed for want of descriptors or memory: pause every listener (the
        listening socket stays readable, and retrying at once fails again) until a
        connection closes or the backoff passes; one warning per episode, at most one a
        minute."""
        if not self._out_of_descriptors:
            self._out_of_descriptors = True
            self._exhausted_log.emit(exc.strerror or exc, len(self.connections),
                                     DESCRIPTOR_BACKOFF_SECONDS)
        for acceptor in self.acceptors:
            acceptor.pause()
        if self._resume_handle is None:
            self._resume_handle = asyncio.get_running_loop().call_later(
                DESCRIPTOR_BACKOFF_SECONDS, self._descriptors_available)

    def _descriptors_available(self) -> None:
        """A descriptor was freed (a connection closed), or the backoff passed: try
        again (a failure now pauses again, without another warning this minute)."""
        self._out_of_descriptors = False
        if self._resume_handle is not None:
            self._resume_handle.cancel()
            self._resume_handle = None
        if self._serving:
            for acceptor in self.acceptors:
                acceptor.resume()

    def _close_least_recently_active(self) -> None:
        """Over max.connections because the inter-broker listener accepted: close the
        client connection idle the longest (Kafka's Processor closes its oldest)."""
        candidates = [c for c in self.connections
                      if not self.quotas.is_protected(c.listener_name) and not c.closed]
        if candidates:
            oldest = min(candidates, key=lambda c: c.last_active)
            log.info("closing connection from %s: over max.connections (%d) after an "
                     "inter-broker connection", oldest.peer, self.quotas.limits.broker_max)
            oldest.close()

    # -- requests ---------------------------------------------------------------------------

    def request_done(self) -> None:
        self.queued -= 1
        if self.paused and self.queued < self.queued_max_requests:
            for conn in list(self.paused):
                conn.update_reading()

    async def _idle_sweep(self) -> None:
        limit = self.connections_max_idle_ms / 1000
        interval = min(max(limit / 10, 0.01), 1.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                if (not conn.busy and not conn.queue and not conn.deferred
                        and now - conn.last_active > limit):
                    log.debug("closing idle connection from %s", conn.peer)
                    conn.close()

    async def stop_accepting(self) -> None:
        self._serving = False
        if self._resume_handle is not None:
            self._resume_handle.cancel()
            self._resume_handle = None
        for acceptor in self.acceptors:
            acceptor.close()
        self.acceptors.clear()

    async def close(self) -> None:
        """Stop accepting, close every connection, and end their request processing (a
        request still waiting -- a long poll, acks=-1 -- has no one left to answer)."""
        await self.stop_accepting()
        if self._idle_task is not None:
            self._idle_task.cancel()
            self._idle_task = None
        for starting in list(self._starting):
            starting.cancel()
        tasks = [t for t in (conn.task for conn in self.connections)
                 if t is not None and not t.done()]
        for conn in list(self.connections):
            conn.close()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5)


class Acceptor:
    """One listener's listening socket and its accept loop (a reader callback)."""

    def __init__(self, server: Server, name: str, sock: socket.socket) -> None:
        self.server = server
        self.name = name
        self.sock = sock
        self.paused = True  # until ``Server.serve``
        self._loop = asyncio.get_running_loop()
        self._retry: asyncio.TimerHandle | None = None

    def resume(self) -> None:
        """Watch the socket again (idempotent), unless a retry timer is pending and the
        limits still say wait: a closing connection does not cut the creation rate's
        wait short."""
        if self.sock.fileno() < 0:
            return
        if self._retry is not None:
            if self.server.quotas.slot_wait(self.name) > 0:
                return
            self._retry.cancel()
            self._retry = None
        if self.paused:
            self.paused = False
            self._loop.add_reader(self.sock.fileno(), self._accept)

    def pause(self, retry_after: float | None = None) -> None:
        if not self.paused:
            self.paused = True
            self._loop.remove_reader(self.sock.fileno())
        if retry_after is not None and self._retry is None:
            self._retry = self._loop.call_later(retry_after, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self.resume()

    def _accept(self) -> None:
        server = self.server
        for _ in range(ACCEPTS_PER_WAKEUP):
            if not server.may_accept(self):
                return
            try:
                sock, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # none left
            except ConnectionAbortedError:
                continue  # the client gave up while waiting in the backlog
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    server.out_of_descriptors(exc)
                else:  # not expected from accept(); say so once, do not spin on it
                    log.warning("accept on listener %s failed: %s; retrying in %.0f s",
                                self.name, exc, DESCRIPTOR_BACKOFF_SECONDS)
                    self.pause(retry_after=DESCRIPTOR_BACKOFF_SECONDS)
                return
            server.accepted(self, sock, peer)

    def close(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if not self.paused and self.sock.fileno() >= 0:
            self._loop.remove_reader(self.sock.fileno())
        self.paused = True
        self.sock.close()


class _OccasionalWarning:
    """A message logged at most once per WARNING_INTERVAL_SECONDS; the occurrences in
    between are counted and reported with the next one (and logged at debug level)."""

    def __init__(self, level: int, message: str) -> None:
        self.level = level
        self.message = message
        self._last = -math.inf
        self._suppressed = 0

    def emit(self, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last < WARNING_INTERVAL_SECONDS:
            self._suppressed += 1
            log.debug(self.message, *args)
            return
        self._last = now
        if self._suppressed:
            log.log(self.level, self.message + " (%d more since the last such message)",
                    *args, self._suppressed)
            self._suppressed = 0
        else:
            log.log(self.level, self.message, *args)


class ListenerError(RuntimeError):
    """A listener this broker cannot serve (one line naming it and why)."""


def _security_settings(config: BrokerConfig, listener: str) -> tuple[object, ...]:
    """Every security value a listener reads, to tell whether a change touches it."""
    values: list[object] = [config.security_value(listener, key)
                            for key in LISTENER_SECURITY_CONFIGS]
    values += [config.security_value(listener, "sasl.jaas.config", mechanism)
               for mechanism in SUPPORTED_MECHANISMS]
    values.append(config.get("connection.failed.authentication.delay.ms"))
    return tuple(values)


def check_listeners(config: BrokerConfig, credentials: ScramCredentialCache | None = None
                    ) -> dict[str, ListenerSecurity]:
    """Each listener's security, or ListenerError for the first one klog cannot serve
    (a TLS listener without a key store, an unsupported SASL mechanism, ...)."""
    out = {}
    try:
        for endpoint in config.listeners:
            out[endpoint.listener_name] = listener_security(config, endpoint, credentials)
        inter_broker_client_security(config)  # this broker's own credentials, as a client
    except ListenerConfigError as exc:
        raise ListenerError(str(exc)) from None
    return out


async def listen_socket(host: str, port: int, receive_buffer: int = DEFAULT_RECEIVE_BUFFER
                        ) -> socket.socket:
    """A bound, not yet listening, TCP socket for a listener's host and port (the caller
    calls listen); accepted sockets inherit its ``receive_buffer`` (SO_RCVBUF; -1: the
    system's default)."""
    if host in _ALL_INTERFACES:
        try:
            return _bind(socket.AF_INET6, ("::", port), receive_buffer, dual_stack=True)
        except OSError:
            if host == "::":
                raise
            # no IPv6 on this machine: every IPv4 interface is "every interface"
            return _bind(socket.AF_INET, ("0.0.0.0", port), receive_buffer)
    if host == "0.0.0.0":
        return _bind(socket.AF_INET, (host, port), receive_buffer)
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    if not infos:  # pragma: no cover - getaddrinfo raises instead
        raise OSError(f"cannot resolve listener host {host!r}")
    family, _type, _proto, _canon, address = infos[0]
    return _bind(family, address, receive_buffer)


_ALL_INTERFACES = ("", "::")


def _bind(family: int, address: Any, receive_buffer: int, dual_stack: bool = False
          ) -> socket.socket:
    # proto named, not 0: accepted sockets copy it, and asyncio turns Nagle off
    # (TCP_NODELAY, as Kafka does) only on sockets whose proto is IPPROTO_TCP. With Nagle
    # on, an answer written while the previous one is unacknowledged waits for the client's
    # delayed ACK, 40 ms on Linux.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual_stack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        # Set before listen(): accepted sockets inherit it, and the TCP window scale is
        # chosen from it during the handshake.
        if receive_buffer > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def _display(sock: socket.socket) -> str:
    host = sock.getsockname()[0]
    return f"[{host}]" if ":" in host else host


class SocketServerCollector:
    """socket-server-metrics connection-count per listener: the connections that count
    against the connection limits (klog/daemon/connection_quotas.py) -- from the accept to
    the socket's close, TLS handshakes and closes under way included, as a Kafka
    processor's selector holds a channel. One event loop serves every connection:
    networkProcessor is always 0."""

    def __init__(self, server: Server) -> None:
        self.server = server

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "kafka.server:type=socket-server-metrics,listener=L,networkProcessor=N "
            "connection-count", labels=["listener", "networkProcessor"])
        counts = self.server.quotas.per_listener
        for listener in self.server.bound:
            family.add_metric([listener, "0"], counts.get(listener, 0))
        yield family
