"""The crash matrix's scenarios: one stateful feature each, built and observed through real
clients.

A scenario's ``build`` makes its state on a site (its own topics, groups, users, ids) and
notes what clients observe; clients it starts there (a producer, group members) keep
running through the disruption. ``before_disruption`` is called just before it;
``check``, after the hit broker is back, asserts that clients observe what they did before
and that the running clients carried on. ``close`` releases whatever is left.

Kept small: a few hundred records, a few ids each, every wait bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from tests.cluster.conftest import wait_until
from tests.crash.site import (
    CLIENT_REQUEST_TIMEOUT_MS,
    CLIENT_SESSION_TIMEOUT_MS,
    ClusterSite,
    Site,
)

Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


# ---------------------------------------------------------------------------- helpers


def read_all(site: Site, topic: str, partitions: int, isolation: str = "read_uncommitted",
             timeout: float = 30.0, **config: Any) -> dict[int, list[Record]]:
    """Every record of ``topic`` a fresh consumer with ``isolation`` reads from the start
    up to the end it is given (the high watermark, or for read_committed the last stable
    offset): until each partition has reported its end."""
    consumer = site.consumer(**{"group.id": "crash-reader", "isolation.level": isolation,
                                "enable.partition.eof": True, **config})
    got: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, (
                f"{topic} ({isolation}): partitions {sorted(set(got) - at_end)} never reached "
                f"their end in {timeout} s; read {[len(v) for v in got.values()]}")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise KafkaException(error)
            at_end.discard(msg.partition())
            got[msg.partition()].append((msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


def end_offsets(site: Site, topic: str, partitions: int, committed: bool = False
                ) -> dict[int, int]:
    """Each partition's high watermark (or last stable offset, ``committed``), by
    ListOffsets."""
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED

    def ask() -> dict[int, int]:
        futures = site.admin().list_offsets(
            {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
            isolation_level=level, request_timeout=10)
        return {tp.partition: f.result(15).offset for tp, f in futures.items()}

    # (librdkafka fails at once when the broker it asks has not heard of a leader yet.)
    return dict(wait_until(ask, 20, f"ListOffsets of {topic}"))


def group_offsets(site: Site, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets of ``topic`` (partitions without one left out), as a
    consumer of the group reads them (OffsetFetch asking for stable offsets).

    Not the admin client's ListConsumerGroupOffsets: librdkafka 2.16 dereferences a null
    consumer group when that request is answered NOT_COORDINATOR (the coordinator moved
    since it was looked up, as after a disruption) and the process dies of SIGSEGV
    (confluentinc/librdkafka#5040)."""
    committed = committed_offsets(site, group, [TopicPartition(topic, p)
                                                for p in range(partitions)])
    return {tp.partition: tp.offset for tp in committed if tp.offset >= 0}


#: What a coordinator answers while it moves or loads; librdkafka's committed() gives up on
#: them at once, a group member retries.
_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                       KafkaError.COORDINATOR_NOT_AVAILABLE)


def committed_offsets(site: Site, group: str, partitions: list[TopicPartition],
                      timeout: float = 20.0) -> list[TopicPartition]:
    """OffsetFetch by a consumer of ``group``, retried while its coordinator moves."""
    consumer = site.consumer(**{"group.id": group})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                return list(consumer.committed(partitions, timeout=10))
            except KafkaException as exc:
                if exc.args[0].code() not in _COORDINATOR_MOVING \
                        or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


class Deliveries:
    """A producer's delivery reports: (partition, offset, key, value) of each acknowledged
    message, and the errors."""

    def __init__(self) -> None:
        self.acked: list[tuple[int, int, bytes | None, bytes | None]] = []
        self.errors: list[KafkaError] = []
        self.lock = threading.Lock()

    def __call__(self, err: KafkaError | None, msg: Message) -> None:
        with self.lock:
            if err is not None:
                self.errors.append(err)
            else:
                self.acked.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    def __len__(self) -> int:
        return len(self.acked)


def produce_all(site: Site, topic: str, items: Iterable[tuple[int, bytes | None, bytes | None]],
                **config: Any) -> Deliveries:
    """Produce (partition, key, value) items with acks=all; all must be acknowledged."""
    reports = Deliveries()
    producer = site.producer(**config)
    items = list(items)
    # librdkafka fails a message to a partition its metadata lacks at once; a broker may
    # not have heard of new partitions yet.
    count = max(p for p, _, _ in items) + 1
    wait_until(lambda: len(producer.list_topics(topic, timeout=5).topics[topic].partitions)
               >= count, 20, f"the producer to know {count} partitions of {topic}")
    for partition, key, value in items:
        producer.produce(topic, value=value, key=key, partition=partition,
                         on_delivery=reports)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not reports.errors, reports.errors[:3]
    return reports


def scram_upsert(site: Site, users: Iterable[tuple[str, ScramMechanism, int, bytes]]) -> None:
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations),
                                            password)
               for user, mechanism, iterations, password in users]
    for future in site.admin().alter_user_scram_credentials(upserts).values():
        future.result(30)


def sasl_config(site: Site, user: str, password: str, mechanism: str = "SCRAM-SHA-256",
                ids: Iterable[int] | None = None) -> dict[str, Any]:
    return {"bootstrap.servers": site.sasl_bootstrap_servers(ids),
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def authenticates(site: Site, broker_id: int, user: str, password: str,
                  mechanism: str = "SCRAM-SHA-256") -> bool:
    """Whether ``user`` gets through SCRAM on ``broker_id``'s SASL listener: Metadata
    answered (True), or librdkafka reporting an authentication failure (False)."""
    failures: list[KafkaError] = []
    # A producer, not an admin client: its error_cb runs in poll(), on this thread (an
    # admin client's run on librdkafka's background thread, which may still be calling
    # one as the client is destroyed).
    client = site.producer(**sasl_config(site, user, password, mechanism, [broker_id]),
                           error_cb=failures.append)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            client.list_topics(timeout=0.5)
            return True
        except KafkaException:
            client.poll(0.05)
            if any(f.code() == KafkaError._AUTHENTICATION for f in failures):
                return False
    raise AssertionError(f"neither success nor an authentication failure for {user} on "
                         f"broker {broker_id}: {failures}")


def _run(coro_fn: Callable[[Any], Any], site: Site) -> Any:
    """Run ``coro_fn(admin)`` with klog's own admin client against the site."""
    from klog.client.admin import AdminClient

    async def run() -> Any:
        async with AdminClient(site.bootstrap_servers) as admin:
            return await coro_fn(admin)

    return asyncio.run(run())


# ---------------------------------------------------------------------------- scenarios


class Scenario:
    """One stateful feature; see the module docstring."""

    name: ClassVar[str]
    feature: ClassVar[str]  # the README's words for it
    modes: ClassVar[tuple[str, ...]] = ("standalone", "cluster")

    def build(self, site: Site) -> None:
        raise NotImplementedError

    def before_disruption(self, site: Site) -> None:
        pass

    def check(self, site: Site) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class IdempotentProducer(Scenario):
    """An idempotent acks=all producer writes all along, through the disruption: every
    message is acknowledged, and each partition holds every message exactly once, in the
    order sent, at the offset its acknowledgement gave. A broker that lost the producer's
    state would take a retried batch twice, or refuse the producer's next sequence."""

    name = "idempotent-producer"
    feature = "idempotent producer state: sequences deduplicated across the restart"
    TOPIC = "crash-idempotent"

    def build(self, site: Site) -> None:
        site.create_topic(self.TOPIC, partitions=2)
        self.reports = Deliveries()
        self.sent = 0
        # Messages are sent up to this many: set at the disruption to what ~40 s more take
        # (past any disruption), so that a world checked minutes later reads a bounded log.
        self.limit = 1 << 62
        self.stop = threading.Event()
        self.producer = site.producer(**{
            "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120000,
            "request.timeout.ms": CLIENT_REQUEST_TIMEOUT_MS, "retry.backoff.ms": 100})
        self.thread = threading.Thread(target=self._produce, daemon=True)
        self.thread.start()
        wait_until(lambda: len(self.reports) >= 300, 30, "300 acknowledgements")

    def _produce(self) -> None:
        while not self.stop.is_set():
            n = self.sent
            if n >= self.limit:
                self.producer.poll(0.1)
                continue
            try:
                self.producer.produce(self.TOPIC, value=b"%08d" % n, partition=n % 2,
                                      on_delivery=self.reports)
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.sent = n + 1
            self.producer.poll(0)
            if self.sent % 10 == 0:
                time.sleep(0.01)  # ~1000 messages a second: a steady stream

    def before_disruption(self, site: Site) -> None:
        self.acked_before = len(self.reports)
        self.limit = self.sent + 40 * 1000

    def check(self, site: Site) -> None:
        wait_until(lambda: len(self.reports) >= self.acked_before + 500, 60,
                   "500 more acknowledgements after the restart")
        self.stop.set()
        self.thread.join(10)
        assert self.producer.flush(60) == 0
        assert not self.reports.errors, self.reports.errors[:5]
        assert len(self.reports) == self.sent
        got = read_all(site, self.TOPIC, 2)
        for p in (0, 1):
            values = [v for _, _, v in got[p]]
            expected = [b"%08d" % n for n in range(p, self.sent, 2)]
            duplicates = len(values) - len(set(values))
            assert duplicates == 0, f"partition {p}: {duplicates} duplicates"
            assert values == expected, f"partition {p}: not every message once, in order"
        where = {(p, off): v for p, off, _, v in self.reports.acked}
        stored = {(p, off): v for p in got for off, _, v in got[p]}
        assert where == stored

    def close(self) -> None:
        if hasattr(self, "thread"):
            self.stop.set()
            self.thread.join(10)


class Transactions(Scenario):
    """Transactions over two partitions, each sending offsets for a group of its own. On
    one topic, one committed and one aborted before the disruption, and nothing written
    after it (nothing moves the high watermark there: the replayed log alone must tell the
    last stable offset). On another, two open at the disruption: one whose producer is
    gone (aborted after its 3 s timeout), one whose producer commits it after the restart.
    read_committed sees exactly the committed records, at once on the first topic and on
    the second once the last stable offset has reached the high watermark;
    read_uncommitted sees every record; only the committed transactions' offsets are the
    groups'."""

    name = "transactions"
    feature = ("transactions: committed, aborted, open (abandoned, and committed after the "
               "restart); the last stable offset, aborted records filtered (.txnindex), "
               "pending transactional offsets")
    ENDED = "crash-txn-ended"
    OPEN = "crash-txn-open"

    def build(self, site: Site) -> None:
        site.create_topic(self.ENDED, partitions=2)
        site.create_topic(self.OPEN, partitions=2)
        self.groups = {kind: site.coordinated_id("group", f"crash-txn-{kind}")
                       for kind in ("committed", "aborted", "abandoned", "later")}
        ids = {kind: site.coordinated_id("txn", f"crash-txn-{kind}")
               for kind in ("ended", "abandoned", "later")}
        ended = self._producer(site, ids["ended"], 60000)
        self._transaction(site, ended, self.ENDED, "committed")
        ended.commit_transaction(30)
        self._transaction(site, ended, self.ENDED, "aborted")
        ended.abort_transaction(30)
        del ended
        # Open at the disruption; its producer never comes back (kept, not destroyed:
        # librdkafka's destroy could end the transaction itself).
        self.abandoned = self._producer(site, ids["abandoned"], 3000)
        self._transaction(site, self.abandoned, self.OPEN, "abandoned")
        # Open at the disruption; its producer commits after (its timeout outlasts every
        # world's build and disruption).
        self.later = self._producer(site, ids["later"], 900000)
        self._transaction(site, self.later, self.OPEN, "later")
        self._check_ended(site)

    @staticmethod
    def _producer(site: Site, txn_id: str, timeout_ms: int) -> Any:
        producer = site.producer(**{"transactional.id": txn_id, "linger.ms": 5,
                                    "transaction.timeout.ms": timeout_ms})
        producer.init_transactions(30)
        return producer

    def _transaction(self, site: Site, producer: Any, topic: str, kind: str) -> None:
        producer.begin_transaction()
        for n, value in enumerate(self.values(kind)):
            producer.produce(topic, value=value, partition=n % 2)
        assert producer.flush(30) == 0
        metadata = site.consumer(**{"group.id": self.groups[kind]})
        try:
            producer.send_offsets_to_transaction(
                [TopicPartition(self.ENDED, 0, 3), TopicPartition(self.ENDED, 1, 4)],
                metadata.consumer_group_metadata(), 30)
        finally:
            metadata.close()

    @staticmethod
    def values(kind: str) -> list[bytes]:
        return sorted(b"%s-%d" % (kind.encode(), i) for i in range(10))

    @staticmethod
    def _values(records: dict[int, list[Record]]) -> list[bytes | None]:
        return sorted((v for p in records.values() for _, _, v in p), key=lambda v: v or b"")

    def _check_ended(self, site: Site) -> None:
        assert end_offsets(site, self.ENDED, 2, committed=True) == end_offsets(
            site, self.ENDED, 2), "the last stable offset of the ended transactions"
        committed = read_all(site, self.ENDED, 2, "read_committed")
        assert self._values(committed) == self.values("committed")
        everything = read_all(site, self.ENDED, 2)
        assert self._values(everything) == sorted(self.values("committed")
                                                  + self.values("aborted"))

    def check(self, site: Site) -> None:
        # First, before anything is written to it again.
        self._check_ended(site)
        self.later.commit_transaction(60)
        # The abandoned transaction is aborted after its timeout; until then the last
        # stable offset stays at its first record.
        wait_until(lambda: end_offsets(site, self.OPEN, 2, committed=True)
                   == end_offsets(site, self.OPEN, 2), 30,
                   "the last stable offset to reach the high watermark")
        committed = read_all(site, self.OPEN, 2, "read_committed")
        assert self._values(committed) == self.values("later")
        everything = read_all(site, self.OPEN, 2)
        assert self._values(everything) == sorted(self.values("abandoned")
                                                  + self.values("later"))
        offsets = {kind: group_offsets(site, group, self.ENDED, 2)
                   for kind, group in self.groups.items()}
        assert offsets == {"committed": {0: 3, 1: 4}, "aborted": {}, "abandoned": {},
                           "later": {0: 3, 1: 4}}

    def close(self) -> None:
        for name in ("abandoned", "later"):
            if hasattr(self, name):
                delattr(self, name)


class Compaction(Scenario):
    """A compacted topic the broker's cleaner works on (small segments, any dirt is worth
    cleaning): afterwards every key reads as its latest acknowledged value (tombstones
    included), every record read is the one acknowledged at its offset, offsets ascend."""

    name = "compaction"
    feature = "log compaction: latest value per key, tombstones, the cleaner's checkpoint"
    TOPIC = "crash-compacted"

    def build(self, site: Site) -> None:
        site.create_topic(self.TOPIC, configs={
            "cleanup.policy": "compact", "segment.bytes": "2048",
            "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"})
        items: list[tuple[int, bytes | None, bytes | None]] = []
        for n in range(600):
            key = b"k%02d" % (n % 20)
            tombstone = (n % 20 in (3, 7) and n >= 560) or (n % 20 == 5 and 300 <= n < 320)
            items.append((0, key, None if tombstone else b"v%04d" % n))
        reports = produce_all(site, self.TOPIC, items, **{"linger.ms": 2, "batch.num.messages": 10})
        self.acked = {off: (key, value) for _, off, key, value in reports.acked}
        self.latest: dict[bytes | None, tuple[int, bytes | None]] = {}
        for off in sorted(self.acked):
            key, value = self.acked[off]
            self.latest[key] = (off, value)
        # The cleaner has been at it (fewer records than produced) before the disruption.
        wait_until(lambda: len(read_all(site, self.TOPIC, 1)[0]) < len(items), 30,
                   "the cleaner to clean the topic once")
        self._verify(site)

    def _verify(self, site: Site) -> None:
        records = read_all(site, self.TOPIC, 1)[0]
        offsets = [off for off, _, _ in records]
        assert offsets == sorted(set(offsets)), "offsets ascend, each once"
        changed = [off for off, key, value in records if self.acked.get(off) != (key, value)]
        assert not changed, f"records not as acknowledged at offsets {changed[:5]}"
        last: dict[bytes | None, tuple[int, bytes | None]] = {}
        for off, key, value in records:
            last[key] = (off, value)
        assert last == self.latest

    def check(self, site: Site) -> None:
        self._verify(site)


class Groups(Scenario):
    """Two members of a group consume and commit every message synchronously, through the
    disruption; a second group has committed offsets and no members. Afterwards the
    members (recovering by themselves: for SIGSTOP the broker has expired them) consume
    everything produced after the restart, nothing committed before is delivered again,
    the group is Stable with both, and the idle group's offsets are as committed."""

    name = "groups"
    feature = "group offsets (committed, with and without members) and group membership"
    TOPIC = "crash-group"

    def build(self, site: Site) -> None:
        site.create_topic(self.TOPIC, partitions=2)
        self.group = site.coordinated_id("group", "crash-members")
        self.idle = site.coordinated_id("group", "crash-idle")
        produce_all(site, self.TOPIC, [(n % 2, None, b"before-%04d" % n) for n in range(200)])
        idle = site.consumer(**{"group.id": self.idle})
        try:
            idle.commit(offsets=[TopicPartition(self.TOPIC, 0, 17),
                                 TopicPartition(self.TOPIC, 1, 42)], asynchronous=False)
        finally:
            idle.close()
        self.seen: list[tuple[int, int, bytes, bool]] = []  # partition, offset, value, after
        self.after = False
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.members = [threading.Thread(target=self._member, args=(site,), daemon=True)
                        for _ in range(2)]
        for member in self.members:
            member.start()
        wait_until(lambda: group_offsets(site, self.group, self.TOPIC, 2) == {0: 100, 1: 100},
                   60, "the members to consume and commit the first 200 messages")
        self.committed_before = {0: 100, 1: 100}

    def _member(self, site: Site) -> None:
        consumer = site.consumer(**{
            "group.id": self.group, "auto.offset.reset": "earliest",
            "session.timeout.ms": CLIENT_SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 1000,
            "socket.timeout.ms": CLIENT_REQUEST_TIMEOUT_MS})
        consumer.subscribe([self.TOPIC])
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                if msg is None or msg.error() is not None:
                    continue
                with self.lock:
                    self.seen.append((msg.partition(), msg.offset(), msg.value(), self.after))
                # Fails during the disruption: the message may then come again (but no
                # message before it).
                with contextlib.suppress(KafkaException):
                    consumer.commit(message=msg, asynchronous=False)
        finally:
            consumer.close()

    def before_disruption(self, site: Site) -> None:
        with self.lock:
            self.after = True

    def check(self, site: Site) -> None:
        produce_all(site, self.TOPIC, [(n % 2, None, b"after-%04d" % n) for n in range(200)])
        wanted = {b"before-%04d" % n for n in range(200)} | {b"after-%04d" % n
                                                             for n in range(200)}

        def consumed_all() -> bool:
            with self.lock:
                return {v for _, _, v, _ in self.seen} >= wanted

        wait_until(consumed_all, 60, "the members to consume the messages produced after")
        with self.lock:
            again = [(p, off) for p, off, _, after in self.seen
                     if after and off < self.committed_before[p]]
        assert not again, f"committed messages delivered again: {again[:5]}"
        wait_until(lambda: group_offsets(site, self.group, self.TOPIC, 2) == {0: 200, 1: 200},
                   30, "the members' commits after the restart")

        def stable_with_both() -> bool:
            described = site.admin().describe_consumer_groups([self.group])[self.group]
            group = described.result(10)
            return str(group.state).endswith("STABLE") and len(group.members) == 2

        wait_until(stable_with_both, 30, f"group {self.group} Stable with two members")
        assert group_offsets(site, self.idle, self.TOPIC, 2) == {0: 17, 1: 42}

    def close(self) -> None:
        if hasattr(self, "stop"):
            self.stop.set()
            for member in self.members:
                member.join(15)


class ScramUsers(Scenario):
    """SCRAM users created (two mechanisms, two iteration counts) and one deleted: after,
    the same credentials are described, the users authenticate on every broker (the hit
    one included) with their passwords and not with a wrong one, the deleted user not."""

    name = "scram-users"
    feature = "SCRAM users: credentials kept, deletions kept, authentication on every broker"
    USERS = (("crash-alice", ScramMechanism.SCRAM_SHA_256, 4096, b"alice-secret"),
             ("crash-alice", ScramMechanism.SCRAM_SHA_512, 8192, b"alice-secret"),
             ("crash-bob", ScramMechanism.SCRAM_SHA_512, 4096, b"bob-secret"),
             ("crash-carol", ScramMechanism.SCRAM_SHA_256, 4096, b"carol-secret"))

    def build(self, site: Site) -> None:
        scram_upsert(site, self.USERS)
        deletion = UserScramCredentialDeletion("crash-carol", ScramMechanism.SCRAM_SHA_256)
        for future in site.admin().alter_user_scram_credentials([deletion]).values():
            future.result(30)
        self.before = self.observe(site)
        assert self.before == {
            "crash-alice": [("SCRAM_SHA_256", 4096), ("SCRAM_SHA_512", 8192)],
            "crash-bob": [("SCRAM_SHA_512", 4096)]}
        assert authenticates(site, site.target, "crash-alice", "alice-secret")

    @staticmethod
    def observe(site: Site) -> dict[str, list[tuple[str, int]]]:
        described = site.admin().describe_user_scram_credentials().result(15)
        return {user: sorted((str(info.mechanism).rsplit(".", 1)[-1], info.iterations)
                             for info in d.scram_credential_infos)
                for user, d in described.items() if user.startswith("crash-")
                and user != "crash-reader"}

    def check(self, site: Site) -> None:
        assert self.observe(site) == self.before
        # Every case on the broker that was hit (its credential cache is new), one on each
        # of the others.
        hit = site.target
        assert authenticates(site, hit, "crash-alice", "alice-secret")
        assert authenticates(site, hit, "crash-alice", "alice-secret", "SCRAM-SHA-512")
        assert authenticates(site, hit, "crash-bob", "bob-secret", "SCRAM-SHA-512")
        assert not authenticates(site, hit, "crash-alice", "wrong")
        assert not authenticates(site, hit, "crash-carol", "carol-secret")
        for broker_id in site.broker_ids():
            if broker_id != hit:
                assert authenticates(site, broker_id, "crash-bob", "bob-secret",
                                     "SCRAM-SHA-512")


class Acls(Scenario):
    """ACLs added with ``klog acls add`` (literal and prefixed, allow and deny, topic and
    group): afterwards DescribeAcls lists the same bindings and the broker enforces them
    (User:ANONYMOUS may neither write nor read the guarded topic; the SCRAM user allowed
    to read it does)."""

    name = "acls"
    feature = "ACLs: bindings kept and enforced"
    TOPIC = "crash-acl"

    def build(self, site: Site) -> None:
        site.create_topic(self.TOPIC)
        produce_all(site, self.TOPIC, [(0, None, b"guarded-%d" % n) for n in range(10)])
        scram_upsert(site, [("crash-reader", ScramMechanism.SCRAM_SHA_256, 4096,
                             b"reader-secret")])
        self.group = site.coordinated_id("group", "crash-acl-group")
        site.klog("acls", "add", "--allow-principal", "User:crash-reader",
                  "--operation", "Read", "--operation", "Describe",
                  "--topic", self.TOPIC, "--group", self.group)
        # The others through confluent-kafka's admin client.
        deny = AclBinding(ResourceType.TOPIC, self.TOPIC, ResourcePatternType.LITERAL,
                          "User:ANONYMOUS", "*", AclOperation.WRITE, AclPermissionType.DENY)
        prefixed = AclBinding(ResourceType.TOPIC, "crash-acl-", ResourcePatternType.PREFIXED,
                              "User:crash-reader", "*", AclOperation.READ,
                              AclPermissionType.ALLOW)
        for future in site.admin().create_acls([deny, prefixed]).values():
            future.result(30)
        self.before = self.observe(site)
        assert len(self.before) == 6, self.before
        wait_until(lambda: self._anonymous_write_error(site) is not None, 20,
                   "the deny ACL enforced")

    @staticmethod
    def observe(site: Site) -> set[tuple[str, ...]]:
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None,
                                      None, AclOperation.ANY, AclPermissionType.ANY)
        bindings = site.admin().describe_acls(everything).result(15)
        return {(str(b.restype), b.name, str(b.resource_pattern_type), b.principal, b.host,
                 str(b.operation), str(b.permission_type)) for b in bindings}

    def _anonymous_write_error(self, site: Site) -> KafkaError | None:
        reports = Deliveries()
        producer = site.producer(**{"message.timeout.ms": 10000})
        producer.produce(self.TOPIC, value=b"intruder", partition=0, on_delivery=reports)
        producer.flush(15)
        assert len(reports) + len(reports.errors) == 1
        return reports.errors[0] if reports.errors else None

    def check(self, site: Site) -> None:
        assert self.observe(site) == self.before
        error = self._anonymous_write_error(site)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
            error
        with_reader = sasl_config(site, "crash-reader", "reader-secret")
        records = read_all(site, self.TOPIC, 1, **{**with_reader, "group.id": self.group})
        assert [v for _, _, v in records[0]] == [b"guarded-%d" % n for n in range(10)]
        described = site.admin().describe_topics(TopicCollection([self.TOPIC]))[self.TOPIC]
        try:
            described.result(15)
        except KafkaException as exc:
            assert exc.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, exc
        else:
            raise AssertionError("User:ANONYMOUS may describe the guarded topic")


class ClientQuotas(Scenario):
    """Client quotas set with ``klog configs alter`` (a client id, a user, a user's client
    id; one set and removed): afterwards DescribeClientQuotas gives the same entities and
    values, and a producer with the limited client id is throttled."""

    name = "client-quotas"
    feature = "client quotas: entities and values kept, throttling enforced"
    TOPIC = "crash-quota"

    def build(self, site: Site) -> None:
        site.create_topic(self.TOPIC)
        site.klog("configs", "alter", "client", "crash-slow", "--set", "producer_byte_rate=1024")
        # The others through klog's admin client (the CLI's, without a process each): a
        # user, a user's client id, and one set and removed again.
        user = {"user": "crash-quota-user"}
        for entries in (
                [(user, {"consumer_byte_rate": 4096.0, "request_percentage": 200.0}),
                 ({**user, "client-id": "crash-c"}, {"producer_byte_rate": 3000.0}),
                 ({"client-id": "crash-gone"}, {"producer_byte_rate": 10.0})],
                [({"client-id": "crash-gone"}, {"producer_byte_rate": None})]):
            errors = _run(lambda admin, e=entries: admin.alter_client_quotas(e), site)
            assert errors == [None] * len(entries), errors
        self.before = self.observe(site)
        assert len(self.before) == 3, self.before

    @staticmethod
    def observe(site: Site) -> list[tuple[tuple[tuple[str, str | None], ...],
                                          tuple[tuple[str, float], ...]]]:
        found = _run(lambda admin: admin.describe_client_quotas(), site)
        return sorted((tuple(sorted(entity.items())), tuple(sorted(values.items())))
                      for entity, values in found)

    def check(self, site: Site) -> None:
        assert self.observe(site) == self.before
        throttles: list[Any] = []
        producer = site.producer(**{"client.id": "crash-slow", "linger.ms": 0,
                                    "throttle_cb": throttles.append})
        for _ in range(8):
            producer.produce(self.TOPIC, value=b"x" * 4000, partition=0)
            producer.poll(0)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 10
        while not throttles and time.monotonic() < deadline:
            producer.poll(0.1)
        assert throttles and all(t.throttle_time > 0 for t in throttles), throttles


class DynamicConfigs(Scenario):
    """Dynamic configs: a topic's overrides (set, changed, one removed), a broker's own
    (on the hit broker) and the cluster-wide default: afterwards DescribeConfigs gives the
    same values and sources, and the topic's max.message.bytes still refuses a larger
    message."""

    name = "dynamic-configs"
    feature = "dynamic configs: topic overrides, per-broker and cluster-default broker configs"
    TOPIC = "crash-configs"
    # (Other scenarios set broker configs of their own: the reassignment's throttles.)
    BROKER_CONFIGS = ("log.cleaner.io.buffer.load.factor", "max.connections.per.ip.overrides")

    def build(self, site: Site) -> None:
        site.create_topic(self.TOPIC, configs={"retention.ms": "86400000"})
        topic = (ResourceType.TOPIC, self.TOPIC)
        self._alter(site, topic, [("max.message.bytes", "4096"), ("retention.ms", "7200000"),
                                  ("segment.ms", "3600000")])
        self._alter(site, topic, [("segment.ms", None)])
        broker = (ResourceType.BROKER, str(site.target))
        self._alter(site, broker, [("log.cleaner.io.buffer.load.factor", "0.8")])
        site.klog("configs", "alter", "broker", "--entity-default",
                  "--set", "max.connections.per.ip.overrides=127.0.0.2:7")
        self.before = self.observe(site)
        assert self.before[f"topic {self.TOPIC}"] == {
            "max.message.bytes": ("4096", "DYNAMIC_TOPIC_CONFIG"),
            "retention.ms": ("7200000", "DYNAMIC_TOPIC_CONFIG")}, self.before
        assert self.before[f"broker {site.target}"] == {
            "log.cleaner.io.buffer.load.factor": ("0.8", "DYNAMIC_BROKER_CONFIG"),
            "max.connections.per.ip.overrides": ("127.0.0.2:7",
                                                 "DYNAMIC_DEFAULT_BROKER_CONFIG")}, self.before

    @staticmethod
    def _alter(site: Site, kind: tuple[ResourceType, str],
               changes: list[tuple[str, str | None]]) -> None:
        resource = ConfigResource(*kind)
        for name, value in changes:
            resource.add_incremental_config(ConfigEntry(
                name, value, incremental_operation=AlterConfigOpType.SET if value is not None
                else AlterConfigOpType.DELETE))
        for future in site.admin().incremental_alter_configs([resource]).values():
            future.result(30)

    def observe(self, site: Site) -> dict[str, dict[str, tuple[str, str]]]:
        resources = [ConfigResource(ResourceType.TOPIC, self.TOPIC)] + [
            ConfigResource(ResourceType.BROKER, str(b)) for b in site.broker_ids()]
        dynamic = {ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
                   ConfigSource.DYNAMIC_BROKER_CONFIG.value,
                   ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value}
        out: dict[str, dict[str, tuple[str, str]]] = {}
        for resource in resources:  # (librdkafka: one broker per request)
            (future,) = site.admin().describe_configs([resource]).values()
            kind = "topic" if resource.restype == ResourceType.TOPIC else "broker"
            out[f"{kind} {resource.name}"] = {
                name: (str(entry.value), ConfigSource(entry.source).name)
                for name, entry in future.result(15).items() if entry.source in dynamic
                and (kind == "topic" or name in self.BROKER_CONFIGS)}
        return out

    def check(self, site: Site) -> None:
        assert self.observe(site) == self.before
        reports = produce_all(site, self.TOPIC, [(0, None, b"y" * 1000)])
        assert len(reports) == 1
        big = Deliveries()
        producer = site.producer(**{"message.timeout.ms": 10000})
        producer.produce(self.TOPIC, value=b"z" * 6000, partition=0, on_delivery=big)
        producer.flush(15)
        assert [e.code() for e in big.errors] == [KafkaError.MSG_SIZE_TOO_LARGE], big.errors


class Topics(Scenario):
    """The controller's state: a topic grown from 1 to 3 partitions, one created and
    deleted just before the disruption: afterwards every broker's Metadata shows the
    same topics, partitions and replicas, every partition led, the deleted topic gone (and
    its logs), every record there; a topic created now is led and takes records."""

    name = "topics"
    feature = ("controller state: topics, added partitions, a deletion in progress, "
               "leaders and replicas")
    GROWN = "crash-grown"
    DOOMED = "crash-doomed"

    def build(self, site: Site) -> None:
        site.create_topic(self.GROWN)
        assignment = site.replicas(2)
        grow = (NewPartitions(self.GROWN, 3, assignment) if assignment is not None
                else NewPartitions(self.GROWN, 3))
        site.admin().create_partitions([grow])[self.GROWN].result(30)
        site.wait_for_leaders(self.GROWN, 3)
        produce_all(site, self.GROWN, [(p, None, b"grown-%d" % p) for p in range(3)])
        site.create_topic(self.DOOMED, partitions=2)
        produce_all(site, self.DOOMED, [(p, None, b"doomed") for p in range(2)])
        site.admin().delete_topics([self.DOOMED])[self.DOOMED].result(30)
        # DeleteTopics is answered once the answering broker no longer has the topic; the
        # others hear of it a moment later. Its logs are deleted after that, in the
        # background: still in progress at the disruption.
        self.before = {self.GROWN: {p: sorted(site.broker_ids()) for p in range(3)}}
        for broker_id in site.broker_ids():
            wait_until(lambda b=broker_id: self.observe(site, b) == self.before, 20,
                       f"broker {broker_id}'s metadata without the topic")

    @staticmethod
    def observe(site: Site, broker_id: int) -> dict[str, dict[int, list[int]]]:
        """The scenario's topics in broker ``broker_id``'s Metadata: partition ->
        replicas."""
        return {name: {p: replicas for p, (_, replicas) in partitions.items()}
                for name, partitions in site.metadata(broker_id).items()
                if name in (Topics.GROWN, Topics.DOOMED)}

    def check(self, site: Site) -> None:
        for broker_id in site.broker_ids():
            wait_until(lambda b=broker_id: self.observe(site, b) == self.before, 20,
                       f"broker {broker_id}'s metadata as before")
        site.wait_for_leaders(self.GROWN, 3)
        got = read_all(site, self.GROWN, 3)
        assert {p: [v for _, _, v in r] for p, r in got.items()} == {
            p: [b"grown-%d" % p] for p in range(3)}

        def logs_gone() -> bool:
            # (Renamed ``<partition>.<id>-delete`` first, removed after
            # log.segment.delete.delay.ms, as Kafka's.)
            return not [log_dir for log_dir in site.log_dirs() for p in range(2)
                        if (log_dir / f"{self.DOOMED}-{p}").exists()]

        wait_until(logs_gone, 30, f"{self.DOOMED}'s logs deleted")
        site.create_topic("crash-created-after", partitions=2)
        produce_all(site, "crash-created-after", [(p, None, b"new") for p in range(2)])
        if isinstance(site, ClusterSite):
            for p in range(3):
                site.cluster.wait_for_isr(self.GROWN, p, site.broker_ids(), timeout=30)


class Retention(Scenario):
    """A topic whose small segments roll and go by ``retention.bytes`` (the broker's
    retention pass runs every half second), and one partition's records deleted up to its
    last one by DeleteRecords: afterwards each partition starts and ends where it did
    (nothing deleted comes back, nothing kept is gone) and every record read is the one
    acknowledged at its offset."""

    name = "retention"
    feature = "log roll, retention by size and DeleteRecords: the log start offset kept"
    TOPIC = "crash-retention"

    def build(self, site: Site) -> None:
        site.create_topic(self.TOPIC, partitions=2, configs={
            "segment.bytes": "1024", "retention.bytes": "3072", "cleanup.policy": "delete"})
        reports = produce_all(site, self.TOPIC,
                              [(n % 2, None, b"%04d" % n + b"." * 96) for n in range(300)],
                              **{"linger.ms": 1, "batch.num.messages": 2})
        self.acked = {(p, off): v for p, off, _, v in reports.acked}
        # Retention has deleted the oldest segments of both partitions.
        wait_until(lambda: all(o > 0 for o in self._starts(site).values()), 30,
                   "retention to delete the oldest segments")
        # Then the records of partition 1 up to its last one, inside its active segment:
        # only the log start offset says they are gone.
        last = end_offsets(site, self.TOPIC, 2)[1] - 1
        (future,) = site.admin().delete_records([TopicPartition(self.TOPIC, 1, last)]).values()
        assert future.result(30).low_watermark == last
        # Retention is done once two of its passes leave the same log starts.
        previous: list[dict[int, int]] = [{}]

        def settled() -> bool:
            now = self._starts(site)
            same, previous[0] = now == previous[0], now
            return same

        wait_until(settled, 30, "retention to settle", interval=1.0)
        self.before = self.observe(site)
        assert self.before["starts"][1] == last, self.before

    def _starts(self, site: Site) -> dict[int, int]:
        futures = site.admin().list_offsets(
            {TopicPartition(self.TOPIC, p): OffsetSpec.earliest() for p in range(2)},
            request_timeout=10)
        return {tp.partition: f.result(15).offset for tp, f in futures.items()}

    def observe(self, site: Site) -> dict[str, Any]:
        starts = dict(wait_until(lambda: self._starts(site), 20,
                                 f"ListOffsets earliest of {self.TOPIC}"))
        records = read_all(site, self.TOPIC, 2)
        return {"starts": starts, "ends": end_offsets(site, self.TOPIC, 2),
                "records": {p: [(off, v) for off, _, v in r] for p, r in records.items()}}

    def check(self, site: Site) -> None:
        after = self.observe(site)
        assert after["starts"] == self.before["starts"], (
            f"log start offsets moved: {self.before['starts']} before, {after['starts']} after")
        assert after["ends"] == self.before["ends"], "high watermarks moved"
        for p in (0, 1):
            read = after["records"][p]
            assert [off for off, _ in read] == list(range(after["starts"][p],
                                                          after["ends"][p])), p
            assert all(self.acked[(p, off)] == v for off, v in read), p
        assert after == self.before


class LogDirMove(Scenario):
    """A replica moving to the hit broker's other log dir (AlterReplicaLogDirs, as
    ``kafka-reassign-partitions`` with ``log_dirs`` asks) at 1 KB/s
    (replica.alter.log.dirs.io.max.bytes.per.second): at the disruption its future log is
    part-copied. Afterwards, with the throttle removed, the move completes -- the replica in
    the new dir, no future replica left -- and every acknowledged record reads back, and
    takes the next."""

    name = "log-dir-move"
    feature = "a replica moving between log dirs (AlterReplicaLogDirs) in progress"
    TOPIC = "crash-log-dir"
    THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"

    def build(self, site: Site) -> None:
        site.create_topic(self.TOPIC)
        # Small batches: a copy step takes whole batches.
        self.values = [b"%04d" % n + b"." * 1000 for n in range(200)]
        produce_all(site, self.TOPIC, [(0, None, v) for v in self.values],
                    **{"batch.num.messages": 2, "linger.ms": 1})
        self._throttle(site, "1024")
        (current, _), = self._where(site)
        self.dest = next(str(d) for d in site.log_dirs(site.target) if str(d) != current)
        replica = (self.TOPIC, 0, site.target)
        errors = _run(lambda admin: admin.alter_replica_log_dirs({replica: self.dest}), site)
        assert errors == {replica: None}, errors
        wait_until(lambda: len(self._where(site)) == 2, 20, "the future replica made")
        (_, future), = [w for w in self._where(site) if w[0] == self.dest]
        assert future, self._where(site)

    def _throttle(self, site: Site, value: str | None) -> None:
        resource = ConfigResource(ResourceType.BROKER, str(site.target))
        resource.add_incremental_config(ConfigEntry(
            self.THROTTLE, value, incremental_operation=AlterConfigOpType.SET
            if value is not None else AlterConfigOpType.DELETE))
        for future in site.admin().incremental_alter_configs([resource]).values():
            future.result(30)

    def _where(self, site: Site) -> list[tuple[str, bool]]:
        """(log dir, is future) of each replica of the partition on the hit broker."""
        described = _run(lambda admin: admin.describe_log_dirs(
            [site.target], {self.TOPIC: [0]}), site)
        return sorted((d.log_dir, info.is_future) for d in described[site.target]
                      for tp, info in d.replicas.items() if tp == (self.TOPIC, 0))

    def check(self, site: Site) -> None:
        self._throttle(site, None)
        wait_until(lambda: self._where(site) == [(self.dest, False)], 60,
                   f"the replica moved to {self.dest}")
        got = read_all(site, self.TOPIC, 1)
        assert [v for _, _, v in got[0]] == self.values
        reports = produce_all(site, self.TOPIC, [(0, None, b"after")])
        assert [off for _, off, _, _ in reports.acked] == [len(self.values)]


class Reassignment(Scenario):
    """A reassignment in progress at the disruption: ``klog reassign execute`` adds a
    replica that catches up under 1 KB/s replication throttles (set on every broker and
    the topic before the move starts, so that it cannot finish first). Afterwards it is
    still listed, or done; with the throttles removed it completes (``klog reassign verify
    --wait``: completed, throttles cleared), its three replicas are in sync and every
    acknowledged record reads back."""

    name = "reassignment"
    feature = "a reassignment in progress (cluster only)"
    modes = ("cluster",)
    TOPIC = "crash-moving"
    RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")

    def build(self, site: Site) -> None:
        assert isinstance(site, ClusterSite)
        other, adding = (b for b in site.broker_ids() if b != site.target)
        self.target_replicas = [site.target, other, adding]
        site.admin().create_topics([NewTopic(
            self.TOPIC, 1, -1, replica_assignment=[[site.target, other]],
            config={"leader.replication.throttled.replicas": "*",
                    "follower.replication.throttled.replicas": "*"})])[self.TOPIC].result(30)
        site.wait_for_leaders(self.TOPIC, 1)
        # Small batches: a fetch returns at least one whole batch whatever the throttle.
        self.values = [b"%04d" % n + b"." * 1000 for n in range(200)]
        produce_all(site, self.TOPIC, [(0, None, v) for v in self.values],
                    **{"batch.num.messages": 2, "linger.ms": 1})
        site.cluster.wait_for_isr(self.TOPIC, 0, [site.target, other])
        for broker_id in site.broker_ids():
            resource = ConfigResource(ResourceType.BROKER, str(broker_id))
            for rate in self.RATES:
                resource.add_incremental_config(ConfigEntry(
                    rate, "1024", incremental_operation=AlterConfigOpType.SET))
            for future in site.admin().incremental_alter_configs([resource]).values():
                future.result(30)

        def throttled(broker_id: int) -> bool:
            (future,) = site.admin().describe_configs(
                [ConfigResource(ResourceType.BROKER, str(broker_id))]).values()
            configs = future.result(10)
            return all(configs[rate].value == "1024" for rate in self.RATES)

        for broker_id in site.broker_ids():
            wait_until(lambda b=broker_id: throttled(b), 20, f"broker {broker_id} throttled")
        self.plan = site.cluster.brokers[site.target].data_dir.parent / "crash-move.json"
        self.plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": self.TOPIC, "partition": 0, "replicas": self.target_replicas}]}))
        site.klog("reassign", "execute", "--reassignment-json-file", str(self.plan))
        ongoing = _run(lambda admin: admin.list_partition_reassignments(), site)
        assert (self.TOPIC, 0) in ongoing, ongoing

    def check(self, site: Site) -> None:
        assert isinstance(site, ClusterSite)
        for broker_id in site.broker_ids():
            resource = ConfigResource(ResourceType.BROKER, str(broker_id))
            for rate in self.RATES:
                resource.add_incremental_config(ConfigEntry(
                    rate, None, incremental_operation=AlterConfigOpType.DELETE))
            for future in site.admin().incremental_alter_configs([resource]).values():
                future.result(30)
        verified = site.klog("reassign", "verify", "--reassignment-json-file", str(self.plan),
                             "--wait", "--timeout", "60000", json_out=True)
        assert verified["done"], verified
        assert [p["status"] for p in verified["partitions"]] == ["completed"], verified
        assert verified["throttles_cleared"] is not None, verified
        site.cluster.wait_for_isr(self.TOPIC, 0, self.target_replicas, timeout=30)
        got = read_all(site, self.TOPIC, 1)
        assert [v for _, _, v in got[0]] == self.values


SCENARIOS: tuple[type[Scenario], ...] = (
    IdempotentProducer, Transactions, Compaction, Groups, ScramUsers, Acls, ClientQuotas,
    DynamicConfigs, Topics, Retention, LogDirMove, Reassignment,
)


def scenarios_for(mode: str) -> list[type[Scenario]]:
    return [s for s in SCENARIOS if mode in s.modes]
