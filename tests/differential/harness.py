"""The differential test's machinery: one request sent to klog and to Apache Kafka, both
answers made comparable, and their differences listed.

A ``Case`` is one request (an API, a version, plain values completed to that version's
entity, or raw bytes for a malformed frame). A ``Side`` is one broker as the test sees it:
a connection, the values its earlier answers gave (producer ids, member ids, generations:
a later case asks for them by name, as a client would), and what must differ between two
brokers that are otherwise in the same state -- cluster ids, topic ids, producer ids,
member ids, hosts and ports, timestamps of now, throttle times, session ids, log dir paths
and sizes of disks, and the words of error messages (whether there is one is kept).
``normalise`` replaces each with a placeholder both sides share (topic ids by topic name,
producer and member ids by the order each side handed them out); ``differences`` walks the
two normalised trees field by field.

Record data is compared batch by batch: every header field (producer ids mapped as above,
broker-chosen timestamps of now as ``<now>``) and a digest of the records; the CRC only
where no field it covers had to be mapped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import fnmatch
import hashlib
import re
import socket
import struct
import time
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from klog.protocol import apis, framing
from klog.protocol.entities import build

Values = Mapping[str, Any]
#: A case's values: plain, or computed from the side's context (its earlier answers).
ValuesOf = Values | Callable[["Side"], Values]

ZERO_UUID = uuid.UUID(int=0)
_NOW_WINDOW_MS = 6 * 3600 * 1000  # a timestamp this close to now was the broker's clock


# --- requests ------------------------------------------------------------------------------


def _zero(annotation: Any) -> Any:
    """The zero value of a field's type: what a case that does not name it sends."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        if type(None) in args:
            return None
        return _zero(args[0])
    if origin is tuple:
        return ()
    if isinstance(annotation, type):
        if dataclasses.is_dataclass(annotation):
            return complete(annotation, {})
        if issubclass(annotation, bool):
            return False
        if issubclass(annotation, enum.Enum):
            return next(iter(annotation))
        if issubclass(annotation, int):
            return 0
        if issubclass(annotation, float):
            return 0.0
        if issubclass(annotation, str):
            return ""
        if issubclass(annotation, bytes):
            return b""
        if issubclass(annotation, datetime.timedelta):
            return 0
        if issubclass(annotation, uuid.UUID):
            return ZERO_UUID
    supertype = getattr(annotation, "__supertype__", None)  # NewType
    if supertype is not None:
        return _zero(supertype)
    raise TypeError(f"no zero value for {annotation!r}")


def _item_entity(annotation: Any) -> type | None:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and args:
        return _item_entity(args[0])
    if origin is tuple and args and dataclasses.is_dataclass(args[0]):
        return typing.cast(type, args[0])
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation
    return None


def complete(entity_type: type, values: Values) -> Any:
    """An instance of ``entity_type`` from ``values``: fields of other versions dropped,
    fields the case does not name at their defaults or zero values, nested entities
    completed the same way."""
    hints = typing.get_type_hints(entity_type)
    filled: dict[str, Any] = {}
    for f in dataclasses.fields(entity_type):
        annotation = hints[f.name]
        if f.name in values:
            value = values[f.name]
            item = _item_entity(annotation)
            if item is not None and value is not None:
                if isinstance(value, (list, tuple)):
                    value = [v if isinstance(v, item) else complete(item, v) for v in value]
                elif isinstance(value, Mapping):
                    value = complete(item, value)
            filled[f.name] = value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            filled[f.name] = _zero(annotation)
    return build(entity_type, filled)


@dataclass(frozen=True)
class Case:
    """One request of the corpus; see the module docstring.

    ``values`` are completed to the version's entity; ``raw`` (a function of the side, the
    correlation id) sends bytes as they are instead. ``silent``: no answer is due (acks=0);
    the outcome is then whether the connection stays open. ``fresh``: sent on a connection
    of its own (SASL state, a connection the broker may close). ``capture`` keeps values of
    the answer in the side's context; ``settle`` waits until the side's state has caught
    up with the request (Kafka applies metadata changes after answering). ``retry``: an
    answer for which it is true is a retriable error a client would retry (a coordinator
    still loading, a transaction still completing): the request is sent again, for up to
    ``timeout`` seconds, and the last answer counts.
    """

    name: str
    api_key: int
    version: int
    values: ValuesOf = field(default_factory=dict)
    raw: Callable[[Side, int], bytes] | None = None
    silent: bool = False
    fresh: bool = False
    client_id: str | None = "differential"
    capture: Callable[[Side, Any], None] | None = None
    settle: Callable[[Side], None] | None = None
    retry: Callable[[Any], bool] | None = None
    timeout: float = 15.0
    last: bool = False  # run after every other case (its change would spill into them)

    @property
    def api_name(self) -> str:
        return apis.spec_for(self.api_key).name


# --- the two brokers ----------------------------------------------------------------------


@dataclass
class Outcome:
    """How a broker took a request: ``answer`` (with the decoded response), ``closed`` (the
    connection ended without an answer), ``silent`` (no answer, connection open), or
    ``undecodable`` (an answer kio could not read)."""

    kind: str
    response: Any = None
    detail: str = ""
    unsettled: str = ""  # the state the case should have led to did not come


class Side:
    """One broker: its address, a connection, and what its answers told the test."""

    def __init__(self, name: str, host: str, port: int, node_id: int) -> None:
        self.name = name
        self.address = (host, port)
        self.node_id = node_id
        self.context: dict[str, Any] = {}
        self.topic_ids: dict[uuid.UUID, str] = {}
        self._labels: dict[str, dict[Any, str]] = {}
        self._sock: socket.socket | None = None
        self._correlation = 0

    # -- values of earlier answers --

    def __getitem__(self, key: str) -> Any:
        return self.context[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.context[key] = value

    def topic_id(self, topic: str) -> uuid.UUID:
        for topic_id, name in self.topic_ids.items():
            if name == topic:
                return topic_id
        raise KeyError(f"{self.name} has not named the id of topic {topic!r} yet")

    def label(self, kind: str, value: Any) -> str:
        """A placeholder for a value this side chose (producer id, member id): the n-th
        distinct one it handed out."""
        labels = self._labels.setdefault(kind, {})
        if value not in labels:
            labels[value] = f"<{kind} {len(labels) + 1}>"
        return labels[value]

    # -- the connection --

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self.address, timeout=15)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def run(self, case: Case) -> Outcome:
        """Send ``case`` and read what comes back (again while ``case.retry`` says so)."""
        deadline = time.monotonic() + case.timeout
        while True:
            outcome = self._once(case)
            if outcome.kind != "answer" or case.retry is None or \
                    not case.retry(outcome.response) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if outcome.kind == "answer" and case.capture is not None:
            case.capture(self, outcome.response)
        if case.settle is not None and outcome.kind == "answer":
            try:
                case.settle(self)
            except AssertionError as exc:  # compared: the other side may have settled
                outcome.unsettled = str(exc)
        return outcome

    def _once(self, case: Case) -> Outcome:
        fresh = case.fresh
        sock = self._connect() if fresh else (self._sock or self._connect())
        if not fresh:
            self._sock = sock
        try:
            self._correlation += 1
            cid = self._correlation
            frame = self._frame(case, cid)
            sock.sendall(frame)
            outcome = self._read(sock, case, cid)
        except OSError as exc:  # reset while sending or reading
            outcome = Outcome("closed", detail=type(exc).__name__)
        # A connection that owes an answer it did not give within the timeout is given up,
        # as a client gives it up (a broker answers a connection's requests in order).
        if outcome.kind == "closed" or fresh or (outcome.kind == "silent" and not case.silent):
            sock.close()
            if not fresh:
                self._sock = None
        return outcome

    def call(self, api_key: int, version: int, values: Values, timeout: float = 15.0) -> Any:
        """One request on a connection of its own, outside the corpus (settling, set-up);
        its decoded answer."""
        case = Case("call", api_key, version, values, fresh=True, timeout=timeout)
        outcome = self.run(case)
        if outcome.kind != "answer":
            raise AssertionError(f"{self.name}: {apis.spec_for(api_key).name} v{version}: "
                                 f"{outcome.kind} {outcome.detail}")
        return outcome.response

    def _frame(self, case: Case, cid: int) -> bytes:
        if case.raw is not None:
            return case.raw(self, cid)
        values = case.values(self) if callable(case.values) else case.values
        entity = complete(apis.spec_for(case.api_key).request_entity(case.version), values)
        body = apis.encode_request(entity)
        return framing.encode_request(case.api_key, case.version, cid, case.client_id, body)

    def _read(self, sock: socket.socket, case: Case, cid: int) -> Outcome:
        sock.settimeout(1.0 if case.silent else case.timeout)
        buffer = bytearray()
        try:
            while len(buffer) < 4:
                chunk = sock.recv(65536)
                if not chunk:
                    return Outcome("closed")
                buffer += chunk
            (size,) = struct.unpack_from(">i", buffer)
            while len(buffer) < 4 + size:
                chunk = sock.recv(max(65536, 4 + size - len(buffer)))
                if not chunk:
                    return Outcome("closed", detail="in the middle of an answer")
                buffer += chunk
        except TimeoutError:
            return Outcome("silent", detail=f"{len(buffer)} bytes of an answer")
        except ConnectionResetError:
            return Outcome("closed", detail="reset")
        finally:
            sock.settimeout(15)
        frame = bytes(buffer[4:4 + size])
        return decode_answer(case.api_key, case.version, frame, cid)


def decode_answer(api_key: int, version: int, frame: bytes, cid: int) -> Outcome:
    header_version = apis.response_header_version(api_key, version) \
        if apis.spec_for(api_key).knows(version) else 0
    got, offset = framing.parse_response_header(frame, header_version)
    if got != cid:
        return Outcome("undecodable", detail=f"correlation id {got}, expected {cid}")
    body = memoryview(frame)[offset:]
    tried = [version]
    if api_key == apis.API_VERSIONS and version != 0:
        tried.append(0)  # an unsupported version is answered in v0's format
    error = ""
    for v in tried:
        if not apis.spec_for(api_key).knows(v):
            continue
        try:
            return Outcome("answer", apis.decode_response(api_key, v, body))
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    return Outcome("undecodable", detail=error or f"v{version} unknown to the decoder")


# --- normalising ---------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """An entity tree as dicts, lists and plain scalars."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return value


#: Fields whose values are the broker's own and must differ: replaced by a placeholder when
#: set (a null stays null, so "is there one" is still compared).
_OWN_VALUES = {
    "cluster_id": "<cluster id>",
    "host": "<host>",
    "port": "<port>",
    "error_message": "<message>",
    "batch_index_error_message": "<message>",
    "log_dir": "<log dir>",
    "total_bytes": "<disk bytes>",
    "usable_bytes": "<disk bytes>",
    "documentation": "<documentation>",
    "client_host": "<client host>",
}
_DROPPED = ("throttle_time", "throttle_time_ms")
_PRODUCER_ID_FIELDS = ("producer_id", "producer_ids")
_MEMBER_ID_FIELDS = ("member_id", "leader", "generated_member_id")


def is_now(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and \
        abs(value - time.time() * 1000) < _NOW_WINDOW_MS


def normalise(side: Side, tree: Any, key: str = "") -> Any:
    if isinstance(tree, dict):
        learn_topic_ids(side, tree)
        out = {}
        for name, value in tree.items():
            if name in _DROPPED:
                continue
            if name == "error_message" and (value == "" or tree.get("error_code") == 0):
                # No message: Kafka's generated responses carry "" where no code set one,
                # klog's null; and beside error code 0 no client reads one.
                value = None
            out[name] = normalise(side, value, name)
        return out
    if isinstance(tree, list):
        items = [normalise(side, v, key) for v in tree]
        if items and all(isinstance(i, dict) for i in items):
            items.sort(key=_sort_key)
        elif key in ("topics", "topic_names", "groups", "replica_nodes", "isr_nodes",
                     "offline_replicas", "eligible_leader_replicas", "last_known_elr",
                     "partitions", "members"):
            items.sort(key=repr)
        return items
    if key in _OWN_VALUES and tree not in (None, "", -1):
        return _OWN_VALUES[key]
    if isinstance(tree, uuid.UUID):
        if tree == ZERO_UUID:
            return "<zero uuid>"
        name = side.topic_ids.get(tree)
        return f"<id of topic {name}>" if name is not None else side.label("uuid", tree)
    if key in _PRODUCER_ID_FIELDS and isinstance(tree, int) and tree >= 0:
        return side.label("producer id", tree)
    if key in _MEMBER_ID_FIELDS and isinstance(tree, str) and tree:
        return side.label("member id", tree)
    if key == "session_id" and isinstance(tree, int) and tree != 0:
        return "<session id>"
    if key in ("records", "record_set") and isinstance(tree, bytes):
        return batches(side, tree)
    if is_now(tree):
        return "<now>"
    return tree


def learn_topic_ids(side: Side, node: Mapping[str, Any]) -> None:
    """Remember (topic id, name) pairs an answer names."""
    topic_id = node.get("topic_id")
    name = node.get("name", node.get("topic"))
    if isinstance(topic_id, uuid.UUID) and topic_id != ZERO_UUID and isinstance(name, str):
        side.topic_ids[topic_id] = name


_SORT_FIELDS = ("name", "topic", "topic_name", "partition_index", "partition", "group_id",
                "resource_type", "resource_name", "key", "transactional_id", "api_key",
                "member_id", "log_dir", "principal", "user", "node_id", "broker_id",
                "key_type", "producer_id")


def _sort_key(item: Mapping[str, Any]) -> tuple[Any, ...]:
    return (*(repr(item.get(f)) for f in _SORT_FIELDS), repr(item))


_BATCH = struct.Struct(">qiibIhiqqqhii")


def batches(side: Side, data: bytes) -> list[Any]:
    """Record data as a list of batch summaries (see the module docstring)."""
    out: list[Any] = []
    position = 0
    while len(data) - position >= 17:
        base_offset, length = struct.unpack_from(">qi", data, position)
        end = position + 12 + length
        magic = data[position + 16]
        if end > len(data):
            out.append({"partial batch": len(data) - position})
            break
        if magic != 2:
            out.append({"offset": base_offset, "magic": magic,
                        "entry": hashlib.sha256(data[position:end]).hexdigest()[:16]})
            position = end
            continue
        (base_offset, length, leader_epoch, magic, crc, attributes, last_delta, base_ts,
         max_ts, producer_id, producer_epoch, base_sequence, count) = \
            _BATCH.unpack_from(data, position)
        mapped = producer_id >= 0 or is_now(base_ts) or is_now(max_ts)
        out.append({
            "base_offset": base_offset, "length": length,
            "partition_leader_epoch": leader_epoch, "magic": magic,
            "crc": "<covers mapped fields>" if mapped else crc,
            "attributes": attributes, "last_offset_delta": last_delta,
            "base_timestamp": "<now>" if is_now(base_ts) else base_ts,
            "max_timestamp": "<now>" if is_now(max_ts) else max_ts,
            "producer_id": side.label("producer id", producer_id) if producer_id >= 0
            else producer_id,
            "producer_epoch": producer_epoch, "base_sequence": base_sequence,
            "records_count": count,
            "records": hashlib.sha256(data[position + 61:end]).hexdigest()[:16],
        })
        position = end
    if position < len(data) and not (out and "partial batch" in out[-1]):
        out.append({"trailing bytes": len(data) - position})
    return out


def comparable(side: Side, outcome: Outcome) -> Any:
    """What is compared of an outcome: its kind, and the normalised answer."""
    if outcome.kind == "answer":
        answer = {"answer": normalise(side, plain(outcome.response))}
        if outcome.unsettled:
            answer["unsettled"] = outcome.unsettled.replace(side.name, "<side>")
        return answer
    if outcome.kind == "undecodable":
        return {"undecodable": outcome.detail}
    return {outcome.kind: True}


def differences(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """Field by field: (path, a's value, b's value) for each difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                found.append((f"{path}.{key}", a.get(key, "<absent>"), b.get(key, "<absent>")))
            else:
                found += differences(a[key], b[key], f"{path}.{key}")
        return found
    if isinstance(a, list) and isinstance(b, list):
        named_a, named_b = _by_name(a), _by_name(b)
        if named_a is not None and named_b is not None and named_a.keys() != named_b.keys():
            # lists of named items (configs, topics): say which names one side lacks
            return differences(named_a, named_b, path)
        if len(a) != len(b):
            return [(f"{path}[len]", _short(a), _short(b))]
        found = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found += differences(x, y, f"{path}[{i}]")
        return found
    return [] if a == b else [(path, _short(a), _short(b))]


def _by_name(items: list[Any]) -> dict[str, Any] | None:
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str)
                            for i in items):
        return None
    named = {i["name"]: i for i in items}
    return named if len(named) == len(items) else None


def _short(value: Any, limit: int = 300) -> Any:
    text = repr(value)
    return value if len(text) <= limit else text[:limit] + "..."


# --- the list of accepted differences --------------------------------------------------------


@dataclass(frozen=True)
class Accepted:
    """One bullet of README's accepted differences: case-name patterns and the reason."""

    patterns: tuple[str, ...]
    reason: str

    def matches(self, case_name: str) -> bool:
        return any(fnmatch.fnmatchcase(case_name, p) for p in self.patterns)


_BULLET = re.compile(r"^- (.*?)(?=^- |\Z)", re.S | re.M)


def accepted_differences(section: str) -> list[Accepted]:
    """The bullets of a README section: each names its cases in backquotes (patterns:
    ``*`` any text) before a colon-free reason; only backquoted text that contains ``:``
    or `` v`` (a case name) counts as a pattern."""
    found = []
    for bullet in _BULLET.findall(section):
        quoted = (" ".join(p.split()) for p in re.findall(r"`([^`]+)`", bullet))
        patterns = tuple(p for p in quoted
                         if re.match(r"^([A-Z][A-Za-z]+ (v[\d*\[]|\*)|On disk: )", p))
        if patterns:
            found.append(Accepted(patterns, " ".join(bullet.split())))
    return found


def matching(accepted: Sequence[Accepted], name: str) -> list[Accepted]:
    return [a for a in accepted if a.matches(name)]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):  # not there yet, in whatever way
            if check():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def uniq(names: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    duplicates = [n for n in names if n in seen or seen.add(n)]  # type: ignore[func-returns-value]
    return duplicates
