"""DescribeGroups, ListGroups and DeleteGroups: the groups as the admin APIs see them.

``GroupListing`` is a part of the GroupCoordinator (klog/daemon/group/coordinator.py, which
derives from it): it reads the coordinator's groups and the metadata manager's groups
with offsets, and deletes Empty (or offsets-only) groups through the manager, as Kafka's
GroupCoordinator handles these three APIs. A group the coordinator does not hold but
that has offsets is Empty; one with neither is Dead. Runs on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from klog.daemon.group.group import GroupMetadata, GroupState
from klog.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klog.daemon.group.metadata_manager import GroupMetadataManager

# DescribeGroups' authorized_operations without an authorizer: READ, DELETE, DESCRIBE
# (AclOperation codes 3, 6, 8), what Kafka reports for a group when no ACLs apply.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error: ErrorCode
    state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[dict[str, Any], ...] = ()


class GroupListing:
    """The admin APIs' view of the coordinator's groups (see the module docstring)."""

    groups: dict[str, GroupMetadata]
    manager: GroupMetadataManager
    _active: bool

    def _validate(self, group_id: str | None, allow_empty_id: bool = False) -> ErrorCode | None:
        raise NotImplementedError  # the coordinator's

    def describe_groups(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        described = []
        for group_id in group_ids:
            error = self._validate(group_id, allow_empty_id=True)
            if error is not None:
                described.append(DescribedGroup(group_id, error))
                continue
            group = self.groups.get(group_id)
            if group is None or group.is_(GroupState.DEAD):
                state = (GroupState.EMPTY if group is None
                         and group_id in self.manager.groups_with_offsets() else GroupState.DEAD)
                described.append(DescribedGroup(group_id, ErrorCode.NONE, str(state)))
                continue
            summary = group.summary()
            described.append(DescribedGroup(
                group_id, ErrorCode.NONE, str(summary["group_state"]),
                str(summary["protocol_type"]), str(summary["protocol_data"]),
                # summary() is a dict[str, object] for the JSON views; members is its list.
                tuple(summary["members"]),  # type: ignore[arg-type]
            ))
        return described

    def list_groups(
        self, states_filter: Iterable[str] = ()
    ) -> tuple[ErrorCode, list[GroupOverview]]:
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        wanted = {s.lower() for s in states_filter}
        overviews: dict[str, GroupOverview] = {}
        for group_id, group in self.groups.items():
            if group.is_(GroupState.DEAD):
                continue
            overviews[group_id] = GroupOverview(group_id, group.protocol_type or "",
                                                str(group.state))
        for group_id in self.manager.groups_with_offsets():
            if group_id not in overviews:
                overviews[group_id] = GroupOverview(group_id, "", str(GroupState.EMPTY))
        groups = [o for o in overviews.values() if not wanted or o.state.lower() in wanted]
        # As Kafka: the groups known so far, flagged as incomplete while a partition loads.
        error = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self._any_partition_loading()
                 else ErrorCode.NONE)
        return error, groups

    def _any_partition_loading(self) -> bool:
        is_loading = getattr(self.manager, "is_loading", None)
        if is_loading is None:
            return False
        return any(is_loading(p) for p in range(getattr(self.manager, "num_partitions", 0)))

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in dict.fromkeys(group_ids):
            error = self._validate(group_id, allow_empty_id=True)
            if error is not None:
                results[group_id] = error
                continue
            group = self.groups.get(group_id)
            has_offsets = group_id in self.manager.groups_with_offsets()
            if group is None or group.is_(GroupState.DEAD):
                if not has_offsets:
                    results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
                    continue
            elif not group.is_(GroupState.EMPTY):
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
                continue
            if group is not None:
                group.transition_to(GroupState.DEAD)
                self.groups.pop(group_id, None)
            error = await self.manager.store_group(group_id, None)
            if error == ErrorCode.NONE:
                error = await self.manager.delete_group_offsets(group_id)
            results[group_id] = ErrorCode(error)
        return results
