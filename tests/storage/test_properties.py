"""Tests for klog/storage/properties.py: Java .properties parsing and escaping.

The parser serves meta.properties (storage/checkpoints.py), server.properties
(daemon/config/broker.py) and the CLI's client config files; the cases below are the union of
what each of those relied on.
"""

from __future__ import annotations

import pytest

from klog.storage.properties import (
    PropertiesError,
    escape_property,
    format_properties,
    parse_properties,
    split_assignment,
)


def test_properties_separators_comments_and_blank_lines() -> None:
    text = (
        "# a comment\n"
        "   ! another comment\n"
        "\n"
        "   \t\n"
        "a=1\n"
        "b:2\n"
        "c 3\n"
        "  d   =   4\n"
        "e\t:\t5\n"
        "lonely\n"
        "f=\n"
    )
    assert parse_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "lonely": "", "f": "",
    }


def test_properties_only_first_separator_counts() -> None:
    props = parse_properties("a==b\nc = = d\ne:f=g\nh i j\nurl=http://x:1/y\n")
    assert props == {"a": "=b", "c": "= d", "e": "f=g", "h": "i j", "url": "http://x:1/y"}


def test_properties_trailing_whitespace_is_kept_and_later_keys_win() -> None:
    props = parse_properties("a=1  \na=2 \t\n")
    assert props == {"a": "2 \t"}


def test_properties_line_continuations() -> None:
    text = (
        "listeners=PLAINTEXT://a:1,\\\n"
        "          PLAINTEXT2://b:2\n"
        "even=x\\\\\n"
        "next=y\n"
        "# comment ending in backslash \\\n"
        "after.comment=z\n"
        "hash=one\\\n"
        "   #two\n"
        "eof=last\\"
    )
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://a:1,PLAINTEXT2://b:2",
        "even": "x\\",
        "next": "y",
        "after.comment": "z",
        "hash": "one#two",
        "eof": "last",
    }


def test_properties_continuation_into_blank_line_ends_the_entry() -> None:
    assert parse_properties("a=b\\\n\nc=d") == {"a": "b", "c": "d"}


def test_properties_escapes() -> None:
    text = (
        "tab=a\\tb\n"
        "nl=a\\nb\n"
        "cr=a\\rb\\fc\n"
        "uni=caf\\u00e9\n"
        "emoji=\\uD83D\\uDE00\n"
        "key\\=with\\:seps\\ and\\ space=v\n"
        "other=\\q\\\\\n"
    )
    assert parse_properties(text) == {
        "tab": "a\tb",
        "nl": "a\nb",
        "cr": "a\rb\fc",
        "uni": "café",
        "emoji": "\U0001F600",
        "key=with:seps and space": "v",
        "other": "q\\",
    }


@pytest.mark.parametrize("line_end", ["\r\n", "\r", "\n"])
def test_properties_line_endings(line_end: str) -> None:
    text = line_end.join(["a=1", "#c", "b=2\\", "  3", ""])
    assert parse_properties(text) == {"a": "1", "b": "23"}


def test_properties_malformed_unicode_escape() -> None:
    with pytest.raises(PropertiesError, match=r"malformed \\uxxxx escape .* line 2") as info:
        parse_properties("ok=1\nbad=\\u12g4\n")
    assert info.value.line == 2
    with pytest.raises(PropertiesError, match=r"malformed"):
        parse_properties("short=\\u12")
    # The line is the entry's first line, also when the bad escape is on a continuation.
    with pytest.raises(PropertiesError) as info:
        parse_properties("a=1\n\nkey=x\\\n  \\uZZZZ\n")
    assert info.value.line == 3


def test_properties_meta_properties_syntax() -> None:
    # What read_meta_properties relied on: both comment marks, ':' and whitespace
    # separators with padding, a continuation whose leading whitespace is dropped.
    text = "# comment\n! another\n\n  version : 0\nbroker.id   5\ncluster.id=ab\\\n    cd\n"
    assert parse_properties(text) == {"version": "0", "broker.id": "5", "cluster.id": "abcd"}


def test_properties_only_java_line_terminators_end_a_line() -> None:
    # Java ends lines at \n, \r and \r\n only: a form feed is whitespace, a vertical tab
    # or U+2028 is part of the value (str.splitlines would cut at each of them).
    text = "a=1\fb=2\n\fc=3\nd=x\x0by\u2028z\n"
    assert parse_properties(text) == {"a": "1\fb=2", "c": "3", "d": "x\x0by\u2028z"}


def test_properties_key_escapes_and_empty_input() -> None:
    assert parse_properties("") == {}
    assert parse_properties("\n\n# only comments\n") == {}
    assert parse_properties("a\\ b = c\n\\#notcomment=1\n") == {"a b": "c", "#notcomment": "1"}


@pytest.mark.parametrize(
    "value",
    ["plain", " leading space", "tab\tnl\ncr\rff\f", "=:#!\\", "café", "\U0001F600", ""],
)
def test_escape_round_trips_through_the_parser(value: str) -> None:
    lines = format_properties({f"k {value}": value})
    assert len(lines) == 1 and lines[0].isascii()
    assert parse_properties(lines[0] + "\n") == {f"k {value}": value}


def test_escape_matches_properties_store() -> None:
    # Properties.store: keys escape spaces, values only a leading one; non-ASCII as \uXXXX,
    # a character outside the BMP as its UTF-16 surrogate pair.
    assert escape_property("a b", is_key=True) == "a\\ b"
    assert escape_property(" a b", is_key=False) == "\\ a b"
    assert escape_property("é", is_key=False) == "\\u00E9"
    assert escape_property("\U0001F600", is_key=False) == "\\uD83D\\uDE00"


@pytest.mark.parametrize(("item", "strip_key", "expected"), [
    ("a=b", True, ("a", "b")),
    (" a =b=c ", True, ("a", "b=c ")),  # the value kept whole, as given
    ("a=", True, ("a", "")),
    (" a =b", False, (" a ", "b")),  # a header name may hold blanks
])
def test_split_assignment(item: str, strip_key: bool, expected: tuple[str, str]) -> None:
    assert split_assignment(item, strip_key=strip_key) == expected


@pytest.mark.parametrize("item", ["a", "", "=b", " =b"])
def test_split_assignment_refuses_an_item_without_a_key(item: str) -> None:
    with pytest.raises(ValueError, match="is not key=value"):
        split_assignment(item)
