"""local_format's read-only reader against the files a real LocalMetadataStore writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from klog.daemon.metastore.base import MetastoreCorruptError
from klog.daemon.metastore.local import LocalMetadataStore
from klog.daemon.metastore.local_format import parse_record, read_nodes


def test_read_nodes_sees_snapshot_and_journal(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    # A tiny snapshot size: the first writes end in the snapshot, the last in the journal.
    store = LocalMetadataStore(directory, snapshot_bytes=64)
    store.start()
    try:
        store.create("/a/b", b"1", make_parents=True)
        store.create("/gone", b"x")
        store.delete("/gone")
        store.set("/a/b", b"2")
        expected = {"/a/b": b"2", "/a": b""}
    finally:
        store.close()
    nodes = read_nodes(directory)
    assert {p: nodes[p] for p in expected} == expected
    assert "/gone" not in nodes


def test_a_torn_journal_tail_ends_the_reading(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    store = LocalMetadataStore(directory)
    store.start()
    try:
        store.create("/kept", b"k")
    finally:
        store.close()
    with open(directory / "journal", "ab") as f:
        f.write(b"\x00\x00\x00\x10garbage")
    assert read_nodes(directory)["/kept"] == b"k"
    record, why = parse_record(memoryview((directory / "journal").read_bytes()), 8)
    assert record is not None and not why


def test_a_damaged_snapshot_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "ms"
    directory.mkdir()
    (directory / "snapshot").write_bytes(b"KLOGMSS1" + b"\x00" * 12 + b"{}")
    with pytest.raises(MetastoreCorruptError, match="is damaged"):
        read_nodes(directory)
