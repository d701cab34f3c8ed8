"""ZooKeeperMetadataStore beyond the shared contract, on a real ZooKeeper: the connect
string and chroot, connection failures, session loss and expiry."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from klog.daemon.metastore.base import (
    ConnectionLossError,
    InvalidPathError,
    SessionExpiredError,
    WatchedEvent,
)
from klog.daemon.metastore.zookeeper import ZooKeeperMetadataStore, split_connect
from tests.zkserver import ZooKeeperServer, free_port, zookeeper_unavailable_reason

from .conftest import Recorder, settle


def test_split_connect() -> None:
    assert split_connect("a:1,b:2/kafka/prod") == ("a:1,b:2", "/kafka/prod")
    assert split_connect("a:1") == ("a:1", "")
    assert split_connect("a:1/") == ("a:1", "")
    with pytest.raises(InvalidPathError):
        split_connect("a:1/kafka//x")
    with pytest.raises(InvalidPathError):
        split_connect("a:1/kafka/")
    with pytest.raises(ValueError, match="names no server"):
        ZooKeeperMetadataStore("/kafka")


@pytest.fixture
def chroot() -> str:
    return f"/chroot-{uuid.uuid4().hex[:10]}/kafka"


def test_chroot_is_created_and_isolates(zk_server: ZooKeeperServer, chroot: str) -> None:
    root = ZooKeeperMetadataStore(zk_server.connect)
    store = ZooKeeperMetadataStore(zk_server.connect + chroot)
    root.start()
    try:
        assert root.exists(chroot) is None
        store.start()  # creates the chroot path, as Kafka does
        assert root.exists(chroot) is not None
        assert store.get_children("/") == []
        r = Recorder()
        store.get_children("/", watch=r)
        path = store.create("/brokers/seq-", b"x", sequential=True, make_parents=True)
        assert path == "/brokers/seq-0000000000"  # relative to the chroot
        assert root.get(chroot + path)[0] == b"x"
        settle(store)
        assert r.events == [WatchedEvent("CHILD", "/")]  # event paths are chroot-relative
        assert "zookeeper" in root.get_children("/")  # ZooKeeper's own subtree, outside
    finally:
        store.close()
        root.close()


def test_connection_refused_fails_fast() -> None:
    store = ZooKeeperMetadataStore(f"127.0.0.1:{free_port()}", connection_timeout_ms=700)
    started = time.monotonic()
    with pytest.raises(ConnectionLossError, match="could not connect"):
        store.start()
    assert time.monotonic() - started < 5
    with pytest.raises(SessionExpiredError):
        store.get("/")
    store.close()


def test_session_expiry_loses_ephemerals_and_reconnects(
    zk_server: ZooKeeperServer, chroot: str
) -> None:
    store = ZooKeeperMetadataStore(zk_server.connect + chroot, session_timeout_ms=4000)
    states = Recorder()
    store.add_session_listener(states)
    store.start()
    try:
        assert states.wait(1) == ["CONNECTED"]
        store.create("/brokers/ids/1", b"reg", ephemeral=True, make_parents=True)
        old_session = store.session_id
        watcher = Recorder()
        store.get("/brokers/ids/1", watch=watcher)

        # The classic way to expire a session: open it from a second client and close it.
        assert store._client is not None
        session_id, password = store._client.client_id
        thief = KazooClient(hosts=zk_server.connect, client_id=(session_id, password))
        thief.start(timeout=10)
        thief.stop()
        thief.close()

        seen = states.wait(4, timeout=15)
        assert "LOST" in seen and seen[-1] == "CONNECTED"
        deadline = time.monotonic() + 10
        while store.session_id in (0, old_session) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.session_id not in (0, old_session)
        assert store.exists("/brokers/ids/1") is None  # the old session's ephemeral
        # The re-registration a broker does on CONNECTED works on the new session.
        store.create("/brokers/ids/1", b"again", ephemeral=True)
        assert store.exists("/brokers/ids/1").ephemeral_owner == store.session_id  # type: ignore[union-attr]
        # The watch went with the old connection: it is not called with a non-znode event.
        assert all(isinstance(e, WatchedEvent) for e in watcher.events)
    finally:
        store.close()
    # close() ends quietly: no LOST for our own shutdown
    time.sleep(0.2)
    assert states.events[-1] == "CONNECTED"


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    reason = zookeeper_unavailable_reason()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    yield server
    server.stop()


def test_server_restart_suspends_then_reconnects_same_session(
    own_server: ZooKeeperServer,
) -> None:
    store = ZooKeeperMetadataStore(
        # The server's maximum session timeout: on a loaded machine (2 cores shared by
        # several test runs) a restarted server once expired a 20 s session on loading it.
        own_server.connect + "/kafka", session_timeout_ms=60000, request_timeout_ms=500
    )
    states = Recorder()
    store.add_session_listener(states)
    store.start()
    try:
        store.create("/controller", b"1", ephemeral=True)
        session = store.session_id
        lost_watch = Recorder()
        store.get("/controller", watch=lost_watch)

        marks = [f"kill {time.strftime('%H:%M:%S')}"]
        own_server.kill()
        assert states.wait(2, timeout=15)[:2] == ["CONNECTED", "SUSPENDED"]
        started = time.monotonic()
        with pytest.raises(ConnectionLossError):
            store.get("/controller")  # kazoo would hold it until the reconnection
        assert time.monotonic() - started < 5
        marks.append(f"start {time.strftime('%H:%M:%S')}")
        own_server.start()
        marks.append(f"serving {time.strftime('%H:%M:%S')}")
        seen = states.wait(3, timeout=60)
        marks.append(f"state 3 {time.strftime('%H:%M:%S')}")
        log_tail = own_server.log_path.read_text(errors="replace")[-4000:]
        assert seen[2:] == ["CONNECTED"], f"states {seen} {marks}; server log:\n{log_tail}"

        assert store.session_id == session  # resumed within the session timeout
        assert store.get("/controller")[1].ephemeral_owner == session
        store.set("/controller", b"2")
        settle(store)
        assert lost_watch.events == []  # watches do not survive a suspension (kazoo)
    finally:
        store.close()
