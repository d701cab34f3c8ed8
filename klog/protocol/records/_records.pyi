"""Type stub of klog/protocol/records/_records.c, the C twin of validate.check_records
(mypy cannot read an extension module)."""

# (min_ts_delta, max_ts_delta) when valid; (1, message, None) when malformed; (2 or 3,
# summary, [(index, message), ...]) when a rule is broken (3: some timestamp out of range).
def check_v2(
    records: bytes | bytearray | memoryview,
    count: int,
    offset_rule: bool,
    require_keys: bool,
    batch_position: int,
    base_timestamp: int,
    timestamp_range: tuple[int, int] | None,
    /,
) -> tuple[int, int] | tuple[int, str, list[tuple[int, str | None]] | None]: ...
