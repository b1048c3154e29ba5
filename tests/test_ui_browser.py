"""The catalog UI in a real browser: Debian's chromium, driven by Playwright, against a
running ``olympia serve`` over the example catalog (applied as ``make demo`` applies it,
then an Iceberg append: two versions).

A screenshot of each page is saved under the test's tmp dir, or under the directory named by
``OLYMPIA_UI_SCREENSHOTS`` (``docs/images`` for the documentation's). Skipped only when no
``chromium`` is installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from restserver import RestServer

from olympia import versions
from olympia.catalog.catalog import Catalog
from olympia.ui.login import COOKIE

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (Debian's "
                                "chromium package; .ci/run installs it)")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
REPO = Path(__file__).resolve().parents[1]
EVIL = "<script>window.__olympia_xss = 1</script>"
BIN = Path(sys.executable).parent


def _run(*args: str) -> str:
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def example_catalog(root: Path) -> str:
    """The example catalog as ``make demo`` makes it: applied (version 1), then three rows
    appended to the Iceberg table sales.payments (version 2)."""
    uri = str(root / "catalog")
    _run(str(BIN / "olympia"), "init", "--catalog", uri,
         "--property", f"warehouse=file://{root}/tables")
    plan = str(root / "plan.json")
    _run(str(BIN / "olympia"), "plan", "--catalog", uri, "examples/catalog", "--var-file",
         "examples/vars.yaml", "--out", plan)
    _run(str(BIN / "olympia"), "apply", "--catalog", uri, plan, "--auto-approve")
    _run(sys.executable, "examples/append_and_read.py", uri)
    return uri


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestServer]:
    root = tmp_path_factory.mktemp("ui-example")
    uri = example_catalog(root)
    with RestServer(uri, f"file://{root}/tables") as running:
        yield running


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")  # a fresh user-data dir
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=ARGS,
            viewport={"width": 1100, "height": 800})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = os.environ.get("OLYMPIA_UI_SCREENSHOTS")
    folder = Path(where) if where else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_the_example_catalog_in_the_browser(server: RestServer, browser: Any,
                                            shots: Path) -> None:
    page = browser.new_page()
    try:
        page.goto(server.url + "/")  # GET / leads to the UI
        assert page.url == server.url + "/ui/"
        names = page.locator("table.list th[scope=row]").all_inner_texts()
        assert names == ["finance", "marketing", "reporting", "sales"]
        page.screenshot(path=str(shots / "ui-namespaces.png"), full_page=True)

        page.get_by_role("link", name="sales", exact=True).click()
        assert "payments" in page.locator("table.list").inner_text()
        page.screenshot(path=str(shots / "ui-namespace.png"), full_page=True)

        page.get_by_role("link", name="payments", exact=True).click()
        overview = page.locator("dl.overview")
        assert overview.locator("dd.rows").inner_text() == "3"
        iceberg = page.locator("section.iceberg")
        snapshots = iceberg.locator("table.snapshots").inner_text()
        assert "append" in snapshots and "version 2" in snapshots  # the append's version
        assert "branch main" in iceberg.locator("dd.refs").inner_text()
        # partitioning and sorting in the notation of the example's spec (sales.yaml)
        assert overview.locator("dd.partitioning").inner_text() == "method"
        assert overview.locator("dd.sort").inner_text() == "paid_at desc, payment_id"
        page.screenshot(path=str(shots / "ui-table.png"), full_page=True)

        page.goto(server.url + "/ui/namespace?name=marketing")
        page.get_by_role("link", name="campaign_revenue", exact=True).click()
        assert "GROUP BY 1, 2" in page.locator("pre.sql").inner_text()
        page.get_by_role("link", name="marketing.touches").click()
        assert page.locator("h1").inner_text() == "Table touches"
        page.go_back()
        page.screenshot(path=str(shots / "ui-view.png"), full_page=True)

        page.goto(server.url + "/ui/history")
        timeline = page.locator("svg#timeline")
        assert timeline.locator("rect.bar").count() >= 1
        assert page.locator("li.version").count() == 3  # versions 2, 1 and 0
        page.screenshot(path=str(shots / "ui-history.png"), full_page=True)

        page.locator("#v1 a.diff-link").click()
        changes = page.locator("section.change")
        assert changes.count() > 10
        assert "+ table sales.payments" in page.locator("main").inner_text()
        page.screenshot(path=str(shots / "ui-diff.png"), full_page=True)

        # keyboard: the version form is reachable and submits with Enter
        page.goto(server.url + "/ui/")
        page.get_by_label("Version").focus()
        page.keyboard.type("1")
        page.keyboard.press("Enter")
        page.wait_for_url("**/ui/?version=1**")
        assert "version 1 of 2" in page.locator("header").inner_text()
    finally:
        page.close()


def test_a_comment_holding_a_script_is_shown_as_text(tmp_path: Path, browser: Any) -> None:
    server = RestServer.on_new_catalog(tmp_path)
    store = Catalog.open(server.catalog_uri)
    try:
        store.create_namespace("xss", comment=EVIL)
        store.create_table(("xss", "t"), comment=EVIL, columns=[{"name": "c", "type": "int"}])
    finally:
        store.close()
    with server:
        page = browser.new_page()
        try:
            page.goto(server.url + "/ui/table?ns=xss&name=t")
            assert page.locator("dd.comment").inner_text() == EVIL
            assert page.evaluate("typeof window.__olympia_xss") == "undefined"
            page.goto(server.url + "/ui/namespace?name=xss")
            assert page.locator("dd.comment").inner_text() == EVIL
            assert page.evaluate("typeof window.__olympia_xss") == "undefined"
        finally:
            page.close()


def test_a_server_with_tokens_refuses_until_signed_in(tmp_path: Path, browser: Any,
                                                      shots: Path) -> None:
    token_file = tmp_path / "tokens"
    token_file.write_text("viewer read-only viewer-secret\n")
    with RestServer.on_new_catalog(tmp_path, "--token-file", str(token_file)) as secured:
        page = browser.new_page()
        try:
            answer = page.goto(secured.url + "/ui/")
            assert answer is not None and answer.status == 401
            page.get_by_role("link", name="Sign in").click()
            page.screenshot(path=str(shots / "ui-login.png"), full_page=True)
            page.get_by_label("Client id").fill("viewer")
            page.get_by_label("Secret").fill("wrong")
            page.get_by_role("button", name="Sign in").click()
            assert "sign no one in" in page.locator("main").inner_text()
            page.get_by_label("Client id").fill("viewer")
            page.get_by_label("Secret").fill("viewer-secret")
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(secured.url + "/ui/")
            assert page.locator("h1").inner_text() == "Namespaces"
            assert "Signed in as viewer" in page.locator("header").inner_text()
            cookie = next(c for c in browser.cookies(secured.url + "/ui/") if c["name"] ==
                          COOKIE)
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert cookie["value"] != "viewer-secret"
            # sign out, and be refused afterwards
            page.get_by_role("button", name="Sign out").click()
            page.wait_for_url(secured.url + "/ui/login?signed_out=1")
            assert "Signed out." in page.locator("main").inner_text()
            assert COOKIE not in {c["name"] for c in browser.cookies(secured.url + "/ui/")}
            answer = page.goto(secured.url + "/ui/history?version=0")
            assert answer is not None and answer.status == 401
            # signing in again comes back to the page asked for
            page.get_by_role("link", name="Sign in").click()
            page.get_by_label("Client id").fill("viewer")
            page.get_by_label("Secret").fill("viewer-secret")
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(secured.url + "/ui/history?version=0")
            assert page.locator("h1").inner_text() == "History"
            page.get_by_role("button", name="Sign out").click()
            page.wait_for_url("**/ui/login?signed_out=1")
        finally:
            page.close()


def test_a_sign_in_form_posted_from_another_site_is_refused(tmp_path: Path,
                                                            browser: Any) -> None:
    """A page of another origin (localhost is not 127.0.0.1) posts the sign-in form with
    good credentials and a token the server gave the attacker: refused, no cookie set."""
    token_file = tmp_path / "tokens"
    token_file.write_text("viewer read-only viewer-secret\n")
    with RestServer.on_new_catalog(tmp_path, "--token-file", str(token_file)) as secured:
        form = httpx.get(secured.url + "/ui/login", timeout=30)
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token
        page = browser.new_page()
        try:
            page.goto(secured.url.replace("127.0.0.1", "localhost") + "/v1/config")
            page.set_content(
                f'<form method="post" action="{secured.url}/ui/login">'
                f'<input name="csrf" value="{token.group(1)}">'
                '<input name="client_id" value="viewer">'
                '<input name="secret" value="viewer-secret">'
                '<button type="submit">Go</button></form>')
            with page.expect_navigation() as sent:
                page.get_by_role("button", name="Go").click()
            answer = sent.value
            assert answer is not None and answer.status == 403
            assert "not sent from this catalog" in page.locator("main").inner_text()
            assert COOKIE not in {c["name"] for c in browser.cookies(secured.url + "/ui/")}
            refused = page.goto(secured.url + "/ui/")
            assert refused is not None and refused.status == 401
        finally:
            page.close()


PHONE = {"width": 390, "height": 844}


def test_every_page_fits_a_phone(tmp_path: Path, browser: Any, shots: Path) -> None:
    """At 390 x 844 no page scrolls sideways: every page kind over a catalog with long
    names, wide tables, a long view and a rollback and an export on the same day; the
    timeline shows both marks."""
    token_file = tmp_path / "tokens"
    token_file.write_text("viewer read-only viewer-secret\n")
    server = RestServer.on_new_catalog(tmp_path, "--token-file", str(token_file))
    long = "n" * 60 + "_" + "x" * 39
    store = Catalog.open(server.catalog_uri)
    try:
        store.create_namespace(long, {"owner": "o" * 120}, comment="c" * 300)
        store.create_table((long, long), comment="t" * 300, format="delta",
                           location="s3://" + "l" * 200, properties={"k" * 80: "v" * 200},
                           columns=[{"name": f"{'c' * 90}{n}", "type": "string",
                                     "comment": "w" * 200} for n in range(3)])
        store.create_view((long, "v"), sql="SELECT " + ", ".join(["a" * 40] * 20),
                          referenced_objects=[(long, long)])
        store.drop_view((long, "v"))
        versions.rollback(store, 3)
        versions.export(store, "q1", str(tmp_path / "q1"), "full", version=5)
    finally:
        store.close()
    with server:
        page = browser.new_page()
        page.set_viewport_size(PHONE)
        try:
            page.goto(server.url + "/ui/login")
            assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"], "/ui/login"
            page.screenshot(path=str(tmp_path / "ui-phone-login.png"), full_page=True)
            page.get_by_label("Client id").fill("viewer")
            page.get_by_label("Secret").fill("viewer-secret")
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(server.url + "/ui/")
            quoted = quote(long)
            for kind, path in [
                    ("namespaces", "/ui/"), ("namespace", f"/ui/namespace?name={quoted}"),
                    ("table", f"/ui/table?ns={quoted}&name={quoted}"),
                    ("view", f"/ui/view?ns={quoted}&name=v&version=3"),
                    ("history", "/ui/history"), ("diff", "/ui/diff?from=0&to=5"),
                    ("transactions", "/ui/transactions"), ("error", "/ui/no/such/page"),
                    ("logout", "/ui/logout")]:
                page.goto(server.url + path)
                assert page.evaluate(SCROLL_WIDTH) <= PHONE["width"], path
                folder = shots if kind in ("table", "history") else tmp_path  # in UI.md
                page.screenshot(path=str(folder / f"ui-phone-{kind}.png"), full_page=True)
            # the wide tables scroll in their own box, keyboard-reachable
            page.goto(server.url + f"/ui/table?ns={quoted}&name={quoted}")
            box = page.locator("div.scroll").first
            assert box.evaluate("e => e.scrollWidth > e.clientWidth")
            assert box.get_attribute("tabindex") == "0"
            # the rollback (version 5) and the export of version 5: both dots visible
            page.goto(server.url + "/ui/history")
            for kind in ("rollback", "export"):
                dot = page.locator(f"svg#timeline g.mark.{kind} circle")
                hit = dot.evaluate("""c => { const r = c.getBoundingClientRect();
                    const e = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
                    return e === c; }""")
                assert hit, kind
                legend = page.locator(f"figcaption .key.{kind}")
                assert dot.evaluate("c => getComputedStyle(c).fill") == legend.evaluate(
                    "e => getComputedStyle(e).color")
            tag = page.locator("li.version span.tag.export").first
            assert tag.evaluate("e => getComputedStyle(e).backgroundColor") == page.locator(
                "figcaption .key.export").evaluate("e => getComputedStyle(e).color")
        finally:
            page.close()


#: How wide the page is laid out (wider than the window: it scrolls sideways).
SCROLL_WIDTH = "Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)"


def test_the_security_policy_holds_in_the_browser(server: RestServer, browser: Any) -> None:
    """Chromium applies the UI's policy: the style sheet and the style attributes that
    indent columns load with no violation reported, a page of the same origin may frame
    the UI, and a page of another origin may not (the frame shows Chromium's error page)."""
    page = browser.new_page()
    refusals: list[str] = []
    page.on("console", lambda message: refusals.append(message.text)
            if "Content Security Policy" in message.text else None)
    try:
        for path in ("/ui/", "/ui/table?ns=sales&name=payments", "/ui/history",
                     "/ui/diff?to=1", "/ui/namespace?name=%00"):
            page.goto(server.url + path)
            assert page.evaluate("document.styleSheets[0].cssRules.length") > 10
        page.goto(server.url + "/ui/table?ns=sales&name=payments")
        assert page.evaluate("document.querySelector('th[style]').style.paddingLeft") == "0.5em"
        assert refusals == []
        # framed by a page of its own origin (as Airflow frames its plugins' pages; a UI
        # page itself frames nothing: default-src 'none')
        page.goto(server.url + "/v1/config")
        page.evaluate("""() => new Promise(done => {
            const frame = document.createElement('iframe');
            frame.onload = done; frame.src = '/ui/history'; document.body.append(frame); })""")
        assert page.frame_locator("iframe").locator("h1").inner_text() == "History"
        assert refusals == []
        # framed by a page of another origin (localhost is not 127.0.0.1): refused
        page.goto(server.url.replace("127.0.0.1", "localhost") + "/v1/config")
        page.evaluate("""url => new Promise(done => {
            const frame = document.createElement('iframe');
            frame.onload = done; frame.src = url; document.body.append(frame); })""",
                      server.url + "/ui/history")  # Chromium fires load on its error page too
        framed = page.frames[1]
        # Chromium's page for a refused frame; Playwright may learn of that navigation after
        # the load event reached the parent, so wait for it rather than read the URL once
        framed.wait_for_url(lambda url: url.startswith("chrome-error://"), timeout=10_000)
        assert "Olympia catalog" not in framed.content()  # no page of the UI
    finally:
        page.close()


def test_the_history_of_a_table_names_who_applied_it(server: RestServer,
                                                     browser: Any) -> None:
    store = Catalog.open(server.catalog_uri)
    try:
        applied = versions.history(store, 1, 2)[0]  # version 1: `olympia apply`
    finally:
        store.close()
    user = applied.info["user"]
    assert user and applied.info.get("tool", "").startswith("olympia")
    page = browser.new_page()
    try:
        page.goto(server.url + "/ui/table?ns=marketing&name=touches")
        changed = page.locator("dd.changed")
        assert f"version 1 by {user}" in changed.inner_text()
        changed.get_by_role("link", name="History").click()
        assert page.locator("h1").inner_text() == "History of table marketing.touches"
        entry = page.locator("li.version")
        assert entry.count() == 1 and "Version 1" in entry.inner_text()
        assert f"user\n{user}" in entry.locator("dl.annotations").inner_text()
        assert "create table marketing.touches" in entry.locator("ul.actions").inner_text()
        page.get_by_label("Made by user").fill(user)
        page.get_by_label("Made by user").press("Enter")
        page.wait_for_url("**user=**")
        assert page.locator("li.version").count() == 1  # its history, made by that user
        page.locator("svg#timeline a").first.click()  # the timeline leads to its version
        assert page.url.endswith("#v1")
    finally:
        page.close()


def big_catalog(root: Path) -> RestServer:
    """5,000 tables in 10 namespaces: 2,000 made in version 2, 3,000 in version 3 (a version
    of 3,000 actions), named t0000-t0499 in each namespace."""
    server = RestServer.on_new_catalog(root)
    store = Catalog.open(server.catalog_uri)
    try:
        with store.transaction() as txn:
            for n in range(10):
                txn.create_namespace(f"ns{n}")
        for made in (range(0, 200), range(200, 500)):
            with store.transaction() as txn:
                for n in range(10):
                    for t in made:
                        txn.create_table((f"ns{n}", f"t{t:04}"),
                                         columns=[{"name": "id", "type": "bigint"}])
        assert store.version == 3
    finally:
        store.close()
    return server


def test_find_among_5000_tables_and_a_3000_action_diff(tmp_path: Path, browser: Any) -> None:
    with big_catalog(tmp_path) as server:
        page = browser.new_page()
        try:
            page.goto(server.url + "/ui/")
            box = page.get_by_role("searchbox",
                                   name="Find a table or view by the start of its name")
            box.fill("t042")
            box.press("Enter")
            page.wait_for_url("**/ui/find?q=t042**")
            found = page.locator("table.found th[scope=row]").all_inner_texts()
            assert found == ["t0420", "t0421", "t0422", "t0423", "t0424", "t0425", "t0426",
                             "t0427", "t0428", "t0429"] * 5  # a page of 50: ns0 to ns4
            page.get_by_role("link", name="t0427").nth(3).click()
            assert page.locator("h1").inner_text() == "Table t0427"
            assert "ns3" in page.locator("p.crumbs").inner_text()

            page.get_by_role("link", name="ns3").click()  # its namespace, filtered
            mine = page.get_by_label("Names starting with", exact=True)
            mine.fill("t049")
            mine.press("Enter")
            assert "1 to 10 of 10 tables and views named t049…" in \
                page.locator("p.counted").inner_text()

            page.goto(server.url + "/ui/history")
            page.locator("#v3 a.diff-link").click()
            main = page.locator("main").inner_text()
            assert main.index("Summary") < main.index("+ table ns0.t0200")
            assert "tables\t3000\t0\t0" in page.locator("table.counts").first.inner_text()
            assert page.locator("section.change").count() == 100  # the first page
            page.locator("table.counts").nth(1).get_by_role("link", name="ns7").click()
            assert "Objects 1 to 100 of 300" in page.locator("main").inner_text()
            assert "ns7.t0200" in page.locator("section.change").first.inner_text()
        finally:
            page.close()
