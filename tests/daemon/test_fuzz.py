"""A seeded fuzz of the request path against a broker process (issue 18's "done means").

Every advertised API and version gets a valid request (built from its kio class with
harmless values: requests that change the cluster are validate-only or name topics and
groups of their own), and a few thousand mutations of those are sent: bit flips, byte
insertions, deletions, truncations, and the hostile-length classes -- a string or array
length set to -1, 2^31-1 or 2^32-1, a record batch or records field claiming 2 GB --
plus compression bombs (a 128 MiB record in a few KB of zstd, lz4 and gzip). Each
mutation goes on a fresh connection or on a reused one, followed by an ApiVersions probe:
the broker must answer the probe (having answered the mutation or not, as its kind
allows) or close that connection, within seconds unless the mutated request asked it to
wait (a fetch's max_wait, a timeout). Throughout, a witness client on its own connection
produces, fetches and asks for metadata; it must keep being answered. At the end the
broker's RSS must be within RSS_BOUND of what it was at the start, and its log must hold
no traceback.

The inter-broker control APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown) are fuzzed too, and this broker, standalone, must never answer them
(issue 18 item 1): valid or mutated, they close the connection.

Deterministic for a seed: KLOG_FUZZ_SEED (printed) picks it, KLOG_FUZZ_MUTATIONS the
count (default 3000); the run also stops after KLOG_FUZZ_SECONDS (default 40).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import random
import socket
import struct
import time
import typing
import uuid
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import lz4.frame
import pytest
import zstandard

from klog.protocol import apis, framing
from klog.protocol.records.batch import ATTRIBUTES_OFFSET, CRC_OFFSET, LENGTH_OFFSET, crc32c
from klog.protocol.records.v2 import build_batch
from klog.protocol.records.varint import write_varint
from klog.testing import KlogBroker
from tests.daemon.hostile import (
    BackgroundClient,
    module_broker,
    requested_wait,
    unexpected_log_lines,
)
from tests.daemon.wire import WireClient, proc_status_bytes, reset_on_close

SEED = int(os.environ.get("KLOG_FUZZ_SEED", "18"))
MUTATIONS = int(os.environ.get("KLOG_FUZZ_MUTATIONS", "3000"))
SECONDS = float(os.environ.get("KLOG_FUZZ_SECONDS", "40"))
RSS_BOUND = 200 << 20
MESSAGE_MAX_BYTES = 1 << 20
REQUEST_MAX_BYTES = 4 << 20
#: What this (standalone) broker serves: every API but the inter-broker control ones.
BROKER_APIS = apis.STANDALONE_ADVERTISED
PROBE_CID = 0x7EADBEEF
WITNESS_TOPIC = "witness"
TOPIC = "fz"  # the topic the valid requests name (two partitions)
RECOMPRESSED_TOPIC = "fz-gzip"  # compression.type=gzip: produce decompresses there
GROUP = "fz-group"
# How long the broker may take to answer or close when the request did not ask it to wait.
ANSWER_SECONDS = 5.0


# --------------------------------------------------------------------------------------------
# Valid requests of every API and version, built from the kio classes


def _named(name: str, *parts: str) -> bool:
    return any(part in name for part in parts)


def _int_value(name: str) -> int:
    if name == "acks":
        return 1
    if _named(name, "replication_factor", "num_partitions", "count"):
        return 1 if name != "count" else 3
    if _named(name, "max_bytes", "partition_max_bytes"):
        return 1 << 16
    if _named(name, "min_bytes"):
        return 1
    if _named(name, "resource_type"):
        return 2  # TOPIC
    if _named(name, "replica_id", "producer_id", "producer_epoch", "epoch", "timestamp",
              "generation_id", "session_id", "log_start_offset", "last_fetched"):
        return -1
    if _named(name, "key_type", "isolation_level", "partition", "index", "broker_id",
              "offset", "config_operation", "election_type"):
        return 0
    return 0


def _string_value(name: str) -> str:
    if _named(name, "topic", "resource_name") or name == "name":
        return TOPIC
    if _named(name, "group", "coordinator", "key"):
        return GROUP
    if _named(name, "member_id", "instance", "rack"):
        return ""
    if name == "protocol_type":
        return "consumer"
    if _named(name, "config"):
        return "retention.ms"
    if name == "value":
        return "86400000"
    return "fz"


def _timedelta_value(name: str) -> datetime.timedelta:
    if _named(name, "session_timeout", "rebalance_timeout"):
        return datetime.timedelta(seconds=6)
    if _named(name, "retention"):
        return datetime.timedelta(milliseconds=-1)
    return datetime.timedelta(milliseconds=20)  # max_wait, timeout: answers come at once


def _value(owner: type, name: str, hint: Any, kafka_type: str | None) -> Any:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is typing.Union or (args and type(None) in typing.get_args(hint)):
        return _value(owner, name, args[0], kafka_type)
    if origin is tuple:
        if args and dataclasses.is_dataclass(args[0]):
            return (_entity(args[0]),)
        inner = args[0] if args else int
        return (_value(owner, name, inner, kafka_type),)
    if dataclasses.is_dataclass(hint):
        return _entity(hint)
    if kafka_type == "records":
        return build_batch([(int(time.time() * 1000), None, b"fz")])
    if kafka_type == "bytes":
        return b""
    if kafka_type == "bool" or hint is bool:
        return name == "validate_only" or name == "include_synonyms"
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return _timedelta_value(name)
    if kafka_type in ("datetime_i64", "datetime"):
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    if kafka_type == "error_code":
        return 0
    if kafka_type in ("string", "compact_string") or hint is str or (
            isinstance(hint, type) and issubclass(hint, str)):
        return hint(_string_value(name)) if isinstance(hint, type) else _string_value(name)
    if kafka_type == "float64":
        return 0.0
    value = _int_value(name)
    return hint(value) if isinstance(hint, type) and issubclass(hint, int) else value


def _entity(cls: type) -> Any:
    hints = typing.get_type_hints(cls)
    values = {f.name: _value(cls, f.name, hints[f.name], f.metadata.get("kafka_type"))
              for f in dataclasses.fields(cls)}
    return cls(**values)


def _fix_for_api(api_key: int, entity: Any) -> Any:
    """Per-API adjustments a name-based default cannot know."""
    changes: dict[str, Any] = {}
    if api_key == 3 and hasattr(entity, "allow_auto_topic_creation"):
        changes["allow_auto_topic_creation"] = False
    if api_key == 19:  # CreateTopics: a new topic, validate only
        changes["topics"] = tuple(dataclasses.replace(t, name="fz-new", assignments=())
                                  for t in entity.topics)
    if api_key == 20:  # DeleteTopics: a topic that does not exist
        if hasattr(entity, "topic_names"):
            changes["topic_names"] = ("fz-absent",)
        if hasattr(entity, "topics"):
            changes["topics"] = tuple(dataclasses.replace(t, name="fz-absent")
                                      for t in entity.topics)
    if api_key == 11:  # JoinGroup: a group of its own (a second member waits for the first)
        changes["group_id"] = f"fz-join-{type(entity).__version__}"
    if api_key == 22:  # InitProducerId without a transactional id
        changes["transactional_id"] = None
    return dataclasses.replace(entity, **changes) if changes else entity


def _valid_requests() -> list[tuple[int, int, bytes]]:
    """(api key, version, request payload: header + body) of every API and version a
    broker advertises (in cluster mode: the inter-broker control APIs included)."""
    requests = []
    for api_key, (low, high) in sorted(apis.ADVERTISED.items()):
        for version in range(low, high + 1):
            cls = apis.spec_for(api_key).request_entity(version)
            entity = _fix_for_api(api_key, _entity(cls))
            body = apis.encode_request(entity)
            apis.decode_request(api_key, version, body)  # it is valid
            header = framing.encode_request_header(api_key, version, 1000, "fuzz")
            requests.append((api_key, version, header + body))
    return requests


# --------------------------------------------------------------------------------------------
# Mutations


_HOSTILE_I32 = (-1, -2, 2**31 - 1, 2**31 - 2, -2**31, 0x7FFF_0000)
_HOSTILE_I16 = (-1, -2, 0x7FFF, -0x8000)
_HOSTILE_UVARINT = (b"\xff\xff\xff\xff\x0f",  # 2^32 - 1
                    b"\xfe\xff\xff\xff\x07",  # 2^31 - 2
                    b"\x80\x80\x80\x80\x08",  # 2^31
                    b"\xff\xff\xff\xff\xff\x01")  # six bytes: not a varint


def _length_fields(payload: bytes) -> list[tuple[int, str]]:
    """Where ``payload`` (very likely) holds a length or count: an int16 string length
    followed by that many printable bytes, a compact string's uvarint likewise, an int32
    count of 1 or a compact count of 1 (the valid requests have one element per array),
    an int32 size followed by a record batch."""
    found = []
    for i in range(len(payload) - 1):
        (n16,) = struct.unpack_from(">h", payload, i)
        if 0 < n16 <= len(payload) - i - 2 and payload[i + 2:i + 2 + n16].isascii() \
                and payload[i + 2:i + 2 + n16].decode().isprintable():
            found.append((i, "i16"))
        n = payload[i]
        if 1 < n < 0x80 and payload[i + 1:i + n].isascii() and n - 1 <= len(payload) - i - 1 \
                and payload[i + 1:i + n].decode().isprintable():
            found.append((i, "uvarint"))
        if i + 4 <= len(payload):
            (n32,) = struct.unpack_from(">i", payload, i)
            if n32 == 1:
                found.append((i, "i32"))
            elif 61 <= n32 <= len(payload) - i - 4 and payload[i + 4 + 16:i + 4 + 17] == b"\x02":
                found.append((i, "i32"))  # records size, then a v2 batch (magic at 16)
        if n == 2 and i > 0:
            found.append((i, "uvarint"))
    return found


def _hostile_length(rng: random.Random, payload: bytearray, fields: list[tuple[int, str]]
                    ) -> bytearray:
    pos, kind = rng.choice(fields)
    if kind == "i16" and pos + 2 <= len(payload):
        struct.pack_into(">h", payload, pos, rng.choice(_HOSTILE_I16))
    elif kind == "i32" and pos + 4 <= len(payload):
        struct.pack_into(">i", payload, pos, rng.choice(_HOSTILE_I32))
    else:
        payload[pos:pos + 1] = rng.choice(_HOSTILE_UVARINT)
    return payload


def _batch_size_claims(rng: random.Random, payload: bytearray) -> bytearray:
    """A record batch in the payload claims a huge or negative length or record count."""
    start = payload.find(b"\x02", 12)
    while start != -1 and start >= 16:
        base = start - 16  # magic sits 16 bytes into a batch
        if base + 61 <= len(payload):
            field = rng.choice((LENGTH_OFFSET, 57))  # batch length, record count
            struct.pack_into(">i", payload, base + field, rng.choice(_HOSTILE_I32))
            return payload
        start = payload.find(b"\x02", start + 1)
    return payload


def _bit_flips(rng: random.Random, payload: bytearray) -> bytearray:
    for _ in range(rng.choice((1, 1, 2, 4))):
        if payload:
            pos = rng.randrange(len(payload))
            payload[pos] ^= 1 << rng.randrange(8)
    return payload


def _insert(rng: random.Random, payload: bytearray) -> bytearray:
    pos = rng.randrange(len(payload) + 1)
    payload[pos:pos] = rng.randbytes(rng.choice((1, 1, 2, 4, 17)))
    return payload


def _delete(rng: random.Random, payload: bytearray) -> bytearray:
    if payload:
        pos = rng.randrange(len(payload))
        del payload[pos:pos + rng.choice((1, 1, 2, 4, 17))]
    return payload


def _truncate(rng: random.Random, payload: bytearray) -> bytearray:
    return payload[:rng.randrange(len(payload))] if payload else payload


def _overwrite(rng: random.Random, payload: bytearray) -> bytearray:
    if len(payload) >= 4:
        pos = rng.randrange(len(payload) - 3)
        struct.pack_into(">i", payload, pos, rng.choice(_HOSTILE_I32))
    return payload


_MUTATORS: tuple[Callable[[random.Random, bytearray], bytearray], ...] = (
    _bit_flips, _bit_flips, _insert, _delete, _truncate, _overwrite, _batch_size_claims)


def _bomb_records(codec: int) -> bytes:
    """One record whose value is 128 MiB of zeros (past the broker's 64 MiB bound on
    decompressed data), compressed with ``codec`` into a few KB."""
    size = 128 << 20
    body = b"\x00" + write_varint(0) + write_varint(0) + write_varint(-1) + write_varint(size)
    record_head = write_varint(len(body) + size + 1) + body
    chunk = bytes(1 << 20)
    if codec == 4:
        compressor = zstandard.ZstdCompressor(level=3).compressobj()
        out = [compressor.compress(record_head)]
        out += [compressor.compress(chunk) for _ in range(size >> 20)]
        out.append(compressor.compress(b"\x00") + compressor.flush())
        return b"".join(out)
    if codec == 3:
        lz4_compressor = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                                      block_linked=False)
        out = [lz4_compressor.begin(), lz4_compressor.compress(record_head)]
        out += [lz4_compressor.compress(chunk) for _ in range(size >> 20)]
        out.append(lz4_compressor.compress(b"\x00") + lz4_compressor.flush())
        return b"".join(out)
    deflate = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip
    out = [deflate.compress(record_head)]
    out += [deflate.compress(chunk) for _ in range(size >> 20)]
    out.append(deflate.compress(b"\x00") + deflate.flush())
    return b"".join(out)


def _bomb_batch(codec: int) -> bytes:
    template = bytearray(build_batch([(int(time.time() * 1000), None, b"x")],
                                     compression=codec))
    batch_bytes = template[:61] + _bomb_records(codec)
    struct.pack_into(">i", batch_bytes, LENGTH_OFFSET, len(batch_bytes) - 12)
    struct.pack_into(">I", batch_bytes, CRC_OFFSET, crc32c(bytes(batch_bytes[ATTRIBUTES_OFFSET:])))
    return bytes(batch_bytes)


def _bomb_requests() -> list[bytes]:
    """Produce v9 requests carrying a compression bomb, to a topic that keeps the
    producer's compression and to one that recompresses."""
    client = WireClient.__new__(WireClient)
    client._correlation = 0
    requests = []
    for codec in (1, 3, 4):
        bomb = _bomb_batch(codec)
        assert len(bomb) < MESSAGE_MAX_BYTES, (codec, len(bomb))
        for topic in (TOPIC, RECOMPRESSED_TOPIC):
            values = {"transactional_id": None, "acks": 1, "timeout": 5000,
                      "topic_data": [{"name": topic, "partition_data": [
                          {"index": 0, "records": bomb}]}]}
            requests.append(client.request_frame(0, 9, values, correlation_id=1000)[1][4:])
    return requests


@dataclasses.dataclass
class Mutation:
    api_key: int
    version: int
    kind: str
    payload: bytes
    framed: bool = True  # the size prefix matches the payload

    def wire(self, rng: random.Random) -> bytes:
        if self.framed:
            return framing.encode_frame(self.payload)
        return struct.pack(">i", rng.choice((-1, 2**31 - 1, len(self.payload) + 1000,
                                             REQUEST_MAX_BYTES + 1))) + self.payload


def _mutations(rng: random.Random, valid: list[tuple[int, int, bytes]],
               bombs: list[bytes]) -> Iterator[Mutation]:
    fields = {(k, v): _length_fields(p[_header_size(p):]) for k, v, p in valid}
    i = 0
    while True:
        api_key, version, payload = valid[i % len(valid)]
        i += 1
        header = _header_size(payload)
        body = bytearray(payload[header:])
        roll = rng.random()
        if roll < 0.01:
            yield Mutation(0, 9, "compression-bomb", rng.choice(bombs))
            continue
        if roll < 0.35 and fields[(api_key, version)]:
            kind = "hostile-length"
            body = _hostile_length(rng, body, fields[(api_key, version)])
        elif roll < 0.40:
            yield Mutation(api_key, version, "frame-size", payload, framed=False)
            continue
        else:
            mutators = [rng.choice(_MUTATORS) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
            kind = mutators[0].__name__.strip("_") if len(mutators) == 1 else "stacked"
            for mutator in mutators:
                body = mutator(rng, body)
        if rng.random() < 0.05:  # the header too: api key, version, correlation id
            whole = _bit_flips(rng, bytearray(payload[:header]) + body)
            yield Mutation(api_key, version, "header", _defused(bytes(whole)))
            continue
        yield Mutation(api_key, version, kind, _defused(payload[:header] + bytes(body)))


#: The most partitions a mutated CreateTopics or CreatePartitions may ask for.
MAX_PARTITIONS = 50


def _defused(payload: bytes) -> bytes:
    """A mutated request that decodes as CreateTopics or CreatePartitions asking for more
    than MAX_PARTITIONS partitions asks for MAX_PARTITIONS instead: the broker does what an
    administrator asks, and 32,767 partitions (a flipped validate_only and a count set to
    0x7FFF) keep its controller busy for a minute and exhaust its descriptors -- issue 18
    item 2, a limit of the admin path, not of the request path fuzzed here."""
    try:
        header, offset = framing.parse_request_header(memoryview(payload), apis.ADVERTISED)
        if header.api_key not in (19, 37):
            return payload
        request = apis.decode_request(header.api_key, header.api_version,
                                      memoryview(payload)[offset:])
    except Exception:
        return payload
    field = "num_partitions" if header.api_key == 19 else "count"
    if all(getattr(t, field) <= MAX_PARTITIONS for t in request.topics):
        return payload
    topics = tuple(dataclasses.replace(t, **{field: min(getattr(t, field), MAX_PARTITIONS)})
                   for t in request.topics)
    return payload[:offset] + apis.encode_request(dataclasses.replace(request, topics=topics))


def _header_size(payload: bytes) -> int:
    header = framing.parse_request_header(memoryview(payload), apis.ADVERTISED)[1]
    return header


# --------------------------------------------------------------------------------------------
# The broker, the witness, and the outcome of one mutation


def _allowed_wait(payload: bytes) -> float:
    """Seconds the broker may take on a request because it asks to wait: its decoded
    max_wait or timeout (0 if it does not decode: the broker then closes at once)."""
    wait = requested_wait(payload, ("max_wait", "timeout", "timeout_ms", "rebalance_timeout",
                                    "session_timeout"), 3_600_000)
    return 0.0 if wait is None else wait


_PROBE = framing.encode_request(18, 0, PROBE_CID, "probe", b"")


def _check_answers(payload: bytes, answers: list[bytes]) -> None:
    """What the broker answered a mutated request it accepted: at most one answer, with
    the request's correlation id, decodable as that API and version's response (or, for
    an ApiVersions version it does not support, as the v0 fallback). A request whose
    header the broker must refuse (an API it does not serve) gets no answer."""
    assert len(answers) <= 1, f"{len(answers)} answers to one request"
    if not answers:
        return  # acks=0 produce, or a request the broker refused by closing
    try:
        header, _ = framing.parse_request_header(memoryview(payload), BROKER_APIS)
    except Exception as exc:
        raise AssertionError(f"answered a request it must refuse ({exc})") from None
    version = header.api_version
    if framing.is_unsupported_api_versions(header, BROKER_APIS):
        version = 0
    header_version = apis.response_header_version(header.api_key, version)
    cid, offset = framing.parse_response_header(answers[0], header_version)
    assert cid == header.correlation_id, (cid, header)
    apis.decode_response(header.api_key, version, memoryview(answers[0])[offset:])


def _read_until_probe_or_close(sock: socket.socket, buffer: bytearray, deadline: float,
                               answers: list[bytes] | None = None) -> str:
    """"answered" when the probe's answer arrives, "closed" when the broker closes the
    connection, "waiting" if neither by ``deadline``. The answers before the probe's are
    added to ``answers``."""
    while True:
        while len(buffer) >= 8:
            (size,) = struct.unpack_from(">i", buffer)
            if len(buffer) < 4 + size:
                break
            frame = bytes(buffer[4:4 + size])
            del buffer[:4 + size]
            if frame[:4] == struct.pack(">i", PROBE_CID):
                return "answered"
            if answers is not None:
                answers.append(frame)
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(1 << 16)
        except (ConnectionResetError, BrokenPipeError):
            return "closed"
        except TimeoutError:
            return "waiting"
        if not chunk:
            return "closed"
        buffer += chunk


class Sender:
    """Sends mutations, on a reused connection while the broker keeps it open and on a
    fresh one otherwise; says what the broker did with each."""

    def __init__(self, port: int, rng: random.Random) -> None:
        self.port = port
        self.rng = rng
        self.reused: socket.socket | None = None
        self.buffer = bytearray()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def send(self, mutation: Mutation) -> str:
        reuse = mutation.framed and self.rng.random() < 0.5
        if reuse:
            if self.reused is None:
                self.reused, self.buffer = self._connect(), bytearray()
            sock, buffer = self.reused, self.buffer
        else:
            sock, buffer = self._connect(), bytearray()
        outcome = "error"
        try:
            try:
                sock.sendall(mutation.wire(self.rng) + _PROBE)
                if not reuse:
                    sock.shutdown(socket.SHUT_WR)  # whatever the frame claims, it ends here
            except (ConnectionResetError, BrokenPipeError):
                outcome = "closed"
            else:
                wait = _allowed_wait(mutation.payload) if mutation.framed else 0.0
                answers: list[bytes] = []
                outcome = _read_until_probe_or_close(
                    sock, buffer, time.monotonic() + ANSWER_SECONDS + min(wait, 1.0), answers)
                if outcome == "answered" and mutation.framed:
                    _check_answers(mutation.payload, answers)
                if outcome == "waiting" and wait > 1.0:
                    outcome = "waits-as-asked"
            if not reuse and outcome == "answered":
                # half-closed: the broker closes once it has answered
                outcome = "answered" if _read_until_probe_or_close(
                    sock, buffer, time.monotonic() + ANSWER_SECONDS) == "closed" \
                    else "answered-not-closed"
            return outcome
        finally:
            if not reuse or outcome != "answered":
                with contextlib.suppress(OSError):
                    reset_on_close(sock)
                sock.close()
                if reuse:
                    self.reused = None

    def close(self) -> None:
        if self.reused is not None:
            self.reused.close()


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KlogBroker]:
    with module_broker(tmp_path_factory.mktemp("fuzz"), message_max_bytes=MESSAGE_MAX_BYTES,
                       request_max_bytes=REQUEST_MAX_BYTES, topics=(WITNESS_TOPIC, TOPIC),
                       configured_topics={RECOMPRESSED_TOPIC: {"compression.type": "gzip"}},
                       configured_partitions=1) as broker:
        yield broker


def test_fuzz_the_request_path(fuzz_broker: KlogBroker) -> None:
    print(f"fuzz seed {SEED} (KLOG_FUZZ_SEED), {MUTATIONS} mutations (KLOG_FUZZ_MUTATIONS)")
    rng = random.Random(SEED)
    valid = _valid_requests()
    bombs = _bomb_requests()
    assert fuzz_broker.process is not None
    pid = fuzz_broker.process.pid
    sender = Sender(fuzz_broker.port, rng)
    # every valid request is answered as it is (the baseline the mutations start from),
    # but for the control APIs, which this standalone broker refuses by closing
    for api_key, version, payload in valid:
        outcome = sender.send(Mutation(api_key, version, "valid", payload))
        expected = "answered" if api_key in BROKER_APIS else "closed"
        assert outcome == expected, (apis.spec_for(api_key).name, version, outcome)
    rss_start = proc_status_bytes(pid, "VmRSS")
    witness = BackgroundClient(fuzz_broker.port, WITNESS_TOPIC, name="fuzz-witness",
                               value_prefix=b"witness", timeout=20, pause=0.005,
                               metadata=True)
    witness.start()
    outcomes: dict[str, int] = {}
    kinds: dict[str, int] = {}
    started = time.monotonic()
    sent = 0
    checked_rounds = 0
    try:
        for mutation in _mutations(rng, valid, bombs):
            if sent >= MUTATIONS or time.monotonic() - started > SECONDS:
                break
            outcome = sender.send(mutation)
            sent += 1
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            kinds[mutation.kind] = kinds.get(mutation.kind, 0) + 1
            assert outcome in ("answered", "closed", "waits-as-asked"), (
                f"mutation {sent} ({mutation.kind} of {apis.spec_for(mutation.api_key).name} "
                f"v{mutation.version}): {outcome}; frame {mutation.wire(rng)[:300]!r}")
            if sent % 200 == 0:
                assert fuzz_broker.process.poll() is None, fuzz_broker.log_tail()
                assert not witness.failures, witness.failures
                assert witness.made_progress_since(checked_rounds, 20), \
                    f"the witness got no answer after mutation {sent}"
                checked_rounds = witness.rounds
    finally:
        sender.close()
        witness.stop(20)
    elapsed = time.monotonic() - started
    rss_end, rss_peak = proc_status_bytes(pid, "VmRSS"), proc_status_bytes(pid, "VmHWM")
    print(f"fuzz: {sent} mutations of {len(valid)} valid requests in {elapsed:.1f} s; "
          f"outcomes {outcomes}; kinds {kinds}; witness rounds {witness.rounds}; "
          f"RSS {rss_start >> 20} -> {rss_end >> 20} MiB (peak {rss_peak >> 20} MiB)")
    assert fuzz_broker.process.poll() is None, fuzz_broker.log_tail()
    assert not witness.failures, witness.failures
    assert witness.rounds > 0
    assert sent >= min(MUTATIONS, 1000)
    assert rss_end - rss_start < RSS_BOUND
    assert unexpected_log_lines(fuzz_broker) == [], fuzz_broker.log_tail(60)
