"""DescribeTransactions v0 responses decoded by hand (client side).

kio reads ``TransactionStartTimeMs`` as a datetime and refuses a negative one, but Kafka
answers -1 for a transactional id with no transaction running (Empty, Complete*); such a
response must still be readable. This module decodes the v0 body (flexible)::

    throttle_time_ms int32, transaction_states compact array of
      (error_code int16, transactional_id compact string, transaction_state compact string,
       transaction_timeout_ms int32, transaction_start_time_ms int64, producer_id int64,
       producer_epoch int16, topics compact array of
         (topic compact string, partitions compact array of int32, tags), tags), tags

into plain values with the times as ints (``transaction_start_time`` -1 = none).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from klog.protocol.errors import InvalidRequestError
from klog.protocol.records.varint import read_unsigned

DESCRIBE_TRANSACTIONS = 65

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class DescribedTopic:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout: int  # ms
    transaction_start_time: int  # ms since the epoch; -1 = no transaction running
    producer_id: int
    producer_epoch: int
    topics: tuple[DescribedTopic, ...]


@dataclass(frozen=True, slots=True)
class DescribeTransactionsResponse:
    throttle_time: int  # ms
    transaction_states: tuple[DescribedTransaction, ...]


class _Reader:
    __slots__ = ("pos", "view")

    def __init__(self, body: bytes | bytearray | memoryview) -> None:
        self.view = memoryview(body).cast("B")
        self.pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.view):
            raise InvalidRequestError("DescribeTransactions response truncated")
        out = self.view[self.pos:self.pos + n]
        self.pos += n
        return out

    def fixed(self, s: struct.Struct) -> int:
        value: int = s.unpack(self._take(s.size))[0]
        return value

    def uvarint(self) -> int:
        value, self.pos = read_unsigned(self.view, self.pos, error=InvalidRequestError)
        return value

    def count(self) -> int:
        n = self.uvarint() - 1
        if n < 0:
            raise InvalidRequestError("null array in a DescribeTransactions response")
        if n > len(self.view) - self.pos:
            raise InvalidRequestError("DescribeTransactions response claims more than it holds")
        return n

    def string(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise InvalidRequestError("null string in a DescribeTransactions response")
        try:
            return str(self._take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRequestError(f"string is not UTF-8: {exc}") from None

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())


def decode_describe_transactions_response(body: bytes | bytearray | memoryview
                                          ) -> DescribeTransactionsResponse:
    r = _Reader(body)
    throttle = r.fixed(_I32)
    states = []
    for _ in range(r.count()):
        error = r.fixed(_I16)
        txn_id = r.string()
        state = r.string()
        timeout = r.fixed(_I32)
        start = r.fixed(_I64)
        pid = r.fixed(_I64)
        epoch = r.fixed(_I16)
        topics = []
        for _ in range(r.count()):
            topic = r.string()
            partitions = tuple(r.fixed(_I32) for _ in range(r.count()))
            r.skip_tags()
            topics.append(DescribedTopic(topic, partitions))
        r.skip_tags()
        states.append(DescribedTransaction(error, txn_id, state, timeout, start, pid, epoch,
                                           tuple(topics)))
    r.skip_tags()
    return DescribeTransactionsResponse(throttle, tuple(states))
