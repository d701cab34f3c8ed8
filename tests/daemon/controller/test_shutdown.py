"""Controlled shutdown, the controller's side (Controller.controlled_shutdown in
klog/daemon/controller/controller.py; the stopping broker's side is shutdown.py): only a
registered broker at its current broker epoch may ask, since the request takes its
leaderships away and anyone can send it. Nothing is marked as shutting down otherwise."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from klog.daemon.controller.controller import Controller
from klog.daemon.metastore import paths
from klog.daemon.metastore.local import LocalMetadataStore
from klog.protocol.errors import ErrorCode
from tests.daemon.controller.fakes import controller_for

STALE = int(ErrorCode.STALE_BROKER_EPOCH)


def register(store: LocalMetadataStore, broker_id: int) -> int:
    """A broker's /brokers/ids registration; its broker epoch (the czxid)."""
    path = paths.broker_path(broker_id)
    if store.exists(path) is not None:
        store.delete(path)
    store.create(path, paths.BrokerRegistration(
        broker_id, (paths.EndPoint("PLAINTEXT", "127.0.0.1", 9000 + broker_id,
                                   "PLAINTEXT"),)).encode(),
        ephemeral=True, make_parents=True)
    stat = store.exists(path)
    assert stat is not None
    return stat.czxid


def controller(store: LocalMetadataStore) -> Controller:
    # The controller's own broker (1) is not among the live ones: nothing is delivered
    # in-process, and without a channel nothing goes on the wire.
    broker = SimpleNamespace(broker_id=1, metastore=store,
                             config=SimpleNamespace(zookeeper_connect="zk",
                                                    unclean_leader_election_enable=False))
    c = controller_for(broker)
    c.active = True
    c.epoch = 3
    return c


def shutdown(c: Controller, broker_id: int, broker_epoch: int) -> tuple[int, list]:
    async def run() -> tuple[int, list]:
        c._loop = asyncio.get_running_loop()
        await c._read_brokers()
        return await c._on_controlled_shutdown(broker_id, broker_epoch)

    return asyncio.run(run())


def test_only_a_registered_broker_at_its_epoch_may_ask(store: LocalMetadataStore) -> None:
    epoch = register(store, 2)
    register(store, 3)
    c = controller(store)
    assert shutdown(c, 2, -1) == (STALE, [])             # v0-1: no broker epoch
    assert shutdown(c, 2, epoch - 1) == (STALE, [])      # an older incarnation
    assert shutdown(c, 2, epoch + 1000) == (STALE, [])   # an epoch never registered
    assert shutdown(c, 7, epoch) == (int(ErrorCode.BROKER_NOT_AVAILABLE), [])
    assert c.shutting_down == set()
    assert shutdown(c, 2, epoch) == (0, [])
    assert c.shutting_down == {2}


def test_a_restart_the_controller_has_not_seen_yet_is_caught_up(
        store: LocalMetadataStore) -> None:
    """The broker restarted (a new registration, a new epoch) and asks before the
    controller processed the /brokers/ids change: the controller reads it and obeys."""
    register(store, 2)
    c = controller(store)

    async def run() -> tuple[int, list]:
        c._loop = asyncio.get_running_loop()
        await c._read_brokers()
        newer = register(store, 2)  # the watch event is still to come
        return await c._on_controlled_shutdown(2, newer)

    assert asyncio.run(run()) == (0, [])
    assert c.shutting_down == {2}
    assert c.broker_epochs[2] == store.exists(paths.broker_path(2)).czxid  # type: ignore[union-attr]

