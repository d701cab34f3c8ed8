"""The group coordinator: Kafka's classic group protocol on the broker.

Owns every group of the ``__consumer_offsets`` partitions this broker leads (``groups``)
and answers JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit (membership checks;
the offsets themselves go to the GroupMetadataManager), OffsetDelete, DescribeGroups,
ListGroups and DeleteGroups as Kafka 3.x's GroupCoordinator does:

- JoinGroup: a new dynamic member (v4+) is first told MEMBER_ID_REQUIRED with its
  generated id and waits in ``pending_members`` (expiring after its session timeout); the
  first rebalance of an Empty group waits ``group.initial.rebalance.delay.ms`` (extended by
  that much while new members keep arriving, up to the rebalance timeout); a rebalance
  completes when every member rejoined, or at the rebalance timeout (the largest of the
  members'), which drops the dynamic members that did not rejoin.
- Static members (``group.instance.id``): a known instance rejoining with an unknown member
  id gets a new member id, the old one is fenced (FENCED_INSTANCE_ID); in a Stable group
  whose selected protocol would not change this costs no rebalance, only a stored group
  record.
- SyncGroup: the leader's assignment is stored (``manager.store_group``) before anybody
  gets an answer; members that do not sync within the rebalance timeout are removed.
- Sessions: every member has a DelayedHeartbeat in ``heartbeat_purgatory`` keyed by
  (group, member); a heartbeat (or any valid request of the member) completes it and
  schedules the next one. Joins and syncs wait in ``rebalance_purgatory``.

Every request first passes ``_validate``: a valid group id, an active coordinator, and
``manager.coordinator_error`` (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / ...).

Locking: none; everything runs on the broker's event loop (timeouts come from the broker's
Timer). Async requests park on futures that the state machine completes through the
members' callbacks, so the state changes themselves never await; only storing records does,
and the state is re-checked after every such await.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from klog.daemon.group.group import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    GroupMetadata,
    GroupState,
    JoinGroupResult,
    MemberMetadata,
    Protocols,
    SyncGroupResult,
    join_error,
)
from klog.daemon.purgatory import DelayedOperation, DelayedOperationPurgatory, Timer
from klog.protocol.errors import ErrorCode
from klog.protocol.internal_topics import GroupMetadataValue

if TYPE_CHECKING:
    from klog.daemon.config.broker import BrokerConfig
    from klog.daemon.config.dynamic import DynamicBrokerConfig
    from klog.daemon.group.metadata_manager import GroupMetadataManager

log = logging.getLogger(__name__)

# A new member's JoinGroup waits at most this long (Kafka's NewMemberJoinTimeoutMs): it has
# no member id to heartbeat with, and a defunct one must not hold a rebalance forever.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

# DescribeGroups' authorized_operations without an authorizer: READ, DELETE, DESCRIBE
# (AclOperation codes 3, 6, 8), what Kafka reports for a group when no ACLs apply.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

_ALL_STATES = {s.value.lower(): s for s in GroupState}


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


# ---------------------------------------------------------------------------------------------
# Delayed operations


class DelayedHeartbeat(DelayedOperation):
    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata, member_id: str,
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
    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata,
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

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata,
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
                [_join_key(group.group_id)],
            )
        else:
            super().on_complete()


class DelayedSync(DelayedOperation):
    """Members that got their JoinGroup answer must SyncGroup within the rebalance timeout."""

    def __init__(self, coordinator: GroupCoordinator, group: GroupMetadata,
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


def _join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def _sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


# ---------------------------------------------------------------------------------------------


class GroupCoordinator:
    """See the module docstring. ``groups`` maps group id -> GroupMetadata (this broker's)."""

    def __init__(self, config: DynamicBrokerConfig, manager: GroupMetadataManager) -> None:
        self.config = config
        self.manager = manager
        self.groups: dict[str, GroupMetadata] = {}
        self._active = False
        self._timer: Timer | None = None
        self._owns_timer = False
        self._heartbeat_purgatory: DelayedOperationPurgatory[DelayedHeartbeat] | None = None
        self._rebalance_purgatory: DelayedOperationPurgatory[DelayedOperation] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        manager.on_group_loaded = self.on_group_loaded
        manager.on_partition_unloaded = self.on_partition_unloaded
        manager.on_group_removed = self.on_group_removed
        manager.group_state_of = self.group_state

    # -- lifecycle ------------------------------------------------------------------------

    def startup(self) -> None:
        self._ensure_purgatories()
        self._active = True

    def shutdown(self) -> None:
        self._active = False
        for task in list(self._tasks):
            task.cancel()
        if self._heartbeat_purgatory is not None:
            self._heartbeat_purgatory.shutdown()
        if self._rebalance_purgatory is not None:
            self._rebalance_purgatory.shutdown()
        if self._owns_timer and self._timer is not None:
            self._timer.close()
        self._heartbeat_purgatory = self._rebalance_purgatory = None
        self._timer = None

    def _ensure_purgatories(self) -> None:
        if self._heartbeat_purgatory is not None:
            return
        # Its own timer: the group delays' expirations never queue behind produce's and
        # fetch's on the replica manager's.
        timer = Timer()
        self._owns_timer = True
        self._timer = timer
        self._heartbeat_purgatory = DelayedOperationPurgatory("Heartbeat", timer)
        self._rebalance_purgatory = DelayedOperationPurgatory("Rebalance", timer)

    @property
    def heartbeat_purgatory(self) -> DelayedOperationPurgatory[DelayedHeartbeat]:
        self._ensure_purgatories()
        assert self._heartbeat_purgatory is not None
        return self._heartbeat_purgatory

    @property
    def rebalance_purgatory(self) -> DelayedOperationPurgatory[DelayedOperation]:
        self._ensure_purgatories()
        assert self._rebalance_purgatory is not None
        return self._rebalance_purgatory

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group coordinator task failed", exc_info=task.exception())

    # -- config ---------------------------------------------------------------------------

    @property
    def _config(self) -> BrokerConfig:
        return self.config.current

    # -- validation -----------------------------------------------------------------------

    def _validate(self, group_id: str | None, allow_empty_id: bool = False) -> ErrorCode | None:
        # OffsetCommit, OffsetFetch, DescribeGroups and DeleteGroups accept the empty group
        # id (old clients committed under it); the membership APIs do not.
        if group_id is None or (group_id == "" and not allow_empty_id):
            return ErrorCode.INVALID_GROUP_ID
        if not self._active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return self.manager.coordinator_error(group_id)

    def group_state(self, group_id: str) -> str | None:
        group = self.groups.get(group_id)
        if group is None:
            return None
        return str(group.state)

    # -- hooks from the metadata manager ---------------------------------------------------

    def on_group_loaded(self, group_id: str, value: GroupMetadataValue) -> None:
        """A group record found while loading a partition: install it (Stable or Empty)."""
        old = self.groups.get(group_id)
        if old is not None:
            self._unload_group(old)
        group = GroupMetadata.from_value(group_id, value)
        self.groups[group_id] = group
        log.info("loaded group %s generation %d (%s, %d members)", group_id,
                 group.generation_id, group.state, group.size)
        if group.size > self._config.group_max_size:
            self._prepare_rebalance(group, "freshly loaded group is over capacity")
        for member in list(group.members.values()):
            self._complete_and_schedule_next_heartbeat(group, member)

    def on_partition_unloaded(self, partition: int) -> None:
        for group_id, group in list(self.groups.items()):
            if self.manager.partition_for(group_id) == partition:
                del self.groups[group_id]
                self._unload_group(group)

    def on_group_removed(self, group_id: str) -> None:
        """The manager expired an Empty group's last offsets (and tombstoned its metadata)."""
        group = self.groups.get(group_id)
        if group is not None and group.is_(GroupState.EMPTY):
            group.transition_to(GroupState.DEAD)
            del self.groups[group_id]

    def _unload_group(self, group: GroupMetadata) -> None:
        log.info("unloading group %s generation %d", group.group_id, group.generation_id)
        previous = group.state
        group.transition_to(GroupState.DEAD)
        if previous is GroupState.PREPARING_REBALANCE:
            for member in list(group.members.values()):
                group.maybe_invoke_join_callback(
                    member, join_error(member.member_id, ErrorCode.NOT_COORDINATOR))
            self.rebalance_purgatory.check_and_complete(_join_key(group.group_id))
        elif previous in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            for member in list(group.members.values()):
                group.maybe_invoke_sync_callback(
                    member, SyncGroupResult(ErrorCode.NOT_COORDINATOR))
                self.heartbeat_purgatory.check_and_complete((group.group_id, member.member_id))

    # -- JoinGroup ------------------------------------------------------------------------

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        require_known_member_id: bool,
        supports_skip_assignment: bool,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
        reason: str | None = None,
    ) -> JoinGroupResult:
        future: asyncio.Future[JoinGroupResult] = asyncio.get_running_loop().create_future()

        def respond(result: JoinGroupResult) -> None:
            if not future.done():
                future.set_result(result)

        self._handle_join_group(
            group_id, member_id, group_instance_id, require_known_member_id,
            supports_skip_assignment, client_id, client_host, rebalance_timeout_ms,
            session_timeout_ms, protocol_type, protocols, reason, respond,
        )
        return await future

    def _handle_join_group(
        self, group_id: str, member_id: str, group_instance_id: str | None,
        require_known_member_id: bool, supports_skip_assignment: bool, client_id: str,
        client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: Protocols, reason: str | None,
        respond: Callable[[JoinGroupResult], None],
    ) -> None:
        error = self._validate(group_id)
        if error is not None:
            respond(join_error(member_id, error))
            return
        config = self._config
        if not (config.group_min_session_timeout_ms <= session_timeout_ms
                <= config.group_max_session_timeout_ms):
            respond(join_error(member_id, ErrorCode.INVALID_SESSION_TIMEOUT))
            return
        is_unknown_member = member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(group_id)
        if group is None:
            # A group is created only by a member without an id; a member id for a group we
            # do not know is stale.
            if not is_unknown_member:
                respond(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            group = self.groups[group_id] = GroupMetadata(group_id)
        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            group.remove_pending_member(member_id)
            respond(join_error(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED))
        elif is_unknown_member:
            self._do_new_member_join(
                group, group_instance_id, require_known_member_id, supports_skip_assignment,
                client_id, client_host, rebalance_timeout_ms, session_timeout_ms,
                protocol_type, protocols, reason, respond)
        else:
            self._do_current_member_join(
                group, member_id, group_instance_id, client_id, client_host,
                rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, reason,
                respond)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(_join_key(group_id))

    def _accept_joining_member(self, group: GroupMetadata, member_id: str) -> bool:
        max_size = self._config.group_max_size
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if state is GroupState.PREPARING_REBALANCE:
            # Members already waiting count, not the size: the size may exceed a lowered
            # group.max.size, and this sheds the last members to rejoin.
            return ((group.has(member_id) and group.get(member_id).is_awaiting_join)
                    or group.num_members_awaiting_join < max_size)
        return group.has(member_id) or group.size < max_size

    def _do_new_member_join(
        self, group: GroupMetadata, group_instance_id: str | None,
        require_known_member_id: bool, supports_skip_assignment: bool, client_id: str,
        client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: Protocols, reason: str | None,
        respond: Callable[[JoinGroupResult], None],
    ) -> None:
        if group.is_(GroupState.DEAD):
            respond(join_error(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            respond(join_error(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        new_member_id = group.generate_member_id(client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.current_static_member_id(group_instance_id)
            if old_member_id is not None:
                self._update_static_member_and_rebalance(
                    group, old_member_id, new_member_id, group_instance_id, protocols,
                    rebalance_timeout_ms, session_timeout_ms, supports_skip_assignment,
                    respond)
            else:
                self._add_member_and_rebalance(
                    group, new_member_id, group_instance_id, client_id, client_host,
                    rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols, respond)
        elif require_known_member_id:
            # v4+: hand out the id first; the member joins again with it. Until then it is
            # pending, and it expires after its session timeout if it never comes back.
            group.add_pending_member(new_member_id)
            self._add_pending_member_expiration(group, new_member_id, session_timeout_ms)
            respond(join_error(new_member_id, ErrorCode.MEMBER_ID_REQUIRED))
        else:
            self._add_member_and_rebalance(
                group, new_member_id, None, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, respond)

    def _do_current_member_join(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: Protocols, reason: str | None,
        respond: Callable[[JoinGroupResult], None],
    ) -> None:
        if group.is_(GroupState.DEAD):
            respond(join_error(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            respond(join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                # Pending members are dynamic by construction; a static id here is a client
                # mixing identities.
                respond(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))
                return
            self._add_member_and_rebalance(
                group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, respond)
            return
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            respond(join_error(member_id, error))
            return
        member = group.get(member_id)
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, protocols, rebalance_timeout_ms,
                                              session_timeout_ms, respond)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The same join again (it missed our answer): the current generation's answer.
                respond(self._join_result(group, member_id))
            else:
                self._update_member_and_rebalance(group, member, protocols,
                                                  rebalance_timeout_ms, session_timeout_ms,
                                                  respond)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # A leader's JoinGroup forces a rebalance: it is how a consumer reacts to
                # changes only it sees (e.g. new partitions of a subscribed topic).
                self._update_member_and_rebalance(group, member, protocols,
                                                  rebalance_timeout_ms, session_timeout_ms,
                                                  respond)
            else:
                respond(self._join_result(group, member_id, include_members=False))
        else:
            respond(join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID))

    def _join_result(self, group: GroupMetadata, member_id: str,
                     include_members: bool = True) -> JoinGroupResult:
        members = (group.current_member_metadata()
                   if include_members and group.is_leader(member_id) else [])
        return JoinGroupResult(
            error=ErrorCode.NONE, member_id=member_id, generation_id=group.generation_id,
            protocol_type=group.protocol_type, protocol_name=group.protocol_name,
            leader_id=group.leader_id or "", members=members,
        )

    def _validate_current_member(self, group: GroupMetadata, member_id: str,
                                 group_instance_id: str | None) -> ErrorCode | None:
        """A static member's instance id must map to this member id; the member must exist."""
        if group_instance_id is not None:
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
            return None
        if not group.has(member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _add_member_and_rebalance(
        self, group: GroupMetadata, member_id: str, group_instance_id: str | None,
        client_id: str, client_host: str, rebalance_timeout_ms: int, session_timeout_ms: int,
        protocol_type: str, protocols: Protocols, respond: Callable[[JoinGroupResult], None],
    ) -> None:
        member = MemberMetadata(member_id, group.group_id, group_instance_id, client_id,
                                client_host, rebalance_timeout_ms, session_timeout_ms,
                                protocol_type, protocols)
        member.is_new = True
        # While the first generation is being formed, each new member extends the
        # initial delay (InitialDelayedJoin).
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, respond)
        # A new member cannot heartbeat (its JoinGroup is parked); if it goes away, the
        # member must not stall rebalances forever.
        self._complete_and_schedule_next_expiration(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")

    def _update_member_and_rebalance(
        self, group: GroupMetadata, member: MemberMetadata, protocols: Protocols,
        rebalance_timeout_ms: int, session_timeout_ms: int,
        respond: Callable[[JoinGroupResult], None],
    ) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms,
                            respond)
        self._maybe_prepare_rebalance(group, f"updating metadata of member {member.member_id}")

    def _update_static_member_and_rebalance(
        self, group: GroupMetadata, old_member_id: str, new_member_id: str,
        group_instance_id: str, protocols: Protocols, rebalance_timeout_ms: int,
        session_timeout_ms: int, supports_skip_assignment: bool,
        respond: Callable[[JoinGroupResult], None],
    ) -> None:
        current_leader = group.leader_id or ""
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        # The old id's heartbeat expiry finds no such member and does nothing.
        self._complete_and_schedule_next_heartbeat(group, member)
        old_protocols = list(member.supported_protocols)
        old_rebalance_timeout = member.rebalance_timeout_ms
        old_session_timeout = member.session_timeout_ms
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms,
                            respond)
        state = group.state
        if state is GroupState.STABLE:
            if group.select_protocol() == group.protocol_name:
                log.info("static member %s of group %s rejoined as %s: no rebalance",
                         group_instance_id, group.group_id, new_member_id)
                self._spawn(self._store_static_member(
                    group, member, old_member_id, new_member_id, group_instance_id,
                    current_leader, old_protocols, old_rebalance_timeout, old_session_timeout,
                    supports_skip_assignment))
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {group_instance_id} changed the selected protocol")
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old member id: rebalance again.
            self._prepare_rebalance(
                group, f"static member {group_instance_id} rejoined during CompletingRebalance")
        # PreparingRebalance: it simply waits with the others.

    async def _store_static_member(
        self, group: GroupMetadata, member: MemberMetadata, old_member_id: str,
        new_member_id: str, group_instance_id: str, current_leader: str,
        old_protocols: Protocols, old_rebalance_timeout: int, old_session_timeout: int,
        supports_skip_assignment: bool,
    ) -> None:
        generation = group.generation_id
        assignment = {m.member_id: m.assignment for m in group.members.values()}
        error = await self.manager.store_group(group.group_id, group.to_value(assignment))
        if group.members.get(new_member_id) is not member or not member.is_awaiting_join:
            return  # superseded meanwhile (fenced again, removed, or answered)
        if error != ErrorCode.NONE:
            log.warning("storing static member %s of group %s failed: %s",
                        group_instance_id, group.group_id, ErrorCode(error).name)
            respond = member.awaiting_join
            group.update_member(member, old_protocols, old_rebalance_timeout,
                                old_session_timeout, None)
            if group.current_static_member_id(group_instance_id) == new_member_id:
                restored = group.replace_static_member(group_instance_id, new_member_id,
                                                       old_member_id)
                self._complete_and_schedule_next_heartbeat(group, restored)
            if respond is not None:
                respond(JoinGroupResult(
                    error=ErrorCode(error), member_id=UNKNOWN_MEMBER_ID,
                    generation_id=group.generation_id, protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name, leader_id=current_leader))
            return
        if not group.is_(GroupState.STABLE) or group.generation_id != generation:
            return  # a rebalance started meanwhile; the member waits in it
        if supports_skip_assignment:
            # v9+: the leader learns it leads, but must not run the assignor.
            is_leader = group.is_leader(new_member_id)
            result = JoinGroupResult(
                error=ErrorCode.NONE, member_id=new_member_id,
                generation_id=group.generation_id, protocol_type=group.protocol_type,
                protocol_name=group.protocol_name, leader_id=group.leader_id or "",
                skip_assignment=is_leader,
                members=group.current_member_metadata() if is_leader else [],
            )
        else:
            # Older clients: answer with the old leader id, so that a restarted leader does
            # not believe it leads and compute an assignment nobody would receive.
            result = JoinGroupResult(
                error=ErrorCode.NONE, member_id=new_member_id,
                generation_id=group.generation_id, protocol_type=group.protocol_type,
                protocol_name=group.protocol_name, leader_id=current_leader,
            )
        group.maybe_invoke_join_callback(member, result)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.pending_sync_members.clear()
        self.rebalance_purgatory.check_and_complete(_sync_key(group.group_id))
        delay: DelayedJoin
        if group.is_(GroupState.EMPTY):
            initial = self._config.group_initial_rebalance_delay_ms
            delay = InitialDelayedJoin(self, group, initial, initial,
                                       max(group.rebalance_timeout_ms - initial, 0))
        else:
            delay = DelayedJoin(self, group, group.rebalance_timeout_ms)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info("preparing to rebalance group %s with old generation %d (reason: %s)",
                 group.group_id, group.generation_id, reason)
        self.rebalance_purgatory.try_complete_else_watch(delay, [_join_key(group.group_id)])

    def _on_complete_join(self, group: GroupMetadata) -> None:
        for member in group.not_yet_rejoined_members():
            if member.is_static:
                continue  # static members keep their place until their session expires
            log.info("group %s: member %s did not rejoin in time", group.group_id,
                     member.member_id)
            group.remove(member.member_id)
            self._remove_heartbeat_for_leaving_member(group, member)
        if group.is_(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait for them (or for their
            # sessions to expire) for another rebalance timeout.
            log.warning("group %s: no member rejoined; waiting again", group.group_id)
            self.rebalance_purgatory.try_complete_else_watch(
                DelayedJoin(self, group, group.rebalance_timeout_ms),
                [_join_key(group.group_id)])
            return
        group.init_next_generation()
        if group.is_(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id,
                     group.generation_id)
            self._spawn(self._store_empty_group(group))
            return
        log.info("stabilized group %s generation %d (%d members, protocol %s)",
                 group.group_id, group.generation_id, group.size, group.protocol_name)
        for member in list(group.members.values()):
            group.maybe_invoke_join_callback(member, self._join_result(group, member.member_id))
            self._complete_and_schedule_next_heartbeat(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self.rebalance_purgatory.try_complete_else_watch(
            DelayedSync(self, group, group.generation_id, group.rebalance_timeout_ms),
            [_sync_key(group.group_id)])

    async def _store_empty_group(self, group: GroupMetadata) -> None:
        error = await self.manager.store_group(group.group_id, group.to_value({}))
        if error != ErrorCode.NONE:
            # The previous generation stays in the log; with no members it is harmless.
            log.warning("storing empty group %s failed: %s", group.group_id,
                        ErrorCode(error).name)

    def _on_expire_sync(self, group: GroupMetadata, generation_id: int) -> None:
        if generation_id != group.generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync_members:
            return
        late = list(group.pending_sync_members)
        log.info("group %s: members %s did not sync in time", group.group_id, late)
        for member_id in late:
            member = group.remove(member_id)
            if member is not None:
                self._remove_heartbeat_for_leaving_member(group, member)
        self._prepare_rebalance(group, "members did not sync in time")

    def _remove_pending_sync_member(self, group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        self.rebalance_purgatory.check_and_complete(_sync_key(group.group_id))

    # -- heartbeats and sessions ----------------------------------------------------------

    def _complete_and_schedule_next_heartbeat(self, group: GroupMetadata,
                                              member: MemberMetadata) -> None:
        self._complete_and_schedule_next_expiration(group, member, member.session_timeout_ms)

    def _complete_and_schedule_next_expiration(self, group: GroupMetadata,
                                               member: MemberMetadata, timeout_ms: int) -> None:
        key = (group.group_id, member.member_id)
        member.heartbeat_satisfied = True
        self.heartbeat_purgatory.check_and_complete(key)
        member.heartbeat_satisfied = False
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member.member_id, False, timeout_ms), [key])

    def _add_pending_member_expiration(self, group: GroupMetadata, member_id: str,
                                       timeout_ms: int) -> None:
        self.heartbeat_purgatory.try_complete_else_watch(
            DelayedHeartbeat(self, group, member_id, True, timeout_ms),
            [(group.group_id, member_id)])

    def _remove_heartbeat_for_leaving_member(self, group: GroupMetadata,
                                             member: MemberMetadata) -> None:
        member.is_leaving = True
        self.heartbeat_purgatory.check_and_complete((group.group_id, member.member_id))

    def _heartbeat_done(self, group: GroupMetadata, member_id: str, is_pending: bool) -> bool:
        if group.is_(GroupState.DEAD):
            return True
        if is_pending:
            return group.has(member_id)
        member = group.members.get(member_id)
        if member is None:
            return True
        return member.has_satisfied_heartbeat() or member.is_leaving

    def _on_expire_heartbeat(self, group: GroupMetadata, member_id: str,
                             is_pending: bool) -> None:
        if group.is_(GroupState.DEAD):
            return
        if is_pending:
            log.info("pending member %s of group %s expired", member_id, group.group_id)
            self._remove_pending_member_and_update_group(group, member_id)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("member %s of group %s failed (session timeout), removing it", member_id,
                 group.group_id)
        self._remove_member_and_update_group(group, member, "heartbeat expiration")

    def _remove_pending_member_and_update_group(self, group: GroupMetadata,
                                                member_id: str) -> None:
        group.remove_pending_member(member_id)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self.rebalance_purgatory.check_and_complete(_join_key(group.group_id))

    def _remove_member_and_update_group(self, group: GroupMetadata, member: MemberMetadata,
                                        reason: str) -> None:
        # A new member may still have its first JoinGroup parked: answer it so that a live
        # client rejoins.
        group.maybe_invoke_join_callback(
            member, join_error(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        state = group.state
        if state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif state is GroupState.PREPARING_REBALANCE:
            self.rebalance_purgatory.check_and_complete(_join_key(group.group_id))

    # -- SyncGroup ------------------------------------------------------------------------

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncGroupResult:
        error = self._validate(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance state was lost with the load: make the member rejoin, which
            # every client understands (not all know LOAD_IN_PROGRESS here).
            return SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if error is not None:
            return SyncGroupResult(error)
        group = self.groups.get(group_id)
        if group is None:
            return SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_(GroupState.DEAD):
            return SyncGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return SyncGroupResult(error)
        if generation_id != group.generation_id:
            return SyncGroupResult(ErrorCode.ILLEGAL_GENERATION)
        if protocol_type is not None and protocol_type != group.protocol_type:
            return SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if protocol_name is not None and protocol_name != group.protocol_name:
            return SyncGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        state = group.state
        if state is GroupState.EMPTY:
            return SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if state is GroupState.PREPARING_REBALANCE:
            return SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.get(member_id)
        if state is GroupState.STABLE:
            self._remove_pending_sync_member(group, member_id)
            self._complete_and_schedule_next_heartbeat(group, member)
            return SyncGroupResult(ErrorCode.NONE, member.assignment, group.protocol_type,
                                   group.protocol_name)
        # CompletingRebalance: wait for the leader's assignment to be stored.
        future: asyncio.Future[SyncGroupResult] = asyncio.get_running_loop().create_future()

        def respond(result: SyncGroupResult) -> None:
            if not future.done():
                future.set_result(result)

        previous = member.awaiting_sync
        member.awaiting_sync = respond
        if previous is not None:  # a retried SyncGroup replaces the earlier one
            previous(SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        self._remove_pending_sync_member(group, member_id)
        if group.is_leader(member_id):
            log.info("assignment received from leader %s of group %s for generation %d",
                     member_id, group_id, group.generation_id)
            # Members the leader left out get an empty assignment.
            full = {m: bytes(assignments.get(m, b"")) for m in group.members}
            self._spawn(self._store_assignment(group, generation_id, full))
        return await future

    async def _store_assignment(self, group: GroupMetadata, generation_id: int,
                                assignment: dict[str, bytes]) -> None:
        error = await self.manager.store_group(group.group_id, group.to_value(assignment))
        # Anything may have happened while the record was written: only the same
        # generation, still completing, gets this result.
        if not group.is_(GroupState.COMPLETING_REBALANCE) or group.generation_id != generation_id:
            return
        if error != ErrorCode.NONE:
            self._reset_and_propagate_assignment_error(group, ErrorCode(error))
            self._maybe_prepare_rebalance(group, "storing the group assignment failed")
            return
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.NONE)
        group.transition_to(GroupState.STABLE)

    def _reset_and_propagate_assignment_error(self, group: GroupMetadata,
                                              error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error == ErrorCode.NONE
        for member in list(group.members.values()):
            # An error answer names no protocol (as Kafka).
            result = SyncGroupResult(error, member.assignment,
                                     group.protocol_type if ok else None,
                                     group.protocol_name if ok else None)
            if group.maybe_invoke_sync_callback(member, result):
                # Its session may have run out while it waited: restart it now.
                self._complete_and_schedule_next_heartbeat(group, member)

    # -- Heartbeat ------------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> ErrorCode:
        error = self._validate(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # the group is loading: nothing to check against yet
        if error is not None:
            return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        state = group.state
        if state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._complete_and_schedule_next_heartbeat(group, group.get(member_id))
        if state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # -- LeaveGroup -----------------------------------------------------------------------

    def leave_group(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove members ((member_id, group_instance_id) each); returns the top-level error
        and one error per member (in order)."""
        error = self._validate(group_id)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(members)
        if group.is_(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        return ErrorCode.NONE, [self._leave_one(group, m, i) for m, i in members]

    def _leave_one(self, group: GroupMetadata, member_id: str,
                   group_instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID:
            # An admin removing a static member by its instance id alone.
            current = group.current_static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_current_member(group, current)
            return ErrorCode.NONE
        if group.is_pending_member(member_id):
            self._remove_pending_member_and_update_group(group, member_id)
            self.heartbeat_purgatory.check_and_complete((group.group_id, member_id))
            return ErrorCode.NONE
        error = self._validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        self._remove_current_member(group, member_id)
        return ErrorCode.NONE

    def _remove_current_member(self, group: GroupMetadata, member_id: str) -> None:
        member = group.get(member_id)
        log.info("member %s (instance %s) of group %s left", member_id,
                 member.group_instance_id, group.group_id)
        self._remove_member_and_update_group(group, member, f"member {member_id} left")
        self._remove_heartbeat_for_leaving_member(group, member)

    # -- OffsetCommit ---------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], Any],
    ) -> dict[tuple[str, int], ErrorCode]:
        """Validate the committer, then store ``offsets`` (OffsetAndMetadata values)."""
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return dict.fromkeys(offsets, error)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # A generation for a group we do not know: a stale member.
                return dict.fromkeys(offsets, ErrorCode.ILLEGAL_GENERATION)
            # Kafka used only to store offsets (no group management): allowed.
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.is_(GroupState.DEAD):
            return dict.fromkeys(offsets, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not (generation_id < 0 and group.is_(GroupState.EMPTY)):
            if group.is_(GroupState.COMPLETING_REBALANCE):
                # Its member id and generation may be right, but the assignment is not
                # known yet: have it rejoin gracefully.
                return dict.fromkeys(offsets, ErrorCode.REBALANCE_IN_PROGRESS)
            error = self._validate_offset_commit(group, generation_id, member_id,
                                                 group_instance_id)
            if error is not None:
                return dict.fromkeys(offsets, error)
            member = group.members.get(member_id)
            if member is not None:
                self._complete_and_schedule_next_heartbeat(group, member)
        max_bytes = self._config.offset_metadata_max_bytes
        results: dict[tuple[str, int], ErrorCode] = {}
        valid: dict[tuple[str, int], Any] = {}
        for tp, offset in offsets.items():
            metadata = offset.metadata
            if metadata is not None and len(metadata) > max_bytes:
                results[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                valid[tp] = offset
        if valid:
            stored = await self.manager.store_offsets(group_id, valid)
            for tp in valid:
                results[tp] = ErrorCode(stored.get(tp, ErrorCode.NONE))
        return {tp: results[tp] for tp in offsets}

    async def commit_txn_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: dict[tuple[str, int], Any],
        transactional_id: str | None = None,
        abortable: bool = False,
    ) -> dict[tuple[str, int], ErrorCode]:
        """TxnOffsetCommit: store ``offsets`` as the transaction's pending commits (Kafka's
        handleTxnCommitOffsets). A group nobody knows is created Empty; the committer is
        checked only when it names a member or generation (v3+, KIP-447), and, unlike a
        plain commit, a transaction may commit into a group that has members. With a
        ``transactional_id`` the group's offsets partition is verified to be in the
        transaction first (KIP-890; ``abortable``: TxnOffsetCommit v4+ understands
        TRANSACTION_ABORTABLE)."""
        error = self._validate(group_id, allow_empty_id=True)
        if error is not None:
            return dict.fromkeys(offsets, error)
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = GroupMetadata(group_id)
        if group.is_(GroupState.DEAD):
            return dict.fromkeys(offsets, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id:
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error is None and generation_id != group.generation_id:
                error = ErrorCode.ILLEGAL_GENERATION
            if error is not None:
                return dict.fromkeys(offsets, error)
        stored = await self.manager.store_txn_offsets(group_id, producer_id, producer_epoch,
                                                      offsets, transactional_id, abortable)
        return {tp: ErrorCode(stored.get(tp, ErrorCode.NONE)) for tp in offsets}

    def _validate_offset_commit(self, group: GroupMetadata, generation_id: int, member_id: str,
                                group_instance_id: str | None) -> ErrorCode | None:
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id:
            error = self._validate_current_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
            return None
        if not group.is_(GroupState.EMPTY):
            # An admin commit (no member, no generation) only into an empty group.
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # -- OffsetDelete ---------------------------------------------------------------------

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        error = self._validate(group_id)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            if group_id not in self.manager.groups_with_offsets():
                return ErrorCode.GROUP_ID_NOT_FOUND, {}
            eligible = list(partitions)
            errors: dict[tuple[str, int], ErrorCode] = {}
        elif group.is_(GroupState.EMPTY):
            eligible, errors = list(partitions), {}
        elif group.protocol_type == "consumer":
            eligible, errors = [], {}
            for tp in partitions:
                if group.is_subscribed_to_topic(tp[0]):
                    errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    eligible.append(tp)
        else:
            return ErrorCode.NON_EMPTY_GROUP, {}
        if eligible:
            result = await self.manager.delete_offsets(group_id, eligible)
            for tp in eligible:
                errors[tp] = ErrorCode(result)
        return ErrorCode.NONE, errors

    # -- DescribeGroups / ListGroups / DeleteGroups ----------------------------------------

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


__all__ = [
    "AUTHORIZED_OPERATIONS_OMITTED",
    "GROUP_AUTHORIZED_OPERATIONS",
    "NO_GENERATION",
    "DescribedGroup",
    "GroupCoordinator",
    "GroupOverview",
]
