"""DescribeConfigs (v0-4): topic and broker configs with sources (v0: is_default),
synonyms (when asked), types (v3+) and documentation (v3+, when asked), and a broker's
loggers with their levels (BROKER_LOGGER). Broker resource "" is the cluster default, as
in Kafka. DescribeConfigs on the topic, or on the cluster for a
broker, is needed (``config_refusal``)."""

from __future__ import annotations

from typing import Any

from klog.daemon.admin import DescribeConfigsResult
from klog.daemon.config import ConfigEntry, ConfigSource
from klog.daemon.handlers import Request, RequestContext, Response
from klog.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from klog.protocol.errors import ErrorCode

_TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC; BROKER (4) and BROKER_LOGGER (8) are the cluster's


async def handle(ctx: RequestContext, request: Request) -> Response:
    synonyms = bool(getattr(request, "include_synonyms", False))
    documentation = bool(getattr(request, "include_documentation", False))
    refused = [config_refusal(ctx, AclOperation.DESCRIBE_CONFIGS, r.resource_type,
                              r.resource_name) for r in request.resources]
    allowed = await ctx.services.admin.describe_configs(
        [(r.resource_type, r.resource_name, r.configuration_keys)
         for r, error in zip(request.resources, refused, strict=True) if not error])
    answers = iter(allowed)
    results = [DescribeConfigsResult(r.resource_type, r.resource_name, error)
               if error else next(answers)
               for r, error in zip(request.resources, refused, strict=True)]
    return ctx.respond({
        "throttle_time": 0,
        "results": [{
            "error_code": r.error_code,
            "error_message": r.error_message,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [_entry(e, synonyms, documentation) for e in r.entries],
        } for r in results],
    })


def config_refusal(ctx: RequestContext, operation: AclOperation, resource_type: int,
                   name: str) -> int:
    """0, or the error refusing ``operation`` (DescribeConfigs, AlterConfigs) on a config
    resource, as Kafka's KafkaApis: a topic's is checked on the topic
    (TOPIC_AUTHORIZATION_FAILED), a broker's or broker logger's on the cluster
    (CLUSTER_AUTHORIZATION_FAILED)."""
    if resource_type == _TOPIC_RESOURCE:
        return 0 if ctx.authorize(operation, ResourceType.TOPIC, name) \
            else int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return 0 if ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME) \
        else int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)


def _entry(entry: ConfigEntry, synonyms: bool, documentation: bool) -> dict[str, Any]:
    return {
        "name": entry.name,
        "value": entry.value,
        "read_only": entry.read_only,
        "config_source": int(entry.source),
        "is_default": entry.source == ConfigSource.DEFAULT_CONFIG,  # v0 only
        "is_sensitive": entry.is_sensitive,
        "synonyms": [{"name": s.name, "value": s.value, "source": int(s.source)}
                     for s in entry.synonyms] if synonyms else [],
        "config_type": int(entry.config_type),
        "documentation": entry.documentation if documentation else None,
    }
