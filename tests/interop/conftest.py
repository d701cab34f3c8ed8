"""Shared fixtures for tests with real Kafka clients: one klog broker per test module.

A module that needs broker settings defines its own ``broker_overrides`` fixture (module
scope); ``broker`` starts one broker with them for the whole module and stops it
afterwards. ``topic`` gives each test a fresh topic name (auto-created by the broker on
first use, with ``num.partitions`` partitions).

The helpers read what the broker stored (``stored_batches``) so tests can check more than
what a client reports: e.g. that a batch really is compressed with the codec asked for.
"""

from __future__ import annotations

import re
import shutil
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from klog.protocol.records.batch import BatchHeader, iter_batch_headers
from klog.testing import KlogBroker

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas through importlib.resources' legacy API, with
    # a DeprecationWarning per schema: import it once here, quietly.
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka  # noqa: F401

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def broker_overrides() -> dict[str, str]:
    """Broker config for this module's broker; override in a module to change it."""
    return {}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory,
           broker_overrides: dict[str, str]) -> Iterator[KlogBroker]:
    data = tmp_path_factory.mktemp("klog") / "data"
    running = KlogBroker(data, overrides=broker_overrides)
    running.start()
    try:
        wait_until_serving(running)
        yield running
    finally:
        running.stop()


def wait_until_serving(broker: KlogBroker, topics: Iterable[str] = (),
                       timeout: float = 20.0) -> None:
    """Wait until the broker answers Metadata as the controller and leader of every
    partition of ``topics``.

    KlogBroker.start() returns as soon as the port takes connections, which the broker
    binds before its logs are loaded and its controller has elected leaders (requests wait
    until then). Tests that (re)start a broker and then check what it serves wait here, so
    that a slow start-up shows as its own clear failure rather than as a client timeout.
    """
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    wanted = list(topics)
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=5)
        ready = md.controller_id == 0 and all(
            t in md.topics and md.topics[t].error is None and md.topics[t].partitions
            and all(p.leader == 0 for p in md.topics[t].partitions.values())
            for t in wanted)
        if ready:
            return
        assert time.monotonic() < deadline, f"broker not serving {wanted} after {timeout} s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def bootstrap(broker: KlogBroker) -> str:
    return broker.bootstrap_servers


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name of this test's own (legal characters only, short enough)."""
    name = re.sub(r"[^a-zA-Z0-9._-]+", "-", request.node.name).strip("-")
    return f"t-{name}"[:200]


def stored_batches(log_dir: Path, topic: str, partition: int = 0) -> list[BatchHeader]:
    """The batch headers of every segment of ``topic-partition`` as the broker wrote them."""
    directory = log_dir / f"{topic}-{partition}"
    out: list[BatchHeader] = []
    for segment in sorted(directory.glob("*.log")):
        out.extend(iter_batch_headers(memoryview(segment.read_bytes())))
    return out
