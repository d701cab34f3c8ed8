"""``klog verify`` and ``klog recover``: formatting over ``klog.tools.verify``.

The checks and repairs live in the library; this module turns their reports into a table,
finding lines or JSON, and their outcome into exit codes (0 intact / recovered, 1 damage,
2 usage error).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table
from rich.text import Text

from klog.cli import console

if TYPE_CHECKING:
    from rich.console import JustifyMethod

    from klog.tools import verify as lib
    from klog.tools.verify import Target


def _lib() -> Any:
    # Imported when a command runs, not when the CLI starts: `klog --help` and the other
    # commands should not pay for loading the inspection library.
    from klog.tools import verify as lib

    return lib


def _status_style(status: str) -> str:
    lib = _lib()
    return {
        lib.STATUS_OK: "green",
        lib.STATUS_REBUILDABLE: "yellow",
        lib.STATUS_DAMAGED: "bold red",
    }.get(status, "")

_PATH_HELP = (
    "A log dir, a partition dir (<topic>-<partition>) or a segment file "
    "(<20-digit base offset>.log in a partition dir)."
)
_FORCE_HELP = (
    "Take PATH for what it is given as even when it is not named and laid out as Kafka's "
    "(any .log file as a segment, any dir as a partition or log dir)."
)
_RECOVER_FORCE_HELP = _FORCE_HELP + " A forced file may be truncated and get index files."
_MAX_HELP = (
    "Largest batch size accepted, in bytes; a length field above it is damage "
    "(default: no limit but the file itself)."
)


def _fmt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _where(finding: lib.Finding | lib.Action) -> str:
    parts = []
    if finding.partition:
        parts.append(finding.partition)
    if finding.file:
        parts.append(Path(finding.file).name)
    offset = getattr(finding, "offset", None)
    if offset is not None:
        parts.append(f"offset {offset}")
    if finding.position is not None:
        parts.append(f"position {finding.position}")
    return " ".join(parts)


def _finding_line(finding: lib.Finding) -> str:
    where = _where(finding)
    return f"{finding.severity:<11} {where}: {finding.message}" if where else (
        f"{finding.severity:<11} {finding.message}"
    )


def _target(path: Path, force: bool) -> lib.Target:
    lib = _lib()
    try:
        target: Target = lib.resolve_target(path, force=force)
        return target
    except lib.InspectError as exc:
        console.fail_now(str(exc), console.EXIT_USAGE)


def _print_verify(report: lib.VerifyReport) -> None:
    lib = _lib()
    table = Table(title=None, show_edge=False, pad_edge=False)
    widest = max((len(p.name) for p in report.partitions), default=9)
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("partition", "left"),
        ("segments", "right"),
        ("batches", "right"),
        ("records", "right"),
        ("log start", "right"),
        ("log end", "right"),
        ("status", "left"),
    )
    for name, justify in columns:
        width = {"partition": widest, "status": len(lib.STATUS_REBUILDABLE)}.get(name, len(name))
        table.add_column(name, justify=justify, no_wrap=True, min_width=width)
    for p in report.partitions:
        table.add_row(
            Text(p.name),
            str(len(p.segments)),
            str(p.batches),
            str(p.records),
            _fmt(p.log_start_offset),
            _fmt(p.log_end_offset),
            Text(p.status, style=_status_style(p.status)),
        )
    # Never squeeze partition names into ellipses, whatever the terminal width.
    console.out.print(table, width=max(console.out.width, widest + 90))
    if report.findings:
        console.line("")
        console.line("findings:")
        for finding in report.findings:
            console.line("  " + _finding_line(finding))
    damage = sum(f.severity == lib.DAMAGE for f in report.findings)
    rebuildable = sum(f.severity == lib.REBUILDABLE for f in report.findings)
    warnings = sum(f.severity == lib.WARNING for f in report.findings)
    segments = sum(len(p.segments) for p in report.partitions)
    records = sum(p.records for p in report.partitions)
    verdict = "DAMAGED" if damage else "intact"
    console.line("")
    console.line(
        f"{verdict}: {len(report.partitions)} partitions, {segments} segments, {records} "
        f"records; {damage} damage, {rebuildable} rebuildable, {warnings} warnings"
    )


def verify_command(
    path: Path = typer.Argument(..., help=_PATH_HELP, metavar="PATH", show_default=False),
    json_: bool = typer.Option(False, "--json", help="One JSON document for scripts."),
    max_message_size: int | None = typer.Option(
        None, "--max-message-size", min=14, help=_MAX_HELP, show_default=False
    ),
    force: bool = typer.Option(False, "--force", help=_FORCE_HELP),
) -> None:
    """Check segments, indexes and checkpoints; exit 1 when damage is found.

    Missing or preallocated indexes are reported as rebuildable, not damage.
    """
    lib = _lib()
    target = _target(path, force)
    with console.progress("verifying", target.total_log_bytes()) as advance:
        try:
            report = lib.verify(target, max_batch_size=max_message_size, progress=advance)
        except OSError as exc:
            console.fail_now(f"{exc.filename or path}: {exc.strerror or exc}")
    if json_:
        console.emit_json(report.to_dict())
    else:
        _print_verify(report)
    console.exit_now(console.EXIT_DAMAGE if report.damaged else console.EXIT_OK)


def _print_recover(report: lib.RecoveryReport) -> None:
    if report.dry_run:
        console.line("dry run: nothing was changed")
    if not report.actions and report.unresolved:
        console.line("nothing was changed")
    elif not report.actions:
        console.line(
            f"nothing to do: {len(report.partitions)} partitions are consistent"
        )
    for action in report.actions:
        prefix = f"{action.partition}: " if action.partition else ""
        # Messages are written in the past tense; a dry run marks each one instead of
        # rewording it.
        console.line(("[dry run] " if report.dry_run else "") + prefix + action.message)
    for finding in report.unresolved:
        console.warn("not repaired: " + _finding_line(finding))
    if report.actions:
        verb = "would take" if report.dry_run else "took"
        console.line(f"{verb} {len(report.actions)} actions on {len(report.partitions)} "
                     "partitions")


def recover_command(
    path: Path = typer.Argument(..., help=_PATH_HELP, metavar="PATH", show_default=False),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Change nothing; report what would be done."
    ),
    full: bool = typer.Option(
        False, "--full", help="Scan every segment, not only those from the recovery point."
    ),
    json_: bool = typer.Option(False, "--json", help="One JSON document for scripts."),
    max_message_size: int | None = typer.Option(
        None, "--max-message-size", min=14, help=_MAX_HELP, show_default=False
    ),
    force: bool = typer.Option(False, "--force", help=_RECOVER_FORCE_HELP),
) -> None:
    """Do a broker's startup recovery, offline and without losing a byte.

    Invalid bytes are cut from a segment and saved beside it, later segments are moved
    aside, indexes rebuilt, checkpoints beyond the data lowered. Refuses a log dir that a
    running broker holds.
    """
    lib = _lib()
    target = _target(path, force)
    with console.progress("recovering", target.total_log_bytes()) as advance:
        try:
            report = lib.recover(
                target,
                dry_run=dry_run,
                full=full,
                max_batch_size=max_message_size,
                progress=advance,
            )
        except lib.LogDirLockedError as exc:
            console.fail_now(str(exc))
        except OSError as exc:
            console.fail_now(f"{exc.filename or path}: {exc.strerror or exc}")
    if json_:
        console.emit_json(report.to_dict())
    else:
        _print_recover(report)
    console.exit_now(console.EXIT_DAMAGE if report.unresolved else console.EXIT_OK)


def register(app: typer.Typer) -> None:
    """Add ``verify`` and ``recover`` to ``app``."""
    # Help texts as single paragraphs: rich help keeps a docstring's line breaks.
    app.command("verify", help=_VERIFY_HELP)(verify_command)
    app.command("recover", help=_RECOVER_HELP)(recover_command)


_LAYOUT_HELP = (
    "A path not named and laid out as Kafka's (e.g. an application's app.log) is refused "
    "with exit 2 unless --force is given."
)
_VERIFY_HELP = (
    "Check segments, indexes and checkpoints; exit 1 when damage is found.\n\n"
    "Missing or preallocated indexes are reported as rebuildable, not damage (exit 0). "
    + _LAYOUT_HELP
)
_RECOVER_HELP = (
    "Do a broker's startup recovery, offline and without losing a byte.\n\n"
    "Invalid bytes are cut from a segment and saved beside it, later segments and damaged "
    "indexes are moved aside, indexes rebuilt, checkpoints beyond the data lowered. Refuses "
    "a log dir that a running broker holds. " + _LAYOUT_HELP
)
