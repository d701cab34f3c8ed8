"""The group coordinator's delayed operations (Kafka's DelayedHeartbeat, DelayedJoin,
InitialDelayedJoin and DelayedSync): a member's session, a rebalance's join phase (with
the first rebalance's initial delay) and its sync phase, each waiting in a purgatory of
the coordinator (klog/daemon/group/coordinator.py) keyed by ``join_key``/``sync_key`` or
(group, member).

They call back into the coordinator through ``RebalanceCallbacks``, the part of it they
use, so that this module does not import coordinator.py (no import cycle). Everything runs
on the broker's event loop.
"""

from __future__ import annotations

from typing import Protocol

from klog.daemon.group.group import GroupMetadata, GroupState
from klog.daemon.purgatory import DelayedOperation, DelayedOperationPurgatory


class RebalanceCallbacks(Protocol):
    """What the delayed operations call on the GroupCoordinator."""

    @property
    def rebalance_purgatory(self) -> DelayedOperationPurgatory[DelayedOperation]: ...

    def _heartbeat_done(self, group: GroupMetadata, member_id: str, is_pending: bool
                        ) -> bool: ...

    def _on_expire_heartbeat(self, group: GroupMetadata, member_id: str,
                             is_pending: bool) -> None: ...

    def _on_complete_join(self, group: GroupMetadata) -> None: ...

    def _on_expire_sync(self, group: GroupMetadata, generation_id: int) -> None: ...


class DelayedHeartbeat(DelayedOperation):
    def __init__(self, coordinator: RebalanceCallbacks, group: GroupMetadata, member_id: str,
                 is_pending: bool, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.is_pending = is_pending

    def try_complete(self) -> bool:
        if self.coordinator._heartbeat_done(self.group, self.member_id, self.is_pending):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator._on_expire_heartbeat(self.group, self.member_id, self.is_pending)


class DelayedJoin(DelayedOperation):
    def __init__(self, coordinator: RebalanceCallbacks, group: GroupMetadata,
                 timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        if self.group.has_all_members_joined():
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.coordinator._on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an Empty group: wait ``delay_ms`` for more members, and again
    (up to ``remaining_ms`` in total) as long as new members keep arriving."""

    def __init__(self, coordinator: RebalanceCallbacks, group: GroupMetadata,
                 configured_delay_ms: int, delay_ms: int, remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.configured_delay_ms = configured_delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay_ms, 0)
            self.coordinator.rebalance_purgatory.try_complete_else_watch(
                InitialDelayedJoin(self.coordinator, group, self.configured_delay_ms, delay,
                                   remaining),
                [join_key(group.group_id)],
            )
        else:
            super().on_complete()


class DelayedSync(DelayedOperation):
    """Members that got their JoinGroup answer must SyncGroup within the rebalance timeout."""

    def __init__(self, coordinator: RebalanceCallbacks, group: GroupMetadata,
                 generation_id: int, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        group = self.group
        if (self.generation_id != group.generation_id
                or group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
                or not group.pending_sync_members):
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator._on_expire_sync(self.group, self.generation_id)


def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)
