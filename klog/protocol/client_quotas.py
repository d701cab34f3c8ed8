"""Client quota names shared by the broker, the admin client and the CLI (Kafka's
QuotaConfigs and ClientQuotaEntity): the quota keys of user and client-id entities, and
the entity types of DescribeClientQuotas / AlterClientQuotas."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

#: The quota keys, and whether each is a whole number (Kafka's QuotaConfigs: the byte
#: rates are LONG, the others DOUBLE).
QUOTA_KEYS: Mapping[str, bool] = MappingProxyType({
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
})

#: Entity types (ClientQuotaEntity).
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
