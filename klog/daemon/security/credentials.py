"""SCRAM users: their credentials in the metastore, the broker's cache of them, and changes.

Kafka's ZooKeeper-mode storage, which klog keeps in both modes: a user's SCRAM credentials
are entries of the user entity's config, ``/config/users/<sanitized name>``, one per
mechanism (``SCRAM-SHA-256`` -> ``salt=...,stored_key=...,server_key=...,iterations=N``,
klog/protocol/scram.py), beside any quota configs of the same user (kept as they are).
A change overwrites the znode and announces ``users/<name>`` under /config/changes
(config_changes.write_entity_config), so every broker re-reads that user
(``ConfigChangeManager`` -> ``ScramCredentialCache.reload_user``); the passwords never
reach the metastore, only salted keys.

``ScramCredentialCache`` holds every user's credentials in memory (loaded at start-up),
so an authentication reads no metastore. ``ScramCredentialManager`` answers
DescribeUserScramCredentials and AlterUserScramCredentials with Kafka's checks and
error codes (ZkAdminManager).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from klog.daemon import config_changes
from klog.daemon.metastore import paths
from klog.daemon.metastore.base import MetadataStore, NoNodeError
from klog.protocol import scram
from klog.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


def sanitize(user: str) -> str:
    """Kafka's Sanitizer.sanitize: a user name as a znode name (URL-encoded; '*' and '~'
    encoded, space as %20)."""
    return urllib.parse.quote(user, safe="").replace("~", "%7E").replace("*", "%2A")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


# -- the metastore side (blocking; worker threads) ------------------------------------------


def read_user_config(store: MetadataStore, user: str) -> dict[str, str]:
    return config_changes.read_entity_config(store, paths.CONFIG_TYPE_USER, sanitize(user))


def credentials_of(config: Mapping[str, str]) -> dict[str, scram.ScramCredential]:
    """The SCRAM credentials among a user entity's configs (malformed ones skipped)."""
    out = {}
    for mechanism in scram.MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = scram.ScramCredential.from_config(text)
        except ValueError as exc:
            log.warning("ignored the %s credential stored for a user: %s", mechanism, exc)
    return out


def list_users(store: MetadataStore) -> list[str]:
    try:
        children = store.get_children(paths.config_entity_type_path(paths.CONFIG_TYPE_USER))
    except NoNodeError:
        return []
    return [desanitize(c) for c in children]


def load_all(store: MetadataStore) -> dict[str, dict[str, scram.ScramCredential]]:
    users = {}
    for user in list_users(store):
        creds = credentials_of(read_user_config(store, user))
        if creds:
            users[user] = creds
    return users


def write_user_credentials(store: MetadataStore, user: str,
                           changes: Mapping[str, scram.ScramCredential | None]) -> None:
    """Set (or, for None, delete) credentials of ``user`` by mechanism; other configs of
    the user stay. Announces the change."""
    config = read_user_config(store, user)
    for mechanism, credential in changes.items():
        if credential is None:
            config.pop(mechanism, None)
        else:
            config[mechanism] = credential.to_config()
    config_changes.write_entity_config(store, paths.CONFIG_TYPE_USER, sanitize(user), config)


# -- the cache ------------------------------------------------------------------------------


class ScramCredentialCache:
    """user -> mechanism -> credential, for the SASL servers of every listener."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._users: dict[str, dict[str, scram.ScramCredential]] = {}

    async def load(self) -> None:
        self._users = await asyncio.to_thread(load_all, self.store)

    async def reload_user(self, user: str) -> None:
        config = await asyncio.to_thread(read_user_config, self.store, user)
        self.set_user(user, credentials_of(config))

    def set_user(self, user: str, credentials: Mapping[str, scram.ScramCredential]) -> None:
        if credentials:
            self._users[user] = dict(credentials)
        else:
            self._users.pop(user, None)

    def get(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, scram.ScramCredential]]:
        return {u: dict(c) for u, c in self._users.items()}


# -- Describe/AlterUserScramCredentials ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UserResult:
    user: str
    error_code: int = 0
    error_message: str | None = None
    #: (mechanism type id, iterations), for Describe.
    credentials: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Upsertion:
    user: str
    mechanism: int
    iterations: int
    salt: bytes
    salted_password: bytes


@dataclass(frozen=True, slots=True)
class Deletion:
    user: str
    mechanism: int


class ScramCredentialManager:
    """The admin side of SCRAM users (Kafka's ZkAdminManager.describe/alterUserScram...)."""

    def __init__(self, store: MetadataStore, cache: ScramCredentialCache) -> None:
        self.store = store
        self.cache = cache

    async def describe(self, users: Sequence[str] | None) -> list[UserResult]:
        stored = await asyncio.to_thread(load_all, self.store)
        if not users:  # null or empty: every user with a credential
            names: Iterable[str] = sorted(stored)
            return [self._described(u, stored[u]) for u in names]
        results = []
        seen = set()
        duplicates = {u for u in users if users.count(u) > 1}
        for user in users:
            if user in seen:
                continue
            seen.add(user)
            if user in duplicates:
                results.append(UserResult(user, ErrorCode.DUPLICATE_RESOURCE,
                                          "Cannot describe SCRAM credentials for the same "
                                          "user twice in a single request"))
            elif user not in stored:
                results.append(UserResult(user, ErrorCode.RESOURCE_NOT_FOUND,
                                          "Attempt to describe a user credential that does "
                                          "not exist"))
            else:
                results.append(self._described(user, stored[user]))
        return results

    @staticmethod
    def _described(user: str, creds: Mapping[str, scram.ScramCredential]) -> UserResult:
        return UserResult(user, credentials=tuple(
            (scram.MECHANISMS[m][1], c.iterations) for m, c in sorted(creds.items())))

    async def alter(self, deletions: Sequence[Deletion],
                    upsertions: Sequence[Upsertion]) -> list[UserResult]:
        errors: dict[str, tuple[int, str]] = {}
        order: list[str] = []
        items: list[Deletion | Upsertion] = [*deletions, *upsertions]
        for item in items:
            if item.user not in order:
                order.append(item.user)
        pairs = [(d.user, d.mechanism) for d in deletions] + \
                [(u.user, u.mechanism) for u in upsertions]
        for user, mechanism in pairs:
            if pairs.count((user, mechanism)) > 1:
                errors.setdefault(user, (ErrorCode.DUPLICATE_RESOURCE,
                                         "A user credential cannot be altered twice in the "
                                         "same request"))
        for item in items:
            error = _check(item)
            if error is not None:
                errors.setdefault(item.user, error)
        stored = await asyncio.to_thread(load_all, self.store)
        for d in deletions:
            name = scram.MECHANISM_BY_TYPE.get(d.mechanism)
            if name is not None and name not in stored.get(d.user, {}):
                errors.setdefault(d.user, (ErrorCode.RESOURCE_NOT_FOUND,
                                           "Attempt to delete a user credential that does "
                                           "not exist"))
        changes: dict[str, dict[str, scram.ScramCredential | None]] = {}
        for d in deletions:
            if d.user not in errors:
                changes.setdefault(d.user, {})[scram.MECHANISM_BY_TYPE[d.mechanism]] = None
        for u in upsertions:
            if u.user not in errors:
                upserted = scram.MECHANISM_BY_TYPE[u.mechanism]
                changes.setdefault(u.user, {})[upserted] = scram.credential_from_salted(
                    upserted, u.salted_password, u.salt, u.iterations)
        for user, change in changes.items():
            await asyncio.to_thread(write_user_credentials, self.store, user, change)
            # This broker at once (standalone has no notification watch; in cluster mode
            # the notification re-reads the same).
            await self.cache.reload_user(user)
        return [UserResult(user, *errors[user]) if user in errors else UserResult(user)
                for user in order]


def _check(item: Deletion | Upsertion) -> tuple[int, str] | None:
    if not item.user:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if item.mechanism not in scram.MECHANISM_BY_TYPE:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if isinstance(item, Upsertion):
        if item.iterations < scram.MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if item.iterations > scram.MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        if not item.salt:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt must not be empty"
        if not item.salted_password:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salted password must not be empty"
    return None
