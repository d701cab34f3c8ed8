"""The chaos harness's workloads: real clients writing and reading while the nemesis acts.

Each workload runs in threads of the harness process (the root namespace, the clients'
host) and records a history for the checker, times in seconds since the run's start:

- ``ProducerWorkload`` (confluent-kafka): producers with acks=all and idempotence (or
  acks=1 in a run that asks for it), each numbering its records ``<workload>-<producer>-
  <seq>`` and sending record ``seq`` to partition ``seq % partitions``; every send is an
  ``Op`` that ends "ok" (with the offset acknowledged), "fail" (the client gave up), or
  "unknown" (no answer by the end: it may or may not be written).
- ``KlogProducerWorkload``: the same with klog's own asyncio producer (klog/client).
- ``TransactionWorkload`` (confluent-kafka): transactional producers writing 2-4 records
  per transaction to random partitions, committing or (one in four) aborting; each
  transaction's outcome is "committed", "aborted" (abort_transaction returned), or
  "unknown" (a commit that may have happened, e.g. the producer was fenced mid-commit).
- ``LiveReader``: a consumer reading every partition from the start, all the run long
  (read_uncommitted, or read_committed for the transactions' topic); what it saw must
  later be in the log at the same offsets.
- ``GroupWorkload``: consumers of one group on a topic fed by a ``ProducerWorkload``,
  committing offsets synchronously as they go while members leave and new ones join; a
  monitor reads the group's committed offsets every second.

Workloads never raise out of their threads: an error is recorded and the loop goes on,
as an application would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from klog.client.producer import Producer as KlogProducer


class Clock:
    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 4)


@dataclass
class Op:
    """One record sent."""
    producer: int
    seq: int
    partition: int
    value: str
    sent: float
    status: str = "pending"  # ok | fail | unknown
    offset: int = -1
    acked: float | None = None
    error: str = ""


@dataclass
class Txn:
    producer: int
    txn: int
    decision: str  # commit | abort
    records: list[tuple[int, str]] = field(default_factory=list)  # (partition, value)
    started: float = 0.0
    ended: float | None = None
    outcome: str = "pending"  # committed | aborted | unknown
    error: str = ""


def _common(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": 10000,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 1000,
        "topic.metadata.refresh.interval.ms": 5000,
        # librdkafka's log lines go to the run's clients.log (runner.py), not the terminal.
        "logger": logging.getLogger("rdkafka"),
    }


class Workload:
    name = "workload"

    def __init__(self) -> None:
        self.running = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: dict[str, int] = {}

    def _error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True,
                             name=f"{self.name}-{len(self.threads)}")
        self.threads.append(t)
        t.start()

    def start(self) -> None:
        self.running.set()

    def stop(self, timeout: float = 60.0) -> None:
        self.running.clear()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))

    def acked_times(self) -> list[float]:
        return []


class ProducerWorkload(Workload):
    """acks=all idempotent producers (confluent-kafka); see the module docstring."""

    def __init__(self, name: str, clock: Clock, bootstrap: str, topic: str, partitions: int,
                 producers: int = 2, rate: float = 40.0, acks: str = "all") -> None:
        super().__init__()
        self.name = name
        self.clock = clock
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.producers = producers
        self.rate = rate
        self.acks = acks
        self.ops: list[Op] = []
        self._lock = threading.Lock()

    def config(self) -> dict[str, Any]:
        idempotent = self.acks == "all"
        return {**_common(self.bootstrap), "acks": self.acks,
                "enable.idempotence": idempotent, "message.timeout.ms": 60000,
                "linger.ms": 5, "retry.backoff.ms": 100,
                "max.in.flight.requests.per.connection": 5}

    def start(self) -> None:
        super().start()
        for i in range(self.producers):
            self._spawn(self._run, i)

    def _run(self, index: int) -> None:
        producer = confluent_kafka.Producer(self.config())
        seq = 0
        interval = 1.0 / self.rate
        next_send = time.monotonic()
        try:
            while self.running.is_set():
                op = Op(index, seq, seq % self.partitions, f"{self.name}-{index}-{seq}",
                        self.clock.now())
                try:
                    producer.produce(self.topic, op.value.encode(), partition=op.partition,
                                     on_delivery=self._delivered(op))
                except BufferError:
                    self._error("local queue full")
                    producer.poll(0.1)
                    continue
                except KafkaException as e:
                    self._error(str(e.args[0].name()))
                    producer.poll(0.1)
                    continue
                with self._lock:
                    self.ops.append(op)
                seq += 1
                next_send += interval
                producer.poll(max(0.0, next_send - time.monotonic()))
        finally:
            remaining = producer.flush(60)
            if remaining:
                self._error(f"{remaining} records unanswered at the end")
            for op in self.ops:
                if op.producer == index and op.status == "pending":
                    op.status = "unknown"

    def _delivered(self, op: Op) -> Any:
        def callback(err: KafkaError | None, msg: Any) -> None:
            op.acked = self.clock.now()
            if err is None:
                offset = msg.offset()  # None when the broker's answer carried none
                op.status, op.offset = "ok", -1 if offset is None else offset
            else:
                op.status, op.error = "fail", err.name()
                self._error(err.name())
        return callback

    def acked_times(self) -> list[float]:
        return sorted(op.acked for op in self.ops if op.status == "ok" and op.acked)


class KlogProducerWorkload(ProducerWorkload):
    """The same as ``ProducerWorkload`` with klog's own asyncio producer."""

    def start(self) -> None:
        Workload.start(self)
        for i in range(self.producers):
            self._spawn(lambda i=i: asyncio.run(self._arun(i)))

    async def _arun(self, index: int) -> None:
        producer = KlogProducer(self.bootstrap, acks=-1 if self.acks == "all" else 1,
                                client_id=f"{self.name}-{index}", linger_ms=5,
                                request_timeout_ms=10000, delivery_timeout_ms=60000,
                                max_block_ms=10000, metadata_max_age_ms=5000)
        while self.running.is_set():
            try:
                await producer.start()
                break
            except Exception as e:  # no broker reachable yet
                self._error(type(e).__name__)
                await asyncio.sleep(0.5)
        seq = 0
        interval = 1.0 / self.rate
        next_send = time.monotonic()
        try:
            while self.running.is_set():
                op = Op(index, seq, seq % self.partitions, f"{self.name}-{index}-{seq}",
                        self.clock.now())
                try:
                    await producer.send(self.topic, op.value.encode(), partition=op.partition,
                                        on_delivery=self._klog_delivered(op))
                except Exception as e:  # refused before it was queued: never sent
                    self._error(type(e).__name__)
                    await asyncio.sleep(0.1)
                    continue
                with self._lock:
                    self.ops.append(op)
                seq += 1
                next_send += interval
                await asyncio.sleep(max(0.0, next_send - time.monotonic()))
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.flush(), 60)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(producer.close(), 10)
            for op in self.ops:
                if op.producer == index and op.status == "pending":
                    op.status = "unknown"

    def _klog_delivered(self, op: Op) -> Any:
        def callback(metadata: Any, exc: BaseException | None) -> None:
            op.acked = self.clock.now()
            if exc is None and metadata is not None:
                op.status, op.offset = "ok", metadata.offset
            else:
                op.status, op.error = "fail", f"{type(exc).__name__}: {exc}"[:300]
                self._error(type(exc).__name__)
        return callback


class TransactionWorkload(Workload):
    """Transactional producers (confluent-kafka); see the module docstring."""

    name = "transactions"

    def __init__(self, clock: Clock, bootstrap: str, topic: str, partitions: int, seed: int,
                 producers: int = 2, rate: float = 5.0) -> None:
        super().__init__()
        self.clock = clock
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.producers = producers
        self.rate = rate
        self.seed = seed
        self.txns: list[Txn] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        super().start()
        for i in range(self.producers):
            self._spawn(self._run, i)

    def _new_producer(self, index: int) -> Any:
        while self.running.is_set():
            producer = confluent_kafka.Producer({
                **_common(self.bootstrap), "transactional.id": f"chaos-txn-{index}",
                "transaction.timeout.ms": 30000, "message.timeout.ms": 30000,
                "linger.ms": 5})
            try:
                producer.init_transactions(15)
                return producer
            except KafkaException as e:
                self._error(f"init_transactions: {e.args[0].name()}")
                time.sleep(0.5)
        return None

    def _run(self, index: int) -> None:
        rng = random.Random(self.seed * 1000 + index)
        producer = self._new_producer(index)
        n = 0
        while self.running.is_set() and producer is not None:
            txn = Txn(index, n, "abort" if rng.random() < 0.25 else "commit",
                      started=self.clock.now())
            n += 1
            with self._lock:
                self.txns.append(txn)
            ok = self._one(producer, txn, rng)
            txn.ended = self.clock.now()
            if not ok:  # the producer cannot go on: a new one fences the old
                with contextlib.suppress(Exception):
                    producer.flush(1)
                producer = self._new_producer(index)
            time.sleep(1.0 / self.rate)

    def _one(self, producer: Any, txn: Txn, rng: random.Random) -> bool:
        """One transaction; False when the producer must be replaced."""
        committing = False
        try:
            producer.begin_transaction()
            for i in range(rng.randint(2, 4)):
                partition = rng.randrange(self.partitions)
                value = f"txn-{txn.producer}-{txn.txn}-{i}"
                producer.produce(self.topic, value.encode(), partition=partition)
                txn.records.append((partition, value))
            if txn.decision == "abort":
                producer.abort_transaction(30)
                txn.outcome = "aborted"
                return True
            committing = True
            for _attempt in range(6):
                try:
                    producer.commit_transaction(10)
                    txn.outcome = "committed"
                    return True
                except KafkaException as e:
                    if not e.args[0].retriable():
                        raise
                    self._error(f"commit: {e.args[0].name()}")
            txn.outcome, txn.error = "unknown", "commit retries exhausted"
            return False
        except KafkaException as e:
            err = e.args[0]
            txn.error = err.name()
            self._error(f"{'commit' if committing else 'txn'}: {err.name()}")
            if err.txn_requires_abort():
                try:
                    producer.abort_transaction(30)
                    txn.outcome = "aborted"
                    return True
                except KafkaException as e2:
                    self._error(f"abort: {e2.args[0].name()}")
            txn.outcome = "unknown" if committing or txn.records else "aborted"
            return False


class LiveReader(Workload):
    """A consumer reading everything, all the run long; see the module docstring."""

    def __init__(self, name: str, clock: Clock, bootstrap: str, topic: str, partitions: int,
                 read_committed: bool = False) -> None:
        super().__init__()
        self.name = name
        self.clock = clock
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.read_committed = read_committed
        #: (partition, offset, value, time read)
        self.seen: list[tuple[int, int, str, float]] = []

    def start(self) -> None:
        super().start()
        self._spawn(self._run)

    def _run(self) -> None:
        consumer = confluent_kafka.Consumer({
            **_common(self.bootstrap), "group.id": f"chaos-reader-{self.name}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if self.read_committed else "read_uncommitted",
            "fetch.wait.max.ms": 200})
        consumer.assign([TopicPartition(self.topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(self.partitions)])
        try:
            while self.running.is_set():
                for msg in consumer.consume(500, 0.2):
                    if msg.error():
                        self._error(msg.error().name())
                        continue
                    self.seen.append((msg.partition(), msg.offset(),
                                      msg.value().decode(), self.clock.now()))
        finally:
            consumer.close()


@dataclass
class Commit:
    member: int
    partition: int
    offset: int
    time: float


class GroupWorkload(Workload):
    """A consumer group committing while members come and go; see the module docstring."""

    name = "group"

    def __init__(self, clock: Clock, bootstrap: str, topic: str, partitions: int, seed: int,
                 group: str = "chaos-group", members: int = 3) -> None:
        super().__init__()
        self.clock = clock
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.group = group
        self.members = members
        self.rng = random.Random(seed * 7 + 1)
        self.commits: list[Commit] = []
        #: (time, partition, committed offset) read by the monitor
        self.observed: list[tuple[float, int, int]] = []
        self.joins = 0
        self.leaves = 0
        self._member_flags: dict[int, threading.Event] = {}
        self._member_threads: dict[int, threading.Thread] = {}

    def start(self) -> None:
        super().start()
        for _ in range(self.members):
            self._join()
        self._spawn(self._churn)
        self._spawn(self._monitor)

    def _join(self) -> None:
        member = self.joins
        self.joins += 1
        flag = threading.Event()
        flag.set()
        self._member_flags[member] = flag
        t = threading.Thread(target=self._member, args=(member, flag), daemon=True,
                             name=f"group-member-{member}")
        self._member_threads[member] = t
        t.start()

    def _churn(self) -> None:
        while self.running.is_set():
            time.sleep(self.rng.uniform(4, 10))
            if not self.running.is_set():
                break
            member = self.rng.choice(sorted(self._member_flags))
            self._member_flags.pop(member).clear()
            self._member_threads.pop(member).join(30)
            self.leaves += 1
            self._join()

    def stop(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for flag in self._member_flags.values():
            flag.clear()
        super().stop(timeout)
        for t in list(self._member_threads.values()):
            t.join(max(0.1, deadline - time.monotonic()))

    def _member(self, member: int, flag: threading.Event) -> None:
        consumer = confluent_kafka.Consumer({
            **_common(self.bootstrap), "group.id": self.group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 60000,
            "client.id": f"member-{member}"})
        pending: dict[int, int] = {}

        def revoked(_consumer: Any, partitions: list[TopicPartition]) -> None:
            for tp in partitions:
                pending.pop(tp.partition, None)

        consumer.subscribe([self.topic], on_revoke=revoked, on_lost=revoked)
        last_commit = time.monotonic()
        try:
            while flag.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and not msg.error():
                    pending[msg.partition()] = msg.offset() + 1
                elif msg is not None:
                    self._error(msg.error().name())
                if pending and time.monotonic() - last_commit >= 0.5:
                    last_commit = time.monotonic()
                    owned = {tp.partition for tp in consumer.assignment()}
                    offsets = [TopicPartition(self.topic, p, o) for p, o in pending.items()
                               if p in owned]
                    pending.clear()
                    if offsets:
                        self._commit(consumer, member, offsets)
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    def _commit(self, consumer: Any, member: int, offsets: list[TopicPartition]) -> None:
        try:
            result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            self._error(f"commit: {e.args[0].name()}")
            return
        now = self.clock.now()
        for tp in result or []:
            if tp.error is None:
                self.commits.append(Commit(member, tp.partition, tp.offset, now))
            else:
                self._error(f"commit: {tp.error.name()}")

    def _monitor(self) -> None:
        watcher = confluent_kafka.Consumer({**_common(self.bootstrap), "group.id": self.group,
                                            "enable.auto.commit": False})
        try:
            while self.running.is_set():
                try:
                    got = watcher.committed([TopicPartition(self.topic, p)
                                             for p in range(self.partitions)], timeout=5)
                except KafkaException as e:
                    self._error(f"committed: {e.args[0].name()}")
                else:
                    now = self.clock.now()
                    for tp in got:
                        if tp.error is None and tp.offset >= 0:
                            self.observed.append((now, tp.partition, tp.offset))
                time.sleep(1.0)
        finally:
            watcher.close()

    def final_committed(self, timeout: float = 30.0) -> dict[int, int]:
        watcher = confluent_kafka.Consumer({**_common(self.bootstrap), "group.id": self.group,
                                            "enable.auto.commit": False})
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    got = watcher.committed([TopicPartition(self.topic, p)
                                             for p in range(self.partitions)], timeout=10)
                    return {tp.partition: tp.offset for tp in got}
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1)
        finally:
            watcher.close()


def ops_json(ops: list[Op]) -> list[dict[str, Any]]:
    return [asdict(op) for op in ops]
