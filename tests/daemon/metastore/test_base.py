"""The MetadataStore contract (base.py), run on both stores: the local store and a real
ZooKeeper. Each test is parametrized by the ``backend`` fixture (see conftest.py), so the
local store is held to exactly what ZooKeeper does."""

from __future__ import annotations

import pytest

from klog.daemon.metastore.base import (
    MAX_DATA_BYTES,
    BadVersionError,
    CheckOp,
    CreateOp,
    DataTooLargeError,
    DeleteOp,
    InvalidPathError,
    MetadataStore,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    SetOp,
    WatchedEvent,
    ZnodeStat,
    validate_path,
)

from .conftest import Backend, Recorder, settle

BAD_PATHS = [
    "",
    "a",
    "a/b",
    "/a/",
    "//",
    "/a//b",
    "/a/./b",
    "/a/../b",
    "/.",
    "/..",
    "/a/.",
    "/a\x00b",
    "/a\x01b",
    "/a\x7fb",
    "/a\x9fb",
    "/a\ud800b",
    "/a\ue000b",  # private use area
    "/a\ufff5b",
    "/a\U0001f600b",  # outside the BMP: a surrogate pair in ZooKeeper's Java
]
GOOD_ODD_PATHS = ["/a b", "/a.b", "/...", "/.a", "/a..", "/ünï-cødé", "/<default>", "/a:b@c"]


# --- paths ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", BAD_PATHS)
def test_validate_path_rejects_what_zookeeper_rejects(path: str) -> None:
    with pytest.raises(InvalidPathError):
        validate_path(path)


def test_validate_path_sequential_allows_trailing_slash() -> None:
    validate_path("/jobs/", sequential=True)
    validate_path("/", sequential=True)
    with pytest.raises(InvalidPathError):
        validate_path("/jobs//", sequential=True)


def test_bad_paths_refused_by_every_operation(store: MetadataStore) -> None:
    for path in BAD_PATHS:
        for call in (
            lambda p: store.create(p),
            lambda p: store.get(p),
            lambda p: store.exists(p),
            lambda p: store.get_children(p),
            lambda p: store.set(p, b"x"),
            lambda p: store.delete(p),
            lambda p: store.multi([CreateOp(p)]),
            lambda p: store.ensure_path(p),
        ):
            with pytest.raises(InvalidPathError):
                call(path)
    assert store.get_children("/") == []


def test_unusual_but_valid_paths_work(store: MetadataStore) -> None:
    for path in GOOD_ODD_PATHS:
        assert store.create(path, path.encode()) == path
        assert store.get(path)[0] == path.encode()
    assert store.get_children("/") == sorted(p[1:] for p in GOOD_ODD_PATHS)


def test_root_cannot_be_deleted_or_recreated(store: MetadataStore) -> None:
    with pytest.raises(InvalidPathError):
        store.delete("/")
    with pytest.raises(InvalidPathError):
        store.delete("/", recursive=True)
    with pytest.raises(NodeExistsError):
        store.create("/")
    assert store.exists("/") is not None


# --- create / get / exists ---------------------------------------------------------------------


def test_create_get_and_stat(store: MetadataStore) -> None:
    assert store.create("/a", b"hello") == "/a"
    data, stat = store.get("/a")
    assert data == b"hello"
    assert stat.version == 0 and stat.cversion == 0
    assert stat.czxid == stat.mzxid == stat.pzxid > 0
    assert stat.ctime == stat.mtime > 1_600_000_000_000  # epoch milliseconds
    assert stat.ephemeral_owner == 0
    assert stat.data_length == 5 and stat.num_children == 0
    assert store.exists("/a") == stat
    assert store.exists("/missing") is None


def test_create_empty_and_binary_data(store: MetadataStore) -> None:
    store.create("/empty")
    assert store.get("/empty")[0] == b""
    blob = bytes(range(256)) * 4
    store.create("/blob", blob)
    assert store.get("/blob")[0] == blob
    assert store.get("/blob")[1].data_length == 1024


def test_create_existing_raises(store: MetadataStore) -> None:
    store.create("/a", b"1")
    with pytest.raises(NodeExistsError):
        store.create("/a", b"2")
    assert store.get("/a")[0] == b"1"


def test_create_needs_parent_unless_make_parents(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError):
        store.create("/x/y/z", b"v")
    assert store.exists("/x") is None
    assert store.create("/x/y/z", b"v", make_parents=True) == "/x/y/z"
    assert store.get("/x")[0] == b"" and store.get("/x/y")[0] == b""
    assert store.get("/x/y")[1].ephemeral_owner == 0
    assert store.get("/x/y/z")[0] == b"v"
    assert store.get_children("/x") == ["y"]


def test_get_and_children_of_missing_node(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError):
        store.get("/nope")
    with pytest.raises(NoNodeError):
        store.get_children("/nope")


def test_children_sorted_and_parent_stat(store: MetadataStore) -> None:
    store.create("/p")
    for name in ["b", "a", "c", "10", "9"]:
        store.create(f"/p/{name}")
    assert store.get_children("/p") == ["10", "9", "a", "b", "c"]
    stat = store.exists("/p")
    assert stat is not None
    assert stat.num_children == 5 and stat.cversion == 5
    assert stat.pzxid == store.exists("/p/9").czxid  # type: ignore[union-attr]
    store.delete("/p/a")
    after = store.exists("/p")
    assert after is not None
    assert after.cversion == 6 and after.num_children == 4 and after.pzxid > stat.pzxid
    assert after.version == 0 and after.mzxid == stat.mzxid  # children do not touch data


def test_data_must_be_bytes_and_bounded(store: MetadataStore) -> None:
    with pytest.raises(TypeError):
        store.create("/s", "text")  # type: ignore[arg-type]
    with pytest.raises(DataTooLargeError):
        store.create("/big", b"x" * (MAX_DATA_BYTES + 1))
    assert store.exists("/big") is None
    store.create("/ok", bytearray(b"abc"))
    assert store.get("/ok")[0] == b"abc"


# --- sequential ---------------------------------------------------------------------------------


def test_sequential_suffix_is_parent_cversion(store: MetadataStore) -> None:
    store.create("/q")
    assert store.create("/q/item-", b"", sequential=True) == "/q/item-0000000000"
    assert store.create("/q/item-", sequential=True) == "/q/item-0000000001"
    store.create("/q/plain")  # any create counts
    store.delete("/q/item-0000000000")  # a delete does not (but shows in cversion)
    assert store.exists("/q").cversion == 4  # type: ignore[union-attr]
    assert store.create("/q/other_", sequential=True) == "/q/other_0000000003"
    store.delete("/q/plain")
    store.delete("/q/other_0000000003")
    assert store.exists("/q").cversion == 7  # type: ignore[union-attr]
    assert store.create("/q/", sequential=True) == "/q/0000000004"
    assert store.get_children("/q") == ["0000000004", "item-0000000001"]
    store.create("/r")
    assert store.create("/r/x", sequential=True) == "/r/x0000000000"


def test_sequential_with_make_parents(store: MetadataStore) -> None:
    path = store.create("/isr/change_", b"d", sequential=True, make_parents=True)
    assert path == "/isr/change_0000000000"
    assert store.get(path)[0] == b"d"


# --- ephemerals ----------------------------------------------------------------------------------


def test_ephemeral_owned_by_session(store: MetadataStore) -> None:
    store.create("/e", b"me", ephemeral=True)
    stat = store.exists("/e")
    assert stat is not None and stat.ephemeral_owner == store.session_id != 0
    seq = store.create("/e-", ephemeral=True, sequential=True)
    assert store.exists(seq).ephemeral_owner == store.session_id  # type: ignore[union-attr]


def test_no_children_under_ephemerals(store: MetadataStore) -> None:
    store.create("/e", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        store.create("/e/child")
    with pytest.raises(NoChildrenForEphemeralsError):
        store.create("/e/child", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        store.create("/e/deep/child", make_parents=True)
    assert store.get_children("/e") == []


def test_ephemerals_vanish_with_session(backend: Backend, store: MetadataStore) -> None:
    store.create("/brokers/ids", make_parents=True)
    store.create("/brokers/ids/1", b"reg", ephemeral=True)
    store.create("/brokers/topics/t", b"assignment", make_parents=True)
    old_session = store.session_id
    store2 = backend.reopen(store)
    assert store2.session_id != old_session
    assert store2.get_children("/brokers/ids") == []
    assert store2.get("/brokers/topics/t")[0] == b"assignment"
    parent = store2.exists("/brokers/ids")
    assert parent is not None and parent.cversion == 2  # create + the session's delete


def test_sync_then_read(store: MetadataStore) -> None:
    """sync (ZooKeeper's: catch up with the ensemble's leader) before a read that must
    see every committed write; the local store is always current."""
    store.create("/controller_epoch", b"7")
    store.sync("/controller_epoch")
    assert store.get("/controller_epoch")[0] == b"7"
    store.sync("/absent")  # a path that does not exist is fine: sync reads nothing
    with pytest.raises(InvalidPathError):
        store.sync("no-leading-slash")


def test_operations_after_close_raise(backend: Backend) -> None:
    s = backend.new()
    with pytest.raises(SessionExpiredError):
        s.get("/")
    s.start()
    s.create("/a")
    s.close()
    s.close()  # idempotent
    for call in (lambda: s.get("/a"), lambda: s.create("/b"), lambda: s.exists("/a")):
        with pytest.raises(SessionExpiredError):
            call()


# --- set / delete --------------------------------------------------------------------------------


def test_set_versions(store: MetadataStore) -> None:
    created = store.create("/v", b"0")
    assert created == "/v"
    s1 = store.set("/v", b"one")
    assert s1.version == 1 and s1.data_length == 3 and s1.mzxid > s1.czxid
    s2 = store.set("/v", b"two", version=1)
    assert s2.version == 2
    with pytest.raises(BadVersionError):
        store.set("/v", b"stale", version=1)
    assert store.get("/v") == (b"two", s2)
    with pytest.raises(NoNodeError):
        store.set("/missing", b"x")


def test_delete_rules(store: MetadataStore) -> None:
    with pytest.raises(NoNodeError):
        store.delete("/missing")
    store.create("/d", b"x")
    store.set("/d", b"y")
    with pytest.raises(BadVersionError):
        store.delete("/d", version=0)
    store.delete("/d", version=1)
    assert store.exists("/d") is None
    store.create("/full/child", make_parents=True)
    with pytest.raises(NotEmptyError):
        store.delete("/full")
    assert store.get_children("/full") == ["child"]


def test_recursive_delete(store: MetadataStore) -> None:
    for path in ["/t/a/x", "/t/a/y", "/t/b", "/t/c/d/e"]:
        store.create(path, make_parents=True)
    store.create("/t/eph", ephemeral=True)
    store.create("/keep")
    with pytest.raises(BadVersionError):
        store.delete("/t", version=7, recursive=True)
    assert store.get_children("/t") == ["a", "b", "c", "eph"]  # nothing deleted
    store.delete("/t", version=0, recursive=True)
    assert store.exists("/t") is None
    assert store.get_children("/") == ["keep"]
    store.delete("/keep", recursive=True)  # a leaf works too
    with pytest.raises(NoNodeError):
        store.delete("/t", recursive=True)


def test_ensure_path(store: MetadataStore) -> None:
    store.ensure_path("/a/b/c")
    store.ensure_path("/a/b/c")
    store.ensure_path("/a")
    store.ensure_path("/")
    assert store.get_children("/a/b") == ["c"]
    assert store.exists("/a/b/c").version == 0  # type: ignore[union-attr]


# --- watches -------------------------------------------------------------------------------------


def test_data_watch_fires_changed_once(store: MetadataStore) -> None:
    store.create("/w", b"0")
    r = Recorder()
    store.get("/w", watch=r)
    store.set("/w", b"1")
    store.set("/w", b"2")  # one-shot: not seen
    settle(store)
    assert r.events == [WatchedEvent("CHANGED", "/w")]


def test_data_watch_fires_deleted(store: MetadataStore) -> None:
    store.create("/w")
    r = Recorder()
    store.get("/w", watch=r)
    store.delete("/w")
    settle(store)
    assert r.events == [WatchedEvent("DELETED", "/w")]


def test_exists_watch_on_absent_node_fires_created(store: MetadataStore) -> None:
    r = Recorder()
    assert store.exists("/later", watch=r) is None
    store.create("/later", b"x")
    store.set("/later", b"y")
    settle(store)
    assert r.events == [WatchedEvent("CREATED", "/later")]


def test_exists_watch_on_present_node_is_a_data_watch(store: MetadataStore) -> None:
    store.create("/here")
    changed, deleted = Recorder(), Recorder()
    store.exists("/here", watch=changed)
    store.set("/here", b"x")
    store.exists("/here", watch=deleted)
    store.delete("/here")
    settle(store)
    assert changed.events == [WatchedEvent("CHANGED", "/here")]
    assert deleted.events == [WatchedEvent("DELETED", "/here")]


def test_child_watch_rules(store: MetadataStore) -> None:
    store.create("/p")
    created, deleted, own = Recorder(), Recorder(), Recorder()
    store.get_children("/p", watch=created)
    store.create("/p/a")
    store.create("/p/b")  # one-shot
    settle(store)
    assert created.events == [WatchedEvent("CHILD", "/p")]

    store.get_children("/p", watch=deleted)
    store.set("/p/a", b"data of a child: no child event")
    store.set("/p", b"data of the node: no child event")
    store.create("/p/a/grandchild")  # not a child of /p
    settle(store)
    assert deleted.events == []
    store.delete("/p/a/grandchild")
    store.delete("/p/a")
    settle(store)
    assert deleted.events == [WatchedEvent("CHILD", "/p")]

    store.get_children("/p", watch=own)
    store.delete("/p", recursive=True)
    settle(store)
    # The first event wins: a child's deletion precedes the node's own.
    assert own.events == [WatchedEvent("CHILD", "/p")]


def test_child_watch_fires_deleted_when_node_goes(store: MetadataStore) -> None:
    store.create("/leaf")
    r = Recorder()
    store.get_children("/leaf", watch=r)
    store.delete("/leaf")
    settle(store)
    assert r.events == [WatchedEvent("DELETED", "/leaf")]


def test_data_watch_ignores_children(store: MetadataStore) -> None:
    store.create("/p")
    r = Recorder()
    store.get("/p", watch=r)
    store.create("/p/c")
    store.delete("/p/c")
    settle(store)
    assert r.events == []
    store.set("/p", b"x")
    settle(store)
    assert r.events == [WatchedEvent("CHANGED", "/p")]


def test_same_watcher_registered_twice_fires_once(store: MetadataStore) -> None:
    store.create("/n")
    r = Recorder()
    store.get("/n", watch=r)
    store.exists("/n", watch=r)
    store.get_children("/n", watch=r)
    store.delete("/n")
    settle(store)
    assert r.events == [WatchedEvent("DELETED", "/n")]


def test_different_watchers_each_fire(store: MetadataStore) -> None:
    store.create("/n")
    a, b = Recorder(), Recorder()
    store.get("/n", watch=a)
    store.get("/n", watch=b)
    store.set("/n", b"x")
    settle(store)
    assert a.events == b.events == [WatchedEvent("CHANGED", "/n")]


def test_failed_reads_leave_no_watch(store: MetadataStore) -> None:
    r = Recorder()
    with pytest.raises(NoNodeError):
        store.get("/absent", watch=r)
    with pytest.raises(NoNodeError):
        store.get_children("/absent", watch=r)
    store.create("/absent")
    store.create("/absent/child")
    settle(store)
    assert r.events == []


def test_watcher_may_rewatch_from_the_callback(store: MetadataStore) -> None:
    store.create("/cfg", b"0")
    seen = Recorder()

    def watcher(event: WatchedEvent) -> None:
        data, _ = store.get(event.path, watch=watcher)  # ZooKeeper's usual re-arm pattern
        seen(data.decode())

    store.get("/cfg", watch=watcher)
    store.set("/cfg", b"1")
    assert seen.wait(1) == ["1"]
    store.set("/cfg", b"2")
    assert seen.wait(2) == ["1", "2"]


def test_session_listener_hears_connected(backend: Backend) -> None:
    s = backend.new()
    r = Recorder()
    s.add_session_listener(r)
    s.start()
    assert r.wait(1)[0] == "CONNECTED"


# --- multi ---------------------------------------------------------------------------------------


def test_multi_results_and_effects(store: MetadataStore) -> None:
    store.create("/m", b"0")
    results = store.multi([
        CheckOp("/m", 0),
        CreateOp("/m/a", b"a"),
        CreateOp("/m/a/b", b"b"),  # sees the create before it
        CreateOp("/m/s-", b"s", sequential=True),
        SetOp("/m", b"1", version=0),
        DeleteOp("/m/a/b"),
    ])
    assert results[0] is None
    assert results[1:4] == ["/m/a", "/m/a/b", "/m/s-0000000001"]
    assert isinstance(results[4], ZnodeStat) and results[4].version == 1
    assert results[5] is None
    assert store.get_children("/m") == ["a", "s-0000000001"]
    assert store.get("/m")[0] == b"1"
    assert store.get_children("/m/a") == []
    assert store.multi([]) == []


def test_multi_is_all_or_nothing(store: MetadataStore) -> None:
    store.create("/m", b"0")
    store.create("/m/taken")
    before = store.exists("/m")
    r = Recorder()
    store.get_children("/m", watch=r)
    with pytest.raises(NodeExistsError):
        store.multi([
            CreateOp("/m/new"),
            SetOp("/m", b"changed"),
            CreateOp("/m/taken"),
            DeleteOp("/m/never"),
        ])
    assert store.get_children("/m") == ["taken"]
    assert store.get("/m") == (b"0", before)
    settle(store)
    assert r.events == []  # nothing happened, so nothing fired


@pytest.mark.parametrize(
    ("ops", "error"),
    [
        ([CheckOp("/m", 5)], BadVersionError),
        ([CheckOp("/nope", -1)], NoNodeError),
        ([SetOp("/m", b"x", version=9)], BadVersionError),
        ([DeleteOp("/m")], NotEmptyError),
        ([CreateOp("/nope/x")], NoNodeError),
        ([CreateOp("/eph/x")], NoChildrenForEphemeralsError),
        ([CreateOp("/m/ok"), DeleteOp("/m/ok", version=3)], BadVersionError),
    ],
)
def test_multi_raises_the_first_failure(
    store: MetadataStore, ops: list, error: type[Exception]
) -> None:
    store.create("/m/c", make_parents=True)
    store.create("/eph", ephemeral=True)
    with pytest.raises(error):
        store.multi(ops)
    assert store.get_children("/m") == ["c"]
    assert store.get("/m")[1].version == 0


def test_multi_check_guards_a_compare_and_set(store: MetadataStore) -> None:
    """Kafka's pattern: change partition state only while the controller epoch is ours."""
    store.create("/controller_epoch", b"5")
    store.create("/state", b"old")
    epoch_version = store.exists("/controller_epoch").version  # type: ignore[union-attr]
    store.multi([CheckOp("/controller_epoch", epoch_version), SetOp("/state", b"new", 0)])
    store.set("/controller_epoch", b"6")  # a new controller
    with pytest.raises(BadVersionError):
        store.multi([CheckOp("/controller_epoch", epoch_version), SetOp("/state", b"x", 1)])
    assert store.get("/state")[0] == b"new"


def test_multi_fires_watches_after_commit(store: MetadataStore) -> None:
    store.create("/m")
    child, created = Recorder(), Recorder()
    store.get_children("/m", watch=child)
    store.exists("/m/x", watch=created)
    store.multi([CreateOp("/m/x", b"1"), SetOp("/m/x", b"2")])
    settle(store)
    assert child.events == [WatchedEvent("CHILD", "/m")]
    assert created.events == [WatchedEvent("CREATED", "/m/x")]
    assert store.get("/m/x")[1].version == 1
