"""The catalog UI as HTML: every page, version pinning, paging, errors, escaping, links under
the mount point, and ``olympia serve``'s tokens in front of it."""

from __future__ import annotations

import re
import warnings
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import pytest
from fastapi import Depends, FastAPI, HTTPException
from hypothesis import given, settings
from hypothesis import strategies as st
from test_rest_limits import Clock

with warnings.catch_warnings():  # starlette's note about httpx, raised on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from olympia import versions
from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.catalog.objects import Column
from olympia.exceptions import NoSuchCatalogError
from olympia.iceberg.catalog import OlympiaCatalog
from olympia.server import CatalogService, create_app
from olympia.server.auth import Throttle, Tokens
from olympia.ui import create_ui, pages
from olympia.ui.app import Place
from olympia.ui.login import COOKIE, local_target

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


def pages_from(client: TestClient, url: str) -> list[Any]:
    """Each page from ``url`` on, following the rel="next" links to the last."""
    pages = []
    while url:
        pages.append(client.get(url))
        found = re.search(r'rel="next" href="([^"]+)"', pages[-1].text)
        url = found.group(1).replace("&amp;", "&") if found else ""
    return pages


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
                        ("/diff", {"from": 0, "to": 3}), ("/find", {"q": "<"}),
                        ("/namespace", {"name": "n<b>", "q": "<"}),
                        ("/history", {"object": "namespace", "ns": "n<b>", "user": "<i>"}),
                        ("/diff", {"from": 0, "to": 3, "ns": "n<b>"}),
                        ("/used-by", {"ns": "n<b>", "name": "<i>"})]:
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
    # both on the same day: each dot on a row of its own, drawn after every line
    dots = re.findall(r'<g class="mark (\w+)"><circle cx="([\d.]+)" cy="(\d+)" r="(\d+)"',
                      page.text)
    assert [d[0] for d in dots] == ["export", "rollback"]
    assert page.text.rindex("<line") < page.text.index("<circle")
    (_, x1, y1, r), (_, x2, y2, _) = dots
    assert x1 == x2 and abs(int(y1) - int(y2)) >= 2 * int(r) + 2  # no overlap
    # one colour per kind, the same in the legend, the marks and the version's tag
    css = (Path(create_ui.__code__.co_filename).parent / "static" / "ui.css").read_text()
    for kind in ("rollback", "export"):
        colours = set(re.findall(rf"\.{kind}[^{{]*\{{[^}}]*?(?:fill|stroke|color|background):"
                                 r"\s*([^;]+);", css))
        assert colours == {f"var(--{kind})"}, (kind, colours)


def test_export_shows_the_version_an_export_recorded_or_is_refused(
        catalog: Catalog, tmp_path: Path) -> None:
    versions.export(catalog, "q1", str(tmp_path / "q1"), "full", version=4)
    client = client_of(catalog)
    page = client.get("/namespace?name=sales&export=q1")
    assert page.status_code == 200 and "export q1: version 4 of 7" in text_of(page.text)
    assert 'href="/table?ns=sales&amp;name=orders_v2&amp;version=4"' in page.text
    assert 'href="/?export=q1"' in client.get("/history").text
    for url, status, names in [
            ("/?export=q9", 404, "unknown export &#39;q9&#39; (exports: q1)"),
            ("/?export=q1&version=3", 400, "give only one of version, as_of and export"),
            ("/diff?to=3&version=2", 400, "/diff shows the latest catalog"),
            ("/transactions?export=q1", 400, "/transactions shows the latest catalog")]:
        refused = client.get(url)
        assert refused.status_code == status and names in refused.text, (url, refused.text)


def test_a_missing_object_links_the_last_version_that_had_it(catalog: Catalog) -> None:
    client = client_of(catalog)
    renamed = client.get("/table?ns=sales&name=orders")
    assert renamed.status_code == 404
    text = text_of(renamed.text)
    assert "table sales.orders does not exist" in text
    assert "It was last in version 3 (" in text and "version 4 dropped or renamed it" in text
    assert 'href="/table?ns=sales&amp;name=orders&amp;version=3"' in renamed.text
    assert 'href="/diff?from=3&amp;to=4"' in renamed.text
    # as it was at version 5: the view dropped by version 5 (then restored by a rollback)
    dropped = client.get("/view?ns=sales&name=big_orders&version=5")
    assert dropped.status_code == 404 and "version 5 dropped or renamed it" in text_of(
        dropped.text)
    assert 'href="/view?ns=sales&amp;name=big_orders&amp;version=4"' in dropped.text
    never = client.get("/namespace?name=hr")
    assert never.status_code == 404
    assert "None of the kept versions before this one (up to 50) has it" in text_of(never.text)
    # the look-back is bounded (versions 6, 5, ...): a drop older than its reach is not found
    orders = ObjectRef(ObjectType.TABLE, "sales", "orders")
    assert pages.last_version_with(catalog, 6, orders, limit=2) is None
    found = pages.last_version_with(catalog, 6, orders, limit=3)
    assert found is not None and found.version == 3


def test_error_pages_keep_the_navigation(catalog: Catalog) -> None:
    for url in ("/no/such/page", "/table?ns=sales&name=nope", "/?version=two"):
        page = client_of(catalog).get(url)
        for link in ('href="/"', 'href="/history"', 'href="/transactions"'):
            assert link in page.text, (url, link)


def test_the_catalog_shown_is_named_with_a_link_to_the_others(catalog: Catalog) -> None:
    outer = FastAPI()
    outer.mount("/olympia/ui/conn1", create_ui(
        lambda request: catalog, place=lambda request: Place("conn<1>", "/olympia/ui/")))
    client = TestClient(outer)
    for url in ("/olympia/ui/conn1/", "/olympia/ui/conn1/history", "/olympia/ui/conn1/nope"):
        page = client.get(url)
        assert "Connection conn&lt;1&gt; · All connections" in text_of(page.text)
        assert '<a href="/olympia/ui/">All connections</a>' in page.text


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
    seen = [name for page in pages_from(client, "/namespace?name=n&limit=3")
            for name in re.findall(r'name=(\w+)">\1</a>', page.text)]
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
        # the page's 10 definitions, a few tree nodes and hints, the roots its last change
        # reads (here two: the version that made it, the oldest): not the 420 objects
        assert reads <= 34, (url, reads)
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
        assert links and all(link.startswith(("/olympia/conn1/", "#main", "#v"))
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


def form_token(page: Any) -> str:
    """The anti-forgery token of the form on ``page``."""
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text
    return found.group(1)


def sign_in(client: TestClient, next: str = "", **fields: str) -> Any:
    """Post the sign-in form as a browser does: from the page that shows it."""
    token = form_token(client.get("/ui/login", params={"next": next} if next else {}))
    return client.post("/ui/login", data={"csrf": token, "next": next, **fields},
                       follow_redirects=False)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text("reader read-only reader-secret\n")
    return path


def test_serve_with_tokens_needs_a_token_or_the_sign_in_cookie(
        service: CatalogService, token_file: Path) -> None:
    client = TestClient(create_app(service, tokens=Tokens.load(token_file)))
    refused = client.get("/ui/history")
    assert refused.status_code == 401 and 'href="/ui/login?next=/ui/history"' in refused.text
    assert "Back to the catalog" not in refused.text  # it would answer 401 too
    assert_secured(refused)
    assert_secured(client.get("/ui/login"))
    assert client.get("/ui/", headers={"Authorization": "Bearer reader-secret"}
                      ).status_code == 200
    assert client.get("/ui/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    wrong = sign_in(client, client_id="reader", secret="nope")
    assert wrong.status_code == 401 and "sign no one in" in wrong.text
    assert_secured(wrong)
    signed = sign_in(client, client_id="reader", secret="reader-secret")
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/"
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "reader-secret" not in cookie
    page = client.get("/ui/history")  # the cookie is sent back
    assert page.status_code == 200 and "Signed in as reader" in text_of(page.text)
    # a secret given as the bearer token is traded too, never stored in the cookie
    by_token = sign_in(TestClient(create_app(service, tokens=Tokens.load(token_file))),
                       token="reader-secret")
    assert by_token.status_code == 303 and "reader-secret" not in by_token.headers[
        "set-cookie"] and COOKIE in by_token.headers["set-cookie"]
    # the cookie opens the UI only, not the REST API
    assert client.get("/v1/config").status_code == 401


def test_sign_in_returns_to_the_page_asked_for_and_sign_out_refuses_afterwards(
        service: CatalogService, token_file: Path) -> None:
    client = TestClient(create_app(service, tokens=Tokens.load(token_file)))
    asked = "/ui/namespace?name=sales&version=3"
    refused = client.get(asked)
    link = re.search(r'href="([^"]+)">Sign in', refused.text)
    assert link and link.group(1) == "/ui/login?next=/ui/namespace%3Fname%3Dsales%26version%3D3"
    signed = sign_in(client, next=asked, client_id="reader", secret="reader-secret")
    assert signed.status_code == 303 and signed.headers["location"] == asked
    page = client.get(asked)
    assert page.status_code == 200 and "Signed in as reader" in text_of(page.text)
    sign_out_token = form_token(page)
    # another session's sign-out token, or none, does not sign this browser out
    other = TestClient(create_app(service, tokens=Tokens.load(token_file)))
    for token in ("", "x" * 43, form_token(other.get("/ui/login"))):
        assert client.post("/ui/logout", data={"csrf": token}).status_code == 403
    assert client.get(asked).status_code == 200
    assert other.post("/ui/logout", data={"csrf": sign_out_token},
                      follow_redirects=False).status_code == 303  # other was signed in to
    assert client.get(asked).status_code == 200                   # nothing: no change here
    out = client.post("/ui/logout", data={"csrf": sign_out_token}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/ui/login?signed_out=1"
    assert f'{COOKIE}=""' in out.headers["set-cookie"] and "Max-Age=0" in out.headers[
        "set-cookie"]
    assert client.get(asked).status_code == 401
    assert "Signed out." in client.get(out.headers["location"]).text
    assert "not signed in" in client.get("/ui/logout").text


@pytest.mark.parametrize("target", [
    "//evil.example/ui/", "/\\evil.example", "/\\/evil.example", "https://evil.example/ui/",
    "http:/ui/", "https:///ui/", "javascript:alert(1)", "%2F%2Fevil.example",
    "/%2F/evil.example", "\t//evil.example", "/ui/\r\nSet-Cookie: x=1", "/uievil",
    "/ui/../v1/config", "/ui/%2e%2e/v1/config", "/v1/config", "ui/", "/ui/\u202e",
    "///evil.example",
])
def test_sign_in_never_leads_off_the_ui(service: CatalogService, token_file: Path,
                                        target: str) -> None:
    client = TestClient(create_app(service, tokens=Tokens.load(token_file)))
    assert local_target(target, "/ui") is None
    signed = sign_in(client, next=target, client_id="reader", secret="reader-secret")
    assert signed.status_code == 303 and signed.headers["location"] == "/ui/"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["", "/", "/ui", "/ui/", "//", "/\\", "https:", "\t/"]),
       st.text(alphabet=st.sampled_from("/\\:.%2eEfUui?#@ \t\nx"), max_size=16))
def test_a_target_kept_is_a_page_of_the_ui_wherever_a_browser_resolves_it(
        start: str, rest: str) -> None:
    kept = local_target(start + rest, "/ui")
    if kept is not None:
        # as a browser reads a URL: tabs and newlines dropped, a backslash is a slash
        seen = kept.replace("\t", "").replace("\n", "").replace("\\", "/")
        resolved = urlsplit(urljoin("https://catalog.example/ui/login", seen))
        assert resolved.netloc == "catalog.example"
        assert resolved.path == "/ui" or resolved.path.startswith("/ui/")
        assert ".." not in unquote(resolved.path).split("/")


def test_a_sign_in_form_from_another_site_is_refused(service: CatalogService,
                                                     token_file: Path) -> None:
    client = TestClient(create_app(service, tokens=Tokens.load(token_file)))
    credentials = {"client_id": "reader", "secret": "reader-secret"}
    other = TestClient(create_app(service, tokens=Tokens.load(token_file)))
    foreign = form_token(other.get("/ui/login"))  # a token of another server's form
    mine = form_token(client.get("/ui/login"))
    for fields, headers in [({}, {}), ({"csrf": ""}, {}), ({"csrf": "x" * 43}, {}),
                            ({"csrf": foreign}, {}),
                            ({"csrf": mine}, {"Sec-Fetch-Site": "cross-site"}),
                            ({"csrf": mine}, {"Sec-Fetch-Site": "same-site"})]:
        refused = client.post("/ui/login", data={**credentials, **fields}, headers=headers,
                              follow_redirects=False)
        assert refused.status_code == 403 and COOKIE not in refused.headers.get(
            "set-cookie", ""), (fields, headers)
        assert "not sent from this catalog" in refused.text
    # the token is tied to this browser's nonce: another browser's cookie does not fit it
    stranger = TestClient(create_app(service, tokens=Tokens.load(token_file)))
    stranger.get("/ui/login")
    assert stranger.post("/ui/login", data={**credentials, "csrf": mine},
                         follow_redirects=False).status_code == 403
    signed = client.post("/ui/login", data={**credentials, "csrf": mine},
                         headers={"Sec-Fetch-Site": "same-origin"}, follow_redirects=False)
    assert signed.status_code == 303
    # bodies are bounded before anything is read
    big = client.post("/ui/login", content=b"x" * 5000, headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    assert big.status_code == 413


def test_wrong_sign_ins_are_refused_with_429_per_address(service: CatalogService,
                                                         token_file: Path) -> None:
    clock = Clock()
    app = create_app(service, tokens=Tokens.load(token_file),
                     throttle=Throttle(burst=10, interval=0.01, clock=clock))
    client = TestClient(app, client=("10.0.0.1", 5000))
    codes = [sign_in(client, client_id="nobody", secret=f"guess-{n}").status_code
             for n in range(30)]
    assert codes == [401] * 10 + [429] * 20
    refused = sign_in(client, client_id="reader", secret="reader-secret")
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    assert "Too many wrong credentials" in refused.text
    # another address is not slowed down by this one's failures
    elsewhere = TestClient(app, client=("10.0.0.2", 5000))
    assert sign_in(elsewhere, client_id="reader", secret="reader-secret").status_code == 303
    clock.now += 0.01  # one more try a interval
    assert sign_in(client, client_id="reader", secret="reader-secret").status_code == 303


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


def versions_listed(html: str) -> list[int]:
    return [int(v) for v in re.findall(r'<li id="v(\d+)"', html)]


def test_an_objects_page_says_who_changed_it_last_and_links_its_history(
        catalog: Catalog) -> None:
    client = client_of(catalog)
    view = text_of(client.get("/view", params={"ns": "sales", "name": "big_orders"}).text)
    assert "Last changed in version 6 by (no user recorded)" in view  # the rollback
    old = client.get("/view", params={"ns": "sales", "name": "big_orders", "version": 3})
    assert "Last changed in version 3 by ci-bot" in text_of(old.text)
    assert 'href="/history?object=view&amp;ns=sales&amp;name=big_orders&amp;version=3"' \
        in old.text
    table = client.get("/table", params={"ns": "sales", "name": "orders_v2"})
    link = re.search(r'class="history" href="([^"]+)"', table.text)
    assert link is not None
    history = client.get(link.group(1).replace("&amp;", "&"))
    # its rename and column in 4, its creation (as sales.orders) in 2: nothing else
    assert versions_listed(history.text) == [4, 2]
    text = text_of(history.text)
    assert "History of table sales.orders_v2" in text
    assert "rename table sales.orders -&gt; orders_v2" in text
    assert "create table sales.orders" in text and "create view" not in text
    assert 'href="/diff?to=4"' in history.text


def test_history_by_user_and_object_and_its_paging(catalog: Catalog) -> None:
    client = client_of(catalog)
    mine = client.get("/history", params={"user": "ci-bot"})
    assert versions_listed(mine.text) == [3]
    assert "History by ci-bot" in text_of(mine.text)
    both = client.get("/history", params={"user": "ci-bot", "object": "table", "ns": "sales",
                                          "name": "orders_v2"})
    assert versions_listed(both.text) == [] and "No kept version matches" in both.text
    page = client.get("/history", params={"object": "view", "ns": "sales",
                                          "name": "big_orders", "limit": 2})
    assert versions_listed(page.text) == [6, 5]
    older = re.search(r'rel="next" href="([^"]+)"', page.text)
    assert older is not None and "object=view" in older.group(1)
    rest = client.get(older.group(1).replace("&amp;", "&"))
    assert versions_listed(rest.text) == [3] and 'rel="next"' not in rest.text
    assert 'href="/history?object=view&amp;ns=sales&amp;name=big_orders&amp;limit=2"' \
        in rest.text  # Latest keeps the filter
    middle = client.get("/history?before=4&limit=2")
    assert 'rel="prev" href="/history?limit=2&amp;before=6"' in middle.text  # newer: 5, 4
    assert 'href="/history?limit=2">Latest' in middle.text


def test_the_timeline_links_each_day_to_its_newest_version(catalog: Catalog) -> None:
    page = client_of(catalog).get("/history")
    assert '<a href="#v6"><rect class="bar"' in page.text
    assert '<a href="#v6"><g class="mark rollback">' in page.text


def test_a_filtered_history_reads_a_bounded_number_of_versions(
        catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "SEARCH_READS", 2)
    monkeypatch.setattr(pages, "LAST_CHANGE_READS", 2)
    read: list[int] = []
    at_version = catalog.at_version

    def counted(version: int) -> Any:
        read.append(version)
        return at_version(version)

    monkeypatch.setattr(catalog, "at_version", counted)
    client = client_of(catalog)
    page = client.get("/history", params={"user": "ci-bot"})
    assert versions_listed(page.text) == [] and sorted(read) == [5, 6]
    assert "None of the versions read matches" in page.text
    older = re.search(r'rel="next" href="([^"]+)">Search older versions', page.text)
    assert older is not None and "before=5" in older.group(1)
    read.clear()
    assert versions_listed(client.get(older.group(1).replace("&amp;", "&")).text) == [3]
    assert sorted(read) == [3, 4]
    read.clear()
    ns = text_of(client.get("/namespace", params={"name": "sales"}).text)
    assert "not in the 2 versions read" in ns and len(read) <= 4  # the page's, and 2 roots


@pytest.mark.parametrize("query", [
    {"object": "tabel", "ns": "sales", "name": "x"}, {"object": "table", "ns": "sales"},
    {"object": "namespace", "ns": "sales", "name": "x"}, {"object": "table", "name": "x"},
    {"object": "table", "ns": "a b", "name": "x"}, {"user": "u" * 201}])
def test_a_bad_history_filter_is_refused(catalog: Catalog, query: dict[str, str]) -> None:
    page = client_of(catalog).get("/history", params=query)
    assert page.status_code == 400 and "<script" not in page.text


def big_version(root: Path) -> Catalog:
    """Version 1: namespaces a, b, c; version 2: 120 tables in each, version 3 alters a's
    first table, drops b's and renames c's."""
    catalog = Catalog.create(str(root / "big"))
    with catalog.transaction() as txn:
        for ns in "abc":
            txn.create_namespace(ns)
    with catalog.transaction() as txn:
        for ns in "abc":
            for t in range(120):
                txn.create_table((ns, f"t{t:03}"), columns=[Column("id", "bigint")])
    with catalog.transaction() as txn:
        txn.alter_table(("a", "t000"), add_columns=[Column("note", "string")])
        txn.drop_table(("b", "t000"))
        txn.rename_table(("c", "t000"), "t999")
    return catalog


def test_a_big_diff_shows_its_summary_then_pages_of_changes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from olympia.catalog.files import CatalogFiles

    catalog = big_version(tmp_path)
    read: list[str] = []
    read_defs = CatalogFiles.read_defs

    def counted(self: CatalogFiles, paths: list[str], cls: Any) -> Any:
        read.extend(paths)
        return read_defs(self, paths, cls)

    monkeypatch.setattr(CatalogFiles, "read_defs", counted)
    client = client_of(catalog)
    page = client.get("/diff", params={"from": 1, "to": 2, "limit": 50})
    text = text_of(page.text)
    assert text.index("Summary") < text.index("Objects 1 to 50 of 360")
    assert "tables 360 0 0" in text  # created, changed, dropped: from the keys alone
    assert re.search(r"a table 120\s+b table 120\s+c table 120", text)
    assert page.text.count('<section class="change create"') == 50
    assert len(read) == 50  # the definitions of its page, not of the 360 objects
    assert '<span class="line add">' in page.text
    seen = [name for got in pages_from(client, "/diff?from=1&to=2&limit=50")
            for name in re.findall(r'aria-label="create table ([^"]+)"', got.text)]
    assert seen == [f"{ns}.t{t:03}" for ns in "abc" for t in range(120)]
    only_b = client.get("/diff", params={"from": 1, "to": 2, "ns": "b", "limit": 500})
    assert only_b.text.count('<section class="change create"') == 120
    assert "aria-label=\"create table a." not in only_b.text
    small = client.get("/diff", params={"to": 3})
    assert "tables 1 1 2" in text_of(small.text)  # the rename: a create and a drop
    assert 'aria-label="rename table c.t999"' in small.text
    assert "Objects 1 to 4 of 4" in text_of(small.text)
    assert '<span class="line add"> + column note: varchar</span>' in \
        re.sub(r" +", " ", small.text)
    # one object a page: the rename's two names fall on pages 3 and 4, and each shows it
    shown = [re.findall(r'aria-label="(\w+ table [^"]+)"', got.text)
             for got in pages_from(client, "/diff?to=3&limit=1")]
    assert shown == [["update table a.t000"], ["drop table b.t000"],
                     ["rename table c.t999"], ["rename table c.t999"]]


@pytest.mark.parametrize("query", [
    {"to": 2, "after": "table a"}, {"to": 2, "after": "tabel a t1"}, {"to": 2, "ns": "a b"},
    {"to": 2, "after": "x" * 5000}, {"to": 2, "limit": 0}])
def test_a_bad_diff_page_is_refused(tmp_path: Path, query: dict[str, Any]) -> None:
    page = client_of(big_version(tmp_path)).get("/diff", params=query)
    assert page.status_code == 400, page.text


def many_tables(root: Path) -> str:
    """ns000-ns009, each with tables t000-t199 and views v000-v009; ns005 also holds views
    t000v-t004v (sorted among its tables)."""
    uri = str(root / "many")
    catalog = Catalog.create(uri)
    with catalog.transaction() as txn:
        for n in range(10):
            txn.create_namespace(f"ns{n:03}")
            for t in range(200):
                txn.create_table((f"ns{n:03}", f"t{t:03}"), columns=[Column("c", "int")])
            for v in range(10):
                txn.create_view((f"ns{n:03}", f"v{v:03}"), sql="SELECT 1")
        for t in range(5):
            txn.create_view(("ns005", f"t{t:03}v"), sql="SELECT 2")
    catalog.close()
    return uri


def cold_client(uri: str) -> tuple[TestClient, list[Catalog]]:
    """A client opening the catalog afresh for every request (a cold cache: its storage
    counts every read the page makes)."""
    opened: list[Catalog] = []

    def fresh(request: object) -> Catalog:
        opened.append(Catalog.open(uri))
        return opened[-1]

    return TestClient(create_ui(fresh)), opened


def test_a_namespace_filters_by_name_prefix_with_totals_and_both_ways_paging(
        tmp_path: Path) -> None:
    client, opened = cold_client(many_tables(tmp_path))
    page = client.get("/namespace", params={"name": "ns005", "q": "t00", "limit": 4})
    text = text_of(page.text)
    # one sorted list: tables and views by name
    assert re.findall(r'name=(t00\w+)">', page.text) == ["t000", "t000v", "t001", "t001v"]
    assert "1 to 4 of 15 tables and views named t00…" in text
    reads = opened[-1].storage.stats.reads
    assert reads <= 25, reads  # the 15 keys' range, 4 definitions: not the 215 objects
    listed = pages_from(client, "/namespace?name=ns005&q=t00&limit=4")
    seen = [re.findall(r'name=(t00\w+)">', got.text) for got in listed]
    got = listed[-1]
    assert [len(s) for s in seen] == [4, 4, 4, 3]
    back = re.search(r'rel="prev" href="([^"]+)"', got.text)
    assert back is not None and "q=t00" in back.group(1)
    assert re.findall(r'name=(t00\w+)">', client.get(back.group(1).replace("&amp;", "&")).text) \
        == seen[2]
    first = client.get(re.sub("&amp;", "&", re.search(
        r'rel="prev" href="([^"]+)"', client.get("/namespace?name=ns005&q=t00&limit=4&"
                                                 "after=table:t001").text).group(1)))
    assert re.findall(r'name=(t00\w+)">', first.text) == seen[0]
    everything = text_of(client.get("/namespace", params={"name": "ns001"}).text)
    assert "1 to 50 of 210 tables and views" in everything
    for c in opened:
        c.close()


def test_find_a_table_anywhere_by_the_start_of_its_name(tmp_path: Path) -> None:
    uri = many_tables(tmp_path)
    client, opened = cold_client(uri)
    page = client.get("/find", params={"q": "t19", "limit": 15})
    found = re.findall(r'href="/table\?ns=(ns\d+)&amp;name=(t\d+)"', page.text)
    assert found == [("ns000", f"t{t}") for t in range(190, 200)] + \
        [("ns001", f"t{t}") for t in range(190, 195)]
    assert "start with what you type" in page.text
    more = re.search(r'rel="next" href="([^"]+)"', page.text)
    assert more is not None
    rest = client.get(more.group(1).replace("&amp;", "&"))
    assert re.findall(r'name=(t\d+)"', rest.text)[:2] == ["t195", "t196"]
    # the namespaces' keys, a key range of each up to ns001's: no definition read
    assert opened[0].storage.stats.reads <= 20, opened[0].storage.stats.reads
    views = client.get("/find", params={"q": "t004"})
    assert re.findall(r'href="/(\w+)\?ns=ns005&amp;name=(t004\w*)"', views.text) == [
        ("table", "t004"), ("view", "t004v")]
    assert len(re.findall(r'href="/table\?ns=ns\d+&amp;name=t004"', views.text)) == 10
    catalog = Catalog.open(uri)
    catalog.drop_table(("ns000", "t190"))
    now = client.get("/find", params={"q": "t190"}).text
    then = client.get("/find", params={"q": "t190", "version": 1}).text
    assert "ns=ns000&amp;name=t190" not in now and "ns=ns000&amp;name=t190" in then
    assert "version=1" in then  # the links keep the version
    assert "No table or view named zz" in text_of(client.get("/find?q=zz").text)
    catalog.close()
    for c in opened:
        c.close()


@pytest.mark.parametrize("url", ["/find?q=a%20b", "/find?q=" + "x" * 1001,
                                 "/find?q=t&after=bad", "/namespace?name=sales&q=%01",
                                 "/namespace?name=sales&after=tabel:x"])
def test_a_bad_find_is_refused(catalog: Catalog, url: str) -> None:
    page = client_of(catalog).get(url)
    assert page.status_code == 400 and "<script" not in page.text


def test_a_table_page_reads_top_down_with_snapshots_linked_to_their_versions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pyarrow as pa

    catalog = Catalog.create(str(tmp_path / "c"),
                             properties={"warehouse": f"file://{tmp_path}/wh"})
    catalog.create_namespace("lake", {"owner": "data-eng"})  # 1
    ice = OlympiaCatalog.over(catalog)
    table = ice.create_table(("lake", "events"), pa.schema([("id", pa.int64())]))  # 2
    table.append(pa.table({"id": [1, 2]}))  # 3
    table.append(pa.table({"id": [3]}))  # 4
    table = ice.load_table(("lake", "events"))
    first, second = (s.snapshot_id for s in table.metadata.snapshots)
    table.manage_snapshots().create_tag(first, "audit").commit()  # 5: no new current one
    for v in range(3):
        catalog.create_view(("lake", f"v{v}"), sql="SELECT id FROM lake.events",
                            referenced_objects=[("lake", "events")])  # 6, 7, 8
    catalog.create_view(("lake", "w"), sql="SELECT 1")  # 9
    client = client_of(catalog)
    page = client.get("/table", params={"ns": "lake", "name": "events"})
    text = text_of(page.text)
    overview = text[text.index("Table events"):text.index("Columns")]
    assert "Owner data-eng (of namespace lake)" in overview
    assert "Last changed in version 5" in overview and "Rows 3" in overview
    assert "Files 2 data, 0 delete" in overview and "Partitioning unpartitioned" in overview
    assert "Sort order unsorted" in overview and "not protected" in overview
    assert "partition-spec" not in page.text  # its JSON is not repeated below
    assert "branch main → " in text and f"tag audit → {first}" in text
    rows = re.findall(r'<tr><th scope="row">(\d+)</th>.*?(version \d+|not among)',
                      page.text, re.S)
    assert rows == [(str(second), "version 4"), (str(first), "version 3")]
    assert "made current by catalog version 4" in text
    listed = re.search(r'<dd class="used-by-views">(.*?)</dd>', page.text, re.S).group(1)
    assert re.findall(r'name=(v\d)"', listed) == ["v0", "v1", "v2"]  # w read, not listed
    assert 'class="used-by"' not in listed  # every view was read: nothing to go on to
    monkeypatch.setattr(pages, "USED_BY_READS", 2)
    page = client.get("/table", params={"ns": "lake", "name": "events"})
    listed = re.search(r'<dd class="used-by-views">(.*?)</dd>', page.text, re.S).group(1)
    assert re.findall(r'name=(v\d)"', listed) == ["v0", "v1"]
    rest = client.get(re.search(r'class="used-by" href="([^"]+)"', listed).group(1)
                      .replace("&amp;", "&"))
    assert re.findall(r'name=(v\d)"', rest.text) == ["v2"]
    seen = [re.findall(r'name=(v\d)"', got.text)
            for got in pages_from(client, "/used-by?ns=lake&name=events")]
    assert seen == [["v0", "v1"], ["v2"]]  # w read, not listed
    old = text_of(client.get("/table", params={"ns": "lake", "name": "events",
                                               "version": 3}).text)
    assert "Rows 2" in old and "made current by catalog version 3" in old
    assert client.get("/used-by", params={"ns": "lake", "name": "a b"}).status_code == 400


@settings(max_examples=15, deadline=None)
@given(tables=st.sets(st.text("ab", min_size=1, max_size=4), max_size=12),
       views=st.sets(st.text("ab", min_size=1, max_size=4), max_size=6),
       prefix=st.text("ab", max_size=2), limit=st.integers(1, 5))
def test_a_namespace_pages_its_prefix_both_ways(tmp_path_factory: pytest.TempPathFactory,
                                                tables: set[str], views: set[str],
                                                prefix: str, limit: int) -> None:
    views = views - tables  # a table and a view never share a name
    catalog = Catalog.create(str(tmp_path_factory.mktemp("c") / "c"))
    with catalog.transaction() as txn:
        txn.create_namespace("n")
        for t in tables:
            txn.create_table(("n", t), columns=[Column("c", "int")])
        for v in views:
            txn.create_view(("n", v), sql="SELECT 1")
    client = client_of(catalog)
    want = sorted(n for n in tables | views if n.startswith(prefix))
    listed = pages_from(client, f"/namespace?name=n&q={prefix}&limit={limit}")
    pages_seen = [(str(page.url), re.findall(r'name=(\w+)">\1</a>', page.text))
                  for page in listed]
    for page in listed:
        assert f" {len(want)} table" in text_of(page.text)  # the total, from the keys
    assert [n for _, names in pages_seen for n in names] == want
    for (_, names), (later, _) in pairwise(pages_seen):
        back = re.search(r'rel="prev" href="([^"]+)"', client.get(later).text)
        assert back is not None
        assert re.findall(r'name=(\w+)">\1</a>',
                          client.get(back.group(1).replace("&amp;", "&")).text) == names
    assert 'rel="prev"' not in client.get(pages_seen[0][0]).text
    catalog.close()
