"""Shared fixtures: the real Kafka 2.x corpus, located beside the repository; and the
hypothesis settings every property test runs under."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# A loaded machine makes an example slow now and then, and hypothesis's default 200 ms
# deadline turns that into a failure ("Unreliable test timings"). With CI set, hypothesis
# loads its own "ci" profile (no deadline, derandomized); elsewhere the same timing rules
# apply, with random examples.
settings.register_profile("klog", deadline=None, suppress_health_check=[HealthCheck.too_slow])
if not os.environ.get("CI") and not os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile("klog")

REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS_ROOT = REPO_ROOT.parent / "shared" / "kafka-corpus"
CORPUS_DATADIR = CORPUS_ROOT / "kafka-2.x-zk-datadir"


@pytest.fixture(scope="session")
def kafka_corpus() -> Path:
    """The log dir a real Apache Kafka 2.x broker wrote (read-only; copy before writing)."""
    if not CORPUS_DATADIR.is_dir():
        pytest.skip(f"Kafka corpus not found at {CORPUS_DATADIR} (see shared/kafka-corpus)")
    return CORPUS_DATADIR


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> object:
    """Test certificates (tests/daemon/security/certs.py): a CA, a server certificate for
    127.0.0.1/localhost, client certificates; made once per session with openssl."""
    from tests.daemon.security.certs import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))
