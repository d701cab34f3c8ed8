"""Who may send this broker the inter-broker control APIs over the wire.

LeaderAndIsr, StopReplica and UpdateMetadata decide what a broker leads, follows, serves
and deletes; ControlledShutdown takes a broker's leaderships away. Kafka lets only
principals with the ClusterAction permission send them. klog has no authentication yet,
so it checks what it can know -- who the controller is -- and leaves the permission check
to a hook (``ControllerIdentity.cluster_action_allowed``):

- Standalone (no zookeeper.connect) there is no other broker: the in-process controller
  calls klog/daemon/controller/receiver.py directly, and the listeners neither advertise
  nor accept these APIs (klog.protocol.apis.STANDALONE_ADVERTISED; klog/daemon/server.py),
  so such a request closes its connection before it is decoded. Should one reach a
  handler anyway, it is refused (CLUSTER_AUTHORIZATION_FAILED) and nothing is applied.
- Cluster mode: a controller request is obeyed only when its (controller_id,
  controller_epoch) is the controller ZooKeeper names -- /controller's broker id and
  /controller_epoch, which the election writes in one transaction (controller.py
  ``_register``). An older epoch is a deposed controller: STALE_CONTROLLER_EPOCH. Any
  other id, this broker's own id (its controller never uses the wire to reach it), or an
  epoch ZooKeeper has not reached: CLUSTER_AUTHORIZATION_FAILED. Nothing is applied and
  the broker's controller epoch does not move (receiver.py raises it only for requests it
  obeys, and those come after this check).

``ControllerIdentity.known`` is what the election last read or won (Controller._elect
calls ``learned``). A new controller's first request can arrive before this broker's
watch on /controller fires, so a request claiming a newer epoch than ``known`` is never
refused on ``known`` alone: /controller and /controller_epoch are read again, after a
ZooKeeper sync, in a worker thread. Reads are single-flight -- one at a time, each request
waiting for one that started after it arrived -- so a client sending forged epochs costs
one ZooKeeper read at a time, never a thread per request. When ZooKeeper cannot be read the
request can be neither obeyed nor refused: the handler closes the connection, and the
controller's channel resends (klog/daemon/controller/channel.py).

Runs on the event loop; ``known`` is only touched there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetadataStore, MetastoreError, NoNodeError
from klog.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

#: No controller (no /controller znode, or no read yet).
NO_CONTROLLER = (-1, -1)

_CLUSTER_AUTHORIZATION_FAILED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
_STALE_CONTROLLER_EPOCH = int(ErrorCode.STALE_CONTROLLER_EPOCH)


class UnverifiableRequest(Exception):
    """ZooKeeper could not be read to tell whether a request comes from the controller."""


def read_active_controller(store: MetadataStore) -> tuple[int, int]:
    """(broker id in /controller, epoch in /controller_epoch) as one consistent pair, read
    after a sync; the id is -1 when there is no controller. Blocking: a worker thread.

    The two znodes are two reads: /controller_epoch is read before and after /controller,
    and the pair is kept once the epoch did not change in between (every election bumps
    it, so the /controller read between belongs to that epoch)."""
    store.sync(paths.CONTROLLER_EPOCH)
    pair = NO_CONTROLLER
    for _ in range(3):
        try:
            data, before = store.get(paths.CONTROLLER_EPOCH)
        except NoNodeError:
            return NO_CONTROLLER  # no controller was ever elected
        try:
            epoch = int(data.decode() or "0")
        except ValueError:
            log.warning("unreadable %s: %r", paths.CONTROLLER_EPOCH, data[:40])
            return NO_CONTROLLER
        try:
            raw, _ = store.get(paths.CONTROLLER)
            controller_id = paths.ControllerRegistration.decode(raw).broker_id
        except NoNodeError:
            controller_id = -1
        except ValueError:
            log.warning("unreadable %s", paths.CONTROLLER)
            controller_id = -1
        pair = (controller_id, epoch)
        after = store.exists(paths.CONTROLLER_EPOCH)
        if after is not None and after.version == before.version:
            return pair
    return pair


class ControllerIdentity:
    """The controller ZooKeeper names, as this broker knows it, and the check a control
    request from the wire passes before anything in it is applied (module docstring)."""

    def __init__(self, broker_id: int, cluster_mode: bool,
                 store: Callable[[], MetadataStore | None]) -> None:
        self.broker_id = broker_id
        self.cluster_mode = cluster_mode
        self._store = store
        self.known: tuple[int, int] = NO_CONTROLLER
        self._reads_started = 0
        self._reading: asyncio.Task[None] | None = None
        self._reading_number = 0

    def learned(self, controller_id: int, epoch: int) -> None:
        """The controller (id, epoch) ZooKeeper names now, as read or won by the election;
        an older epoch than the one known is ignored (reads may finish out of order)."""
        if epoch >= self.known[1]:
            self.known = (controller_id, epoch)

    def cluster_action_allowed(self, authorized: bool = True) -> bool:
        """May this connection send inter-broker control requests at all?

        ``authorized``: Kafka's ClusterAction check on the connection's principal
        (``RequestContext.authorize(CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)``, True without
        an authorizer). Standalone nobody may: this broker has no peers."""
        return self.cluster_mode and authorized

    async def check(self, controller_id: int, controller_epoch: int,
                    authorized: bool = True) -> int:
        """0 (NONE) if the request comes from the controller ZooKeeper names (and its
        principal has ClusterAction: ``authorized``), else the error that refuses it.
        UnverifiableRequest when ZooKeeper cannot be read."""
        if not self.cluster_action_allowed(authorized) or controller_id == self.broker_id:
            return self._refuse(controller_id, controller_epoch, _CLUSTER_AUTHORIZATION_FAILED)
        verdict = self._judge(controller_id, controller_epoch)
        if verdict is None:
            # A newer epoch than known: a new controller whose first request beat the
            # watch, or a forgery. Only ZooKeeper can tell.
            try:
                await self._refresh()
            except MetastoreError as exc:
                raise UnverifiableRequest(
                    f"cannot read the controller from ZooKeeper: {exc}") from exc
            verdict = self._judge(controller_id, controller_epoch)
        if verdict is None:
            verdict = _CLUSTER_AUTHORIZATION_FAILED
        return self._refuse(controller_id, controller_epoch, verdict) if verdict else 0

    def _judge(self, controller_id: int, controller_epoch: int) -> int | None:
        """Against ``known``: 0 obey, an error code refuse, None cannot tell (newer)."""
        known_id, known_epoch = self.known
        if controller_epoch < known_epoch:
            return _STALE_CONTROLLER_EPOCH
        if controller_epoch == known_epoch:
            # One election writes one epoch: at the known epoch only its controller.
            return 0 if controller_id == known_id and known_id >= 0 \
                else _CLUSTER_AUTHORIZATION_FAILED
        return None

    def _refuse(self, controller_id: int, controller_epoch: int, error: int) -> int:
        log.warning("refused a control request claiming controller %d at epoch %d: %s "
                    "(ZooKeeper names controller %d at epoch %d)", controller_id,
                    controller_epoch, ErrorCode(error).name, *self.known)
        return error

    async def _refresh(self) -> None:
        """Wait for a read of ZooKeeper that started after this call (single-flight)."""
        wanted = self._reads_started + 1
        while True:
            task = self._reading
            if task is None:
                self._reads_started += 1
                self._reading_number = self._reads_started
                task = self._reading = asyncio.get_running_loop().create_task(self._read())
                # Its waiters take its error; this keeps asyncio quiet when none is left.
                task.add_done_callback(lambda t: t.cancelled() or t.exception())
            number = self._reading_number
            # shield: a caller that goes away (its connection closed) leaves the read to
            # the others waiting for it.
            await asyncio.shield(task)
            if number >= wanted:
                return

    async def _read(self) -> None:
        try:
            store = self._store()
            if store is None:
                raise MetastoreError("the metastore is not open")
            self.learned(*await asyncio.to_thread(read_active_controller, store))
        finally:
            self._reading = None
