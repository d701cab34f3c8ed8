"""A broker's controlled shutdown (Kafka's KafkaServer.controlledShutdown), cluster mode.

Before a stopping broker closes its listeners it asks the active controller, with
ControlledShutdown, to move its leaderships to other in-sync replicas, so that clients
switch leaders without waiting for its ZooKeeper session to expire. The controller
answers with the partitions the broker still leads; the broker retries
``controlled.shutdown.max.retries`` times, ``controlled.shutdown.retry.backoff.ms``
apart, until none remain, then shuts down anyway (logging that it is unclean).

When the stopping broker is the controller itself, the request is made in-process.
Runs on the broker's event loop during shutdown; touches no shared state.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from klog.client.errors import KafkaClientError
from klog.client.network import BrokerConnection, build_request
from klog.daemon.security.listener import inter_broker_client_security
from klog.protocol import apis, inter_broker
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.config.broker import BrokerConfig
    from klog.daemon.controller.controller import Controller
    from klog.daemon.metadata_cache import MetadataCache

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


async def controlled_shutdown(config: BrokerConfig, broker_id: int, broker_epoch: int,
                              controller: Controller, metadata_cache: MetadataCache) -> bool:
    """Ask the controller to move this broker's leaderships (``controller`` when it is this
    broker's, else the one ``metadata_cache`` names); True when none remain."""
    if not config.controlled_shutdown_enable:
        return False
    retries = max(config.controlled_shutdown_max_retries, 1)
    backoff = max(config.controlled_shutdown_retry_backoff_ms, 0) / 1000
    for attempt in range(1, retries + 1):
        try:
            error, remaining = await _attempt(config, broker_id, broker_epoch, controller,
                                             metadata_cache)
        except (KafkaClientError, OSError) as exc:
            error, remaining = -1, []
            log.warning("controlled shutdown attempt %d: %s", attempt, exc)
        if error == 0 and not remaining:
            log.info("controlled shutdown of broker %d succeeded", broker_id)
            return True
        if error > 0:
            log.warning("controlled shutdown attempt %d: the controller answered %s",
                        attempt, _name(error))
        elif remaining:
            log.info("controlled shutdown attempt %d: %d partitions still led here: %s",
                     attempt, len(remaining),
                     ", ".join(f"{t}-{p}" for t, p in remaining[:10]))
        if attempt < retries:
            await asyncio.sleep(backoff)
    log.warning("controlled shutdown of broker %d did not complete; shutting down anyway",
                broker_id)
    return False


async def _attempt(config: BrokerConfig, broker_id: int, broker_epoch: int,
                   controller: Controller, metadata_cache: MetadataCache
                   ) -> tuple[int, list[TopicPartition]]:
    if controller.active:
        return await controller.controlled_shutdown(broker_id, broker_epoch)
    controller_id = metadata_cache.controller_id
    info = metadata_cache.broker(controller_id)
    if info is None:
        return int(ErrorCode.NOT_CONTROLLER), []
    listener = config.inter_broker_listener_name
    endpoint = info.endpoint(listener) or (info.endpoints[0] if info.endpoints else None)
    if endpoint is None:
        return int(ErrorCode.BROKER_NOT_AVAILABLE), []
    timeout = max(config.controller_socket_timeout_ms, 100) / 1000
    conn = BrokerConnection(controller_id, endpoint.host or "127.0.0.1", endpoint.port,
                            client_id=f"broker-{broker_id}-controlled-shutdown",
                            security=inter_broker_client_security(config))
    try:
        await conn.connect(timeout)
        theirs = conn.api_versions.get(inter_broker.CONTROLLED_SHUTDOWN)
        spec = apis.spec_for(inter_broker.CONTROLLED_SHUTDOWN)
        if theirs is None:
            return int(ErrorCode.UNSUPPORTED_VERSION), []
        # v0 needs request header v0, which the client does not write: at least v1.
        version = min(spec.max_version, theirs[1])
        if version < max(1, theirs[0]):
            return int(ErrorCode.UNSUPPORTED_VERSION), []
        entity = build_request(spec.request_entity(version), {
            "broker_id": broker_id, "broker_epoch": broker_epoch})
        response = await conn.request(inter_broker.CONTROLLED_SHUTDOWN, version, entity,
                                      timeout=timeout)
    finally:
        conn.close()
    remaining = [(p.topic_name, int(p.partition_index)) for p in response.remaining_partitions]
    return int(response.error_code), remaining


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
