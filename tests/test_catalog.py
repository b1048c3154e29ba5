"""The catalog suite: runs on memory, local disk and the real S3 server."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Location
from google.protobuf.message import Message

from olympia import Catalog, Column
from olympia._proto import objects_pb2 as pb
from olympia.catalog.files import LATEST, OLDEST, parse_def
from olympia.catalog.keys import KeyCodec, NameLimits, ObjectRef, ObjectType, version_path
from olympia.exceptions import (
    AlreadyExistsError,
    CommitConflict,
    CorruptFileError,
    InvalidArgumentError,
    InvalidNameError,
    NamespaceNotEmptyError,
    NotFoundError,
    ProtectedObjectError,
)
from olympia.tree import btree
from olympia.tree.node import SCHEMA, parse_node_file

ORDERS = [
    {"name": "id", "type": "bigint", "nullable": False, "comment": "order id"},
    {"name": "customer", "type": "struct", "fields": [
        {"name": "name", "type": "string"},
        {"name": "tags", "type": "list", "element": {"type": "varchar(20)"}},
    ]},
    {"name": "amounts", "type": "map", "key": {"type": "string"},
     "value": {"type": "decimal(12,2)", "nullable": False}},
    {"name": "placed_at", "type": "timestamptz"},
]


def new_catalog(location: Location, **options: object) -> Catalog:
    return Catalog.create(location.uri, location.storage_options, **options)  # type: ignore[arg-type]


def test_create_writes_version_zero(location: Location) -> None:
    catalog = new_catalog(location, order=4)
    assert catalog.version == 0
    files = [f.path for f in catalog.storage.list()]
    assert version_path(0) in files and LATEST in files
    assert version_path(0) == "vn/" + "0" * 32
    assert [p for p in files if p.startswith("def/catalog/")]
    raw = parse_node_file(catalog.storage.read(version_path(0)), "v0")
    assert raw.system_rows().keys() == {"created_at_millis", "n_keys", "catalog_def"}
    # system rows, exactly `order` pivot rows, one action row (catalog creation)
    assert len(raw.keys) == 3 + 4 + 1
    with pytest.raises(AlreadyExistsError):
        new_catalog(location)
    reopened = Catalog.open(location.uri, location.storage_options)
    assert reopened.version == 0 and reopened.catalog_def.order == 4
    assert reopened.catalog_def.txn_ttl_millis == 3 * 24 * 3600 * 1000


def test_open_missing_catalog(location: Location) -> None:
    with pytest.raises(NotFoundError, match="no Olympia catalog"):
        Catalog.open(location.uri, location.storage_options)


def test_namespace_lifecycle(location: Location) -> None:
    catalog = new_catalog(location, order=3)
    catalog.create_namespace("sales", {"owner": "team-a", "tier": "1"}, comment="Sales data")
    assert catalog.namespace_exists("sales") and not catalog.namespace_exists("hr")
    assert catalog.load_namespace_properties("sales") == {"owner": "team-a", "tier": "1"}
    catalog.alter_namespace("sales", set_properties={"tier": "2"}, unset_properties=["owner"])
    assert catalog.load_namespace("sales").properties == {"tier": "2"}
    with pytest.raises(AlreadyExistsError):
        catalog.create_namespace("sales")
    catalog.create_table("sales", "orders", columns=ORDERS)
    with pytest.raises(NamespaceNotEmptyError, match="sales.orders"):
        catalog.drop_namespace("sales")
    catalog.drop_namespace("sales", cascade=True)
    assert catalog.list_namespaces() == []
    with pytest.raises(NotFoundError):
        catalog.load_namespace("sales")


def test_tables_with_nested_types(location: Location) -> None:
    catalog = new_catalog(location)
    catalog.create_namespace("sales")
    created = catalog.create_table(("sales", "orders"), columns=ORDERS, properties={"a": "1"},
                                   location="s3://lake/sales/orders/metadata/v1.json")
    loaded = Catalog.open(location.uri, location.storage_options).load_table("sales.orders")
    assert loaded == created
    assert [c.name for c in loaded.columns] == ["id", "customer", "amounts", "placed_at"]
    assert loaded.columns[0].type == "int8" and not loaded.columns[0].nullable
    assert loaded.columns[1].fields[1].element is not None
    assert loaded.columns[1].fields[1].element.type == "varchar(20)"
    assert loaded.columns[2].value is not None and loaded.columns[2].value.type == "decimal(12,2)"
    assert loaded.columns[3].type == "timestamptz6"
    ids = [c.id for col in loaded.columns for c in col.walk()]
    assert len(ids) == len(set(ids)) and min(ids) == 1
    assert loaded.location.endswith("v1.json")


def test_alter_table(location: Location) -> None:
    catalog = new_catalog(location)
    catalog.create_namespace("sales")
    catalog.create_table("sales", "orders", columns=ORDERS)
    table = catalog.alter_table(
        "sales.orders", set_properties={"owner": "x"}, remove_columns=["placed_at"],
        rename_columns={"id": "order_id"}, add_columns=[Column("note", "string")],
        update_columns={"amounts": {"type": "map", "key": {"type": "string"},
                                    "value": {"type": "float8"}}},
    )
    assert [c.name for c in table.columns] == ["order_id", "customer", "amounts", "note"]
    assert table.columns[0].id == 1  # renames keep the column id
    reloaded = catalog.load_table("sales", "orders")
    assert reloaded == table
    assert reloaded.columns[2].value is not None and reloaded.columns[2].value.type == "float8"
    described = [a.type for a in catalog.snapshot.actions()]
    assert len(described) == 5  # set props, remove, rename, update, add
    reordered = catalog.alter_table("sales.orders", column_order=["note", "order_id", "customer",
                                                                  "amounts"])
    assert reordered.columns[0].name == "note"
    with pytest.raises(NotFoundError, match="column nope"):
        catalog.alter_table("sales.orders", remove_columns=["nope"])
    version = catalog.version
    assert catalog.alter_table("sales.orders", set_properties={"owner": "x"}) == reordered
    assert catalog.version == version  # nothing changed, nothing committed


def test_views(location: Location) -> None:
    catalog = new_catalog(location)
    catalog.create_namespace("sales")
    catalog.create_table("sales", "orders", columns=ORDERS)
    view = catalog.create_view("sales", "big_orders", sql="SELECT * FROM sales.orders",
                               dialect="spark", columns=[{"name": "id", "type": "int8"}],
                               referenced_objects=[("sales", "orders")])
    assert catalog.load_view("sales.big_orders") == view
    assert catalog.list_views("sales") == ["big_orders"]
    with pytest.raises(NotFoundError, match="sales.missing"):
        catalog.create_view("sales", "v2", sql="SELECT 1", referenced_objects=["sales.missing"])
    with pytest.raises(AlreadyExistsError):
        catalog.create_table("sales", "big_orders", columns=ORDERS)
    replaced = catalog.replace_view("sales.big_orders", sql="SELECT id FROM sales.orders")
    assert catalog.load_view("sales.big_orders") == replaced
    catalog.rename_view("sales.big_orders", "orders_v")
    assert catalog.list_views("sales") == ["orders_v"]
    catalog.drop_view("sales.orders_v")
    assert not catalog.view_exists("sales.orders_v")


def test_rename_namespace_moves_children(location: Location) -> None:
    catalog = new_catalog(location, order=3)
    catalog.create_namespace("old", {"k": "v"})
    for i in range(5):
        catalog.create_table("old", f"t{i}", columns=[{"name": "x", "type": "int4"}])
    catalog.create_view("old", "v", sql="SELECT 1", referenced_objects=["old.t0"])
    catalog.rename_namespace("old", "new")
    assert catalog.list_namespaces() == ["new"]
    assert catalog.list_tables("new") == [f"t{i}" for i in range(5)]
    assert catalog.load_table("new.t3").namespace == "new"
    assert catalog.list_views("new") == ["v"]


def test_protected_objects_cannot_be_dropped(location: Location) -> None:
    catalog = new_catalog(location)
    catalog.create_namespace("core", protected=True)
    catalog.create_table("core", "ledger", columns=ORDERS, protected=True)
    with pytest.raises(ProtectedObjectError, match="core.ledger"):
        catalog.drop_table("core.ledger")
    with pytest.raises(ProtectedObjectError, match="namespace core"):
        catalog.drop_namespace("core", cascade=True)
    catalog.alter_table("core.ledger", protected=False)
    catalog.drop_table("core.ledger")


@pytest.mark.parametrize("name", ["", "has space", "tab\there", "del\x7f", "x" * 101, "nul\x00"])
def test_invalid_names_write_nothing(location: Location, name: str) -> None:
    catalog = new_catalog(location)
    before = [f.path for f in catalog.storage.list()]
    with pytest.raises(InvalidNameError):
        catalog.create_namespace(name)
    catalog.create_namespace("ok")
    with pytest.raises(InvalidNameError):
        catalog.create_table("ok", name, columns=ORDERS)
    after = [f.path for f in catalog.storage.list()]
    assert len(after) == len(before) + 2  # only the namespace commit: its root and def file
    assert catalog.version == 1


def test_names_with_slashes_and_unicode(location: Location) -> None:
    catalog = new_catalog(location)
    catalog.create_namespace("../etc")
    catalog.create_table("../etc", "ünïcødé/x", columns=[{"name": "a", "type": "int4"}])
    assert catalog.list_tables("../etc") == ["ünïcødé/x"]
    defs = [f.path for f in catalog.storage.list("def/table/")]
    assert len(defs) == 1 and "/" not in defs[0].removeprefix("def/table/")


def test_unknown_type_is_a_clear_error(location: Location) -> None:
    catalog = new_catalog(location)
    catalog.create_namespace("s")
    with pytest.raises(InvalidArgumentError, match="unknown type 'bigintt'"):
        catalog.create_table("s", "t", columns=[{"name": "a", "type": "bigintt"}])


def test_transaction_atomic_and_read_your_writes(location: Location) -> None:
    catalog = new_catalog(location, order=3)
    with catalog.transaction() as txn:
        txn.create_namespace("a")
        txn.create_table("a", "t1", columns=ORDERS)
        assert txn.list_tables("a") == ["t1"]
        assert txn.load_table("a.t1").columns[0].name == "id"
        txn.drop_table("a.t1")
        txn.create_table("a", "t2", columns=ORDERS)
    assert catalog.version == 1
    assert catalog.list_tables("a") == ["t2"]
    files_before = {f.path for f in catalog.storage.list()}
    with pytest.raises(RuntimeError), catalog.transaction() as txn:
        txn.create_namespace("b")
        txn.create_table("b", "t", columns=ORDERS)
        raise RuntimeError("boom")
    assert {f.path for f in catalog.storage.list()} == files_before
    assert Catalog.open(location.uri, location.storage_options).version == 1


def test_created_at_strictly_increases(location: Location) -> None:
    catalog = new_catalog(location)
    for i in range(5):
        catalog.create_namespace(f"n{i}")
    stamps = [catalog.at_version(v).created_at_millis for v in range(6)]
    assert stamps == sorted(set(stamps))
    assert catalog.at_version(3).root.node.previous_root == version_path(2)


def test_concurrent_disjoint_transactions_both_commit(location: Location) -> None:
    catalog = new_catalog(location)
    catalog.create_namespace("s")
    other = Catalog.open(location.uri, location.storage_options)
    t1, t2 = catalog.transaction(), other.transaction()
    t1.create_table("s", "a", columns=ORDERS)
    t2.create_table("s", "b", columns=ORDERS)
    assert t1.commit() == 2
    assert t2.commit() == 3  # rebased over version 2
    fresh = Catalog.open(location.uri, location.storage_options)
    assert fresh.list_tables("s") == ["a", "b"]
    assert fresh.at_version(3).root.node.previous_root == version_path(2)


@pytest.mark.parametrize("second", ["same table", "drop namespace"])
def test_conflicting_transactions(location: Location, second: str) -> None:
    catalog = new_catalog(location)
    catalog.create_namespace("s")
    other = Catalog.open(location.uri, location.storage_options)
    t1, t2 = catalog.transaction(), other.transaction()
    t1.create_table("s", "a", columns=ORDERS)
    if second == "same table":
        t2.create_table("s", "a", columns=[{"name": "x", "type": "int4"}])
    else:
        t2.drop_namespace("s")
    t1.commit()
    with pytest.raises(CommitConflict) as err:
        t2.commit()
    assert err.value.version == 2
    assert "version 2" in str(err.value)
    assert ("s.a" if second == "same table" else "namespace s") in str(err.value)
    assert Catalog.open(location.uri, location.storage_options).version == 2


def test_serializable_detects_read_write_conflict(location: Location) -> None:
    catalog = new_catalog(location)
    catalog.create_namespace("s")
    catalog.create_namespace("t")
    other = Catalog.open(location.uri, location.storage_options)
    snap, ser = catalog.transaction(), other.transaction(isolation="SERIALIZABLE")
    ser.list_tables("s")  # decides based on what s holds
    ser.create_namespace("u")
    snap.create_table("s", "new", columns=ORDERS)
    snap.commit()
    with pytest.raises(CommitConflict, match="s.new"):
        ser.commit()
    relaxed = Catalog.open(location.uri, location.storage_options).transaction()
    relaxed.list_tables("s")
    relaxed.create_namespace("u")
    catalog.create_table("s", "other", columns=ORDERS)
    relaxed.commit()  # SNAPSHOT: reads do not conflict


def test_discovery_ignores_stale_or_missing_hint(location: Location) -> None:
    catalog = new_catalog(location)
    for i in range(9):
        catalog.create_namespace(f"n{i}")
    catalog.storage.write(LATEST, b" 3 \n")
    assert Catalog.open(location.uri, location.storage_options).version == 9
    catalog.storage.delete(LATEST)
    assert Catalog.open(location.uri, location.storage_options).version == 9
    catalog.storage.write(OLDEST, b"5")
    catalog.storage.write(LATEST, b"2")
    assert Catalog.open(location.uri, location.storage_options).version == 9
    with pytest.raises(NotFoundError, match="expired"):
        catalog.at_version(4)


def test_refresh_of_a_catalog_that_did_not_move_is_one_round_trip(
        location: Location, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe of the next version goes out with the hint reads; only a catalog that
    moved (or hints above the loaded version) needs the rest of discovery."""
    catalog = new_catalog(location)
    catalog.create_namespace("s")
    storage = catalog.storage
    rounds: list[list[str]] = []
    batch = [False]
    real_batch = storage.map_requests

    def map_requests(fn: Any, items: Any) -> Any:
        rounds.append(list(items))
        batch[0] = True
        try:
            return real_batch(fn, rounds[-1])
        finally:
            batch[0] = False

    def alone(real: Any) -> Any:
        def call(path: str, *args: Any) -> Any:
            if not batch[0]:
                rounds.append([path])
            return real(path, *args)
        return call

    monkeypatch.setattr(storage, "map_requests", map_requests)
    for op in ("read", "exists"):
        monkeypatch.setattr(storage, op, alone(getattr(storage, op)))
    version = catalog.version
    # the loaded root is read too (a prefix restored from a copy may hold another): where
    # its tag is free to learn (local disk: the stat after its create), conditionally,
    # with the probe and no hint; otherwise with the hints
    tagged = location.kind == "local"
    assert catalog.refresh() == version
    assert rounds == ([[version_path(version), version_path(version + 1)]] if tagged else
                      [[LATEST, OLDEST, version_path(version), version_path(version + 1)]])
    assert catalog.refresh() == version and rounds[1:] == [  # its root's tag now known
        [version_path(version), version_path(version + 1)]]
    for lagging in (b"0", None):  # a hint written late, or never: still one round trip
        catalog.create_namespace(f"s{version}")
        version = catalog.version
        if lagging is None:
            storage.delete(LATEST)
        else:
            storage.write(LATEST, lagging)
        rounds.clear()
        assert catalog.refresh() == version
        assert rounds == ([[version_path(version), version_path(version + 1)]] if tagged else
                          [[LATEST, OLDEST, version_path(version), version_path(version + 1)]])
    other = Catalog.open(location.uri, location.storage_options)
    other.create_namespace("t")
    other.create_namespace("u")
    storage.write(LATEST, str(version).encode())  # a stale hint naming the loaded version
    rounds.clear()
    assert catalog.refresh() == version + 2 and len(rounds) > 1
    assert catalog.refresh() == version + 2  # the hint is stale, the catalog did not move


def test_refresh_past_a_stale_hint_reads_only_the_newest_root_where_probes_are_free(
        location: Location, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local disk and memory tell for free that a version exists, so discovery does not
    read the hinted root it moves past; on S3 that root is read with the probes it
    replaces (a HEAD costs the round trip a GET does), when another host's writer
    committed those versions."""
    catalog = new_catalog(location)
    catalog.create_namespace("s")
    version = catalog.version
    other = Catalog.open(location.uri, location.elsewhere().storage_options)
    for name in ("t", "u", "v"):
        other.create_namespace(name)
    catalog.storage.write(LATEST, str(version + 1).encode())  # lags behind the newest
    read: list[str] = []  # every read, conditional ones (roots) too
    real, tagged = catalog.storage.read, catalog.storage.read_if_changed
    monkeypatch.setattr(catalog.storage, "read",
                        lambda path: read.append(path) or real(path))
    monkeypatch.setattr(catalog.storage, "read_if_changed",
                        lambda path, tag: read.append(path) or tagged(path, tag))
    assert catalog.refresh() == version + 3
    roots = [p for p in read if p.startswith("vn/") and p not in (LATEST, OLDEST)]
    newest = version_path(version + 3)
    hinted = [version_path(version + 1)] if location.kind == "s3" else []
    # the loaded root is read with the hints (a restored prefix may hold another; on local
    # disk, whose tag is known, conditionally, and first on its own with the probe)
    assert sorted(set(roots[:-1])) == sorted([version_path(version), *hinted])
    assert roots[-1] == newest


def test_corrupt_node_file_is_named(location: Location) -> None:
    catalog = new_catalog(location, order=3)
    catalog.create_namespace("s")
    for i in range(10):
        catalog.create_table("s", f"t{i}", columns=[{"name": "x", "type": "int4"}])
    snap = catalog.snapshot
    node_path = list(btree.node_paths(snap.nodes, snap.root.node))[-1]
    catalog.storage.write(node_path, b"not arrow")
    fresh = Catalog.open(location.uri, location.storage_options)
    with pytest.raises(CorruptFileError, match=node_path):
        btree.validate(fresh.snapshot.nodes, fresh.snapshot.root.node, 3)


@pytest.mark.parametrize(("kind", "cleared"), [
    ("table", None), ("table", "id"), ("namespace", None), ("catalog", None), ("catalog", "id"),
])
def test_empty_or_incomplete_definition_is_corrupt(location: Location, kind: str,
                                                   cleared: str | None) -> None:
    """A 0-byte definition file (cleared None) or one without a required field."""
    catalog = new_catalog(location)
    catalog.create_table(catalog.create_namespace("s").name, "t")
    cls: type[Message] = {"table": pb.TableDef, "namespace": pb.NamespaceDef,
                          "catalog": pb.CatalogDef}[kind]
    path = (catalog.snapshot.root.node.catalog_def if kind == "catalog" else
            catalog.definition_path(ObjectRef(ObjectType.TABLE, "s", "t") if kind == "table"
                                    else ObjectRef(ObjectType.NAMESPACE, "s")))
    assert path is not None
    content = b""
    if cleared is not None:
        message = cls.FromString(catalog.storage.read(path))
        message.ClearField(cleared)
        content = message.SerializeToString()
    catalog.storage.write(path, content)
    name = cls.__name__
    # the content no longer matches the checksum in the file name (ruling 13); a file
    # written before the ruling (no checksum) is refused for the missing field itself
    reason = f"empty file, not a {name}" if cleared is None else "checksum mismatch"
    with pytest.raises(CorruptFileError, match=f"corrupt file .*{path}: {reason}"):
        Catalog.open(location.uri, location.storage_options).load_all()
    if cleared is not None:
        old_name = f"def/{kind}/0b2d4492-d5d0-40f8-9125-093e2d705bc4-s.binpb"
        with pytest.raises(CorruptFileError, match=f"{name} without its required {cleared}"):
            parse_def(content, old_name, cls)


def test_key_encoding_matches_spec() -> None:
    codec = KeyCodec(NameLimits(namespace=8, table=8, view=9))
    assert codec.key(ObjectRef(ObjectType.NAMESPACE, "default")) == "B===default "
    assert codec.key(ObjectRef(ObjectType.TABLE, "default", "table")) == "C===default table   "
    assert codec.key(ObjectRef(ObjectType.VIEW, "default", "view")) == "D===default view     "
    assert codec.decode("C===default table   ") == ObjectRef(ObjectType.TABLE, "default", "table")
    assert version_path(100) == "vn/00100110000000000000000000000000"


def test_cold_load_table_reads_one_node_per_level(location: Location) -> None:
    catalog = new_catalog(location, order=4)
    with catalog.transaction() as txn:
        txn.create_namespace("s")
        for i in range(200):
            txn.create_table("s", f"t{i:03d}", columns=[{"name": "x", "type": "int4"}])
    cold = Catalog.open(location.uri, location.storage_options)
    depth = cold.snapshot.depth()
    assert depth >= 3
    cold = Catalog.open(location.uri, location.storage_options)
    cold.storage.stats.reset()
    cold.load_table("s.t123")
    # non-root levels plus the table's definition file
    assert cold.storage.stats.reads == (depth - 1) + 1
    cold.storage.stats.reset()
    cold.load_table("s.t123")
    assert cold.storage.stats.reads == 0  # nodes and defs are immutable: cached


def test_node_files_follow_the_schema(location: Location) -> None:
    catalog = new_catalog(location, order=5)
    catalog.create_namespace("s")
    for f in catalog.storage.list("node/") + catalog.storage.list("vn/0"):
        raw = parse_node_file(catalog.storage.read(f.path), f.path)
        assert raw and SCHEMA.names == ["key", "value", "pnode"]
