"""OlympiaCatalog through pyiceberg: loading, namespaces, tables, commits, conflicts,
evolution, create-table transactions, views, and data that reads back exactly (local disk
and the S3 server)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iceberg_helpers import SCHEMA, local_properties, open_catalog, rows, s3_properties, sorted_rows
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchIcebergTableError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    TableAlreadyExistsError,
    ViewAlreadyExistsError,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.sorting import NullOrder, SortField, SortOrder
from pyiceberg.table.update import AddSchemaUpdate, SetCurrentSchemaUpdate
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import (
    DateType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
)
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

from olympia import Catalog, versions
from olympia.exceptions import (
    InvalidArgumentError,
    LocationInUseError,
    NoSuchCatalogError,
    ProtectedObjectError,
)
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.metadata import describe
from olympia.iceberg.retention import KeptSnapshotError

NESTED = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "tags", ListType(3, StringType(), element_required=False)),
    NestedField(4, "attrs", MapType(5, StringType(), 6, IntegerType(), value_required=False)),
    NestedField(7, "address", StructType(NestedField(8, "city", StringType(), doc="where"),
                                         NestedField(9, "since", DateType()))),
    identifier_field_ids=[1],
)


@pytest.fixture
def ice(tmp_path: Path) -> OlympiaCatalog:
    catalog = open_catalog(local_properties(tmp_path))
    catalog.create_namespace("sales")
    return catalog


def latest(catalog: OlympiaCatalog) -> int:
    return catalog.olympia.refresh()


# --- loading the catalog ------------------------------------------------------------------


def test_load_catalog_by_impl_and_reopen(tmp_path: Path) -> None:
    props = local_properties(tmp_path)
    catalog = load_catalog("prod", **{"py-catalog-impl": "olympia.iceberg.OlympiaCatalog",
                                      **props})
    assert isinstance(catalog, OlympiaCatalog) and catalog.name == "prod"
    catalog.create_namespace("a")
    props.pop("olympia.create")
    again = load_catalog("prod", **{"py-catalog-impl": "olympia.iceberg.OlympiaCatalog",
                                    **props})
    assert again.list_namespaces() == [("a",)]


def test_load_catalog_from_pyiceberg_yaml(tmp_path: Path) -> None:
    Catalog.create(str(tmp_path / "catalog"))
    (tmp_path / ".pyiceberg.yaml").write_text(
        f"catalog:\n  prod:\n    uri: {tmp_path / 'catalog'}\n"
        f"    warehouse: file://{tmp_path}/warehouse\n")
    script = (
        "from pyiceberg.catalog import load_catalog\n"
        "import pyarrow as pa\n"
        "from olympia.iceberg import OlympiaCatalog\n"
        "c = load_catalog('prod', **{'py-catalog-impl': 'olympia.iceberg.OlympiaCatalog'})\n"
        "c.create_namespace('ns')\n"
        "t = c.create_table('ns.t', pa.schema([pa.field('x', pa.int64())]))\n"
        "t.append(pa.table({'x': pa.array([7], pa.int64())}))\n"
        "print(OlympiaCatalog('prod').load_table('ns.t').scan().to_arrow()['x'].to_pylist())\n"
    )
    env = {**os.environ, "PYICEBERG_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[7]"


def test_load_needs_uri_and_an_existing_catalog(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="uri"):
        OlympiaCatalog("x")
    with pytest.raises(NoSuchCatalogError, match=r"olympia init.*olympia\.create=true"):
        OlympiaCatalog("x", uri=str(tmp_path / "nothing"))


def test_warehouse_defaults_to_the_olympia_catalog_property(tmp_path: Path) -> None:
    Catalog.create(str(tmp_path / "cat"), properties={"warehouse": f"file://{tmp_path}/wh"})
    catalog = OlympiaCatalog("x", uri=str(tmp_path / "cat"))
    catalog.create_namespace("n")
    table = catalog.create_table("n.t", SCHEMA)
    assert table.location() == f"file://{tmp_path}/wh/n/t"


# --- namespaces ---------------------------------------------------------------------------


def test_namespace_lifecycle(ice: OlympiaCatalog) -> None:
    ice.create_namespace("hr", {"owner": "team-a", "location": "/x"})
    assert ice.namespace_exists("hr") and ice.namespace_exists(("hr",))
    assert not ice.namespace_exists("nope")
    assert sorted(ice.list_namespaces()) == [("hr",), ("sales",)]
    assert ice.list_namespaces("hr") == []
    assert ice.load_namespace_properties("hr") == {"owner": "team-a", "location": "/x"}
    summary = ice.update_namespace_properties("hr", removals={"location", "missing"},
                                              updates={"owner": "team-b", "tier": "1"})
    assert sorted(summary.removed) == ["location"] and summary.missing == ["missing"]
    assert sorted(summary.updated) == ["owner", "tier"]
    assert ice.load_namespace_properties("hr") == {"owner": "team-b", "tier": "1"}
    assert ice.olympia.refresh() and ice.olympia.load_namespace("hr").properties["tier"] == "1"
    with pytest.raises(NamespaceAlreadyExistsError):
        ice.create_namespace("hr")
    ice.create_namespace_if_not_exists("hr")
    ice.drop_namespace("hr")
    assert not ice.namespace_exists("hr")


def test_namespace_errors(ice: OlympiaCatalog) -> None:
    for call in (lambda: ice.load_namespace_properties("nope"),
                 lambda: ice.drop_namespace("nope"), lambda: ice.list_namespaces("nope"),
                 lambda: ice.list_tables("nope"), lambda: ice.list_views("nope"),
                 lambda: ice.update_namespace_properties("nope", updates={"a": "b"})):
        with pytest.raises(NoSuchNamespaceError):
            call()
    for empty in ("", (), ("",), (" ",)):
        with pytest.raises(NoSuchNamespaceError):
            ice.create_namespace(empty)
    with pytest.raises(InvalidArgumentError, match="one"):
        ice.create_namespace(("db", "ns1"))
    with pytest.raises(InvalidArgumentError, match="one level"):
        ice.load_table("db.ns1.t")
    ice.create_namespace(("db.ns1",))  # a dotted name is one level when given as a tuple
    assert ice.namespace_exists(("db.ns1",))
    with pytest.raises(ValueError, match="overlap"):
        ice.update_namespace_properties("sales", removals={"a"}, updates={"a": "1"})
    with pytest.raises(InvalidArgumentError, match="None"):
        ice.create_namespace("bad", {"key": None})  # type: ignore[dict-item]


def test_drop_namespace_refuses_tables_and_views(ice: OlympiaCatalog) -> None:
    ice.create_table("sales.t", SCHEMA)
    with pytest.raises(NamespaceNotEmptyError):
        ice.drop_namespace("sales")
    ice.drop_table("sales.t")
    ice.olympia.create_view("sales", "v", sql="SELECT 1")
    with pytest.raises(NamespaceNotEmptyError):
        ice.drop_namespace("sales")
    ice.drop_view("sales.v")
    ice.drop_namespace("sales")


# --- tables -------------------------------------------------------------------------------


def test_create_load_and_definition_in_step(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.orders", NESTED, properties={"owner": "x", "n": 42})
    loaded = ice.load_table(("sales", "orders"))
    assert loaded == table and loaded.name() == ("sales", "orders")
    assert table.properties["n"] == "42"
    assert ice.table_exists("sales.orders") and not ice.table_exists("sales.other")
    definition = ice.olympia.load_table("sales", "orders")
    assert definition.location == table.metadata_location
    assert definition.format == "iceberg" and definition.properties["owner"] == "x"
    schema = table.schema()  # Iceberg assigned fresh ids: the definition carries them
    cols = {c.name: c for c in definition.columns}
    assert [(c.name, c.type, c.id, c.nullable) for c in definition.columns] == [
        (f.name, kind, f.field_id, not f.required) for f, kind in zip(
            schema.fields, ["int8", "list", "map", "struct"], strict=True)]
    tags, attrs = schema.find_type("tags"), schema.find_type("attrs")
    assert isinstance(tags, ListType) and isinstance(attrs, MapType)
    assert cols["tags"].element is not None and cols["tags"].element.id == tags.element_id
    assert cols["attrs"].key is not None and cols["attrs"].key.id == attrs.key_id
    assert cols["attrs"].value is not None and cols["attrs"].value.id == attrs.value_id
    assert [(f.name, f.id, f.comment) for f in cols["address"].fields] == [
        ("city", schema.find_field("address.city").field_id, "where"),
        ("since", schema.find_field("address.since").field_id, "")]
    fp = definition.format_properties
    assert fp["table-uuid"] == str(table.metadata.table_uuid)
    assert fp["format-version"] == "2" and fp["table-location"] == table.location()


def test_create_errors(ice: OlympiaCatalog) -> None:
    ice.create_table("sales.t", SCHEMA)
    before = latest(ice)
    with pytest.raises(TableAlreadyExistsError):
        ice.create_table("sales.t", SCHEMA)
    assert ice.create_table_if_not_exists("sales.t", SCHEMA).name() == ("sales", "t")
    with pytest.raises(NoSuchNamespaceError):
        ice.create_table("nope.t", SCHEMA)
    with pytest.raises(NoSuchNamespaceError):
        ice.create_table("t", SCHEMA)
    ice.olympia.create_view("sales", "v", sql="SELECT 1")
    with pytest.raises(TableAlreadyExistsError):
        ice.create_table("sales.v", SCHEMA)
    assert latest(ice) == before + 1  # only the view


def test_locations(ice: OlympiaCatalog, tmp_path: Path) -> None:
    table = ice.create_table("sales.a", SCHEMA)
    assert table.location() == f"file://{tmp_path}/warehouse/sales/a"
    assert table.metadata_location.startswith(f"{table.location()}/metadata/00000-")
    assert os.path.exists(table.metadata_location[len("file://"):])
    custom = ice.create_table("sales.b", SCHEMA, location=f"file://{tmp_path}/elsewhere/b/")
    assert custom.location() == f"file://{tmp_path}/elsewhere/b"
    ice.create_namespace("hr", {"location": f"file://{tmp_path}/hr-data"})
    assert ice.create_table("hr.c", SCHEMA).location() == f"file://{tmp_path}/hr-data/c"


def test_partitioned_and_sorted_table(ice: OlympiaCatalog) -> None:
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "name"))
    order = SortOrder(SortField(source_id=2, transform=IdentityTransform(),
                                null_order=NullOrder.NULLS_FIRST))
    table = ice.create_table("sales.p", Schema(NestedField(1, "id", LongType(), required=True),
                                               NestedField(2, "name", StringType())),
                             partition_spec=spec, sort_order=order)
    assert table.sort_order().order_id == 1 and len(table.spec().fields) == 1
    table.append(rows(0, 10))
    assert sorted_rows(ice.load_table("sales.p").scan().to_arrow()) == rows(0, 10)
    fp = ice.olympia.load_table("sales", "p").format_properties
    assert '"transform":"identity"' in fp["partition-spec"] and '"order-id":1' in fp["sort-order"]


def test_register_drop_purge(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.t", SCHEMA)
    table.append(rows(0))
    location = ice.load_table("sales.t").metadata_location
    ice.create_namespace("copy")
    with pytest.raises(LocationInUseError, match="live table sales.t"):
        ice.register_table("copy.t", location)  # no aliasing of a live table
    ice.drop_table("sales.t")
    registered = ice.register_table("copy.t", location)
    assert registered.metadata_location == location
    assert ice.olympia.load_table("copy", "t").location == location
    with pytest.raises(TableAlreadyExistsError):
        ice.register_table("copy.t", location)
    first = table.metadata.metadata_log[0].metadata_file
    assert ice.register_table("copy.t", first, overwrite=True).metadata_location == first
    assert ice.load_table("copy.t").scan().to_arrow().num_rows == 0
    ice.drop_table("copy.t")
    with pytest.raises(NoSuchTableError, match="Table does not exist: copy.t"):
        ice.load_table("copy.t")
    with pytest.raises(NoSuchTableError):
        ice.drop_table("copy.t")
    assert os.path.exists(location[len("file://"):])  # drop keeps the files
    data_file = next(iter(table.inspect.files()["file_path"].to_pylist()))
    ice.register_table("sales.t", location)
    ice.purge_table("sales.t")
    assert not ice.table_exists("sales.t")
    assert not os.path.exists(data_file[len("file://"):])
    assert not os.path.exists(location[len("file://"):])


def test_rename_within_and_across_namespaces(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.t", SCHEMA)
    table.append(rows(0))
    renamed = ice.rename_table("sales.t", "sales.u")
    assert renamed.metadata_location == ice.load_table("sales.u").metadata_location
    with pytest.raises(NoSuchTableError):
        ice.load_table("sales.t")
    ice.create_namespace("archive")
    before = latest(ice)
    moved = ice.rename_table(renamed.name(), ("archive", "t"))
    assert latest(ice) == before + 1  # drop + create in one version
    assert moved.name() == ("archive", "t") and moved.scan().to_arrow().num_rows == 3
    assert ice.list_tables("sales") == [] and ice.list_tables("archive") == [("archive", "t")]
    assert [c.id for c in ice.olympia.load_table("archive", "t").columns] == [1, 2]
    ice.create_table("sales.x", SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        ice.rename_table("archive.t", "sales.x")
    with pytest.raises(NoSuchTableError):
        ice.rename_table("sales.missing", "sales.y")
    with pytest.raises(NoSuchNamespaceError):
        ice.rename_table("archive.t", "nope.t")


def test_non_iceberg_olympia_tables(ice: OlympiaCatalog) -> None:
    ice.olympia.create_table("sales", "declared", columns=[{"name": "id", "type": "int8"}],
                             comment="from the spec", protected=True)
    ice.olympia.create_table("sales", "delta", columns=[{"name": "id", "type": "int8"}],
                             format="delta", location="s3://x/delta")
    ice.create_table("sales.ice", SCHEMA)
    assert ice.list_tables("sales") == [("sales", "ice")]
    for name in ("declared", "delta"):
        with pytest.raises(NoSuchIcebergTableError, match="not an Iceberg table"):
            ice.load_table(("sales", name))
    # a table declared as Iceberg without metadata yet becomes the created table
    created = ice.create_table_if_not_exists("sales.declared", SCHEMA)
    definition = ice.olympia.load_table("sales", "declared")
    assert definition.location == created.metadata_location
    assert (definition.comment, definition.protected) == ("from the spec", True)
    assert [c.name for c in definition.columns] == ["id", "name"]
    with pytest.raises(TableAlreadyExistsError):
        ice.create_table("sales.delta", SCHEMA)
    assert ice.list_tables("sales") == [("sales", "declared"), ("sales", "ice")]


# --- commits ------------------------------------------------------------------------------


def test_each_commit_is_one_version_and_the_definition_follows(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.t", SCHEMA)
    start = latest(ice)
    table.append(rows(0))
    table.append(rows(3))
    with table.update_schema() as update:
        update.add_column("qty", IntegerType(), doc="how many")
        update.rename_column("name", "label")
    assert latest(ice) == start + 3
    definition = ice.olympia.load_table("sales", "t")
    assert definition.location == table.metadata_location
    assert [(c.name, c.id, c.comment) for c in definition.columns] == [
        ("id", 1, ""), ("label", 2, ""), ("qty", 3, "how many")]
    meta = ice.load_table("sales.t").metadata
    assert len(meta.snapshots) == 2 and len(meta.metadata_log) == 3
    logged = [e.info.get("iceberg.sales.t") for e in versions.history(ice.olympia, limit=3)]
    assert logged == ["update", f"append snapshot {meta.snapshots[1].snapshot_id}",
                      f"append snapshot {meta.snapshots[0].snapshot_id}"]
    with table.transaction() as txn:  # nothing changed: no new version
        txn.set_properties({})
    assert latest(ice) == start + 3


def test_the_log_names_iceberg_operations_as_they_are(ice: OlympiaCatalog) -> None:
    """A rollback, a branch, a tag, a write to a branch, a move of the current snapshot and
    an expiry each say so in the version's annotation (what ``olympia log`` and the UI
    show), not ``update``."""
    table = ice.create_table("sales.ops", SCHEMA)
    table.append(rows(0))
    first = table.current_snapshot()
    table.append(rows(3))
    second = table.current_snapshot()
    assert first is not None and second is not None
    table.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
    table.manage_snapshots().create_tag(second.snapshot_id, "v2").commit()
    table.manage_snapshots().create_branch(first.snapshot_id, "dev").commit()
    table.append(rows(6), branch="dev")
    dev = table.refresh().metadata.refs["dev"].snapshot_id
    table.manage_snapshots().set_current_snapshot(second.snapshot_id).commit()
    table.manage_snapshots().remove_tag("v2").commit()
    table.manage_snapshots().remove_branch("dev").commit()
    logged = [e.info.get("iceberg.sales.ops") for e in versions.history(ice.olympia, limit=7)]
    assert logged[::-1] == [
        f"rollback to snapshot {first.snapshot_id}",
        f"create tag v2 at snapshot {second.snapshot_id}",
        f"create branch dev at snapshot {first.snapshot_id}",
        f"append snapshot {dev} to branch dev",
        f"set current snapshot {second.snapshot_id}",
        "drop tag v2",
        "drop branch dev",
    ]
    # an expiry (kept catalog versions still read dev's snapshot here, so it is refused)
    meta = table.refresh().metadata
    expired = meta.model_copy(update={"snapshots": [
        s for s in meta.snapshots if s.snapshot_id != dev]})
    assert describe(meta, expired) == "expire 1 snapshot"
    # a cherry-pick (Spark's procedure; pyiceberg has none): a new snapshot naming its source
    picked = second.model_copy(update={
        "snapshot_id": 42, "parent_snapshot_id": second.snapshot_id,
        "summary": Summary(Operation.APPEND, **{"source-snapshot-id": str(dev)})})
    assert describe(meta, meta.model_copy(update={
        "snapshots": [*meta.snapshots, picked], "current_snapshot_id": 42})) == (
        f"cherry-pick snapshot {dev} as 42")


def test_schema_and_partition_evolution(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.t", Schema(
        NestedField(1, "id", IntegerType(), required=True), NestedField(2, "day", DateType())))
    with table.update_schema() as update:
        update.update_column("id", LongType())
    with table.update_spec() as spec:
        spec.add_field("day", DayTransform(), "day_day")
    with table.update_spec() as spec:
        spec.add_identity("id")
    loaded = ice.load_table("sales.t")
    assert loaded.schema().find_field("id").field_type == LongType()
    assert [f.name for f in loaded.spec().fields] == ["day_day", "id"]
    definition = ice.olympia.load_table("sales", "t")
    assert definition.columns[0].type == "int8"
    assert '"day_day"' in definition.format_properties["partition-spec"]
    with table.update_spec() as spec:
        spec.remove_field("day_day")
    assert [f.name for f in ice.load_table("sales.t").spec().fields] == ["id"]


def test_commit_table_directly(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.t", SCHEMA)
    new_schema = Schema(NestedField(1, "id", LongType(), required=True),
                        NestedField(2, "name", StringType()),
                        NestedField(3, "extra", LongType()), schema_id=1)
    response = ice.commit_table(table, requirements=(),
                                updates=(AddSchemaUpdate(schema=new_schema),
                                         SetCurrentSchemaUpdate(schema_id=-1)))
    assert response.metadata.table_uuid == table.metadata.table_uuid
    assert response.metadata.current_schema_id == 1
    assert ice.load_table("sales.t").metadata_location == response.metadata_location
    assert [c.name for c in ice.olympia.load_table("sales", "t").columns][-1] == "extra"


def test_stale_requirements_fail_and_retry_succeeds(ice: OlympiaCatalog) -> None:
    a = ice.create_table("sales.t", SCHEMA)
    b = ice.load_table("sales.t")
    with a.update_schema() as update:
        update.add_column("b", IntegerType())
    with pytest.raises(CommitFailedException, match="current schema id has changed"), \
            b.update_schema() as update:
        update.add_column("c", IntegerType())
    # appends retry on refresh (pyiceberg's own loop) and both land
    a.append(rows(0))
    b.append(rows(10))  # b is stale: its first attempt fails its requirement, then retries
    assert ice.load_table("sales.t").scan().to_arrow().num_rows == 6


def test_concurrent_commit_to_same_table_conflicts(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.t", SCHEMA)
    with pytest.raises(CommitFailedException, match=r"commit conflict on sales\.t"), \
            ice.transaction() as tx:
        tx.load_table("sales.t").append(rows(0))
        staged = tx.load_table("sales.t").metadata_location
        table.append(rows(10))  # lands first, outside the transaction
    assert not os.path.exists(staged[len("file://"):])  # the loser's metadata file is gone
    assert sorted_rows(ice.load_table("sales.t").scan().to_arrow()) == rows(10)


def test_concurrent_commit_to_another_table_rebases(ice: OlympiaCatalog) -> None:
    ice.create_table("sales.a", SCHEMA)
    other = ice.create_table("sales.b", SCHEMA)
    start = latest(ice)
    with ice.transaction() as tx:
        tx.load_table("sales.a").append(rows(0))
        other.append(rows(10))  # version start+1
    assert latest(ice) == start + 2
    assert ice.load_table("sales.a").scan().to_arrow().num_rows == 3
    assert ice.load_table("sales.b").scan().to_arrow().num_rows == 3


def test_aborted_transaction_leaves_nothing(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.t", SCHEMA)
    start = latest(ice)
    with pytest.raises(RuntimeError), ice.transaction() as tx:
        tx.load_table("sales.t").append(rows(0))
        created = tx.create_table("sales.new", SCHEMA)
        staged = [tx.load_table("sales.t").metadata_location, created.metadata_location]
        raise RuntimeError("stop")
    assert latest(ice) == start and not ice.table_exists("sales.new")
    assert not any(os.path.exists(p[len("file://"):]) for p in staged)
    assert ice.load_table("sales.t").metadata_location == table.metadata_location


@pytest.mark.parametrize("format_version", [1, 2])
def test_create_table_transaction(ice: OlympiaCatalog, format_version: int) -> None:
    start = latest(ice)
    first = pa.table({"foo": pa.array(["a", None, "z"], pa.large_string())})
    wider = pa.table({"foo": pa.array(["b", "c", None], pa.large_string()),
                      "bar": pa.array([19, None, 25], pa.int32())})
    with ice.create_table_transaction("sales.t", first.schema,
                                      properties={"format-version": str(format_version)}) as txn:
        txn.append(first)
        with txn.update_schema() as schema:
            schema.union_by_name(wider.schema)
        txn.append(wider)
    assert latest(ice) == start + 1
    table = ice.load_table("sales.t")
    assert table.format_version == format_version
    assert table.scan().to_arrow().num_rows == 6
    assert [c.name for c in ice.olympia.load_table("sales", "t").columns] == ["foo", "bar"]
    with pytest.raises(TableAlreadyExistsError), \
            ice.create_table_transaction("sales.t", first.schema) as again:
        again.append(first)


# --- views --------------------------------------------------------------------------------


def sql_version(sql: str, namespace: str, *dialects: str) -> ViewVersion:
    """A view version with one SQL representation per dialect (``spark`` if none)."""
    return ViewVersion(  # type: ignore[call-arg]
        version_id=1, schema_id=0, summary={"engine-name": "test"},
        representations=[ViewRepresentation(SQLViewRepresentation(
            type="sql", sql=sql, dialect=dialect)) for dialect in dialects or ("spark",)],
        default_namespace=[namespace])


def test_iceberg_views_in_process(ice: OlympiaCatalog) -> None:
    before = latest(ice)
    created = ice.create_view("sales.recent", SCHEMA, sql_version("SELECT 1 AS id", "sales"),
                              properties={"comment": "recent rows", "owner": "ana"})
    assert latest(ice) == before + 1  # the metadata file and the Olympia view, one version
    assert ice.list_views("sales") == [("sales", "recent")] and ice.view_exists("sales.recent")
    loaded = ice.load_view("sales.recent")
    assert loaded == created and loaded.name() == ("sales", "recent")
    assert [(f.field_id, f.name) for f in loaded.schema().fields] == [(1, "id"), (2, "name")]
    assert loaded.current_version().representations[0].root.sql == "SELECT 1 AS id"
    assert loaded.location().startswith(ice.properties["warehouse"])
    view = ice.olympia.load_view("sales", "recent")  # the Olympia view mirrors it
    assert (view.sql, view.dialect, view.default_namespace, view.comment) == (
        "SELECT 1 AS id", "spark", "sales", "recent rows")
    assert [c.name for c in view.columns] == ["id", "name"]
    metadata_file = view.properties["iceberg.metadata-location"]
    assert Path(metadata_file.removeprefix("file://")).is_file()
    with pytest.raises(ViewAlreadyExistsError):
        ice.create_view("sales.recent", SCHEMA, sql_version("SELECT 2 AS id", "sales"))
    ice.create_table("sales.t", SCHEMA)
    with pytest.raises(ViewAlreadyExistsError, match="sales.t"):
        ice.create_view("sales.t", SCHEMA, sql_version("SELECT 2 AS id", "sales"))
    with pytest.raises(NoSuchNamespaceError):
        ice.create_view("nope.v", SCHEMA, sql_version("SELECT 2 AS id", "nope"))
    with pytest.raises(InvalidArgumentError, match="2 SQL representations"):
        ice.create_view("sales.two", SCHEMA,
                        sql_version("SELECT 2 AS id", "sales", "spark", "trino"))
    with pytest.raises(InvalidArgumentError, match="iceberg.metadata-location"):
        ice.create_view("sales.own", SCHEMA, sql_version("SELECT 2 AS id", "sales"),
                        properties={"iceberg.metadata-location": "file:///x"})
    assert ice.list_views("sales") == [("sales", "recent")]
    pinned = ice.at_version(latest(ice))
    ice.drop_view("sales.recent")
    assert pinned.load_view("sales.recent") == created  # a catalog version keeps it
    with pytest.raises(NoSuchViewError):
        ice.load_view("sales.recent")
    with pytest.raises(NoSuchViewError):
        ice.drop_view("sales.recent")


def test_a_view_created_in_an_abandoned_transaction_leaves_nothing(ice: OlympiaCatalog,
                                                                   tmp_path: Path) -> None:
    before = latest(ice)
    with pytest.raises(RuntimeError, match="abandoned"), ice.transaction() as tx:
        tx.create_view("sales.v", SCHEMA, sql_version("SELECT 1 AS id", "sales"))
        assert tx.view_exists("sales.v") and not ice.view_exists("sales.v")
        raise RuntimeError("abandoned")
    assert latest(ice) == before and not ice.view_exists("sales.v")
    assert not list(tmp_path.rglob("*.metadata.json"))  # its metadata file is deleted
    with ice.transaction() as tx:
        created = tx.create_view("sales.v", SCHEMA, sql_version("SELECT 1 AS id", "sales"))
    assert latest(ice) == before + 1 and ice.load_view("sales.v") == created


def test_views_of_olympias_own_tools(ice: OlympiaCatalog) -> None:
    ice.create_table("sales.t", SCHEMA)
    ice.olympia.create_view("sales", "v", sql="SELECT * FROM sales.t",
                            referenced_objects=["sales.t"])
    assert ice.list_views("sales") == [("sales", "v")]
    assert ice.view_exists("sales.v") and not ice.view_exists("sales.t")
    with pytest.raises(NotImplementedError, match="Olympia's own tools"):
        ice.load_view("sales.v")
    with pytest.raises(NoSuchViewError):
        ice.load_view("sales.w")
    with pytest.raises(NotImplementedError, match="create_view"):
        ice.register_view("sales.r", "file:///x.metadata.json")
    ice.drop_view("sales.v")
    with pytest.raises(NoSuchViewError):
        ice.drop_view("sales.v")


# --- data round trips ---------------------------------------------------------------------


def _round_trip(catalog: OlympiaCatalog) -> None:
    catalog.create_namespace("data")
    mixed = pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "price": pa.array([1.5, None, 3.25], pa.float64()),
        "tags": pa.array([["a"], [], None], pa.list_(pa.string())),
        "when": pa.array([0, 86_400_000_000, None], pa.timestamp("us", tz="UTC")),
    })
    table = catalog.create_table("data.mixed", mixed.schema)
    table.append(mixed)
    table.append(mixed.slice(0, 1))
    out = catalog.load_table("data.mixed").scan().to_arrow().sort_by("id")
    assert out.num_rows == 4
    assert out.column("price").to_pylist() == [1.5, 1.5, None, 3.25]
    table.overwrite(mixed.slice(1, 2))
    back = catalog.load_table("data.mixed").scan().to_arrow().sort_by("id")
    assert back.cast(mixed.schema).equals(mixed.slice(1, 2))
    assert back.column("tags").to_pylist() == [[], None]


def test_append_overwrite_round_trip_local(tmp_path: Path) -> None:
    _round_trip(open_catalog(local_properties(tmp_path)))


@pytest.mark.s3
def test_append_overwrite_round_trip_s3(s3_server: Any, tmp_path: Path) -> None:
    props = s3_properties(s3_server, tmp_path.name)
    catalog = load_catalog("s3", **{"py-catalog-impl": "olympia.iceberg.OlympiaCatalog",
                                    **props})
    _round_trip(catalog)
    table = catalog.load_table("data.mixed")
    assert table.metadata_location.startswith(props["warehouse"])
    files = s3_server.filesystem().find(f"{s3_server.bucket}/{tmp_path.name}/catalog")
    assert any("/vn/" in f for f in files)  # the Olympia files went to the catalog prefix
    assert catalog.olympia.load_table("data", "mixed").location == table.metadata_location


def test_snapshot_expiry_is_a_table_commit(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.t", SCHEMA)
    with table.transaction() as txn:  # two snapshots, one catalog version: the first is
        txn.append(rows(0))           # no version's head
        txn.append(rows(10))
    table.append(rows(20))
    version = ice.olympia.refresh()
    oldest, head = (s.snapshot_id for s in table.metadata.snapshots[:2])
    with pytest.raises(KeptSnapshotError, match=f"snapshot {head}: catalog versions .* main"):
        table.maintenance.expire_snapshots().by_id(head).commit()
    assert ice.olympia.refresh() == version
    table.maintenance.expire_snapshots().by_id(oldest).commit()
    assert ice.olympia.refresh() == version + 1
    assert ice.load_table("sales.t").snapshot_by_id(oldest) is None
    # the catalog version before it still names the metadata that had the snapshot
    assert ice.at_version(version).load_table("sales.t").snapshot_by_id(oldest) is not None
    assert ice.load_table("sales.t").scan().to_arrow().num_rows == 9


def test_protected_tables_are_not_dropped(ice: OlympiaCatalog) -> None:
    table = ice.create_table("sales.t", SCHEMA)
    ice.olympia.alter_table("sales", "t", protected=True)
    for drop in (ice.drop_table, ice.purge_table):
        with pytest.raises(ProtectedObjectError, match="protected"):
            drop("sales.t")
    table.append(rows(0))  # data commits keep the flag
    assert ice.olympia.load_table("sales", "t").protected
    assert os.path.exists(table.metadata_location[len("file://"):])
