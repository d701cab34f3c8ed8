"""Kafka's message parsers for --print-data-log: a record -> (key, payload) to show.

The decoder parser (--key/--value-decoder-class), Kafka 3.x's OffsetsMessageParser
(``__consumer_offsets``) and TransactionLogMessageParser (``__transaction_state``); each
key and payload is None or printable (text, or a JSON object of an internal topic's
record). ``Any`` below: those keys and payloads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from klog.protocol import internal_topics as it
from klog.tools.dump.options import DEFAULT_DECODER, DumpOptions, make_decoder

if TYPE_CHECKING:
    from klog.protocol.records.record import Record

Parser = Callable[["Record"], tuple[Any, Any]]


def _decoder_parser(key_decoder: str | None, value_decoder: str | None) -> Parser:
    decode_key = make_decoder(key_decoder or DEFAULT_DECODER)
    decode_value = make_decoder(value_decoder or DEFAULT_DECODER)

    def parse(record: Record) -> tuple[Any, Any]:
        k = record.key
        v = record.value
        return (
            None if k is None else decode_key(k),
            None if v is None else decode_value(v),
        )

    return parse


def parse_offsets_record(record: Record) -> tuple[Any, Any]:
    """Kafka 3.x's OffsetsMessageParser: key/value of ``__consumer_offsets`` as JSON objects.

    Key ``{"type": "<key version>", "data": {...}}``, payload ``{"version": "<value
    version>", "data": {...}}`` or ``<DELETE>`` for a tombstone; an undecodable record
    becomes a one-line explanation in place of the key, as in Kafka.
    """
    offset = record.offset
    if record.key is None:
        return (
            f"Failed to decode message at offset {offset} using offset topic decoder "
            "(message had a missing key)",
            None,
        )
    try:
        key = it.read_offsets_key(record.key)
        value = it.read_offsets_value(key, record.value)
    except it.UnknownVersionError as exc:
        if exc.version not in (0, 1, 2):
            return (f"Unknown record type {exc.version} at offset {offset}, skipping.", None)
        return (f"Error at offset {offset}, skipping. {exc}", None)
    except it.InternalTopicError as exc:
        return (f"Error at offset {offset}, skipping. {exc}", None)
    key_json = {"type": str(key.version), "data": key.to_kafka_json()}
    if value is None:
        return key_json, "<DELETE>"
    return key_json, {"version": str(value.version), "data": value.to_kafka_json()}


def parse_transaction_log_record(record: Record) -> tuple[Any, Any]:
    """Kafka 3.x's TransactionLogMessageParser (``TransactionLog.formatRecordKeyAndValue``)."""
    offset = record.offset
    if record.key is None:
        return (f"Error at offset {offset}, skipping. the record has no key", None)
    try:
        key = it.read_transaction_log_key(record.key)
    except it.UnknownVersionError as exc:
        return (f"unknown::version={exc.version}", None)
    except it.InternalTopicError as exc:
        return (f"Error at offset {offset}, skipping. {exc}", None)
    key_text = f"transaction_metadata::transactionalId={key.transactional_id}"
    try:
        value = it.read_transaction_log_value(record.value)
        if value is None:
            return key_text, "<DELETE>"
        state = value.state_name
    except it.InternalTopicError as exc:
        return (key_text, f"Error at offset {offset}, skipping. {exc}")
    partitions: list[str] = []
    # Kafka does not list the partitions of an Empty transaction.
    if value.transaction_status != it.TransactionState.EMPTY and value.transaction_partitions:
        for tp in value.transaction_partitions:
            partitions.extend(f"{tp.topic}-{p}" for p in tp.partition_ids)
    payload = (
        f"producerId:{value.producer_id},producerEpoch:{value.producer_epoch},"
        f"state={state},partitions=[{','.join(partitions)}],"
        f"txnLastUpdateTimestamp={value.transaction_last_update_timestamp_ms},"
        f"txnTimeoutMs={value.transaction_timeout_ms}"
    )
    return key_text, payload


def message_parser(options: DumpOptions) -> Parser:
    if options.offsets_decoder:
        return parse_offsets_record
    if options.transaction_log_decoder:
        return parse_transaction_log_record
    return _decoder_parser(options.key_decoder, options.value_decoder)
