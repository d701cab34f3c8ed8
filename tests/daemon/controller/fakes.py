"""A Controller built over fakes, for tests of its decisions without a broker around it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from klog.daemon.controller import Controller


def controller_for(broker: Any) -> Controller:
    """A Controller with ``broker``'s broker_id, metastore, config (any object with the
    config attributes read) and metadata_cache (optional); it has no identity, control
    request receiver or log manager, so tests must not reach those."""
    config = SimpleNamespace(current=broker.config, add_reconfigurable=lambda _f: None)
    cache = getattr(broker, "metadata_cache", None) or SimpleNamespace(controller_id=-1)
    return Controller(broker.broker_id, config, broker.metastore, cache,  # type: ignore[arg-type]
                      None, None, None)  # type: ignore[arg-type]
