"""The MetadataStore contract: ZooKeeper's data model, shared by zookeeper.py and local.py.

A metadata store is a tree of znodes, each holding a small byte payload and a ``ZnodeStat``.
Both implementations follow ZooKeeper's rules, so code written against this interface (the
broker's registration, the controller) behaves the same in standalone and cluster mode:

- Paths are absolute, ``/``-separated, without empty, ``.`` or ``..`` components, trailing
  ``/`` or forbidden characters (``validate_path`` mirrors ZooKeeper's PathUtils). Bad paths
  raise ``InvalidPathError`` before anything is sent or written.
- A create needs its parent (``NoNodeError``) unless ``make_parents``; an ephemeral node can
  have no children (``NoChildrenForEphemeralsError``); a delete needs an empty node
  (``NotEmptyError``) unless ``recursive``. Versions are compare-and-set: ``-1`` matches any.
- A sequential create appends a 10-digit, zero-padded counter: the number of children ever
  created under the parent. (ZooKeeper keeps that count as the parent's cversion and reports
  ``cversion`` as creates plus deletes, i.e. ``2 * creates - num_children``.)
- Ephemeral nodes belong to the session that created them and vanish when it ends.
- Watches are one-shot. A data watch (``get``, or ``exists`` on a present node) fires CHANGED
  on set and DELETED on delete; an ``exists`` watch on an absent node fires CREATED; a child
  watch (``get_children``) fires CHILD when a child is created or deleted and DELETED when
  the node itself goes. One watcher registered several ways on one path is called once per
  event. Watchers run on the store's event thread, never the caller's and never under the
  store's lock: they must be thread-safe and quick (the broker hands events to its event
  loop with ``loop.call_soon_threadsafe``).
- Watches are lost when the connection is (``SUSPENDED``/``LOST`` in cluster mode): a
  consumer re-reads and re-watches when its session listener hears ``CONNECTED`` again.
- ``multi`` is atomic: all operations apply, or none and the first failure is raised.

Not here on purpose: ACLs, quotas, ZooKeeper's own ``/zookeeper`` subtree.
"""

from __future__ import annotations

import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

log = logging.getLogger("klog.daemon.metastore")

# ZooKeeper's default jute.maxbuffer: a server refuses larger requests.
MAX_DATA_BYTES = 1024 * 1024 - 1

EventType = Literal["CREATED", "DELETED", "CHANGED", "CHILD"]
SessionState = Literal["CONNECTED", "SUSPENDED", "LOST"]


# --- errors ---------------------------------------------------------------------------------


class MetastoreError(Exception):
    """Base of every metadata-store failure; ``path`` names the znode when one is involved."""

    def __init__(self, message: str = "", path: str | None = None) -> None:
        super().__init__(message or (path or ""))
        self.path = path


class NoNodeError(MetastoreError):
    """The znode (or, for a create, its parent) does not exist."""


class NodeExistsError(MetastoreError):
    """A create found the znode already there."""


class BadVersionError(MetastoreError):
    """A compare-and-set saw a different version than expected."""


class NotEmptyError(MetastoreError):
    """A non-recursive delete of a znode that has children."""


class NoChildrenForEphemeralsError(MetastoreError):
    """A create under an ephemeral znode (ZooKeeper forbids it)."""


class InvalidPathError(MetastoreError, ValueError):
    """A path ZooKeeper would reject (ZooKeeper's BadArguments)."""


class DataTooLargeError(MetastoreError, ValueError):
    """A payload larger than ZooKeeper's default jute.maxbuffer."""


class ConnectionLossError(MetastoreError):
    """The connection dropped; the operation may or may not have been applied."""


class SessionExpiredError(MetastoreError):
    """The session ended (or the store is closed or not started): ephemerals are gone."""


class MetastoreCorruptError(MetastoreError):
    """Stored metadata cannot be read back (local store); nothing was changed or deleted."""


class MetastoreLockedError(MetastoreError):
    """Another process holds the local store's directory."""


# --- values ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ZnodeStat:
    """ZooKeeper's Stat, minus the ACL version. Times are epoch milliseconds."""

    czxid: int
    mzxid: int
    pzxid: int
    ctime: int
    mtime: int
    version: int
    cversion: int
    ephemeral_owner: int
    data_length: int
    num_children: int


@dataclass(frozen=True, slots=True)
class WatchedEvent:
    type: EventType
    path: str


Watcher = Callable[[WatchedEvent], None]
SessionListener = Callable[[str], None]

OpKind = Literal["check", "create", "set", "delete"]


# The four constructors below read like classes on purpose (ZooKeeper's Op.check, ...).
@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a ``multi``; build it with CheckOp, CreateOp, SetOp or DeleteOp."""

    kind: OpKind
    path: str
    data: bytes = b""
    version: int = -1
    ephemeral: bool = False
    sequential: bool = False


def CheckOp(path: str, version: int) -> Op:
    """Fail the multi unless ``path`` exists with ``version`` (-1: any version)."""
    return Op("check", path, version=version)


def CreateOp(
    path: str, data: bytes = b"", ephemeral: bool = False, sequential: bool = False
) -> Op:
    return Op("create", path, data=bytes(data), ephemeral=ephemeral, sequential=sequential)


def SetOp(path: str, data: bytes, version: int = -1) -> Op:
    return Op("set", path, data=bytes(data), version=version)


def DeleteOp(path: str, version: int = -1) -> Op:
    return Op("delete", path, version=version)


# --- paths ----------------------------------------------------------------------------------


def _invalid_char(c: str) -> bool:
    # ZooKeeper's PathUtils works on UTF-16 code units: control characters, the surrogate and
    # private-use ranges and the specials are refused; a character outside the BMP is a
    # surrogate pair in Java, hence refused too.
    o = ord(c)
    return (
        0x0001 <= o <= 0x001F
        or 0x007F <= o <= 0x009F
        or 0xD800 <= o <= 0xF8FF
        or o >= 0xFFF0
    )


def validate_path(path: str, sequential: bool = False) -> None:
    """Raise InvalidPathError unless ZooKeeper would accept ``path``.

    A sequential create may end in ``/`` (the server appends the counter), as in ZooKeeper.
    """
    if not isinstance(path, str):
        raise InvalidPathError(f"path must be a str, not {type(path).__name__}")
    checked = path + "1" if sequential else path
    if not checked:
        raise InvalidPathError("path must not be empty", path)
    if checked[0] != "/":
        raise InvalidPathError(f"path {path!r} must start with /", path)
    if len(checked) == 1:
        return
    if checked[-1] == "/":
        raise InvalidPathError(f"path {path!r} must not end with /", path)
    for name in checked[1:].split("/"):
        if not name:
            raise InvalidPathError(f"path {path!r} has an empty node name", path)
        if name in (".", ".."):
            raise InvalidPathError(f"path {path!r} is relative ({name!r} not allowed)", path)
        for c in name:
            if c == "\x00":
                raise InvalidPathError(f"path {path!r} contains a null character", path)
            if _invalid_char(c):
                raise InvalidPathError(
                    f"path {path!r} contains an invalid character U+{ord(c):04X}", path
                )


def parent_path(path: str) -> str:
    """The parent of a validated, non-root path."""
    i = path.rfind("/")
    return path[:i] if i > 0 else "/"


def join_path(parent: str, name: str) -> str:
    return parent + name if parent == "/" else parent + "/" + name


def sequential_name(path: str, cversion: int) -> str:
    """The name ZooKeeper gives a sequential node: ``cversion`` here is the count of child
    creates under the parent (ZooKeeper's internal cversion), formatted as %010d."""
    # Java's %010d of a negative counter (after 2**31 creates) keeps the sign; mirror it.
    return f"{path}{cversion:010d}"


def check_data(data: bytes, path: str) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"znode data must be bytes, not {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_DATA_BYTES:
        raise DataTooLargeError(
            f"{len(data)} bytes for {path} exceed ZooKeeper's {MAX_DATA_BYTES}-byte limit", path
        )
    return data


# --- the interface --------------------------------------------------------------------------


def check_ops(ops: Sequence[Op]) -> list[Op]:
    """A multi's ops, each checked before any is applied (its path, the root never
    deleted, its data's size): the first bad one raises."""
    checked = list(ops)
    for op in checked:
        if not isinstance(op, Op):
            raise TypeError(f"multi takes Op values, not {type(op).__name__}")
        validate_path(op.path, op.kind == "create" and op.sequential)
        if op.kind == "delete" and op.path == "/":
            raise InvalidPathError("the root node cannot be deleted", op.path)
        if op.kind in ("create", "set"):
            check_data(op.data, op.path)
    return checked


class MetadataStore(ABC):
    """ZooKeeper's data model and session; see the module docstring for the rules."""

    session_id: int

    @abstractmethod
    def start(self) -> None:
        """Open the session (blocking). Listeners hear ``CONNECTED``."""

    @abstractmethod
    def close(self) -> None:
        """End the session: this session's ephemeral nodes vanish; watches are dropped
        without firing and listeners hear nothing more. Idempotent."""

    def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create ``path`` and return the created path (with its suffix when sequential).
        Missing parents are created empty and persistent when ``make_parents``."""
        validate_path(path, sequential)
        return self._create(path, check_data(data, path), ephemeral, sequential, make_parents)

    @abstractmethod
    def _create(self, path: str, data: bytes, ephemeral: bool, sequential: bool,
                make_parents: bool) -> str:
        """``create`` once its path and data are checked: the store's own work."""

    @abstractmethod
    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, ZnodeStat]:
        """Data and stat; a watch is left only when the node exists."""

    @abstractmethod
    def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        """Replace the data if the version matches (-1: any); the new stat."""

    @abstractmethod
    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        """Delete ``path`` (and, when recursive, everything under it); the version applies
        to ``path`` itself."""

    @abstractmethod
    def exists(self, path: str, watch: Watcher | None = None) -> ZnodeStat | None:
        """The stat, or None; the watch is left either way (CREATED fires if absent)."""

    @abstractmethod
    def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        """Child names, sorted; a watch is left only when the node exists."""

    @abstractmethod
    def multi(self, ops: Sequence[Op]) -> list[str | ZnodeStat | None]:
        """Apply all ops atomically. Results in order: the created path for a create, the new
        stat for a set, None for a check or delete. The first failure is raised."""

    @abstractmethod
    def add_session_listener(self, cb: SessionListener) -> None:
        """``cb(state)`` on session changes: "CONNECTED", "SUSPENDED", "LOST". Called on a
        store thread; it must not block or call back into the store."""

    def sync(self, path: str) -> None:
        """Let this session's next reads see every write committed before this call
        (ZooKeeper's sync: the server a session talks to may lag its ensemble's leader).
        A store with a single copy of its data is always current: nothing to do."""
        validate_path(path)

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and its missing ancestors, empty and persistent, if absent."""
        validate_path(path)
        if path == "/" or self.exists(path) is not None:
            return
        with contextlib.suppress(NodeExistsError):  # created meanwhile: fine
            self.create(path, make_parents=True)

    def __enter__(self) -> MetadataStore:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
