"""Request handlers: one module per API family; ``HANDLERS`` maps api_key -> handler.

A handler is ``async def handle(ctx, request) -> response`` where ``request`` is the
decoded kio entity, ``ctx.services`` the broker's components it may call
(``BrokerServices``, built by the broker's assembly; a test builds one of fakes), and the
response is one of: a kio entity (usually made with ``ctx.respond({...})`` from
version-independent values), a list of chunks (bytes and file regions; the fetch response),
None for no response at all (acks=0 produce), or a ``Deferred`` whose awaitable gives one
of those later (acks=-1 produce waiting for the ISR). Handlers stay thin: decode, one call
to a component (ReplicaManager, AdminManager, GroupCoordinator, ...), which holds the
logic, encode.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from klog.daemon.security.principal import ANONYMOUS, KafkaPrincipal
from klog.protocol import apis
from klog.protocol.entities import build
from klog.protocol.framing import RequestHeader

if TYPE_CHECKING:
    from klog.daemon.admin import AdminManager
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.controller import Controller
    from klog.daemon.controller.identity import ControllerIdentity
    from klog.daemon.controller.receiver import ControlRequestReceiver
    from klog.daemon.fetch_session import FetchSessionCache
    from klog.daemon.group.coordinator import GroupCoordinator
    from klog.daemon.group.metadata_manager import GroupMetadataManager
    from klog.daemon.metadata_cache import MetadataCache
    from klog.daemon.producer_ids import ProducerIdManager
    from klog.daemon.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


#: A decoded request: the kio entity of its api and version. kio makes one class per
#: version, so no single type names them all; a handler reads the fields of its versions.
Request = Any
#: What a handler returns (module docstring): a kio response entity, a list of chunks,
#: None, or a Deferred.
Response = Any


class ClientConnection(Protocol):
    """The connection a request came on, as a handler sees it (klog/daemon/connection.py)."""

    listener_name: str
    peer: str
    #: Who the connection authenticated as (ANONYMOUS until, or without, authentication).
    principal: KafkaPrincipal

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class BrokerServices:
    """The broker's components as the handlers see them: each handler calls one of these.
    Later capabilities (transaction coordinator, authorizer, quota manager) join here."""

    broker_id: int
    config: DynamicBrokerConfig
    metadata_cache: MetadataCache
    replica_manager: ReplicaManager
    admin: AdminManager
    group_coordinator: GroupCoordinator
    group_manager: GroupMetadataManager
    producer_ids: ProducerIdManager
    controller: Controller
    controller_identity: ControllerIdentity
    control_requests: ControlRequestReceiver
    #: The APIs and versions this broker announces and serves (Kafka's ApiVersionManager):
    #: a standalone broker leaves out the inter-broker control APIs.
    api_versions: Mapping[int, apis.VersionRange]
    #: Fetch sessions (KIP-227), bounded by max.incremental.fetch.session.cache.slots.
    fetch_sessions: FetchSessionCache


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    services: BrokerServices
    connection: ClientConnection | None

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def principal(self) -> KafkaPrincipal:
        """Who sent this request (in-process requests: ANONYMOUS)."""
        return ANONYMOUS if self.connection is None else self.connection.principal

    @property
    def listener_name(self) -> str:
        if self.connection is None:
            return self.services.config.current.listeners[0].listener_name
        return self.connection.listener_name

    def close_connection(self, reason: str) -> None:
        """Answer nothing and close the connection (the handler returns this None): for a
        request the broker can neither obey nor refuse, so that its sender retries."""
        log.warning("closing connection%s: %s", "" if self.connection is None
                    else f" from {self.connection.peer}", reason)
        if self.connection is not None:
            self.connection.close()

    def respond(self, values: dict[str, Any]) -> Any:
        """The response entity of this request's api and version, built from ``values``."""
        spec = apis.spec_for(self.header.api_key)
        return build(spec.response_entity(self.header.api_version), values)


@dataclass(slots=True)
class Deferred:
    """A handler's answer that is not ready yet: the connection goes on to its next request
    and sends this answer, in request order, once ``response`` completes. Produce with
    acks=-1 uses it while it waits for the ISR, so a pipelining producer's next request is
    appended during that wait instead of after it."""

    response: Awaitable[Any]


# A coroutine function: the connection starts it with send(None) outside any task.
Handler = Callable[[RequestContext, Request], Coroutine[Any, Any, Response]]

# api_key -> module defining ``handle``; imported when the broker starts.
_MODULES: dict[int, str] = {
    0: "produce",
    1: "fetch",
    2: "list_offsets",
    3: "metadata",
    4: "leader_and_isr",
    5: "stop_replica",
    6: "update_metadata",
    7: "controlled_shutdown",
    8: "offset_commit",
    9: "offset_fetch",
    10: "find_coordinator",
    11: "join_group",
    12: "heartbeat",
    13: "leave_group",
    14: "sync_group",
    15: "describe_groups",
    16: "list_groups",
    18: "api_versions",
    19: "create_topics",
    20: "delete_topics",
    21: "delete_records",
    22: "init_producer_id",
    23: "offset_for_leader_epoch",
    32: "describe_configs",
    33: "alter_configs",
    35: "describe_log_dirs",
    37: "create_partitions",
    42: "delete_groups",
    43: "elect_leaders",
    44: "incremental_alter_configs",
    45: "alter_partition_reassignments",
    46: "list_partition_reassignments",
    47: "offset_delete",
    60: "describe_cluster",
}


def load_handlers() -> dict[int, Handler]:
    table: dict[int, Handler] = {}
    for api_key, module in _MODULES.items():
        mod = importlib.import_module(f"klog.daemon.handlers.{module}")
        table[api_key] = mod.handle
    return table


def register(api_key: int, module: str) -> None:
    """Add a handler module (for API families landing in later changes)."""
    _MODULES[api_key] = module
