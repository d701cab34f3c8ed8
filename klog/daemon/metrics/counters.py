"""The hot-path counters: what produce, fetch and each request add, as plain integers.

Owns ``BrokerTopicMetrics`` (Kafka's BrokerTopicStats: messages and bytes in and out,
rejected bytes, total and failed produce and fetch requests, per topic and over all
topics), ``RequestMetrics`` (Kafka's RequestMetrics: requests per API and version, and the
queue, local, remote, response-send and total time of each) and ``IsrMetrics`` (ISR shrinks
and expands). Every count is made on the event loop thread and costs a few list
additions: no lock, no prometheus_client object on the hot path. The scrape reads them
through ``collect()``, which the metrics component calls on the event loop too
(klog/daemon/metrics/__init__.py), so a scrape sees every counter at one instant.

Names and labels are those the Prometheus JMX exporter's Kafka rules
(example_configs/kafka-2_0_0.yml) give Kafka's MBeans: a ``*PerSec`` meter's Count becomes
``kafka_<domain>_<type>_<name without PerSec>_total``, a histogram's percentiles a summary
with ``quantile`` labels "0.50" ... "0.999" and its Count ``..._count``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from prometheus_client.core import Metric

from klog.protocol import apis
from klog.protocol.errors import ErrorCode
from klog.protocol.fetch import request_replica_id

TopicPartition = tuple[str, int]

# Slots of one topic's counts (a list: the cheapest thing to add to in CPython).
MESSAGES_IN, BYTES_IN, BYTES_OUT, BYTES_REJECTED = 0, 1, 2, 3
FAILED_PRODUCE, FAILED_FETCH, TOTAL_PRODUCE, TOTAL_FETCH = 4, 5, 6, 7
# All topics only, as Kafka (BrokerTopicStats.updateReplicationBytesIn/Out).
REPLICATION_BYTES_IN, REPLICATION_BYTES_OUT = 8, 9
_SLOTS = 10

#: (slot, metric name, Kafka's MBean name, per topic too) of kafka.server:BrokerTopicMetrics.
TOPIC_COUNTERS: tuple[tuple[int, str, str, bool], ...] = (
    (MESSAGES_IN, "messagesin", "MessagesInPerSec", True),
    (BYTES_IN, "bytesin", "BytesInPerSec", True),
    (BYTES_OUT, "bytesout", "BytesOutPerSec", True),
    (BYTES_REJECTED, "bytesrejected", "BytesRejectedPerSec", True),
    (FAILED_PRODUCE, "failedproducerequests", "FailedProduceRequestsPerSec", True),
    (FAILED_FETCH, "failedfetchrequests", "FailedFetchRequestsPerSec", True),
    (TOTAL_PRODUCE, "totalproducerequests", "TotalProduceRequestsPerSec", True),
    (TOTAL_FETCH, "totalfetchrequests", "TotalFetchRequestsPerSec", True),
    (REPLICATION_BYTES_IN, "replicationbytesin", "ReplicationBytesInPerSec", False),
    (REPLICATION_BYTES_OUT, "replicationbytesout", "ReplicationBytesOutPerSec", False),
)

# Errors Kafka's ReplicaManager does not count as a failed produce (appendToLocalLog: the
# client's fault or a leadership move, not the broker failing the request).
_NOT_FAILED_PRODUCE = frozenset(int(c) for c in (
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.KAFKA_STORAGE_ERROR))
# Kafka's readFromLocalLog likewise for fetches.
_NOT_FAILED_FETCH = frozenset(int(c) for c in (
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.REPLICA_NOT_AVAILABLE, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_OUT_OF_RANGE))
_MESSAGE_TOO_LARGE = int(ErrorCode.MESSAGE_TOO_LARGE)


class FetchOutcome(Protocol):
    """What ``record_fetch`` reads of one partition's read (the replica manager's
    FetchResult): typed by this so that the counters need not import the replica manager,
    which imports them."""

    @property
    def error_code(self) -> int: ...

    @property
    def size(self) -> int: ...


def _counter(name: str, doc: str) -> Metric:
    # The JMX exporter's names end in _total already; prometheus_client's CounterMetricFamily
    # would strip and re-add it, a plain Metric keeps the name as given.
    return Metric(name.removesuffix("_total"), doc, "counter")


class BrokerTopicMetrics:
    """Kafka's BrokerTopicStats: counts per topic and over all topics (the all-topics
    counts keep what deleted topics counted, as Kafka's allTopicsStats do). The hot paths
    add to the topic's counts only; the all-topics figures are summed at scrape time."""

    def __init__(self) -> None:
        self.topics: dict[str, list[int]] = {}
        # What removed topics counted, and the all-topics-only counts (replication bytes).
        self.retired = [0] * _SLOTS

    def counts_of(self, topic: str) -> list[int]:
        """The topic's counts (made at first use). The replica manager hands this list to
        each of the topic's partitions, whose appends add to it in place: the produce path
        pays three list additions and no lookup."""
        counts = self.topics.get(topic)
        if counts is None:
            counts = self.topics[topic] = [0] * _SLOTS
        return counts

    def remove_topic(self, topic: str) -> None:
        """The topic's replicas are deleted here (Kafka's removeMetrics)."""
        counts = self.topics.pop(topic, None)
        if counts is not None:
            self.retired = [a + b for a, b in zip(self.retired, counts, strict=True)]

    @property
    def all_topics(self) -> list[int]:
        totals = list(self.retired)
        for counts in self.topics.values():
            for slot in range(_SLOTS):
                totals[slot] += counts[slot]
        return totals

    def record_refused(self, topic: str, code: int, size: int) -> None:
        """An append refused with error ``code`` (``size`` bytes of records): a produce
        request for the topic, failed or rejected bytes as Kafka's ReplicaManager counts
        them. (Appends that succeed are counted by the replica manager in place:
        TOTAL_PRODUCE, MESSAGES_IN, BYTES_IN of ``counts_of(topic)``.)"""
        counts = self.counts_of(topic)
        counts[TOTAL_PRODUCE] += 1
        if code not in _NOT_FAILED_PRODUCE:
            counts[FAILED_PRODUCE] += 1
        elif code == _MESSAGE_TOO_LARGE:
            counts[BYTES_REJECTED] += size

    def record_fetch(self, from_follower: bool, wanted: list[Any],
                     results: Sequence[FetchOutcome]) -> None:
        """A fetch's final read: ``wanted`` the FetchKeys (topic first), ``results`` in
        the same order. A consumer's bytes are bytes out; a follower's, replication bytes
        out (all topics only), as Kafka's KafkaApis counts them."""
        topics = self.topics
        replicated = 0
        for key, r in zip(wanted, results, strict=True):
            counts = topics.get(key[0]) or self.counts_of(key[0])
            counts[TOTAL_FETCH] += 1
            code = r.error_code
            if code:
                if code not in _NOT_FAILED_FETCH:
                    counts[FAILED_FETCH] += 1
            elif from_follower:
                replicated += r.size
            else:
                counts[BYTES_OUT] += r.size
        if replicated:
            self.retired[REPLICATION_BYTES_OUT] += replicated

    def record_replication_in(self, size: int) -> None:
        """Bytes a follower appended from its leader."""
        self.retired[REPLICATION_BYTES_IN] += size

    def collect(self) -> Iterator[Metric]:
        every = self.all_topics
        for slot, name, mbean, per_topic in TOPIC_COUNTERS:
            family = _counter(f"kafka_server_brokertopicmetrics_{name}_total",
                              f"kafka.server:type=BrokerTopicMetrics,name={mbean} Count")
            family.add_sample(f"kafka_server_brokertopicmetrics_{name}_total", {},
                              every[slot])
            if per_topic:
                for topic, counts in self.topics.items():
                    family.add_sample(f"kafka_server_brokertopicmetrics_{name}_total",
                                      {"topic": topic}, counts[slot])
            yield family


class IsrMetrics:
    """kafka.server:type=ReplicaManager,name=IsrShrinksPerSec / IsrExpandsPerSec: ISR
    changes of partitions led here, counted when the change is in force."""

    __slots__ = ("expands", "shrinks")

    def __init__(self) -> None:
        self.shrinks = 0
        self.expands = 0

    def record_change(self, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        if len(new) < len(old):
            self.shrinks += 1
        elif len(new) > len(old):
            self.expands += 1

    def collect(self) -> Iterator[Metric]:
        for name, mbean, value in (("isrshrinks", "IsrShrinksPerSec", self.shrinks),
                                   ("isrexpands", "IsrExpandsPerSec", self.expands)):
            family = _counter(f"kafka_server_replicamanager_{name}_total",
                              f"kafka.server:type=ReplicaManager,name={mbean} Count")
            family.add_sample(f"kafka_server_replicamanager_{name}_total", {}, value)
            yield family


# -- requests ------------------------------------------------------------------------------

#: Kafka's request time histograms (RequestMetrics), as the JMX exporter names them.
#: RemoteTimeMs is the time an answer waited in a purgatory after its handler returned
#: (acks=-1 produce); a fetch's long poll is part of its LocalTimeMs here (klog's fetch
#: handler waits inside the replica manager's call). ResponseSendTimeMs is the time
#: sending file regions took (sendfile); an answer of bytes is handed to the socket's
#: buffer in the same event loop turn and counts 0.
TIMES: tuple[tuple[str, str], ...] = (
    ("requestqueuetimems", "RequestQueueTimeMs"),
    ("localtimems", "LocalTimeMs"),
    ("remotetimems", "RemoteTimeMs"),
    ("responsesendtimems", "ResponseSendTimeMs"),
    ("totaltimems", "TotalTimeMs"),
)
#: The quantiles Kafka's histograms publish (50th ... 999th percentile attributes) and the
#: label values the JMX exporter gives them ("0.$N"); with ``_count`` (every request), and
#: no ``_sum``, as the JMX exporter's rules give them.
QUANTILES: tuple[tuple[float, str], ...] = (
    (0.50, "0.50"), (0.75, "0.75"), (0.95, "0.95"), (0.98, "0.98"), (0.99, "0.99"),
    (0.999, "0.999"))
#: Requests whose times make the quantiles: the latest this many timed per request name
#: (Kafka's Yammer histograms keep a reservoir of 1028 samples biased to the last 5
#: minutes).
RESERVOIR = 1024
#: One request in SAMPLE_EVERY of each name is timed (every one is counted): a reservoir is
#: a sample anyway, and timing costs about a microsecond a request -- a few percent of a
#: small produce request's CPU (benchmarks/RESULTS.md, metrics on vs off).
SAMPLE_EVERY = 8
SAMPLE_MASK = SAMPLE_EVERY - 1  # a power of two: n & SAMPLE_MASK == 1 picks one in 8
FETCH = 1
_MAX_VERSION = 64
_MAX_API_KEY = 128


class RequestStats:
    """One request name's counts per version and its latest timed requests' times (a ring
    of tuples)."""

    __slots__ = ("name", "ring", "timed", "versions")

    def __init__(self, name: str, versions: list[int] | None = None) -> None:
        self.name = name
        self.versions = [0] * _MAX_VERSION if versions is None else versions
        self.ring: list[tuple[float, float, float, float, float]] = []
        self.timed = 0  # requests timed

    def record(self, times: tuple[float, float, float, float, float]) -> None:
        ring = self.ring
        if len(ring) < RESERVOIR:
            ring.append(times)
        else:
            ring[self.timed % RESERVOIR] = times
        self.timed += 1


class RequestTiming:
    """One request's clock, from receipt to its answer handed to the socket (ms)."""

    __slots__ = ("local_end", "received", "start", "stats")

    def __init__(self, stats: tuple[RequestStats, ...], received: float, start: float) -> None:
        self.stats = stats
        self.received = received
        self.start = start
        self.local_end = start

    def local_done(self) -> None:
        self.local_end = time.monotonic()

    def finish(self, remote_end: float | None = None, send_end: float | None = None) -> None:
        end = send_end if send_end is not None else (
            remote_end if remote_end is not None else self.local_end)
        remote = remote_end if remote_end is not None else self.local_end
        times = ((self.start - self.received) * 1000.0,
                 (self.local_end - self.start) * 1000.0,
                 (remote - self.local_end) * 1000.0,
                 (end - remote) * 1000.0,
                 (end - self.received) * 1000.0)
        for stats in self.stats:
            stats.record(times)

    def remote_done(self, _future: object) -> None:
        """Done callback of a deferred answer's future: its purgatory wait is over."""
        self.finish(remote_end=time.monotonic())


class RequestMetrics:
    """kafka.network:type=RequestMetrics: per request name (Kafka's ApiKeys names, and
    FetchConsumer / FetchFollower beside Fetch, as Kafka keeps them).

    The connection counts each request itself in ``counts[api_key][api_version]`` (a call
    per request would cost as much as the rest of the counting) and calls ``begin`` for
    the requests it times: a Fetch, and of each API and version the first and then one in
    SAMPLE_EVERY (``n & SAMPLE_MASK == 1``, ``n`` the count with this request).
    """

    def __init__(self) -> None:
        self.counts: list[list[int]] = [[0] * _MAX_VERSION for _ in range(_MAX_API_KEY)]
        self.by_key: dict[int, RequestStats] = {}
        self.by_name: dict[str, RequestStats] = {}

    def _stats(self, name: str) -> RequestStats:
        stats = self.by_name.get(name)
        if stats is None:
            stats = self.by_name[name] = RequestStats(name)
        return stats

    def count(self, api_key: int, api_version: int, request: Any, received: float
              ) -> RequestTiming | None:
        """What the connection does inline (tests and other callers): count a request,
        and its timing if it is one of those timed."""
        by_version = self.counts[api_key]
        n = by_version[api_version] = by_version[api_version] + 1
        if n & SAMPLE_MASK == 1 or api_key == FETCH:
            return self.begin(api_key, api_version, request, received)
        return None

    def begin(self, api_key: int, api_version: int, request: Any, received: float
              ) -> RequestTiming | None:
        """The timing of a request counted in ``counts`` and picked for timing (see the
        class docstring); a Fetch is counted here as FetchConsumer or FetchFollower too."""
        stats = self.by_key.get(api_key) or self._key(api_key)
        if api_key == FETCH:
            return self._begin_fetch(stats, api_version, request, received)
        return RequestTiming((stats,), received, time.monotonic())

    def _key(self, api_key: int) -> RequestStats:
        name = apis.spec_for(api_key).name
        stats = self.by_key[api_key] = self.by_name[name] = RequestStats(
            name, self.counts[api_key])
        return stats

    def _begin_fetch(self, stats: RequestStats, api_version: int, request: Any,
                     received: float) -> RequestTiming | None:
        follower = request_replica_id(request) >= 0
        detail = self._stats("FetchFollower" if follower else "FetchConsumer")
        n = detail.versions[api_version] = detail.versions[api_version] + 1
        if n & SAMPLE_MASK != 1:
            return None
        return RequestTiming((stats, detail), received, time.monotonic())

    def collect(self) -> Iterator[Metric]:
        requests = _counter("kafka_network_requestmetrics_requests_total",
                            "kafka.network:type=RequestMetrics,name=RequestsPerSec Count")
        for name, stats in self.by_name.items():
            for version, n in enumerate(stats.versions):
                if n:
                    requests.add_sample("kafka_network_requestmetrics_requests_total",
                                        {"request": name, "version": str(version)}, n)
        yield requests
        for i, (metric, mbean) in enumerate(TIMES):
            name = f"kafka_network_requestmetrics_{metric}"
            family = Metric(name, f"kafka.network:type=RequestMetrics,name={mbean} "
                            "(quantiles over a sample of the latest requests)", "summary")
            for request, stats in self.by_name.items():
                labels = {"request": request}
                values = sorted(t[i] for t in stats.ring)
                for q, label in QUANTILES:
                    value = values[min(len(values) - 1, int(q * len(values)))] if values \
                        else 0.0
                    family.add_sample(name, {**labels, "quantile": label}, value)
                family.add_sample(f"{name}_count", labels, sum(stats.versions))
            yield family

