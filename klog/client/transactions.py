"""The transactional producer's requests to its transaction coordinator (Kafka's
TransactionManager, the minimal flow): find the coordinator of the transactional id
(FindCoordinator key type 1), get the producer id and epoch (InitProducerId with the
transactional id; fencing any older producer of the id), add partitions to the ongoing
transaction before their first batch is sent (AddPartitionsToTxn v0-v3), and end the
transaction (EndTxn commit or abort).

Retried while the answer says to wait or look again (COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: the coordinator is found again;
CONCURRENT_TRANSACTIONS: the previous transaction is still completing); anything else
(PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, ...) is raised. Not done
here: offsets in transactions (AddOffsetsToTxn, TxnOffsetCommit) and epoch bumps on
abortable errors (KIP-360).

Runs on the producer's event loop. ``Any``: a response is a kio entity whose class is
chosen by api key and version at runtime (protocol/apis.py), request values the nested
mappings build_request turns into one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from klog.client.errors import KafkaClientError, error_for
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.client.network import KafkaClient

INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 22, 24, 26
#: The versions a client uses: AddPartitionsToTxn v4+ is the brokers' batched form, and
#: EndTxn v5 / InitProducerId v6 belong to KIP-890's second part.
MAX_VERSIONS = {INIT_PRODUCER_ID: 5, ADD_PARTITIONS_TO_TXN: 3, END_TXN: 4}

TopicPartition = tuple[str, int]

_WAIT = frozenset(int(c) for c in (
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.REQUEST_TIMED_OUT))
_REFIND = frozenset(int(c) for c in (
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION))


class TransactionManager:
    """One transactional id's requests (see the module docstring)."""

    def __init__(self, client: KafkaClient, transactional_id: str, *,
                 transaction_timeout_ms: int, retry_backoff_ms: float,
                 max_wait_ms: float) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_wait_ms = max_wait_ms
        self.producer_id = -1
        self.producer_epoch = -1
        #: Partitions added to the ongoing transaction.
        self.partitions: set[TopicPartition] = set()
        self._coordinator: int | None = None

    async def _coordinator_node(self) -> int:
        if self._coordinator is None:
            from klog.client.group_coordinator import find_coordinator

            node, _host, _port = await find_coordinator(self.client, self.transactional_id,
                                                        key_type=1)
            if node not in self.client.cluster.brokers:
                await self.client.refresh_metadata([])
            self._coordinator = node
        return self._coordinator

    async def _call(self, api_key: int, values: dict[str, Any]) -> Any:
        """Send to the coordinator until the answer is not one to wait on (up to
        ``max_wait_ms``); the response, or its error raised."""
        deadline = asyncio.get_running_loop().time() + self.max_wait_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            code: int
            try:
                node = await self._coordinator_node()
                version = self.client.api_version(node, api_key, MAX_VERSIONS.get(api_key))
                response = await self.client.send(node, api_key, values, version=version)
                code = _error(response)
            except KafkaClientError as exc:
                if exc.error_code is None or (int(exc.error_code) not in _WAIT | _REFIND):
                    raise
                code = int(exc.error_code)
                response = None
            if code == 0:
                return response
            if code not in _WAIT | _REFIND or asyncio.get_running_loop().time() >= deadline:
                raise error_for(code, f"transactional id {self.transactional_id!r}")
            if code in _REFIND:
                self._coordinator = None
            await asyncio.sleep(min(self.retry_backoff_ms * attempt, 1000) / 1000)

    async def init_producer_id(self) -> tuple[int, int]:
        """The producer id and epoch of the transactional id (older producers fenced)."""
        response = await self._call(INIT_PRODUCER_ID, {
            "transactional_id": self.transactional_id,
            "transaction_timeout": self.transaction_timeout_ms,
            "producer_id": -1, "producer_epoch": -1})
        self.producer_id = int(response.producer_id)
        self.producer_epoch = int(response.producer_epoch)
        self.partitions.clear()
        return self.producer_id, self.producer_epoch

    async def add_partitions(self, tps: Iterable[TopicPartition]) -> None:
        new = sorted(set(tps) - self.partitions)
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in new:
            by_topic.setdefault(topic, []).append(partition)
        await self._call(ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": self.transactional_id,
            "v3_and_below_producer_id": self.producer_id,
            "v3_and_below_producer_epoch": self.producer_epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps}
                                    for t, ps in by_topic.items()],
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
        self.partitions.update(new)

    async def end(self, committed: bool) -> None:
        """EndTxn; the next transaction starts with no partitions."""
        await self._call(END_TXN, {
            "transactional_id": self.transactional_id, "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch, "committed": committed})
        self.partitions.clear()


def _error(response: Any) -> int:
    """The first error of a coordinator response (AddPartitionsToTxn: per partition;
    OPERATION_NOT_ATTEMPTED is only the others' echo)."""
    code = int(getattr(response, "error_code", 0) or 0)
    if code:
        return code
    worst = 0
    for topic in getattr(response, "results_by_topic_v3_and_below", None) \
            or getattr(response, "results", None) or ():
        for p in getattr(topic, "results_by_partition", ()):
            c = int(p.partition_error_code)
            if c and c != ErrorCode.OPERATION_NOT_ATTEMPTED:
                return c
            worst = worst or c
    return worst
