"""Catalog versions by name: a client configured with ``warehouse=<warehouse>@<version>``
(``@<ISO-8601 instant>``, ``@export:<name>``) reads every table as it was in that Olympia
version, consistently across tables, and can write nothing there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import BadRequestError, ForbiddenError
from restserver import RestServer, assert_error, duckdb_connection, request, version

from olympia.catalog.catalog import Catalog as OlympiaStore
from olympia.versions.export import export
from olympia.versions.history import history as versions
from olympia.versions.timetravel import format_millis

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RestServer, int, str]]:
    """A server whose tables ``ns.a`` and ``ns.b`` hold 3 rows each at the returned
    version; at the latest, ``ns.a`` holds 6, ``ns.b`` is dropped and ``ns.c`` created. The
    export ``before`` names that version, and the instant returned is when it landed."""
    root = tmp_path_factory.mktemp("rest")
    with RestServer.on_new_catalog(root) as server:
        client = server.client()
        client.create_namespace("ns")
        for name in ("a", "b"):
            client.create_table(("ns", name), ROWS.schema).append(ROWS)
        pinned = version(server)
        store = OlympiaStore.open(server.catalog_uri)
        try:
            (latest,) = versions(store, limit=1)
            instant = format_millis(latest.created_at_millis)  # when version pinned landed
            client.load_table(("ns", "a")).append(ROWS)
            client.drop_table(("ns", "b"))
            client.create_table(("ns", "c"), ROWS.schema)
            export(store, "before", str(root / "export"), "minimal", version=pinned)
        finally:
            store.close()
        yield server, pinned, instant


def rows(catalog: RestCatalog, name: str) -> int:
    return catalog.load_table(("ns", name)).scan().to_arrow().num_rows


@pytest.mark.parametrize("selector", ["version", "instant", "export:before"])
def test_a_version_prefix_reads_every_table_at_that_version(
        history: tuple[RestServer, int, str], selector: str) -> None:
    server, pinned, instant = history
    chosen = {"version": str(pinned), "instant": instant}.get(selector, selector)
    old = server.client(warehouse=f"{server.warehouse}@{chosen}")
    assert old.properties["prefix"] == f"version-{pinned}"
    assert sorted(old.list_tables("ns")) == [("ns", "a"), ("ns", "b")]
    assert (rows(old, "a"), rows(old, "b")) == (3, 3)
    latest = server.client()
    assert sorted(latest.list_tables("ns")) == [("ns", "a"), ("ns", "c")]
    assert rows(latest, "a") == 6


def test_nothing_is_written_at_a_version(history: tuple[RestServer, int, str]) -> None:
    server, pinned, _ = history
    old = server.client(warehouse=f"{server.warehouse}@{pinned}")
    before = version(server)
    with pytest.raises(ForbiddenError, match=f"catalog version {pinned} is read-only"):
        old.create_namespace("other")
    with pytest.raises(ForbiddenError, match=f"catalog version {pinned} is read-only"):
        old.load_table(("ns", "a")).append(ROWS)
    with pytest.raises(ForbiddenError, match="read-only"):
        old.drop_table(("ns", "b"))
    assert_error(request(server, "POST", f"/v1/version-{pinned}/transactions/commit",
                         '{"table-changes": []}'), 403, "ForbiddenException", "read-only")
    assert version(server) == before


def test_versions_that_do_not_exist(history: tuple[RestServer, int, str]) -> None:
    server, _, _ = history
    for selector in ("999999", "export:never", "not-a-time"):
        with pytest.raises(BadRequestError):
            server.client(warehouse=f"{server.warehouse}@{selector}")
    assert_error(request(server, "GET", "/v1/version-999999/namespaces"), 400,
                 "BadRequestException", "999999")
    assert_error(request(server, "GET", "/v1/version-latest/namespaces"), 400,
                 "BadRequestException", "versions are numbers")


def test_duckdb_reads_at_a_version(history: tuple[RestServer, int, str]) -> None:
    server, pinned, _ = history
    con = duckdb_connection()
    try:
        con.execute(f"ATTACH '{server.warehouse}@{pinned}' AS old (TYPE iceberg, "
                    f"ENDPOINT '{server.url}', AUTHORIZATION_TYPE 'none')")
        assert con.execute("SELECT count(*) FROM old.ns.a").fetchall() == [(3,)]
        assert con.execute("SELECT count(*) FROM old.ns.b").fetchall() == [(3,)]
    finally:
        con.close()


def config(server: RestServer, warehouse: str) -> tuple[int, dict[str, str], Any]:
    return request(server, "GET", f"/v1/config?warehouse={quote(warehouse, safe='')}")


def test_every_spelling_of_the_warehouse_names_it(history: tuple[RestServer, int, str]) -> None:
    """``/w``, ``file:/w`` and ``file:///w``, each with or without a trailing ``/``, name the
    server's warehouse ``file:///w``: the latest catalog, and with ``@<selector>`` a version."""
    server, pinned, instant = history
    path = urlsplit(server.warehouse).path
    spellings = [f"{scheme}{path}{end}" for scheme in ("", "file:", "file://", "FILE://")
                 for end in ("", "/")]
    for spelling in spellings:
        status, _, body = config(server, spelling)
        assert status == 200 and body["overrides"] == {}, spelling
        for selector in (str(pinned), instant, "export:before"):
            status, _, body = config(server, f"{spelling}@{selector}")
            assert status == 200, (spelling, selector, body)
            assert body["overrides"] == {"prefix": f"version-{pinned}"}, (spelling, selector)
    old = server.client(warehouse=f"{path}/@{pinned}")  # a real client, a plain path
    assert sorted(old.list_tables("ns")) == [("ns", "a"), ("ns", "b")]
    assert rows(old, "b") == 3


def test_another_warehouse_is_refused_naming_the_served_one(
        history: tuple[RestServer, int, str]) -> None:
    server, pinned, _ = history
    path = urlsplit(server.warehouse).path
    parent = str(Path(path).parent)
    refused = {
        f"{parent}/other": "", path + "x": "", parent: "", f"{path}/sub": "",
        f"file://host{path}": "names a host", f"s3://bucket{path}": "",
        f"{path}/../{Path(path).name}": "a '..' step", f"{path}/.": "a '.' step",
        "warehouse": "relative path", Path(path).name + "/": "relative path",
        f"file:{path}?x=1": "a query",
    }
    for warehouse, why in refused.items():
        for asked in (warehouse, f"{warehouse}@{pinned}"):
            answer = config(server, asked)
            assert_error(answer, 400, "BadRequestException",
                         f"this server serves one warehouse, {server.warehouse} (spelt "
                         "file:///<path>, file:/<path> or /<path>, with or without a "
                         "trailing /)")
            assert why in answer[2]["error"]["message"], asked
        with pytest.raises(BadRequestError, match="is not served here"):
            server.client(warehouse=warehouse)
