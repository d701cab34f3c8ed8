"""FetchResponse encoding with record data left as holes, for zero-copy sends.

kio can encode a FetchResponse, but only with the records as ``bytes`` -- which would mean
reading every fetched byte into Python. Here the response is encoded as a list of chunks:
``bytes`` for everything the protocol frames, and, where a partition's records go, the
caller's own region object (anything with an integer ``size``), which the network layer
then sends with ``sendfile`` straight from the segment file. This module does no I/O: it
never looks inside a region, it only needs its size for the length prefix.

Layouts follow FetchResponse.json, versions 0 through 17 (Kafka 3.9's): v0 has no
throttle time, v0-v3 no last stable offset and aborted transactions (their records are
message format v0/v1 when the consumer cannot read v2: see records/down_convert.py);
v12 is the first flexible version (tagged fields: a partition's CurrentLeader, tag 1);
v13+ name each topic by its id (a UUID) instead of its name; v16+ may carry NodeEndpoints
(top-level tag 0: the brokers the CurrentLeader fields name, KIP-951). v14-v17 change
nothing else in the response.

Also the one reading of a FetchRequest's replica id: a top-level field up to v14, inside
the tagged ReplicaState from v15 (KIP-903), -1 when absent (a consumer).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from klog.protocol.records.varint import write_unsigned_varint as encode_uvarint

MIN_VERSION = 0
MAX_VERSION = 17
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13  # topics named by id, in requests and responses
REPLICA_STATE_FROM = 15  # the replica id moves into the tagged ReplicaState
NODE_ENDPOINTS_FROM = 16
ZERO_UUID = uuid.UUID(int=0)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_PARTITION_HEAD_V0 = struct.Struct(">ihq")  # v0-v3: index, error, high watermark
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_LEADER = struct.Struct(">ii")
_NO_LEADER = (-1, -1)


class Region(Protocol):
    """A run of record bytes the caller will send itself (e.g. a file region)."""

    size: int


Records = bytes | bytearray | memoryview | Region | None


@dataclass(slots=True)
class FetchPartitionData:
    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: Sequence[tuple[int, int]] | None = None  # (producer id, first offset)
    preferred_read_replica: int = -1
    records: Records = None
    #: (leader id, leader epoch): the CurrentLeader tagged field (v12+), sent with
    #: NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH; None leaves it out.
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class FetchTopicData:
    topic: str
    partitions: list[FetchPartitionData] = field(default_factory=list)
    #: what v13+ sends instead of the name (the zero UUID when unknown)
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """One broker of the NodeEndpoints field (v16+)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


def node_endpoints_tags(nodes: Sequence[NodeEndpoint]) -> bytes:
    """A response's tagged-field section holding only NodeEndpoints as tag 0 (KIP-951:
    FetchResponse v16+, ProduceResponse v10+ alike)."""
    field_buf = bytearray()
    _array_len(field_buf, len(nodes), True)
    for node in nodes:
        field_buf += _I32.pack(node.node_id)
        _string(field_buf, node.host, True)
        field_buf += _I32.pack(node.port)
        if node.rack is None:
            field_buf += b"\x00"
        else:
            _string(field_buf, node.rack, True)
        field_buf += b"\x00"  # the endpoint's own tagged fields: none
    return b"\x01\x00" + encode_uvarint(len(field_buf)) + bytes(field_buf)


def request_replica_id(request: Any) -> int:
    """The replica id of a decoded FetchRequest of any version: the broker id of the
    follower sending it, -1 for a consumer. v15+ carry it in ReplicaState (KIP-903)."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


Chunk = bytes | Any  # bytes, or one of the caller's Region objects


def records_size(records: Records) -> int:
    if records is None:
        return 0
    if isinstance(records, (bytes, bytearray, memoryview)):
        return len(records)
    return int(records.size)


def encode_fetch_response(
    version: int,
    topics: Sequence[FetchTopicData],
    *,
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> list[Chunk]:
    """The response body as chunks (bytes and the caller's regions), in wire order."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"FetchResponse v{version} is not encoded here")
    flexible = version >= FLEXIBLE_FROM
    by_id = version >= TOPIC_IDS_FROM
    out: list[Chunk] = []
    buf = bytearray(_I32.pack(throttle_time_ms) if version >= 1 else b"")
    if version >= 7:
        buf += _I16.pack(error_code) + _I32.pack(session_id)
    _array_len(buf, len(topics), flexible)
    for topic in topics:
        if by_id:
            buf += (topic.topic_id or ZERO_UUID).bytes
        else:
            _string(buf, topic.topic, flexible)
        _array_len(buf, len(topic.partitions), flexible)
        for p in topic.partitions:
            if version < 4:
                buf += _PARTITION_HEAD_V0.pack(p.partition_index, p.error_code, p.high_watermark)
                buf = _records(out, buf, p.records, False)
                continue
            buf += _PARTITION_HEAD.pack(
                p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
            )
            if version >= 5:
                buf += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                buf += b"\x00" if flexible else _I32.pack(-1)
            else:
                _array_len(buf, len(aborted), flexible)
                for producer_id, first_offset in aborted:
                    buf += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        buf += b"\x00"
            if version >= 11:
                buf += _I32.pack(p.preferred_read_replica)
            buf = _records(out, buf, p.records, flexible)
            if flexible:
                if p.current_leader is None or p.current_leader == _NO_LEADER:
                    buf += b"\x00"  # partition tagged fields: none (a default is left out)
                else:
                    # one tagged field, tag 1, 9 bytes: leader id, epoch, its own (no) tags
                    buf += b"\x01\x01\x09" + _LEADER.pack(*p.current_leader) + b"\x00"
        if flexible:
            buf += b"\x00"  # topic tagged fields
    if flexible:
        if node_endpoints and version >= NODE_ENDPOINTS_FROM:
            buf += node_endpoints_tags(node_endpoints)
        else:
            buf += b"\x00"  # response tagged fields: none
    if buf:
        out.append(bytes(buf))
    return out


def _records(out: list[Chunk], buf: bytearray, records: Records, flexible: bool
             ) -> bytearray:
    """Append one partition's records field; returns the buffer to go on with (a new one
    after a region, which goes into ``out`` as itself)."""
    if records is None:
        buf += b"\x00" if flexible else _I32.pack(-1)
        return buf
    size = records_size(records)
    if flexible:
        buf += encode_uvarint(size + 1)
    else:
        buf += _I32.pack(size)
    if size:
        if isinstance(records, (bytes, bytearray, memoryview)):
            buf += records
        else:
            out.append(bytes(buf))
            out.append(records)
            return bytearray()
    return buf


def chunks_size(chunks: Sequence[Chunk]) -> int:
    """Total body size of ``chunks`` (for the frame's size prefix)."""
    return sum(len(c) if isinstance(c, (bytes, bytearray, memoryview)) else int(c.size)
               for c in chunks)


def _array_len(buf: bytearray, n: int, flexible: bool) -> None:
    buf += encode_uvarint(n + 1) if flexible else _I32.pack(n)


def _string(buf: bytearray, value: str, flexible: bool) -> None:
    raw = value.encode()
    if flexible:
        buf += encode_uvarint(len(raw) + 1)
    else:
        buf += _I16.pack(len(raw))
    buf += raw
