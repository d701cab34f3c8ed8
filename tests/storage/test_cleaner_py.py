"""klog/storage/cleaner_py.py against its C twin _cleaner.c: same inputs, same results.

Every function is run on both with the same arguments (tables copied first) and the
results -- return values and the table bytes -- must be equal; malformed sections must make
both raise ValueError. Whole cleanings of logs with transactions (aborted data, markers and
their delete horizons) must leave byte-identical segments and indexes on either path.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klog.protocol.records.v2 import encode_record
from klog.storage import cleaner_py as py
from tests.storage.test_cleaner import TXN_OPS, make_log, run_txn_ops

c = pytest.importorskip("klog.storage._cleaner", reason="the C extension is not built")

INT64 = st.integers(-(2**63), 2**63 - 1)
KEYS = st.one_of(st.none(), st.binary(max_size=3))  # few keys: collisions and overwrites
VALUES = st.one_of(st.none(), st.binary(max_size=8))


@st.composite
def sections(draw: st.DrawFn) -> tuple[bytes, int]:
    """A v2 records section (bytes, count) with random deltas, keys, values, headers."""
    n = draw(st.integers(0, 12))
    parts = []
    for _ in range(n):
        parts.append(
            encode_record(
                draw(st.integers(-(2**31), 2**31 - 1)),
                draw(INT64),
                draw(KEYS),
                draw(VALUES),
                draw(st.lists(st.tuples(st.text(max_size=3), VALUES), max_size=2)),
                draw(st.integers(0, 255)),
            )
        )
    return b"".join(parts), n


def _both(name: str, table: bytearray, *args: object) -> tuple[object, object]:
    """Run ``name`` on copies of ``table``; results and tables must match."""
    t_py, t_c = bytearray(table), bytearray(table)
    out_py = getattr(py, name)(t_py, *args)
    out_c = getattr(c, name)(t_c, *args)
    assert out_py == out_c
    assert t_py == t_c
    table[:] = t_py
    return out_py, out_c


def test_md5_is_md5() -> None:
    for n in (0, 1, 55, 56, 63, 64, 65, 119, 120, 1000):
        data = bytes(range(256)) * 4
        assert c.md5(data[:n]) == hashlib.md5(data[:n]).digest() == py.md5(data[:n])


@settings(max_examples=200, deadline=None)
@given(
    slots=st.integers(1, 9),
    ops=st.lists(st.tuples(st.booleans(), st.binary(max_size=2), INT64), max_size=40),
)
def test_table_put_and_get_agree(slots: int, ops: list[tuple[bool, bytes, int]]) -> None:
    table = bytearray(slots * py.ENTRY_SIZE)
    for put, key, offset in ops:
        h = py.md5(key)
        if put:
            _both("table_put", table, slots, h, offset)
        else:
            _both("table_get", table, slots, h)


@settings(max_examples=200, deadline=None)
@given(
    section=sections(),
    slots=st.integers(1, 16),
    base_offset=INT64,
    start_offset=st.integers(-5, 2**31),
    max_size=st.integers(0, 16),
    prefill=st.lists(st.binary(max_size=3), max_size=6),
)
def test_map_records_agrees(
    section: tuple[bytes, int], slots: int, base_offset: int, start_offset: int,
    max_size: int, prefill: list[bytes],
) -> None:
    data, count = section
    table = bytearray(slots * py.ENTRY_SIZE)
    size = 0
    for key in prefill:
        size += max(py.table_put(table, slots, py.md5(key), 7), 0)
    _both("map_records", table, slots, size, max_size, data, count, base_offset, start_offset,
          0)


@settings(max_examples=200, deadline=None)
@given(
    section=sections(),
    slots=st.integers(1, 16),
    latest=INT64,
    base_offset=INT64,
    base_timestamp=INT64,
    retain=st.booleans(),
    prefill=st.lists(st.tuples(st.binary(max_size=3), INT64), max_size=8),
)
def test_filter_records_agrees(
    section: tuple[bytes, int], slots: int, latest: int, base_offset: int,
    base_timestamp: int, retain: bool, prefill: list[tuple[bytes, int]],
) -> None:
    data, count = section
    table = bytearray(slots * py.ENTRY_SIZE)
    for key, offset in prefill:
        py.table_put(table, slots, py.md5(key), offset)
    _both("filter_records", table, slots, latest, data, count, base_offset, base_timestamp,
          retain, 0)


@settings(max_examples=200, deadline=None)
@given(section=sections(), shift=INT64)
def test_rebase_timestamps_agrees(section: tuple[bytes, int], shift: int) -> None:
    data, count = section
    assert py.rebase_timestamps(data, count, shift, 0) == c.rebase_timestamps(
        data, count, shift, 0
    )


@settings(max_examples=300, deadline=None)
@given(
    section=sections(), cut=st.integers(0, 64), extra=st.integers(0, 3),
    junk=st.binary(max_size=4),
)
def test_malformed_sections_fail_alike(
    section: tuple[bytes, int], cut: int, extra: int, junk: bytes
) -> None:
    """Truncated sections, junk bytes, counts beyond or below the records: both refuse
    them with the same message (walk_records'), or both agree."""
    data, count = section
    data = data[: max(len(data) - cut, 0)] + junk
    count += extra - 1
    calls = [
        ("map_records", lambda t: (t, 4, 0, 4, data, count, 0, 0, 77)),
        ("filter_records", lambda t: (t, 4, 2**40, data, count, 0, 0, False, 77)),
        ("rebase_timestamps", lambda t: (data, count, 5, 77)),
    ]
    for name, args in calls:
        results = []
        for impl in (py, c):
            table = bytearray(4 * py.ENTRY_SIZE)  # each its own
            try:
                results.append(("ok", getattr(impl, name)(*args(table))))
            except ValueError as exc:
                results.append(("ValueError", str(exc)))
        assert results[0] == results[1], name
        if results[0][0] == "ValueError":
            assert "batch at position 77" in str(results[0][1]) or "position" in str(
                results[0][1]
            )


def test_full_table_refuses_new_keys_alike() -> None:
    for impl in (py, c):
        table = bytearray(3 * py.ENTRY_SIZE)
        assert [impl.table_put(table, 3, py.md5(bytes([i])), i) for i in range(3)] == [1, 1, 1]
        assert impl.table_put(table, 3, py.md5(b"new"), 9) == -1
        assert impl.table_put(table, 3, py.md5(bytes([1])), 10) == 0
        assert impl.table_get(table, 3, py.md5(bytes([1]))) == 10
        assert impl.table_get(table, 3, py.md5(b"absent")) == -1


def _files(log_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log_dir.iterdir())
            if p.suffix in (".log", ".index", ".timeindex", ".txnindex")}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(ops=TXN_OPS, segment_bytes=st.integers(200, 2000))
def test_c_and_python_clean_transactional_logs_alike(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, object, object]],
    segment_bytes: int,
) -> None:
    results = []
    for use_c in (False, True):
        log = make_log(tmp_path_factory.mktemp("alike"), segment_bytes=segment_bytes)
        run_txn_ops(log, ops, use_c=use_c)
        log.close()
        results.append(_files(log.dir))
    assert results[0] == results[1]
