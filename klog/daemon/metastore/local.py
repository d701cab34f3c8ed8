"""LocalMetadataStore: ZooKeeper's data model in one local directory (standalone mode).

Owns the directory given to it:

    .lock              flock'ed while a store is open, holds the owner's pid
    snapshot           the whole tree at some zxid (replaced atomically: tmp, fsync, rename,
                       directory fsync)
    journal            transactions after that zxid, appended and fsync'ed before a write
                       is acknowledged
    journal.torn.<n>   a torn journal tail moved aside at start-up (kept, never deleted)

File formats (big-endian; parsed in local_format.py, which offline readers use too):

    snapshot: b"KLOGMSS1" | u64 payload length | u32 crc32(payload) | payload
    journal:  b"KLOGMSJ1" | records...
    record:   u32 payload length | u32 crc32(payload) | payload
    payloads: compact JSON. A snapshot is {"zxid", "nodes": [[path, data(base64), czxid,
              mzxid, pzxid, ctime, mtime, version, creates, ephemeral_owner], ...]} with
              parents before children; a record is {"z": zxid, "t": time_ms, "ops": [...]}
              with resolved operations ["c", path, data, owner] / ["s", path, data] /
              ["d", path], so replaying them rebuilds identical stats.

Recovery: load the snapshot, replay journal records above its zxid. A damaged record with
no valid record after it is a torn tail (a write that was never acknowledged): it is moved
aside with a warning and the journal truncated there. A damaged record followed by valid
ones is real corruption: the store refuses to open and changes nothing. Ephemeral nodes
found at start-up belong to a dead session and are deleted in one journaled transaction,
as ZooKeeper does when a session expires; zxids keep growing across restarts.

Every write holds ``self._lock`` (an RLock) from validation to fsync, so no reader sees a
change that is not yet durable. Watchers and session listeners run on one event thread
("klog-metastore-events"), in commit order, never under the lock.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import functools
import json
import os
import queue
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from klog.daemon.metastore.base import (
    BadVersionError,
    EventType,
    InvalidPathError,
    MetadataStore,
    MetastoreCorruptError,
    MetastoreError,
    MetastoreLockedError,
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
    parent_path,
    sequential_name,
    validate_path,
)
from klog.daemon.metastore.local_format import (
    JOURNAL_MAGIC,
    RECORD_HEADER,
    SNAPSHOT_HEADER,
    SNAPSHOT_MAGIC,
    parse_record,
    parse_snapshot,
)

_R = TypeVar("_R")
DEFAULT_SNAPSHOT_BYTES = 1024 * 1024

_JournalOp = list[Any]


class _Node:
    __slots__ = (
        "children",
        "ctime",
        "cversion",
        "czxid",
        "data",
        "ephemeral_owner",
        "mtime",
        "mzxid",
        "pzxid",
        "version",
    )

    def __init__(self, data: bytes, zxid: int, time_ms: int, ephemeral_owner: int) -> None:
        self.data = data
        self.czxid = self.mzxid = self.pzxid = zxid
        self.ctime = self.mtime = time_ms
        self.version = 0
        self.cversion = 0  # children ever created here: the next sequential suffix
        self.ephemeral_owner = ephemeral_owner
        self.children: set[str] = set()

    def stat(self) -> ZnodeStat:
        return ZnodeStat(
            czxid=self.czxid,
            mzxid=self.mzxid,
            pzxid=self.pzxid,
            ctime=self.ctime,
            mtime=self.mtime,
            version=self.version,
            # ZooKeeper counts child creates and derives the changes it reports: every
            # child not there any more was deleted once (DataNode.copyStat).
            cversion=2 * self.cversion - len(self.children),
            ephemeral_owner=self.ephemeral_owner,
            data_length=len(self.data),
            num_children=len(self.children),
        )


class _Txn:
    """One transaction in flight: its zxid, the resolved ops to journal, the undo steps to
    roll back the in-memory tree, and the watch events to fire once it is durable."""

    def __init__(self, zxid: int, time_ms: int) -> None:
        self.zxid = zxid
        self.time_ms = time_ms
        self.ops: list[_JournalOp] = []
        self.undo: list[Callable[[], None]] = []
        self.events: list[tuple[EventType, str]] = []  # (event type, path)

    def rollback(self) -> None:
        for step in reversed(self.undo):
            step()
        self.undo.clear()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ValueError("data is not a base64 string")
    return base64.b64decode(text.encode("ascii"), validate=True)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalMetadataStore(MetadataStore):
    """A file-backed, durable, thread-safe MetadataStore for a cluster of one.

    All state is guarded by ``self._lock``; see the module docstring for the files.
    """

    def __init__(
        self, directory: Path | str, *, snapshot_bytes: int = DEFAULT_SNAPSHOT_BYTES
    ) -> None:
        self.directory = Path(directory)
        self.snapshot_bytes = snapshot_bytes
        self.session_id = 0
        self._lock = threading.RLock()
        self._nodes: dict[str, _Node] = {}
        self._zxid = 0
        self._started = False
        self._failed: str | None = None  # why writes are refused after a journal I/O error
        self._lock_fd: int | None = None
        self._journal_fd: int | None = None
        self._journal_size = 0
        self._data_watches: dict[str, set[Watcher]] = {}
        self._child_watches: dict[str, set[Watcher]] = {}
        self._listeners: list[SessionListener] = []
        self._events: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._event_thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------

    @property
    def last_zxid(self) -> int:
        with self._lock:
            return self._zxid

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._acquire_dir_lock()
            except OSError as e:
                raise MetastoreError(f"cannot open metadata directory {self.directory}: {e}") from e
            self._failed = None
            try:
                self._events = queue.SimpleQueue()
                self._recover()
                self._open_journal()
                self.session_id = secrets.randbits(63) | 1
                self._expire_dead_ephemerals()
                if self._journal_size > self.snapshot_bytes:
                    self._write_snapshot()
            except OSError as e:
                self._close_files()
                raise MetastoreError(f"cannot open metadata directory {self.directory}: {e}") from e
            except BaseException:
                self._close_files()
                raise
            self._started = True
            # Each session gets its own queue, so a thread still draining the previous
            # session's events can never take this one's.
            self._event_thread = threading.Thread(
                target=self._run_events, args=(self._events,), name="klog-metastore-events",
                daemon=True,
            )
            self._event_thread.start()
            for cb in list(self._listeners):
                self._events.put(functools.partial(cb, "CONNECTED"))

    def close(self) -> None:
        with self._lock:
            if not self._started:
                return
            # Our own watches are dropped, not fired, as with a closing ZooKeeper client.
            self._data_watches.clear()
            self._child_watches.clear()
            try:
                if self._failed is None:
                    sid = self.session_id
                    own = [p for p, n in self._nodes.items() if n.ephemeral_owner == sid]
                    if own:
                        self._write(lambda txn: self._delete_nodes(txn, own))
                    if self._journal_size > self.snapshot_bytes:
                        self._write_snapshot()
            except (MetastoreError, OSError) as e:
                # Shutting down anyway: the next start removes these ephemerals and replays
                # the journal.
                log.warning("metadata store %s: clean close failed: %s", self.directory, e)
            finally:
                self._started = False
                self._close_files()
                thread, self._event_thread = self._event_thread, None
                self._events.put(None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _close_files(self) -> None:
        if self._journal_fd is not None:
            os.close(self._journal_fd)
            self._journal_fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def _acquire_dir_lock(self) -> None:
        lock_path = self.directory / ".lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                owner = f" (pid {holder})" if holder else ""
                raise MetastoreLockedError(
                    f"metadata directory {self.directory} is in use by another broker{owner}; "
                    "two brokers cannot share one metadata directory"
                ) from None
            raise MetastoreError(f"cannot lock {lock_path}: {e}") from e
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def add_session_listener(self, cb: SessionListener) -> None:
        with self._lock:
            self._listeners.append(cb)

    # --- reads --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._started:
            raise SessionExpiredError("the local metadata store is not started (or closed)")

    def _existing(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(f"no node {path}", path)
        return node

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, ZnodeStat]:
        validate_path(path)
        with self._lock:
            self._check_open()
            node = self._existing(path)
            if watch is not None:
                self._data_watches.setdefault(path, set()).add(watch)
            return node.data, node.stat()

    def exists(self, path: str, watch: Watcher | None = None) -> ZnodeStat | None:
        validate_path(path)
        with self._lock:
            self._check_open()
            if watch is not None:
                self._data_watches.setdefault(path, set()).add(watch)
            node = self._nodes.get(path)
            return None if node is None else node.stat()

    def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        validate_path(path)
        with self._lock:
            self._check_open()
            node = self._existing(path)
            if watch is not None:
                self._child_watches.setdefault(path, set()).add(watch)
            return sorted(node.children)

    # --- writes -------------------------------------------------------------------------

    def _create(self, path: str, data: bytes, ephemeral: bool, sequential: bool,
                make_parents: bool) -> str:
        return self._write(
            lambda txn: self._do_create(txn, path, data, ephemeral, sequential, make_parents)
        )

    def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        validate_path(path)
        data = check_data(data, path)
        return self._write(lambda txn: self._do_set(txn, path, data, version))

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        validate_path(path)
        if path == "/":
            raise InvalidPathError("the root node cannot be deleted", path)
        self._write(lambda txn: self._do_delete(txn, path, version, recursive))

    def multi(self, ops: Sequence[Op]) -> list[str | ZnodeStat | None]:
        prepared = check_ops(ops)

        def apply(txn: _Txn) -> list[str | ZnodeStat | None]:
            results: list[str | ZnodeStat | None] = []
            for op in prepared:
                if op.kind == "check":
                    node = self._nodes.get(op.path)
                    if node is None:
                        raise NoNodeError(f"no node {op.path}", op.path)
                    self._check_version(node, op.path, op.version)
                    results.append(None)
                elif op.kind == "create":
                    results.append(
                        self._do_create(txn, op.path, op.data, op.ephemeral, op.sequential, False)
                    )
                elif op.kind == "set":
                    results.append(self._do_set(txn, op.path, op.data, op.version))
                elif op.kind == "delete":
                    self._do_delete(txn, op.path, op.version, False)
                    results.append(None)
                else:
                    raise ValueError(f"unknown multi operation {op.kind!r}")
            return results

        return self._write(apply)

    def _write(self, fn: Callable[[_Txn], _R]) -> _R:
        with self._lock:
            self._check_open()
            if self._failed is not None:
                raise MetastoreError(
                    f"metadata store is read-only after an I/O error: {self._failed}"
                )
            txn = _Txn(self._zxid + 1, _now_ms())
            try:
                result = fn(txn)
            except BaseException:
                txn.rollback()
                raise
            if txn.ops:
                try:
                    self._append_record(txn)
                except OSError as e:
                    txn.rollback()
                    raise MetastoreError(f"cannot write the metadata journal: {e}") from e
                self._zxid = txn.zxid
                self._fire(txn.events)
                if self._journal_size > self.snapshot_bytes:
                    try:
                        self._write_snapshot()
                    except OSError as e:
                        # The write above is durable in the journal; compaction retries later.
                        log.warning("metadata snapshot in %s failed: %s", self.directory, e)
            return result

    @staticmethod
    def _check_version(node: _Node, path: str, version: int) -> None:
        if version != -1 and version != node.version:
            raise BadVersionError(
                f"version mismatch on {path}: expected {version}, found {node.version}", path
            )

    def _do_create(
        self,
        txn: _Txn,
        path: str,
        data: bytes,
        ephemeral: bool,
        sequential: bool,
        make_parents: bool,
    ) -> str:
        parent = parent_path(path)
        parent_node = self._nodes.get(parent)
        if parent_node is None:
            if not make_parents:
                raise NoNodeError(f"parent {parent} of {path} does not exist", parent)
            self._create_parents(txn, parent)
            parent_node = self._nodes[parent]
        if parent_node.ephemeral_owner:
            raise NoChildrenForEphemeralsError(
                f"{parent} is ephemeral and cannot have children", parent
            )
        final = sequential_name(path, parent_node.cversion) if sequential else path
        if final in self._nodes:
            raise NodeExistsError(f"node {final} already exists", final)
        owner = self.session_id if ephemeral else 0
        self._apply_create(final, data, owner, txn)
        return final

    def _create_parents(self, txn: _Txn, path: str) -> None:
        missing = []
        while path not in self._nodes:
            missing.append(path)
            path = parent_path(path)
        if self._nodes[path].ephemeral_owner:
            raise NoChildrenForEphemeralsError(
                f"{path} is ephemeral and cannot have children", path
            )
        for p in reversed(missing):
            self._apply_create(p, b"", 0, txn)

    def _do_set(self, txn: _Txn, path: str, data: bytes, version: int) -> ZnodeStat:
        node = self._existing(path)
        self._check_version(node, path, version)
        self._apply_set(path, data, txn)
        return node.stat()

    def _do_delete(self, txn: _Txn, path: str, version: int, recursive: bool) -> None:
        node = self._existing(path)
        self._check_version(node, path, version)
        if node.children and not recursive:
            raise NotEmptyError(f"node {path} has children", path)
        self._delete_nodes(txn, self._subtree_post_order(path))

    def _subtree_post_order(self, path: str) -> list[str]:
        out: list[str] = []
        stack = [(path, False)]
        while stack:
            p, expanded = stack.pop()
            if expanded:
                out.append(p)
                continue
            stack.append((p, True))
            for name in sorted(self._nodes[p].children):
                stack.append((join_path(p, name), False))
        return out

    def _delete_nodes(self, txn: _Txn, paths: list[str]) -> None:
        for p in paths:
            self._apply_delete(p, txn)

    # --- primitive mutations (shared by live writes and journal replay) ----------------

    def _apply_create(self, path: str, data: bytes, owner: int, txn: _Txn | None,
                      zxid: int = 0, time_ms: int = 0) -> None:
        if txn is not None:
            zxid, time_ms = txn.zxid, txn.time_ms
        parent = parent_path(path)
        parent_node = self._nodes[parent]
        name = path[len(parent):].lstrip("/")
        old_cversion, old_pzxid = parent_node.cversion, parent_node.pzxid
        self._nodes[path] = _Node(data, zxid, time_ms, owner)
        parent_node.children.add(name)
        parent_node.cversion += 1
        parent_node.pzxid = zxid
        if txn is not None:
            def undo() -> None:
                del self._nodes[path]
                parent_node.children.discard(name)
                parent_node.cversion, parent_node.pzxid = old_cversion, old_pzxid

            txn.undo.append(undo)
            txn.ops.append(["c", path, _b64(data), owner])
            txn.events.append(("CREATED", path))
            txn.events.append(("CHILD", parent))

    def _apply_set(self, path: str, data: bytes, txn: _Txn | None,
                   zxid: int = 0, time_ms: int = 0) -> None:
        if txn is not None:
            zxid, time_ms = txn.zxid, txn.time_ms
        node = self._nodes[path]
        old = (node.data, node.mzxid, node.mtime, node.version)
        node.data, node.mzxid, node.mtime = data, zxid, time_ms
        node.version += 1
        if txn is not None:
            def undo() -> None:
                node.data, node.mzxid, node.mtime, node.version = old

            txn.undo.append(undo)
            txn.ops.append(["s", path, _b64(data)])
            txn.events.append(("CHANGED", path))

    def _apply_delete(self, path: str, txn: _Txn | None, zxid: int = 0) -> None:
        if txn is not None:
            zxid = txn.zxid
        parent = parent_path(path)
        parent_node = self._nodes[parent]
        name = path[len(parent):].lstrip("/")
        node = self._nodes.pop(path)
        old_pzxid = parent_node.pzxid
        parent_node.children.discard(name)
        parent_node.pzxid = zxid
        if txn is not None:
            def undo() -> None:
                self._nodes[path] = node
                parent_node.children.add(name)
                parent_node.pzxid = old_pzxid

            txn.undo.append(undo)
            txn.ops.append(["d", path])
            txn.events.append(("DELETED", path))
            txn.events.append(("CHILD", parent))

    # --- watches ------------------------------------------------------------------------

    def _fire(self, events: list[tuple[EventType, str]]) -> None:
        """Pop the watchers each committed event triggers (ZooKeeper's server-side rules)
        and queue them for the event thread. Caller holds the lock."""
        for kind, path in events:
            if kind in ("CREATED", "CHANGED"):
                watchers = self._data_watches.pop(path, set())
            elif kind == "DELETED":
                watchers = self._data_watches.pop(path, set())
                watchers |= self._child_watches.pop(path, set())
            else:  # CHILD
                watchers = self._child_watches.pop(path, set())
            if watchers:
                event = WatchedEvent(kind, path)
                for w in watchers:
                    self._events.put(functools.partial(w, event))

    @staticmethod
    def _run_events(events: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while True:
            item = events.get()
            if item is None:
                return
            try:
                item()
            except Exception:
                log.exception("metadata-store watcher or session listener failed")

    # --- journal ------------------------------------------------------------------------

    def _open_journal(self) -> None:
        path = self.directory / "journal"
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(fd).st_size
        if size == 0:
            os.write(fd, JOURNAL_MAGIC)
            os.fsync(fd)
            size = len(JOURNAL_MAGIC)
        if created:
            _fsync_dir(self.directory)
        self._journal_fd = fd
        self._journal_size = size

    def _append_record(self, txn: _Txn) -> None:
        assert self._journal_fd is not None
        payload = json.dumps(
            {"z": txn.zxid, "t": txn.time_ms, "ops": txn.ops}, separators=(",", ":")
        ).encode("ascii")
        frame = RECORD_HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        start = self._journal_size
        try:
            written = os.write(self._journal_fd, frame)
            if written != len(frame):
                raise OSError(errno.EIO, f"short write ({written} of {len(frame)} bytes)")
            os.fdatasync(self._journal_fd)
        except OSError as e:
            # After a failed write or fsync the file's state is unknown: cut the partial
            # record off if we can, and take no more writes this session.
            with contextlib.suppress(OSError):
                os.ftruncate(self._journal_fd, start)
            self._failed = str(e)
            raise
        self._journal_size = start + len(frame)

    def _write_snapshot(self) -> None:
        assert self._journal_fd is not None
        nodes = []
        for path in self._subtree_pre_order():
            n = self._nodes[path]
            nodes.append([path, _b64(n.data), n.czxid, n.mzxid, n.pzxid, n.ctime, n.mtime,
                          n.version, n.cversion, n.ephemeral_owner])
        payload = json.dumps({"zxid": self._zxid, "nodes": nodes}, separators=(",", ":"))
        body = payload.encode("ascii")
        tmp = self.directory / "snapshot.tmp"
        with open(tmp, "wb") as f:
            f.write(SNAPSHOT_MAGIC + SNAPSHOT_HEADER.pack(len(body), zlib.crc32(body)) + body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / "snapshot")
        _fsync_dir(self.directory)
        # The snapshot now holds everything the journal did; a crash before this truncate
        # just replays records the snapshot already covers (skipped by zxid).
        os.ftruncate(self._journal_fd, len(JOURNAL_MAGIC))
        os.fsync(self._journal_fd)
        self._journal_size = len(JOURNAL_MAGIC)

    def _subtree_pre_order(self) -> list[str]:
        out: list[str] = []
        stack = ["/"]
        while stack:
            p = stack.pop()
            out.append(p)
            for name in sorted(self._nodes[p].children, reverse=True):
                stack.append(join_path(p, name))
        return out

    # --- recovery -----------------------------------------------------------------------

    def _recover(self) -> None:
        root = _Node(b"", 0, 0, 0)
        self._nodes = {"/": root}
        self._zxid = 0
        snapshot = self.directory / "snapshot"
        if snapshot.exists():
            self._load_snapshot(snapshot)
        journal = self.directory / "journal"
        if journal.exists():
            self._replay_journal(journal)

    def _load_snapshot(self, path: Path) -> None:
        try:
            zxid, entries = parse_snapshot(path.read_bytes())
            for e in entries:
                self._load_snapshot_node(e)
        except (ValueError, KeyError, TypeError, IndexError, RecursionError) as e:
            raise MetastoreCorruptError(
                f"metadata snapshot {path} is damaged ({str(e) or type(e).__name__}); "
                "nothing was changed") from None
        self._zxid = zxid

    def _load_snapshot_node(self, e: Any) -> None:
        if not isinstance(e, list) or len(e) != 10:
            raise ValueError("node entry is not a 10-item list")
        path, data, *numbers = e
        if not isinstance(path, str) or not all(type(x) is int for x in numbers):
            raise ValueError(f"bad node entry for {path!r}")
        validate_path(path)
        node = _Node(_unb64(data), 0, 0, 0)
        (node.czxid, node.mzxid, node.pzxid, node.ctime, node.mtime, node.version,
         node.cversion, node.ephemeral_owner) = numbers
        if path == "/":
            node.children = self._nodes["/"].children
            self._nodes["/"] = node
            return
        parent = parent_path(path)
        if parent not in self._nodes or path in self._nodes:
            raise ValueError(f"node {path} out of order or duplicated")
        self._nodes[path] = node
        self._nodes[parent].children.add(path[len(parent):].lstrip("/"))

    def _replay_journal(self, path: Path) -> None:
        raw = path.read_bytes()
        if not raw:
            return
        magic_len = len(JOURNAL_MAGIC)
        if raw[:magic_len] != JOURNAL_MAGIC[: len(raw)]:
            raise MetastoreCorruptError(f"{path} is not a klog metadata journal; nothing changed")
        if len(raw) < magic_len:  # torn while being created
            self._drop_torn_tail(path, raw, 0, "incomplete header")
            return
        view = memoryview(raw)
        pos = magic_len
        while pos < len(raw):
            record, why = parse_record(view, pos)
            if record is None:
                following = self._find_valid_record(raw, pos + 1)
                if following is not None:
                    raise MetastoreCorruptError(
                        f"metadata journal {path} is damaged at byte {pos} ({why}) but valid "
                        f"records follow at byte {following}; refusing to start, nothing was "
                        "changed"
                    )
                self._drop_torn_tail(path, raw, pos, why)
                return
            length, doc = record
            try:
                self._replay_record(doc)
            except (ValueError, KeyError, TypeError, IndexError) as e:
                raise MetastoreCorruptError(
                    f"metadata journal {path}: record at byte {pos} cannot be applied ({e}); "
                    "nothing was changed"
                ) from None
            pos += RECORD_HEADER.size + length

    @classmethod
    def _find_valid_record(cls, raw: bytes, start: int) -> int | None:
        """The offset of the first intact record at or after ``start``, if any.

        Every payload begins with b'{"z":', so candidates are found by that pattern and
        confirmed by length and checksum; linear in the damaged tail."""
        view = memoryview(raw)
        needle = b'{"z":'
        k = raw.find(needle, start + RECORD_HEADER.size)
        while k != -1:
            header_at = k - RECORD_HEADER.size
            record, _ = parse_record(view, header_at)
            if record is not None:
                return header_at
            k = raw.find(needle, k + 1)
        return None

    def _drop_torn_tail(self, path: Path, raw: bytes, pos: int, why: str) -> None:
        aside = self.directory / f"journal.torn.{pos}"
        n = 1
        while aside.exists():
            aside = self.directory / f"journal.torn.{pos}.{n}"
            n += 1
        with open(aside, "wb") as f:
            f.write(raw[pos:])
            f.flush()
            os.fsync(f.fileno())
        with open(path, "r+b") as f:
            f.truncate(pos)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(self.directory)
        log.warning(
            "metadata journal %s: dropped a torn tail of %d bytes at byte %d (%s), an "
            "unacknowledged write; the bytes were moved to %s",
            path, len(raw) - pos, pos, why, aside,
        )

    def _replay_record(self, doc: dict[str, Any]) -> None:
        zxid, time_ms, ops = doc["z"], doc["t"], doc["ops"]
        if type(zxid) is not int or type(time_ms) is not int or not isinstance(ops, list):
            raise ValueError("bad record fields")
        if zxid <= self._zxid:
            return  # already in the snapshot
        for op in ops:
            kind, p = op[0], op[1]
            if not isinstance(p, str):
                raise ValueError("path is not a string")
            if kind == "c":
                owner = op[3]
                if type(owner) is not int:
                    raise ValueError("bad ephemeral owner")
                if p in self._nodes or p == "/" or parent_path(p) not in self._nodes:
                    raise ValueError(f"create of {p} does not fit the tree")
                self._apply_create(p, _unb64(op[2]), owner, None, zxid, time_ms)
            elif kind == "s":
                if p not in self._nodes:
                    raise ValueError(f"set of missing {p}")
                self._apply_set(p, _unb64(op[2]), None, zxid, time_ms)
            elif kind == "d":
                node = self._nodes.get(p)
                if node is None or node.children or p == "/":
                    raise ValueError(f"delete of {p} does not fit the tree")
                self._apply_delete(p, None, zxid)
            else:
                raise ValueError(f"unknown operation {kind!r}")
        self._zxid = zxid

    def _expire_dead_ephemerals(self) -> None:
        dead = [p for p, n in self._nodes.items() if n.ephemeral_owner]
        if dead:
            # Ephemerals never have children, so any order works.
            self._started = True  # _write requires an open store
            try:
                self._write(lambda txn: self._delete_nodes(txn, dead))
            finally:
                self._started = False
            log.info("metadata store: removed %d ephemeral nodes of ended sessions", len(dead))
