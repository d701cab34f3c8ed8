"""Fixtures shared by the controller's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from klog.daemon.metastore.local import LocalMetadataStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LocalMetadataStore]:
    """A started local metastore: what the controller reads and writes."""
    s = LocalMetadataStore(tmp_path / "meta")
    s.start()
    yield s
    s.close()
