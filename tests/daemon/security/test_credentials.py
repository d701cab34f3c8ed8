"""SCRAM users in the metastore (klog/daemon/security/credentials.py): Kafka's stored form,
Describe/AlterUserScramCredentials' checks, the cache, and the users/<name> notification
that keeps other brokers' caches current."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from klog.daemon.config import BrokerConfig
from klog.daemon.config.dynamic import DynamicBrokerConfig
from klog.daemon.config_changes import ConfigChangeManager, read_entity_config
from klog.daemon.metastore import paths
from klog.daemon.metastore.local import LocalMetadataStore
from klog.daemon.security.credentials import (
    Deletion,
    ScramCredentialCache,
    ScramCredentialManager,
    Upsertion,
    sanitize,
)
from klog.protocol import scram
from klog.protocol.errors import ErrorCode

SALT = b"salt-of-sixteen!"


def upsert(user: str, mechanism: int = 1, iterations: int = 4096, password: str = "pw"
           ) -> Upsertion:
    name = scram.MECHANISM_BY_TYPE.get(mechanism, "SCRAM-SHA-256")
    return Upsertion(user, mechanism, iterations, SALT,
                     scram.salted_password(name, password, SALT, iterations))


def test_alter_stores_kafkas_form_and_describe_reads_it(tmp_path: Path) -> None:
    async def main() -> None:
        store = LocalMetadataStore(tmp_path / "ms")
        store.start()
        paths.create_persistent_paths(store)
        # a quota of the same user survives credential changes
        store.create(paths.config_path(paths.CONFIG_TYPE_USER, "alice"),
                     paths.EntityConfig(config={"producer_byte_rate": "1024"}).encode(),
                     make_parents=True)
        cache = ScramCredentialCache(store)
        manager = ScramCredentialManager(store, cache)
        results = await manager.alter([], [upsert("alice"), upsert("alice", 2, 8192)])
        assert [(r.user, r.error_code) for r in results] == [("alice", 0)]
        stored = read_entity_config(store, paths.CONFIG_TYPE_USER, "alice")
        assert stored["producer_byte_rate"] == "1024"
        assert stored["SCRAM-SHA-256"].startswith("salt=c2FsdC1vZi1zaXh0ZWVuIQ==,stored_key=")
        assert stored["SCRAM-SHA-512"].endswith(",iterations=8192")
        assert "pw" not in str(stored)
        # the change is announced for the other brokers
        notes = [paths.ConfigChangeNotification.decode(store.get(
            f"{paths.CONFIG_CHANGES}/{c}")[0]).entity_path
            for c in store.get_children(paths.CONFIG_CHANGES)]
        assert "users/alice" in notes
        assert cache.get("alice", "SCRAM-SHA-512") is not None  # this broker at once
        described = await manager.describe(None)
        assert [(r.user, r.credentials) for r in described] == [
            ("alice", ((1, 4096), (2, 8192)))]
        results = await manager.alter([Deletion("alice", 1)], [])
        assert results[0].error_code == 0 and cache.get("alice", "SCRAM-SHA-256") is None
        store.close()

    asyncio.run(main())


def test_kafkas_refusals(tmp_path: Path) -> None:
    async def main() -> None:
        store = LocalMetadataStore(tmp_path / "ms")
        store.start()
        paths.create_persistent_paths(store)
        manager = ScramCredentialManager(store, ScramCredentialCache(store))
        results = await manager.alter(
            [Deletion("gone", 1), Deletion("twice", 1)],
            [upsert(""), upsert("few", iterations=1000), upsert("many", iterations=20000),
             upsert("odd", mechanism=7), upsert("twice")])
        assert {r.user: r.error_code for r in results} == {
            "gone": ErrorCode.RESOURCE_NOT_FOUND,
            "twice": ErrorCode.DUPLICATE_RESOURCE,
            "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "few": ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "many": ErrorCode.UNACCEPTABLE_CREDENTIAL,
            "odd": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        }
        assert store.get_children(paths.config_entity_type_path(paths.CONFIG_TYPE_USER)) == []
        described = await manager.describe(["x", "x", "y"])
        assert [(r.user, r.error_code) for r in described] == [
            ("x", ErrorCode.DUPLICATE_RESOURCE), ("y", ErrorCode.RESOURCE_NOT_FOUND)]
        store.close()

    asyncio.run(main())


def test_a_users_notification_reloads_the_cache(tmp_path: Path) -> None:
    async def main() -> None:
        store = LocalMetadataStore(tmp_path / "ms")
        store.start()
        paths.create_persistent_paths(store)
        cache = ScramCredentialCache(store)
        config = DynamicBrokerConfig(BrokerConfig.from_dict({
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}))
        fake: Any = SimpleNamespace(partitions={})
        manager = ConfigChangeManager(1, config, store, fake, fake, fake, fake)
        manager.add_user_listener(cache.reload_user)
        # another broker (or tool) writes a user with an '@' in its name
        credential = scram.credential_from_password("SCRAM-SHA-256", "pw")
        store.create(paths.config_path(paths.CONFIG_TYPE_USER, sanitize("bob@example")),
                     paths.EntityConfig(config={"SCRAM-SHA-256": credential.to_config()}
                                        ).encode(), make_parents=True)
        assert sanitize("bob@example") == "bob%40example"
        await manager._apply(paths.ConfigChangeNotification("users/bob%40example"))
        assert cache.get("bob@example", "SCRAM-SHA-256") == credential
        store.close()

    asyncio.run(main())
