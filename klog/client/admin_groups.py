"""The admin client's consumer-group operations: ListGroups (every broker), DescribeGroups,
DeleteGroups, OffsetFetch, OffsetCommit and OffsetDelete (each to the group's coordinator,
found with FindCoordinator and found again while the answer says it moved or is loading),
and what kafka-consumer-groups builds on them (the lag of each partition, an offsets
reset's plan).

``GroupAdmin`` is a part of the AdminClient (klog/client/admin.py derives from it), as
Kafka's admin client has these among its calls; the transaction calls use its
coordinator lookup too. Used on one event loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from klog.client.admin_types import (
    BrokerDescription,
    GroupDescription,
    GroupListing,
    ListedOffset,
    MemberDescription,
    OffsetResetSpec,
    PartitionLag,
    TopicPartition,
)
from klog.client.errors import KafkaClientError, error_about, error_for
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import InternalTopicError

if TYPE_CHECKING:
    from klog.client.group_coordinator import OffsetAndMetadata
    from klog.client.network import KafkaClient

OFFSET_COMMIT, OFFSET_FETCH, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 15, 16
DELETE_GROUPS, OFFSET_DELETE = 42, 47


class GroupAdmin:
    """The consumer-group calls of the AdminClient (see the module docstring)."""

    client: KafkaClient

    if TYPE_CHECKING:
        # The AdminClient's (admin.py), which overloads it on raise_errors.
        async def list_offsets(self, specs: Mapping[TopicPartition, str | int], *,
                               isolation_level: int = 0, raise_errors: bool
                               ) -> Mapping[TopicPartition, Any]: ...

    @property
    def _timeout_ms(self) -> int:
        return self.client.request_timeout_ms

    async def _group_coordinator(self, group_id: str, key_type: int = 0) -> int:
        """The coordinator's node id (FindCoordinator, retried while the offsets topic is
        created or loads); metadata refreshed if the node is not known yet. ``key_type``
        1: the coordinator of the transactional id ``group_id``."""
        from klog.client.group_coordinator import find_coordinator

        deadline = asyncio.get_running_loop().time() + self._timeout_ms / 1000
        while True:
            try:
                node_id, _host, _port = await find_coordinator(self.client, group_id, key_type)
                break
            except KafkaClientError as exc:
                if not exc.retriable or asyncio.get_running_loop().time() >= deadline:
                    raise
                await asyncio.sleep(0.1)
        if node_id not in self.client.cluster.brokers:
            await self.client.refresh_metadata([])
        return node_id

    async def _to_group_coordinator(self, group_id: str, api_key: int,
                                    values: Mapping[str, Any],
                                    error_of: Callable[[Any], int]) -> Any:
        """Send to the group's coordinator; find it again while the answer says it moved
        or is loading (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE)."""
        from klog.client.group_coordinator import COORDINATOR_ERRORS, MAX_VERSIONS

        retry = COORDINATOR_ERRORS | {int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)}
        response = None
        for attempt in range(10):
            node = await self._group_coordinator(group_id)
            version = self.client.api_version(node, api_key, MAX_VERSIONS.get(api_key))
            response = await self.client.send(node, api_key, values, version=version)
            if int(error_of(response)) not in retry or attempt == 9:
                return response
            await asyncio.sleep(0.1 * (attempt + 1))
        return response

    async def list_groups(self, states: Sequence[str] | None = None) -> list[GroupListing]:
        """Every group of every broker (ListGroups to each), optionally only those in
        ``states`` (Kafka's names: Stable, Empty, PreparingRebalance, ...), by id."""
        await self.client.refresh_metadata([])
        wanted = list(states or ())

        async def one(broker: int) -> list[GroupListing]:
            response = await self.client.send(broker, LIST_GROUPS, {
                "states_filter": wanted, "types_filter": []})
            error = error_about(response.error_code, None, f"listing groups on broker {broker}")
            if error is not None:
                raise error
            return [GroupListing(g.group_id, g.protocol_type,
                                 getattr(g, "group_state", None) or None, broker)
                    for g in response.groups]

        found: dict[str, GroupListing] = {}
        for listing in await asyncio.gather(*(one(b) for b in sorted(self.client.cluster.brokers))):
            for g in listing:
                found[g.group_id] = g
        listed = sorted(found.values(), key=lambda g: g.group_id)
        if wanted:  # brokers before ListGroups v4 do not filter
            lowered = {s.lower() for s in wanted}
            listed = [g for g in listed if g.state is None or g.state.lower() in lowered]
        return listed

    async def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupDescription]:
        """State, assignor, coordinator and members (with their assignments, decoded for
        consumer groups) of each group. A group that does not exist is in state Dead."""
        from klog.client.assignors import decode_assignment, decode_subscription

        async def one(group_id: str) -> GroupDescription:
            response = await self._to_group_coordinator(
                group_id, DESCRIBE_GROUPS,
                {"groups": [group_id], "include_authorized_operations": False},
                lambda r: r.groups[0].error_code if r.groups else 0)
            node = await self._group_coordinator(group_id)
            meta = self.client.cluster.brokers.get(node)
            coordinator = BrokerDescription(node, meta.host if meta else "?",
                                            meta.port if meta else -1,
                                            meta.rack if meta else None)
            g = response.groups[0]
            error = error_about(g.error_code, getattr(g, "error_message", None),
                           f"group {group_id!r}")
            if error is not None:
                raise error
            members = []
            for m in g.members:
                assignment: tuple[TopicPartition, ...] = ()
                topics: tuple[str, ...] = ()
                if g.protocol_type == "consumer":
                    # A member's blobs are its own business: undecodable ones show nothing.
                    with contextlib.suppress(InternalTopicError):
                        assignment = tuple(decode_assignment(bytes(m.member_assignment)))
                    with contextlib.suppress(InternalTopicError):
                        if m.member_metadata:
                            topics = decode_subscription(bytes(m.member_metadata)).topics
                members.append(MemberDescription(
                    m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                    m.client_host, assignment, topics))
            return GroupDescription(g.group_id, g.group_state, g.protocol_type,
                                    g.protocol_data, tuple(members), coordinator)

        results = await asyncio.gather(*(one(g) for g in group_ids))
        return {d.group_id: d for d in results}

    async def delete_groups(self, group_ids: Sequence[str]
                            ) -> dict[str, KafkaClientError | None]:
        """Delete groups and their committed offsets (only empty groups can go:
        NON_EMPTY_GROUP otherwise); group id -> None or the error."""
        async def one(group_id: str) -> tuple[str, KafkaClientError | None]:
            try:
                response = await self._to_group_coordinator(
                    group_id, DELETE_GROUPS, {"groups_names": [group_id]},
                    lambda r: r.results[0].error_code if r.results else 0)
            except KafkaClientError as exc:
                return group_id, exc
            codes = {r.group_id: r.error_code for r in response.results}
            return group_id, error_about(codes.get(group_id, ErrorCode.UNKNOWN_SERVER_ERROR),
                                    None, f"group {group_id!r}")

        return dict(await asyncio.gather(*(one(g) for g in group_ids)))

    async def list_group_offsets(self, group_id: str,
                                 partitions: Sequence[TopicPartition] | None = None
                                 ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (``partitions`` None: all it has), as
        klog.client.group_coordinator.OffsetAndMetadata; partitions without a committed
        offset are left out."""
        from klog.client.fetcher import TopicPartition as TP
        from klog.client.group_coordinator import (
            offset_fetch_values,
            parse_offset_fetch,
        )

        wanted = None if partitions is None else [TP(*tp) for tp in partitions]
        values = offset_fetch_values(group_id, wanted)

        def error_of(r: Any) -> int:
            return parse_offset_fetch(r, group_id).error

        response = await self._to_group_coordinator(group_id, OFFSET_FETCH, values, error_of)
        found = parse_offset_fetch(response, group_id)
        error = error_about(found.error, None, f"group {group_id!r}")
        if error is not None:
            raise error
        for tp, code in found.partition_errors.items():
            raise error_for(code, f"group {group_id!r}: {tp[0]}-{tp[1]}")
        return {(tp.topic, tp.partition): om for tp, om in sorted(found.offsets.items())
                if om.offset >= 0}

    async def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]
                                  ) -> dict[TopicPartition, KafkaClientError | None]:
        """Commit offsets for the group as an admin (generation -1, no member id): the
        coordinator accepts it only while the group has no active members."""
        from klog.client.fetcher import TopicPartition as TP
        from klog.client.group_coordinator import (
            OffsetAndMetadata,
            offset_commit_values,
            parse_offset_commit,
        )

        values = offset_commit_values(
            group_id, {TP(*tp): OffsetAndMetadata(int(o)) for tp, o in offsets.items()})

        def error_of(r: Any) -> int:
            return next((c for c in parse_offset_commit(r).values() if c), 0)

        response = await self._to_group_coordinator(group_id, OFFSET_COMMIT, values, error_of)
        return {(tp.topic, tp.partition): error_about(code, None, f"{tp.topic}-{tp.partition}")
                for tp, code in parse_offset_commit(response).items()}

    async def delete_group_offsets(self, group_id: str, partitions: Sequence[TopicPartition]
                                   ) -> dict[TopicPartition, KafkaClientError | None]:
        """Forget the group's committed offsets of these partitions (OffsetDelete); a
        partition the group still consumes answers GROUP_SUBSCRIBED_TO_TOPIC."""
        by_topic: dict[str, list[dict[str, int]]] = defaultdict(list)
        for topic, partition in partitions:
            by_topic[topic].append({"partition_index": partition})
        values = {"group_id": group_id,
                  "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
        response = await self._to_group_coordinator(
            group_id, OFFSET_DELETE, values, lambda r: r.error_code)
        error = error_about(response.error_code, None, f"group {group_id!r}")
        if error is not None:
            raise error
        return {(t.name, int(p.partition_index)):
                error_about(p.error_code, None, f"{t.name}-{p.partition_index}")
                for t in response.topics for p in t.partitions}

    async def group_lag(self, group_id: str) -> tuple[GroupDescription, list[PartitionLag]]:
        """What `kafka-consumer-groups --describe` shows: for every partition the group
        has a committed offset for or has assigned, the committed offset, the log end
        offset, the lag and the member consuming it."""
        description = (await self.describe_groups([group_id]))[group_id]
        committed = await self.list_group_offsets(group_id)
        owner: dict[TopicPartition, MemberDescription] = {}
        for m in description.members:
            for tp in m.assignment:
                owner[(tp[0], tp[1])] = m
        partitions = sorted(set(committed) | set(owner))
        ends = await self.list_offsets({tp: "latest" for tp in partitions},
                                       raise_errors=False) if partitions else {}
        rows = []
        for tp in partitions:
            om = committed.get(tp)
            end = ends.get(tp)
            log_end = end.offset if isinstance(end, ListedOffset) else None
            current = None if om is None else om.offset
            lag = None if current is None or log_end is None else max(0, log_end - current)
            member = owner.get(tp)
            rows.append(PartitionLag(tp[0], tp[1], current, log_end, lag,
                                     None if member is None else member.member_id,
                                     None if member is None else member.host,
                                     None if member is None else member.client_id,
                                     None if om is None else om.metadata))
        return description, rows

    async def plan_group_offsets_reset(self, group_id: str,
                                       partitions: Sequence[TopicPartition],
                                       spec: OffsetResetSpec) -> dict[TopicPartition, int]:
        """The new offset of each partition for a reset (kafka-consumer-groups
        --reset-offsets): earliest, latest, an offset, the first offset at or after a time
        (the end when there is none), or the committed offset shifted (KafkaClientError
        for a partition with nothing committed, as Kafka refuses it). Offsets are kept
        within [log start offset, log end offset]."""
        parts = sorted(set(partitions))
        if not parts:
            return {}
        starts = await self.list_offsets({tp: "earliest" for tp in parts}, raise_errors=True)
        ends = await self.list_offsets({tp: "latest" for tp in parts}, raise_errors=True)
        plan: dict[TopicPartition, int] = {}
        if spec.kind == "datetime":
            found = await self.list_offsets({tp: spec.value for tp in parts}, raise_errors=True)
            for tp in parts:
                hit = found[tp].offset
                plan[tp] = hit if hit >= 0 else ends[tp].offset
        elif spec.kind == "shift":
            committed = await self.list_group_offsets(group_id, parts)
            for tp in parts:
                om = committed.get(tp)
                if om is None:
                    raise KafkaClientError(
                        f"cannot shift the offset of {tp[0]}-{tp[1]}: group {group_id!r} "
                        "has no committed offset for it")
                plan[tp] = om.offset + spec.value
        else:
            for tp in parts:
                plan[tp] = {"earliest": starts[tp].offset, "latest": ends[tp].offset,
                            "offset": spec.value}[spec.kind]
        return {tp: max(starts[tp].offset, min(offset, ends[tp].offset))
                for tp, offset in plan.items()}
