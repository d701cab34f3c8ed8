"""Who may send control requests over the wire (klog/daemon/controller/identity.py): only
the controller ZooKeeper names, at its epoch; nobody on a standalone broker. A newer
epoch than this broker knows is checked against the metastore before it is refused (a new
controller's first request may beat the watch), one read at a time."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from klog.daemon.controller.identity import (
    NO_CONTROLLER,
    ControllerIdentity,
    UnverifiableRequest,
    read_active_controller,
)
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import ConnectionLossError, MetadataStore
from klog.daemon.metastore.local import LocalMetadataStore
from klog.protocol.errors import ErrorCode

ME = 1
CAF = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
STALE = int(ErrorCode.STALE_CONTROLLER_EPOCH)
HUGE = 2**31 - 1


def elect(store: MetadataStore, broker_id: int, epoch: int) -> None:
    """What an election leaves in the metastore: /controller and /controller_epoch."""
    if store.exists(paths.CONTROLLER_EPOCH) is None:
        store.create(paths.CONTROLLER_EPOCH, str(epoch).encode())
    else:
        store.set(paths.CONTROLLER_EPOCH, str(epoch).encode())
    if store.exists(paths.CONTROLLER) is not None:
        store.delete(paths.CONTROLLER)
    store.create(paths.CONTROLLER, paths.ControllerRegistration(broker_id, 0).encode(),
                 ephemeral=True)


class CountingStore:
    """A metastore that counts syncs (one per read of the controller), optionally slow
    or failing."""

    def __init__(self, store: MetadataStore, delay: threading.Event | None = None,
                 fail: bool = False) -> None:
        self.store = store
        self.reads = 0
        self.delay = delay
        self.fail = fail

    def sync(self, path: str) -> None:
        self.reads += 1
        if self.delay is not None:
            self.delay.wait(5)
        if self.fail:
            raise ConnectionLossError("no answer from ZooKeeper", path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def identity(store: Any, cluster_mode: bool = True) -> ControllerIdentity:
    return ControllerIdentity(ME, cluster_mode, lambda: store)


def check(ident: ControllerIdentity, controller_id: int, epoch: int) -> int:
    return asyncio.run(ident.check(controller_id, epoch))


def test_standalone_refuses_every_control_request(store: LocalMetadataStore) -> None:
    elect(store, ME, 1)
    ident = identity(store, cluster_mode=False)
    ident.learned(ME, 1)
    assert not ident.cluster_action_allowed()
    for controller_id, epoch in [(ME, 1), (0, 1), (2, HUGE), (-1, -1)]:
        assert check(ident, controller_id, epoch) == CAF


def test_only_the_known_controller_at_its_epoch_is_obeyed(store: LocalMetadataStore) -> None:
    elect(store, 2, 5)
    ident = identity(store)
    ident.learned(2, 5)
    assert check(ident, 2, 5) == 0
    assert check(ident, 2, 4) == STALE          # a deposed controller
    assert check(ident, 3, 5) == CAF            # not the controller of epoch 5
    assert check(ident, ME, 5) == CAF           # this broker's controller uses no socket
    assert check(ident, 2, HUGE) == CAF         # an epoch ZooKeeper has not reached
    assert check(ident, 3, 6) == CAF
    assert ident.known == (2, 5)                # no claim moved what is known


def test_a_new_controller_beating_the_watch_is_read_from_the_metastore(
        store: LocalMetadataStore) -> None:
    elect(store, 2, 5)
    ident = identity(store)
    ident.learned(2, 5)
    elect(store, 3, 6)  # the watch has not fired: known is still (2, 5)
    assert check(ident, 3, 6) == 0
    assert ident.known == (3, 6)
    assert check(ident, 2, 5) == STALE
    # Before the broker learned anything at all, too.
    fresh = identity(store)
    assert fresh.known == NO_CONTROLLER
    assert check(fresh, 3, 6) == 0


def test_claims_above_the_metastore_cost_one_read_at_a_time(
        store: LocalMetadataStore) -> None:
    """A burst of forged epochs waits for shared reads: never a worker thread each."""
    elect(store, 2, 5)
    gate = threading.Event()
    counting = CountingStore(store, delay=gate)
    ident = identity(counting)
    ident.learned(2, 5)

    async def burst() -> list[int]:
        checks = [asyncio.ensure_future(ident.check(9, 100 + i)) for i in range(50)]
        await asyncio.sleep(0.05)  # all 50 waiting on the first read
        gate.set()
        return await asyncio.gather(*checks)

    assert asyncio.run(burst()) == [CAF] * 50
    # The first read, then one that started after the other 49 arrived.
    assert counting.reads == 2
    assert ident.known == (2, 5)


def test_an_unreadable_metastore_neither_obeys_nor_refuses(store: LocalMetadataStore) -> None:
    elect(store, 2, 5)
    ident = identity(CountingStore(store, fail=True))
    ident.learned(2, 5)
    assert check(ident, 2, 5) == 0  # the known controller needs no read
    with pytest.raises(UnverifiableRequest):
        check(ident, 3, 6)


def test_read_active_controller(store: LocalMetadataStore) -> None:
    assert read_active_controller(store) == NO_CONTROLLER
    elect(store, 4, 7)
    assert read_active_controller(store) == (4, 7)
    store.delete(paths.CONTROLLER)  # its session ended; no new controller yet
    assert read_active_controller(store) == (-1, 7)


def test_learned_never_goes_back_in_epochs() -> None:
    ident = identity(None)
    ident.learned(2, 5)
    ident.learned(3, 4)
    assert ident.known == (2, 5)
    ident.learned(-1, 5)
    assert ident.known == (-1, 5)
