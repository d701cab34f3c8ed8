"""LocalMetadataStore beyond the shared contract: durability (restart, kill -9, torn and
damaged journals, snapshots), the directory lock, the event thread, thread safety."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest

from klog.daemon.metastore import local as local_module
from klog.daemon.metastore.base import (
    MetastoreCorruptError,
    MetastoreError,
    MetastoreLockedError,
    WatchedEvent,
    ZnodeStat,
)
from klog.daemon.metastore.local import JOURNAL_MAGIC, LocalMetadataStore

from .conftest import Recorder, settle

REPO_ROOT = Path(__file__).resolve().parents[3]


def dump(store: LocalMetadataStore) -> dict[str, tuple[bytes, ZnodeStat]]:
    """Every node with its data and stat."""
    out = {}
    stack = ["/"]
    while stack:
        path = stack.pop()
        out[path] = store.get(path)
        for name in store.get_children(path):
            stack.append(path.rstrip("/") + "/" + name)
    return out


def populate(store: LocalMetadataStore) -> None:
    store.create("/brokers/topics/t", b'{"version":3}', make_parents=True)
    store.create("/brokers/topics/t/partitions/0/state", b"s0", make_parents=True)
    store.set("/brokers/topics/t", b'{"version":3,"x":1}')
    store.create("/seq/n-", b"a", sequential=True, make_parents=True)
    store.create("/seq/n-", b"b", sequential=True)
    store.delete("/seq/n-0000000000")
    store.create("/gone")
    store.delete("/gone")


def journal_records(directory: Path) -> list[tuple[int, int]]:
    """(offset, total length) of each record in the journal."""
    raw = (directory / "journal").read_bytes()
    pos, out = len(JOURNAL_MAGIC), []
    while pos < len(raw):
        length = int.from_bytes(raw[pos : pos + 4], "big")
        out.append((pos, 8 + length))
        pos += 8 + length
    return out


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "meta"


def open_store(directory: Path, **kwargs: int) -> LocalMetadataStore:
    store = LocalMetadataStore(directory, **kwargs)
    store.start()
    return store


# --- restart ------------------------------------------------------------------------------------


def test_restart_keeps_tree_and_stats(directory: Path) -> None:
    store = open_store(directory)
    populate(store)
    before = dump(store)
    last = store.last_zxid
    store.close()

    store = open_store(directory)
    assert dump(store) == before
    assert store.last_zxid == last
    # zxids keep growing and the sequential counter continues where it was
    assert store.create("/seq/n-", sequential=True) == "/seq/n-0000000002"
    assert store.get("/seq/n-0000000002")[1].czxid == last + 1
    store.close()


def test_ephemerals_gone_after_restart_and_zxids_monotonic(directory: Path) -> None:
    store = open_store(directory)
    store.create("/brokers/ids", make_parents=True)
    store.create("/brokers/ids/0", b"me", ephemeral=True)
    store.create("/controller", b"0", ephemeral=True)
    session = store.session_id
    store.close()
    store = open_store(directory)
    assert store.session_id != session
    assert store.exists("/controller") is None
    assert store.get_children("/brokers/ids") == []
    zxid = store.last_zxid
    assert store.create("/x") == "/x"
    assert store.get("/x")[1].czxid == zxid + 1
    store.close()


def test_start_close_start_same_object(directory: Path) -> None:
    store = open_store(directory)
    store.create("/a", b"1")
    store.create("/e", ephemeral=True)
    store.close()
    store.start()
    assert store.get("/a")[0] == b"1"
    assert store.exists("/e") is None
    store.close()


# --- kill -9 ------------------------------------------------------------------------------------

WRITER = """
import sys
from klog.daemon.metastore.local import LocalMetadataStore
store = LocalMetadataStore(sys.argv[1])
store.start()
store.create("/brokers/ids/0", b"registration", ephemeral=True, make_parents=True)
print("ready", flush=True)
i = 0
while True:
    path = store.create("/acked/n-", str(i).encode(), sequential=True, make_parents=True)
    store.set("/counter", str(i).encode()) if i else store.create("/counter", b"0")
    print(path, i, flush=True)
    i += 1
"""


def run_writer(directory: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(directory)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )


def test_kill_9_keeps_every_acknowledged_write(directory: Path) -> None:
    proc = run_writer(directory)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()  # type: ignore[union-attr]
        acked: list[tuple[str, int]] = []
        while len(acked) < 60:
            path, i = proc.stdout.readline().split()
            acked.append((path, int(i)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        for line in proc.stdout:  # acknowledged before the kill, still in the pipe
            path, i = line.split()
            acked.append((path, int(i)))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    store = open_store(directory)  # the dead writer's lock is gone with it
    try:
        for path, i in acked:
            assert store.get(path)[0] == str(i).encode()
        counter = int(store.get("/counter")[0])
        assert counter >= acked[-1][1]
        assert len(store.get_children("/acked")) >= len(acked)
        assert store.get_children("/brokers/ids") == []  # the dead session's ephemeral
    finally:
        store.close()


# --- torn and damaged journals ------------------------------------------------------------------


def write_ten(directory: Path) -> dict[str, tuple[bytes, ZnodeStat]]:
    store = open_store(directory)
    for i in range(10):
        store.create(f"/n{i}", f"value {i}".encode())
    snapshot = dump(store)
    store.close()
    assert len(journal_records(directory)) == 10
    return snapshot


def without_last(tree: dict[str, tuple[bytes, ZnodeStat]]) -> set[str]:
    return set(tree) - {"/n9"}


@pytest.mark.parametrize(
    "damage",
    ["cut_last_record", "cut_inside_header", "zero_tail", "garbage_tail", "flip_last_payload",
     "huge_length_in_last"],
)
def test_torn_tail_is_dropped_with_a_warning(
    directory: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    write_ten(directory)
    journal = directory / "journal"
    raw = bytearray(journal.read_bytes())
    last_at, last_len = journal_records(directory)[-1]
    if damage == "cut_last_record":
        damaged = raw[: last_at + last_len - 7]
    elif damage == "cut_inside_header":
        damaged = raw[: last_at + 3]
    elif damage == "zero_tail":
        damaged = raw[:last_at] + bytes(last_len + 4096)
    elif damage == "garbage_tail":
        damaged = raw[:last_at] + random.Random(7).randbytes(300)
    elif damage == "flip_last_payload":
        damaged = raw[:]
        damaged[last_at + last_len - 3] ^= 0x20
    else:
        damaged = raw[:]
        damaged[last_at : last_at + 4] = (0xFFFFFFF0).to_bytes(4, "big")
    journal.write_bytes(bytes(damaged))

    with caplog.at_level(logging.WARNING, logger="klog.daemon.metastore"):
        store = open_store(directory)
    try:
        assert set(dump(store)) == {"/", *(f"/n{i}" for i in range(9))}
        assert store.get("/n8")[0] == b"value 8"
        assert "torn tail" in caplog.text
        aside = list(directory.glob("journal.torn.*"))
        assert len(aside) == 1
        assert aside[0].read_bytes() == bytes(damaged[last_at:])  # moved aside, not deleted
        assert (directory / "journal").stat().st_size == last_at
        store.create("/after", b"ok")  # appends cleanly after the cut
    finally:
        store.close()
    store = open_store(directory)
    assert store.get("/after")[0] == b"ok"
    assert len(list(directory.glob("journal.torn.*"))) == 1
    store.close()


@pytest.mark.parametrize("damage", ["flip_payload", "blow_length", "zero_header"])
def test_damage_before_valid_records_refuses_to_start(directory: Path, damage: str) -> None:
    write_ten(directory)
    journal = directory / "journal"
    raw = bytearray(journal.read_bytes())
    at, _ = journal_records(directory)[4]
    if damage == "flip_payload":
        raw[at + 12] ^= 0x01
    elif damage == "blow_length":
        raw[at : at + 4] = (0x7FFFFFFF).to_bytes(4, "big")
    else:
        raw[at : at + 8] = bytes(8)
    journal.write_bytes(bytes(raw))
    store = LocalMetadataStore(directory)
    with pytest.raises(MetastoreCorruptError, match=f"byte {at}"):
        store.start()
    assert journal.read_bytes() == bytes(raw)  # nothing changed, nothing moved
    assert not list(directory.glob("journal.torn.*"))
    # The lock was released: after a repair a store can open the directory.
    journal.write_bytes(bytes(raw[:at]))
    store = open_store(directory)
    assert set(store.get_children("/")) == {"n0", "n1", "n2", "n3"}
    store.close()


def test_journal_torn_while_being_created(directory: Path) -> None:
    directory.mkdir()
    (directory / "journal").write_bytes(JOURNAL_MAGIC[:3])
    store = open_store(directory)
    store.create("/a")
    store.close()
    store = open_store(directory)
    assert store.get_children("/") == ["a"]
    store.close()


def test_foreign_journal_refused(directory: Path) -> None:
    directory.mkdir()
    (directory / "journal").write_bytes(b"this is not a journal at all")
    with pytest.raises(MetastoreCorruptError, match="not a klog metadata journal"):
        open_store(directory)


def test_replay_that_does_not_fit_the_tree_is_corruption(directory: Path) -> None:
    write_ten(directory)
    journal = directory / "journal"
    raw = journal.read_bytes()
    first_at, first_len = journal_records(directory)[0]
    # Append a valid copy of the first record (a create of /n0) with a newer zxid.
    doc = json.loads(raw[first_at + 8 : first_at + first_len])
    doc["z"] = 1000
    payload = json.dumps(doc, separators=(",", ":")).encode()
    journal.write_bytes(
        raw + len(payload).to_bytes(4, "big") + zlib.crc32(payload).to_bytes(4, "big") + payload
    )
    with pytest.raises(MetastoreCorruptError, match="cannot be applied"):
        open_store(directory)


# --- snapshots ----------------------------------------------------------------------------------


def test_snapshot_compacts_the_journal(directory: Path) -> None:
    store = open_store(directory, snapshot_bytes=4096)
    for i in range(120):
        store.create(f"/t{i % 7}/p{i}", b"x" * 50, make_parents=True)
        if i % 3 == 0:
            store.set(f"/t{i % 7}/p{i}", b"y")
    populate(store)
    before = dump(store)
    assert (directory / "snapshot").exists()
    assert (directory / "journal").stat().st_size <= 4096 + 1024
    assert not (directory / "snapshot.tmp").exists()
    store.close()
    store = open_store(directory, snapshot_bytes=4096)
    assert dump(store) == before
    store.close()


def test_crash_between_snapshot_and_journal_truncation(directory: Path) -> None:
    store = open_store(directory)
    populate(store)
    before = dump(store)
    store.close()
    old_journal = (directory / "journal").read_bytes()
    # A start with a tiny threshold compacts at once (snapshot, then journal truncated) ...
    open_store(directory, snapshot_bytes=1).close()
    assert (directory / "snapshot").exists()
    assert (directory / "journal").read_bytes() == JOURNAL_MAGIC
    # ... had it crashed before the truncation, replay skips what the snapshot holds.
    (directory / "journal").write_bytes(old_journal)
    store = open_store(directory)
    assert dump(store) == before
    store.close()


def test_damaged_snapshot_refuses_to_start(directory: Path) -> None:
    store = open_store(directory, snapshot_bytes=1)
    populate(store)
    store.close()
    snapshot = directory / "snapshot"
    raw = bytearray(snapshot.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    snapshot.write_bytes(bytes(raw))
    with pytest.raises(MetastoreCorruptError, match="snapshot"):
        open_store(directory)
    assert snapshot.read_bytes() == bytes(raw)
    snapshot.write_bytes(b"KLOGMSS1" + bytes(4))
    with pytest.raises(MetastoreCorruptError, match="snapshot"):
        open_store(directory)


# --- the directory lock -------------------------------------------------------------------------


def test_second_store_on_same_directory_is_refused(directory: Path) -> None:
    first = open_store(directory)
    second = LocalMetadataStore(directory)
    busy = rf"in use by another broker \(pid {os.getpid()}\)"
    with pytest.raises(MetastoreLockedError, match=busy):
        second.start()
    first.create("/still-works")
    first.close()
    second.start()  # free once the first is closed
    assert second.get_children("/") == ["still-works"]
    second.close()


def test_lock_held_by_another_process(directory: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\nfrom klog.daemon.metastore.local import LocalMetadataStore\n"
         "s = LocalMetadataStore(sys.argv[1]); s.start(); print('ready', flush=True)\n"
         "sys.stdin.read(); s.close()",
         str(directory)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(MetastoreLockedError, match=f"pid {holder.pid}"):
            open_store(directory)
    finally:
        holder.communicate("", timeout=10)
    open_store(directory).close()


# --- failures and threads -----------------------------------------------------------------------


def test_failed_fsync_is_not_acknowledged_and_stops_writes(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(directory)
    store.create("/before", b"1")

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(local_module.os, "fdatasync", broken)
    with pytest.raises(MetastoreError, match="Input/output error"):
        store.create("/lost", b"2")
    assert store.exists("/lost") is None  # rolled back in memory
    monkeypatch.undo()
    with pytest.raises(MetastoreError, match="read-only"):
        store.create("/refused")
    assert store.get("/before")[0] == b"1"  # reads still work
    store.close()
    store.start()  # the same object, a new session: writable again
    assert store.get_children("/") == ["before"]
    store.create("/writable-again")
    store.close()


def test_watcher_errors_do_not_stop_delivery(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(directory)
    store.create("/a")

    def bad(event: WatchedEvent) -> None:
        raise RuntimeError("watcher bug")

    good = Recorder()
    store.get("/a", watch=bad)
    store.set("/a", b"1")
    store.get("/a", watch=good)
    store.set("/a", b"2")
    settle(store)
    assert good.events == [WatchedEvent("CHANGED", "/a")]
    assert "watcher bug" in caplog.text
    store.close()


def test_concurrent_writers(directory: Path) -> None:
    store = open_store(directory)
    store.create("/q")
    created: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for i in range(25):
            path = store.create("/q/w-", f"{n}:{i}".encode(), sequential=True)
            with lock:
                created.append(path)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(created)) == 150
    assert store.get_children("/q") == sorted(f"w-{i:010d}" for i in range(150))
    store.close()
    store = open_store(directory)
    assert len(store.get_children("/q")) == 150
    store.close()


def test_close_from_a_watcher_does_not_deadlock(directory: Path) -> None:
    store = open_store(directory)
    store.create("/a")
    done = threading.Event()

    def closer(event: WatchedEvent) -> None:
        store.close()
        done.set()

    store.get("/a", watch=closer)
    store.set("/a", b"x")
    assert done.wait(5)
    open_store(directory).close()
