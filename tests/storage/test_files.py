"""Tests for klog.storage.files: Kafka's file names."""

from __future__ import annotations

import pytest

from klog.storage import files

# -- file names ---------------------------------------------------------------------------


def test_filename_prefix_round_trip() -> None:
    assert files.filename_prefix_from_offset(42) == "00000000000000000042"
    assert files.offset_from_filename("00000000000000000042.log") == 42
    assert files.offset_from_filename("00000000000000000042.index.deleted") == 42
    with pytest.raises(ValueError):
        files.offset_from_filename("leader-epoch-checkpoint")
