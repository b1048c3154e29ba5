"""What pyiceberg's catalogs promise, with one-level namespaces, checked against a catalog.

Every test talks to the pyiceberg ``Catalog`` interface only (no Olympia API), so the same
module runs against any catalog: :func:`catalog` is the single point to swap. It yields
``OlympiaCatalog`` in process and pyiceberg's ``RestCatalog`` talking to ``olympia serve``
(one server per module and storage kind); names are unique per test, so the shared server
needs no cleanup between tests.
Multi-level namespaces are out of scope here: OlympiaCatalog refuses them (see
``tests/test_iceberg_catalog.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iceberg_helpers import local_properties, s3_properties
from pyiceberg.catalog import Catalog
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    BadRequestError,
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchIdentifierError,
    NoSuchNamespaceError,
    NoSuchTableError,
    RESTError,
    TableAlreadyExistsError,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import BooleanType, IntegerType, NestedField, StringType
from restserver import RestServer

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.iceberg import OlympiaCatalog

SCHEMA = Schema(
    NestedField(1, "foo", StringType(), required=False),
    NestedField(2, "bar", IntegerType(), required=True),
    NestedField(3, "baz", BooleanType(), required=False),
    identifier_field_ids=[2],
)
ROWS = pa.table({"foo": ["a", None], "bar": pa.array([1, 2], pa.int32()),
                 "baz": [True, None]},
                schema=pa.schema([pa.field("foo", pa.string()),
                                  pa.field("bar", pa.int32(), nullable=False),
                                  pa.field("baz", pa.bool_())]))


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3), "rest-local",
                        pytest.param("rest-s3", marks=pytest.mark.s3)])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """The catalog under test, with a ``warehouse`` property. THE place to swap in another
    catalog: every test uses only what this yields."""
    if request.param.startswith("rest-"):
        server: RestServer = request.getfixturevalue(f"{request.param.replace('-', '_')}_server")
        yield server.client("parity")
        return
    if request.param == "local":
        props = local_properties(tmp_path)
    else:
        props = s3_properties(request.getfixturevalue("s3_server"), uuid.uuid4().hex[:12])
    with OlympiaCatalog("parity", **props) as opened:
        yield opened


@pytest.fixture(scope="module")
def rest_local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    """``olympia serve`` over a catalog on local disk."""
    with RestServer.on_new_catalog(tmp_path_factory.mktemp("rest")) as server:
        yield server


@pytest.fixture(scope="module")
def rest_s3_server(s3_server: Any) -> Iterator[RestServer]:
    """``olympia serve`` over a catalog on the S3 server; clients get the S3 settings they
    need as operator-given client properties."""
    props = s3_properties(s3_server, uuid.uuid4().hex[:12])
    OlympiaStore.create(props["uri"], s3_server.storage_options).close()
    clients = [f"--client-property={key}={props[key]}" for key in (
        "s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.region", "py-io-impl")]
    with RestServer(props["uri"], props["warehouse"], s3_server.storage_options,
                    tuple(clients)) as server:
        yield server


@pytest.fixture
def ns() -> str:
    """A namespace name no other test uses."""
    return f"parity_{uuid.uuid4().hex[:10]}"


def raises(catalog: Catalog, in_process: type[Exception], rest: type[Exception] | None = None,
           match: str | None = None) -> pytest.RaisesExc[Exception]:
    """``pytest.raises`` of what ``catalog`` raises: ``in_process`` from OlympiaCatalog and,
    where given, ``rest`` from pyiceberg's RestCatalog, whose client turns the server's
    answer into an exception by status code per call (a 400 is ``BadRequestError``, a 404
    from ``register_table`` a plain ``RESTError`` whose message names the server's
    ``NoSuchNamespaceException``)."""
    expected = rest if rest is not None and isinstance(catalog, RestCatalog) else in_process
    return pytest.raises(expected, match=match)


def exists(table: Table, path: str) -> bool:
    return table.io.new_input(path).exists()


# --- namespaces -----------------------------------------------------------------------------


def test_a_created_namespace_exists_is_listed_and_keeps_its_properties(
        catalog: Catalog, ns: str) -> None:
    # (inside the warehouse: the REST server refuses a namespace location outside it)
    elsewhere = f"{catalog.properties['warehouse'].rstrip('/')}/somewhere/else"
    props = {"comment": "for tests", "location": elsewhere, "owner": "x"}
    catalog.create_namespace(ns, props)
    assert catalog.namespace_exists(ns) and catalog.namespace_exists((ns,))
    assert (ns,) in catalog.list_namespaces()
    assert catalog.load_namespace_properties(ns) == props
    assert catalog.load_namespace_properties((ns,)) == props


def test_creating_a_namespace_twice(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns, {"a": "1"})
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace(ns)
    catalog.create_namespace_if_not_exists(ns, {"a": "2"})  # no error, nothing changed
    assert catalog.load_namespace_properties(ns) == {"a": "1"}
    assert catalog.list_namespaces().count((ns,)) == 1


@pytest.mark.parametrize("empty", ["", (), ("",), " ", (" ",)])
def test_an_empty_namespace_identifier_names_no_namespace(catalog: Catalog,
                                                          empty: str | tuple[str, ...]) -> None:
    # () never leaves the REST client; an empty name sent to the server is a bad request
    with raises(catalog, NoSuchNamespaceError, BadRequestError if empty != () else None):
        catalog.create_namespace(empty)


@pytest.mark.parametrize("properties", [{None: "value"}, {"key": None}])
def test_null_namespace_properties_are_refused(catalog: Catalog, ns: str,
                                               properties: dict[str | None, str | None]) -> None:
    if isinstance(catalog, RestCatalog) and None in properties:
        pytest.skip("pyiceberg's RestCatalog sends a None key as the JSON key 'null': the "
                    "server receives a valid property")
    with raises(catalog, ValueError, BadRequestError,
                match="None" if not isinstance(catalog, RestCatalog) else "valid string"):
        catalog.create_namespace(ns, properties)  # type: ignore[arg-type]
    assert not catalog.namespace_exists(ns)


def test_a_namespace_created_without_properties_has_none(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    assert catalog.load_namespace_properties(ns) == {}


def test_properties_of_a_missing_namespace(catalog: Catalog, ns: str) -> None:
    with pytest.raises(NoSuchNamespaceError, match=f"Namespace {ns} does not exists"):
        catalog.load_namespace_properties(ns)
    with pytest.raises(NoSuchNamespaceError):
        catalog.update_namespace_properties(ns, updates={"a": "b"})


def test_listing_namespaces(catalog: Catalog, ns: str) -> None:
    others = [f"{ns}_{suffix}" for suffix in ("b", "c%", "d_")]
    for name in (ns, *others):
        catalog.create_namespace(name)
    listed = catalog.list_namespaces()
    assert all((name,) in listed for name in (ns, *others))
    assert all(len(entry) == 1 for entry in listed)  # one-level namespaces list as 1-tuples
    assert catalog.list_namespaces(ns) == [] and catalog.list_namespaces((ns,)) == []
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_namespaces(f"{ns}_missing")


def test_namespace_exists_matches_names_exactly(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(f"{ns}1")
    assert catalog.namespace_exists(f"{ns}1")
    for lookalike in (ns, f"{ns}_", f"{ns}%", f"{ns}1 ", f"{ns.upper()}1"):
        assert not catalog.namespace_exists(lookalike)


def test_updating_namespace_properties(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns, {"comment": "old", "p1": "1", "p2": "2", "keep": "k"})
    summary = catalog.update_namespace_properties(
        ns, removals={"p1", "p2", "never-set"}, updates={"p3": "3", "comment": "new"})
    assert sorted(summary.removed) == ["p1", "p2"]
    assert sorted(summary.updated) == ["comment", "p3"] and summary.missing == ["never-set"]
    assert catalog.load_namespace_properties(ns) == {"comment": "new", "p3": "3", "keep": "k"}
    summary = catalog.update_namespace_properties(ns, updates={"p4": "4"})
    assert (summary.removed, summary.updated, summary.missing) == ([], ["p4"], [])
    with raises(catalog, ValueError, RESTError, match="p4"):  # REST: 422, as the spec says
        catalog.update_namespace_properties(ns, removals={"p4"}, updates={"p4": "again"})
    assert catalog.load_namespace_properties(ns)["p4"] == "4"


def test_dropping_namespaces(catalog: Catalog, ns: str) -> None:
    with pytest.raises(NoSuchNamespaceError):
        catalog.drop_namespace(ns)
    catalog.create_namespace(ns)
    catalog.create_table((ns, "t"), SCHEMA)
    with pytest.raises(NamespaceNotEmptyError, match=f"Namespace {ns} is not empty"):
        catalog.drop_namespace(ns)
    assert catalog.namespace_exists(ns)
    catalog.drop_table((ns, "t"))
    catalog.drop_namespace(ns)
    assert not catalog.namespace_exists(ns) and (ns,) not in catalog.list_namespaces()


# --- creating and loading tables ------------------------------------------------------------


def test_a_created_table_loads_back(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.orders", SCHEMA, properties={"n": 42})
    assert table.name() == (ns, "orders")
    assert table.properties["n"] == "42"  # property values become strings
    for identifier in (f"{ns}.orders", (ns, "orders"), table.name()):
        loaded = catalog.load_table(identifier)
        assert loaded.name() == (ns, "orders")
        assert loaded.metadata_location == table.metadata_location
        assert loaded.metadata == table.metadata
    assert catalog.table_exists((ns, "orders")) and not catalog.table_exists((ns, "other"))
    assert table.location().startswith(catalog.properties["warehouse"].rstrip("/"))
    assert table.metadata_location.startswith(f"{table.location()}/metadata/00000-")
    assert exists(table, table.metadata_location)
    assert table.sort_order().order_id == 0 and table.sort_order().is_unsorted
    assert table.format_version == 2 and table.spec().is_unpartitioned()


def test_create_table_options(catalog: Catalog, ns: str, tmp_path: Path) -> None:
    catalog.create_namespace(ns)
    v1 = catalog.create_table((ns, "v1"), SCHEMA, properties={"format-version": "1"})
    assert v1.format_version == 1
    order = SortOrder(SortField(source_id=2, transform=IdentityTransform(),
                                null_order=NullOrder.NULLS_FIRST))
    sorted_table = catalog.create_table((ns, "sorted"), SCHEMA, sort_order=order)
    field = sorted_table.sort_order().fields[0]
    assert sorted_table.sort_order().order_id == 1
    assert (field.direction, field.null_order) == (SortDirection.ASC, NullOrder.NULLS_FIRST)
    arrow = catalog.create_table((ns, "arrow"), ROWS.schema)
    assert [f.name for f in arrow.schema().fields] == ["foo", "bar", "baz"]
    place = f"{catalog.properties['warehouse'].rstrip('/')}/{ns}-given/t"
    placed = catalog.create_table((ns, "placed"), SCHEMA, location=f"{place}/")
    assert placed.location() == place  # a trailing slash is dropped
    assert catalog.load_table((ns, "placed")).location() == place


def test_create_table_errors(catalog: Catalog, ns: str) -> None:
    with pytest.raises(NoSuchNamespaceError):
        catalog.create_table((ns, "t"), SCHEMA)
    with raises(catalog, NoSuchNamespaceError, NoSuchIdentifierError):  # REST: client-side
        catalog.create_table("no_namespace_given", SCHEMA)
    catalog.create_namespace(ns)
    first = catalog.create_table((ns, "t"), SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table((ns, "t"), SCHEMA)
    again = catalog.create_table_if_not_exists((ns, "t"), SCHEMA)
    assert again.metadata_location == first.metadata_location
    with pytest.raises(ValueError, match="None"):
        catalog.create_table((ns, "u"), SCHEMA, properties={"p": None})
    assert not catalog.table_exists((ns, "u"))


def test_loading_a_missing_table(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    with pytest.raises(NoSuchTableError, match=f"Table does not exist: {ns}.missing"):
        catalog.load_table((ns, "missing"))
    assert not catalog.table_exists((ns, "missing"))
    assert not catalog.table_exists((f"{ns}_none", "missing"))


@pytest.mark.parametrize("format_version", [1, 2])
def test_create_table_transaction(catalog: Catalog, ns: str, format_version: int) -> None:
    catalog.create_namespace(ns)
    first = pa.table({"foo": pa.array(["a", None, "z"], pa.large_string())})
    wider = pa.table({"foo": pa.array(["b", None, "c"], pa.large_string()),
                      "bar": pa.array([19, None, 25], pa.int32())})
    with catalog.create_table_transaction((ns, "t"), first.schema, properties={
            "format-version": str(format_version)}) as txn:
        assert not catalog.table_exists((ns, "t"))  # nothing visible before the commit
        txn.append(first)
        with txn.update_schema() as update:
            update.union_by_name(wider.schema)
        txn.append(wider)
    table = catalog.load_table((ns, "t"))
    assert table.format_version == format_version
    assert table.scan().to_arrow().num_rows == 6
    with pytest.raises(TableAlreadyExistsError), \
            catalog.create_table_transaction((ns, "t"), first.schema) as again:
        again.append(first)


# --- listing, dropping, renaming, registering ------------------------------------------------


def test_listing_tables(catalog: Catalog, ns: str) -> None:
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_tables(ns)
    catalog.create_namespace(ns)
    catalog.create_namespace(f"{ns}_2")
    assert catalog.list_tables(ns) == []
    catalog.create_table((ns, "a"), SCHEMA)
    catalog.create_table((ns, "b"), SCHEMA)
    catalog.create_table((f"{ns}_2", "c"), SCHEMA)
    assert sorted(catalog.list_tables(ns)) == [(ns, "a"), (ns, "b")]
    assert catalog.list_tables((f"{ns}_2",)) == [(f"{ns}_2", "c")]


def test_dropping_and_purging_tables(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    with pytest.raises(NoSuchTableError):
        catalog.drop_table((ns, "t"))
    table = catalog.create_table((ns, "t"), SCHEMA)
    table.append(ROWS)
    catalog.drop_table(table.name())
    with pytest.raises(NoSuchTableError):
        catalog.load_table((ns, "t"))
    assert exists(table, table.metadata_location)  # drop keeps the files
    purged = catalog.create_table((ns, "p"), SCHEMA)
    purged.append(ROWS)
    purged = catalog.load_table((ns, "p"))
    catalog.purge_table((ns, "p"))
    with pytest.raises(NoSuchTableError, match=f"Table does not exist: {ns}.p"):
        catalog.load_table((ns, "p"))
    assert not exists(purged, purged.metadata_location)
    with pytest.raises(NoSuchTableError):
        catalog.purge_table((ns, "p"))


def test_renaming_tables(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    catalog.create_namespace(f"{ns}_to")
    table = catalog.create_table((ns, "t"), SCHEMA)
    table.append(ROWS)
    renamed = catalog.rename_table(table.name(), (ns, "u"))
    assert renamed.name() == (ns, "u")
    assert renamed.metadata_location == catalog.load_table((ns, "u")).metadata_location
    moved = catalog.rename_table((ns, "u"), (f"{ns}_to", "t"))
    assert moved.name() == (f"{ns}_to", "t") and moved.scan().to_arrow().num_rows == 2
    for gone in ((ns, "t"), (ns, "u")):
        with pytest.raises(NoSuchTableError):
            catalog.load_table(gone)
    catalog.create_table((ns, "taken"), SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        catalog.rename_table((f"{ns}_to", "t"), (ns, "taken"))
    with pytest.raises(NoSuchTableError):
        catalog.rename_table((ns, "missing"), (ns, "other"))
    with pytest.raises(NoSuchNamespaceError):
        catalog.rename_table((f"{ns}_to", "t"), (f"{ns}_missing", "t"))
    assert catalog.load_table((f"{ns}_to", "t")).metadata_location == moved.metadata_location


def test_registering_a_metadata_file(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    table = catalog.create_table((ns, "source"), SCHEMA)
    table.append(ROWS)
    location = table.metadata_location
    catalog.drop_table((ns, "source"))  # its files stay: register them under a new name
    registered = catalog.register_table((ns, "registered"), location)
    assert registered.name() == (ns, "registered")
    assert registered.metadata_location == location
    assert catalog.load_table((ns, "registered")).scan().to_arrow().num_rows == 2
    with pytest.raises(TableAlreadyExistsError):
        catalog.register_table((ns, "registered"), location)
    with raises(catalog, NoSuchNamespaceError, RESTError, match="NoSuchNamespaceException"
                if isinstance(catalog, RestCatalog) else None):
        catalog.register_table((f"{ns}_missing", "t"), location)


# --- commits ----------------------------------------------------------------------------------


def test_commits_write_a_new_metadata_file(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    table = catalog.create_table((ns, "t"), SCHEMA)
    original, created_ms = table.metadata_location, table.metadata.last_updated_ms
    assert original.split("/")[-1].startswith("00000-")
    with table.transaction() as txn, txn.update_schema() as update:
        update.add_column("extra", IntegerType())
    assert table.metadata_location.split("/")[-1].startswith("00001-")
    assert table.schema().schema_id == 1 and table.schema().find_field("extra").field_id == 4
    assert [(e.metadata_file, e.timestamp_ms) for e in table.metadata.metadata_log] == [
        (original, created_ms)]
    assert catalog.load_table((ns, "t")).metadata == table.metadata


def test_a_stale_commit_fails(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    first = catalog.create_table((ns, "t"), SCHEMA)
    second = catalog.load_table((ns, "t"))
    with first.update_schema() as update:
        update.add_column("b", IntegerType())
    with pytest.raises(CommitFailedException,
                       match="current schema id has changed: expected 0, found 1"), \
            second.update_schema() as update:
        update.add_column("c", IntegerType())
    assert [f.name for f in catalog.load_table((ns, "t")).schema().fields][-1] == "b"


def test_appends_read_back(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    table = catalog.create_table((ns, "t"), SCHEMA)
    table.append(ROWS)
    table.append(ROWS)
    snapshot = table.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["total-records"] == "4"
    assert catalog.load_table((ns, "t")).scan().to_arrow().num_rows == 4


def test_metadata_files_kept_versions_name_stay_after_commit(catalog: Catalog,
                                                             ns: str) -> None:
    """pyiceberg deletes what a commit drops from the metadata-log when
    ``write.metadata.delete-after-commit.enabled`` is set; an Olympia commit drops no file a
    kept catalog version names (by default every recent one), whatever
    ``write.metadata.previous-versions-max`` says (docs/ICEBERG.md, Iceberg and Olympia
    retention)."""
    catalog.create_namespace(ns)
    table = catalog.create_table((ns, "t"), SCHEMA)
    original = table.metadata_location
    for i in range(3):
        with table.update_schema() as update:
            update.add_column(f"c{i}", IntegerType())
    with table.transaction() as txn:
        txn.set_properties({"write.metadata.previous-versions-max": "1",
                            "write.metadata.delete-after-commit.enabled": "true"})
    assert len(table.metadata.metadata_log) == 4
    assert table.metadata.metadata_log[0].metadata_file == original
    assert all(exists(table, entry.metadata_file) for entry in table.metadata.metadata_log)


def test_metadata_goes_where_the_table_property_says(catalog: Catalog, ns: str) -> None:
    catalog.create_namespace(ns)
    table = catalog.create_table((ns, "t"), SCHEMA)
    # (under the table's location: olympia serve refuses one elsewhere, docs/REST.md)
    path = f"{table.location()}/custom-metadata"
    table = table.transaction().set_properties({"write.metadata.path": path}) \
        .commit_transaction()
    table.append(ROWS)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert table.metadata_location.startswith(path)
    assert snapshot.manifests(table.io)[0].manifest_path.startswith(path)
