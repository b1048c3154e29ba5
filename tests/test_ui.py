"""The catalog UI as HTML: every page, version pinning, paging, errors, escaping, links under
the mount point, and ``olympia serve``'s tokens in front of it."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from fastapi import Depends, FastAPI, HTTPException

with warnings.catch_warnings():  # starlette's note about httpx, raised on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from olympia import versions
from olympia.catalog.catalog import Catalog
from olympia.catalog.objects import Column
from olympia.exceptions import NoSuchCatalogError
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.server import CatalogService, create_app
from olympia.server.auth import Tokens
from olympia.ui import create_ui
from olympia.ui.login import COOKIE

EVIL = "<script>alert('x')</script>"
ORDERS = [Column("id", "bigint", nullable=False),
          Column("lines", "list", element=Column("line", "struct", fields=(
              Column("sku", "string"), Column("qty", "int")))),
          Column("attrs", "map", key=Column("k", "string", nullable=False),
                 value=Column("v", "string"))]


def build(root: Path) -> Catalog:
    """Versions 1-5: namespace, table, view (annotated), rename + new column, a drop that is
    rolled back (6)."""
    catalog = Catalog.create(str(root / "catalog"))
    catalog.create_namespace("sales", {"owner": "sales-eng"}, comment="Sales data")
    catalog.create_table(("sales", "orders"), columns=ORDERS, comment=EVIL, protected=True,
                         format="delta", location="s3://lake/orders",
                         properties={"tier": "gold"})
    with catalog.transaction() as txn:
        txn.annotate(tool="olympia apply", user="ci-bot", git_commit="abc123",
                     dag_run="daily__2026-01-01")
        txn.create_view(("sales", "big_orders"), sql="SELECT * FROM sales.orders WHERE 1 < 2",
                        referenced_objects=[("sales", "orders")],
                        columns=[Column("id", "bigint")])
    with catalog.transaction() as txn:
        txn.rename_table(("sales", "orders"), "orders_v2")
        txn.alter_table(("sales", "orders_v2"), add_columns=[Column("note", "string")])
    catalog.drop_view(("sales", "big_orders"))
    versions.rollback(catalog, 4)
    return catalog


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    return build(tmp_path)


def client_of(catalog: Catalog, **kwargs: object) -> TestClient:
    return TestClient(create_ui(lambda request: catalog, **kwargs))  # type: ignore[arg-type]


def text_of(html: str) -> str:
    """The visible text, tags removed (entities kept)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_browse_from_namespaces_to_columns(catalog: Catalog) -> None:
    client = client_of(catalog)
    home = client.get("/")
    assert home.status_code == 200 and 'href="/namespace?name=sales"' in home.text
    ns = client.get("/namespace", params={"name": "sales"})
    assert "Sales data" in ns.text and "sales-eng" in ns.text
    assert 'href="/table?ns=sales&amp;name=orders_v2"' in ns.text
    page = client.get("/table", params={"ns": "sales", "name": "orders_v2"})
    text = text_of(page.text)
    assert "protected" in text and "s3://lake/orders" in text and "tier gold" in text
    # nested types readable: the full type text, and each nested part as its own row
    assert "list&lt;struct&lt;sku: varchar, qty: int4&gt;&gt;" in page.text
    for row in ("(element)", "sku", "qty", "(key)", "(value)", "note"):
        assert f">{row}</th>" in page.text


def test_a_view_shows_its_sql_and_links_what_it_references(catalog: Catalog) -> None:
    client = client_of(catalog)
    page = client.get("/view", params={"ns": "sales", "name": "big_orders", "version": 3})
    assert "SELECT * FROM sales.orders WHERE 1 &lt; 2" in page.text
    assert 'href="/table?ns=sales&amp;name=orders&amp;version=3"' in page.text
    renamed = client.get("/view", params={"ns": "sales", "name": "big_orders"})
    assert "sales.orders" in renamed.text and "not in this version" in renamed.text


def test_every_name_and_comment_is_escaped(tmp_path: Path) -> None:
    catalog = Catalog.create(str(tmp_path / "c"))
    catalog.create_namespace("n<b>", {"k<i>": EVIL}, comment=EVIL)
    catalog.create_table(("n<b>", "t"), columns=[Column("c", "int", comment=EVIL)],
                         comment=EVIL)
    catalog.create_view(("n<b>", "v"), sql=EVIL, comment=EVIL)
    client = client_of(catalog)
    for url, params in [("/", {}), ("/namespace", {"name": "n<b>"}),
                        ("/table", {"ns": "n<b>", "name": "t"}),
                        ("/view", {"ns": "n<b>", "name": "v"}), ("/history", {}),
                        ("/diff", {"from": 0, "to": 3})]:
        page = client.get(url, params=params)
        assert page.status_code == 200, url
        assert "<script>" not in page.text and "<b>" not in page.text and "<i>" not in page.text
    assert "&lt;script&gt;" in client.get("/table", params={"ns": "n<b>", "name": "t"}).text


def test_any_page_shows_the_catalog_as_it_was(catalog: Catalog) -> None:
    client = client_of(catalog)
    assert "orders_v2" not in client.get("/namespace?name=sales&version=3").text
    old = client.get("/table?ns=sales&name=orders&version=2")
    assert old.status_code == 200 and "version 2 of 6" in text_of(old.text)
    assert ">note</th>" not in old.text
    created = catalog.at_version(3).created_at_millis
    instant = versions.timetravel.format_millis(created)
    as_of = client.get("/namespace", params={"name": "sales", "as_of": instant})
    assert "big_orders" in as_of.text and "orders_v2" not in as_of.text
    # links keep the version shown
    assert 'href="/view?ns=sales&amp;name=big_orders&amp;version=3"' in as_of.text
    # a blank form field is no choice
    assert client.get("/?version=&as_of=").status_code == 200


def test_history_newest_first_with_annotations_timeline_and_diff_links(
        catalog: Catalog) -> None:
    page = client_of(catalog).get("/history")
    found = [int(v) for v in re.findall(r'<li id="v(\d+)"', page.text)]
    assert found == [6, 5, 4, 3, 2, 1, 0]
    text = text_of(page.text)
    for annotation in ("tool olympia apply", "user ci-bot", "git_commit abc123",
                       "dag_run daily__2026-01-01"):
        assert annotation in text
    assert "rollback of 5 to 4" in text
    assert '<svg id="timeline"' in page.text and 'class="bar"' in page.text
    assert 'class="mark rollback"' in page.text and 'class="kept"' in page.text
    assert 'href="/diff?to=4"' in page.text


def test_history_pages_with_before(catalog: Catalog) -> None:
    client = client_of(catalog)
    first = client.get("/history?limit=3")
    assert re.findall(r'<li id="v(\d+)"', first.text) == ["6", "5", "4"]
    assert 'href="/history?before=4&amp;limit=3"' in first.text
    second = client.get("/history?before=4&limit=3")
    assert re.findall(r'<li id="v(\d+)"', second.text) == ["3", "2", "1"]
    last = client.get("/history?before=1&limit=3")
    assert re.findall(r'<li id="v(\d+)"', last.text) == ["0"]
    assert "Older versions" not in last.text


def test_an_export_is_marked_on_the_timeline(catalog: Catalog, tmp_path: Path) -> None:
    versions.export(catalog, "q1", str(tmp_path / "q1"), "full", version=4)
    page = client_of(catalog).get("/history")
    assert 'class="mark export"' in page.text and "q1</a> (version 4)" in page.text
    assert "<title>version 4: exported as q1</title>" in page.text
    assert "<title>version 6: rollback of 5 to 4</title>" in page.text


def test_diff_down_to_columns_with_renames_as_renames(catalog: Catalog) -> None:
    page = client_of(catalog).get("/diff", params={"from": 2, "to": 4})
    text = text_of(page.text)
    assert "table sales.orders_v2 (renamed from sales.orders)" in text
    assert "+ column note: varchar" in text
    assert "+ view sales.big_orders" in text
    assert "dropped" not in text and "- table" not in text
    # the default: from the version before
    assert "Diff from version 3 to version 4" in text_of(
        client_of(catalog).get("/diff?to=4").text)


@pytest.mark.parametrize(("url", "status", "names"), [
    ("/table?ns=sales&name=nope", 404, "table sales.nope does not exist"),
    ("/view?ns=sales&name=orders_v2", 404, "view sales.orders_v2 does not exist"),
    ("/namespace?name=hr", 404, "namespace hr does not exist"),
    ("/?version=99", 404, "version 99 does not exist"),
    ("/diff?from=1&to=99", 404, "version 99 does not exist"),
    ("/?as_of=1999-01-01T00:00:00Z", 404, "no version was latest at 1999-01-01"),
    ("/?version=two", 400, "version must be a version number"),
    ("/?as_of=yesterday", 400, "yesterday"),
    ("/?limit=0", 400, "limit must be between 1 and 500"),
    ("/namespace?name=sales&after=x", 400, "after must be table:&lt;name&gt;"),
    ("/history?before=0", 400, "before must be a positive version number"),
    ("/diff?to=x", 400, "bad query: to"),
    ("/table?ns=sales", 400, "bad query: name"),
    # names the catalog's format cannot hold
    ("/namespace?name=%00", 400, "namespace name &#39;\\x00&#39; contains forbidden"),
    ("/table?ns=&name=x", 400, "namespace name must not be empty"),
    ("/table?ns=sales&name=%20", 400, "table name &#39; &#39; contains forbidden"),
    (f"/view?ns=sales&name={'v' * 300}", 400, "is 300 bytes; the catalog allows 100"),
    ("/no/such/page", 404, "no page /no/such/page"),
])
def test_errors_are_pages_naming_what_is_wrong(catalog: Catalog, url: str, status: int,
                                               names: str) -> None:
    page = client_of(catalog).get(url)
    assert page.status_code == status
    assert page.headers["content-type"].startswith("text/html")
    assert names in page.text and "Traceback" not in page.text


def assert_secured(answer: Any) -> None:
    """The answer carries the UI's security headers: no script, no foreign frame."""
    policy = answer.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'self'" in policy
    assert "script-src" not in policy and "'unsafe-inline'" not in policy.replace(
        "style-src-attr 'unsafe-inline'", "")
    assert answer.headers["x-frame-options"] == "SAMEORIGIN"
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_every_answer_carries_the_security_headers(catalog: Catalog) -> None:
    client = client_of(catalog)
    for url, status in (("/", 200), ("/history", 200), ("/table?ns=sales&name=orders_v2", 200),
                        ("/static/ui.css", 200), ("/namespace?name=%00", 400),
                        ("/namespace?name=hr", 404), ("/no/such/page", 404)):
        answer = client.get(url)
        assert answer.status_code == status, url
        assert_secured(answer)

    def broken(request: object) -> Catalog:
        raise RuntimeError("a bug")

    crashed = TestClient(create_ui(broken), raise_server_exceptions=False).get("/")
    assert crashed.status_code == 500 and "a bug" not in crashed.text
    assert_secured(crashed)


def test_namespace_contents_page_through_tables_then_views(tmp_path: Path) -> None:
    catalog = Catalog.create(str(tmp_path / "c"))
    catalog.create_namespace("n")
    with catalog.transaction() as txn:
        for i in range(5):
            txn.create_table(("n", f"t{i}"), columns=[Column("c", "int")])
        for i in range(3):
            txn.create_view(("n", f"v{i}"), sql="SELECT 1")
    client = client_of(catalog)
    seen, url = [], "/namespace?name=n&limit=3"
    while url:
        page = client.get(url)
        seen += re.findall(r'name=(\w+)">\1</a>', page.text)
        found = re.search(r'rel="next" href="([^"]+)"', page.text)
        url = found.group(1).replace("&amp;", "&") if found else ""
    assert seen == ["t0", "t1", "t2", "t3", "t4", "v0", "v1", "v2"]


def test_a_page_reads_its_own_definitions_not_the_catalogs(tmp_path: Path) -> None:
    uri = str(tmp_path / "c")
    catalog = Catalog.create(uri)
    with catalog.transaction() as txn:
        for n in range(120):
            txn.create_namespace(f"ns{n:03}")
        for t in range(300):
            txn.create_table(("ns000", f"t{t:03}"), columns=[Column("c", "int")])
    opened: list[Catalog] = []

    def fresh(request: object) -> Catalog:  # a cold cache for every request
        opened.append(Catalog.open(uri))
        return opened[-1]

    client = TestClient(create_ui(fresh))
    for url in ("/?limit=10", "/namespace?name=ns000&limit=10&after=table:t150"):
        page = client.get(url)
        assert page.status_code == 200 and page.text.count('scope="row"><a') == 10
        reads = opened[-1].storage.stats.reads
        # the page's 10 definitions, a few tree nodes and hints: not the 420 objects
        assert reads <= 30, (url, reads)
    for c in opened:
        c.close()


def test_links_stay_under_the_mount_point(catalog: Catalog) -> None:
    outer = FastAPI()
    outer.mount("/olympia/conn1", create_ui(lambda request: catalog))
    client = TestClient(outer)
    for url in ("/olympia/conn1/", "/olympia/conn1/namespace?name=sales",
                "/olympia/conn1/history", "/olympia/conn1/diff?to=4"):
        page = client.get(url)
        assert page.status_code == 200
        links = re.findall(r'(?:href|action)="([^"]*)"', page.text)
        assert links and all(link.startswith("/olympia/conn1/") or link == "#main"
                             for link in links), links
    assert client.get("/olympia/conn1/static/ui.css").status_code == 200


def test_dependencies_and_open_catalog_errors_become_pages(catalog: Catalog) -> None:
    def refuse() -> None:
        raise HTTPException(403, "no access to connection c1")

    assert client_of(catalog, dependencies=[Depends(refuse)]).get("/").status_code == 403

    def missing(request: object) -> Catalog:
        raise NoSuchCatalogError("no catalog at connection c2")

    page = TestClient(create_ui(missing)).get("/")
    assert page.status_code == 404 and "no catalog at connection c2" in page.text


def test_the_title_is_shown(catalog: Catalog) -> None:
    assert "<title>Namespaces · Lake &amp; co</title>" in client_of(
        catalog, title="Lake & co").get("/").text


@pytest.fixture
def service(tmp_path: Path) -> CatalogService:
    catalog = OlympiaCatalog.over(build(tmp_path))
    catalog.properties["warehouse"] = f"file://{tmp_path}/warehouse"
    return CatalogService(catalog, {})


def test_serve_without_tokens_shows_the_ui_as_it_serves_the_api(
        service: CatalogService) -> None:
    client = TestClient(create_app(service))
    home = client.get("/", follow_redirects=False)
    assert home.status_code == 307 and home.headers["location"] == "/ui/"
    page = client.get("/ui/namespace?name=sales")
    assert page.status_code == 200 and 'href="/ui/table?ns=sales&amp;name=orders_v2"' in page.text
    assert client.get("/ui/login").status_code == 404  # nothing to sign in to
    assert_secured(page)


def test_serve_with_tokens_needs_a_token_or_the_sign_in_cookie(
        service: CatalogService, tmp_path: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text("reader read-only reader-secret\n")
    client = TestClient(create_app(service, tokens=Tokens.load(token_file)))
    refused = client.get("/ui/history")
    assert refused.status_code == 401 and 'href="/ui/login"' in refused.text
    assert_secured(refused)
    assert_secured(client.get("/ui/login"))
    assert client.get("/ui/", headers={"Authorization": "Bearer reader-secret"}
                      ).status_code == 200
    assert client.get("/ui/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    wrong = client.post("/ui/login", data={"client_id": "reader", "secret": "nope"})
    assert wrong.status_code == 401 and "sign no one in" in wrong.text
    assert_secured(wrong)
    signed = client.post("/ui/login", data={"client_id": "reader", "secret": "reader-secret"},
                         follow_redirects=False)
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/"
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "reader-secret" not in cookie
    assert client.get("/ui/history").status_code == 200  # the cookie is sent back
    # a secret given as the bearer token is traded too, never stored in the cookie
    by_token = TestClient(create_app(service, tokens=Tokens.load(token_file))).post(
        "/ui/login", data={"token": "reader-secret"}, follow_redirects=False)
    assert by_token.status_code == 303 and "reader-secret" not in by_token.headers[
        "set-cookie"] and COOKIE in by_token.headers["set-cookie"]
    # the cookie opens the UI only, not the REST API
    assert client.get("/v1/config").status_code == 401


def test_a_big_version_lists_its_first_actions_and_counts_the_rest(tmp_path: Path) -> None:
    catalog = Catalog.create(str(tmp_path / "c"))
    with catalog.transaction() as txn:
        for n in range(30):
            txn.create_namespace(f"n{n:02}")
    page = client_of(catalog).get("/history")
    assert page.text.count("<li>create namespace n") == 25
    assert "and 5 more actions" in page.text


def test_the_history_as_it_was_at_a_version(catalog: Catalog) -> None:
    page = client_of(catalog).get("/history?version=3")
    assert re.findall(r'<li id="v(\d+)"', page.text) == ["3", "2", "1", "0"]
