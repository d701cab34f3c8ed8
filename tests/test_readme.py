"""The README's "Differences from Kafka" section stays true to the config tables."""

from __future__ import annotations

import re
from pathlib import Path

from klog.daemon.config.specs import (
    BROKER_CONFIGS,
    MUST_NOT_BE_IGNORED,
    UNIMPLEMENTED_BROKER_CONFIGS,
)

README = Path(__file__).parent.parent / "README.md"
_CONFIG_NAME = re.compile(r"[a-z0-9]+(\.[a-z0-9]+)+(\.\*)?")


def _bullet(title: str) -> list[str]:
    """The config names (and ``prefix.*`` groups) in backquotes in one bullet of the
    Differences section."""
    section = README.read_text().split("## Differences from Kafka\n", 1)[1].split("\n## ")[0]
    (bullet,) = [b for b in section.split("\n- ") if b.startswith(f"**{title}**")]
    return [t for t in re.findall(r"`([^`]+)`", bullet) if _CONFIG_NAME.fullmatch(t)]


def test_the_refused_names_are_exactly_the_ones_klog_refuses() -> None:
    assert sorted(_bullet("Refused instead of ignored.")) == sorted(MUST_NOT_BE_IGNORED)


def test_every_name_said_not_implemented_is_unimplemented() -> None:
    names = _bullet("Not implemented (accepted, listed at start-up).")
    assert len(names) >= 10
    for name in names:
        if name.endswith(".*"):
            group = [n for n in BROKER_CONFIGS if n.startswith(name[:-1])]
            assert group, name
            assert set(group) <= UNIMPLEMENTED_BROKER_CONFIGS, name
        else:
            assert name in UNIMPLEMENTED_BROKER_CONFIGS, name


def _crash_section() -> str:
    return README.read_text().split("### After a crash\n", 1)[1].split("\n#")[0]


def test_the_crash_matrix_table_lists_every_scenario() -> None:
    from tests.crash.scenarios import SCENARIOS

    rows = [line for line in _crash_section().splitlines() if line.startswith("| `")]
    listed = [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]  # type: ignore[union-attr]
    assert listed == [s.name for s in SCENARIOS]


def test_the_crash_section_names_every_disruption() -> None:
    from tests.crash.site import DISRUPTIONS, PAUSE_S

    section = _crash_section()
    for disruption in DISRUPTIONS:
        assert f"`{disruption.name}`" in section
    assert f"SIGSTOP for {PAUSE_S:g} s" in section
    assert "`leader`" in section and "`controller`" in section
