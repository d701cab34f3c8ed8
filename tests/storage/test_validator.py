"""storage/validator.py: validate_records (the one-batch shortcut decides as the walk over
the headers; every record is checked; recompression and its CRC rule; timestamps and keys
named per record), check_batch_headers and inline_weight."""

from __future__ import annotations

import dataclasses
import struct
import time
from typing import Any

import pytest

from klog.protocol.errors import ErrorCode, InvalidRecordError, KafkaError
from klog.protocol.records.batch import CompressionType, crc32c, iter_batch_headers
from klog.protocol.records.v2 import build_batch, encode_record
from klog.storage.config import LogConfig
from klog.storage.validator import (
    AppendOrigin,
    check_batch_headers,
    inline_weight,
    validate_records,
)
from tests.storage.batches import build_control_batch

NOW = int(time.time() * 1000)
CLIENT = AppendOrigin.CLIENT


def _validate(records: Any, config: LogConfig, origin: AppendOrigin = CLIENT) -> Any:
    """The records ``validate_records`` hands the log."""
    return validate_records(records, config, origin, NOW).records


def _outcome(records: Any, config: LogConfig, origin: AppendOrigin = CLIENT) -> Any:
    try:
        result = _validate(records, config, origin)
    except KafkaError as exc:
        return type(exc), str(exc)
    return "same" if result is records else bytes(result)


def _walked(records: bytes, config: LogConfig, origin: AppendOrigin = CLIENT) -> Any:
    """What the header walk alone decides: the same records with a config that turns the
    shortcut off through a timestamp limit no int64 timestamp >= 0 can exceed. (The magic 1
    case reads its "timestamp" from bytes that depend on NOW, anywhere in the int64 range,
    so a smaller limit made that case fail on some clocks.)"""
    slow = dataclasses.replace(config, message_timestamp_difference_max_ms=2**63 - 2)
    return _outcome(records, slow, origin)


def _patched(batch: bytes, fmt: str, at: int, value: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


GOOD = build_batch([(NOW, b"k", b"v" * 100), (NOW, None, b"w")])


def _fixed_crc(batch: bytes) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


CASES = {
    "good": GOOD,
    "magic 1": _patched(GOOD, ">b", 16, 1),
    "magic 3": _patched(GOOD, ">b", 16, 3),
    "negative delta": _patched(GOOD, ">i", 23, -1),
    "length too long": _patched(GOOD, ">i", 8, len(GOOD)),
    "length too short": _patched(GOOD, ">i", 8, len(GOOD) - 20),
    "two batches": GOOD + GOOD,
    "tiny": GOOD[:40],
    "count disagrees": _fixed_crc(_patched(GOOD, ">i", 57, 3)),
    "bad record length": _fixed_crc(GOOD[:61] + b"\xff" * (len(GOOD) - 61)),
    "bad record, bad crc": GOOD[:61] + b"\xff" * (len(GOOD) - 61),
    "codec 7": _fixed_crc(_patched(GOOD, ">h", 21, 7)),
    "offset deltas": _fixed_crc(GOOD[:61] + encode_record(1, 0, b"k", b"v" * 100)
                                + GOOD[61 + len(encode_record(0, 0, b"k", b"v" * 100)):]),
    "too large": build_batch([(NOW, b"k", b"v" * (1 << 20))]),
    "zstd": build_batch([(NOW, b"k", b"v")], compression=CompressionType.ZSTD),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("origin", [CLIENT, AppendOrigin.COORDINATOR])
def test_the_shortcut_decides_as_the_walk(name: str, origin: AppendOrigin) -> None:
    records = CASES[name]
    config = LogConfig()
    assert _outcome(memoryview(records), config, origin) == _walked(records, config, origin)


def test_a_good_batch_comes_back_untouched_and_bad_magic_is_refused() -> None:
    view = memoryview(bytearray(GOOD))
    assert _validate(view, LogConfig()) is view
    # a client's magic 1 entry is a v0/v1 message to convert (Produce v0-v2): this one, a
    # v2 batch with its magic byte changed, fails the v1 message's CRC
    with pytest.raises(KafkaError) as caught:
        _validate(memoryview(CASES["magic 1"]), LogConfig())
    assert caught.value.error_code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError, match="magic 2"):
        _validate(memoryview(GOOD + CASES["magic 1"]), LogConfig())


def test_broker_side_compression_still_recompresses() -> None:
    out = _validate(memoryview(GOOD), LogConfig(compression_type="zstd"))
    headers = list(iter_batch_headers(out))
    assert len(headers) == 1 and headers[0].compression is CompressionType.ZSTD


@pytest.mark.parametrize(("name", "error"), [
    ("count disagrees", ErrorCode.INVALID_RECORD),
    ("bad record length", ErrorCode.CORRUPT_MESSAGE),
    ("codec 7", ErrorCode.CORRUPT_MESSAGE),
    ("offset deltas", ErrorCode.INVALID_RECORD),
    ("too large", ErrorCode.MESSAGE_TOO_LARGE),
])
def test_every_record_is_checked(name: str, error: ErrorCode) -> None:
    with pytest.raises(KafkaError) as caught:
        _validate(memoryview(CASES[name]), LogConfig())
    assert caught.value.error_code == error


def test_a_compacted_topic_needs_keys_also_on_the_shortcut() -> None:
    keyless = memoryview(bytearray(build_batch([(NOW, None, b"v")])))
    assert _validate(keyless, LogConfig()) is keyless
    with pytest.raises(InvalidRecordError, match="without a key"):
        _validate(keyless, LogConfig(cleanup_policy=("compact",)))


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4])
def test_every_keyless_record_is_named_on_a_compacted_topic(codec: CompressionType) -> None:
    """librdkafka's case (its test 0011): 100 records, every tenth without a key: the batch
    is refused with the ten named by their index (KIP-467), on the shortcut (one plain
    batch) and the walk (compressed, recompressed) alike."""
    records = [(NOW, None if i % 10 == 0 else b"k%d" % i, b"v") for i in range(100)]
    keyless = memoryview(bytearray(build_batch(records, compression=codec)))
    for config in (LogConfig(cleanup_policy=("compact",)),
                   LogConfig(cleanup_policy=("compact",), compression_type="gzip")):
        with pytest.raises(InvalidRecordError) as caught:
            _validate(keyless, config)
        assert [index for index, _ in caught.value.record_errors] == list(range(0, 100, 10))
        assert str(caught.value).startswith("10 of the 100 records of batch at position 0")


def test_timestamps_out_of_range_are_named_and_before_after_are_kafkas() -> None:
    """message.timestamp.before.max.ms / after.max.ms (KIP-937), falling back to
    message.timestamp.difference.max.ms while left at their defaults."""
    stamps = [NOW, NOW - 7_200_000, NOW + 30_000, NOW + 7_200_000, -1]
    batch = memoryview(bytearray(build_batch([(ts, b"k", b"v") for ts in stamps])))
    cases = [
        (LogConfig(message_timestamp_difference_max_ms=3_600_000), [1, 3]),
        (LogConfig(message_timestamp_before_max_ms=3_600_000), [1]),
        (LogConfig(message_timestamp_after_max_ms=10_000), [2, 3]),
        # before left at its default: difference.max.ms (10 s) stands in for it
        (LogConfig(message_timestamp_difference_max_ms=10_000,
                   message_timestamp_after_max_ms=8_000_000), [1]),
    ]
    for config, offenders in cases:
        with pytest.raises(KafkaError) as caught:
            _validate(batch, config)
        assert caught.value.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [index for index, _ in caught.value.record_errors] == offenders
    assert _validate(batch, LogConfig(message_timestamp_before_max_ms=8_000_000,
                                      message_timestamp_after_max_ms=8_000_000)) is batch
    # LogAppendTime topics take the broker's time: no producer's time is judged
    assert _validate(batch, LogConfig(message_timestamp_type="LogAppendTime",
                                      message_timestamp_difference_max_ms=1)) is batch


def test_recompression_does_not_launder_a_bad_crc() -> None:
    """The records decode but a byte of a value changed in transit: the rewrite would give
    the batch a fresh CRC, so the old one is checked first."""
    damaged = bytearray(GOOD)
    damaged[61 + 30] ^= 0x01  # inside the first record's value
    with pytest.raises(KafkaError, match="crc") as caught:
        _validate(memoryview(damaged), LogConfig(compression_type="zstd"))
    assert caught.value.error_code == ErrorCode.CORRUPT_MESSAGE


def test_the_plain_case_carries_its_header_fields_and_no_headers() -> None:
    """One uncompressed v2 batch without a producer id: the log appends it from ``plain``."""
    validated = validate_records(bytearray(GOOD), LogConfig(), CLIENT, NOW)
    assert validated.headers is None and validated.plain is not None
    assert validated.plain[0] + 12 == len(GOOD)  # batchLength
    idempotent = build_batch([(NOW, b"k", b"v")], producer_id=7, producer_epoch=0,
                             base_sequence=0)
    validated = validate_records(bytearray(idempotent), LogConfig(), CLIENT, NOW)
    assert validated.plain is None and validated.headers is not None
    assert validated.headers[0].producer_id == 7


def test_a_read_only_buffer_is_copied_once_and_a_writable_one_kept() -> None:
    writable = bytearray(GOOD)
    assert validate_records(writable, LogConfig(), CLIENT, NOW).records is writable
    copied = validate_records(GOOD, LogConfig(), CLIENT, NOW).records
    assert isinstance(copied, bytearray) and bytes(copied) == GOOD


def test_a_client_may_not_write_control_batches_a_coordinator_may() -> None:
    marker = build_control_batch(0, commit=True, producer_id=1, producer_epoch=0,
                                 timestamp=NOW)
    with pytest.raises(InvalidRecordError, match="control records"):
        validate_records(marker, LogConfig(), CLIENT, NOW)
    validated = validate_records(marker, LogConfig(), AppendOrigin.COORDINATOR, NOW)
    assert validated.headers is not None and validated.headers[0].is_control


def test_follower_batches_are_checked_for_sizes_and_crcs_only() -> None:
    assert [h.last_offset_delta for h in check_batch_headers(GOOD + GOOD, 1 << 20)] == [1, 1]
    with pytest.raises(KafkaError) as caught:
        check_batch_headers(CASES["bad record, bad crc"], 1 << 20)
    assert caught.value.error_code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(KafkaError) as caught:
        check_batch_headers(GOOD, len(GOOD) - 1)
    assert caught.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(KafkaError) as caught:
        check_batch_headers(GOOD + GOOD[:30], 1 << 20)
    assert caught.value.error_code == ErrorCode.CORRUPT_MESSAGE


def test_inline_weight_sends_inflating_and_rewriting_to_a_worker() -> None:
    assert inline_weight(GOOD, LogConfig()) == len(GOOD)
    assert inline_weight(GOOD + GOOD, LogConfig()) == 2 * len(GOOD)
    assert inline_weight(CASES["zstd"], LogConfig()) is None
    assert inline_weight(GOOD, LogConfig(compression_type="zstd")) is None
