"""ChangeNotificationListener: a broker's side of one change-notification path (Kafka's
ZkNodeChangeNotificationListener), written once for dynamic configs and ACLs.

A writer changes an entity's znode, then creates a sequential ``<path>/<prefix><seq>``
naming it. Every broker watches ``<path>``; on each change (or a new session, whose
watches were lost with the connection) it reads the notifications newer than the last one
it processed, in sequence order, and hands each one's data to its handler, which re-reads
the entity the notification names (the payload is only a pointer). Notifications older
than 15 minutes are then deleted (Kafka's changeExpirationMs), by whichever broker
processes them.

Users: klog/daemon/config_changes.py (``/config/changes``, ``config_change_``) and
klog/daemon/security/authorizer.py (``/kafka-acl-changes``, ``acl_changes_``, and the
extended one). Runs on the event loop; metastore calls go to worker threads; the watch
callbacks (the store's thread) only schedule work on the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from klog.daemon.metastore.base import (
    MetadataStore,
    MetastoreError,
    NodeExistsError,
    NoNodeError,
)

log = logging.getLogger(__name__)

#: Notifications older than this are deleted by the brokers that process them (Kafka's
#: ZkNodeChangeNotificationListener.changeExpirationMs).
CHANGE_EXPIRATION_MS = 15 * 60 * 1000


def write_then_notify(store: MetadataStore, path: str, data: bytes, notification_path: str,
                      notification: bytes) -> str:
    """The writer's side (blocking): replace ``path``'s data (creating it), then create the
    sequential notification; returns its path. The data is written first, so a broker that
    hears of the change reads the new data (Kafka's AdminZkClient.changeEntityConfig
    order)."""
    try:
        store.set(path, data)
    except NoNodeError:
        try:
            store.create(path, data, make_parents=True)
        except NodeExistsError:  # created meanwhile by another writer: ours is the newer
            store.set(path, data)
    return store.create(notification_path, notification, sequential=True, make_parents=True)


def change_sequence(child: str, prefix: str) -> int | None:
    """The sequence number of a notification named ``<prefix><digits>``; None for another
    name."""
    if not child.startswith(prefix):
        return None
    digits = child[len(prefix):]
    return int(digits) if digits.isdigit() else None


def purge_obsolete(store: MetadataStore, path: str, prefix: str, now_ms: int | None = None,
                   expiration_ms: int = CHANGE_EXPIRATION_MS) -> int:
    """Delete the notifications under ``path`` created more than ``expiration_ms`` ago;
    returns how many."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    try:
        children = store.get_children(path)
    except NoNodeError:
        return 0
    deleted = 0
    for child in children:
        if change_sequence(child, prefix) is None:
            continue
        stat = store.exists(f"{path}/{child}")
        if stat is None or now - stat.ctime <= expiration_ms:
            continue
        with contextlib.suppress(NoNodeError):
            store.delete(f"{path}/{child}")
            deleted += 1
    return deleted


class ChangeNotificationListener:
    """Processes the notifications under one path (see the module docstring).

    ``handle(child, data)`` applies one notification; a ``data_error`` from it (data that
    is not what Kafka writes there) is logged and the notification passed over, a
    NoNodeError (purged meanwhile) passed over silently. ``on_new_session``, when given, runs before
    the notifications are read again after a new session (the ACLs reload everything)."""

    def __init__(self, store: MetadataStore, path: str, prefix: str, what: str,
                 handle: Callable[[str, bytes], Awaitable[None]], *,
                 data_error: type[Exception] = ValueError,
                 ensure_path: bool = False,
                 on_new_session: Callable[[], Awaitable[None]] | None = None) -> None:
        self.store = store
        self.path = path
        self.prefix = prefix
        self.what = what
        self.handle = handle
        self.data_error = data_error
        self.ensure_path = ensure_path
        self.on_new_session = on_new_session
        #: The sequence of the last notification processed (-1: none yet).
        self.last_executed_change = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._pending = False
        self._new_session = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Watch the path; the notifications there now count as processed (the caller
        reads the state they point at itself, after this, so that none is missed)."""
        self._loop = asyncio.get_running_loop()
        store = self.store
        if self.ensure_path:
            await asyncio.to_thread(store.ensure_path, self.path)
        children = await asyncio.to_thread(store.get_children, self.path, self._on_children)
        seqs = [s for c in children if (s := change_sequence(c, self.prefix)) is not None]
        self.last_executed_change = max(seqs, default=-1)
        store.add_session_listener(self._on_session)

    def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()

    def _on_children(self, event: Any) -> None:
        self._schedule(new_session=False)

    def _on_session(self, state: str) -> None:
        if state == "CONNECTED":  # watches were lost with the connection: read again
            self._schedule(new_session=True)

    def _schedule(self, new_session: bool) -> None:
        loop = self._loop
        if self._closed or loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(self._kick, new_session)

    def _kick(self, new_session: bool) -> None:
        self._pending = True
        self._new_session = self._new_session or new_session
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._process())

    async def _process(self) -> None:
        while self._pending and not self._closed:
            self._pending = False
            try:
                if self._new_session and self.on_new_session is not None:
                    self._new_session = False
                    await self.on_new_session()
                await self._process_once()
            except asyncio.CancelledError:
                raise
            except MetastoreError as exc:
                log.warning("cannot read %s change notifications: %s", self.what, exc)
            except Exception:
                log.exception("applying %s change notifications failed", self.what)

    async def _process_once(self) -> None:
        store = self.store
        children = await asyncio.to_thread(store.get_children, self.path, self._on_children)
        fresh = sorted((seq, child) for child in children
                       if (seq := change_sequence(child, self.prefix)) is not None
                       and seq > self.last_executed_change)
        for seq, child in fresh:
            try:
                data, _stat = await asyncio.to_thread(store.get, f"{self.path}/{child}")
                await self.handle(child, data)
            except NoNodeError:
                pass  # purged meanwhile
            except self.data_error as exc:
                log.warning("ignored %s change %s/%s: %s", self.what, self.path, child, exc)
            self.last_executed_change = seq
        if fresh:
            await asyncio.to_thread(purge_obsolete, store, self.path, self.prefix)
