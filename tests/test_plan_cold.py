"""Cold no-op plans read only tree nodes and the definitions that may differ from the spec
(issue 16): the digest in a definition file's name (ruling 13) is compared with the digest
of the bytes the spec determines. Counts of storage reads by kind of file are asserted."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import Location
from iceberg_helpers import local_properties
from plan_helpers import write_spec

from benchmarks.bench_plan import write_spec as write_bench_spec
from benchmarks.common import OpLog, recording
from olympia import Catalog
from olympia.catalog import transaction
from olympia.catalog.keys import ObjectRef, ObjectType, def_digest, def_file_name
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.options import storage_options
from olympia.plan import Plan, apply_plan, make_plan
from olympia.plan.digests import declared_definition
from olympia.plan.state import Scope, load_current
from olympia.spec import load_spec

OBJECTS = 300


def cold_plan(catalog: Catalog, spec: Path) -> tuple[Plan, OpLog]:
    """A plan made by a freshly opened catalog (nothing cached but the root and the catalog
    definition that opening it read), with its storage reads."""
    cold = Catalog.open(catalog.uri, catalog.storage.options)
    loaded = load_spec(spec)
    with recording(cold.storage) as log:
        plan = make_plan(cold, loaded)
    return plan, log




def apply_spec(catalog: Catalog, spec: Path) -> None:
    apply_plan(catalog, make_plan(catalog, load_spec(spec)), allow_destructive=True)


def old_def_path(ref: ObjectRef | None, content: bytes) -> str:
    """Where a writer before ruling 13 put a definition: ``{uuid4}-{ns}[-{name}].binpb``,
    no digest."""
    stem = str(uuid.uuid4())
    if ref is None:
        return f"def/catalog/{stem}.binpb"
    if ref.type == ObjectType.NAMESPACE:
        return f"def/namespace/{def_file_name(stem, [ref.namespace])}"
    folder = "table" if ref.type == ObjectType.TABLE else "view"
    return f"def/{folder}/{def_file_name(stem, [ref.namespace, ref.name])}"


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The benchmark's spec of 300 objects (nested columns, views), and the same with one
    table that has one more column."""
    base = tmp_path_factory.mktemp("specs")
    return (write_bench_spec(base / "spec", OBJECTS),
            write_bench_spec(base / "changed", OBJECTS, changed_every=10_000))


def test_cold_noop_plan_reads_no_unchanged_definition(location: Location,
                                                       specs: tuple[Path, Path]) -> None:
    spec, _ = specs
    catalog = Catalog.create(location.uri, location.storage_options)
    apply_spec(catalog, spec)
    plan, log = cold_plan(catalog, spec)
    assert not plan.has_changes
    assert log.count("read", "def") == 0  # no object's definition (1% would be 3)
    assert log.count("read", "node") > 0  # the tree is read as before


def test_a_changed_object_is_read_and_detected(tmp_path: Path,
                                                specs: tuple[Path, Path]) -> None:
    spec, changed = specs
    catalog = Catalog.create(str(tmp_path / "wh"))
    apply_spec(catalog, spec)
    # declared differently: the one table whose declaration changed is read
    plan, log = cold_plan(catalog, changed)
    assert [(c.action, c.name) for c in plan.changes] == [("update", "ns00.t000000")]
    assert log.count("read", "def") == 1
    apply_plan(catalog, plan)
    plan, log = cold_plan(catalog, changed)  # a column added at the end keeps ids in order
    assert not plan.has_changes and log.count("read", "def") == 0
    # changed outside the spec: that table's file no longer has the declared digest
    with catalog.transaction() as txn:
        txn.alter_table(("ns03", "t000003"), set_properties={"team": "other"})
        txn.create_table(("ns03", "extra"), columns=[{"name": "x", "type": "int4"}])
    plan, log = cold_plan(catalog, changed)
    assert sorted((c.action, c.name) for c in plan.changes) == [
        ("drop", "ns03.extra"), ("update", "ns03.t000003")]
    assert log.count("read", "def") == 2


def test_only_objects_as_declared_skip_the_comparison(tmp_path: Path,
                                                      specs: tuple[Path, Path]) -> None:
    """The tables and views whose stored definition is the declared one byte for byte are
    the ones the diff takes as unchanged; a changed one and a renamed one are compared."""
    spec, changed = specs
    catalog = Catalog.create(str(tmp_path / "wh"))
    apply_spec(catalog, spec)
    declared = load_spec(changed)
    snapshot = Catalog.open(catalog.uri).snapshot
    current = load_current(snapshot, Scope.of(declared).observe(snapshot), declared)
    objects = {(ObjectType.TABLE, k) for k in current.tables} | {
        (ObjectType.VIEW, k) for k in current.views}
    assert objects - current.as_declared == {(ObjectType.TABLE, ("ns00", "t000000"))}
    assert load_current(snapshot, Scope.of(declared).observe(snapshot)).as_declared == set()
    # a rename keeps the definition but is compared under its new name
    renamed = shutil.copytree(changed, tmp_path / "renamed")
    text = (renamed / "ns01.yaml").read_text()
    (renamed / "ns01.yaml").write_text(text.replace(
        "  t000001:\n", "  renamed:\n    renamed_from: t000001\n", 1))
    plan, _ = cold_plan(catalog, renamed)
    assert [(c.action, c.name) for c in plan.changes] == [
        ("rename", "ns01.renamed"), ("update", "ns00.t000000")]


def test_a_removed_column_makes_ids_differ_and_the_table_is_read(tmp_path: Path) -> None:
    columns = [{"name": "a", "type": "int4"}, {"name": "b", "type": "int4"},
               {"name": "c", "type": "int4"}]
    doc = {"namespace": "ns", "tables": {"t": {"columns": columns}}}
    spec = write_spec(tmp_path / "spec", {"ns": doc})
    catalog = Catalog.create(str(tmp_path / "wh"))
    apply_spec(catalog, spec)
    del columns[1]  # c keeps its id 3: the declaration numbers it 2
    write_spec(spec, {"ns": doc})
    apply_spec(catalog, spec)
    plan, log = cold_plan(catalog, spec)
    assert not plan.has_changes
    assert log.count("read", "def") == 1


def test_old_definition_files_without_digest_still_plan(
        tmp_path: Path, specs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    spec, changed = specs
    catalog = Catalog.create(str(tmp_path / "wh"))
    with monkeypatch.context() as patch:  # this apply writes definitions the old way
        patch.setattr(transaction, "def_path", old_def_path)
        apply_spec(catalog, spec)
    paths = [p for _, p in catalog.snapshot.objects()]
    assert len(paths) == OBJECTS and not any(def_digest(p) for p in paths)
    plan, log = cold_plan(catalog, spec)
    assert not plan.has_changes
    assert log.count("read", "def") == OBJECTS  # each read once, as before
    plan, _ = cold_plan(catalog, changed)
    assert [(c.action, c.name) for c in plan.changes] == [("update", "ns00.t000000")]
    apply_plan(catalog, plan)  # rewrites that table's definition with a digest
    plan, log = cold_plan(catalog, changed)
    assert not plan.has_changes
    assert log.count("read", "def") == OBJECTS - 1


def test_iceberg_table_after_an_outside_append(tmp_path: Path) -> None:
    props = local_properties(tmp_path)
    catalog = Catalog.create(props["uri"], storage_options(props["uri"], props),
                             properties={"warehouse": props["warehouse"]})
    columns: list[dict[str, Any]] = [{"name": "id", "type": "bigint", "nullable": False}]
    tables = {f"t{i}": {"format": "parquet", "columns": columns} for i in range(20)}
    tables["events"] = {"columns": columns}  # an Iceberg table, created with metadata
    spec = write_spec(tmp_path / "spec", {"ns": {"namespace": "ns", "tables": tables}})
    apply_spec(catalog, spec)
    ice = OlympiaCatalog("c", **props)
    table = ice.load_table("ns.events")
    table.append(pa.Table.from_pylist([{"id": 1}], schema=table.schema().as_arrow()))
    ice.close()
    plan, log = cold_plan(catalog, spec)
    assert not plan.has_changes
    # the catalog definition and the Iceberg table's (it names its current metadata file,
    # which the append changed); its metadata file is not read, nor any other definition
    assert log.count("read", "def") == 1
    assert log.count("read", "other") == 0


def test_declared_bytes_are_the_bytes_a_create_writes(tmp_path: Path) -> None:
    """Nested columns are numbered depth first, as the catalog numbers them."""
    columns = [
        {"name": "id", "type": "bigint", "nullable": False, "comment": "key"},
        {"name": "s", "type": "struct", "fields": [
            {"name": "a", "type": "list", "element": {"type": "decimal(10,2)"}},
            {"name": "b", "type": "map", "key": {"type": "string"},
             "value": {"type": "struct", "fields": [{"name": "x", "type": "date"}]}}]},
        {"name": "last", "type": "varchar(8)", "properties": {"pii": "no"}}]
    doc = {"namespace": "ns", "properties": {"owner": "me"}, "comment": "c",
           "tables": {"t": {"columns": columns, "properties": {"a": "1", "b": "2"},
                            "format": "parquet", "location": "s3://b/t",
                            "format_properties": {"k": "v"}, "protected": True}},
           "views": {"v": {"sql": "SELECT id FROM ns.t", "references": ["ns.t"],
                           "columns": [{"name": "id", "type": "bigint"}]}}}
    spec = load_spec(write_spec(tmp_path / "spec", {"ns": doc}))
    catalog = Catalog.create(str(tmp_path / "wh"))
    apply_plan(catalog, make_plan(catalog, spec))
    rows = catalog.snapshot.objects()
    assert sorted(str(ref) for ref, _ in rows) == ["ns", "ns.t", "ns.v"]
    for ref, path in rows:
        declared = declared_definition(spec, ref)
        assert declared is not None
        assert declared.SerializeToString(deterministic=True) == catalog.storage.read(path)
    assert declared_definition(spec, ObjectRef(ObjectType.TABLE, "ns", "v")) is None
