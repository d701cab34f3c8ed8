"""Quota entities in the metastore (klog/daemon/quota_store.py): Kafka's znode layout,
DescribeClientQuotas' filters, AlterClientQuotas' checks, SCRAM credentials kept beside
quotas, and the notifications that keep every broker's QuotaConfigs current."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from klog.daemon.config import BrokerConfig
from klog.daemon.config.dynamic import DynamicBrokerConfig
from klog.daemon.config_changes import ConfigChangeManager
from klog.daemon.metastore import paths
from klog.daemon.metastore.local import LocalMetadataStore
from klog.daemon.quota_store import (
    ClientQuotaAdmin,
    FilterComponent,
    QuotaConfigLoader,
    QuotaOp,
    QuotaRequestError,
    entity_of_notification,
    read_entity,
)
from klog.daemon.quotas import DEFAULT, QuotaConfigs
from klog.daemon.security.credentials import (
    ScramCredentialCache,
    ScramCredentialManager,
    Upsertion,
)
from klog.protocol import scram
from klog.protocol.errors import ErrorCode


def _store(tmp_path: Path) -> LocalMetadataStore:
    store = LocalMetadataStore(tmp_path / "ms")
    store.start()
    paths.create_persistent_paths(store)
    return store


def _notes(store: LocalMetadataStore) -> list[str]:
    return sorted(paths.ConfigChangeNotification.decode(
        store.get(f"{paths.CONFIG_CHANGES}/{c}")[0]).entity_path
        for c in store.get_children(paths.CONFIG_CHANGES))


def test_alter_writes_kafkas_znodes_and_notifications(tmp_path: Path) -> None:
    async def main() -> None:
        store = _store(tmp_path)
        configs = QuotaConfigs()
        admin = ClientQuotaAdmin(store, configs)
        results = await admin.alter([
            ([("user", "al ice"), ("client-id", "app")],
             [QuotaOp("producer_byte_rate", 1024, False)]),
            ([("user", None)], [QuotaOp("consumer_byte_rate", 2048, False),
                                QuotaOp("request_percentage", 50.5, False)]),
            ([("client-id", None)], [QuotaOp("controller_mutation_rate", 10, False)]),
        ], validate_only=False)
        assert [r.error for r in results] == [ErrorCode.NONE] * 3
        assert store.get("/config/users/al%20ice/clients/app")[0]
        assert read_entity(store, ("al ice", "app")) == {"producer_byte_rate": "1024"}
        assert read_entity(store, (DEFAULT, None)) == {
            "consumer_byte_rate": "2048", "request_percentage": "50.5"}
        assert read_entity(store, (None, DEFAULT)) == {"controller_mutation_rate": "10.0"}
        assert _notes(store) == ["clients/<default>", "users/<default>",
                                 "users/al%20ice/clients/app"]
        # this broker's copy at once
        assert configs.get(("al ice", "app")) == {"producer_byte_rate": 1024.0}
        # removal
        await admin.alter([([("user", None)], [QuotaOp("consumer_byte_rate", 0, True)])],
                          validate_only=False)
        assert configs.get((DEFAULT, None)) == {"request_percentage": 50.5}
        store.close()

    asyncio.run(main())


def test_alter_refusals_are_per_entry_and_write_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        store = _store(tmp_path)
        admin = ClientQuotaAdmin(store, QuotaConfigs())
        ok = [QuotaOp("producer_byte_rate", 10, False)]
        results = await admin.alter([
            ([], ok),
            ([("user", "a"), ("user", "b")], ok),
            ([("ip", "1.2.3.4")], ok),
            ([("group", "g")], ok),
            ([("user", "a")], [QuotaOp("no_such_quota", 1, False)]),
            ([("user", "a")], [QuotaOp("producer_byte_rate", 10.5, False)]),
            ([("user", "a")], [QuotaOp("producer_byte_rate", -1, False)]),
            ([("user", "a")], ok + ok),
            ([("user", "fine")], ok),
        ], validate_only=False)
        assert [r.error for r in results] == [ErrorCode.INVALID_REQUEST] * 8 + [ErrorCode.NONE]
        assert "Long" in (results[5].message or "")
        assert read_entity(store, ("a", None)) == {}
        # validate_only writes nothing
        results = await admin.alter([([("user", "v")], ok)], validate_only=True)
        assert results[0].error == ErrorCode.NONE and read_entity(store, ("v", None)) == {}
        store.close()

    asyncio.run(main())


def test_describe_filters_as_kafka(tmp_path: Path) -> None:
    async def main() -> None:
        store = _store(tmp_path)
        admin = ClientQuotaAdmin(store, QuotaConfigs())
        op = [QuotaOp("producer_byte_rate", 1, False)]
        await admin.alter([([("user", "u")], op), ([("user", "u"), ("client-id", "c")], op),
                           ([("user", None)], op), ([("client-id", "c")], op),
                           ([("client-id", None)], op)], validate_only=False)

        async def names(components: list[FilterComponent], strict: bool = False
                        ) -> list[list[tuple[str, str | None]]]:
            return [parts for parts, _v in await admin.describe(components, strict)]

        assert len(await names([])) == 5
        assert await names([], strict=True) == []
        assert await names([FilterComponent("user", 0, "u")]) == [
            [("user", "u")], [("user", "u"), ("client-id", "c")]]
        assert await names([FilterComponent("user", 0, "u")], strict=True) == [[("user", "u")]]
        assert await names([FilterComponent("user", 1, None)]) == [[("user", None)]]
        assert await names([FilterComponent("client-id", 2, None)], strict=True) == [
            [("client-id", None)], [("client-id", "c")]]
        values = await admin.describe([FilterComponent("client-id", 0, "c")], True)
        assert values == [([("client-id", "c")], {"producer_byte_rate": 1.0})]
        for bad in ([FilterComponent("user", 0, None)],
                    [FilterComponent("user", 1, None), FilterComponent("user", 2, None)],
                    [FilterComponent("user", 9, None)]):
            try:
                await admin.describe(bad, False)
            except QuotaRequestError as exc:
                assert exc.error == ErrorCode.INVALID_REQUEST
            else:
                raise AssertionError(f"{bad} accepted")
        store.close()

    asyncio.run(main())


def test_scram_credentials_and_quotas_share_the_user_znode(tmp_path: Path) -> None:
    async def main() -> None:
        store = _store(tmp_path)
        configs = QuotaConfigs()
        admin = ClientQuotaAdmin(store, configs)
        cache = ScramCredentialCache(store)
        scram_manager = ScramCredentialManager(store, cache)
        salt = b"salt-of-sixteen!"
        await scram_manager.alter([], [Upsertion(
            "alice", 1, 4096, salt, scram.salted_password("SCRAM-SHA-256", "pw", salt, 4096))])
        await admin.alter([([("user", "alice")], [QuotaOp("producer_byte_rate", 100, False)])],
                          validate_only=False)
        stored = read_entity(store, ("alice", None))
        assert stored["producer_byte_rate"] == "100" and "SCRAM-SHA-256" in stored
        await cache.load()
        assert cache.get("alice", "SCRAM-SHA-256") is not None
        # describe shows quotas only
        assert await admin.describe([], False) == [
            ([("user", "alice")], {"producer_byte_rate": 100.0})]
        store.close()

    asyncio.run(main())


def test_notifications_reload_the_entity_on_every_broker(tmp_path: Path) -> None:
    async def main() -> None:
        store = _store(tmp_path)
        writer = ClientQuotaAdmin(store, QuotaConfigs())  # "another broker"
        configs = QuotaConfigs()
        loader = QuotaConfigLoader(store, configs)
        await writer.alter([([("user", "bob@x")], [QuotaOp("producer_byte_rate", 7, False)])],
                           validate_only=False)
        await loader.load()
        assert configs.get(("bob@x", None)) == {"producer_byte_rate": 7.0}
        config = DynamicBrokerConfig(BrokerConfig.from_dict({
            "listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path)}))
        fake: Any = SimpleNamespace(partitions={})
        manager = ConfigChangeManager(1, config, store, fake, fake, fake, fake)
        reloaded_users: list[str] = []

        async def user_listener(user: str) -> None:
            reloaded_users.append(user)

        manager.add_user_listener(user_listener)
        manager.add_quota_listener(loader.reload)
        await writer.alter([([("user", "bob@x"), ("client-id", "c")],
                             [QuotaOp("consumer_byte_rate", 9, False)]),
                            ([("client-id", "c")], [QuotaOp("consumer_byte_rate", 3, False)])],
                           validate_only=False)
        await manager._apply(paths.ConfigChangeNotification("users/bob%40x/clients/c"))
        await manager._apply(paths.ConfigChangeNotification("clients/c"))
        assert configs.get(("bob@x", "c")) == {"consumer_byte_rate": 9.0}
        assert configs.get((None, "c")) == {"consumer_byte_rate": 3.0}
        # a user/client change is not a SCRAM user's
        assert reloaded_users == []
        await manager._apply(paths.ConfigChangeNotification("users/bob%40x"))
        assert reloaded_users == ["bob@x"]
        store.close()

    asyncio.run(main())


def test_entity_of_notification() -> None:
    assert entity_of_notification("users", "a%2Fb") == ("a/b", None)
    assert entity_of_notification("users", "<default>/clients/<default>") == (DEFAULT, DEFAULT)
    assert entity_of_notification("clients", "c") == (None, "c")
    assert entity_of_notification("topics", "t") is None
    assert entity_of_notification("users", "a/b") is None
