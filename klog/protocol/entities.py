"""Build kio entities from plain, version-independent values.

kio generates one set of classes per API version, each with only the fields that version
has. Handlers want to describe a response once -- "partition 0, error NONE, high watermark
42" -- and have it encoded at whatever version the client asked for. ``build`` does that:
it takes a mapping (nested mappings and sequences for nested entities), keeps the keys the
target class declares, drops the rest, and converts plain Python values to what kio's
writers expect (``timedelta`` for ``*_ms`` durations, kio's ErrorCode enum, tuples).

Field plans are computed once per class, so building is a few dict lookups per field.
``kio_class`` is the one place that finds kio's class of an API version (apis.py,
old_versions.py and produce.py load theirs through it).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import typing
import uuid
from collections.abc import Mapping
from typing import Any, Literal

from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.index import schema_name_map
from kio.static.constants import EntityType

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def kio_class(kio_name: str, version: int,
              kind: Literal[EntityType.request, EntityType.response]) -> type:
    """kio's class of ``version`` of the API kio calls ``kio_name`` (``"produce"``), its
    request or response as ``kind`` says; imported on first use (kio has a module
    per API version). KeyError for a version kio does not have."""
    path = schema_name_map[kio_name][version][kind]
    module_name, _, class_name = path.partition(":")
    module = __import__(module_name, fromlist=[class_name])
    cls: type = getattr(module, class_name)
    return cls


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kind: str  # "plain" | "entity" | "entities" | "timedelta" | "error" | "datetime" | "uuid"
    entity: type | None
    required: bool


def _convert_duration(value: Any) -> datetime.timedelta:
    if isinstance(value, datetime.timedelta):
        return value
    return datetime.timedelta(milliseconds=int(value))


def _convert_datetime(value: Any) -> Any:
    if value is None or isinstance(value, datetime.datetime):
        return value
    return _EPOCH + datetime.timedelta(milliseconds=int(value))


def _entity_of(annotation: Any) -> tuple[str, type | None]:
    """Classify a field annotation: nested entity, tuple of entities, or plain."""
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and args:
        return _entity_of(args[0])
    item = args[0] if args else None
    # Annotations name classes, so the isinstance only tells the checker what is_dataclass
    # already implies here.
    if origin is tuple and isinstance(item, type) and dataclasses.is_dataclass(item):
        return "entities", item
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return "entity", annotation
    return "plain", None


@functools.cache
def _plan(entity_type: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(entity_type)
    plan = []
    for f in dataclasses.fields(entity_type):
        kafka_type = f.metadata.get("kafka_type")
        if kafka_type in ("timedelta_i32", "timedelta_i64"):
            kind, entity = "timedelta", None
        elif kafka_type == "error_code":
            kind, entity = "error", None
        elif kafka_type in ("datetime_i64", "datetime"):
            kind, entity = "datetime", None
        elif kafka_type == "uuid":
            kind, entity = "uuid", None
        else:
            kind, entity = _entity_of(hints[f.name])
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        plan.append(_Field(f.name, kind, entity, required))
    return tuple(plan)


# Any: the values are whatever entity_type's fields take (each field its own type), and
# the result is an instance of entity_type, a kio class chosen at runtime.
def build(entity_type: type, values: Mapping[str, Any]) -> Any:
    """An instance of ``entity_type`` from ``values``.

    Keys the class does not declare are ignored (fields of other versions); fields the
    class declares but ``values`` lacks take their defaults, and a required field that is
    missing raises TypeError naming it -- a handler bug, not a client's.
    """
    kwargs: dict[str, Any] = {}
    for field in _plan(entity_type):
        if field.name not in values:
            if field.required:
                raise TypeError(f"{entity_type.__qualname__} needs {field.name!r}")
            continue
        value = values[field.name]
        kind = field.kind
        if kind == "plain" or value is None:
            if isinstance(value, list):
                value = tuple(value)
        elif kind == "entities":
            assert field.entity is not None
            value = tuple(
                v if isinstance(v, field.entity) else build(field.entity, v) for v in value
            )
        elif kind == "entity":
            assert field.entity is not None
            if not isinstance(value, field.entity):
                value = build(field.entity, value)
        elif kind == "timedelta":
            value = _convert_duration(value)
        elif kind == "error":
            value = KioErrorCode(int(value))
        elif kind == "datetime":
            value = _convert_datetime(value)
        elif kind == "uuid" and not isinstance(value, uuid.UUID):
            value = uuid.UUID(bytes=bytes(value)) if isinstance(value, bytes) else uuid.UUID(value)
        kwargs[field.name] = value
    return entity_type(**kwargs)


def field_names(entity_type: type) -> frozenset[str]:
    """The fields ``entity_type`` declares (what a request of that version carries)."""
    return frozenset(f.name for f in _plan(entity_type))


def as_millis(value: datetime.timedelta | datetime.datetime | int) -> int:
    """A kio duration or timestamp field as integer milliseconds (-1 stays -1)."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int((value - _EPOCH) / datetime.timedelta(milliseconds=1))
    return int(value)
