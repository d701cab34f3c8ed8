"""Java ``.properties`` text: the one parser and escaper klog has.

``java.util.Properties.load`` / ``store`` rules, used for ``meta.properties`` (storage),
``server.properties`` (the broker) and the client config files the CLI reads:

- lines end at ``\\n``, ``\\r`` or ``\\r\\n`` (nothing else: a form feed is whitespace);
- comment lines start with ``#`` or ``!`` after optional whitespace, and are never continued;
- an entry is ``key=value``, ``key:value`` or ``key value``: the key ends at the first
  unescaped ``=``, ``:`` or whitespace; whitespace around the one separator is dropped, a
  second ``=`` or ``:`` belongs to the value; values keep trailing whitespace;
- a line ending in an odd number of backslashes continues on the next, whose leading
  whitespace is dropped; a continuation into a blank line ends the entry;
- ``\\t \\n \\r \\f \\uXXXX`` are escapes (UTF-16 surrogate pairs joined), any other escaped
  character stands for itself, a dangling backslash at the end of the input for nothing;
- a later duplicate key wins.

Errors are ``PropertiesError`` with the 1-based line of the entry; callers wrap it in
their own error (CheckpointError, ConfigError). Text only: decoding bytes is the caller's.

One ``key=value`` item given on a command line (``--override``, ``--config``,
``--consumer-property``, ``--header``, spark-export's ``--conf``) is not properties text
but a plain assignment: ``split_assignment`` is the one splitter of those.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

_WHITESPACE = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX = frozenset("0123456789abcdefABCDEF")
_LINE_END = re.compile(r"\r\n|\r|\n")


class PropertiesError(ValueError):
    """Malformed ``.properties`` text; ``line`` is the 1-based line of the entry."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"{reason} on line {line}")
        self.line = line
        self.reason = reason


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text the way ``java.util.Properties.load`` does."""
    props: dict[str, str] = {}
    for lineno, line in _logical_lines(text):
        key, value = _split_entry(line)
        props[_unescape(key, lineno)] = _unescape(value, lineno)
    return props


def split_assignment(item: str, *, strip_key: bool = True) -> tuple[str, str]:
    """``key=value`` as (key, value): split at the first ``=``, so the value may be empty or
    hold ``=`` itself, and is kept as given; the key is stripped of surrounding whitespace
    unless ``strip_key`` is False. ValueError when there is no ``=`` or the key is empty
    (callers say which option it came from)."""
    key, sep, value = item.partition("=")
    if strip_key:
        key = key.strip()
    if not sep or not key:
        raise ValueError(f"{item!r} is not key=value")
    return key, value


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    natural = _LINE_END.split(text)
    i = 0
    while i < len(natural):
        lineno = i + 1
        line = natural[i].lstrip(_WHITESPACE)
        i += 1
        # A comment line is never continued, even if it ends with a backslash.
        if not line or line[0] in "#!":
            continue
        parts: list[str] = []
        while _trailing_backslashes(line) % 2 == 1:
            parts.append(line[:-1])
            if i >= len(natural):
                line = ""
                break
            line = natural[i].lstrip(_WHITESPACE)
            i += 1
        parts.append(line)
        yield lineno, "".join(parts)


def _trailing_backslashes(line: str) -> int:
    return len(line) - len(line.rstrip("\\"))


def _split_entry(line: str) -> tuple[str, str]:
    """Split a logical line at the first unescaped '=', ':' or whitespace."""
    n = len(line)
    key_end = value_start = n
    has_separator = False
    escaped = False
    for i, c in enumerate(line):
        if escaped:
            escaped = False
        elif c == "\\":
            escaped = True
        elif c in "=:":
            key_end, value_start, has_separator = i, i + 1, True
            break
        elif c in _WHITESPACE:
            key_end, value_start = i, i + 1
            break
    j = value_start
    while j < n:
        c = line[j]
        if c not in _WHITESPACE:
            if has_separator or c not in "=:":
                break
            has_separator = True
        j += 1
    return line[:key_end], line[j:]


def _unescape(text: str, lineno: int) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:
            break  # a dangling backslash at the very end of the input stands for nothing
        c = text[i]
        i += 1
        if c == "u":
            digits = text[i : i + 4]
            if len(digits) < 4 or not all(d in _HEX for d in digits):
                bad = "\\u" + digits
                raise PropertiesError(lineno, f"malformed \\uxxxx escape {bad!r}")
            out.append(chr(int(digits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    result = "".join(out)
    try:  # \uD83D\uDE00 is one character in Java: join UTF-16 surrogate pairs
        return result.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        return result


def escape_property(text: str, *, is_key: bool) -> str:
    """``text`` escaped as ``Properties.store`` writes it (ASCII output, ``\\uXXXX``)."""
    out: list[str] = []
    for index, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[ch])
        elif ch in "=:#!":
            out.append("\\" + ch)
        elif ch == " " and (is_key or index == 0):
            out.append("\\ ")
        elif ord(ch) > 0xFFFF:  # Java strings are UTF-16: one escape per surrogate
            pair = ch.encode("utf-16-be")
            out.append(f"\\u{pair[0]:02X}{pair[1]:02X}\\u{pair[2]:02X}{pair[3]:02X}")
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str]) -> list[str]:
    """One ``key=value`` line per entry (no newline), escaped as ``Properties.store`` does."""
    return [
        f"{escape_property(k, is_key=True)}={escape_property(v, is_key=False)}"
        for k, v in props.items()
    ]
