"""``klog dump-segment``: Kafka's kafka-dump-log.sh for segment files (formatting only).

The logic lives in ``klog.tools.dump``; this module parses options, prints each event as
Kafka's line (stdout or stderr, exactly where Kafka prints it) or as one JSON object per
line with ``--json``, and chooses the exit status.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator
from itertools import islice
from operator import attrgetter, methodcaller
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from klog.cli import console

if TYPE_CHECKING:
    from klog.tools.dump import DumpEvent

# Kafka's defaults for --max-message-size and --max-bytes. Spelled out here (and pinned to
# klog.tools.dump's by a test) so that starting the CLI does not load the dump library.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
DEFAULT_MAX_BYTES = 2**31 - 1

# Events rendered per write: large writes keep the output side cheap per record.
_CHUNK_EVENTS = 2048
# Show a progress bar (stderr, TTY only) for logs at least this big.
_PROGRESS_MIN_BYTES = 64 * 1024 * 1024


def register(app: typer.Typer) -> None:
    """Add ``dump-segment`` to ``app``."""
    app.command(
        "dump-segment",
        help=(
            "Print the contents of log segment files (.log, .index, .timeindex, .snapshot, "
            ".txnindex) as Kafka's kafka-dump-log.sh does.\n\n"
            "Exit 1 when a file could not be dumped (missing, not named as a Kafka segment "
            "file, unreadable) or an index file is corrupt (the bad entry is named)."
        ),
        no_args_is_help=True,
    )(dump_segment)


def dump_segment(
    files: list[Path] = typer.Argument(
        None, help="Segment files to dump.", show_default=False
    ),
    files_opt: list[str] = typer.Option(
        None,
        "--files",
        help="Files to dump; repeatable and/or comma-separated, as in Kafka.",
        show_default=False,
    ),
    print_data_log: bool = typer.Option(
        False, "--print-data-log", help="Print record keys and values (implies deep iteration)."
    ),
    deep_iteration: bool = typer.Option(
        False, "--deep-iteration", help="Print every record, not only batches."
    ),
    verify_index_only: bool = typer.Option(
        False, "--verify-index-only", help="Check index entries against the log; print no entries."
    ),
    index_sanity_check: bool = typer.Option(
        False, "--index-sanity-check", help="Only run the index sanity check."
    ),
    max_message_size: int = typer.Option(
        DEFAULT_MAX_MESSAGE_SIZE,
        "--max-message-size",
        min=1,
        help="Largest batch an index entry may point at.",
    ),
    max_bytes: int = typer.Option(
        DEFAULT_MAX_BYTES,
        "--max-bytes",
        min=0,
        help="Stop after this many bytes of each .log file.",
    ),
    offsets_decoder: bool = typer.Option(
        False, "--offsets-decoder", help="Decode records as __consumer_offsets data."
    ),
    transaction_log_decoder: bool = typer.Option(
        False, "--transaction-log-decoder", help="Decode records as __transaction_state data."
    ),
    key_decoder_class: str | None = typer.Option(
        None,
        "--key-decoder-class",
        help="Key decoder: string, hex, base64, int, long, or kafka.serializer.*Decoder.",
        show_default=False,
    ),
    value_decoder_class: str | None = typer.Option(
        None,
        "--value-decoder-class",
        help="Value decoder: string, hex, base64, int, long, or kafka.serializer.*Decoder.",
        show_default=False,
    ),
    skip_record_metadata: bool = typer.Option(
        False, "--skip-record-metadata", help="Do not print record metadata, only data."
    ),
    json_output: bool = typer.Option(
        False, "--json", help="One JSON object per batch, record or entry (JSON Lines)."
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Dump a .log/.index/... file even if it is not named as Kafka names segment "
        "files (<20-digit base offset>.log); without it such a file is refused.",
    ),
) -> None:
    """Print the contents of log segment files as Kafka's kafka-dump-log.sh does."""
    paths = [str(p) for p in files or []]
    for value in files_opt or []:
        paths.extend(part for part in value.split(",") if part)
    if not paths:
        console.fail("no files given (pass FILES or --files)", console.EXIT_USAGE)
    from klog.tools.dump import DumpOptions, DumpRun

    try:
        options = DumpOptions(
            print_data_log=print_data_log,
            deep_iteration=deep_iteration,
            verify_index_only=verify_index_only,
            index_sanity_check=index_sanity_check,
            max_message_size=max_message_size,
            max_bytes=max_bytes,
            offsets_decoder=offsets_decoder,
            transaction_log_decoder=transaction_log_decoder,
            key_decoder=key_decoder_class,
            value_decoder=value_decoder_class,
            skip_record_metadata=skip_record_metadata,
            force=force,
        )
    except ValueError as exc:
        console.fail(str(exc), console.EXIT_USAGE)
    if offsets_decoder and transaction_log_decoder:
        console.fail(
            "--offsets-decoder and --transaction-log-decoder exclude each other",
            console.EXIT_USAGE,
        )

    # Kafka's text needs no per-record event objects: let the library render per batch.
    run = DumpRun(paths, options, text_fast_path=not json_output)
    _make_stdout_safe()
    # Everything imported so far lives as long as the process: keep it out of the garbage
    # collector's way, so the collections millions of records trigger stay cheap.
    gc.freeze()
    try:
        with _progress(paths) as events_with_progress:
            events = events_with_progress(iter(run))
            if json_output:
                _write_json(events)
            else:
                _write_kafka_lines(events)
        sys.stdout.flush()
    except BrokenPipeError:
        # `klog dump-segment ... | head`: the reader left; that is not an error.
        _silence_stdout()
        raise typer.Exit(console.EXIT_OK) from None
    if run.failed or run.damaged or run.dumped == 0:
        raise typer.Exit(console.EXIT_DAMAGE)


def _write_kafka_lines(events: Iterator[DumpEvent]) -> None:
    from klog.tools.dump import ERR, CorruptIndexEvent, FileErrorEvent

    out = console.raw
    render = methodcaller("to_kafka_line")
    stream_of = attrgetter("stream")
    while True:
        chunk = list(islice(events, _CHUNK_EVENTS))
        if not chunk:
            return
        lines = list(map(render, chunk))
        if ERR not in map(stream_of, chunk):
            out("".join(lines))
            continue
        # stderr events are rare: split the chunk around them to keep Kafka's interleaving.
        start = 0
        for i, event in enumerate(chunk):
            if event.stream is ERR:
                if start < i:
                    out("".join(lines[start:i]))
                sys.stdout.flush()
                if isinstance(event, (FileErrorEvent, CorruptIndexEvent)):
                    _error_line(lines[i])
                else:
                    sys.stderr.write(lines[i])
                    sys.stderr.flush()
                start = i + 1
        if start < len(lines):
            out("".join(lines[start:]))


def _error_line(text: str) -> None:
    console.err.print("[bold red]error:[/bold red] ", end="")
    console.err.print(text.rstrip("\n"), markup=False, highlight=False)


def _write_json(events: Iterator[DumpEvent]) -> None:
    from klog.tools.dump import CorruptIndexEvent, FileErrorEvent

    for event in events:
        if isinstance(event, (FileErrorEvent, CorruptIndexEvent)):
            sys.stdout.flush()
            _error_line(event.to_kafka_line())
        console.emit_json(event.to_json())


@contextlib.contextmanager
def _progress(
    paths: list[str],
) -> Iterator[Callable[[Iterator[DumpEvent]], Iterator[DumpEvent]]]:
    """A wrapper adding a byte progress bar for big files (stderr TTY only)."""
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):
            if os.path.isfile(p):
                total += os.path.getsize(p)
    if total < _PROGRESS_MIN_BYTES or not console.err.is_terminal:
        yield lambda events: events
        return
    with console.progress("dumping", total) as advance:

        from klog.tools.dump import BatchEvent

        def counted(events: Iterator[DumpEvent]) -> Iterator[DumpEvent]:
            for event in events:
                if type(event) is BatchEvent:
                    advance(event.header.size)
                yield event

        yield counted


def _make_stdout_safe() -> None:
    # Payloads are user data: never let an odd terminal encoding turn them into a crash.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(Exception):
            reconfigure(errors="backslashreplace")


def _silence_stdout() -> None:
    with contextlib.suppress(Exception):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
