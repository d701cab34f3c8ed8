"""The differential test's corpus: requests for every API and version klog serves, valid
ones and the edge cases, in the order both brokers get them.

Each case is named ``<Api> v<version>: <what>``; README's list of accepted differences names
cases by these names (patterns with ``*``). Cases build on the state earlier ones left: the
first ones create the topics, ACLs and records the rest use, as a client would, so both
brokers go through the same states from two empty log dirs.

The set-up every case can count on (``TOPICS``): ``t1`` (1 partition, records produced by
the Produce cases), ``t3`` (3 partitions), ``denied`` (a topic User:ANONYMOUS is denied
everything on, as are the group ``denied-group`` and the transactional id ``denied-txn``),
``compacted`` (cleanup.policy=compact), ``txn`` (transactional data). Timestamps the test
writes are two days old (``BASE_TS``): inside the default retention, outside the window in
which a timestamp counts as the broker's own "now".
"""

from __future__ import annotations

import hashlib
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from klog.protocol import apis
from klog.protocol.records.batch import CompressionType
from klog.protocol.records.legacy import build_legacy_message_set
from klog.protocol.records.v2 import build_batch
from tests.differential.harness import Case, Side, wait_for

BASE_TS = (int(time.time()) // 3600 - 48) * 3600 * 1000
NODE_ID = 1
ANONYMOUS = "User:ANONYMOUS"

# Kafka's codes for ACL values (AclOperation, AclPermissionType, ResourceType,
# PatternType).
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, USER = 2, 3, 4, 5, 7
ANY, ALL, READ, WRITE, CREATE, DESCRIBE = 1, 2, 3, 4, 5, 8
DENY, ALLOW = 2, 3
MATCH, LITERAL, PREFIXED = 1, 3, 4
# ConfigResource types
CONFIG_TOPIC, CONFIG_BROKER, CONFIG_BROKER_LOGGER = 2, 4, 8

RETRIABLE = frozenset({
    7,    # REQUEST_TIMED_OUT
    14,   # COORDINATOR_LOAD_IN_PROGRESS
    15,   # COORDINATOR_NOT_AVAILABLE
    16,   # NOT_COORDINATOR
    51,   # CONCURRENT_TRANSACTIONS
    5,    # LEADER_NOT_AVAILABLE
})


def versions(api_key: int) -> range:
    lo, hi = apis.STANDALONE_ADVERTISED[api_key]
    return range(lo, hi + 1)


# --- records ---------------------------------------------------------------------------------


def records(n: int, seed: str, *, producer_id: int = -1, producer_epoch: int = -1,
            base_sequence: int = -1, transactional: bool = False,
            compression: CompressionType = CompressionType.NONE, ts: int = BASE_TS,
            keys: bool = True, value_size: int = 20) -> bytes:
    """One v2 batch of ``n`` records, the same bytes on every call with the same seed."""
    def value(i: int) -> bytes:
        digest = hashlib.sha256(f"{seed}-{i}".encode()).hexdigest().encode()
        return (digest * (value_size // len(digest) + 1))[:value_size]

    return build_batch(((ts + i, f"k{i % 3}".encode() if keys else None, value(i), ())
                        for i in range(n)),
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence, is_transactional=transactional,
                       compression=compression)


def legacy(n: int, seed: str, magic: int) -> bytes:
    return build_legacy_message_set(
        ((BASE_TS + i, b"k", f"{seed}-{i}".encode(), ()) for i in range(n)), magic=magic)


def records_for(version: int, n: int, seed: str) -> bytes:
    """What a client of that Produce version sends: v0 messages to v1, v1 to v2, then v2."""
    if version <= 1:
        return legacy(n, seed, 0)
    if version == 2:
        return legacy(n, seed, 1)
    return records(n, seed)


def corrupt(data: bytes) -> bytes:
    """The same batch with one byte of its records flipped: the CRC no longer matches."""
    raw = bytearray(data)
    raw[-1] ^= 0xFF
    return bytes(raw)


def produce(topic: str, partition: int, data: bytes | None, acks: int = 1,
            transactional_id: str | None = None, timeout: int = 5000) -> dict[str, Any]:
    return {"transactional_id": transactional_id, "acks": acks, "timeout": timeout,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": data}]}]}


def fetch(topics: list[tuple[str, list[tuple[int, int]]]], *, max_bytes: int = 1 << 20,
          isolation: int = 0, epoch: int = -1, session_id: int = 0,
          session_epoch: int = -1, partition_max: int = 1 << 20,
          side: Side | None = None, last_fetched_epoch: int = -1) -> dict[str, Any]:
    """Fetch values for ``[(topic, [(partition, offset)])]``; with ``side``, topics go by
    id as well (v13+)."""
    def topic_id(name: str) -> uuid.UUID:
        if side is None:
            return uuid.UUID(int=0)
        try:
            return side.topic_id(name)
        except KeyError:
            return uuid.UUID(int=0x5EED)

    return {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes,
        "isolation_level": isolation, "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [{"topic": t, "topic_id": topic_id(t), "partitions": [
            {"partition": p, "current_leader_epoch": epoch, "fetch_offset": o,
             "last_fetched_epoch": last_fetched_epoch, "log_start_offset": -1,
             "partition_max_bytes": partition_max} for p, o in parts]}
            for t, parts in topics],
        "forgotten_topics_data": [], "rack_id": "",
    }


def metadata(topics: list[str] | None, auto_create: bool = False,
             authorized_operations: bool = False) -> dict[str, Any]:
    return {"topics": None if topics is None else [{"name": t, "topic_id": None}
                                                   for t in topics],
            "allow_auto_topic_creation": auto_create,
            "include_cluster_authorized_operations": authorized_operations,
            "include_topic_authorized_operations": authorized_operations}


def consumer_subscription(*topics: str) -> bytes:
    """The consumer protocol's Subscription v0: topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def consumer_assignment(topic: str, partitions: list[int]) -> bytes:
    out = struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p)
                                                         for p in partitions)
    return out + struct.pack(">i", -1)


# --- settling: Kafka applies metadata changes after it answers ----------------------------


def topic_state(side: Side, topics: list[str]) -> dict[str, tuple[int, int]]:
    """{topic: (error code, partitions with a leader)} from the side's Metadata."""
    response = side.call(3, 12, metadata(topics))
    return {t.name: (int(t.error_code), sum(1 for p in t.partitions if p.leader_id >= 0))
            for t in response.topics}


def topics_ready(*topics: str, partitions: Mapping[str, int] | None = None
                 ) -> Callable[[Side], None]:
    def settle(side: Side) -> None:
        def ready() -> bool:
            state = topic_state(side, list(topics))
            return all(state[t][0] == 0 and state[t][1] >= (partitions or {}).get(t, 1)
                       for t in topics)
        wait_for(f"{side.name}: topics {topics} with leaders", ready)
    return settle


def topics_gone(*topics: str) -> Callable[[Side], None]:
    def settle(side: Side) -> None:
        wait_for(f"{side.name}: topics {topics} deleted",
                 lambda: all(code == 3 for code, _ in topic_state(side, list(topics)).values()))
    return settle


def acls_visible(count_at_least: int) -> Callable[[Side], None]:
    """Until the side's authorizer holds at least ``count_at_least`` bindings."""
    def settle(side: Side) -> None:
        def visible() -> bool:
            r = side.call(29, 1, {"resource_type_filter": ANY, "resource_name_filter": None,
                                  "pattern_type_filter": 1, "principal_filter": None,
                                  "host_filter": None, "operation": ANY,
                                  "permission_type": ANY})
            return sum(len(res.acls) for res in r.resources) >= count_at_least
        wait_for(f"{side.name}: {count_at_least} ACLs", visible)
    return settle


def acl_count_exactly(count: int) -> Callable[[Side], None]:
    def settle(side: Side) -> None:
        def visible() -> bool:
            r = side.call(29, 1, {"resource_type_filter": ANY, "resource_name_filter": None,
                                  "pattern_type_filter": 1, "principal_filter": None,
                                  "host_filter": None, "operation": ANY,
                                  "permission_type": ANY})
            return sum(len(res.acls) for res in r.resources) == count
        wait_for(f"{side.name}: {count} ACLs", visible)
    return settle


def topic_config_is(topic: str, name: str, value: str) -> Callable[[Side], None]:
    def settle(side: Side) -> None:
        def applied() -> bool:
            r = side.call(32, 1, {"resources": [{"resource_type": CONFIG_TOPIC,
                                                 "resource_name": topic,
                                                 "configuration_keys": [name]}]})
            entries = {c.name: c for c in r.results[0].configs}
            return name in entries and entries[name].value == value
        wait_for(f"{side.name}: {topic} {name}={value}", applied)
    return settle


def _broker_config_is(name: str, value: str) -> Callable[[Side], None]:
    def settle(side: Side) -> None:
        def applied() -> bool:
            r = side.call(32, 1, {"resources": [{"resource_type": CONFIG_BROKER,
                                                 "resource_name": str(NODE_ID),
                                                 "configuration_keys": [name]}]})
            return r.results[0].configs[0].value == value
        wait_for(f"{side.name}: broker {name}={value}", applied)
    return settle


def and_then(*steps: Callable[[Side], None] | None) -> Callable[[Side], None]:
    def settle(side: Side) -> None:
        for step in steps:
            if step is not None:
                step(side)
    return settle


def top_error(response: Any) -> int:
    return int(getattr(response, "error_code", 0))


def retry_until(predicate: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return predicate


def retriable_top(response: Any) -> bool:
    """The answer's top-level error is one a client retries (a coordinator loading, a
    transaction completing)."""
    return top_error(response) in RETRIABLE


def retriable_coordinators(response: Any) -> bool:
    codes = [int(c.error_code) for c in getattr(response, "coordinators", ())]
    return top_error(response) in RETRIABLE or any(c in RETRIABLE for c in codes)


def retriable_txn_partitions(response: Any) -> bool:
    if top_error(response) in RETRIABLE:
        return True
    for result in getattr(response, "results", ()) or \
            getattr(response, "results_by_topic_v3_and_below", ()):
        for p in getattr(result, "results", ()) or getattr(result, "results_by_partition", ()):
            if int(getattr(p, "partition_error_code", 0)) in RETRIABLE:
                return True
    for txn in getattr(response, "results_by_transaction", ()):
        for topic in txn.topic_results:
            for p in topic.results_by_partition:
                if int(p.partition_error_code) in RETRIABLE:
                    return True
    return False


def retriable_offsets(response: Any) -> bool:
    for topic in getattr(response, "topics", ()):
        for p in topic.partitions:
            if int(p.error_code) in RETRIABLE:
                return True
    return top_error(response) in RETRIABLE


def keep(key: str, pick: Callable[[Any], Any]) -> Callable[[Side, Any], None]:
    def capture(side: Side, response: Any) -> None:
        side[key] = pick(response)
    return capture


# --- the corpus --------------------------------------------------------------------------------


#: The versions klog serves (as Kafka 3.9 does) that Kafka 4.1 no longer does (KIP-896):
#: it closes the connection. Produce v0-2 it still announces, for librdkafka's sake, and
#: refuses all the same. Cases at these versions run last, so that what they change on
#: klog alone (records, groups, topics, ACLs) is not in the state the other cases compare.
KAFKA_4_REMOVED: Mapping[int, tuple[int, int]] = {
    0: (0, 2), 1: (0, 3), 2: (0, 0), 8: (0, 1), 9: (0, 0), 19: (0, 1), 20: (0, 0),
    23: (0, 1), 27: (0, 0), 29: (0, 0), 30: (0, 0), 31: (0, 0), 32: (0, 0), 35: (0, 0),
}


def removed_in_kafka_4(case: Case) -> bool:
    lo, hi = KAFKA_4_REMOVED.get(case.api_key, (0, -1))
    return lo <= case.version <= hi


def corpus() -> list[Case]:
    cases = _corpus()
    return [c for c in cases if not removed_in_kafka_4(c) and not c.last] + \
        [c for c in cases if removed_in_kafka_4(c) and not c.last] + \
        [c for c in cases if c.last]


def _corpus() -> list[Case]:
    cases: list[Case] = []
    for part in (setup, api_versions, metadata_cases, produce_cases, fetch_cases,
                 list_offsets_cases, offset_for_leader_epoch_cases, delete_records_cases,
                 find_coordinator_cases, group_cases, offset_commit_cases,
                 offset_fetch_cases, describe_groups_cases, list_groups_cases,
                 offset_delete_cases, delete_groups_cases, init_producer_id_cases,
                 idempotence_cases, transaction_cases, write_txn_markers_cases,
                 describe_producers_cases, transactions_listing_cases, create_topics_cases,
                 create_partitions_cases, delete_topics_cases, config_cases, acl_cases,
                 log_dir_cases, elect_leaders_cases, reassignment_cases, quota_cases,
                 scram_cases, describe_cluster_cases, sasl_cases, framing_cases):
        cases.extend(part())
    return cases


TOPICS = {"t1": 1, "t3": 3, "denied": 1, "compacted": 1, "txn": 2, "t-del-records": 1,
          "t-fetch": 1, "t-edge": 1, "t-edge2": 1}


def setup() -> Iterator[Case]:
    yield Case("CreateTopics v7: set-up topics", 19, 7, {
        "topics": [{"name": name, "num_partitions": n, "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": "cleanup.policy", "value": "compact"}]
                    if name == "compacted" else []}
                   for name, n in TOPICS.items()],
        "timeout": 30000, "validate_only": False},
        settle=topics_ready(*TOPICS, partitions=TOPICS))
    yield Case("CreateAcls v3: deny User:ANONYMOUS on denied resources", 30, 3, {
        "creations": [{"resource_type": rtype, "resource_name": name,
                       "resource_pattern_type": LITERAL, "principal": ANONYMOUS,
                       "host": "*", "operation": ALL, "permission_type": DENY}
                      for rtype, name in ((TOPIC, "denied"), (GROUP, "denied-group"),
                                          (TRANSACTIONAL_ID, "denied-txn"))]},
        settle=acls_visible(3))


def api_versions() -> Iterator[Case]:
    for v in versions(18):
        yield Case(f"ApiVersions v{v}: supported APIs", 18, v,
                   {"client_software_name": "differential", "client_software_version": "1.0"})
    yield Case("ApiVersions v3: invalid client software name", 18, 3,
               {"client_software_name": "bad name!", "client_software_version": "1.0"})
    yield Case("ApiVersions v3: empty client software name", 18, 3,
               {"client_software_name": "", "client_software_version": ""})
    yield Case("ApiVersions v5: a version above the broker's", 18, 5, raw=_api_versions_raw(5))
    yield Case("ApiVersions v127: far above", 18, 127, raw=_api_versions_raw(127))


def _api_versions_raw(version: int) -> Callable[[Side, int], bytes]:
    def raw(side: Side, cid: int) -> bytes:
        # a newer client's ApiVersions: request header v2 (flexible), body of v3's shape
        body = bytes([13]) + b"differential" + bytes([4]) + b"1.0" + b"\x00"
        header = struct.pack(">hhi", 18, version, cid) + struct.pack(">h", 4) + b"diff" + b"\x00"
        payload = header + body
        return struct.pack(">i", len(payload)) + payload
    return raw


def metadata_cases() -> Iterator[Case]:
    for v in versions(3):
        yield Case(f"Metadata v{v}: named topics", 3, v, metadata(["t1", "t3"]))
        # v0-3 have no allow_auto_topic_creation: they create the topics they name
        yield Case(f"Metadata v{v}: an unknown topic, no auto-creation", 3, v,
                   metadata([f"auto-v{v}" if v < 4 else "no-such-topic"]),
                   settle=topics_ready(f"auto-v{v}") if v < 4 else None)
        if v >= 1:
            yield Case(f"Metadata v{v}: all topics", 3, v, metadata(None))
    yield Case("Metadata v0: empty list means all topics", 3, 0, {"topics": []})
    yield Case("Metadata v12: empty list", 3, 12, metadata([]))
    yield Case("Metadata v12: denied topic", 3, 12, metadata(["denied"]))
    yield Case("Metadata v12: an invalid topic name", 3, 12, metadata(["bad topic!"]))
    yield Case("Metadata v12: a name too long", 3, 12, metadata(["x" * 250]))
    yield Case("Metadata v12: authorized operations", 3, 12,
               metadata(["t1", "denied"], authorized_operations=True))
    yield Case("Metadata v10: cluster authorized operations", 3, 10,
               metadata(["t1"], authorized_operations=True))
    yield Case("Metadata v12: by topic id", 3, 12,
               lambda s: {"topics": [{"name": None, "topic_id": s.topic_id("t1")}],
                          "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    yield Case("Metadata v12: an unknown topic id", 3, 12,
               {"topics": [{"name": None, "topic_id": uuid.UUID(int=0x5EED)}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False})
    yield Case("Metadata v12: 10,000 unknown topics", 3, 12,
               metadata([f"nope-{i}" for i in range(10_000)]))
    yield Case("Metadata v12: the same topic twice", 3, 12, metadata(["t1", "t1"]))
    yield Case("Metadata v9: auto-creation of a new topic", 3, 9,
               metadata(["auto-created"], auto_create=True),
               settle=topics_ready("auto-created"))
    yield Case("Metadata v9: the auto-created topic", 3, 9, metadata(["auto-created"]))
    yield Case("Metadata v3: auto-creation of an invalid name", 3, 3,
               metadata(["bad name!"], auto_create=True))


def produce_cases() -> Iterator[Case]:
    for v in versions(0):
        yield Case(f"Produce v{v}: acks=1", 0, v, produce("t1", 0, records_for(v, 3, f"p{v}")))
        yield Case(f"Produce v{v}: acks=-1", 0, v,
                   produce("t1", 0, records_for(v, 2, f"pa{v}"), acks=-1))
        yield Case(f"Produce v{v}: unknown topic", 0, v,
                   produce("no-such-topic", 0, records_for(v, 1, "u")))
        yield Case(f"Produce v{v}: bad partition", 0, v,
                   produce("t1", 7, records_for(v, 1, "bp")))
    yield Case("Produce v9: acks=0", 0, 9, produce("t-edge", 0, records(2, "ack0"), acks=0),
               silent=True)
    yield Case("Produce v9: after acks=0, the connection still answers", 0, 9,
               produce("t-edge", 0, records(1, "after0")))
    yield Case("Produce v9: acks=0 to an unknown topic", 0, 9,
               produce("no-such-topic", 0, records(1, "x"), acks=0), silent=True)
    yield Case("Produce v9: acks=2", 0, 9, produce("t-edge", 0, records(1, "acks2"), acks=2))
    yield Case("Produce v9: acks=-2", 0, 9, produce("t-edge", 0, records(1, "acks-2"), acks=-2))
    yield Case("Produce v9: corrupt CRC", 0, 9, produce("t-edge", 0, corrupt(records(2, "crc"))))
    yield Case("Produce v9: null records", 0, 9, produce("t-edge", 0, None))
    yield Case("Produce v9: empty records", 0, 9, produce("t-edge", 0, b""))
    yield Case("Produce v9: a truncated batch", 0, 9, produce("t-edge", 0, records(3, "tr")[:-5]))
    yield Case("Produce v9: two batches in one partition's records", 0, 9,
               produce("t-edge", 0, records(2, "two-a") + records(2, "two-b")))
    yield Case("Produce v9: empty topic list", 0, 9,
               {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": []})
    yield Case("Produce v9: empty partition list", 0, 9,
               {"transactional_id": None, "acks": 1, "timeout": 5000,
                "topic_data": [{"name": "t-edge", "partition_data": []}]})
    yield Case("Produce v9: a record larger than message.max.bytes", 0, 9,
               produce("t-edge", 0, records(1, "big", value_size=1_100_000)))
    yield Case("Produce v9: denied topic", 0, 9, produce("denied", 0, records(1, "d")))
    yield Case("Produce v9: gzip", 0, 9,
               produce("t-edge", 0, records(5, "gz", compression=CompressionType.GZIP)))
    yield Case("Produce v9: snappy", 0, 9,
               produce("t-edge", 0, records(5, "sn", compression=CompressionType.SNAPPY)))
    yield Case("Produce v9: lz4", 0, 9,
               produce("t-edge", 0, records(5, "lz", compression=CompressionType.LZ4)))
    yield Case("Produce v9: zstd", 0, 9,
               produce("t-edge", 0, records(5, "zs", compression=CompressionType.ZSTD)))
    yield Case("Produce v6: zstd below v7", 0, 6,
               produce("t-edge", 0, records(2, "zs6", compression=CompressionType.ZSTD)))
    yield Case("Produce v9: a compacted topic, keyed", 0, 9,
               produce("compacted", 0, records(6, "c")))
    yield Case("Produce v9: a compacted topic, a record without key", 0, 9,
               produce("compacted", 0, records(2, "nokey", keys=False)))
    # (on a topic of their own: klog appends what Kafka refuses, see README)
    yield Case("Produce v9: a timestamp two hours ahead", 0, 9,
               produce("t-edge2", 0, records(1, "future", ts=int(time.time() * 1000) + 7_200_000)))
    yield Case("Produce v9: transactional records without a transactional id", 0, 9,
               produce("t-edge", 0, records(1, "tx", producer_id=1, producer_epoch=0,
                                        base_sequence=0, transactional=True)))
    yield Case("Produce v9: a transactional id with plain records", 0, 9,
               produce("t-edge", 0, records(1, "plain-tx"), transactional_id="no-txn"))
    yield Case("Produce v9: three partitions at once", 0, 9,
               {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
                   {"name": "t3", "partition_data": [
                       {"index": p, "records": records(p + 1, f"t3-{p}")} for p in range(3)]}]})
    yield Case("Produce v9: one good partition, one unknown", 0, 9,
               {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
                   {"name": "t3", "partition_data": [{"index": 0, "records": records(1, "g")},
                                                     {"index": 9, "records": records(1, "b")}]},
                   {"name": "nope", "partition_data": [{"index": 0, "records": records(1, "n")}]}]})
    yield Case("Produce v9: 1,000 unknown partitions", 0, 9,
               {"transactional_id": None, "acks": 1, "timeout": 5000, "topic_data": [
                   {"name": "t1", "partition_data": [
                       {"index": 1000 + p, "records": records(1, "many")} for p in range(1000)]}]})
    yield Case("Produce v2: v2 batch in v2 request", 0, 2,
               produce("t-edge", 0, records(1, "m2")))
    yield Case("Produce v3: v1 messages in a v3 request", 0, 3,
               produce("t-edge", 0, legacy(1, "l3", 1)))
    yield Case("Produce v9: a batch with a base offset not zero", 0, 9,
               produce("t-edge2", 0, _with_base_offset(records(2, "bo"), 100)))
    yield Case("Produce v10: above klog's range", 0, 10,
               produce("t-edge", 0, records(1, "v10")))
    yield Case("Produce v9: fill t-fetch", 0, 9,
               produce("t-fetch", 0, b"".join(records(4, f"f{i}") for i in range(1)) ))
    for i in range(5):
        yield Case(f"Produce v9: fill t-fetch, batch {i + 2}", 0, 9,
                   produce("t-fetch", 0, records(4, f"f{i + 1}")))
    yield Case("Produce v9: fill t-del-records", 0, 9,
               produce("t-del-records", 0, records(10, "dr")))


def _with_base_offset(data: bytes, offset: int) -> bytes:
    raw = bytearray(data)
    struct.pack_into(">q", raw, 0, offset)
    return bytes(raw)


def fetch_cases() -> Iterator[Case]:
    for v in versions(1):
        yield Case(f"Fetch v{v}: t-fetch from 0", 1, v,
                   lambda s, v=v: fetch([("t-fetch", [(0, 0)])], side=s))
        yield Case(f"Fetch v{v}: t1 from 0", 1, v,
                   lambda s, v=v: fetch([("t1", [(0, 0)])], side=s))
        yield Case(f"Fetch v{v}: offset out of range", 1, v,
                   lambda s: fetch([("t-fetch", [(0, 1000)])], side=s))
        yield Case(f"Fetch v{v}: unknown topic", 1, v,
                   lambda s: fetch([("no-such-topic", [(0, 0)])], side=s))
        yield Case(f"Fetch v{v}: bad partition", 1, v,
                   lambda s: fetch([("t-fetch", [(5, 0)])], side=s))
        yield Case(f"Fetch v{v}: from the middle of a batch", 1, v,
                   lambda s: fetch([("t-fetch", [(0, 6)])], side=s))
        yield Case(f"Fetch v{v}: partition max bytes below one batch", 1, v,
                   lambda s: fetch([("t-fetch", [(0, 0)])], side=s, partition_max=10))
        yield Case(f"Fetch v{v}: at the log end", 1, v,
                   lambda s: fetch([("t-fetch", [(0, 24)])], side=s))
    yield Case("Fetch v12: three partitions", 1, 12,
               fetch([("t3", [(0, 0), (1, 0), (2, 0)])]))
    yield Case("Fetch v12: max bytes across partitions", 1, 12,
               fetch([("t3", [(0, 0), (1, 0), (2, 0)])], max_bytes=100))
    yield Case("Fetch v12: denied topic", 1, 12, fetch([("denied", [(0, 0)])]))
    yield Case("Fetch v12: empty topic list", 1, 12, fetch([]))
    yield Case("Fetch v12: negative offset", 1, 12, fetch([("t-fetch", [(0, -5)])]))
    yield Case("Fetch v12: a lower current leader epoch", 1, 12,
               fetch([("t-fetch", [(0, 0)])], epoch=-2))
    yield Case("Fetch v12: a higher current leader epoch", 1, 12,
               fetch([("t-fetch", [(0, 0)])], epoch=5))
    yield Case("Fetch v12: last fetched epoch ahead (diverging)", 1, 12,
               fetch([("t-fetch", [(0, 4)])], last_fetched_epoch=3))
    yield Case("Fetch v12: read_committed", 1, 12, fetch([("t1", [(0, 0)])], isolation=1))
    yield Case("Fetch v12: isolation level 2", 1, 12, fetch([("t1", [(0, 0)])], isolation=2))
    yield Case("Fetch v12: a new fetch session", 1, 12,
               fetch([("t-fetch", [(0, 0)])], session_id=0, session_epoch=0),
               capture=keep("fetch session", lambda r: r.session_id))
    yield Case("Fetch v12: the session, next epoch, nothing changed", 1, 12,
               lambda s: fetch([], session_id=s["fetch session"], session_epoch=1))
    yield Case("Fetch v12: the session, a wrong epoch", 1, 12,
               lambda s: fetch([], session_id=s["fetch session"], session_epoch=5))
    yield Case("Fetch v12: an unknown session", 1, 12,
               fetch([], session_id=123456, session_epoch=1))
    yield Case("Fetch v12: a session close with epoch -1", 1, 12,
               lambda s: fetch([], session_id=s["fetch session"], session_epoch=-1))
    yield Case("Fetch v13: an unknown topic id", 1, 13,
               fetch([("no-such-topic", [(0, 0)])]))
    yield Case("Fetch v4: a replica id of a broker", 1, 4,
               {**fetch([("t-fetch", [(0, 0)])]), "replica_id": 7})
    yield Case("Fetch v12: 1,000 unknown partitions", 1, 12,
               fetch([("t1", [(1000 + p, 0) for p in range(1000)])]))
    yield Case("Fetch v18: above klog's range", 1, 18,
               lambda s: fetch([("t-fetch", [(0, 0)])], side=s))


def list_offsets(topic: str, partition: int, timestamp: int, epoch: int = -1,
                 isolation: int = 0) -> dict[str, Any]:
    return {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition,
                                        "current_leader_epoch": epoch,
                                        "timestamp": timestamp, "max_num_offsets": 1}]}]}


def list_offsets_cases() -> Iterator[Case]:
    for v in versions(2):
        yield Case(f"ListOffsets v{v}: latest", 2, v, list_offsets("t-fetch", 0, -1))
        yield Case(f"ListOffsets v{v}: earliest", 2, v, list_offsets("t-fetch", 0, -2))
        yield Case(f"ListOffsets v{v}: by timestamp", 2, v,
                   list_offsets("t-fetch", 0, BASE_TS + 2))
        yield Case(f"ListOffsets v{v}: a timestamp after every record", 2, v,
                   list_offsets("t-fetch", 0, BASE_TS + 10_000_000))
        yield Case(f"ListOffsets v{v}: unknown topic", 2, v, list_offsets("no-such-topic", 0, -1))
        yield Case(f"ListOffsets v{v}: bad partition", 2, v, list_offsets("t-fetch", 4, -1))
    yield Case("ListOffsets v7: max timestamp", 2, 7, list_offsets("t-fetch", 0, -3))
    yield Case("ListOffsets v6: max timestamp below v7", 2, 6, list_offsets("t-fetch", 0, -3))
    yield Case("ListOffsets v7: timestamp -4", 2, 7, list_offsets("t-fetch", 0, -4))
    yield Case("ListOffsets v7: timestamp -5", 2, 7, list_offsets("t-fetch", 0, -5))
    yield Case("ListOffsets v7: a lower current leader epoch", 2, 7,
               list_offsets("t-fetch", 0, -1, epoch=-2))
    yield Case("ListOffsets v7: a higher current leader epoch", 2, 7,
               list_offsets("t-fetch", 0, -1, epoch=3))
    yield Case("ListOffsets v7: read_committed", 2, 7, list_offsets("t1", 0, -1, isolation=1))
    yield Case("ListOffsets v7: denied topic", 2, 7, list_offsets("denied", 0, -1))
    yield Case("ListOffsets v7: the same partition twice", 2, 7, {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": "t-fetch", "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1},
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
    yield Case("ListOffsets v7: empty topic list", 2, 7,
               {"replica_id": -1, "isolation_level": 0, "topics": []})
    yield Case("ListOffsets v7: a broker's replica id", 2, 7,
               {**list_offsets("t-fetch", 0, -1), "replica_id": 5})
    yield Case("ListOffsets v7: the debugging replica id", 2, 7,
               {**list_offsets("t-fetch", 0, -1), "replica_id": -2})
    yield Case("ListOffsets v0: max_num_offsets 5", 2, 0, {
        "replica_id": -1, "topics": [{"name": "t-fetch", "partitions": [
            {"partition_index": 0, "timestamp": -1, "max_num_offsets": 5}]}]})


def offset_for_leader_epoch_cases() -> Iterator[Case]:
    def request(topic: str, partition: int, epoch: int, current: int = -1,
                replica: int = -1) -> dict[str, Any]:
        return {"replica_id": replica, "topics": [{"topic": topic, "partitions": [
            {"partition": partition, "current_leader_epoch": current,
             "leader_epoch": epoch}]}]}

    for v in versions(23):
        yield Case(f"OffsetForLeaderEpoch v{v}: epoch 0", 23, v, request("t-fetch", 0, 0))
        yield Case(f"OffsetForLeaderEpoch v{v}: an epoch ahead", 23, v,
                   request("t-fetch", 0, 4))
        yield Case(f"OffsetForLeaderEpoch v{v}: unknown topic", 23, v,
                   request("no-such-topic", 0, 0))
    yield Case("OffsetForLeaderEpoch v4: a lower current leader epoch", 23, 4,
               request("t-fetch", 0, 0, current=-2))
    yield Case("OffsetForLeaderEpoch v4: a higher current leader epoch", 23, 4,
               request("t-fetch", 0, 0, current=4))
    yield Case("OffsetForLeaderEpoch v4: epoch -1", 23, 4, request("t-fetch", 0, -1))
    yield Case("OffsetForLeaderEpoch v4: bad partition", 23, 4, request("t-fetch", 3, 0))
    yield Case("OffsetForLeaderEpoch v4: denied topic", 23, 4, request("denied", 0, 0))
    yield Case("OffsetForLeaderEpoch v4: from a broker's replica id", 23, 4,
               request("t-fetch", 0, 0, replica=1))
    yield Case("OffsetForLeaderEpoch v3: from a consumer's replica id -2", 23, 3,
               request("t-fetch", 0, 0, replica=-2))


def delete_records_cases() -> Iterator[Case]:
    def request(topic: str, partition: int, offset: int) -> dict[str, Any]:
        return {"topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "offset": offset}]}], "timeout": 5000}

    for v in versions(21):
        yield Case(f"DeleteRecords v{v}: before offset {v + 1}", 21, v,
                   request("t-del-records", 0, v + 1))
        yield Case(f"DeleteRecords v{v}: unknown topic", 21, v, request("no-such-topic", 0, 1))
    yield Case("DeleteRecords v2: beyond the high watermark", 21, 2,
               request("t-del-records", 0, 50))
    yield Case("DeleteRecords v2: an offset below the log start", 21, 2,
               request("t-del-records", 0, 1))
    yield Case("DeleteRecords v2: -1 (the high watermark)", 21, 2,
               request("t-del-records", 0, -1))
    yield Case("DeleteRecords v2: -2", 21, 2, request("t-del-records", 0, -2))
    yield Case("DeleteRecords v2: bad partition", 21, 2, request("t-del-records", 4, 1))
    yield Case("DeleteRecords v2: denied topic", 21, 2, request("denied", 0, 0))
    yield Case("DeleteRecords v2: a compacted topic", 21, 2, request("compacted", 0, 1))
    yield Case("ListOffsets v7: earliest after DeleteRecords", 2, 7,
               list_offsets("t-del-records", 0, -2))
    yield Case("Fetch v12: below the log start after DeleteRecords", 1, 12,
               fetch([("t-del-records", [(0, 0)])]))


def find_coordinator_cases() -> Iterator[Case]:
    for v in versions(10):
        if v < 4:
            values: dict[str, Any] = {"key": "fc-group", "key_type": 0}
        else:
            values = {"key_type": 0, "coordinator_keys": ["fc-group"]}
        yield Case(f"FindCoordinator v{v}: a group", 10, v, values, retry=retriable_coordinators)
    for v in (1, 3, 4, 6):
        values = {"key": "fc-txn", "key_type": 1} if v < 4 else \
            {"key_type": 1, "coordinator_keys": ["fc-txn"]}
        yield Case(f"FindCoordinator v{v}: a transactional id", 10, v, values,
                   retry=retriable_coordinators)
    yield Case("FindCoordinator v3: key type 2", 10, 3, {"key": "x", "key_type": 2})
    yield Case("FindCoordinator v6: key type 5", 10, 6,
               {"key_type": 5, "coordinator_keys": ["x"]})
    yield Case("FindCoordinator v3: denied group", 10, 3, {"key": "denied-group", "key_type": 0})
    yield Case("FindCoordinator v4: denied and allowed groups", 10, 4,
               {"key_type": 0, "coordinator_keys": ["denied-group", "fc-group"]})
    yield Case("FindCoordinator v3: denied transactional id", 10, 3,
               {"key": "denied-txn", "key_type": 1})
    yield Case("FindCoordinator v4: no keys", 10, 4, {"key_type": 0, "coordinator_keys": []})
    yield Case("FindCoordinator v3: empty group id", 10, 3, {"key": "", "key_type": 0})
    yield Case("FindCoordinator v6: empty transactional id", 10, 6,
               {"key_type": 1, "coordinator_keys": [""]})


# --- classic consumer groups ------------------------------------------------------------------


def join(group: str, member: str | Callable[[Side], str], *, session: int = 10000,
         protocol_type: str = "consumer", instance: str | None = None,
         protocols: list[tuple[str, bytes]] | None = None) -> Callable[[Side], dict[str, Any]]:
    def values(side: Side) -> dict[str, Any]:
        return {"group_id": group, "session_timeout": session, "rebalance_timeout": session,
                "member_id": member(side) if callable(member) else member,
                "group_instance_id": instance, "protocol_type": protocol_type,
                "protocols": [{"name": n, "metadata": m} for n, m in
                              (protocols or [("range", consumer_subscription("t1"))])],
                "reason": None}
    return values


def group_cases() -> Iterator[Case]:
    """A whole classic group life per JoinGroup version: join (twice from v4, the first
    answered MEMBER_ID_REQUIRED), sync, heartbeat, describe, leave; the follow-ups at the
    matching versions of their own APIs (min of the join version and theirs)."""
    for v in versions(11):
        group = f"join-v{v}"
        member_key, generation_key = f"{group} member", f"{group} generation"
        yield Case(f"JoinGroup v{v}: a new member", 11, v, join(group, ""),
                   capture=keep(member_key, lambda r: r.member_id),
                   retry=retriable_top)
        if v >= 4:
            yield Case(f"JoinGroup v{v}: again with the member id given", 11, v,
                       join(group, lambda s, k=member_key: s[k]),
                       capture=keep(generation_key, lambda r: r.generation_id))
        else:
            yield Case(f"JoinGroup v{v}: the leader rejoins", 11, v,
                       join(group, lambda s, k=member_key: s[k]),
                       capture=keep(generation_key, lambda r: r.generation_id))
        sv = min(v, 5)
        yield Case(f"SyncGroup v{sv}: the leader's assignment (group of JoinGroup v{v})", 14, sv,
                   lambda s, g=group, m=member_key, gk=generation_key: {
                       "group_id": g, "generation_id": s[gk], "member_id": s[m],
                       "group_instance_id": None, "protocol_type": "consumer",
                       "protocol_name": "range",
                       "assignments": [{"member_id": s[m],
                                        "assignment": consumer_assignment("t1", [0])}]})
        hv = min(v, 4)
        yield Case(f"Heartbeat v{hv}: a member (group of JoinGroup v{v})", 12, hv,
                   lambda s, g=group, m=member_key, gk=generation_key: {
                       "group_id": g, "generation_id": s[gk], "member_id": s[m],
                       "group_instance_id": None})
        yield Case(f"Heartbeat v{hv}: a wrong generation (group of JoinGroup v{v})", 12, hv,
                   lambda s, g=group, m=member_key, gk=generation_key: {
                       "group_id": g, "generation_id": s[gk] + 5, "member_id": s[m],
                       "group_instance_id": None})
        yield Case(f"Heartbeat v{hv}: an unknown member (group of JoinGroup v{v})", 12, hv,
                   lambda s, g=group, gk=generation_key: {
                       "group_id": g, "generation_id": s[gk], "member_id": "nobody",
                       "group_instance_id": None})
        dv = min(v, 5)
        yield Case(f"DescribeGroups v{dv}: a stable group (group of JoinGroup v{v})", 15, dv,
                   {"groups": [group], "include_authorized_operations": True})
        if v == 9:
            yield from _group_edges(group, member_key, generation_key)
        lv = min(v, 5)
        yield Case(f"LeaveGroup v{lv}: the member leaves (group of JoinGroup v{v})", 13, lv,
                   lambda s, g=group, m=member_key: {
                       "group_id": g, "member_id": s[m],
                       "members": [{"member_id": s[m], "group_instance_id": None,
                                    "reason": None}]})
        yield Case(f"LeaveGroup v{lv}: an unknown member (group of JoinGroup v{v})", 13, lv,
                   {"group_id": group, "member_id": "nobody",
                    "members": [{"member_id": "nobody", "group_instance_id": None,
                                 "reason": None}]})
    yield Case("JoinGroup v9: a session timeout below the minimum", 11, 9,
               join("join-edge", "", session=10))
    yield Case("JoinGroup v9: a session timeout above the maximum", 11, 9,
               join("join-edge", "", session=3_600_000))
    yield Case("JoinGroup v9: no protocols", 11, 9,
               lambda s: {**join("join-edge", "")(s), "protocols": []})
    yield Case("JoinGroup v9: an empty protocol type", 11, 9,
               join("join-edge", "", protocol_type=""))
    yield Case("JoinGroup v9: an unknown member id", 11, 9, join("join-edge", "who-is-this"))
    yield Case("JoinGroup v9: denied group", 11, 9, join("denied-group", ""))
    yield Case("JoinGroup v9: an empty group id", 11, 9, join("", ""))
    yield Case("JoinGroup v5: a static member", 11, 5,
               join("join-static", "", instance="instance-1"),
               capture=keep("static member", lambda r: r.member_id), retry=retriable_top)
    yield Case("JoinGroup v5: a static member's second JoinGroup", 11, 5,
               join("join-static", "", instance="instance-1"))
    yield Case("SyncGroup v5: an unknown group", 14, 5, {
        "group_id": "no-such-group", "generation_id": 1, "member_id": "m",
        "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
        "assignments": []})
    yield Case("Heartbeat v4: an unknown group", 12, 4, {
        "group_id": "no-such-group", "generation_id": 1, "member_id": "m",
        "group_instance_id": None})
    yield Case("Heartbeat v4: denied group", 12, 4, {
        "group_id": "denied-group", "generation_id": 1, "member_id": "m",
        "group_instance_id": None})
    yield Case("LeaveGroup v5: an unknown group", 13, 5, {
        "group_id": "no-such-group", "members": [
            {"member_id": "m", "group_instance_id": None, "reason": None}]})
    yield Case("LeaveGroup v5: no members", 13, 5, {"group_id": "join-v9", "members": []})


def _group_edges(group: str, member_key: str, generation_key: str) -> Iterator[Case]:
    """Edge cases against a live group (JoinGroup v9's, while stable)."""
    yield Case("SyncGroup v5: a wrong protocol name", 14, 5,
               lambda s: {"group_id": group, "generation_id": s[generation_key],
                          "member_id": s[member_key], "group_instance_id": None,
                          "protocol_type": "consumer", "protocol_name": "roundrobin",
                          "assignments": []})
    yield Case("SyncGroup v5: a wrong generation", 14, 5,
               lambda s: {"group_id": group, "generation_id": s[generation_key] + 1,
                          "member_id": s[member_key], "group_instance_id": None,
                          "protocol_type": "consumer", "protocol_name": "range",
                          "assignments": []})
    yield Case("SyncGroup v5: an unknown member", 14, 5,
               lambda s: {"group_id": group, "generation_id": s[generation_key],
                          "member_id": "nobody", "group_instance_id": None,
                          "protocol_type": "consumer", "protocol_name": "range",
                          "assignments": []})
    yield Case("JoinGroup v9: a different protocol type into a live group", 11, 9,
               join(group, "", protocol_type="connect"))
    yield Case("OffsetCommit v8: the live group's member", 8, 8,
               lambda s: {"group_id": group, "generation_id_or_member_epoch": s[generation_key],
                          "member_id": s[member_key], "group_instance_id": None,
                          "topics": [{"name": "t1", "partitions": [
                              {"partition_index": 0, "committed_offset": 3,
                               "committed_leader_epoch": -1, "committed_metadata": "m"}]}]})
    yield Case("OffsetCommit v8: the live group, a wrong generation", 8, 8,
               lambda s: {"group_id": group,
                          "generation_id_or_member_epoch": s[generation_key] + 3,
                          "member_id": s[member_key], "group_instance_id": None,
                          "topics": [{"name": "t1", "partitions": [
                              {"partition_index": 0, "committed_offset": 3,
                               "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    yield Case("OffsetCommit v8: the live group, an unknown member", 8, 8,
               lambda s: {"group_id": group,
                          "generation_id_or_member_epoch": s[generation_key],
                          "member_id": "nobody", "group_instance_id": None,
                          "topics": [{"name": "t1", "partitions": [
                              {"partition_index": 0, "committed_offset": 3,
                               "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    yield Case("OffsetCommit v8: the live group, no member (a simple commit)", 8, 8,
               {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": "t1", "partitions": [
                    {"partition_index": 0, "committed_offset": 3,
                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    yield Case("DeleteGroups v2: a live group", 42, 2, {"groups_names": [group]})
    yield Case("OffsetDelete v0: a topic the live group subscribes to", 47, 0, {
        "group_id": group, "topics": [{"name": "t1", "partitions": [{"partition_index": 0}]}]})
    yield Case("ListGroups v5: filtered by state Stable", 16, 5,
               {"states_filter": ["Stable"], "types_filter": []})


def offset_commit(group: str, topic: str, partition: int, offset: int, *,
                  generation: int = -1, member: str = "", metadata: str | None = "meta",
                  epoch: int = -1) -> dict[str, Any]:
    return {"group_id": group, "generation_id_or_member_epoch": generation,
            "member_id": member, "group_instance_id": None, "retention_time": -1,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "committed_offset": offset,
                 "committed_leader_epoch": epoch, "committed_metadata": metadata,
                 "commit_timestamp": -1}]}]}


def offset_commit_cases() -> Iterator[Case]:
    for v in versions(8):
        yield Case(f"OffsetCommit v{v}: a simple commit", 8, v,
                   offset_commit(f"commit-v{v}", "t1", 0, 3 + v), retry=retriable_offsets)
        yield Case(f"OffsetCommit v{v}: unknown topic", 8, v,
                   offset_commit(f"commit-v{v}", "no-such-topic", 0, 1))
        yield Case(f"OffsetCommit v{v}: bad partition", 8, v,
                   offset_commit(f"commit-v{v}", "t1", 9, 1))
    yield Case("OffsetCommit v8: denied group", 8, 8, offset_commit("denied-group", "t1", 0, 1))
    yield Case("OffsetCommit v8: denied topic", 8, 8, offset_commit("commit-v8", "denied", 0, 1))
    yield Case("OffsetCommit v8: a null metadata", 8, 8,
               offset_commit("commit-v8", "t1", 0, 2, metadata=None))
    yield Case("OffsetCommit v8: metadata over offset.metadata.max.bytes", 8, 8,
               offset_commit("commit-v8", "t1", 0, 2, metadata="m" * 5000))
    yield Case("OffsetCommit v8: a negative offset", 8, 8,
               offset_commit("commit-v8", "t1", 0, -7))
    yield Case("OffsetCommit v8: an offset beyond the log end", 8, 8,
               offset_commit("commit-v8", "t1", 0, 1_000_000))
    yield Case("OffsetCommit v8: a leader epoch", 8, 8,
               offset_commit("commit-v8", "t1", 0, 5, epoch=0))
    yield Case("OffsetCommit v8: an unknown generation in an empty group", 8, 8,
               offset_commit("commit-v7", "t1", 0, 5, generation=3, member="m"))
    yield Case("OffsetCommit v8: an empty group id", 8, 8, offset_commit("", "t1", 0, 1))
    yield Case("OffsetCommit v8: no topics", 8, 8,
               {**offset_commit("commit-v8", "t1", 0, 1), "topics": []})
    yield Case("OffsetCommit v8: 1,000 partitions of an unknown topic", 8, 8,
               {**offset_commit("commit-v8", "t1", 0, 1), "topics": [
                   {"name": "nope", "partitions": [
                       {"partition_index": p, "committed_offset": 1,
                        "committed_leader_epoch": -1, "committed_metadata": ""}
                       for p in range(1000)]}]})


def offset_fetch(group: str, topics: list[tuple[str, list[int]]] | None,
                 require_stable: bool = False) -> dict[str, Any]:
    listed = None if topics is None else [{"name": t, "partition_indexes": ps}
                                          for t, ps in topics]
    return {"group_id": group, "topics": listed, "require_stable": require_stable,
            "groups": [{"group_id": group, "topics": listed}]}


def offset_fetch_cases() -> Iterator[Case]:
    for v in versions(9):
        yield Case(f"OffsetFetch v{v}: a committed partition", 9, v,
                   offset_fetch("commit-v2", [("t1", [0])]), retry=retriable_top)
        yield Case(f"OffsetFetch v{v}: an unknown group", 9, v,
                   offset_fetch("no-such-group", [("t1", [0])]))
        yield Case(f"OffsetFetch v{v}: an unknown topic", 9, v,
                   offset_fetch("commit-v2", [("no-such-topic", [0])]))
        if v >= 2:
            yield Case(f"OffsetFetch v{v}: all partitions", 9, v, offset_fetch("commit-v2", None))
    yield Case("OffsetFetch v8: two groups", 9, 8, {"require_stable": False, "groups": [
        {"group_id": "commit-v2", "topics": None}, {"group_id": "commit-v3", "topics": None}]})
    yield Case("OffsetFetch v8: denied group", 9, 8, offset_fetch("denied-group", None))
    yield Case("OffsetFetch v8: denied topic", 9, 8, offset_fetch("commit-v2", [("denied", [0])]))
    yield Case("OffsetFetch v7: require stable", 9, 7,
               offset_fetch("commit-v2", [("t1", [0])], require_stable=True))
    yield Case("OffsetFetch v8: no groups", 9, 8, {"require_stable": False, "groups": []})
    yield Case("OffsetFetch v6: the live group's commit", 9, 6,
               offset_fetch("join-v9", [("t1", [0])]))


def describe_groups_cases() -> Iterator[Case]:
    for v in versions(15):
        yield Case(f"DescribeGroups v{v}: empty and unknown groups", 15, v,
                   {"groups": ["join-v0", "no-such-group", "commit-v2"],
                    "include_authorized_operations": True})
    yield Case("DescribeGroups v5: denied group", 15, 5,
               {"groups": ["denied-group"], "include_authorized_operations": False})
    yield Case("DescribeGroups v5: no groups", 15, 5,
               {"groups": [], "include_authorized_operations": False})
    yield Case("DescribeGroups v5: an empty group id", 15, 5,
               {"groups": [""], "include_authorized_operations": False})


def list_groups_cases() -> Iterator[Case]:
    for v in versions(16):
        yield Case(f"ListGroups v{v}: all groups", 16, v, {"states_filter": [], "types_filter": []})
    yield Case("ListGroups v4: filtered by state Empty", 16, 4,
               {"states_filter": ["Empty"], "types_filter": []})
    yield Case("ListGroups v4: an unknown state", 16, 4,
               {"states_filter": ["Sleepy"], "types_filter": []})
    yield Case("ListGroups v5: filtered by type classic", 16, 5,
               {"states_filter": [], "types_filter": ["classic"]})
    yield Case("ListGroups v5: filtered by type consumer", 16, 5,
               {"states_filter": [], "types_filter": ["consumer"]})
    yield Case("ListGroups v5: an unknown type", 16, 5,
               {"states_filter": [], "types_filter": ["unknown"]})


def offset_delete_cases() -> Iterator[Case]:
    yield Case("OffsetDelete v0: an empty group's committed partition", 47, 0, {
        "group_id": "commit-v4", "topics": [{"name": "t1", "partitions": [
            {"partition_index": 0}]}]})
    yield Case("OffsetDelete v0: an unknown group", 47, 0, {
        "group_id": "no-such-group", "topics": [{"name": "t1", "partitions": [
            {"partition_index": 0}]}]})
    yield Case("OffsetDelete v0: an unknown topic", 47, 0, {
        "group_id": "commit-v5", "topics": [{"name": "no-such-topic", "partitions": [
            {"partition_index": 0}]}]})
    yield Case("OffsetDelete v0: denied group", 47, 0, {
        "group_id": "denied-group", "topics": [{"name": "t1", "partitions": [
            {"partition_index": 0}]}]})
    yield Case("OffsetDelete v0: denied topic", 47, 0, {
        "group_id": "commit-v5", "topics": [{"name": "denied", "partitions": [
            {"partition_index": 0}]}]})
    yield Case("OffsetFetch v8: after OffsetDelete", 9, 8, offset_fetch("commit-v4", None))


def delete_groups_cases() -> Iterator[Case]:
    for v in versions(42):
        yield Case(f"DeleteGroups v{v}: an empty group, an unknown one", 42, v,
                   {"groups_names": [f"commit-v{5 + v}", "no-such-group"]})
    yield Case("DeleteGroups v2: denied group", 42, 2, {"groups_names": ["denied-group"]})
    yield Case("DeleteGroups v2: no groups", 42, 2, {"groups_names": []})
    yield Case("DeleteGroups v2: the same group twice", 42, 2,
               {"groups_names": ["join-v1", "join-v1"]})
    yield Case("ListGroups v4: after DeleteGroups", 16, 4,
               {"states_filter": [], "types_filter": []})


# --- producer ids and transactions --------------------------------------------------------------


def init_producer_id(txn: str | None, timeout: int = 60000, pid: int = -1,
                     epoch: int = -1) -> dict[str, Any]:
    return {"transactional_id": txn, "transaction_timeout": timeout, "producer_id": pid,
            "producer_epoch": epoch}


def init_producer_id_cases() -> Iterator[Case]:
    for v in versions(22):
        yield Case(f"InitProducerId v{v}: idempotent", 22, v, init_producer_id(None),
                   retry=retriable_top)
        yield Case(f"InitProducerId v{v}: transactional", 22, v,
                   init_producer_id(f"init-v{v}"), retry=retriable_top)
    yield Case("InitProducerId v4: a timeout above transaction.max.timeout.ms", 22, 4,
               init_producer_id("init-big", timeout=3_600_000))
    yield Case("InitProducerId v4: a zero timeout", 22, 4, init_producer_id("init-zero", timeout=0))
    yield Case("InitProducerId v4: denied transactional id", 22, 4,
               init_producer_id("denied-txn"))
    yield Case("InitProducerId v4: an empty transactional id", 22, 4, init_producer_id(""))
    yield Case("InitProducerId v4: again, the epoch bumps", 22, 4, init_producer_id("init-v4"),
               capture=keep("init-v4", lambda r: (r.producer_id, r.producer_epoch)),
               retry=retriable_top)
    yield Case("InitProducerId v4: with the current producer id and epoch", 22, 4,
               lambda s: init_producer_id("init-v4", pid=s["init-v4"][0],
                                          epoch=s["init-v4"][1]), retry=retriable_top)
    yield Case("InitProducerId v4: with a stale epoch", 22, 4,
               lambda s: init_producer_id("init-v4", pid=s["init-v4"][0], epoch=0))
    yield Case("InitProducerId v4: with a wrong producer id", 22, 4,
               lambda s: init_producer_id("init-v4", pid=s["init-v4"][0] + 1000,
                                          epoch=s["init-v4"][1]))
    yield Case("InitProducerId v4: idempotent with a producer id", 22, 4,
               init_producer_id(None, pid=5, epoch=0), retry=retriable_top)


def idempotence_cases() -> Iterator[Case]:
    yield Case("InitProducerId v4: the idempotent producer", 22, 4, init_producer_id(None),
               capture=keep("idempotent", lambda r: r.producer_id), retry=retriable_top)

    def batch(seq: int, seed: str, epoch: int = 0, n: int = 2) -> Callable[[Side], dict]:
        return lambda s: produce("t3", 0, records(n, seed, producer_id=s["idempotent"],
                                                  producer_epoch=epoch, base_sequence=seq))

    yield Case("Produce v9: idempotent, sequence 0", 0, 9, batch(0, "i0"))
    yield Case("Produce v9: idempotent, sequence 2", 0, 9, batch(2, "i2"))
    yield Case("Produce v9: idempotent, sequence 2 again (a duplicate)", 0, 9, batch(2, "i2"))
    yield Case("Produce v9: idempotent, sequence 0 again (an old duplicate)", 0, 9, batch(0, "i0"))
    yield Case("Produce v9: idempotent, a gap in sequences", 0, 9, batch(9, "i9"))
    yield Case("Produce v9: idempotent, a lower epoch", 0, 9, batch(4, "ie", epoch=-2))
    yield Case("Produce v9: idempotent, a higher epoch, sequence 5", 0, 9, batch(5, "ie5", epoch=1))
    yield Case("Produce v9: idempotent, a higher epoch, sequence 0", 0, 9, batch(0, "ie0", epoch=1))
    yield Case("Produce v9: idempotent, an unknown producer id, sequence 3", 0, 9,
               lambda s: produce("t3", 1, records(1, "up", producer_id=s["idempotent"] + 77,
                                                   producer_epoch=0, base_sequence=3)))
    yield Case("Produce v9: idempotent, acks=1", 0, 9,
               lambda s: {**produce("t3", 2, records(1, "ia1", producer_id=s["idempotent"],
                                                      producer_epoch=0, base_sequence=0))})
    yield Case("Fetch v12: t3 partition 0 after the idempotent producer", 1, 12,
               fetch([("t3", [(0, 0)])]))


def _txn_flow(txn: str, v: int, commit: bool) -> Iterator[Case]:
    """One transaction of ``txn`` with AddPartitionsToTxn/AddOffsetsToTxn/TxnOffsetCommit/
    EndTxn at version ``v`` (capped to each API's range)."""
    key = f"{txn} producer"
    av, ov, tv, ev = min(v, 5), min(v, 4), min(v, 4), min(v, 4)
    yield Case(f"InitProducerId v4: {txn}", 22, 4, init_producer_id(txn),
               capture=keep(key, lambda r: (r.producer_id, r.producer_epoch)),
               retry=retriable_top)
    if av < 4:
        yield Case(f"AddPartitionsToTxn v{av}: two partitions ({txn})", 24, av,
                   lambda s: {"v3_and_below_transactional_id": txn,
                              "v3_and_below_producer_id": s[key][0],
                              "v3_and_below_producer_epoch": s[key][1],
                              "v3_and_below_topics": [{"name": "txn", "partitions": [0, 1]}]},
                   retry=retriable_txn_partitions)
    else:
        yield Case(f"AddPartitionsToTxn v{av}: two partitions ({txn})", 24, av,
                   lambda s: {"transactions": [{
                       "transactional_id": txn, "producer_id": s[key][0],
                       "producer_epoch": s[key][1], "verify_only": False,
                       "topics": [{"name": "txn", "partitions": [0, 1]}]}]},
                   retry=retriable_txn_partitions)
    for p in (0, 1):
        yield Case(f"Produce v9: transactional records, partition {p} ({txn})", 0, 9,
                   lambda s, p=p: produce("txn", p, records(
                       2, f"{txn}-{p}", producer_id=s[key][0], producer_epoch=s[key][1],
                       base_sequence=0, transactional=True), acks=-1, transactional_id=txn))
    yield Case(f"AddOffsetsToTxn v{ov}: ({txn})", 25, ov,
               lambda s: {"transactional_id": txn, "producer_id": s[key][0],
                          "producer_epoch": s[key][1], "group_id": "txn-group"},
               retry=retriable_top)
    yield Case(f"TxnOffsetCommit v{tv}: ({txn})", 28, tv,
               lambda s: {"transactional_id": txn, "group_id": "txn-group",
                          "producer_id": s[key][0], "producer_epoch": s[key][1],
                          "generation_id": -1, "member_id": "", "group_instance_id": None,
                          "topics": [{"name": "txn", "partitions": [
                              {"partition_index": 0, "committed_offset": 1,
                               "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
               retry=retriable_offsets)
    yield Case(f"DescribeTransactions v0: ongoing ({txn})", 65, 0,
               {"transactional_ids": [txn]})
    yield Case(f"Fetch v12: read_committed while {txn} is open", 1, 12,
               fetch([("txn", [(0, 0), (1, 0)])], isolation=1))
    yield Case(f"ListOffsets v7: read_committed latest while {txn} is open", 2, 7,
               list_offsets("txn", 0, -1, isolation=1))
    yield Case(f"EndTxn v{ev}: {'commit' if commit else 'abort'} ({txn})", 26, ev,
               lambda s: {"transactional_id": txn, "producer_id": s[key][0],
                          "producer_epoch": s[key][1], "committed": commit},
               retry=retriable_top, settle=_txn_complete(txn))
    yield Case(f"EndTxn v{ev}: again ({txn})", 26, ev,
               lambda s: {"transactional_id": txn, "producer_id": s[key][0],
                          "producer_epoch": s[key][1], "committed": commit})
    yield Case(f"EndTxn v{ev}: the other outcome ({txn})", 26, ev,
               lambda s: {"transactional_id": txn, "producer_id": s[key][0],
                          "producer_epoch": s[key][1], "committed": not commit})


def _txn_complete(txn: str) -> Callable[[Side], None]:
    def settle(side: Side) -> None:
        def done() -> bool:
            r = side.call(65, 0, {"transactional_ids": [txn]})
            return r.transaction_states[0].transaction_state in ("CompleteCommit",
                                                                 "CompleteAbort", "Empty")
        wait_for(f"{side.name}: {txn} complete", done)
    return settle


def transaction_cases() -> Iterator[Case]:
    for v in range(0, 5):
        yield from _txn_flow(f"txn-v{v}", v, commit=v % 2 == 0)
    yield Case("Fetch v12: read_committed after the transactions", 1, 12,
               fetch([("txn", [(0, 0), (1, 0)])], isolation=1))
    yield Case("Fetch v12: read_uncommitted after the transactions", 1, 12,
               fetch([("txn", [(0, 0), (1, 0)])], isolation=0))
    yield Case("OffsetFetch v8: the transactional commits", 9, 8,
               offset_fetch("txn-group", None))
    # Edge cases, against txn-edge (initialised, no transaction open).
    yield Case("InitProducerId v4: txn-edge", 22, 4, init_producer_id("txn-edge"),
               capture=keep("txn-edge", lambda r: (r.producer_id, r.producer_epoch)),
               retry=retriable_top)
    yield Case("EndTxn v4: commit with no transaction open", 26, 4,
               lambda s: {"transactional_id": "txn-edge", "producer_id": s["txn-edge"][0],
                          "producer_epoch": s["txn-edge"][1], "committed": True})
    yield Case("EndTxn v4: an unknown transactional id", 26, 4,
               {"transactional_id": "txn-unknown", "producer_id": 1, "producer_epoch": 0,
                "committed": True})
    yield Case("EndTxn v4: a wrong producer epoch", 26, 4,
               lambda s: {"transactional_id": "txn-edge", "producer_id": s["txn-edge"][0],
                          "producer_epoch": s["txn-edge"][1] + 3, "committed": False})
    yield Case("AddPartitionsToTxn v3: a wrong producer id", 24, 3,
               lambda s: {"v3_and_below_transactional_id": "txn-edge",
                          "v3_and_below_producer_id": s["txn-edge"][0] + 1000,
                          "v3_and_below_producer_epoch": s["txn-edge"][1],
                          "v3_and_below_topics": [{"name": "txn", "partitions": [0]}]})
    yield Case("AddPartitionsToTxn v3: an unknown topic and a good one", 24, 3,
               lambda s: {"v3_and_below_transactional_id": "txn-edge",
                          "v3_and_below_producer_id": s["txn-edge"][0],
                          "v3_and_below_producer_epoch": s["txn-edge"][1],
                          "v3_and_below_topics": [{"name": "txn", "partitions": [0]},
                                                  {"name": "no-such-topic", "partitions": [0]}]})
    yield Case("AddPartitionsToTxn v3: denied topic", 24, 3,
               lambda s: {"v3_and_below_transactional_id": "txn-edge",
                          "v3_and_below_producer_id": s["txn-edge"][0],
                          "v3_and_below_producer_epoch": s["txn-edge"][1],
                          "v3_and_below_topics": [{"name": "denied", "partitions": [0]},
                                                  {"name": "txn", "partitions": [1]}]})
    yield Case("AddPartitionsToTxn v3: denied transactional id", 24, 3,
               {"v3_and_below_transactional_id": "denied-txn", "v3_and_below_producer_id": 1,
                "v3_and_below_producer_epoch": 0,
                "v3_and_below_topics": [{"name": "txn", "partitions": [0]}]})
    yield Case("AddPartitionsToTxn v5: verify only, a partition not in the transaction", 24, 5,
               lambda s: {"transactions": [{
                   "transactional_id": "txn-edge", "producer_id": s["txn-edge"][0],
                   "producer_epoch": s["txn-edge"][1], "verify_only": True,
                   "topics": [{"name": "txn", "partitions": [0]}]}]})
    yield Case("AddPartitionsToTxn v4: no transactions", 24, 4, {"transactions": []})
    yield Case("Produce v9: transactional records outside a transaction", 0, 9,
               lambda s: produce("txn", 0, records(1, "outside", producer_id=s["txn-edge"][0],
                                                   producer_epoch=s["txn-edge"][1],
                                                   base_sequence=0, transactional=True),
                                 transactional_id="txn-edge"))
    yield Case("Produce v9: denied transactional id", 0, 9,
               produce("txn", 0, records(1, "den", producer_id=1, producer_epoch=0,
                                         base_sequence=0, transactional=True),
                       transactional_id="denied-txn"))
    yield Case("AddOffsetsToTxn v3: with no transaction open", 25, 3,
               lambda s: {"transactional_id": "txn-edge", "producer_id": s["txn-edge"][0],
                          "producer_epoch": s["txn-edge"][1], "group_id": "txn-group"})
    yield Case("AddOffsetsToTxn v3: denied group", 25, 3,
               lambda s: {"transactional_id": "txn-edge", "producer_id": s["txn-edge"][0],
                          "producer_epoch": s["txn-edge"][1], "group_id": "denied-group"})
    yield Case("TxnOffsetCommit v3: not in a transaction", 28, 3,
               lambda s: {"transactional_id": "txn-edge", "group_id": "txn-group",
                          "producer_id": s["txn-edge"][0], "producer_epoch": s["txn-edge"][1],
                          "generation_id": -1, "member_id": "", "group_instance_id": None,
                          "topics": [{"name": "txn", "partitions": [
                              {"partition_index": 0, "committed_offset": 1,
                               "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    yield Case("TxnOffsetCommit v3: denied group", 28, 3,
               lambda s: {"transactional_id": "txn-edge", "group_id": "denied-group",
                          "producer_id": s["txn-edge"][0], "producer_epoch": s["txn-edge"][1],
                          "generation_id": -1, "member_id": "", "group_instance_id": None,
                          "topics": []})


def write_txn_markers_cases() -> Iterator[Case]:
    def marker(pid: int | Callable[[Side], int], topic: str, partition: int, commit: bool,
               coordinator_epoch: int = 0) -> Callable[[Side], dict[str, Any]]:
        return lambda s: {"markers": [{
            "producer_id": pid(s) if callable(pid) else pid, "producer_epoch": 0,
            "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": topic, "partition_indexes": [partition]}]}]}

    for v in versions(27):
        yield Case(f"WriteTxnMarkers v{v}: abort, a producer with no transaction", 27, v,
                   marker(lambda s: s["idempotent"], "t3", 1, False))
    yield Case("WriteTxnMarkers v1: unknown topic", 27, 1, marker(99, "no-such-topic", 0, True))
    yield Case("WriteTxnMarkers v1: bad partition", 27, 1, marker(99, "t3", 8, True))
    yield Case("WriteTxnMarkers v1: no markers", 27, 1, {"markers": []})
    yield Case("Fetch v12: t3 partition 1 after the markers", 1, 12, fetch([("t3", [(0, 0)])]))


def describe_producers_cases() -> Iterator[Case]:
    yield Case("DescribeProducers v0: t3 partitions", 61, 0,
               {"topics": [{"name": "t3", "partition_indexes": [0, 1, 2]}]})
    yield Case("DescribeProducers v0: the transactional topic", 61, 0,
               {"topics": [{"name": "txn", "partition_indexes": [0, 1]}]})
    yield Case("DescribeProducers v0: unknown topic", 61, 0,
               {"topics": [{"name": "no-such-topic", "partition_indexes": [0]}]})
    yield Case("DescribeProducers v0: bad partition", 61, 0,
               {"topics": [{"name": "t3", "partition_indexes": [7]}]})
    yield Case("DescribeProducers v0: denied topic", 61, 0,
               {"topics": [{"name": "denied", "partition_indexes": [0]}]})
    yield Case("DescribeProducers v0: no topics", 61, 0, {"topics": []})


def transactions_listing_cases() -> Iterator[Case]:
    yield Case("DescribeTransactions v0: committed, aborted and unknown ids", 65, 0,
               {"transactional_ids": ["txn-v0", "txn-v1", "txn-unknown", "denied-txn"]})
    yield Case("DescribeTransactions v0: no ids", 65, 0, {"transactional_ids": []})
    for v in versions(66):
        yield Case(f"ListTransactions v{v}: all", 66, v,
                   {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
    yield Case("ListTransactions v1: state CompleteCommit", 66, 1,
               {"state_filters": ["CompleteCommit"], "producer_id_filters": [],
                "duration_filter": -1})
    yield Case("ListTransactions v1: an unknown state", 66, 1,
               {"state_filters": ["Sleeping"], "producer_id_filters": [],
                "duration_filter": -1})
    yield Case("ListTransactions v1: longer than an hour", 66, 1,
               {"state_filters": [], "producer_id_filters": [], "duration_filter": 3_600_000})
    yield Case("ListTransactions v1: an unknown producer id", 66, 1,
               {"state_filters": [], "producer_id_filters": [123456789],
                "duration_filter": -1})


# --- topics, partitions, configs --------------------------------------------------------------


def create_topic(name: str, partitions: int = 1, rf: int = 1,
                 configs: Mapping[str, str] | None = None,
                 assignments: list[list[int]] | None = None) -> dict[str, Any]:
    return {"name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [{"partition_index": i, "broker_ids": b}
                            for i, b in enumerate(assignments or [])],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}


def create_topics(*topics: dict[str, Any], validate_only: bool = False,
                  timeout: int = 30000) -> dict[str, Any]:
    return {"topics": list(topics), "timeout": timeout, "validate_only": validate_only}


def create_topics_cases() -> Iterator[Case]:
    for v in versions(19):
        yield Case(f"CreateTopics v{v}: a new topic", 19, v,
                   create_topics(create_topic(f"ct-v{v}", 2)),
                   settle=topics_ready(f"ct-v{v}", partitions={f"ct-v{v}": 2}))
        yield Case(f"CreateTopics v{v}: an existing topic", 19, v,
                   create_topics(create_topic("t1")))
        yield Case(f"CreateTopics v{v}: replication factor above the brokers", 19, v,
                   create_topics(create_topic(f"ct-rf-v{v}", 1, rf=3)))
        if v >= 1:
            yield Case(f"CreateTopics v{v}: validate only", 19, v,
                       create_topics(create_topic(f"ct-validate-v{v}", 3), validate_only=True))
    yield Case("CreateTopics v7: an invalid name", 19, 7, create_topics(create_topic("bad name!")))
    yield Case("CreateTopics v7: a name of dots", 19, 7, create_topics(create_topic("..")))
    yield Case("CreateTopics v7: a name too long", 19, 7, create_topics(create_topic("x" * 250)))
    yield Case("CreateTopics v7: zero partitions", 19, 7, create_topics(create_topic("ct-zero", 0)))
    yield Case("CreateTopics v7: replication factor zero", 19, 7,
               create_topics(create_topic("ct-rf0", 1, rf=0)))
    yield Case("CreateTopics v7: broker defaults (-1, -1)", 19, 7,
               create_topics(create_topic("ct-defaults", -1, rf=-1)),
               settle=topics_ready("ct-defaults"))
    yield Case("CreateTopics v7: an invalid config value", 19, 7,
               create_topics(create_topic("ct-badcfg", configs={"retention.ms": "soon"})))
    yield Case("CreateTopics v7: an unknown config", 19, 7,
               create_topics(create_topic("ct-unknowncfg", configs={"no.such.config": "1"})))
    yield Case("CreateTopics v7: configs", 19, 7,
               create_topics(create_topic("ct-configs", configs={
                   "retention.ms": "3600000", "cleanup.policy": "compact",
                   "max.message.bytes": "2000000"})),
               settle=topics_ready("ct-configs"))
    yield Case("CreateTopics v7: manual assignment", 19, 7,
               create_topics(create_topic("ct-assigned", -1, rf=-1,
                                          assignments=[[NODE_ID], [NODE_ID]])),
               settle=topics_ready("ct-assigned", partitions={"ct-assigned": 2}))
    yield Case("CreateTopics v7: assignment to an unknown broker", 19, 7,
               create_topics(create_topic("ct-badassign", -1, rf=-1, assignments=[[42]])))
    yield Case("CreateTopics v7: assignment and a partition count", 19, 7,
               create_topics(create_topic("ct-both", 2, rf=-1, assignments=[[NODE_ID]])))
    yield Case("CreateTopics v7: a duplicate name in one request", 19, 7,
               create_topics(create_topic("ct-dup"), create_topic("ct-dup")))
    yield Case("CreateTopics v7: denied topic", 19, 7, create_topics(create_topic("denied")))
    yield Case("CreateTopics v7: a name colliding by . and _", 19, 7,
               create_topics(create_topic("t.del.records")))
    yield Case("CreateTopics v7: no topics", 19, 7, create_topics())
    yield Case("CreateTopics v7: an internal topic's name", 19, 7,
               create_topics(create_topic("__consumer_offsets")))
    yield Case("CreateTopics v7: 100,000 partitions, validate only", 19, 7,
               create_topics(create_topic("ct-huge", 100_000), validate_only=True))


def create_partitions_cases() -> Iterator[Case]:
    def request(topic: str, count: int, assignments: list[list[int]] | None = None,
                validate: bool = False) -> dict[str, Any]:
        return {"topics": [{"name": topic, "count": count,
                            "assignments": None if assignments is None else
                            [{"broker_ids": b} for b in assignments]}],
                "timeout": 30000, "validate_only": validate}

    grow = {f"grow-v{v}": 2 for v in versions(37)} | {"grow-edge": 2, "grow-edge2": 2}
    yield Case("CreateTopics v7: topics to grow", 19, 7,
               create_topics(*(create_topic(n, p) for n, p in grow.items())),
               settle=topics_ready(*grow, partitions=grow))
    for v in versions(37):
        yield Case(f"CreatePartitions v{v}: 2 to 3", 37, v, request(f"grow-v{v}", 3),
                   settle=topics_ready(f"grow-v{v}", partitions={f"grow-v{v}": 3}))
        yield Case(f"CreatePartitions v{v}: unknown topic", 37, v, request("no-such-topic", 2))
    yield Case("CreatePartitions v3: fewer than now", 37, 3, request("t3", 2))
    yield Case("CreatePartitions v3: as many as now", 37, 3, request("t3", 3))
    yield Case("CreatePartitions v3: validate only", 37, 3, request("t1", 4, validate=True))
    yield Case("CreatePartitions v3: an assignment", 37, 3, request("grow-edge", 3, [[NODE_ID]]),
               settle=topics_ready("grow-edge", partitions={"grow-edge": 3}))
    yield Case("CreatePartitions v3: an assignment of the wrong length", 37, 3,
               request("grow-edge2", 5, [[NODE_ID]]))
    yield Case("CreatePartitions v3: an assignment to an unknown broker", 37, 3,
               request("grow-edge2", 3, [[42]]))
    yield Case("CreatePartitions v3: denied topic", 37, 3, request("denied", 3))
    yield Case("CreatePartitions v3: the same topic twice", 37, 3, {
        "topics": [{"name": "grow-edge2", "count": 5, "assignments": None},
                   {"name": "grow-edge2", "count": 6, "assignments": None}],
        "timeout": 30000, "validate_only": False})
    yield Case("CreatePartitions v3: no topics", 37, 3,
               {"topics": [], "timeout": 30000, "validate_only": False})


def delete_topics_cases() -> Iterator[Case]:
    doomed = [f"del-v{v}" for v in versions(20)] + ["del-by-id", "del-twice"]
    yield Case("CreateTopics v7: topics to delete", 19, 7,
               create_topics(*(create_topic(n) for n in doomed)), settle=topics_ready(*doomed))
    for v in versions(20):
        name = f"del-v{v}"
        yield Case(f"DeleteTopics v{v}: a topic", 20, v,
                   {"topic_names": [name], "topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                    "timeout": 30000},
                   settle=topics_gone(name))
        yield Case(f"DeleteTopics v{v}: unknown topic", 20, v,
                   {"topic_names": ["no-such-topic"],
                    "topics": [{"name": "no-such-topic", "topic_id": uuid.UUID(int=0)}],
                    "timeout": 30000})
    yield Case("Metadata v12: the topic ids of the topics to delete", 3, 12,
               metadata(["del-by-id", "ct-configs"]))
    yield Case("DeleteTopics v6: by topic id", 20, 6,
               lambda s: {"topics": [{"name": None, "topic_id": s.topic_id("del-by-id")}],
                          "timeout": 30000}, settle=topics_gone("del-by-id"))
    yield Case("DeleteTopics v6: an unknown topic id", 20, 6,
               {"topics": [{"name": None, "topic_id": uuid.UUID(int=0x5EED)}], "timeout": 30000})
    yield Case("DeleteTopics v6: both name and id", 20, 6,
               lambda s: {"topics": [{"name": "ct-configs", "topic_id": s.topic_id("ct-configs")}],
                          "timeout": 30000})
    # last: Kafka 4.1 deletes it (see README), and the other cases use it
    yield Case("DeleteTopics v5: denied topic", 20, 5,
               {"topic_names": ["denied"], "timeout": 30000}, last=True)
    yield Case("DeleteTopics v5: an internal topic", 20, 5,
               {"topic_names": ["__consumer_offsets"], "timeout": 30000})
    yield Case("DeleteTopics v5: no topics", 20, 5, {"topic_names": [], "timeout": 30000})
    yield Case("DeleteTopics v5: the same topic twice", 20, 5,
               {"topic_names": ["del-twice", "del-twice"], "timeout": 30000})
    yield Case("Metadata v12: after the deletions", 3, 12,
               metadata(["del-v1", "del-v6", "del-by-id", "ct-configs"]))


def describe_configs(rtype: int, name: str, keys: list[str] | None, synonyms: bool = False,
                     documentation: bool = False) -> dict[str, Any]:
    return {"resources": [{"resource_type": rtype, "resource_name": name,
                           "configuration_keys": keys}],
            "include_synonyms": synonyms, "include_documentation": documentation}


TOPIC_KEYS = ["cleanup.policy", "retention.ms", "segment.bytes", "max.message.bytes",
              "min.insync.replicas", "message.timestamp.type", "compression.type"]
BROKER_KEYS = ["log.segment.bytes", "num.partitions", "log.retention.hours",
               "auto.create.topics.enable", "message.max.bytes", "log.cleaner.threads",
               "broker.id"]


def config_cases() -> Iterator[Case]:
    for v in versions(32):
        yield Case(f"DescribeConfigs v{v}: topic configs", 32, v,
                   describe_configs(CONFIG_TOPIC, "compacted", TOPIC_KEYS, synonyms=True,
                                    documentation=True))
        yield Case(f"DescribeConfigs v{v}: broker configs", 32, v,
                   describe_configs(CONFIG_BROKER, str(NODE_ID), BROKER_KEYS, synonyms=True))
        yield Case(f"DescribeConfigs v{v}: unknown topic", 32, v,
                   describe_configs(CONFIG_TOPIC, "no-such-topic", None))
    yield Case("DescribeConfigs v4: an unknown broker", 32, 4,
               describe_configs(CONFIG_BROKER, "42", ["num.partitions"]))
    yield Case("DescribeConfigs v4: a broker id that is not a number", 32, 4,
               describe_configs(CONFIG_BROKER, "one", ["num.partitions"]))
    yield Case("DescribeConfigs v4: the cluster default resource", 32, 4,
               describe_configs(CONFIG_BROKER, "", ["num.partitions"]))
    yield Case("DescribeConfigs v4: denied topic", 32, 4,
               describe_configs(CONFIG_TOPIC, "denied", ["retention.ms"]))
    yield Case("DescribeConfigs v4: an unknown config name", 32, 4,
               describe_configs(CONFIG_TOPIC, "t1", ["no.such.config"]))
    yield Case("DescribeConfigs v4: an unknown resource type", 32, 4,
               describe_configs(9, "x", None))
    yield Case("DescribeConfigs v4: the broker logger root", 32, 4,
               describe_configs(CONFIG_BROKER_LOGGER, str(NODE_ID), ["root"]))
    yield Case("DescribeConfigs v4: no resources", 32, 4, {"resources": [],
                                                           "include_synonyms": False,
                                                           "include_documentation": False})

    def alter(topic: str, configs: Mapping[str, str], validate: bool = False,
              rtype: int = CONFIG_TOPIC) -> dict[str, Any]:
        return {"resources": [{"resource_type": rtype, "resource_name": topic,
                               "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                "validate_only": validate}

    for v in versions(33):
        yield Case(f"AlterConfigs v{v}: a topic's retention", 33, v,
                   alter("t3", {"retention.ms": str(86_400_000 + v)}),
                   settle=topic_config_is("t3", "retention.ms", str(86_400_000 + v)))
        yield Case(f"DescribeConfigs v{max(v, 1)}: after AlterConfigs v{v}", 32, max(v, 1),
                   describe_configs(CONFIG_TOPIC, "t3", ["retention.ms", "segment.bytes"]))
    yield Case("AlterConfigs v2: validate only", 33, 2,
               alter("t3", {"retention.ms": "1000"}, validate=True))
    yield Case("AlterConfigs v2: an invalid value", 33, 2, alter("t3", {"retention.ms": "x"}))
    yield Case("AlterConfigs v2: an unknown config", 33, 2, alter("t3", {"no.such.config": "1"}))
    yield Case("AlterConfigs v2: unknown topic", 33, 2,
               alter("no-such-topic", {"retention.ms": "1000"}))
    yield Case("AlterConfigs v2: denied topic", 33, 2, alter("denied", {"retention.ms": "1000"}))
    yield Case("AlterConfigs v2: a read-only broker config", 33, 2,
               alter(str(NODE_ID), {"broker.id": "5"}, rtype=CONFIG_BROKER))
    yield Case("AlterConfigs v2: a value out of range", 33, 2,
               alter("t3", {"min.insync.replicas": "0"}))

    def incremental(rtype: int, name: str, ops: list[tuple[str, int, str | None]],
                    validate: bool = False) -> dict[str, Any]:
        return {"resources": [{"resource_type": rtype, "resource_name": name,
                               "configs": [{"name": k, "config_operation": op, "value": val}
                                           for k, op, val in ops]}],
                "validate_only": validate}

    SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
    for v in versions(44):
        yield Case(f"IncrementalAlterConfigs v{v}: set a topic config", 44, v,
                   incremental(CONFIG_TOPIC, "t1", [("retention.ms", SET, str(7_200_000 + v))]),
                   settle=topic_config_is("t1", "retention.ms", str(7_200_000 + v)))
    yield Case("IncrementalAlterConfigs v1: delete a topic config", 44, 1,
               incremental(CONFIG_TOPIC, "t1", [("retention.ms", DELETE, None)]),
               settle=topic_config_is("t1", "retention.ms", "604800000"))
    yield Case("IncrementalAlterConfigs v1: append to cleanup.policy", 44, 1,
               incremental(CONFIG_TOPIC, "compacted", [("cleanup.policy", APPEND, "delete")]),
               settle=topic_config_is("compacted", "cleanup.policy", "compact,delete"))
    yield Case("IncrementalAlterConfigs v1: subtract from cleanup.policy", 44, 1,
               incremental(CONFIG_TOPIC, "compacted", [("cleanup.policy", SUBTRACT, "delete")]),
               settle=topic_config_is("compacted", "cleanup.policy", "compact"))
    yield Case("IncrementalAlterConfigs v1: append to a non-list config", 44, 1,
               incremental(CONFIG_TOPIC, "t1", [("retention.ms", APPEND, "5")]))
    yield Case("IncrementalAlterConfigs v1: an unknown operation", 44, 1,
               incremental(CONFIG_TOPIC, "t1", [("retention.ms", 7, "5")]))
    yield Case("IncrementalAlterConfigs v1: the same config twice", 44, 1,
               incremental(CONFIG_TOPIC, "t1", [("retention.ms", SET, "5"),
                                                ("retention.ms", SET, "6")]))
    yield Case("IncrementalAlterConfigs v1: an invalid value", 44, 1,
               incremental(CONFIG_TOPIC, "t1", [("retention.ms", SET, "x")]))
    yield Case("IncrementalAlterConfigs v1: set with a null value", 44, 1,
               incremental(CONFIG_TOPIC, "t1", [("retention.ms", SET, None)]))
    yield Case("IncrementalAlterConfigs v1: validate only", 44, 1,
               incremental(CONFIG_TOPIC, "t1", [("retention.ms", SET, "5")], validate=True))
    yield Case("IncrementalAlterConfigs v1: unknown topic", 44, 1,
               incremental(CONFIG_TOPIC, "no-such-topic", [("retention.ms", SET, "5")]))
    yield Case("IncrementalAlterConfigs v1: denied topic", 44, 1,
               incremental(CONFIG_TOPIC, "denied", [("retention.ms", SET, "5")]))
    yield Case("IncrementalAlterConfigs v1: a dynamic broker config", 44, 1,
               incremental(CONFIG_BROKER, str(NODE_ID),
                           [("log.cleaner.backoff.ms", SET, "16000")]),
               settle=_broker_config_is("log.cleaner.backoff.ms", "16000"))
    yield Case("IncrementalAlterConfigs v1: a static broker config", 44, 1,
               incremental(CONFIG_BROKER, str(NODE_ID), [("log.dirs", SET, "/tmp/x")]))
    # (the root logger: the one both have -- klog's other loggers are Python's)
    yield Case("IncrementalAlterConfigs v1: a broker logger's level", 44, 1,
               incremental(CONFIG_BROKER_LOGGER, str(NODE_ID), [("root", SET, "INFO")]))
    yield Case("IncrementalAlterConfigs v1: a broker logger, an invalid level", 44, 1,
               incremental(CONFIG_BROKER_LOGGER, str(NODE_ID), [("root", SET, "LOUD")]))
    yield Case("IncrementalAlterConfigs v1: a logger neither has", 44, 1,
               incremental(CONFIG_BROKER_LOGGER, str(NODE_ID), [("no.such.logger", SET, "INFO")]))
    yield Case("DescribeConfigs v4: after the broker config change", 32, 4,
               describe_configs(CONFIG_BROKER, str(NODE_ID), ["log.cleaner.backoff.ms"],
                                synonyms=True))


# --- ACLs ---------------------------------------------------------------------------------------


def acl_filter(rtype: int = ANY, name: str | None = None, pattern: int = MATCH,
               principal: str | None = None, host: str | None = None, operation: int = ANY,
               permission: int = ANY) -> dict[str, Any]:
    return {"resource_type_filter": rtype, "resource_name_filter": name,
            "pattern_type_filter": pattern, "principal_filter": principal,
            "host_filter": host, "operation": operation, "permission_type": permission}


def acl_cases() -> Iterator[Case]:
    yield Case("CreateAcls v1: allow User:alice to read prefixed topics", 30, 1, {
        "creations": [{"resource_type": TOPIC, "resource_name": "alice-",
                       "resource_pattern_type": PREFIXED, "principal": "User:alice",
                       "host": "*", "operation": READ, "permission_type": ALLOW}]},
        settle=acls_visible(4))
    # (Not an ACL on the cluster: any ACL there leaves User:ANONYMOUS, who has none, without
    # the cluster's operations; on Kafka 4 that includes the broker's own forwarding of
    # admin requests to its controller, which then fail with UNKNOWN_SERVER_ERROR.)
    yield Case("CreateAcls v2: allow User:bob to describe a topic from one host", 30, 2, {
        "creations": [{"resource_type": TOPIC, "resource_name": "bob-topic",
                       "resource_pattern_type": LITERAL, "principal": "User:bob",
                       "host": "10.0.0.1", "operation": DESCRIBE, "permission_type": ALLOW}]},
        settle=acls_visible(5))
    for bad, label in (
            ({"resource_type": 0}, "an unknown resource type"),
            ({"resource_type": TOPIC, "resource_pattern_type": MATCH}, "pattern type MATCH"),
            ({"principal": "alice"}, "a principal without type"),
            ({"operation": 0}, "an unknown operation"),
            ({"permission_type": 1}, "permission ANY"),
            ({"resource_type": CLUSTER, "resource_name": "other"},
             "a cluster name not kafka-cluster"),
            ({"resource_name": ""}, "an empty resource name"),
            ({"resource_type": 6}, "a delegation token resource")):
        creation = {"resource_type": TOPIC, "resource_name": "acl-edge",
                    "resource_pattern_type": LITERAL, "principal": "User:carol", "host": "*",
                    "operation": READ, "permission_type": ALLOW, **bad}
        yield Case(f"CreateAcls v3: {label}", 30, 3, {"creations": [creation]})
    yield Case("CreateAcls v3: no creations", 30, 3, {"creations": []})
    for v in versions(29):
        yield Case(f"DescribeAcls v{v}: everything", 29, v, acl_filter())
        yield Case(f"DescribeAcls v{v}: topics", 29, v, acl_filter(rtype=TOPIC))
    yield Case("DescribeAcls v3: a principal", 29, 3, acl_filter(principal="User:alice"))
    yield Case("DescribeAcls v3: matching a topic name (prefixed ACLs match)", 29, 3,
               acl_filter(rtype=TOPIC, name="alice-data", pattern=MATCH))
    yield Case("DescribeAcls v3: literal only", 29, 3, acl_filter(pattern=LITERAL))
    yield Case("DescribeAcls v3: prefixed only", 29, 3, acl_filter(pattern=PREFIXED))
    yield Case("DescribeAcls v3: a host", 29, 3, acl_filter(host="10.0.0.1"))
    yield Case("DescribeAcls v3: an unknown resource type", 29, 3, acl_filter(rtype=0))
    yield Case("DescribeAcls v3: an unknown pattern type", 29, 3, acl_filter(pattern=0))
    yield Case("DescribeAcls v3: nothing matches", 29, 3, acl_filter(principal="User:nobody"))
    for v in versions(31):
        yield Case(f"DeleteAcls v{v}: a filter matching nothing", 31, v,
                   {"filters": [acl_filter(principal=f"User:nobody-{v}")]})
    yield Case("DeleteAcls v3: bob's ACL", 31, 3,
               {"filters": [acl_filter(principal="User:bob")]}, settle=acl_count_exactly(4))
    yield Case("DeleteAcls v2: alice's prefixed ACL", 31, 2,
               {"filters": [acl_filter(rtype=TOPIC, pattern=PREFIXED)]},
               settle=acl_count_exactly(3))
    yield Case("DeleteAcls v3: two filters, one an unknown type", 31, 3,
               {"filters": [acl_filter(principal="User:nobody"), acl_filter(rtype=0)]})
    yield Case("DeleteAcls v3: no filters", 31, 3, {"filters": []})
    yield Case("DescribeAcls v3: what is left", 29, 3, acl_filter())


def log_dir_cases() -> Iterator[Case]:
    for v in versions(35):
        yield Case(f"DescribeLogDirs v{v}: t1 and t3", 35, v, {"topics": [
            {"topic": "t1", "partitions": [0]}, {"topic": "t3", "partitions": [0, 1, 2]}]})
        yield Case(f"DescribeLogDirs v{v}: an unknown topic", 35, v, {"topics": [
            {"topic": "no-such-topic", "partitions": [0]}]})
    yield Case("DescribeLogDirs v4: every topic", 35, 4, {"topics": None})
    yield Case("DescribeLogDirs v4: no topics", 35, 4, {"topics": []})
    yield Case("DescribeLogDirs v4: denied topic", 35, 4, {"topics": [
        {"topic": "denied", "partitions": [0]}]})


def elect_leaders_cases() -> Iterator[Case]:
    def request(election: int, partitions: list[tuple[str, list[int]]] | None) -> dict[str, Any]:
        return {"election_type": election, "timeout": 10000,
                "topic_partitions": None if partitions is None else
                [{"topic": t, "partitions": ps} for t, ps in partitions]}

    for v in versions(43):
        yield Case(f"ElectLeaders v{v}: preferred, a partition led by its preferred replica",
                   43, v, request(0, [("t1", [0])]))
        yield Case(f"ElectLeaders v{v}: preferred, unknown topic", 43, v,
                   request(0, [("no-such-topic", [0])]))
    yield Case("ElectLeaders v2: unclean", 43, 2, request(1, [("t1", [0])]))
    yield Case("ElectLeaders v2: every partition", 43, 2, request(0, None))
    yield Case("ElectLeaders v2: an unknown election type", 43, 2, request(5, [("t1", [0])]))
    yield Case("ElectLeaders v2: no partitions", 43, 2, request(0, []))
    yield Case("ElectLeaders v2: bad partition", 43, 2, request(0, [("t1", [4])]))


def reassignment_cases() -> Iterator[Case]:
    def alter(topic: str, partition: int, replicas: list[int] | None) -> dict[str, Any]:
        return {"timeout": 10000, "allow_replication_factor_change": True,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": partition, "replicas": replicas}]}]}

    for v in versions(45):
        yield Case(f"AlterPartitionReassignments v{v}: to the replicas it has", 45, v,
                   alter("t1", 0, [NODE_ID]))
        yield Case(f"AlterPartitionReassignments v{v}: cancel when none runs", 45, v,
                   alter("t1", 0, None))
    yield Case("AlterPartitionReassignments v1: to an unknown broker", 45, 1, alter("t1", 0, [42]))
    yield Case("AlterPartitionReassignments v1: to no replicas", 45, 1, alter("t1", 0, []))
    yield Case("AlterPartitionReassignments v1: a replica twice", 45, 1,
               alter("t1", 0, [NODE_ID, NODE_ID]))
    yield Case("AlterPartitionReassignments v1: unknown topic", 45, 1,
               alter("no-such-topic", 0, [NODE_ID]))
    yield Case("AlterPartitionReassignments v1: bad partition", 45, 1, alter("t1", 3, [NODE_ID]))
    yield Case("AlterPartitionReassignments v1: no topics", 45, 1,
               {"timeout": 10000, "allow_replication_factor_change": True, "topics": []})
    yield Case("ListPartitionReassignments v0: all", 46, 0, {"timeout": 10000, "topics": None})
    yield Case("ListPartitionReassignments v0: a partition, none running", 46, 0,
               {"timeout": 10000, "topics": [{"name": "t1", "partition_indexes": [0]}]})
    yield Case("ListPartitionReassignments v0: unknown topic", 46, 0,
               {"timeout": 10000, "topics": [{"name": "no-such-topic",
                                              "partition_indexes": [0]}]})


def quota_cases() -> Iterator[Case]:
    def entity(*parts: tuple[str, str | None]) -> list[dict[str, Any]]:
        return [{"entity_type": t, "entity_name": n} for t, n in parts]

    def alter(entries: list[tuple[list[dict[str, Any]], list[tuple[str, float, bool]]]],
              validate: bool = False) -> dict[str, Any]:
        return {"entries": [{"entity": e, "ops": [{"key": k, "value": v, "remove": r}
                                                  for k, v, r in ops]}
                            for e, ops in entries], "validate_only": validate}

    for v in versions(49):
        yield Case(f"AlterClientQuotas v{v}: a user's produce rate", 49, v,
                   alter([(entity(("user", f"quota-user-{v}")),
                           [("producer_byte_rate", 1024.0 * (v + 1), False)])]))
    yield Case("AlterClientQuotas v1: a user and client id pair", 49, 1,
               alter([(entity(("user", "quota-user-0"), ("client-id", "app")),
                       [("consumer_byte_rate", 2048.0, False)])]))
    yield Case("AlterClientQuotas v1: the default client id", 49, 1,
               alter([(entity(("client-id", None)), [("request_percentage", 50.0, False)])]))
    yield Case("AlterClientQuotas v1: an unknown key", 49, 1,
               alter([(entity(("user", "quota-user-0")), [("speed", 1.0, False)])]))
    yield Case("AlterClientQuotas v1: an unknown entity type", 49, 1,
               alter([(entity(("planet", "mars")), [("producer_byte_rate", 1.0, False)])]))
    yield Case("AlterClientQuotas v1: a negative rate", 49, 1,
               alter([(entity(("user", "quota-user-0")), [("producer_byte_rate", -5.0, False)])]))
    yield Case("AlterClientQuotas v1: a rate that is not an integer", 49, 1,
               alter([(entity(("user", "quota-user-0")), [("producer_byte_rate", 1.5, False)])]))
    yield Case("AlterClientQuotas v1: remove", 49, 1,
               alter([(entity(("user", "quota-user-1")), [("producer_byte_rate", 0.0, True)])]))
    yield Case("AlterClientQuotas v1: validate only", 49, 1,
               alter([(entity(("user", "quota-user-9")), [("producer_byte_rate", 9.0, False)])],
                     validate=True))
    yield Case("AlterClientQuotas v1: the same entity type twice", 49, 1,
               alter([(entity(("user", "a"), ("user", "b")),
                       [("producer_byte_rate", 9.0, False)])]))
    yield Case("AlterClientQuotas v1: an ip entity", 49, 1,
               alter([(entity(("ip", "10.0.0.1")), [("connection_creation_rate", 10.0, False)])]))
    yield Case("AlterClientQuotas v1: an ip entity with a client quota key", 49, 1,
               alter([(entity(("ip", "10.0.0.2")), [("producer_byte_rate", 10.0, False)])]))

    def describe(components: list[tuple[str, int, str | None]], strict: bool = False
                 ) -> dict[str, Any]:
        return {"components": [{"entity_type": t, "match_type": m, "match": n}
                               for t, m, n in components], "strict": strict}

    EXACT, DEFAULT, SPECIFIED = 0, 1, 2
    settle_all = None
    for v in versions(48):
        yield Case(f"DescribeClientQuotas v{v}: every user", 48, v,
                   describe([("user", SPECIFIED, None)]), settle=settle_all)
        yield Case(f"DescribeClientQuotas v{v}: one user", 48, v,
                   describe([("user", EXACT, "quota-user-0")]))
    yield Case("DescribeClientQuotas v1: the default client id", 48, 1,
               describe([("client-id", DEFAULT, None)]))
    yield Case("DescribeClientQuotas v1: strict", 48, 1,
               describe([("user", EXACT, "quota-user-0")], strict=True))
    yield Case("DescribeClientQuotas v1: everything", 48, 1, describe([]))
    yield Case("DescribeClientQuotas v1: an unknown entity type", 48, 1,
               describe([("planet", SPECIFIED, None)]))
    yield Case("DescribeClientQuotas v1: an unknown match type", 48, 1,
               describe([("user", 7, None)]))
    yield Case("DescribeClientQuotas v1: the same type twice", 48, 1,
               describe([("user", SPECIFIED, None), ("user", DEFAULT, None)]))
    yield Case("DescribeClientQuotas v1: ip entities", 48, 1, describe([("ip", SPECIFIED, None)]))


def scram_cases() -> Iterator[Case]:
    salt = b"0123456789abcdef"
    salted = hashlib.sha256(b"alice-secret").digest()
    salted512 = hashlib.sha512(b"alice-secret").digest()

    def upsert(name: str, mechanism: int = 1, iterations: int = 4096,
               password: bytes = salted) -> dict[str, Any]:
        return {"name": name, "mechanism": mechanism, "iterations": iterations,
                "salt": salt, "salted_password": password}

    yield Case("AlterUserScramCredentials v0: upsert SHA-256 and SHA-512", 51, 0,
               {"deletions": [], "upsertions": [upsert("alice"),
                                                upsert("alice", 2, password=salted512)]})
    yield Case("AlterUserScramCredentials v0: an unknown mechanism", 51, 0,
               {"deletions": [], "upsertions": [upsert("bob", mechanism=5)]})
    yield Case("AlterUserScramCredentials v0: too few iterations", 51, 0,
               {"deletions": [], "upsertions": [upsert("bob", iterations=10)]})
    yield Case("AlterUserScramCredentials v0: too many iterations", 51, 0,
               {"deletions": [], "upsertions": [upsert("bob", iterations=100_000)]})
    yield Case("AlterUserScramCredentials v0: an empty user name", 51, 0,
               {"deletions": [], "upsertions": [upsert("")]})
    yield Case("AlterUserScramCredentials v0: delete what does not exist", 51, 0,
               {"deletions": [{"name": "carol", "mechanism": 1}], "upsertions": []})
    yield Case("AlterUserScramCredentials v0: delete and upsert one user", 51, 0,
               {"deletions": [{"name": "dave", "mechanism": 1}],
                "upsertions": [upsert("dave")]})
    yield Case("AlterUserScramCredentials v0: nothing", 51, 0,
               {"deletions": [], "upsertions": []})

    def describe_visible(side: Side) -> None:
        def visible() -> bool:
            r = side.call(50, 0, {"users": [{"name": "alice"}]})
            return len(r.results[0].credential_infos) == 2
        wait_for(f"{side.name}: alice's credentials", visible)

    yield Case("DescribeUserScramCredentials v0: alice", 50, 0, {"users": [{"name": "alice"}]},
               settle=describe_visible)
    yield Case("DescribeUserScramCredentials v0: alice again, after settling", 50, 0,
               {"users": [{"name": "alice"}]})
    yield Case("DescribeUserScramCredentials v0: every user", 50, 0, {"users": None})
    yield Case("DescribeUserScramCredentials v0: an unknown user", 50, 0,
               {"users": [{"name": "zed"}]})
    yield Case("DescribeUserScramCredentials v0: a user twice", 50, 0,
               {"users": [{"name": "alice"}, {"name": "alice"}]})
    yield Case("DescribeUserScramCredentials v0: an empty name", 50, 0, {"users": [{"name": ""}]})
    yield Case("AlterUserScramCredentials v0: delete alice's SHA-512", 51, 0,
               {"deletions": [{"name": "alice", "mechanism": 2}], "upsertions": []})


def describe_cluster_cases() -> Iterator[Case]:
    for v in versions(60):
        yield Case(f"DescribeCluster v{v}: the cluster", 60, v,
                   {"include_cluster_authorized_operations": True, "endpoint_type": 1})
    yield Case("DescribeCluster v1: controllers", 60, 1,
               {"include_cluster_authorized_operations": False, "endpoint_type": 2})
    yield Case("DescribeCluster v1: an unknown endpoint type", 60, 1,
               {"include_cluster_authorized_operations": False, "endpoint_type": 9})


def sasl_cases() -> Iterator[Case]:
    for v in versions(17):
        yield Case(f"SaslHandshake v{v}: PLAIN on a PLAINTEXT listener", 17, v,
                   {"mechanism": "PLAIN"}, fresh=True)
    yield Case("SaslHandshake v1: an unknown mechanism", 17, 1, {"mechanism": "MAGIC"}, fresh=True)
    for v in versions(36):
        yield Case(f"SaslAuthenticate v{v}: on a PLAINTEXT listener", 36, v,
                   {"auth_bytes": b"\x00alice\x00secret"}, fresh=True)


def framing_cases() -> Iterator[Case]:
    """Frames that are wrong before any body is read: each on its own connection."""
    def frame(payload: Callable[[int], bytes]) -> Callable[[Side, int], bytes]:
        def raw(side: Side, cid: int) -> bytes:
            body = payload(cid)
            return struct.pack(">i", len(body)) + body
        return raw

    yield Case("Metadata v12: an unknown api key", 3, 12, fresh=True,
               raw=frame(lambda cid: struct.pack(">hhi", 999, 0, cid) + b"\xff\xff"))
    yield Case("Metadata v99: a version no broker has", 3, 99, fresh=True,
               raw=frame(lambda cid: struct.pack(">hhih", 3, 99, cid, -1) + b"\x00"))
    yield Case("Metadata v12: a truncated body", 3, 12, fresh=True,
               raw=frame(lambda cid: struct.pack(">hhih", 3, 12, cid, -1) + b"\x00\x05"))
    yield Case("Metadata v12: trailing bytes after the body", 3, 12, fresh=True,
               raw=frame(lambda cid: struct.pack(">hhih", 3, 12, cid, -1) + b"\x00"
                         + b"\x01" + b"\x00\x00\x00" + b"junk"))
    yield Case("Metadata v4: an array count of two billion", 3, 4, fresh=True,
               raw=frame(lambda cid: struct.pack(">hhih", 3, 4, cid, -1)
                         + struct.pack(">i", 2_000_000_000) + b"\x01"))
    yield Case("ApiVersions v3: a negative frame size", 18, 3, fresh=True,
               raw=lambda side, cid: struct.pack(">i", -5) + b"\x00" * 8)
    yield Case("Produce v9: a frame above socket.request.max.bytes", 0, 9, fresh=True,
               raw=lambda side, cid: struct.pack(">i", 200 << 20) + struct.pack(">hhi", 0, 9, cid))
    yield Case("Metadata v12: a null client id", 3, 12, metadata(["t1"]), client_id=None)
    yield Case("Metadata v12: an empty client id", 3, 12, metadata(["t1"]), client_id="")


# --- checking the corpus itself ---------------------------------------------------------------


def unknown_keys(api_key: int, values: Mapping[str, Any]) -> list[str]:
    """Keys in ``values`` that no version of the API's request has (at their nesting):
    a misspelt key would otherwise be dropped silently and the field sent as zero."""
    import dataclasses
    import typing

    spec = apis.spec_for(api_key)
    known: dict[str, set[str]] = {}

    def collect(entity: type, path: str) -> None:
        hints = typing.get_type_hints(entity)
        names = known.setdefault(path, set())
        for f in dataclasses.fields(entity):
            names.add(f.name)
            annotation = hints[f.name]
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            inner = None
            if typing.get_origin(annotation) is tuple and args and \
                    dataclasses.is_dataclass(args[0]):
                inner = args[0]
            elif dataclasses.is_dataclass(annotation):
                inner = annotation
            elif args and typing.get_origin(args[0]) is tuple:
                sub = typing.get_args(args[0])
                if sub and dataclasses.is_dataclass(sub[0]):
                    inner = sub[0]
            elif args and dataclasses.is_dataclass(args[0]):
                inner = args[0]
            if isinstance(inner, type):
                collect(inner, f"{path}.{f.name}")

    for v in range(spec.min_version, spec.max_version + 1):
        collect(spec.request_entity(v), "")
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, Mapping):
            names = known.get(path)
            for k, v in value.items():
                if names is not None and k not in names:
                    found.append(f"{path}.{k}")
                walk(v, f"{path}.{k}")
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item, path)

    walk(values, "")
    return found
