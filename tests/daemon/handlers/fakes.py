"""Handler contexts over fakes: a BrokerServices whose named components are the test's and
whose others are absent (a handler reaching one it should not use fails on None)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from klog.daemon.handlers import BrokerServices, RequestContext
from klog.protocol import apis
from klog.protocol.framing import RequestHeader


def services(config: dict[str, Any] | None = None, **components: Any) -> BrokerServices:
    """``config``: the broker config attributes the handler reads (as ``config.current``)."""
    given: dict[str, Any] = {f.name: None for f in dataclasses.fields(BrokerServices)}
    given["broker_id"] = 0
    given["api_versions"] = apis.ADVERTISED
    # A request without a connection came on the first listener (RequestContext).
    current = {"listeners": [SimpleNamespace(listener_name="PLAINTEXT")], **(config or {})}
    given["config"] = SimpleNamespace(current=SimpleNamespace(**current))
    given.update(components)
    return BrokerServices(**given)


def context(header: RequestHeader, connection: Any = None, config: dict[str, Any] | None = None,
            **components: Any) -> RequestContext:
    return RequestContext(header, services(config, **components), connection)
