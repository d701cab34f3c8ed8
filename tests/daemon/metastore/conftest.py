"""Fixtures for the metadata-store tests: a real ZooKeeper (session-wide) and ``backend``,
which runs a test once on the local store and once on ZooKeeper."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from klog.daemon.metastore.base import MetadataStore, WatchedEvent
from klog.daemon.metastore.local import LocalMetadataStore
from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore
from tests.zkserver import ZooKeeperServer, zk_server  # noqa: F401 - the fixture


class Backend:
    """Opens stores on one backing tree (a directory, or a fresh chroot on the shared
    ZooKeeper); ``reopen`` ends a session and starts the next one on the same tree."""

    def __init__(self, kind: str, factory: Callable[[], MetadataStore]) -> None:
        self.kind = kind
        self.factory = factory
        self.opened: list[MetadataStore] = []

    def new(self) -> MetadataStore:
        """A store not yet started."""
        store = self.factory()
        self.opened.append(store)
        return store

    def open(self) -> MetadataStore:
        store = self.new()
        store.start()
        return store

    def reopen(self, store: MetadataStore) -> MetadataStore:
        store.close()
        return self.open()

    def close_all(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["local", "zookeeper"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        directory = tmp_path / "metastore"
        b = Backend("local", lambda: LocalMetadataStore(directory))
    else:
        zk: ZooKeeperServer = request.getfixturevalue("zk_server")
        connect = f"{zk.connect}/contract-{uuid.uuid4().hex[:12]}"
        b = Backend(
            "zookeeper",
            lambda: ZooKeeperMetadataStore(
                connect, session_timeout_ms=4000, connection_timeout_ms=10000
            ),
        )
    yield b
    b.close_all()


@pytest.fixture
def store(backend: Backend) -> MetadataStore:
    return backend.open()


class Recorder:
    """A thread-safe watcher / listener that remembers what it was told."""

    def __init__(self) -> None:
        self.events: list[WatchedEvent | str] = []
        self._cond = threading.Condition()

    def __call__(self, event: WatchedEvent | str) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait(self, count: int = 1, timeout: float = 10.0) -> list[WatchedEvent | str]:
        with self._cond:
            self._cond.wait_for(lambda: len(self.events) >= count, timeout)
            return list(self.events)


_barrier_ids = iter(range(1, 1_000_000))


def settle(store: MetadataStore) -> None:
    """Return once every watch event caused by earlier writes has been delivered.

    Both stores deliver events in order on one thread, so when a fresh watch on a
    barrier node has fired, everything before it has too."""
    path = f"/barrier-{next(_barrier_ids)}"
    r = Recorder()
    assert store.exists(path, r) is None
    store.create(path)
    assert r.wait(1), "barrier watch never fired"
    store.delete(path)
