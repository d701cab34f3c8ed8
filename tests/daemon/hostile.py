"""What the tests that attack a broker process share (test_bad_input.py, test_fuzz.py).

Both run one broker process (``klog.testing``) for the whole module, so that a crash shows
as a dead process rather than taking pytest down, and its memory can be measured
(``module_broker``). Both keep a client on a connection of its own that must go on being
served while bad input arrives elsewhere (``BackgroundClient``), and both end by reading
the broker's log for what must never be there (``unexpected_log_lines``). Both need to
know how long a request may legitimately keep the broker from answering
(``requested_wait``). The raw-socket helpers (how a connection ended) are in wire.py.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from klog.protocol import apis, framing
from klog.protocol.entities import as_millis
from klog.testing import KlogBroker
from tests.daemon.wire import WireClient, batch


def create_topic_with_configs(client: WireClient, name: str, configs: Mapping[str, str],
                              num_partitions: int = 2) -> None:
    """CreateTopics with topic configs, then wait until the topic has its leaders."""
    response = client.call(19, 5, {"topics": [{
        "name": name, "num_partitions": num_partitions, "replication_factor": 1,
        "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "timeout": 10_000, "validate_only": False})
    assert response.topics[0].error_code == 0, response
    client.create_topic(name)


@contextlib.contextmanager
def module_broker(data_dir: Path, *, message_max_bytes: int, request_max_bytes: int,
                  topics: Iterable[str],
                  configured_topics: Mapping[str, Mapping[str, str]] | None = None,
                  configured_partitions: int = 2) -> Iterator[KlogBroker]:
    """A broker process with the size limits under test and two partitions per topic;
    ``topics`` auto-created, ``configured_topics`` created with their configs (and
    ``configured_partitions`` partitions), each with a leader before the block runs."""
    with KlogBroker(data_dir, overrides={
        "message.max.bytes": message_max_bytes,
        "socket.request.max.bytes": request_max_bytes,
        "num.partitions": 2,
    }) as broker:
        with WireClient(("127.0.0.1", broker.port)) as setup:
            for topic in topics:
                setup.create_topic(topic)
            for topic, configs in (configured_topics or {}).items():
                create_topic_with_configs(setup, topic, configs, configured_partitions)
        yield broker


class BackgroundClient(threading.Thread):
    """Produces one record and fetches it back (and, with ``metadata``, asks for the
    topic's metadata), round after round, on its own connection; remembers any failure
    instead of raising, for the test to assert on. ``rounds`` counts the rounds done,
    which is also the topic's partition 0 log end offset it expects."""

    def __init__(self, port: int, topic: str, *, name: str, value_prefix: bytes,
                 timeout: float, pause: float, metadata: bool = False,
                 round_limit: float | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self.port = port
        self.topic = topic
        self.value_prefix = value_prefix
        self.timeout = timeout
        self.pause = pause
        self.metadata = metadata
        self.round_limit = round_limit
        self.rounds = 0
        self.failures: list[str] = []
        self._halt = threading.Event()
        self._checked = 0

    def run(self) -> None:
        try:
            with WireClient(("127.0.0.1", self.port), timeout=self.timeout) as client:
                while not self._halt.is_set():
                    started = time.monotonic()
                    value = b"%s-%d" % (self.value_prefix, self.rounds)
                    part = client.produce(self.topic, 0, batch(1, value)) \
                        .responses[0].partition_responses[0]
                    if part.error_code != 0 or part.base_offset != self.rounds:
                        self.failures.append(f"produce {self.rounds}: {part}")
                        return
                    fetched = client.fetch(self.topic, 0, self.rounds) \
                        .responses[0].partitions[0]
                    if fetched.error_code != 0 or value not in (fetched.records or b""):
                        self.failures.append(f"fetch {self.rounds}: {fetched}")
                        return
                    if self.metadata:
                        topics = client.metadata([self.topic], auto_create=False).topics
                        if topics[0].error_code != 0:
                            self.failures.append(f"metadata: {topics[0]}")
                            return
                    self.rounds += 1
                    if self.round_limit is not None \
                            and time.monotonic() - started > self.round_limit:
                        self.failures.append(f"a round took more than {self.round_limit} s")
                        return
                    time.sleep(self.pause)
        except Exception as exc:  # any failure is the finding
            self.failures.append(f"{type(exc).__name__}: {exc}")

    def made_progress_since(self, rounds: int, timeout: float) -> bool:
        """Waits (up to ``timeout`` s) for a round after ``rounds``; False if none came."""
        deadline = time.monotonic() + timeout
        while self.rounds <= rounds and time.monotonic() < deadline and not self.failures \
                and self.is_alive():
            time.sleep(0.01)
        return self.rounds > rounds

    def check(self, timeout: float = 5.0) -> None:
        """Assert no failure so far and a round done since the previous check."""
        progressed = self.made_progress_since(self._checked, timeout)
        assert not self.failures, self.failures
        assert self.is_alive()
        assert progressed, f"the {self.name} made no progress"
        self._checked = self.rounds

    def stop(self, timeout: float) -> None:
        self._halt.set()
        self.join(timeout)


def unexpected_log_lines(broker: KlogBroker) -> list[str]:
    """The broker log's lines that bad input must never cause: a traceback, or a handler
    failing on it ("unexpected error")."""
    log = broker.log_file.read_text(errors="replace")
    return [line for line in log.splitlines()
            if "Traceback" in line or "unexpected error" in line]


def requested_wait(frame: bytes | memoryview, names: Iterable[str], cap_ms: int
                   ) -> float | None:
    """Seconds a request (a frame's payload: header and body) asks the broker to wait
    before answering: the sum of its fields ``names`` (a fetch's max_wait, an admin
    request's timeout...), each capped at ``cap_ms``. None when it does not decode as a
    request the standalone broker serves (the broker then closes at once)."""
    try:
        header, offset = framing.parse_request_header(memoryview(frame),
                                                      apis.STANDALONE_ADVERTISED)
        request = apis.decode_request(header.api_key, header.api_version,
                                      memoryview(frame)[offset:])
    except Exception:
        return None
    total = 0.0
    for name in names:
        value = getattr(request, name, None)
        if value is not None:
            total += min(max(as_millis(value), 0), cap_ms) / 1000
    return total
