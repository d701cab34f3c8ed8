"""Transaction markers: writing them on a partition, and sending them from the coordinator.

``MarkerWriter`` is the partition side (Kafka's KafkaApis.handleWriteTxnMarkersRequest):
for each partition one control batch -- producer id and epoch of the transaction, one
COMMIT or ABORT record carrying the coordinator epoch -- appended with acks=all through
the replica manager (``origin=AppendOrigin.COORDINATOR``). The log checks the epochs (a stale
producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator epoch
TRANSACTION_COORDINATOR_FENCED), ends the producer's transaction (the last stable offset
moves on) and indexes an abort in ``.txnindex``. A marker written to a partition of
``__consumer_offsets`` is announced to the ``on_transaction_marker`` listeners
``(offsets_partition, producer_id, committed)``: the group metadata manager makes the
transaction's offset commits visible or drops them there.

``TransactionMarkerChannelManager`` is the coordinator side (Kafka's
TransactionMarkerChannelManager): ``send_markers`` writes the markers of one transaction
to all its partitions -- those led by this broker in-process through the writer, the
others with WriteTxnMarkers to their leaders over one connection per broker (on the
inter-broker listener) -- and retries what fails retriably (no leader yet, leader moved,
connection lost, not enough replicas) every ``RETRY_BACKOFF_S`` until every partition has
it, the transaction is no longer this coordinator's, or a partition reports the marker
fenced. A partition whose topic is gone is skipped, as Kafka does.

Both run on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from klog.client.errors import KafkaClientError
from klog.client.network import build_request
from klog.client.security import ClientSecurity
from klog.daemon.transaction.connections import BrokerConnections
from klog.protocol import apis
from klog.protocol.errors import ErrorCode
from klog.protocol.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_control_batch,
)
from klog.storage.validator import AppendOrigin

if TYPE_CHECKING:
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.metadata_cache import MetadataCache
    from klog.daemon.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
WRITE_TXN_MARKERS = 27
TopicPartition = tuple[str, int]
#: (offsets partition, producer id, committed): a marker reached __consumer_offsets.
MarkerListener = Callable[[int, int, bool], None]
#: How long a coordinator waits before resending markers that failed retriably.
RETRY_BACKOFF_S = 0.1

# A partition's answer that ends the attempt for the whole transaction: the marker is
# stale (a newer producer epoch or coordinator wrote there), as Kafka's
# TransactionMarkerRequestCompletionHandler.
_FENCED = frozenset({int(ErrorCode.INVALID_PRODUCER_EPOCH),
                     int(ErrorCode.TRANSACTION_COORDINATOR_FENCED)})
# Answers after which the marker is not retried: the partition is gone.
_GONE = frozenset({int(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT)})


class MarkerWriter:
    """The partition side of transaction markers (see the module docstring)."""

    def __init__(self, config: DynamicBrokerConfig, replica_manager: ReplicaManager) -> None:
        self._config = config
        self.replica_manager = replica_manager
        self._listeners: list[MarkerListener] = []

    def add_listener(self, listener: MarkerListener) -> None:
        """Called after a marker is appended to a partition of ``__consumer_offsets``."""
        self._listeners.append(listener)

    async def write(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                    committed: bool, partitions: Iterable[TopicPartition]
                    ) -> dict[TopicPartition, int]:
        """Append one marker per partition (acks=all); an error code per partition."""
        marker = EndTransactionMarker(
            ControlRecordType.COMMIT if committed else ControlRecordType.ABORT,
            coordinator_epoch)
        batch = build_control_batch(marker, producer_id=producer_id,
                                    producer_epoch=producer_epoch)
        rm = self.replica_manager
        entries = {tp: bytearray(batch) for tp in dict.fromkeys(partitions)}
        if not entries:
            return {}
        results = rm.append_records(entries, -1, origin=AppendOrigin.COORDINATOR)
        results = await rm.wait_for_isr(results, self._config.current.request_timeout_ms)
        out = {tp: int(r.error_code) for tp, r in results.items()}
        for (topic, partition), code in out.items():
            if topic == OFFSETS_TOPIC and code == 0:
                for listener in self._listeners:
                    try:
                        listener(partition, producer_id, committed)
                    except Exception:
                        log.exception("completing transactional offsets of producer %d in "
                                      "%s-%d failed", producer_id, topic, partition)
        return out


class TransactionMarkerChannelManager:
    """The coordinator side of transaction markers (see the module docstring)."""

    def __init__(self, broker_id: int, config: DynamicBrokerConfig,
                 metadata_cache: MetadataCache, writer: MarkerWriter,
                 endpoint: Callable[[int], Awaitable[tuple[str, int] | None]],
                 security: ClientSecurity | None = None) -> None:
        self.broker_id = broker_id
        self._config = config
        self.metadata_cache = metadata_cache
        self.writer = writer
        self.connections = BrokerConnections(broker_id, "txn-coordinator", config, endpoint,
                                             security)

    async def send_markers(self, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, committed: bool,
                           partitions: Iterable[TopicPartition],
                           still_current: Callable[[], bool]) -> bool:
        """Write the markers to every partition; True when all are written, False when
        given up (``still_current()`` turned false, or a partition answered fenced)."""
        remaining = set(partitions)
        while remaining:
            if not still_current():
                return False
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                state = self.metadata_cache.partition_state(*tp)
                if state is None:
                    # The topic is gone (deleted): nothing to write, as in Kafka.
                    log.info("skipping the marker for %s-%d: no such partition", *tp)
                    remaining.discard(tp)
                    continue
                if state.leader >= 0:
                    by_leader.setdefault(state.leader, []).append(tp)
            sends = [self._send(leader, tps, producer_id, producer_epoch,
                                coordinator_epoch, committed)
                     for leader, tps in by_leader.items()]
            for answers in await asyncio.gather(*sends):
                for tp, code in answers.items():
                    if code == 0 or code in _GONE:
                        remaining.discard(tp)
                    elif code in _FENCED:
                        log.warning("the %s marker of producer %d (epoch %d) for %s-%d is "
                                    "fenced: %s", "COMMIT" if committed else "ABORT",
                                    producer_id, producer_epoch, tp[0], tp[1],
                                    ErrorCode(code).name)
                        return False
                    else:
                        log.debug("marker for %s-%d: %s; retrying", tp[0], tp[1], code)
            if remaining:
                await asyncio.sleep(RETRY_BACKOFF_S)
        return True

    async def _send(self, leader: int, tps: list[TopicPartition], producer_id: int,
                    producer_epoch: int, coordinator_epoch: int, committed: bool
                    ) -> dict[TopicPartition, int]:
        if leader == self.broker_id:
            try:
                return await self.writer.write(producer_id, producer_epoch,
                                               coordinator_epoch, committed, tps)
            except Exception:
                log.exception("writing markers of producer %d failed", producer_id)
                return {tp: int(ErrorCode.UNKNOWN_SERVER_ERROR) for tp in tps}
        try:
            return await self._send_remote(leader, tps, producer_id, producer_epoch,
                                           coordinator_epoch, committed)
        except asyncio.CancelledError:
            raise
        except (KafkaClientError, OSError) as exc:
            log.info("sending WriteTxnMarkers to broker %d failed (%s); retrying", leader, exc)
            self.connections.drop(leader)
            return {tp: int(ErrorCode.NETWORK_EXCEPTION) for tp in tps}

    async def _send_remote(self, leader: int, tps: list[TopicPartition], producer_id: int,
                           producer_epoch: int, coordinator_epoch: int, committed: bool
                           ) -> dict[TopicPartition, int]:
        conn = await self.connections.get(leader)
        spec = apis.spec_for(WRITE_TXN_MARKERS)
        theirs = conn.api_versions.get(WRITE_TXN_MARKERS)
        version = None if theirs is None else min(spec.max_version, theirs[1])
        if version is None or version < max(spec.min_version, theirs[0] if theirs else 0):
            log.error("broker %d does not speak WriteTxnMarkers", leader)
            return {tp: int(ErrorCode.UNSUPPORTED_VERSION) for tp in tps}
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        values: dict[str, Any] = {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "transaction_result": committed, "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
        }]}
        entity = build_request(spec.request_entity(version), values)
        response = await conn.request(WRITE_TXN_MARKERS, version, entity,
                                      timeout=self.connections.timeout_s)
        out = {tp: int(ErrorCode.UNKNOWN_SERVER_ERROR) for tp in tps}
        for marker in response.markers:
            if marker.producer_id != producer_id:
                continue
            for topic in marker.topics:
                for p in topic.partitions:
                    out[(topic.name, int(p.partition_index))] = int(p.error_code)
        return out

    async def shutdown(self) -> None:
        self.connections.close()
