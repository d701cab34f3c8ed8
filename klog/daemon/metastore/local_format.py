"""The standalone metadata store's files, parsed once: for the store that owns them
(klog/daemon/metastore/local.py, which documents the format) and for offline readers
(``read_nodes``: ``klog compact`` reads a stopped broker's topic configs).

    snapshot: b"KLOGMSS1" | u64 payload length | u32 crc32(payload) | payload
    journal:  b"KLOGMSJ1" | records...
    record:   u32 payload length | u32 crc32(payload) | payload

Payloads are compact JSON; node data is base64. Pure parsing: no locks, no writes.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from pathlib import Path
from typing import Any

from klog.daemon.metastore.base import MetastoreCorruptError

SNAPSHOT_MAGIC = b"KLOGMSS1"
JOURNAL_MAGIC = b"KLOGMSJ1"
SNAPSHOT_HEADER = struct.Struct(">QI")  # payload length, crc32
RECORD_HEADER = struct.Struct(">II")  # payload length, crc32
# A record holds one transaction; a multi of many max-size payloads is still far below this.
# A length above it is damage, not data (checked before any allocation).
MAX_RECORD_BYTES = 256 * 1024 * 1024


def parse_snapshot(raw: bytes) -> tuple[int, list[Any]]:
    """A snapshot file's (zxid, node entries); ValueError saying why it is damaged."""
    head = len(SNAPSHOT_MAGIC) + SNAPSHOT_HEADER.size
    if len(raw) < head or raw[: len(SNAPSHOT_MAGIC)] != SNAPSHOT_MAGIC:
        raise ValueError("not a klog metadata snapshot")
    length, crc = SNAPSHOT_HEADER.unpack_from(raw, len(SNAPSHOT_MAGIC))
    if length != len(raw) - head:
        raise ValueError(f"length field {length} but {len(raw) - head} bytes follow the header")
    body = memoryview(raw)[head:]
    if zlib.crc32(body) != crc:
        raise ValueError("checksum mismatch")
    try:
        doc = json.loads(bytes(body))
        zxid = doc["zxid"]
        entries = doc["nodes"]
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise ValueError(str(e) or type(e).__name__) from None
    if not isinstance(zxid, int) or not isinstance(entries, list):
        raise ValueError("bad top-level fields")
    return zxid, entries


def parse_record(view: memoryview, pos: int) -> tuple[tuple[int, dict[str, Any]] | None, str]:
    """The journal record at ``pos``: ((payload length, transaction), "") or (None, why it
    is not one)."""
    remaining = len(view) - pos
    if remaining < RECORD_HEADER.size:
        return None, f"{remaining} bytes, too short for a record header"
    length, crc = RECORD_HEADER.unpack_from(view, pos)
    if length == 0 or length > MAX_RECORD_BYTES:
        return None, f"impossible record length {length}"
    if length > remaining - RECORD_HEADER.size:
        return None, f"record of {length} bytes runs past the end of the file"
    payload = view[pos + RECORD_HEADER.size : pos + RECORD_HEADER.size + length]
    if zlib.crc32(payload) != crc:
        return None, "checksum mismatch"
    try:
        doc = json.loads(bytes(payload))
    except (ValueError, RecursionError):
        return None, "payload is not JSON"
    if not isinstance(doc, dict):
        return None, "payload is not a transaction"
    return (length, doc), ""


def read_nodes(directory: Path) -> dict[str, bytes]:
    """Path -> data of every node of a standalone store's directory, read-only.

    The snapshot, then the journal records above its zxid. Read without opening the store
    (opening takes its lock and journals the expiry of dead sessions: a write). A damaged
    journal record ends the reading there, as the store drops a torn tail; a damaged
    snapshot is MetastoreCorruptError."""
    nodes: dict[str, bytes] = {}
    snapshot = directory / "snapshot"
    zxid = 0
    if snapshot.exists():
        try:
            zxid, entries = parse_snapshot(snapshot.read_bytes())
            for entry in entries:
                nodes[entry[0]] = base64.b64decode(entry[1])
        except (ValueError, TypeError, IndexError) as e:
            raise MetastoreCorruptError(f"metadata snapshot {snapshot} is damaged ({e})"
                                        ) from None
    journal = directory / "journal"
    raw = journal.read_bytes() if journal.exists() else b""
    view = memoryview(raw)
    pos = len(JOURNAL_MAGIC)
    while pos < len(raw):
        record, _why = parse_record(view, pos)
        if record is None:
            break
        length, doc = record
        pos += RECORD_HEADER.size + length
        if doc.get("z", 0) <= zxid:
            continue
        for op in doc.get("ops", []):
            if op[0] in ("c", "s"):
                nodes[op[1]] = base64.b64decode(op[2])
            elif op[0] == "d":
                nodes.pop(op[1], None)
    return nodes
