"""Names never escape their folder, and no two live tables share a location (issue 32).

Table and namespace names that look like paths (``../x``, ``..``, ``a/b``, ``s3://other/x``,
...) become ONE escaped folder under the warehouse, through pyiceberg, a YAML spec (plan and
apply, library and command line) and renames; nothing appears outside the warehouse, on
local disk and on the S3 server. Explicit locations keep working unless they overlap a live
table's location (same folder, or one inside the other).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from iceberg_helpers import SCHEMA, rows, s3_properties
from plan_helpers import plan_for, write_spec
from pyiceberg.exceptions import NoSuchTableError

from olympia import Catalog
from olympia.catalog.keys import hashed_name
from olympia.cli import main
from olympia.exceptions import (
    InvalidNameError,
    LocationInUseError,
    SpecError,
    TableLocationError,
)
from olympia.expire import ExpirePolicy, expire_local
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.locations import LiveIndex, LiveTable, escape_part, inside, place
from olympia.iceberg.options import storage_options
from olympia.plan import apply_plan

# names the format allows that look like paths; each must stay one folder name
PROBES = ["../x", "a/b", "..", ".", "a\\b", "/etc/x", "s3://other/x", "../../../escaped",
          "%2E%2E", "..."]


@dataclass
class Lake:
    """A catalog whose warehouse lies three folders below ``files()``'s root, so a path step
    out of the warehouse would show up there."""

    props: dict[str, str]
    warehouse: str
    files: Callable[[], set[str]]  # every file under the warehouse's grand-grandparent
    in_warehouse: Callable[[str], bool]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Lake:
    if request.param == "local":
        top = tmp_path / "outside"
        warehouse = top / "a" / "b" / "wh"
        warehouse.mkdir(parents=True)
        props = {"uri": str(tmp_path / "catalog"), "warehouse": f"file://{warehouse}",
                 "olympia.create": "true"}
        return Lake(props, props["warehouse"],
                    lambda: {str(p) for p in top.rglob("*") if p.is_file()},
                    lambda f: f.startswith(f"{warehouse}/"))
    server = request.getfixturevalue("s3_server")
    prefix = uuid.uuid4().hex[:12]
    props = s3_properties(server, prefix)
    props["warehouse"] = f"s3://{server.bucket}/{prefix}/outside/a/b/wh"
    fs = server.filesystem()
    root = f"{server.bucket}/{prefix}/outside"
    return Lake(props, props["warehouse"], lambda: set(fs.find(root)),
                lambda f: f.startswith(f"{server.bucket}/{prefix}/outside/a/b/wh/"))


def outside(lake: Lake) -> list[str]:
    return sorted(f for f in lake.files() if not lake.in_warehouse(f))


def test_escaping_rules() -> None:
    assert escape_part("orders") == "orders"
    assert escape_part("a.b_c-d~e") == "a.b_c-d~e"  # RFC 3986 unreserved stays
    # what could make a path step once decoded is encoded twice
    assert escape_part("..") == "%252E%252E" and escape_part(".") == "%252E"
    assert escape_part("../x") == "..%252Fx" and escape_part("a\\b") == "a%255Cb"
    assert escape_part("%2E") == "%25252E"  # '%' itself is escaped: no two names collide
    assert escape_part("s3://o/x") == "s3%3A%252F%252Fo%252Fx" and escape_part("é") == "%C3%A9"
    assert inside("s3://b/wh/x", "s3://b/wh") and not inside("s3://b/wh", "s3://b/wh")
    assert not inside("s3://b/wh/../x", "s3://b/wh") and not inside("s3://c/wh/x", "s3://b/wh")
    assert not inside("file:///wh/..\\x", "/wh") and inside("file:///wh/x", "/wh/")
    index = LiveIndex()
    index.put(("n", "t"), LiveTable(("n", "t"), "s3://b/t", "s3://b/t/metadata/1.json"))
    index.put(("n", "local"), LiveTable(("n", "local"), "/a/b"))
    for clash in ("s3a://b/t/", "s3://b//t", "s3://b", "s3://b/t/in", "file:///a/b/c", "/a"):
        with pytest.raises(LocationInUseError):
            index.check_free("table n.new", clash, "", ("n", "new"))
    with pytest.raises(TableLocationError, match="'..' step"):
        index.check_free("table n.new", "s3://b/t/x/..", "", ("n", "new"))
    with pytest.raises(LocationInUseError, match="current metadata of live table n.t"):
        index.check_free("table n.new", "s3://c/x", "s3://b/t/metadata/1.json", ("n", "new"))
    for free in ("s3://b/tt", "s3://c/t", "/a/bc", "/x"):
        index.check_free("table n.new", free, "", ("n", "new"))
    index.check_free("table n.t", "s3://b/t", "s3://b/t/metadata/1.json", ("n", "t"))  # itself
    data = place("s3://b/t/data/f.parquet", "a data file")
    owner = index.owner(data, lambda t: t.key == ("n", "x"))
    assert owner is not None and owner.name == "n.t"
    assert index.owner(data, lambda t: t.key == ("n", "t")) is None
    index.put(("n", "t"), None)
    index.check_free("table n.new", "s3://b/t", "s3://b/t/metadata/1.json", ("n", "new"))


def test_full_length_multibyte_names_get_a_folder_the_disk_takes(lake: Lake) -> None:
    """A 100-byte name of two-byte characters escapes to 300 bytes, past the 255 a local
    file system takes for one folder name: the folder is the name's ``~`` hash instead."""
    catalog = OlympiaCatalog("long", **lake.props)
    long_ns, long_table = "ñ" * 50, "é" * 50
    assert len(escape_part(long_table)) == 300
    catalog.create_namespace((long_ns,))
    table = catalog.create_table((long_ns, long_table), SCHEMA)
    table.append(rows(0))
    assert table.location() == f"{lake.warehouse}/{hashed_name(long_ns)}/{hashed_name(long_table)}"
    assert catalog.load_table((long_ns, long_table)).scan().to_arrow().num_rows == 3
    fits = "é" * 42  # 252 bytes escaped: stays readable
    assert catalog.create_table((long_ns, fits), SCHEMA).location().endswith(
        f"/{escape_part(fits)}")
    assert outside(lake) == []


def test_a_local_step_past_255_bytes_is_a_refused_form(tmp_path: Path) -> None:
    """No local file system holds a name past 255 bytes: such a step in a local location is
    refused where the place is parsed (a TableLocationError naming it, a 400 through the
    server), never a failed write; on an object store it is a step like any other."""
    for step in ("a" * 256, "é" * 128):
        for location in (f"/wh/{step}/t", f"file:///wh/{step}"):
            with pytest.raises(TableLocationError, match="a step of 256 bytes, and a local"):
                place(location, "the location of table n.t")
        assert place(f"s3://b/{step}", "a location") == ("s3", "b", (step,))
    assert place("/wh/" + "a" * 255, "a location") == ("", "", ("wh", "a" * 255))
    catalog = OlympiaCatalog("c", uri=str(tmp_path / "catalog"),
                             warehouse=f"file://{tmp_path}/warehouse", **{"olympia.create": "true"})
    catalog.create_namespace("ns")
    with pytest.raises(TableLocationError, match=r"table ns\.t.*a step of 300 bytes"):
        catalog.create_table("ns.t", SCHEMA, location=f"file://{tmp_path}/warehouse/{'x' * 300}")
    assert not catalog.table_exists("ns.t")


def test_pyiceberg_names_stay_in_the_warehouse(lake: Lake) -> None:
    before = outside(lake)
    catalog = OlympiaCatalog("names", **lake.props)
    catalog.create_namespace("sales")
    for probe in PROBES:
        table = catalog.create_table(("sales", probe), SCHEMA)
        table.append(rows(0))  # data and manifests too
        assert table.location() == f"{lake.warehouse}/sales/{escape_part(probe)}"
        catalog.create_namespace((probe,))
        other = catalog.create_table((probe, "t"), SCHEMA)
        other.append(rows(0))
        assert other.location() == f"{lake.warehouse}/{escape_part(probe)}/t"
        assert catalog.load_table((probe, "t")).scan().to_arrow().num_rows == 3
    # renames move no file: the table keeps its location under the warehouse
    moved = catalog.rename_table(("sales", "../x"), ("sales", "../../moved"))
    assert moved.location() == f"{lake.warehouse}/sales/..%252Fx"
    catalog.rename_table(("sales", "a/b"), ("..", "../y"))
    assert catalog.load_table(("..", "../y")).scan().to_arrow().num_rows == 3
    for bad in ("\x00", "a b"):
        with pytest.raises(InvalidNameError):
            catalog.create_table(("sales", bad), SCHEMA)
        with pytest.raises(InvalidNameError):
            catalog.create_namespace((bad,))
    assert outside(lake) == before
    assert sum(1 for f in lake.files() if f.endswith(".parquet")) == 2 * len(PROBES)


def test_spec_names_stay_in_the_warehouse(lake: Lake, tmp_path: Path) -> None:
    before = outside(lake)
    catalog = Catalog.create(lake.props["uri"], storage_options(lake.props["uri"], lake.props),
                             properties={"warehouse": lake.warehouse})
    columns = [{"name": "id", "type": "int8"}]
    docs: dict[str, Any] = {"sales": {"namespace": "sales", "tables": {
        p: {"columns": columns} for p in PROBES}}}
    docs.update({f"ns{i}": {"namespace": p, "tables": {"t": {"columns": columns}}}
                 for i, p in enumerate(PROBES)})
    apply_plan(catalog, plan_for(catalog, write_spec(tmp_path / "spec", docs)))
    ice = OlympiaCatalog.over(catalog)
    for probe in PROBES:
        assert ice.load_table(("sales", probe)).location() == \
            f"{lake.warehouse}/sales/{escape_part(probe)}"
        assert ice.load_table((probe, "t")).location() == \
            f"{lake.warehouse}/{escape_part(probe)}/t"
    assert outside(lake) == before


def test_cli_names_stay_in_the_warehouse(tmp_path: Path) -> None:
    top = tmp_path / "outside"
    warehouse = top / "a" / "b" / "wh"
    cli = CliRunner()
    env = {"OLYMPIA_CATALOG": str(tmp_path / "catalog"), "NO_COLOR": "1"}
    assert cli.invoke(main, ["init", "--property", f"warehouse=file://{warehouse}"],
                      env=env).exit_code == 0
    spec = write_spec(tmp_path / "spec", {"sales": {"namespace": "sales", "tables": {
        p: {"columns": [{"name": "id", "type": "int8"}]} for p in PROBES}}})
    planned = cli.invoke(main, ["plan", str(spec)], env=env)
    assert planned.exit_code == 0, planned.output
    applied = cli.invoke(main, ["apply", str(spec), "--auto-approve"], env=env)
    assert applied.exit_code == 0, applied.output
    made = {p.relative_to(top).parts[:5] for p in top.rglob("*.metadata.json")}
    assert made == {("a", "b", "wh", "sales", escape_part(p)) for p in PROBES}
    nul = write_spec(tmp_path / "nul", {"sales": {"namespace": "sales", "tables": {
        "\x00": {"columns": [{"name": "id", "type": "int8"}]}}}})
    refused = cli.invoke(main, ["plan", str(nul)], env=env)
    assert refused.exit_code == 3 and "control characters" in refused.output
    assert "Traceback" not in refused.output


def test_explicit_locations_never_overlap_a_live_table(lake: Lake) -> None:
    catalog = OlympiaCatalog("names", **lake.props)
    catalog.create_namespace("sales")
    first = catalog.create_table("sales.first", SCHEMA)
    here = first.location()
    for clash in (here, f"{here}/", f"{here}/inner", lake.warehouse, f"{here}//inner"):
        with pytest.raises(LocationInUseError, match="live table sales.first") as err:
            catalog.create_table("sales.clash", SCHEMA, location=clash)
        assert err.value.other == "sales.first"
    with pytest.raises(TableLocationError, match="'..' step"):  # never taken as 'here'
        catalog.create_table("sales.clash", SCHEMA, location=f"{here}/x/../")
    with pytest.raises(LocationInUseError, match="sales.first"), \
            catalog.create_table_transaction("sales.clash", SCHEMA, location=here) as txn:
        txn.set_properties({"a": "b"})
    assert not catalog.table_exists("sales.clash")
    beside = catalog.create_table("sales.beside", SCHEMA, location=f"{here}-2")
    assert beside.location() == f"{here}-2"  # a sibling whose name starts alike is fine
    # a default location inside an explicit one is refused too, naming the owner
    catalog.create_table("sales.wide", SCHEMA, location=f"{lake.warehouse}/other")
    catalog.create_namespace("other")
    with pytest.raises(LocationInUseError, match="sales.wide"):
        catalog.create_table("other.t", SCHEMA)
    # a dropped table's folder stays taken while kept versions read it there: given
    # explicitly it is refused; a default location is derived beside it
    catalog.drop_table("sales.first")
    with pytest.raises(LocationInUseError, match="table sales.first at kept catalog versions"):
        catalog.create_table("sales.again", SCHEMA, location=here)
    assert catalog.create_table("sales.first", SCHEMA).location().startswith(f"{here}-")
    # once those versions are expired the folder is free again
    expire_local(catalog.olympia, ExpirePolicy(keep_last=1, older_than_ms=0, grace_ms=0,
                                               force=True), now_ms=2**42, settle_ms=0)
    assert catalog.create_table("sales.again", SCHEMA, location=here).location() == here


def test_a_name_freed_by_a_rename_gets_a_location_beside_the_old_one(lake: Lake) -> None:
    """The renamed table keeps its folder; a new table of the old name gets
    ``<name>-<8 hex digits>`` beside it, as after a drop."""
    catalog = OlympiaCatalog("names", **lake.props)
    catalog.create_namespace("sales")
    here = catalog.create_table("sales.t", SCHEMA).location()
    catalog.rename_table("sales.t", "sales.kept")
    beside = catalog.create_table("sales.t", SCHEMA).location()
    assert beside.startswith(f"{here}-") and len(beside) == len(here) + 9
    assert catalog.load_table("sales.kept").location() == here


def test_spec_location_overlapping_a_live_table_is_refused(lake: Lake, tmp_path: Path) -> None:
    catalog = Catalog.create(lake.props["uri"], storage_options(lake.props["uri"], lake.props),
                             properties={"warehouse": lake.warehouse})
    columns = [{"name": "id", "type": "int8"}]
    spec = write_spec(tmp_path / "spec", {"sales": {"namespace": "sales", "tables": {
        "a": {"columns": columns}}}})
    apply_plan(catalog, plan_for(catalog, spec))
    taken = f"{lake.warehouse}/sales/a/sub"
    spec = write_spec(tmp_path / "spec", {"sales": {"namespace": "sales", "tables": {
        "a": {"columns": columns}, "b": {"columns": columns, "location": taken}}}})
    with pytest.raises(SpecError, match=r"table sales.b: location .* live table sales.a"):
        plan_for(catalog, spec)


def test_register_refuses_aliasing_a_live_table(lake: Lake) -> None:
    catalog = OlympiaCatalog("names", **lake.props)
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.t", SCHEMA)
    table.append(rows(0))
    older = table.metadata.metadata_log[0].metadata_file
    for metadata_file in (table.metadata_location, older):
        with pytest.raises(LocationInUseError, match="live table sales.t"):
            catalog.register_table("sales.alias", metadata_file)
    assert not catalog.table_exists("sales.alias")
    # repointing the table itself at its own older metadata is no aliasing
    assert catalog.register_table("sales.t", older, overwrite=True).metadata_location == older


def test_purge_never_deletes_another_live_tables_files(lake: Lake) -> None:
    catalog = OlympiaCatalog("names", **lake.props)
    catalog.create_namespace("sales")
    table = catalog.create_table("sales.t", SCHEMA)
    table.append(rows(0))
    # an alias made before aliasing was refused: the same metadata under a second name
    definition = catalog.olympia.load_table("sales", "t")
    with catalog.olympia.transaction() as txn:
        txn.create_table("sales", "alias", columns=definition.columns, format="iceberg",
                         location=definition.location, properties=definition.properties,
                         format_properties=definition.format_properties)
    before = lake.files()
    with pytest.raises(LocationInUseError, match="nothing dropped or deleted.*live table"):
        catalog.purge_table("sales.alias")
    assert lake.files() == before and catalog.table_exists("sales.alias")
    catalog.drop_table("sales.t")
    catalog.purge_table("sales.alias")  # the only owner now: its files go
    assert not any(f.endswith(".parquet") for f in lake.files())
    with pytest.raises(NoSuchTableError):
        catalog.load_table("sales.alias")


def test_locations_in_one_transaction_see_its_own_changes(lake: Lake) -> None:
    catalog = OlympiaCatalog("names", **lake.props)
    catalog.create_namespace("sales")
    base = f"{lake.warehouse}/shared"
    catalog.create_table("sales.old", SCHEMA, location=f"{base}/old")
    with catalog.transaction() as tx:
        tx.create_table("sales.a", SCHEMA, location=f"{base}/a")
        with pytest.raises(LocationInUseError, match="live table sales.a"):
            tx.create_table("sales.b", SCHEMA, location=f"{base}/a/inner")
        tx.rename_table("sales.a", "sales.renamed")
        with pytest.raises(LocationInUseError, match="live table sales.renamed"):
            tx.create_table("sales.b", SCHEMA, location=f"{base}/a")
        tx.drop_table("sales.renamed")
        tx.drop_table("sales.old")  # a staged drop frees a folder no version had
        tx.create_table("sales.b", SCHEMA, location=f"{base}/a")
        with pytest.raises(LocationInUseError, match="sales.old at kept catalog versions"):
            tx.create_table("sales.c", SCHEMA, location=f"{base}/old/c")  # (kept: read)
        with pytest.raises(LocationInUseError, match="live table sales.b"):
            tx.create_table("sales.d", SCHEMA, location=base)
    assert sorted(catalog.list_tables("sales")) == [("sales", "b")]
