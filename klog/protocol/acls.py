"""Kafka's ACL model as values: resource types, operations, permissions, pattern types,
bindings and binding filters, with Kafka's codes (the bytes CreateAcls / DescribeAcls /
DeleteAcls carry) and names (what ZooKeeper's /kafka-acl JSON and kafka-acls.sh spell).

Pure: no I/O. The broker's authorizer (klog/daemon/security/authorizer.py), the admin
client (klog/client/admin.py) and ``klog acls`` share these definitions.

Codes follow org.apache.kafka.common.{resource.ResourceType, acl.AclOperation,
acl.AclPermissionType, resource.PatternType}. Filter semantics follow
``AclBindingFilter.matches``: a None name, principal or host matches anything; ANY
matches every value of its kind; the MATCH pattern type matches every pattern that would
apply to the named resource (the literal name, the literal wildcard ``*``, and every
prefix pattern the name starts with).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

#: The literal resource name that matches every resource of its type.
WILDCARD_RESOURCE = "*"
#: The principal that matches every principal; the host that matches every host.
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
#: The one name of the cluster resource.
CLUSTER_NAME = "kafka-cluster"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


_E = TypeVar("_E", bound=IntEnum)


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


#: Kafka's CamelCase names (SecurityUtils.resourceTypeName / operationName): the ZooKeeper
#: path segment, the JSON values, and what kafka-acls.sh accepts and prints.
RESOURCE_TYPE_NAMES: dict[ResourceType, str] = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
OPERATION_NAMES: dict[AclOperation, str] = {
    AclOperation.ALL: "All",
    AclOperation.READ: "Read",
    AclOperation.WRITE: "Write",
    AclOperation.CREATE: "Create",
    AclOperation.DELETE: "Delete",
    AclOperation.ALTER: "Alter",
    AclOperation.DESCRIBE: "Describe",
    AclOperation.CLUSTER_ACTION: "ClusterAction",
    AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs",
    AclOperation.ALTER_CONFIGS: "AlterConfigs",
    AclOperation.IDEMPOTENT_WRITE: "IdempotentWrite",
    AclOperation.CREATE_TOKENS: "CreateTokens",
    AclOperation.DESCRIBE_TOKENS: "DescribeTokens",
}
PERMISSION_NAMES: dict[AclPermissionType, str] = {
    AclPermissionType.ALLOW: "Allow",
    AclPermissionType.DENY: "Deny",
}

#: The operations an ACL on each resource type can grant (Kafka's
#: AclEntry.supportedOperations): KIP-430's authorized operations are these, filtered by
#: the authorizer; a broker without an authorizer answers all of them.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                           AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}

#: An ALLOW of one of these operations also allows the key (AclAuthorizer: Describe is
#: implied by Read, Write, Delete and Alter; DescribeConfigs by AlterConfigs). A DENY
#: implies nothing: it denies only its own operation (and All, everything).
IMPLIED_BY: dict[AclOperation, tuple[AclOperation, ...]] = {
    AclOperation.DESCRIBE: (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                            AclOperation.DELETE, AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS,
                                    AclOperation.ALTER_CONFIGS),
}


def operations_bitfield(operations: tuple[AclOperation, ...] | list[AclOperation]) -> int:
    """Kafka's Utils.to32BitField: bit ``code`` set for each operation."""
    return sum(1 << int(op) for op in set(operations))


def _by_name(names: Mapping[_E, str], text: str, what: str) -> _E:
    key = text.replace("-", "").replace("_", "").lower()
    for code, name in names.items():
        if name.lower() == key:
            return code
    raise ValueError(f"unknown {what} {text!r} (one of {', '.join(names.values())})")


def resource_type_named(text: str) -> ResourceType:
    return _by_name(RESOURCE_TYPE_NAMES, text, "resource type")


def operation_named(text: str) -> AclOperation:
    return _by_name(OPERATION_NAMES, text, "operation")


def permission_named(text: str) -> AclPermissionType:
    return _by_name(PERMISSION_NAMES, text, "permission type")


def pattern_type_named(text: str) -> PatternType:
    try:
        return PatternType[text.upper()]
    except KeyError:
        raise ValueError(f"unknown resource pattern type {text!r} (one of LITERAL, PREFIXED, "
                         "ANY, MATCH)") from None


def _name_of(enum_value: _E, names: Mapping[_E, str]) -> str:
    return names.get(enum_value, enum_value.name)


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={_name_of(self.resource_type, RESOURCE_TYPE_NAMES)}"
                f", name={self.name}, patternType={self.pattern_type.name})")


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str  # "User:alice", "User:*"
    host: str  # an address or "*"
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={_name_of(self.operation, OPERATION_NAMES)}, "
                f"permissionType={_name_of(self.permission_type, PERMISSION_NAMES)})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def invalid_reason(self) -> str | None:
        """Why a broker refuses to store this binding (Kafka: INVALID_REQUEST), or None."""
        p, e = self.pattern, self.entry
        if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or \
                p.resource_type not in RESOURCE_TYPE_NAMES:
            return f"invalid resource type {p.resource_type!r}"
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"invalid resource pattern type {p.pattern_type.name}"
        if not p.name:
            return "Invalid empty resource name"
        if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
        if "/" in p.name:  # a ZooKeeper path segment cannot hold one
            return f"invalid resource name {p.name!r}: '/' is not allowed"
        if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN) or \
                e.operation not in OPERATION_NAMES:
            return f"invalid operation {e.operation!r}"
        if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return f"invalid permission type {e.permission_type!r}"
        kind, sep, name = e.principal.partition(":")
        if not sep or not kind or not name:
            return f"invalid principal {e.principal!r}: expected Type:name"
        if not e.host:
            return "invalid empty host"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select. None name/principal/host: any."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type == PatternType.ANY:
            return self.name is None or self.name == pattern.name
        if self.pattern_type == PatternType.MATCH:
            if self.name is None:
                return True
            if pattern.pattern_type == PatternType.LITERAL:
                return pattern.name in (self.name, WILDCARD_RESOURCE)
            if pattern.pattern_type == PatternType.PREFIXED:
                return self.name.startswith(pattern.name)
            return False
        return self.pattern_type == pattern.pattern_type and (
            self.name is None or self.name == pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type == AclPermissionType.ANY
                     or self.permission_type == entry.permission_type))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def invalid_reason(self) -> str | None:
        """Why a broker refuses this filter (UNKNOWN elements), or None."""
        if ResourceType.UNKNOWN in (self.resource_type,) or \
                self.pattern_type == PatternType.UNKNOWN or \
                self.operation == AclOperation.UNKNOWN or \
                self.permission_type == AclPermissionType.UNKNOWN:
            return "the filter contains UNKNOWN elements"
        return None


def coerce_enum(enum_type: type[IntEnum], value: int) -> IntEnum:
    """A code from the wire as its enum, UNKNOWN (0) for a code Kafka does not define."""
    try:
        return enum_type(int(value))
    except ValueError:
        return enum_type(0)
