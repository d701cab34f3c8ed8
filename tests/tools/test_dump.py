"""Tests for klog.tools.dump: Kafka's DumpLogSegments output, event by event."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import crc32c
import pytest

from klog.protocol import internal_topics as it
from klog.protocol.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_control_batch,
)
from klog.protocol.records.v2 import build_batch
from klog.storage.index import AbortedTxn
from klog.storage.producer_state import ProducerSnapshotEntry, write_snapshot
from klog.tools import dump
from klog.tools.dump import DumpOptions, DumpRun

SEGMENT = "00000000000000000000"
V2_HEADER = struct.Struct(">qiibIhiqqqhii")


def run_dump(paths, **options):  # type: ignore[no-untyped-def]
    """(stdout text, stderr text, the DumpRun) of dumping ``paths``."""
    run = DumpRun([str(p) for p in paths], DumpOptions(**options))
    out, err = [], []
    for event in run:
        (out if event.stream == dump.OUT else err).append(event.to_kafka_line())
    return "".join(out), "".join(err), run


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def expected_v2_line(buf: bytes, position: int) -> str:
    """A batch line computed straight from the bytes, independently of klog's parser."""
    (
        base_offset,
        length,
        leader_epoch,
        magic,
        crc,
        attributes,
        last_delta,
        _base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = V2_HEADER.unpack_from(buf, position)
    size = length + 12
    valid = crc32c.crc32c(buf[position + 21 : position + size]) == crc
    ts_type = "LogAppendTime" if attributes & 0x08 else "CreateTime"
    last_sequence = -1 if base_sequence == -1 else base_sequence + last_delta
    return (
        f"baseOffset: {base_offset} lastOffset: {base_offset + last_delta} count: {count} "
        f"baseSequence: {base_sequence} lastSequence: {last_sequence} "
        f"producerId: {producer_id} producerEpoch: {producer_epoch} "
        f"partitionLeaderEpoch: {leader_epoch} isTransactional: "
        f"{'true' if attributes & 0x10 else 'false'} isControl: "
        f"{'true' if attributes & 0x20 else 'false'} deleteHorizonMs: OptionalLong.empty "
        f"position: {position} {ts_type}: {max_ts} size: {size} magic: {magic} "
        f"compresscodec: none crc: {crc} isvalid: {'true' if valid else 'false'}"
    )


def write_log(tmp_path: Path, *batches: bytes, name: str = SEGMENT) -> Path:
    path = tmp_path / f"{name}.log"
    path.write_bytes(b"".join(batches))
    return path


def simple_log(tmp_path: Path, batches: int = 3, per_batch: int = 2) -> Path:
    data = []
    offset = 0
    for b in range(batches):
        records = [
            (1000 + offset + i, b"k%d" % (offset + i), b"v%d" % (offset + i))
            for i in range(per_batch)
        ]
        data.append(build_batch(records, base_offset=offset, partition_leader_epoch=b))
        offset += per_batch
    return write_log(tmp_path, *data)


# --------------------------------------------------------------------------------------------
# Real Kafka data


def test_corpus_batch_lines_match_the_bytes(kafka_corpus: Path) -> None:
    log = kafka_corpus / "first_topic-0" / f"{SEGMENT}.log"
    before = digest(log)
    out, err, run = run_dump([log])
    lines = out.splitlines()
    assert lines[0] == f"Dumping {log}"
    assert lines[1] == "Log starting offset: 0"
    batch_lines = lines[2:]
    buf = log.read_bytes()
    position = 0
    for line in batch_lines:
        assert line == expected_v2_line(buf, position)
        position += struct.unpack_from(">i", buf, position + 8)[0] + 12
    assert position == len(buf)  # every byte accounted for, no "invalid bytes" line
    # Two lines spelled out in full, values read off the bytes by hand.
    assert batch_lines[0] == (
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1587576892921 size: 80 "
        "magic: 2 compresscodec: none crc: 2014155031 isvalid: true"
    )
    assert batch_lines[7] == (
        "baseOffset: 7 lastOffset: 8 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1 "
        "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
        "deleteHorizonMs: OptionalLong.empty position: 549 CreateTime: 1587580221885 size: 84 "
        "magic: 2 compresscodec: none crc: 2447280284 isvalid: true"
    )
    assert err == ""
    assert (run.dumped, run.failed) == (1, 0)
    assert digest(log) == before


@pytest.mark.parametrize(
    ("topic", "count"),
    [("first_topic-0", 11), ("first_topic-1", 12), ("first_topic-2", 18), ("new_topic-0", 2)],
)
def test_corpus_deep_iteration_counts(kafka_corpus: Path, topic: str, count: int) -> None:
    log = kafka_corpus / topic / f"{SEGMENT}.log"
    out, err, _ = run_dump([log], deep_iteration=True)
    records = [line for line in out.splitlines() if line.startswith("| offset: ")]
    assert len(records) == count
    assert [int(line.split()[2]) for line in records] == list(range(count))
    assert all(" CreateTime: " in line and line.endswith("headerKeys: []") for line in records)
    assert err == ""


def test_corpus_print_data_log(kafka_corpus: Path) -> None:
    out, _, _ = run_dump([kafka_corpus / "new_topic-0" / f"{SEGMENT}.log"], print_data_log=True)
    records = [line for line in out.splitlines() if line.startswith("|")]
    assert records[0] == (
        "| offset: 0 CreateTime: 1587577031689 keySize: -1 valueSize: 38 sequence: -1 "
        "headerKeys: [] payload: this is test message that doesnt exist"
    )
    assert records[1].endswith("payload: another message")


@pytest.mark.corpus
def test_corpus_offsets_decoder(kafka_corpus: Path) -> None:
    expected = {12: 470, 17: 3, 18: 499, 32: 50, 33: 3}
    groups = set()
    for partition, count in expected.items():
        log = kafka_corpus / f"__consumer_offsets-{partition}" / f"{SEGMENT}.log"
        out, err, run = run_dump([log], offsets_decoder=True)
        records = [line for line in out.splitlines() if line.startswith("| offset: ")]
        assert len(records) == count
        for line in records:
            assert "Error at offset" not in line and "Unknown record type" not in line
            key_json, payload = line.split(" key: ", 1)[1].split(" payload: ", 1)
            key = json.loads(key_json)
            assert key["type"] in ("0", "1", "2")
            groups.add(key["data"]["group"])
            if payload != "<DELETE>":
                value = json.loads(payload)
                assert set(value) == {"version", "data"}
        assert run.dumped == 1
        # Compacted partitions have gaps: reported on stderr, newest first, as Kafka does.
        if err:
            assert err.startswith("Non-consecutive offsets in ")
    assert "my-second-application" in groups


def test_corpus_group_metadata_is_decoded_with_consumer_protocol(kafka_corpus: Path) -> None:
    log = kafka_corpus / "__consumer_offsets-18" / f"{SEGMENT}.log"
    out, _, _ = run_dump([log], offsets_decoder=True)
    first = next(line for line in out.splitlines() if line.startswith("| offset: 0 "))
    assert ' key: {"type":"2","data":{"group":"my-first-application"}} payload: ' in first
    assert '"assignment":{"assignedPartitions":[{"topic":"first_topic","partitions":[0,1,2]}]' in (
        first
    )


# --------------------------------------------------------------------------------------------
# Oracle: batches built by kafka-python


def test_kafka_python_v2_batch(tmp_path: Path) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, False, 42, 3, 10, 1 << 20)
    for i in range(5):
        builder.append(i, 5000 + i, b"key%d" % i, b"value%d" % i, [("h1", b"x"), ("h2", None)])
    data = bytes(builder.build())
    struct.pack_into(">q", data := bytearray(data), 0, 100)  # base offset 100
    log = write_log(tmp_path, bytes(data), name="00000000000000000100")
    out, _, _ = run_dump([log], key_decoder="string", value_decoder="string")
    lines = out.splitlines()
    assert lines[1] == "Log starting offset: 100"
    assert lines[2].startswith(
        "baseOffset: 100 lastOffset: 104 count: 5 baseSequence: 10 lastSequence: 14 "
        "producerId: 42 producerEpoch: 3 "
    )
    assert lines[3] == (
        "| offset: 100 CreateTime: 5000 keySize: 4 valueSize: 6 sequence: 10 headerKeys: [h1,h2] "
        "key: key0 payload: value0"
    )
    assert lines[7].startswith("| offset: 104 CreateTime: 5004 ")
    assert lines[7].endswith("sequence: 14 headerKeys: [h1,h2] key: key4 payload: value4")


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1])
def test_kafka_python_legacy_message_sets(tmp_path: Path, magic: int, codec: int) -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for i in range(3):
        builder.append(i, 7000 + i, b"k%d" % i if i else None, b"v%d" % i)
    data = bytearray(builder.build())
    if codec:
        # A broker stores a compressed wrapper under the offset of its last inner message;
        # kafka-python's builder (a producer) leaves that to the broker.
        struct.pack_into(">q", data, 0, 2)
    log = write_log(tmp_path, bytes(data))
    out, err, _ = run_dump([log], print_data_log=True)
    lines = out.splitlines()
    ts_type = "NoTimestampType" if magic == 0 else "CreateTime"
    shallow = [line for line in lines if line.startswith("offset: ")]
    records = [line for line in lines if line.startswith("| ")]
    assert len(shallow) == (1 if codec else 3)
    assert all(f" magic: {magic} " in line and line.endswith("isvalid: true") for line in shallow)
    assert shallow[-1].startswith("offset: 2 position: ")
    assert len(records) == 3
    for i, line in enumerate(records):
        ts = -1 if magic == 0 else 7000 + i
        key = -1 if i == 0 else 2
        assert line.startswith(f"| offset: {i} {ts_type}: {ts} keySize: {key} valueSize: 2 ")
        # Kafka's stray brace after the crc, kept on purpose.
        assert " isValid: true crc: " in line and "} " in line
        assert line.endswith(f"payload: v{i}")
        assert ("key: k" in line) == (i != 0)
    assert err == ""


# --------------------------------------------------------------------------------------------
# Bad input: clear output, no crash, nothing modified


@pytest.mark.parametrize(
    ("tail", "problem"),
    [
        (b"", False),  # torn: cut inside the last batch (set up below)
        (os.urandom(3) + b"\xff" * 40, True),  # garbage: a negative length field
        (b"\x00" * 4096, True),  # zero-filled tail of a crashed preallocation
        (struct.pack(">qi", 9, 2**31 - 1) + b"\x02" * 20, True),  # huge length field
    ],
)
def test_bad_tails(tmp_path: Path, tail: bytes, problem: bool) -> None:
    log = simple_log(tmp_path)
    good = log.read_bytes()
    sizes = []
    position = 0
    while position < len(good):
        size = struct.unpack_from(">i", good, position + 8)[0] + 12
        sizes.append(size)
        position += size
    if tail == b"":
        data = good[:-5]  # the last batch is torn
        valid = len(good) - sizes[-1]
    else:
        data = good + tail
        valid = len(good)
    log.write_bytes(data)
    before = digest(log)
    out, err, run = run_dump([log], deep_iteration=True)
    lines = out.splitlines()
    assert lines[-1] == f"Found {len(data) - valid} invalid bytes at the end of {log.name}"
    whole = [n for n in range(len(sizes)) if sum(sizes[: n + 1]) <= valid]
    assert sum(line.startswith("baseOffset: ") for line in lines) == len(whole)
    if problem:
        assert f"{log} at position {valid}: " in err
    else:
        assert err == ""
    assert run.dumped == 1
    assert digest(log) == before


def test_empty_log(tmp_path: Path) -> None:
    log = write_log(tmp_path)
    out, err, run = run_dump([log], deep_iteration=True)
    assert out == f"Dumping {log}\nLog starting offset: 0\n"
    assert err == "" and run.dumped == 1


def test_flipped_byte_is_reported_invalid(tmp_path: Path) -> None:
    log = simple_log(tmp_path, batches=2)
    data = bytearray(log.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records
    log.write_bytes(bytes(data))
    before = digest(log)
    out, err, _ = run_dump([log], deep_iteration=True)
    batch_lines = [line for line in out.splitlines() if line.startswith("baseOffset")]
    assert batch_lines[0].endswith("isvalid: false")
    assert batch_lines[1].endswith("isvalid: true")
    assert "Found" not in out
    assert digest(log) == before
    # The records of the damaged batch may or may not decode; either way no traceback.
    assert "Traceback" not in err


def test_undecodable_records_are_reported_and_skipped(tmp_path: Path) -> None:
    good = build_batch([(1, b"k", b"v")], base_offset=0)
    bad = bytearray(build_batch([(2, b"k", b"v")], base_offset=1))
    struct.pack_into(">i", bad, 57, 1000)  # record count far beyond what the bytes hold
    log = write_log(tmp_path, good, bytes(bad), build_batch([(3, b"k", b"v")], base_offset=2))
    out, err, _ = run_dump([log], deep_iteration=True)
    assert [line.split()[2] for line in out.splitlines() if line.startswith("|")] == ["0", "2"]
    assert "cannot decode the records of this batch" in err


def test_missing_directory_and_unknown_files(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    out, err, run = run_dump([tmp_path / "nope.log", tmp_path, other])
    assert out == f"Dumping {other}\n"
    assert f"{tmp_path / 'nope.log'}: no such file" in err
    assert "is a directory" in err
    assert f"Ignoring unknown file {other}" in err
    assert (run.dumped, run.failed, run.ignored) == (0, 2, 1)


def test_max_bytes_stops_at_whole_batches_and_prints_no_tail(tmp_path: Path) -> None:
    log = simple_log(tmp_path, batches=4)
    first_size = struct.unpack_from(">i", log.read_bytes(), 8)[0] + 12
    out, _, _ = run_dump([log], max_bytes=first_size * 2 + 5)
    assert sum(line.startswith("baseOffset") for line in out.splitlines()) == 2
    assert "invalid bytes" not in out


def test_batches_too_large_for_memory_are_checksummed_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = simple_log(tmp_path, batches=3, per_batch=50)
    expected, _, _ = run_dump([log])
    from klog.tools.dump import log_file

    monkeypatch.setattr(log_file, "IN_MEMORY_BATCH_BOUND", 100)
    monkeypatch.setattr(log_file, "CHUNK_SIZE", 64)
    out, err, _ = run_dump([log], max_message_size=100)
    assert out == expected
    _, err, _ = run_dump([log], max_message_size=100, deep_iteration=True)
    assert err.count("too large to decode in memory") == 3


def test_non_consecutive_offsets_report(tmp_path: Path) -> None:
    log = write_log(
        tmp_path,
        build_batch([(1, None, b"a"), (2, None, b"b")], base_offset=0),
        build_batch([(3, None, b"c")], base_offset=5),
        build_batch([(4, None, b"d")], base_offset=9),
    )
    _, err, _ = run_dump([log], deep_iteration=True)
    assert err == (
        f"Non-consecutive offsets in {log}\n  5 is followed by 9\n  1 is followed by 5\n"
    )


# --------------------------------------------------------------------------------------------
# Control batches and internal-topic decoders


def test_control_records(tmp_path: Path) -> None:
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 5)
    log = write_log(
        tmp_path,
        build_control_batch(marker, producer_id=9, producer_epoch=1, timestamp=77),
    )
    out, _, _ = run_dump([log], print_data_log=True)
    lines = out.splitlines()
    assert "isTransactional: true isControl: true" in lines[2]
    assert lines[3] == (
        "| offset: 0 CreateTime: 77 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 5"
    )


def test_transaction_log_decoder(tmp_path: Path) -> None:
    key = it.TransactionLogKey("txn-1").encode()
    ongoing = it.TransactionLogValue(
        producer_id=4,
        producer_epoch=2,
        transaction_timeout_ms=60000,
        transaction_status=it.TransactionState.ONGOING,
        transaction_partitions=(it.TxnPartitions("t", (0, 1)), it.TxnPartitions("u", (3,))),
        transaction_last_update_timestamp_ms=123,
        transaction_start_timestamp_ms=100,
    ).encode()
    log = write_log(tmp_path, build_batch([(1, key, ongoing), (2, key, None)]))
    out, _, _ = run_dump([log], transaction_log_decoder=True)
    records = [line for line in out.splitlines() if line.startswith("|")]
    assert records[0].endswith(
        " key: transaction_metadata::transactionalId=txn-1 payload: producerId:4,producerEpoch:2,"
        "state=Ongoing,partitions=[t-0,t-1,u-3],txnLastUpdateTimestamp=123,txnTimeoutMs=60000"
    )
    assert records[1].endswith(
        " key: transaction_metadata::transactionalId=txn-1 payload: <DELETE>"
    )


def test_offsets_decoder_errors_are_lines_not_crashes(tmp_path: Path) -> None:
    good_key = it.OffsetCommitKey("g", "t", 0).encode()
    log = write_log(
        tmp_path,
        build_batch(
            [
                (1, None, b"x"),
                (2, struct.pack(">h", 9) + b"zz", b"x"),
                (3, good_key, b"\x00\x03\x00"),
                (4, good_key, None),
            ]
        ),
    )
    out, _, _ = run_dump([log], offsets_decoder=True)
    records = [line for line in out.splitlines() if line.startswith("|")]
    assert records[0].endswith(
        "key: Failed to decode message at offset 0 using offset topic decoder "
        "(message had a missing key)"
    )
    assert records[1].endswith("key: Unknown record type 9 at offset 1, skipping.")
    assert " key: Error at offset 2, skipping. " in records[2]
    assert records[3].endswith(
        'key: {"type":"1","data":{"group":"g","topic":"t","partition":0}} payload: <DELETE>'
    )


@pytest.mark.parametrize(
    ("decoder", "value", "shown"),
    [
        ("hex", b"\x01\xab", "01ab"),
        ("base64", b"hi!", "aGkh"),
        ("int", struct.pack(">i", -7), "-7"),
        ("kafka.serializer.LongDecoder", struct.pack(">q", 2**40), str(2**40)),
        ("int", b"\x01", "<not an int32: 1 byte(s)>"),
        ("kafka.serializer.StringDecoder", b"caf\xc3\xa9 \xff", "café \ufffd"),
    ],
)
def test_value_decoders(tmp_path: Path, decoder: str, value: bytes, shown: str) -> None:
    log = write_log(tmp_path, build_batch([(1, None, value)]))
    out, _, _ = run_dump([log], value_decoder=decoder)
    assert out.splitlines()[-1].endswith(f"payload: {shown}")


def test_unknown_decoder_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown decoder"):
        DumpOptions(key_decoder="com.example.Nope")


def test_skip_record_metadata(tmp_path: Path) -> None:
    log = write_log(tmp_path, build_batch([(1, b"k", b"v")]))
    out, _, _ = run_dump([log], print_data_log=True, skip_record_metadata=True)
    assert out.splitlines()[-1] == "| key: k payload: v"


# --------------------------------------------------------------------------------------------
# Indexes, snapshots, transaction indexes


def batch_positions(log: Path) -> list[tuple[int, int, int]]:
    """(last offset, position, max timestamp) of each batch, from the bytes."""
    buf = log.read_bytes()
    out = []
    position = 0
    while position < len(buf):
        fields = V2_HEADER.unpack_from(buf, position)
        out.append((fields[0] + fields[6], position, fields[8]))
        position += fields[1] + 12
    return out


def test_offset_index(tmp_path: Path) -> None:
    log = simple_log(tmp_path, batches=4)
    batches = batch_positions(log)
    index = tmp_path / f"{SEGMENT}.index"
    entries = [(batches[1][0], batches[1][1]), (batches[3][0], batches[3][1])]
    index.write_bytes(b"".join(struct.pack(">ii", o, p) for o, p in entries) + b"\x00" * 80)
    before = digest(index), digest(log)
    out, err, _ = run_dump([index])
    assert out.splitlines()[1:] == [f"offset: {o} position: {p}" for o, p in entries]
    assert err == ""
    assert digest(index) == before[0]
    # An entry pointing at the wrong batch is a mismatch, reported at the end on stderr.
    index.write_bytes(struct.pack(">ii", batches[1][0], batches[2][1]))
    out, err, _ = run_dump([index], verify_index_only=True)
    assert out == f"Dumping {index}\n"
    assert err == (
        f"Mismatches in :{index}\n  Index offset: {batches[1][0]}, log offset: {batches[2][0]}\n"
    )
    index.write_bytes(struct.pack(">ii", 1, 10**6))  # past the end of the log
    _, err, _ = run_dump([index], verify_index_only=True)
    assert "  Index offset: 1, log offset: -1" in err
    index.write_bytes(b"")
    out, _, _ = run_dump([index])
    assert out.splitlines()[-1] == f"{index} is empty."
    assert digest(log) == before[1]  # the log was only read


def test_index_sanity_check(tmp_path: Path) -> None:
    log = simple_log(tmp_path, batches=3)
    batches = batch_positions(log)
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(struct.pack(">ii", batches[1][0], batches[1][1]))
    out, err, _ = run_dump([index], index_sanity_check=True)
    assert out.splitlines()[-1] == f"{index} passed sanity check."
    index.write_bytes(struct.pack(">ii", 3, 100) + b"\x00" * 8)
    out, err, _ = run_dump([index], index_sanity_check=True)
    assert "passed" not in out and "failed sanity check" in err


def test_time_index(tmp_path: Path) -> None:
    log = simple_log(tmp_path, batches=3)
    batches = batch_positions(log)
    timeindex = tmp_path / f"{SEGMENT}.timeindex"
    timeindex.write_bytes(
        b"".join(struct.pack(">qi", ts, o) for o, _p, ts in batches[1:]) + b"\x00" * 24
    )
    out, err, _ = run_dump([timeindex])
    assert out.splitlines()[1:] == [f"timestamp: {ts} offset: {o}" for o, _p, ts in batches[1:]]
    assert err == ""
    timeindex.write_bytes(struct.pack(">qi", 5, batches[1][0]) + struct.pack(">qi", 5, 2**20))
    out, err, _ = run_dump([timeindex], verify_index_only=True)
    assert out == f"Dumping {timeindex}\n"
    assert err == (
        f"Found timestamp mismatch in :{timeindex}\n"
        f"  Index timestamp: 5, log timestamp: {batches[1][2]}\n"
        "The following indexed offsets are not found in the log.\n"
        f"Indexed offset: {2**20}, found log offset: -1\n"
    )


def test_producer_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.snapshot"
    write_snapshot(
        path,
        [
            ProducerSnapshotEntry(7, 1, 4, 99, 4, 123, 0, -1),
            ProducerSnapshotEntry(8, 2, 1, 90, 3, 124, 5, 80),
        ],
    )
    out, _, _ = run_dump([path])
    assert out.splitlines()[1:] == [
        "producerId: 7 producerEpoch: 1 coordinatorEpoch: 0 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 123 firstSequence: 0 lastSequence: 4 lastOffset: 99 "
        "offsetDelta: 4 timestamp: 123",
        "producerId: 8 producerEpoch: 2 coordinatorEpoch: 5 currentTxnFirstOffset: "
        "OptionalLong[80] lastTimestamp: 124 firstSequence: 2147483646 lastSequence: 1 "
        "lastOffset: 90 offsetDelta: 3 timestamp: 124",
    ]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    out, err, run = run_dump([path])
    assert out == f"Dumping {path}\n"
    assert "is corrupt (CRC is no longer valid)" in err
    assert run.dumped == 1


def test_corpus_empty_snapshot(kafka_corpus: Path) -> None:
    path = kafka_corpus / "first_topic-0" / "00000000000000000011.snapshot"
    out, err, _ = run_dump([path])
    assert out == f"Dumping {path}\n" and err == ""


def test_txn_index(tmp_path: Path) -> None:
    path = tmp_path / f"{SEGMENT}.txnindex"
    path.write_bytes(AbortedTxn(5, 10, 20, 30).to_bytes() + AbortedTxn(6, 21, 25, 40).to_bytes())
    out, _, _ = run_dump([path])
    assert out.splitlines()[1:] == [
        "version: 0 producerId: 5 firstOffset: 10 lastOffset: 20 lastStableOffset: 30",
        "version: 0 producerId: 6 firstOffset: 21 lastOffset: 25 lastStableOffset: 40",
    ]


# --------------------------------------------------------------------------------------------
# JSON


def test_json_events(tmp_path: Path) -> None:
    log = simple_log(tmp_path, batches=1)
    events = list(DumpRun([str(log)], DumpOptions(print_data_log=True)))
    docs = [event.to_json() for event in events]
    assert [d["type"] for d in docs] == ["file", "log_start_offset", "batch", "record", "record"]
    assert docs[2]["baseOffset"] == 0 and docs[2]["count"] == 2 and docs[2]["isvalid"] is True
    assert docs[3] == {
        "type": "record",
        "offset": 0,
        "timestampType": "CreateTime",
        "timestamp": 1000,
        "keySize": 2,
        "valueSize": 2,
        "sequence": -1,
        "headerKeys": [],
        "key": "k0",
        "payload": "v0",
    }
    json.dumps(docs)


def test_text_fast_path_renders_the_same_text(kafka_corpus: Path, tmp_path: Path) -> None:
    marker = EndTransactionMarker(ControlRecordType.ABORT, 2)
    built = write_log(
        tmp_path,
        build_batch([(1, b"k", b"v", [("h", b"x")]), (2, None, None)], base_offset=0),
        build_control_batch(marker, producer_id=1, producer_epoch=0, base_offset=2, timestamp=3),
        b"\x00" * 30,
    )
    logs = [built, kafka_corpus / "__consumer_offsets-32" / f"{SEGMENT}.log"]
    for options in ({"deep_iteration": True}, {"print_data_log": True}, {}):
        slow = "".join(e.to_kafka_line() for e in DumpRun(logs, DumpOptions(**options)))
        fast_run = DumpRun(logs, DumpOptions(**options), text_fast_path=True)
        events = list(fast_run)
        assert "".join(e.to_kafka_line() for e in events) == slow
        if options.get("deep_iteration"):
            assert any(isinstance(e, dump.RecordLinesEvent) for e in events)
            assert not any(isinstance(e, dump.RecordEvent) and not e.ctx.is_control for e in events)


def test_text_fast_path_matches_record_by_record_text_on_varied_batches(tmp_path: Path) -> None:
    from klog.protocol.records.batch import TimestampType

    batches = [
        # headers (one holding "%", a formatting character), null keys and values
        build_batch(
            [(5, b"k", b"v", [("%s%d", b"x"), ("b", None)]), (4, None, None, ()), (9, b"", b"")],
            base_offset=0,
            producer_id=3,
            base_sequence=2**31 - 2,
        ),
        # identical records: every field but the offset is constant across the batch
        build_batch([(7, None, b"x" * 100, ())] * 70, base_offset=3, compression=1),
        build_batch(
            [(i, b"k", b"v" * i, [("h", None)]) for i in range(5)],
            base_offset=80,  # a gap after offset 72
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=1234,
        ),
    ]
    # A batch whose second record is damaged (CRC left wrong): Kafka's tool prints the
    # first record, then the error; the fast path must step aside for it.
    damaged = bytearray(build_batch([(1, b"a", b"b", ()), (2, b"c", b"d", ())], base_offset=85))
    damaged[-3] = 0x20  # the last value length: 16 bytes, past the record
    log = write_log(tmp_path, *batches, bytes(damaged))
    slow_out, slow_err, slow_run = run_dump([log], deep_iteration=True)
    assert "offset: 85" in slow_out and "cannot decode" in slow_err
    fast_run = DumpRun([str(log)], DumpOptions(deep_iteration=True), text_fast_path=True)
    out, err = [], []
    for event in fast_run:
        (out if event.stream == dump.OUT else err).append(event.to_kafka_line())
    assert "".join(out) == slow_out
    assert "".join(err) == slow_err
    assert "headerKeys: [%s%d,b]" in slow_out
    assert "sequence: 2147483647" in slow_out and "sequence: 0 " in slow_out
    assert fast_run._tally.non_consecutive == slow_run._tally.non_consecutive != {}


# --------------------------------------------------------------------------------------------
# File names and index shapes (issue 18, item 7)


def test_only_kafka_file_names_are_dumped_unless_forced(tmp_path: Path) -> None:
    names = ["app.log", "1.index", "0000000000000000000a.timeindex", "x.snapshot", "y.checkpoint"]
    for name in names:
        (tmp_path / name).write_bytes(b"not kafka data\n")
    out, err, run = run_dump([tmp_path / n for n in names])
    assert out == "" and (run.failed, run.dumped) == (len(names), 0)
    assert err.splitlines()[0] == (
        f"{tmp_path / 'app.log'}: not a Kafka segment file (expected <20-digit base offset>.log);"
        " --force dumps it anyway"
    )
    assert "<20-digit offset>-<10-digit epoch>.checkpoint" in err.splitlines()[-1]
    out, err, run = run_dump([tmp_path / "app.log"], force=True)
    assert run.dumped == 1 and "the file name does not start with a base offset" in err
    # Kafka's own names pass, unknown suffixes are still only "ignored".
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n0\n")
    _, err, run = run_dump([tmp_path / "leader-epoch-checkpoint"])
    assert run.failed == 0 and err.startswith("Ignoring unknown file")


def test_corrupt_index_is_counted_and_reported(tmp_path: Path) -> None:
    log = simple_log(tmp_path, batches=3)
    batches = batch_positions(log)
    index = tmp_path / f"{SEGMENT}.index"
    entries = [(batches[1][0], batches[1][1]), (batches[2][0], batches[2][1])]
    index.write_bytes(
        b"".join(struct.pack(">ii", o, p) for o, p in entries) + struct.pack(">ii", 99, 10**6)
    )
    out, err, run = run_dump([index])
    assert out.splitlines()[1:] == [f"offset: {o} position: {p}" for o, p in entries]
    assert (run.dumped, run.damaged) == (1, 1)
    assert f"entry 2 (byte 16: offset 99, position {10**6}) is corrupt: position {10**6} is " in err
    assert f"past the end of {SEGMENT}.log" in err
    # Kafka's mismatch report still lists it.
    assert "  Index offset: 99, log offset: -1" in err
