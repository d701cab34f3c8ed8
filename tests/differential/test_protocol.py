"""The protocol, klog against Apache Kafka: every case of the corpus sent to both brokers in
the same order from the same starting state, the answers compared field by field after
normalising what must differ (harness.py).

Every difference is either fixed in klog or listed, with its reason, in README's
"Differences from Kafka" under "Answers that differ from Apache Kafka 4.1": each bullet
names its cases in backquotes (patterns, ``*`` for any text). The test keeps that list
honest both ways: a case that differs and is not listed fails, and so does a listed
pattern that matches no case or a case that no longer differs.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.differential.conftest import Pair
from tests.differential.corpus import corpus
from tests.differential.harness import (
    Accepted,
    Side,
    accepted_differences,
    comparable,
    differences,
    matching,
    uniq,
)

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "### Answers that differ from Apache Kafka 4.1"
#: Set to a path to keep every case's two normalised answers (for looking into a failure).
DUMP = os.environ.get("KLOG_DIFFERENTIAL_DUMP")


def readme_section() -> str:
    text = README.read_text()
    assert SECTION in text, f"README lacks the section {SECTION!r}"
    return text.split(SECTION, 1)[1].split("\n#", 1)[0]


def accepted() -> list[Accepted]:
    return accepted_differences(readme_section())


def test_the_corpus_names_each_case_once() -> None:
    assert uniq(c.name for c in corpus()) == []


def test_every_listed_pattern_names_cases_of_the_corpus() -> None:
    names = [c.name for c in corpus()]
    for entry in accepted():
        for pattern in entry.patterns:
            if pattern.startswith("On disk:"):
                continue  # test_on_disk.py's comparisons, checked there
            assert any(Accepted((pattern,), "").matches(n) for n in names), \
                f"README lists {pattern!r}, which names no case of the corpus"


@pytest.mark.timeout(900)
def test_klog_answers_as_kafka_does(pair: Pair) -> None:
    klog, kafka = pair.sides()
    listed = accepted()
    found: dict[str, list[tuple[str, Any, Any]]] = {}
    dump: list[dict[str, Any]] = []
    started = time.monotonic()
    cases = corpus()

    def run_all(side: Side) -> list[Any]:
        """Every case in order on one side (each side's states follow from its own
        answers alone, so the two sides run at once)."""
        try:
            return [comparable(side, side.run(case)) for case in cases]
        finally:
            side.close()

    with ThreadPoolExecutor(2, thread_name_prefix="differential") as pool:
        ours_all = pool.submit(run_all, klog)
        theirs_all = pool.submit(run_all, kafka)
        answers = list(zip(ours_all.result(), theirs_all.result(), strict=True))
    for case, (ours, theirs) in zip(cases, answers, strict=True):
        diff = differences(ours, theirs)
        if diff:
            found[case.name] = diff
        if DUMP:
            dump.append({"case": case.name, "klog": ours, "kafka": theirs,
                         "differences": diff})
    if DUMP:
        Path(DUMP).write_text(json.dumps(dump, indent=1, default=repr))
    elapsed = time.monotonic() - started
    unlisted = {name: diff for name, diff in found.items() if not matching(listed, name)}
    stale = [(p, [n for n in _names() if Accepted((p,), "").matches(n) and n not in found])
             for entry in listed for p in entry.patterns]
    stale = [(p, agreeing) for p, agreeing in stale if agreeing]
    report = [f"{len(found)} of {len(_names())} cases differ ({elapsed:.0f} s)"]
    for name, diff in unlisted.items():
        report.append(f"- {name}:")
        report += [f"    {path}: klog {ours!r} / kafka {theirs!r}"
                   for path, ours, theirs in diff[:8]]
        if len(diff) > 8:
            report.append(f"    ... {len(diff) - 8} more")
    for pattern, agreeing in stale:
        report.append(f"- README lists `{pattern}`, but these cases no longer differ: "
                      f"{agreeing[:5]}")
    assert not unlisted and not stale, "\n".join(report)


def _names() -> list[str]:
    return [c.name for c in corpus()]
