"""ChangeNotificationListener against a real LocalMetadataStore: the notifications after
start are handled once each in sequence order, bad data is passed over, old ones purged."""

from __future__ import annotations

import asyncio
from pathlib import Path

from klog.daemon.metastore.change_listener import (
    ChangeNotificationListener,
    change_sequence,
    purge_obsolete,
    write_then_notify,
)
from klog.daemon.metastore.local import LocalMetadataStore

PATH, PREFIX = "/changes", "change_"


def test_change_sequence() -> None:
    assert change_sequence("change_0000000012", PREFIX) == 12
    assert change_sequence("other_0000000012", PREFIX) is None
    assert change_sequence("change_x", PREFIX) is None


def test_notifications_after_start_are_handled_in_order(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path / "ms")
    store.start()
    try:
        store.create(f"{PATH}/{PREFIX}", b"before", sequential=True, make_parents=True)

        async def go() -> list[bytes]:
            handled: list[bytes] = []

            async def handle(child: str, data: bytes) -> None:
                if data == b"bad":
                    raise ValueError("not what is written there")
                handled.append(data)

            listener = ChangeNotificationListener(store, PATH, PREFIX, "test", handle)
            await listener.start()
            assert listener.last_executed_change == 0  # the one before start counts as read
            for data in (b"one", b"bad", b"two"):
                await asyncio.to_thread(store.create, f"{PATH}/{PREFIX}", data,
                                        sequential=True)
            for _ in range(200):
                if listener.last_executed_change == 3:
                    break
                await asyncio.sleep(0.01)
            listener.close()
            assert listener.last_executed_change == 3
            return handled

        assert asyncio.run(go()) == [b"one", b"two"]
    finally:
        store.close()


def test_write_then_notify_and_purge(tmp_path: Path) -> None:
    store = LocalMetadataStore(tmp_path / "ms")
    store.start()
    try:
        note = write_then_notify(store, "/config/x", b"v1", f"{PATH}/{PREFIX}", b"x")
        write_then_notify(store, "/config/x", b"v2", f"{PATH}/{PREFIX}", b"x")
        assert store.get("/config/x")[0] == b"v2"
        assert note == f"{PATH}/{PREFIX}0000000000"
        ctime = store.exists(note)
        assert ctime is not None
        assert purge_obsolete(store, PATH, PREFIX, now_ms=ctime.ctime) == 0
        assert purge_obsolete(store, PATH, PREFIX, now_ms=ctime.ctime + 16 * 60 * 1000) == 2
        assert store.get_children(PATH) == []
    finally:
        store.close()
