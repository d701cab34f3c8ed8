"""DescribeConfigs (v0-4): topic and broker configs with sources (v0: is_default),
synonyms (when asked), types (v3+) and documentation (v3+, when asked). Broker resource ""
is the cluster default, as in Kafka."""

from __future__ import annotations

from typing import Any

from klog.daemon.config import ConfigEntry, ConfigSource
from klog.daemon.handlers import Request, RequestContext, Response


async def handle(ctx: RequestContext, request: Request) -> Response:
    synonyms = bool(getattr(request, "include_synonyms", False))
    documentation = bool(getattr(request, "include_documentation", False))
    results = await ctx.services.admin.describe_configs(
        [(r.resource_type, r.resource_name, r.configuration_keys) for r in request.resources]
    )
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
