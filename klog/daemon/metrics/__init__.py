"""The broker's metrics: counted where the work happens, served to Prometheus over HTTP.

Owns ``BrokerMetrics``, the component broker.py builds and hands to those that count: the
replica manager (``topics``: Kafka's BrokerTopicMetrics; ``isr``: ISR shrinks and
expands), the server's connections (``requests``: Kafka's RequestMetrics), and the
collectors of state read at scrape time (each beside its component -- partition and
leader counts, the controller's gauges, fetcher lag, groups, connections, the cleaner --
and the log sizes of klog/daemon/metrics/collectors.py). With
``metrics.http.listener`` unset (the default) nothing counts: the components are handed
None and the hot paths skip one ``is None`` test.

Serving: ``GET /metrics`` on ``metrics.http.listener`` (HOST:PORT), in Prometheus' text
format (or OpenMetrics when asked), by prometheus_client's WSGI app in a thread of its own;
any other path answers 404. The event loop is never blocked by a scrape and never read
from another thread: a scrape asks the loop for a snapshot (every collector registered
``on_loop`` runs there, in one loop turn, and yields plain Metric values), then formats it
in the HTTP thread. Process metrics (process_cpu_seconds_total,
process_resident_memory_bytes, process_open_fds, ...) come from prometheus_client's
process collector, read from /proc in the HTTP thread.

Names follow the Prometheus JMX exporter's standard Kafka rules (example_configs/
kafka-2_0_0.yml), so dashboards and alerts written for Kafka read klog's figures.

Adding figures (the transaction coordinator, quotas): write a collector beside your
component -- any object with ``collect() -> Iterable[prometheus_client.core.Metric]``
reading your component's state -- and have broker.py call ``metrics.register(collector)`` after
building your component. It runs on the event loop at each scrape: read state, do not
block or await. Counters on a hot path are plain integers on your component (as
counters.py does), read by your collector; prometheus_client's Counter takes a lock per
increment. ``register(collector, on_loop=False)`` is for collectors safe in any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import threading
from collections.abc import Iterable, Iterator
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import Metric
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

from klog.daemon.config import BrokerConfig, ConfigError
from klog.daemon.config.values import ConfigSource
from klog.daemon.metrics.counters import BrokerTopicMetrics, IsrMetrics, RequestMetrics

__all__ = ["BrokerMetrics", "BrokerTopicMetrics", "Collector", "IsrMetrics",
           "RequestMetrics", "parse_listener", "unimplemented_configs"]

log = logging.getLogger(__name__)

#: How long a scrape waits for the event loop's snapshot. A loop stalled longer answers
#: the process metrics alone (and says so in the log) rather than holding the scrape.
SNAPSHOT_TIMEOUT_S = 5.0

#: The path served; others answer 404.
METRICS_PATH = "/metrics"

#: Kafka's configs of its own metrics library (client-style sensors with sample windows,
#: and Java reporter classes): klog's metrics are the JMX exporter's view of Kafka's
#: MBeans, served by metrics.http.listener; these are accepted and reported unimplemented.
UNIMPLEMENTED_CONFIGS = ("metric.reporters", "metrics.num.samples",
                         "metrics.sample.window.ms", "metrics.recording.level")


class Collector(Protocol):
    """What ``BrokerMetrics.register`` takes (prometheus_client's collector protocol)."""

    def collect(self) -> Iterable[Metric]: ...


def parse_listener(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6addr]:PORT``; an empty host is every address) -> (host, port)."""
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"metrics.http.listener must be HOST:PORT, not {value!r}")
    host = host.strip("[]")
    return host or "0.0.0.0", int(port)


def unimplemented_configs(config: BrokerConfig) -> list[str]:
    """The metrics configs set in this config that klog accepts but does not act on."""
    return [name for name in UNIMPLEMENTED_CONFIGS
            if config.source_of(name) is not ConfigSource.DEFAULT_CONFIG]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes come every few seconds: no line each."""


class _LoopSnapshot:
    """The registry's view of the collectors that run on the event loop."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self.metrics.snapshot())


class BrokerMetrics:
    """See the module docstring. ``listener`` is metrics.http.listener (None: off)."""

    def __init__(self, listener: str | None) -> None:
        self.address = parse_listener(listener) if listener else None
        self.topics = BrokerTopicMetrics()
        self.requests = RequestMetrics()
        self.isr = IsrMetrics()
        self._on_loop: list[Collector] = [self.topics, self.isr, self.requests]
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.registry.register(_LoopSnapshot(self))
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def bound(self) -> tuple[str, int] | None:
        """(host, port) the HTTP server listens on (port 0 resolved); None when not serving."""
        if self._server is None:
            return None
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    # -- collectors ---------------------------------------------------------------------------

    def register(self, collector: Collector, *, on_loop: bool = True) -> None:
        """Add a collector to every scrape: on the event loop (the default; it may read
        any component's state) or, ``on_loop=False``, in the HTTP thread."""
        if on_loop:
            self._on_loop.append(collector)
        else:
            self.registry.register(collector)

    def unregister(self, collector: Collector) -> None:
        if collector in self._on_loop:
            self._on_loop.remove(collector)
        else:
            self.registry.unregister(collector)

    def collect_on_loop(self) -> list[Metric]:
        """Every on-loop collector's metrics, now (call on the event loop's thread). A
        collector that fails is logged and left out; the others are served."""
        out: list[Metric] = []
        for collector in list(self._on_loop):
            try:
                out.extend(collector.collect())
            except Exception:
                log.exception("metrics collector %r failed", collector)
        return out

    def snapshot(self) -> list[Metric]:
        """``collect_on_loop`` run on the event loop, from any thread."""
        loop = self.loop
        if (loop is None or loop.is_closed() or not loop.is_running()
                or threading.get_ident() == self._loop_thread):
            return self.collect_on_loop()
        done: concurrent.futures.Future[list[Metric]] = concurrent.futures.Future()

        def run() -> None:
            if done.set_running_or_notify_cancel():
                done.set_result(self.collect_on_loop())

        try:
            loop.call_soon_threadsafe(run)
            return done.result(timeout=SNAPSHOT_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            done.cancel()
            log.warning("metrics: the event loop did not answer within %.0f s; this scrape "
                        "has the process metrics only", SNAPSHOT_TIMEOUT_S)
        except RuntimeError:  # the loop closed meanwhile
            pass
        return []

    # -- serving ------------------------------------------------------------------------------

    def _app(self) -> Any:
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
            if environ.get("PATH_INFO") != METRICS_PATH:
                start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [f"not found: klog serves its metrics at {METRICS_PATH}\n".encode()]
            result: Iterable[bytes] = metrics_app(environ, start_response)
            return result

        return app

    def start(self) -> None:
        """Serve /metrics, when metrics.http.listener is set (on the event loop: the
        snapshot hops to it). Binding errors raise OSError naming the listener."""
        self.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        if self.address is None:
            return
        host, port = self.address

        class Server(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
            allow_reuse_address = True

        try:
            self._server = make_server(host, port, self._app(), Server, _QuietHandler)
        except OSError as exc:
            raise OSError(exc.errno, f"metrics.http.listener {host}:{port}: "
                          f"{exc.strerror}") from None
        # No poll interval: the thread sleeps in select until a scrape comes (an idle
        # broker's metrics thread never wakes); close() wakes it with a connection.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(None,),
                                        name="klog-metrics-http", daemon=True)
        self._thread.start()
        bound = self.bound
        assert bound is not None
        log.info("metrics served at http://%s:%d%s", bound[0], bound[1], METRICS_PATH)

    def close(self) -> None:
        """Stop serving (blocks until the serving thread has stopped: call off the loop)."""
        server, self._server = self._server, None
        if server is None:
            return
        # serve_forever waits in select without a timeout: ask it to stop, then wake it
        # with a connection of our own (which it may or may not accept first).
        stopping = threading.Thread(target=server.shutdown, daemon=True)
        stopping.start()
        host, port = server.server_address[:2]
        while stopping.is_alive():
            with contextlib.suppress(OSError), \
                    socket.create_connection((str(host), int(port)), timeout=1):
                pass
            stopping.join(timeout=0.1)
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
