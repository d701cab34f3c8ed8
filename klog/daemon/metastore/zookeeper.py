"""ZooKeeperMetadataStore: the MetadataStore contract on a real ZooKeeper ensemble (kazoo).

A thin translation layer: kazoo does the protocol, the session and the chroot; this module
validates paths exactly as local.py does (so both refuse the same input before anything is
sent), maps kazoo's exceptions, stats and watch events to ours, and makes the chroot exist
before the session uses it (as Kafka does at start-up).

Kazoo calls watchers on its callback thread and session listeners on its connection thread.
Kazoo drops every watch when the connection is suspended or lost (it notifies them with a
connection-state event, which is not a znode event and is swallowed here): consumers must
re-read and re-watch when their session listener hears ``CONNECTED`` again. After a session
expires kazoo reconnects with a new session (new ``session_id``; ephemerals are gone).
While disconnected, kazoo holds requests until it reconnects; each call here waits at most
``request_timeout_ms`` (default: the session timeout) and then raises ConnectionLossError.

The KazooClient is created by ``start`` and is itself thread-safe; ``self._lock`` only
guards the start/close transitions.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from kazoo import exceptions as kz
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.protocol.states import WatchedEvent as KazooWatchedEvent
from kazoo.protocol.states import ZnodeStat as KazooZnodeStat

from klog.daemon.metastore.base import (
    BadVersionError,
    ConnectionLossError,
    InvalidPathError,
    MetadataStore,
    MetastoreError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    Op,
    SessionExpiredError,
    SessionListener,
    WatchedEvent,
    Watcher,
    ZnodeStat,
    check_data,
    check_ops,
    join_path,
    log,
    validate_path,
)

_ERRORS: tuple[tuple[type[BaseException], type[MetastoreError], str], ...] = (
    (kz.NoNodeError, NoNodeError, "no node"),
    (kz.NodeExistsError, NodeExistsError, "node already exists"),
    (kz.BadVersionError, BadVersionError, "version mismatch"),
    (kz.NotEmptyError, NotEmptyError, "node has children"),
    (kz.NoChildrenForEphemeralsError, NoChildrenForEphemeralsError, "ephemeral parent"),
    (kz.BadArgumentsError, InvalidPathError, "bad arguments"),
    # ConnectionClosedError (the client was stopped) is a SessionExpiredError in kazoo.
    (kz.SessionExpiredError, SessionExpiredError, "session expired"),
    (kz.ConnectionLoss, ConnectionLossError, "connection lost"),
    (kz.ConnectionDropped, ConnectionLossError, "connection dropped"),
    (kz.OperationTimeoutError, ConnectionLossError, "operation timed out"),
    (KazooTimeoutError, ConnectionLossError, "timed out"),
)


def _translate(e: BaseException, path: str | None) -> MetastoreError:
    for kazoo_type, ours, what in _ERRORS:
        if isinstance(e, kazoo_type):
            where = f" at {path}" if path else ""
            return ours(f"{what}{where}", path)
    return MetastoreError(f"ZooKeeper error{' at ' + path if path else ''}: {e!r}", path)


def _stat(s: KazooZnodeStat) -> ZnodeStat:
    return ZnodeStat(
        czxid=s.czxid,
        mzxid=s.mzxid,
        pzxid=s.pzxid,
        ctime=s.ctime,
        mtime=s.mtime,
        version=s.version,
        cversion=s.cversion,
        ephemeral_owner=s.ephemeralOwner,
        data_length=s.dataLength,
        num_children=s.numChildren,
    )


class _WatchAdapter:
    """Wraps our watcher for kazoo. Equal to any adapter of the same watcher, so kazoo's
    per-path watcher sets keep one copy of it."""

    __slots__ = ("dedup", "watcher")

    def __init__(self, watcher: Watcher, dedup: _EventDedup) -> None:
        self.watcher = watcher
        self.dedup = dedup

    def __call__(self, event: KazooWatchedEvent) -> None:
        if event.type not in ("CREATED", "DELETED", "CHANGED", "CHILD"):
            return  # a connection-state notice: the watch is simply gone
        if self.dedup.first_delivery(event, self.watcher):
            self.watcher(WatchedEvent(event.type, event.path))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _WatchAdapter) and other.watcher == self.watcher

    def __hash__(self) -> int:
        return hash(self.watcher)


class _EventDedup:
    """ZooKeeper calls a watcher once per event even when it was left as both a data and a
    child watch on the deleted node; kazoo calls it once per registration. Kazoo hands the
    same event object to all of an event's watchers, one after another on its callback
    thread, so remembering the watchers served for the latest event object is enough."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event: object = None
        self._served: list[Watcher] = []

    def first_delivery(self, event: object, watcher: Watcher) -> bool:
        with self._lock:
            if event is not self._event:
                self._event, self._served = event, []
            if watcher in self._served:
                return False
            self._served.append(watcher)
            return True


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/kafka"`` -> ``("h1:2181,h2:2181", "/kafka")``; chroot may be ""."""
    i = connect.find("/")
    if i < 0:
        return connect, ""
    hosts, chroot = connect[:i], connect[i:]
    if chroot == "/":
        return hosts, ""
    validate_path(chroot)
    return hosts, chroot


class ZooKeeperMetadataStore(MetadataStore):
    """MetadataStore on ZooKeeper, e.g. ``ZooKeeperMetadataStore("127.0.0.1:2181/kafka")``."""

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = 18000,
        connection_timeout_ms: int = 18000,
        request_timeout_ms: int | None = None,
    ) -> None:
        self.connect = connect
        self.hosts, self.chroot = split_connect(connect)
        if not self.hosts:
            raise ValueError(f"zookeeper.connect {connect!r} names no server")
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms
        # Kazoo queues a request while disconnected and would wait for the reconnection
        # forever; past the session timeout the session is as good as gone anyway.
        self.request_timeout_ms = request_timeout_ms or session_timeout_ms
        self._client: KazooClient | None = None
        self._listeners: list[SessionListener] = []
        self._closing = False
        self._lock = threading.Lock()
        self._dedup = _EventDedup()

    # The base class declares a plain attribute; here it is read from the live client.
    @property
    def session_id(self) -> int:  # type: ignore[override]
        client = self._client
        if client is None or client.client_id is None:
            return 0
        return int(client.client_id[0])

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._client is not None:
                return
            self._closing = False
            if self.chroot:
                self._ensure_chroot()
            client = self._new_client(self.connect)
            client.add_listener(self._on_state)
            self._start_client(client)
            self._client = client

    def _new_client(self, hosts: str) -> KazooClient:
        return KazooClient(
            hosts=hosts,
            timeout=self.session_timeout_ms / 1000,
            # Reconnect forever: losing ZooKeeper for a while must not end the broker.
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 2},
            logger=log,
        )

    def _start_client(self, client: KazooClient) -> None:
        try:
            client.start(timeout=self.connection_timeout_ms / 1000)
        except KazooTimeoutError:
            client.stop()
            client.close()
            raise ConnectionLossError(
                f"could not connect to ZooKeeper at {self.hosts} within "
                f"{self.connection_timeout_ms} ms"
            ) from None

    def _ensure_chroot(self) -> None:
        bootstrap = self._new_client(self.hosts)
        self._start_client(bootstrap)
        try:
            bootstrap.ensure_path(self.chroot)
        except kz.KazooException as e:
            raise _translate(e, self.chroot) from e
        finally:
            bootstrap.stop()
            bootstrap.close()

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            if client is None:
                return
            # Kazoo reports LOST when stopped; our contract says close() is silent.
            self._closing = True
        try:
            client.stop()
        finally:
            client.close()

    def add_session_listener(self, cb: SessionListener) -> None:
        self._listeners.append(cb)

    def _on_state(self, state: str) -> None:
        if self._closing:
            return
        name = {KazooState.CONNECTED: "CONNECTED", KazooState.SUSPENDED: "SUSPENDED"}.get(
            state, "LOST"
        )
        for cb in list(self._listeners):
            try:
                cb(name)
            except Exception:
                log.exception("metadata-store session listener failed")

    # --- operations ---------------------------------------------------------------------

    def _call(self, path: str | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one of kazoo's ``*_async`` calls and wait for it, at most the request timeout.

        On a timeout the request may still be applied later, which is exactly what
        ConnectionLossError means in ZooKeeper."""
        try:
            return fn(*args, **kwargs).get(timeout=self.request_timeout_ms / 1000)
        except KazooTimeoutError:
            where = f" for {path}" if path else ""
            raise ConnectionLossError(
                f"no answer from ZooKeeper within {self.request_timeout_ms} ms{where} "
                "(connection lost?)",
                path,
            ) from None
        except kz.KazooException as e:
            raise _translate(e, path) from e

    def _kazoo(self) -> KazooClient:
        client = self._client
        if client is None:
            raise SessionExpiredError("the ZooKeeper metadata store is not started (or closed)")
        return client

    def _create(self, path: str, data: bytes, ephemeral: bool, sequential: bool,
                make_parents: bool) -> str:
        client = self._kazoo()
        created: str = self._call(  # the created path (kazoo is untyped)
            path, client.create_async, path, data,
            ephemeral=ephemeral, sequence=sequential, makepath=make_parents,
        )
        return created

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, ZnodeStat]:
        validate_path(path)
        client = self._kazoo()
        data, stat = self._call(path, client.get_async, path, watch=self._adapt(watch))
        return (data or b""), _stat(stat)

    def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        validate_path(path)
        data = check_data(data, path)
        client = self._kazoo()
        return _stat(self._call(path, client.set_async, path, data, version))

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        validate_path(path)
        if path == "/":
            raise InvalidPathError("the root node cannot be deleted", path)
        client = self._kazoo()
        if recursive:
            # Not atomic in ZooKeeper: check the version first so a mismatch deletes
            # nothing, then children bottom-up, then the node itself (with the version).
            stat = self._call(path, client.exists_async, path)
            if stat is None:
                raise NoNodeError(f"no node at {path}", path)
            if version != -1 and stat.version != version:
                raise BadVersionError(f"version mismatch at {path}", path)
            self._delete_children(client, path)
        self._call(path, client.delete_async, path, version)

    def _delete_children(self, client: KazooClient, path: str) -> None:
        try:
            children = self._call(path, client.get_children_async, path)
        except NoNodeError:
            return
        for name in children:
            child = join_path(path, name)
            self._delete_children(client, child)
            with contextlib.suppress(NoNodeError):  # someone else deleted it meanwhile
                self._call(child, client.delete_async, child)

    def exists(self, path: str, watch: Watcher | None = None) -> ZnodeStat | None:
        validate_path(path)
        client = self._kazoo()
        stat = self._call(path, client.exists_async, path, watch=self._adapt(watch))
        return None if stat is None else _stat(stat)

    def sync(self, path: str) -> None:
        validate_path(path)
        client = self._kazoo()
        self._call(path, client.sync_async, path)

    def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        validate_path(path)
        client = self._kazoo()
        children = self._call(path, client.get_children_async, path, watch=self._adapt(watch))
        return sorted(children)

    def multi(self, ops: Sequence[Op]) -> list[str | ZnodeStat | None]:
        ops = check_ops(ops)
        if not ops:
            return []
        client = self._kazoo()
        txn = client.transaction()
        for op in ops:
            if op.kind == "check":
                txn.check(op.path, op.version)
            elif op.kind == "create":
                txn.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
            elif op.kind == "set":
                txn.set_data(op.path, op.data, op.version)
            elif op.kind == "delete":
                txn.delete(op.path, op.version)
            else:
                raise ValueError(f"unknown multi operation {op.kind!r}")
        results = self._call(None, txn.commit_async)
        self._raise_first_failure(ops, results)
        out: list[str | ZnodeStat | None] = []
        for op, r in zip(ops, results, strict=True):
            if op.kind == "create":
                out.append(r)
            elif op.kind == "set":
                out.append(_stat(r))
            else:
                out.append(None)
        return out

    @staticmethod
    def _raise_first_failure(ops: list[Op], results: list[Any]) -> None:
        # A failed multi reports the real error on the failing op and RolledBack /
        # RuntimeInconsistency on the others.
        first: tuple[BaseException, str] | None = None
        for op, r in zip(ops, results, strict=True):
            if not isinstance(r, BaseException):
                continue
            if isinstance(r, kz.RolledBackError | kz.RuntimeInconsistency):
                first = first or (r, op.path)
                continue
            _fail(r, op.path)
        if first is not None:
            _fail(*first)

    def _adapt(self, watch: Watcher | None) -> _WatchAdapter | None:
        return None if watch is None else _WatchAdapter(watch, self._dedup)


def _fail(e: BaseException, path: str) -> NoReturn:
    raise _translate(e, path) from e
