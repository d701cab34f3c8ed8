"""Shared fixtures: the real Kafka 2.x corpus, located beside the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS_ROOT = REPO_ROOT.parent / "shared" / "kafka-corpus"
CORPUS_DATADIR = CORPUS_ROOT / "kafka-2.x-zk-datadir"


@pytest.fixture(scope="session")
def kafka_corpus() -> Path:
    """The log dir a real Apache Kafka 2.x broker wrote (read-only; copy before writing)."""
    if not CORPUS_DATADIR.is_dir():
        pytest.skip(f"Kafka corpus not found at {CORPUS_DATADIR} (see shared/kafka-corpus)")
    return CORPUS_DATADIR
