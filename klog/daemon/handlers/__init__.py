"""Request handlers: one module per API family; table.py's ``HANDLERS`` maps api_key ->
handler.

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

import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from klog.daemon.security.principal import ANONYMOUS, KafkaPrincipal
from klog.protocol import apis
from klog.protocol.acls import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bitfield,
)
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
    from klog.daemon.log_dir_mover import LogDirMover
    from klog.daemon.metadata_cache import MetadataCache
    from klog.daemon.producer_ids import ProducerIdManager
    from klog.daemon.quota_store import ClientQuotaAdmin
    from klog.daemon.quotas import QuotaManagers
    from klog.daemon.replica_manager import ReplicaManager
    from klog.daemon.security.authorizer import AclAuthorizer
    from klog.daemon.security.credentials import ScramCredentialManager
    from klog.daemon.security.sasl import SaslAuthenticator
    from klog.daemon.transaction.coordinator import TransactionCoordinator
    from klog.daemon.transaction.markers import MarkerWriter

log = logging.getLogger(__name__)

#: "ip:port" -> "ip" for ACL hosts, remembered (a produce checks once per request).
_HOSTS: dict[str, str] = {}

#: ``ctx.authorize(*CLUSTER_ACTION)``: the inter-broker APIs' check (ClusterAction on the
#: cluster), and the cluster resource's other checks spelled the same way.
CLUSTER_ACTION = (AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)


#: A decoded request: the kio entity of its api and version. kio makes one class per
#: version, so no single type names them all; a handler reads the fields of its versions.
Request = Any
#: What a handler returns (module docstring): a kio response entity, a list of chunks,
#: None, or a Deferred.
Response = Any


class ClientConnection(Protocol):
    """The connection a request came on, as a handler sees it (klog/daemon/pipeline.py)."""

    listener_name: str
    peer: str
    #: Who the connection authenticated as (ANONYMOUS until, or without, authentication).
    principal: KafkaPrincipal
    #: SASL listeners: the connection's authentication (SaslHandshake/SaslAuthenticate
    #: drive it); None on PLAINTEXT and SSL listeners.
    authenticator: SaslAuthenticator | None

    def close(self) -> None: ...

    def throttle(self, throttle_ms: int) -> None:
        """Start no further request of this connection for ``throttle_ms`` (KIP-219)."""


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
    #: Transactions (klog/daemon/transaction/): the coordinator (InitProducerId with a
    #: transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, FindCoordinator key
    #: type 1) and the partition side of WriteTxnMarkers.
    transaction_coordinator: TransactionCoordinator
    txn_marker_writer: MarkerWriter
    #: The APIs and versions this broker announces and serves (Kafka's ApiVersionManager):
    #: a standalone broker leaves out the inter-broker control APIs.
    api_versions: Mapping[int, apis.VersionRange]
    #: Fetch sessions (KIP-227), bounded by max.incremental.fetch.session.cache.slots.
    fetch_sessions: FetchSessionCache
    #: The ACL authorizer (klog/daemon/security/authorizer.py); None when
    #: authorizer.class.name is empty: every ``RequestContext.authorize`` passes.
    authorizer: AclAuthorizer | None = None
    #: SCRAM users (Describe/AlterUserScramCredentials); None in tests that have no need.
    scram_credentials: ScramCredentialManager | None = None
    #: Client quotas (klog/daemon/quotas.py): the produce, fetch, request and controller
    #: mutation managers; None in tests that have no need (nothing is metered).
    quotas: QuotaManagers | None = None
    #: DescribeClientQuotas / AlterClientQuotas (klog/daemon/quota_store.py).
    client_quota_admin: ClientQuotaAdmin | None = None
    #: AlterReplicaLogDirs: moves between this broker's log dirs
    #: (klog/daemon/log_dir_mover.py); None in tests that have no need.
    log_dir_mover: LogDirMover | None = None


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    services: BrokerServices
    connection: ClientConnection | None
    #: The controller_mutation_rate throttle this request ran into (``mutations_allowed``).
    mutation_throttle_ms: int = 0

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

    @property
    def client_host(self) -> str:
        """The client's address as ACL hosts name it (no port); "" in-process."""
        if self.connection is None:
            return ""
        peer = self.connection.peer
        host = _HOSTS.get(peer)
        if host is None:
            if len(_HOSTS) >= 10_000:  # bounded: peers come and go
                _HOSTS.clear()
            host = _HOSTS[peer] = peer.rpartition(":")[0].strip("[]")
        return host

    # -- authorization: one call per check; without an authorizer each passes at once --

    def authorize(self, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        """May this request's principal do ``operation`` on the resource? (Kafka's
        AuthHelper.authorize.) In-process requests (no connection) are the broker's own."""
        authorizer = self.services.authorizer
        return authorizer is None or self.connection is None or authorizer.authorize(
            self.principal, self.client_host, operation, resource_type, name)

    def denied(self, operation: AclOperation, resource_type: ResourceType,
               names: Iterable[str | None]) -> set[str]:
        """The names among ``names`` this request may not do ``operation`` on (Kafka's
        filterByAuthorized, inverted); empty without an authorizer."""
        authorizer = self.services.authorizer
        if authorizer is None or self.connection is None:
            return set()
        return authorizer.denied(self.connection.principal, self.client_host, operation,
                                 resource_type, names)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the principal do ``operation`` on some resource of the type? (Kafka's
        authorizeByResourceType: InitProducerId's Write-on-any-topic.)"""
        authorizer = self.services.authorizer
        return authorizer is None or self.connection is None or \
            authorizer.authorize_by_resource_type(self.principal, self.client_host,
                                                  operation, resource_type)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """KIP-430's bit field for the resource: what the principal may do there; every
        supported operation without an authorizer, as Kafka answers then."""
        authorizer = self.services.authorizer
        if authorizer is None or self.connection is None:
            return operations_bitfield(SUPPORTED_OPERATIONS[resource_type])
        return authorizer.authorized_operations(self.principal, self.client_host,
                                                resource_type, name)

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""

    def throttle(self, throttle_ms: int) -> None:
        """Mute this request's connection for ``throttle_ms`` after its response (KIP-219:
        the response says the time, the broker holds the client's next request)."""
        if throttle_ms > 0 and self.connection is not None:
            self.connection.throttle(throttle_ms)

    def mutations_allowed(self, permits: int, strict: bool) -> bool:
        """controller_mutation_rate (KIP-599) for CreateTopics / CreatePartitions /
        DeleteTopics: may this request create or delete ``permits`` partitions now? False:
        answer THROTTLING_QUOTA_EXCEEDED (only ``strict``, the newer versions, refuse).
        The throttle time is kept in ``mutation_throttle_ms`` for the response (and the
        connection is muted for it, as Kafka does)."""
        quotas = self.services.quotas
        if quotas is None or not quotas.controller_mutation.active or self.connection is None:
            return True
        allowed, throttle_ms = quotas.controller_mutation.record_mutations(
            self.principal.name, self.client_id, permits, strict)
        if throttle_ms > self.mutation_throttle_ms:
            self.throttle(throttle_ms - self.mutation_throttle_ms)
            self.mutation_throttle_ms = throttle_ms
        return allowed

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
