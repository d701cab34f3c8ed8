"""Type stub of klog/protocol/records/_records.c, the C twin of validate.check_records
(mypy cannot read an extension module)."""

# (0, None, min_ts_delta, max_ts_delta, None) when valid, (1, message, 0, 0, None) when
# malformed, (2 or 3, summary, 0, 0, [(index, message), ...]) when a rule is broken (3:
# some timestamp out of range). ``rules``: bit 1 the offset rule, bit 2 the key rule.
def check_v2(
    records: bytes | bytearray | memoryview,
    count: int,
    rules: int,
    batch_position: int,
    base_timestamp: int,
    timestamp_range: tuple[int, int] | None,
    /,
) -> tuple[int, str | None, int, int, list[tuple[int, str | None]] | None]: ...
