"""What a create and a list cost as a catalog grows (issue 46): counted, never timed.

A create checks its location against every live table and every table of a kept version,
without decoding every definition: the live tables are moved from the tree checked before
to the tree the create builds on by the difference of the two trees. A listing reads the
tree's keys and decodes a definition only the first time its path is seen. Both are shown
by counting definitions decoded (``Table.from_proto``) and storage reads in catalogs of N
and 4N tables; the moved live tables are checked against ones built afresh, in any order
of trees (hypothesis).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from iceberg_helpers import SCHEMA
from pyiceberg.exceptions import NoSuchNamespaceError

from olympia import Catalog
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.objects import Table as TableDef
from olympia.catalog.reader import Snapshot
from olympia.exceptions import LocationInUseError
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.live import LiveTables
from olympia.server import CatalogService
from olympia.server.paging import Page

T = TypeVar("T")
ORDER = 4  # a small B-tree order: a few dozen tables make a tree of several levels
N = 40


class Decodes:
    """Counts the table definitions decoded (``Table.from_proto``) while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        decode = TableDef.from_proto.__func__  # type: ignore[attr-defined]

        def counting(cls: type[TableDef], *args: Any) -> TableDef:
            self.count += 1
            return decode(cls, *args)  # type: ignore[no-any-return]

        monkeypatch.setattr(TableDef, "from_proto", classmethod(counting))

    def of(self, catalog: OlympiaCatalog, fn: Callable[[], T]) -> tuple[int, int, T]:
        """(definitions decoded, storage reads, result) of ``fn()``."""
        stats = catalog.olympia.storage.stats
        self.count, reads = 0, stats.reads
        result = fn()
        return self.count, stats.reads - reads, result


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> Decodes:
    return Decodes(monkeypatch)


def grown(tmp_path: Path, tables: int) -> OlympiaCatalog:
    """A catalog of ``tables`` Iceberg tables ``ns.t0000``..., made in one version."""
    uri = str(tmp_path / f"catalog-{tables}")
    Catalog.create(uri, order=ORDER,
                   properties={"warehouse": f"file://{tmp_path}/wh-{tables}"}).close()
    catalog = OlympiaCatalog("scale", uri=uri)
    catalog.create_namespace("ns")
    with catalog.transaction() as tx:
        for i in range(tables):
            tx.create_table(("ns", f"t{i:04d}"), SCHEMA)
    return catalog


def parquet_tables(catalog: OlympiaCatalog, tmp_path: Path, count: int) -> None:
    """``count`` Parquet tables ``ns.p0000``... (not Iceberg: not listed), in one version."""
    with catalog.olympia.transaction() as txn:
        for i in range(count):
            txn.create_table("ns", f"p{i:04d}", format="parquet",
                             location=f"file://{tmp_path}/parquet-{id(catalog)}/p{i}")


def test_create_decodes_and_reads_do_not_grow_with_the_catalog(tmp_path: Path,
                                                                decodes: Decodes) -> None:
    costs = []
    for size in (N, 4 * N):
        catalog = grown(tmp_path, size)
        catalog.create_table(("ns", "first"), SCHEMA)  # reads the live tables once
        depth = catalog.olympia.snapshot.depth()
        decoded, reads, _ = decodes.of(catalog, lambda c=catalog: c.create_table(
            ("ns", "next"), SCHEMA))
        costs.append((decoded, reads, depth))
        catalog.close()
    (small_decodes, small_reads, small_depth), (big_decodes, big_reads, big_depth) = costs
    assert big_depth > small_depth  # the catalog did grow a level
    # the tables changed since the last check (the create before, and this one), decoded
    # by the live and the kept tables, whatever the catalog's size
    assert small_decodes == big_decodes <= 4
    assert big_reads <= small_reads + (big_depth - small_depth) * 2


def test_creates_in_one_transaction_decode_only_their_own_tables(tmp_path: Path,
                                                                 decodes: Decodes) -> None:
    catalog = grown(tmp_path, N)
    catalog.create_table(("ns", "first"), SCHEMA)

    def creates() -> None:
        with catalog.transaction() as tx:
            for i in range(10):
                tx.create_table(("ns", f"new{i}"), SCHEMA)

    decoded, _, _ = decodes.of(catalog, creates)
    assert decoded <= 2 * 10 + 4  # each staged table once for the live tables, the kept


def test_list_reads_keys_and_decodes_each_definition_once(tmp_path: Path,
                                                          decodes: Decodes) -> None:
    costs = []
    for size in (N, 4 * N):
        catalog = grown(tmp_path, size)
        parquet_tables(catalog, tmp_path, size // 4)
        first, _, _ = decodes.of(catalog, lambda c=catalog: c.list_tables("ns"))
        assert first == size + size // 4  # each definition once, then never again
        decoded, reads, listed = decodes.of(catalog, lambda c=catalog: c.list_tables("ns"))
        assert listed == [("ns", f"t{i:04d}") for i in range(size)]
        costs.append((decoded, reads))
        catalog.close()
    (small_decodes, small_reads), (big_decodes, big_reads) = costs
    assert small_decodes == big_decodes == 0
    assert small_reads == big_reads  # the root and the nodes are known: no read grows


def test_a_page_reads_what_it_shows(tmp_path: Path, decodes: Decodes) -> None:
    """A page of 10 through the REST service, in a process that has read nothing yet:
    the same definitions decoded at N and 4N tables, and the nodes of one more tree level
    read (a scan reads the children of a node it enters together)."""
    costs = []
    for size in (N, 4 * N):
        uri = grown(tmp_path, size).olympia.uri
        fresh = OlympiaCatalog("fresh", uri=uri)  # cold caches
        service = CatalogService(fresh, {})
        decoded, reads, answer = decodes.of(fresh, lambda s=service: json.loads(s.list_tables(
            "ns", Page(None, 10))))
        assert [i["name"] for i in answer["identifiers"]] == [f"t{i:04d}" for i in range(10)]
        assert answer["next-page-token"]
        costs.append((decoded, reads, fresh.olympia.snapshot.depth()))
        warm, _, again = decodes.of(fresh, lambda s=service: json.loads(s.list_tables(
            "ns", Page(None, 10))))
        assert again == answer and warm == 0  # a warm page decodes nothing
        token = answer["next-page-token"]
        decoded, _, after = decodes.of(fresh, lambda s=service, t=token: json.loads(
            s.list_tables("ns", Page(t, 10))))
        assert [i["name"] for i in after["identifiers"]] == [f"t{i:04d}" for i in range(10, 20)]
        assert decoded == 10  # t0010 was the first page's one more: 9 of this page, one more
        fresh.close()
    (small_decodes, small_reads, small_depth), (big_decodes, big_reads, big_depth) = costs
    assert small_decodes == big_decodes <= 11  # the page and the one that says "more"
    # the latest root (3 reads), nodes (at most ORDER a level), the definitions decoded
    assert small_reads <= 3 + small_depth * ORDER + 11
    assert big_reads <= small_reads + (big_depth - small_depth) * ORDER


def test_pages_through_the_service_cover_the_iceberg_tables_once(tmp_path: Path) -> None:
    catalog = grown(tmp_path, N)
    parquet_tables(catalog, tmp_path, N)
    catalog.olympia.create_table("ns", "s-declared", format="iceberg")  # no metadata yet
    catalog.create_table(("ns", "a-first"), SCHEMA)
    catalog.create_table(("ns", "zz-last"), SCHEMA)
    service = CatalogService(catalog, {})
    expected = sorted(["a-first", "zz-last", *(f"t{i:04d}" for i in range(N))])
    for size in (1, 3, 7, N + 2, 100):
        shown: list[str] = []
        token = None
        while True:
            answer = json.loads(service.list_tables("ns", Page(token, size)))
            names = [i["name"] for i in answer["identifiers"]]
            assert len(names) <= size
            shown.extend(names)
            token = answer["next-page-token"]
            if token is None:
                break
        assert shown == expected
    every = json.loads(service.list_tables("ns", Page(None, None)))
    assert [i["name"] for i in every["identifiers"]] == expected


@settings(max_examples=40, deadline=None, derandomize=True)
@given(after=st.one_of(st.none(), st.text(max_size=8),
                       st.sampled_from(["t0003", "t0003 ", "t000", "t", "zz", "a-first", ""])),
       limit=st.one_of(st.none(), st.integers(1, 12)))
def test_a_listing_after_any_name_is_the_names_above_it(names: OlympiaCatalog, after: Any,
                                                        limit: Any) -> None:
    every = [name for _, name in names.list_tables("ns")]
    assert every == sorted([*(f"t{i:04d}" for i in range(12)), *ICEBERG_NAMES])
    expected = [n for n in every if after is None or n > after]
    assert names.iceberg_tables("ns", after, limit) == expected[:limit]
    txn = names.olympia.transaction()  # a transaction's reads too
    try:
        assert names.bound_to(txn).iceberg_tables("ns", after, limit) == expected[:limit]
    finally:
        txn.abort()


ICEBERG_NAMES = ["a-first", "é", "t0003x", "日本", "zz", "z" * 100]


@pytest.fixture(scope="module")
def names(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OlympiaCatalog]:
    """Iceberg tables of names of every kind, one as long as a catalog allows (100 bytes:
    a key with no padding), and Parquet tables (not listed)."""
    path = tmp_path_factory.mktemp("names")
    catalog = grown(path, 12)
    for name in ICEBERG_NAMES:
        catalog.create_table(("ns", name), SCHEMA)
    parquet_tables(catalog, path, 5)
    yield catalog
    catalog.close()


NAMES = ["a", "a-b", "ab", "b", "é", "日本", "t0003", "t0003x", "zz"]


@pytest.fixture(scope="module")
def kinds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OlympiaCatalog]:
    """Namespaces and views of names of every kind (for the pages of other listings)."""
    path = tmp_path_factory.mktemp("kinds")
    catalog = grown(path, 0)
    with catalog.olympia.transaction() as txn:
        for name in NAMES:
            txn.create_namespace(f"n{name}")
            txn.create_view("ns", name, sql="SELECT 1 AS one")
            txn.create_view(f"n{name}", "v", sql="SELECT 1 AS one")
    yield catalog
    catalog.close()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(after=st.one_of(st.none(), st.text(max_size=6), st.sampled_from([*NAMES, "", "t0003 "])),
       limit=st.one_of(st.none(), st.integers(1, 10)),
       prefix=st.sampled_from(["", "a", "t0003", "日", "zzz"]))
def test_a_page_of_any_listing_is_the_names_after_its_cursor(kinds: OlympiaCatalog,
                                                             after: Any, limit: Any,
                                                             prefix: str) -> None:
    """The one paging of the read API (CatalogReader.names_page) over a version's tree and
    over a transaction's view, for namespaces and views: the names above the cursor, the
    next cursor the page's last name when more follow."""
    snapshot = kinds.olympia.snapshot
    txn = kinds.olympia.transaction()
    try:
        namespaces = sorted(["ns", *(f"n{n}" for n in NAMES)])
        for kind, ns, every in ((ObjectType.NAMESPACE, None, namespaces),
                                (ObjectType.VIEW, "ns", sorted(NAMES))):
            above = [n for n in every if after is None or n > after]
            for reader in (snapshot, txn):
                page = reader.names_page(kind, ns, after, limit)
                shown = above if limit is None else above[:limit]
                assert page.names == shown
                assert page.next_after == (shown[-1] if len(above) > len(shown) else None)
                assert [n for n, _ in reader.names(kind, ns, after, prefix)] == [
                    n for n in above if n.startswith(prefix)]
        pages = (kinds.namespaces_page(after, limit), kinds.views_page("ns", after, limit))
        assert [p.names for p in pages] == [
            snapshot.names_page(ObjectType.NAMESPACE, None, after, limit).names,
            snapshot.names_page(ObjectType.VIEW, "ns", after, limit).names]
    finally:
        txn.abort()


def test_the_views_of_every_namespace_after_a_cursor(kinds: OlympiaCatalog) -> None:
    """The catalog-wide listing (the UI's "used by" pages) in namespace then name order."""
    every = sorted([("ns", n) for n in NAMES] + [(f"n{n}", "v") for n in NAMES])
    txn = kinds.olympia.transaction()
    try:
        for cursor in [None, *every[::3], every[-1]]:
            ref = None if cursor is None else ObjectRef(ObjectType.VIEW, *cursor)
            expected = [e for e in every if cursor is None or e > cursor]
            for reader in (kinds.olympia.snapshot, txn):
                assert [(r.namespace, r.name) for r, _ in
                        reader.refs_after(ObjectType.VIEW, ref)] == expected
    finally:
        txn.abort()


def test_pages_of_views_read_keys_only(tmp_path: Path) -> None:
    """A page of 10 views (and of namespaces), in a process that has read nothing yet: no
    definition read, and only the nodes of one more tree level read at 4N views than at N."""
    costs = []
    for size in (N, 4 * N):
        (tmp_path / f"views{size}").mkdir()
        catalog = grown(tmp_path / f"views{size}", 0)
        with catalog.olympia.transaction() as txn:
            for i in range(size):
                txn.create_view("ns", f"v{i:04d}", sql="SELECT 1 AS one")
        uri = catalog.olympia.uri
        catalog.close()
        fresh = OlympiaCatalog("fresh", uri=uri)
        fresh.olympia.refresh()
        stats = fresh.olympia.storage.stats
        reads = stats.reads
        page = fresh.views_page("ns", "v0004", 10)
        assert page.names == [f"v{i:04d}" for i in range(5, 15)]
        assert page.next_after == "v0014"
        costs.append((stats.reads - reads, fresh.olympia.snapshot.depth()))
        assert fresh.namespaces_page(None, 1).names == ["ns"]
        fresh.close()
    (small_reads, small_depth), (big_reads, big_depth) = costs
    assert big_depth > small_depth
    # the latest root (3 reads), the namespace's key, the nodes of the range (at most
    # ORDER a level), and no definition
    assert small_reads <= 3 + 2 * small_depth * ORDER
    assert big_reads <= small_reads + (big_depth - small_depth) * ORDER


def test_a_transaction_lists_its_staged_tables(tmp_path: Path) -> None:
    catalog = grown(tmp_path, 3)
    before = [("ns", f"t000{i}") for i in range(3)]
    assert catalog.list_tables("ns") == before  # (the flags of their paths are kept)
    with catalog.transaction() as tx:
        tx.create_table(("ns", "staged"), SCHEMA)
        tx.drop_table(("ns", "t0001"))
        assert tx.list_tables("ns") == [("ns", "staged"), ("ns", "t0000"), ("ns", "t0002")]
        assert tx.iceberg_tables("ns", "staged", 1) == ["t0000"]
        assert catalog.list_tables("ns") == before
    assert catalog.list_tables("ns") == [("ns", "staged"), ("ns", "t0000"), ("ns", "t0002")]


def test_listing_a_missing_namespace_is_refused(tmp_path: Path) -> None:
    catalog = grown(tmp_path, 1)
    with pytest.raises(NoSuchNamespaceError, match="nope"):
        catalog.list_tables("nope")
    with pytest.raises(NoSuchNamespaceError, match="nope"):
        CatalogService(catalog, {}).list_tables("nope", Page(None, 2))


# --- the live tables, moved from tree to tree, are the tables of that tree ----------------


def _places(tmp_path: Path) -> list[str]:
    root = f"file://{tmp_path}/loc"
    return [f"{root}/a", f"{root}/a/b", f"{root}/a/b/c", f"{root}/b", f"{root}/b/a",
            f"{root}/c"]


def _holders(index: Any, places: list[str]) -> list[list[tuple[tuple[str, str], str]]]:
    return [sorted((t.key, t.location) for t in index.holders(p, "probe")) for p in places]


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["create", "drop", "rename", "check"]),
                                st.integers(0, 4), st.integers(0, 5), st.integers(0, 30)),
                      min_size=1, max_size=14))
def test_moved_live_tables_equal_tables_read_afresh(tmp_path_factory: Any,
                                                    steps: list[tuple[str, int, int, int]],
                                                    ) -> None:
    """Tables created, dropped and renamed with a plain Olympia catalog (locations that
    may nest; nothing checks them there), and the shared live tables moved to random
    versions, older or newer: at each, what holds each place is what a fresh read says."""
    path = tmp_path_factory.mktemp("moves")
    uri = str(path / "catalog")
    store = Catalog.create(uri, order=ORDER)
    store.create_namespace("ns")
    places = _places(path)
    cache, fresh_versions = LiveTables(), []
    for kind, table, where, version in steps:
        name = f"t{table}"
        exists = store.table_exists("ns", name)
        if kind == "create" and not exists:
            store.create_table("ns", name, format="parquet", location=places[where])
        elif kind == "drop" and exists:
            store.drop_table("ns", name)
        elif kind == "rename" and exists and not store.table_exists("ns", f"r{table}"):
            store.rename_table(("ns", name), f"r{table}")
        fresh_versions.append(store.refresh())
        target = fresh_versions[version % len(fresh_versions)]
        tree = store.at_version(target)
        with cache.lock:
            moved = _holders(cache.at(tree), places)
        assert moved == _holders(LiveTables().at(tree), places), f"at version {target}"
    store.close()


def test_a_transaction_checks_against_its_own_base_and_staged_tables(tmp_path: Path) -> None:
    """The shared live tables move back to an older transaction's base, and its staged
    tables (a rename) stand in for the base's."""
    catalog = grown(tmp_path, 3)
    root = f"file://{tmp_path}/places"
    catalog.create_table(("ns", "old"), SCHEMA, location=f"{root}/old")
    with catalog.transaction() as tx:  # begins before "new" exists
        catalog.create_table(("ns", "new"), SCHEMA, location=f"{root}/new")  # moves ahead
        with pytest.raises(LocationInUseError, match="live table ns.old"):
            tx.create_table(("ns", "in-old"), SCHEMA, location=f"{root}/old/x")
        # not live at the transaction's base; a table of the latest (kept) version
        with pytest.raises(LocationInUseError, match=r"table ns.new at kept catalog versi"):
            tx.create_table(("ns", "in-new"), SCHEMA, location=f"{root}/new/x")
        tx.rename_table(("ns", "old"), ("ns", "renamed"))
        with pytest.raises(LocationInUseError, match="live table ns.renamed"):
            tx.create_table(("ns", "in-old"), SCHEMA, location=f"{root}/old/y")
        tx.create_table(("ns", "free"), SCHEMA, location=f"{root}/free")
    assert catalog.table_exists(("ns", "renamed")) and catalog.table_exists(("ns", "free"))


def test_a_failed_move_forgets_the_live_tables(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A read failing while the live tables move leaves none half-moved: the next check
    reads them afresh."""
    catalog = grown(tmp_path, 5)
    catalog.create_table(("ns", "first"), SCHEMA)
    catalog.create_table(("ns", "second"), SCHEMA)
    store = catalog.olympia
    cache = catalog._live_tables
    with cache.lock:
        cache.at(store.at_version(store.version - 2))  # before "first" and "second"
    failing = {"on": True}
    load = Snapshot.load_table

    def flaky(self: Snapshot, *args: Any) -> TableDef:
        if failing["on"]:
            raise OSError("injected")
        return load(self, *args)

    monkeypatch.setattr(Snapshot, "load_table", flaky)
    with pytest.raises(OSError, match="injected"), cache.lock:
        cache.at(store.at_version(store.version))
    failing["on"] = False
    tree = store.at_version(store.version)
    places = [f"file://{tmp_path}/wh-5/ns/{t}" for t in ("first", "second", "t0001")]
    with cache.lock:
        moved = _holders(cache.at(tree), places)
    assert moved == _holders(LiveTables().at(tree), places)
    assert all(moved)  # every one is there

