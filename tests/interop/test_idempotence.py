"""Idempotent producers against a klog broker: InitProducerId, deduplication, sequence and
epoch checks, and producer state that survives a clean restart and a kill -9.

Real clients (librdkafka, kafka-python, aiokafka) with idempotence on must leave every
message in the log exactly once and in order. The precise broker behaviour is driven with
raw requests (``RawClient``): a fixed producer id, epoch and sequence, so a retried batch
can be sent again on purpose, before and after a restart, and what the broker stored is
read back from the segment files.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from klog.protocol import apis, framing
from klog.protocol.entities import build
from klog.protocol.errors import ErrorCode
from klog.protocol.records.batch import BatchHeader, iter_batch_headers
from klog.protocol.records.v2 import build_batch, iter_records
from klog.testing import KlogBroker
from tests.interop.conftest import stored_batches

pytestmark = pytest.mark.timeout(120)

PRODUCE, METADATA, API_VERSIONS, INIT_PRODUCER_ID = 0, 3, 18, 22
NONE = 0
OUT_OF_ORDER = int(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)  # 45
INVALID_EPOCH = int(ErrorCode.INVALID_PRODUCER_EPOCH)  # 47


# -- a raw client ------------------------------------------------------------------------------


class RawClient:
    """Requests built from plain values, sent over one blocking socket, answered in order."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        self.correlation_id += 1
        entity = build(apis.spec_for(api_key).request_entity(version), values)
        body = apis.encode_request(entity)
        self.sock.sendall(framing.encode_request(api_key, version, self.correlation_id,
                                                 "raw-idempotence", body))
        (size,) = struct.unpack(">i", self._read(4))
        frame = self._read(size)
        cid, offset = framing.parse_response_header(
            frame, apis.response_header_version(api_key, version))
        assert cid == self.correlation_id
        return apis.decode_response(api_key, version, memoryview(frame)[offset:])

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return bytes(buf)

    def init_producer_id(self, version: int = 4, transactional_id: str | None = None,
                         producer_id: int = -1, producer_epoch: int = -1) -> Any:
        return self.call(INIT_PRODUCER_ID, version, {
            "transactional_id": transactional_id, "transaction_timeout": 60000,
            "producer_id": producer_id, "producer_epoch": producer_epoch,
        })

    def ensure_topic(self, topic: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            response = self.call(METADATA, 12, {
                "topics": [{"name": topic, "topic_id": None}],
                "allow_auto_topic_creation": True,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            })
            t = response.topics[0]
            if t.error_code == NONE and t.partitions and t.partitions[0].leader_id >= 0:
                return
            time.sleep(0.02)
        raise TimeoutError(f"topic {topic} got no leader")

    def produce(self, topic: str, records: bytes, acks: int = -1, version: int = 9) -> Any:
        response = self.call(PRODUCE, version, {
            "transactional_id": None, "acks": acks, "timeout": 5000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": records}]}],
        })
        return response.responses[0].partition_responses[0]


def idempotent_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(now, None, v) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def stored_values(log_dir: Path, topic: str) -> list[bytes]:
    """The values of partition 0 as stored in its segment files, in offset order."""
    out: list[bytes] = []
    for segment in sorted((log_dir / f"{topic}-0").glob("*.log")):
        data = memoryview(segment.read_bytes())
        for header in iter_batch_headers(data):
            out.extend(bytes(r.value) for r in iter_records(data, header))
    return out


def epoch_ms(value: datetime.datetime | None) -> int:
    """kio's datetime for a timestamp field, as Kafka's epoch milliseconds (-1: none)."""
    if value is None:
        return -1
    return round(value.timestamp() * 1000)


def log_end_offset(log_dir: Path, topic: str) -> int:
    batches = stored_batches(log_dir, topic)
    return batches[-1].last_offset + 1 if batches else 0


@pytest.fixture
def restartable(klog_broker_factory: Callable[..., KlogBroker]) -> Callable[..., KlogBroker]:
    return klog_broker_factory


# -- InitProducerId ----------------------------------------------------------------------------


def test_init_producer_id_is_advertised_and_every_version_gives_a_new_id(
        bootstrap: str) -> None:
    with RawClient(bootstrap) as raw:
        versions = raw.call(API_VERSIONS, 3, {"client_software_name": "raw",
                                              "client_software_version": "1"})
        ranges = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert ranges[INIT_PRODUCER_ID] == (0, 5)
        ids = []
        for version in range(6):
            r = raw.init_producer_id(version)
            assert (r.error_code, r.producer_epoch) == (NONE, 0)
            ids.append(int(r.producer_id))
        assert ids == sorted(ids) and len(set(ids)) == 6 and ids[0] >= 0


def test_init_producer_id_with_an_id_and_epoch_starts_a_new_producer(bootstrap: str) -> None:
    # Kafka "blindly accepts" a non-transactional InitProducerId: the id and epoch sent
    # (a KIP-360 bump, as librdkafka sends) are not bumped; a fresh id with epoch 0 comes back.
    with RawClient(bootstrap) as raw:
        first = raw.init_producer_id(4)
        again = raw.init_producer_id(4, producer_id=first.producer_id, producer_epoch=0)
        assert again.error_code == NONE
        assert again.producer_id != first.producer_id and again.producer_epoch == 0
        stale = raw.init_producer_id(3, producer_id=first.producer_id, producer_epoch=7)
        assert stale.error_code == NONE and stale.producer_epoch == 0


def test_init_producer_id_errors(bootstrap: str) -> None:
    with RawClient(bootstrap) as raw:
        for pid, epoch in ((5, -1), (-1, 3)):
            r = raw.init_producer_id(4, producer_id=pid, producer_epoch=epoch)
            assert r.error_code == int(ErrorCode.INVALID_REQUEST)
            assert (r.producer_id, r.producer_epoch) == (-1, -1)
        r = raw.init_producer_id(4, transactional_id="")
        assert r.error_code == int(ErrorCode.INVALID_REQUEST)
        # A transactional id goes to the transaction coordinator: without a FindCoordinator
        # first, __transaction_state does not exist and nothing is coordinated here.
        for version in (0, 4):
            r = raw.init_producer_id(version, transactional_id="my-txn")
            assert r.error_code == int(ErrorCode.NOT_COORDINATOR)
            assert (r.producer_id, r.producer_epoch) == (-1, -1)
        # The connection is still good.
        assert raw.init_producer_id(4).error_code == NONE


# -- produce: duplicates, sequences, epochs ----------------------------------------------------


def test_duplicates_get_the_original_offsets_and_are_not_appended(
        bootstrap: str, broker: KlogBroker, topic: str) -> None:
    with RawClient(bootstrap) as raw:
        raw.ensure_topic(topic)
        pid = raw.init_producer_id().producer_id
        b0 = idempotent_batch(pid, 0, 0, [b"a", b"b", b"c"])
        b1 = idempotent_batch(pid, 0, 3, [b"d"])
        first = raw.produce(topic, b0)
        assert (first.error_code, first.base_offset) == (NONE, 0)
        again = raw.produce(topic, b0)
        # Kafka answers a duplicate with NONE and the original base offset (never
        # DUPLICATE_SEQUENCE_NUMBER for v2 batches).
        assert (again.error_code, again.base_offset) == (NONE, 0)
        assert raw.produce(topic, b1).base_offset == 3
        assert raw.produce(topic, b0).base_offset == 0  # still one of the last 5
        assert raw.produce(topic, b1).base_offset == 3
        assert raw.produce(topic, b1, acks=1).base_offset == 3
        assert log_end_offset(broker.log_dir, topic) == 4
        assert stored_values(broker.log_dir, topic) == [b"a", b"b", b"c", b"d"]


def test_a_duplicate_answers_the_original_timestamp(
        restartable: Callable[..., KlogBroker], topic: str) -> None:
    # Kafka answers a duplicate's log_append_time with the timestamp it remembered for the
    # batch: under LogAppendTime the original append time, not the retry's.
    broker = restartable({"log.message.timestamp.type": "LogAppendTime"})
    with RawClient(broker.bootstrap_servers) as raw:
        raw.ensure_topic(topic)
        pid = raw.init_producer_id().producer_id
        batch = build_batch([(1_000, None, b"old")], producer_id=pid, producer_epoch=0,
                            base_sequence=0)
        first = raw.produce(topic, batch)
        appended_at = epoch_ms(first.log_append_time)
        assert first.error_code == NONE and appended_at > 1_000
        time.sleep(0.01)
        again = raw.produce(topic, batch)
        assert (again.base_offset, epoch_ms(again.log_append_time)) == (0, appended_at)
        stored = stored_batches(broker.log_dir, topic)
        assert len(stored) == 1 and stored[0].max_timestamp == appended_at


def test_only_the_last_five_batches_are_remembered(
        bootstrap: str, broker: KlogBroker, topic: str) -> None:
    with RawClient(bootstrap) as raw:
        raw.ensure_topic(topic)
        pid = raw.init_producer_id().producer_id
        batches = [idempotent_batch(pid, 0, i, [b"%d" % i]) for i in range(6)]
        for i, b in enumerate(batches):
            assert raw.produce(topic, b).base_offset == i
        for i in range(1, 6):  # the last five are duplicates
            assert (raw.produce(topic, batches[i]).error_code, ) == (NONE, )
        oldest = raw.produce(topic, batches[0])  # forgotten: out of sequence, not appended
        assert oldest.error_code == OUT_OF_ORDER and oldest.base_offset == -1
        assert log_end_offset(broker.log_dir, topic) == 6


def test_out_of_order_sequence_is_refused(
        bootstrap: str, broker: KlogBroker, topic: str) -> None:
    with RawClient(bootstrap) as raw:
        raw.ensure_topic(topic)
        pid = raw.init_producer_id().producer_id
        assert raw.produce(topic, idempotent_batch(pid, 0, 0, [b"x", b"y"])).error_code == NONE
        gap = raw.produce(topic, idempotent_batch(pid, 0, 5, [b"gap"]))
        assert gap.error_code == OUT_OF_ORDER
        # As Kafka answers it: no message, the partition's log start offset
        assert (gap.error_message, gap.log_start_offset) == (None, 0)
        overlap = raw.produce(topic, idempotent_batch(pid, 0, 1, [b"overlap"]))
        assert overlap.error_code == OUT_OF_ORDER  # not a duplicate: different range
        assert raw.produce(topic, idempotent_batch(pid, 0, 2, [b"z"])).base_offset == 2
        assert stored_values(broker.log_dir, topic) == [b"x", b"y", b"z"]


def test_epoch_fencing(bootstrap: str, broker: KlogBroker, topic: str) -> None:
    with RawClient(bootstrap) as raw:
        raw.ensure_topic(topic)
        pid = raw.init_producer_id().producer_id
        assert raw.produce(topic, idempotent_batch(pid, 0, 0, [b"e0"])).error_code == NONE
        # A new epoch must start its sequences at 0.
        bad_start = raw.produce(topic, idempotent_batch(pid, 1, 1, [b"bad"]))
        assert bad_start.error_code == OUT_OF_ORDER
        assert raw.produce(topic, idempotent_batch(pid, 1, 0, [b"e1"])).base_offset == 1
        # The old epoch is fenced, even with a sequence that would follow on.
        zombie = raw.produce(topic, idempotent_batch(pid, 0, 1, [b"zombie"]))
        assert zombie.error_code == INVALID_EPOCH
        # ...and its retried batch is no longer recognised as a duplicate.
        assert raw.produce(topic, idempotent_batch(pid, 0, 0, [b"e0"])).error_code == \
            INVALID_EPOCH
        assert raw.produce(topic, idempotent_batch(pid, 1, 1, [b"e1b"])).base_offset == 2
        # Other producers are unaffected.
        other = raw.init_producer_id().producer_id
        assert raw.produce(topic, idempotent_batch(other, 0, 0, [b"o"])).base_offset == 3
        assert stored_values(broker.log_dir, topic) == [b"e0", b"e1", b"e1b", b"o"]


# -- real clients ------------------------------------------------------------------------------


def consume_all(bootstrap: str, topic: str, expected: int, partition: int = 0,
                timeout: float = 30.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idempotence-unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < expected and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                assert m.error() is None, m.error()
                values.append(m.value())
        # Nothing beyond what was expected turns up either.
        values.extend(m.value() for m in consumer.consume(1000, 0.3) if m.error() is None)
    finally:
        consumer.close()
    return values


def check_exactly_once(log_dir: Path, topic: str, n: int) -> list[BatchHeader]:
    """Every value 0..n-1 stored once, in order, by one producer with gapless sequences."""
    assert stored_values(log_dir, topic) == [b"%d" % i for i in range(n)]
    batches = stored_batches(log_dir, topic)
    assert {(b.producer_id, b.producer_epoch) for b in batches} == \
        {(batches[0].producer_id, 0)}
    assert batches[0].producer_id >= 0
    seq = 0
    for b in batches:
        assert b.base_sequence == seq and b.base_offset == seq
        seq += b.records_count or 0
    return batches


def test_confluent_idempotent_producer_exactly_once(
        bootstrap: str, broker: KlogBroker, topic: str) -> None:
    n = 20_000
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
        "linger.ms": 2, "batch.num.messages": 200,  # many batches, 5 in flight
        "message.timeout.ms": 30000,
    })
    offsets: list[int] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=b"%d" % i, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert errors == []
    assert offsets == list(range(n))
    batches = check_exactly_once(broker.log_dir, topic, n)
    assert len(batches) >= n // 200
    assert consume_all(bootstrap, topic, n) == [b"%d" % i for i in range(n)]


def test_kafka_python_idempotent_producer(
        bootstrap: str, broker: KlogBroker, topic: str) -> None:
    from kafka import KafkaProducer

    n = 3000
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                             acks="all", linger_ms=2, batch_size=4096,
                             request_timeout_ms=10000)
    try:
        futures = [producer.send(topic, value=b"%d" % i, partition=0) for i in range(n)]
        producer.flush(60)
        assert [f.get(10).offset for f in futures] == list(range(n))
    finally:
        producer.close(10)
    check_exactly_once(broker.log_dir, topic, n)


def test_aiokafka_idempotent_producer(
        bootstrap: str, broker: KlogBroker, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    n = 2000

    async def main() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True,
                                    acks="all", linger_ms=2, max_batch_size=4096)
        await producer.start()
        try:
            futures = [await producer.send(topic, value=b"%d" % i, partition=0)
                       for i in range(n)]
            return [(await f).offset for f in futures]
        finally:
            await producer.stop()

    assert asyncio.run(main()) == list(range(n))
    check_exactly_once(broker.log_dir, topic, n)


# -- across restarts ---------------------------------------------------------------------------


def _resend_after(restart: Callable[[KlogBroker], None],
                  factory: Callable[..., KlogBroker], topic: str,
                  older_answers: set[tuple[int, int]]) -> KlogBroker:
    """Two producers write; the broker goes down (``restart``) and comes back; retried
    batches of both must be answered as duplicates, and sequences go on where they were."""
    # Small segments: producer A's batches end up in an older segment (its state comes
    # from a snapshot written at a roll), B's in the active one (replayed after a crash).
    broker = factory({"log.segment.bytes": 1024})
    with RawClient(broker.bootstrap_servers) as raw:
        raw.ensure_topic(topic)
        a = raw.init_producer_id().producer_id
        b = raw.init_producer_id().producer_id
        a_batches = [idempotent_batch(a, 0, 2 * i, [b"a%d" % i, b"A%d" % i]) for i in range(3)]
        for batch in a_batches:
            assert raw.produce(topic, batch).error_code == NONE
        filler = raw.init_producer_id().producer_id
        for i in range(12):  # ~1.2 KB each side of a roll
            raw.produce(topic, idempotent_batch(filler, 0, i, [b"f" * 100]))
        b_batch = idempotent_batch(b, 0, 0, [b"b0", b"b1", b"b2"])
        b_first = raw.produce(topic, b_batch)
        assert b_first.error_code == NONE
    leo = log_end_offset(broker.log_dir, topic)
    segments_before = sorted(p.name for p in (broker.log_dir / f"{topic}-0").glob("*.log"))
    assert len(segments_before) >= 2
    restart(broker)
    with RawClient(broker.bootstrap_servers) as raw:
        raw.ensure_topic(topic)
        # Retries of each producer's last batch: the original offsets, nothing appended.
        r = raw.produce(topic, a_batches[-1])
        assert (r.error_code, r.base_offset) == (NONE, 4)
        r = raw.produce(topic, b_batch)
        assert (r.error_code, r.base_offset) == (NONE, b_first.base_offset)
        # An older batch: a snapshot keeps only the last batch of each producer (Kafka's
        # format), so after a clean restart it is out of sequence; after a crash the
        # state may have been replayed from the log and still know it. Never appended.
        r = raw.produce(topic, a_batches[0])
        assert (r.error_code, r.base_offset) in older_answers
        assert log_end_offset(broker.log_dir, topic) == leo
        # The state is really there: gaps and stale epochs are still refused...
        assert raw.produce(topic, idempotent_batch(b, 0, 9, [b"gap"])).error_code == \
            OUT_OF_ORDER
        # ...and the next sequences are accepted where they left off.
        assert raw.produce(topic, idempotent_batch(a, 0, 6, [b"a3"])).base_offset == leo
        assert raw.produce(topic, idempotent_batch(b, 0, 3, [b"b3"])).base_offset == leo + 1
        # New producer ids do not repeat the ones handed out before the restart.
        assert raw.init_producer_id().producer_id > max(a, b, filler)
    values = stored_values(broker.log_dir, topic)
    assert values.count(b"b0") == 1 and values.count(b"a0") == 1
    assert len(values) == leo + 2
    return broker


def test_dedupe_across_clean_restart(restartable: Callable[..., KlogBroker],
                                     topic: str) -> None:
    def clean_restart(broker: KlogBroker) -> None:
        assert broker.stop() == 0
        partition_dir = broker.log_dir / f"{topic}-0"
        # Clean shutdown wrote the producer state at the log end offset.
        snapshots = sorted(p.name for p in partition_dir.glob("*.snapshot"))
        leo = log_end_offset(broker.log_dir, topic)
        assert f"{leo:020d}.snapshot" in snapshots
        broker.start()

    _resend_after(clean_restart, restartable, topic, {(OUT_OF_ORDER, -1)})


def test_dedupe_across_kill_9(restartable: Callable[..., KlogBroker], topic: str) -> None:
    def crash(broker: KlogBroker) -> None:
        broker.kill()
        partition_dir = broker.log_dir / f"{topic}-0"
        leo = log_end_offset(broker.log_dir, topic)
        # No snapshot at the log end: the state must be rebuilt from the log.
        assert not (partition_dir / f"{leo:020d}.snapshot").exists()
        broker.start()

    _resend_after(crash, restartable, topic, {(OUT_OF_ORDER, -1), (NONE, 0)})


class ResponseDroppingProxy:
    """A TCP proxy in front of the broker that can lose one Produce response.

    Once ``arm``ed, it forwards the next Produce request (the victim), stops forwarding
    anything else from that client, and when the broker's response to the victim comes
    back, drops it and closes the connection. The broker has then appended the victim
    batch but the producer never heard so: it must send the same batch (same producer id,
    epoch and sequence) again, and only deduplication keeps it from being stored twice.
    """

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream_port = 0
        self.armed = threading.Event()
        self.dropped = threading.Event()
        self.victim: tuple[int, int] | None = None  # (connection number, correlation id)
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self) -> None:
        self.armed.set()

    def close(self) -> None:
        self._closed = True
        with self._lock:
            for s in [self.listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def _accept(self) -> None:
        number = 0
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            number += 1
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), 2)
                upstream.settimeout(None)
            except OSError:  # broker down (restarting): the client reconnects later
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            gone = threading.Event()
            for target in (self._requests, self._responses):
                threading.Thread(target=target, args=(number, client, upstream, gone),
                                 daemon=True).start()

    @staticmethod
    def _frame(sock: socket.socket) -> bytes | None:
        buf = bytearray()
        need = 4
        while len(buf) < need:
            try:
                chunk = sock.recv(need - len(buf))
            except OSError:
                return None
            if not chunk:
                return None
            buf += chunk
            if need == 4 and len(buf) == 4:
                need = 4 + struct.unpack(">i", buf)[0]
        return bytes(buf)

    def _end(self, client: socket.socket, upstream: socket.socket, gone: threading.Event
             ) -> None:
        gone.set()
        for s in (client, upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _requests(self, number: int, client: socket.socket, upstream: socket.socket,
                  gone: threading.Event) -> None:
        while (frame := self._frame(client)) is not None:
            api_key, _version, correlation_id = struct.unpack_from(">hhi", frame, 4)
            with self._lock:
                victim = api_key == PRODUCE and self.armed.is_set() and self.victim is None
                if victim:
                    self.victim = (number, correlation_id)
            try:
                upstream.sendall(frame)
            except OSError:
                break
            if victim:
                gone.wait(30)  # nothing more from this client reaches the broker
                return
        self._end(client, upstream, gone)

    def _responses(self, number: int, client: socket.socket, upstream: socket.socket,
                   gone: threading.Event) -> None:
        while (frame := self._frame(upstream)) is not None:
            (correlation_id,) = struct.unpack_from(">i", frame, 4)
            if self.victim == (number, correlation_id):
                self.armed.clear()
                self.dropped.set()
                break
            try:
                client.sendall(frame)
            except OSError:
                break
        self._end(client, upstream, gone)


@pytest.mark.parametrize("restart", ["none", "stop", "kill"])
def test_confluent_producer_retry_of_a_persisted_batch_is_deduplicated(
        restartable: Callable[..., KlogBroker], topic: str, restart: str) -> None:
    """librdkafka loses the response to a batch the broker has written, so it sends that
    batch again with the same sequence -- to the same broker, or to the same broker after
    a clean restart or a kill -9. Every message must still be stored exactly once."""
    proxy = ResponseDroppingProxy()
    broker = restartable({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})
    proxy.upstream_port = broker.port
    n = 20_000
    producer = Producer({
        "bootstrap.servers": f"127.0.0.1:{proxy.port}", "enable.idempotence": True,
        "acks": "all", "linger.ms": 1, "batch.num.messages": 100,
        "message.timeout.ms": 60000, "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200, "retry.backoff.ms": 20,
    })
    errors: list[Any] = []
    delivered = 0

    def report(err: Any, msg: Any) -> None:
        nonlocal delivered
        if err is not None:
            errors.append(err)
        else:
            delivered += 1

    def saboteur() -> None:
        while delivered < n // 3:
            time.sleep(0.002)
        proxy.arm()
        assert proxy.dropped.wait(30)
        if restart == "kill":
            broker.kill()
        elif restart == "stop":
            broker.stop()
        if restart != "none":
            broker.start()

    thread = threading.Thread(target=saboteur)
    thread.start()
    try:
        for i in range(n):
            while True:
                try:
                    producer.produce(topic, value=b"%d" % i, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        assert producer.flush(90) == 0
    finally:
        thread.join(60)
        proxy.close()
    assert proxy.dropped.is_set()
    assert errors == []
    assert delivered == n
    check_exactly_once(broker.log_dir, topic, n)
