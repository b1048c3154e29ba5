"""The catalog UI plugin in a real Airflow 3 API server (SQLite, SimpleAuthManager with a user
who may read connections and one who may not), checked over HTTP and in headless Chromium."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from plan_helpers import EXAMPLE, EXAMPLE_VARS, converge
from playwright.sync_api import Browser, Page, sync_playwright
from test_provider_e2e import AIRFLOW, run

from olympia import Catalog
from olympia.spec import load_spec

pytestmark = pytest.mark.airflow
PREFIX = "/olympia/ui/"
CONN = "olympia_example"
KEY_ID = f"ui-key-{uuid.uuid4().hex}"  # the connection's login (S3 access key id)
SECRET = f"ui-secret-{uuid.uuid4().hex}"  # its password (S3 secret key)
PASSWORDS = {"reader": "reader-pw", "viewer": "viewer-pw"}
EXAMPLE_SPEC = load_spec(EXAMPLE, EXAMPLE_VARS)
SCREENSHOTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "airflow-ui"


@dataclass(frozen=True)
class AirflowUI:
    """A running API server with the plugin and the tokens of its users."""

    base: str
    tokens: dict[str, str]

    def client(self, user: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[user]}"} if user else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=60)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def airflow_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowUI]:
    home = tmp_path_factory.mktemp("airflow_ui_home")
    catalog = Catalog.create(str(home / "warehouse"))
    converge(catalog, EXAMPLE, **EXAMPLE_VARS)
    catalog.create_table("sales", "ui_second_version", columns=[{"name": "id", "type": "int8"}],
                         comment="<script>alert(1)</script>")
    (home / "passwords.json").write_text(json.dumps(PASSWORDS))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "reader:op,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__API__BASE_URL": base,
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(64),
    })
    run(env, "db", "migrate")
    run(env, "connections", "add", CONN, "--conn-json", json.dumps({
        "conn_type": "olympia", "host": catalog.uri, "login": KEY_ID, "password": SECRET,
        "description": "The example <b>catalog</b>",
        "extra": {"storage_options": {"max_concurrency": 4}}}))
    run(env, "connections", "add", "not_olympia", "--conn-type", "http",
        "--conn-host", "example.org")
    log = (home / "api-server.log").open("w")
    server = subprocess.Popen(
        [AIRFLOW, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, (home / "api-server.log").read_text()[-4000:]
            try:
                if httpx.get(f"{base}/api/v2/monitor/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the API server did not start"
            time.sleep(0.5)
        tokens = {user: httpx.post(f"{base}/auth/token", json={
            "username": user, "password": password}).json()["access_token"]
            for user, password in PASSWORDS.items()}
        yield AirflowUI(base, tokens)
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hrefs += [value for name, value in attrs if name in ("href", "src") and value]


def crawl(client: httpx.Client, start: str, limit: int = 300) -> dict[str, httpx.Response]:
    """Every page under the plugin's prefix reachable by links from ``start``."""
    pages: dict[str, httpx.Response] = {}
    todo = [start]
    while todo and len(pages) < limit:
        url = todo.pop()
        if url in pages:
            continue
        pages[url] = response = client.get(url)
        if "text/html" not in response.headers.get("content-type", ""):
            continue
        parser = _Links()
        parser.feed(response.text)
        for href in parser.hrefs:
            target = urlsplit(urljoin(url, href))
            if not target.netloc and target.path.startswith(PREFIX):
                todo.append(target.path + (f"?{target.query}" if target.query else ""))
    return pages


def test_anonymous_and_unpermitted_users_are_refused(airflow_ui: AirflowUI) -> None:
    for path in (PREFIX, f"{PREFIX}{CONN}/", f"{PREFIX}{CONN}/history"):
        with airflow_ui.client() as anonymous:
            assert anonymous.get(path).status_code == 401
            browser = anonymous.get(path, headers={"Accept": "text/html"})
            assert browser.status_code == 303  # to Airflow's login page, and back here after
            assert browser.headers["location"].startswith("/auth/login?next=")
            assert path in browser.headers["location"].replace("%2F", "/")
            anonymous.cookies.set("_token", "not-a-session")  # expired, or signed by another
            assert anonymous.get(path, headers={"Accept": "text/html"}).status_code == 303
        with airflow_ui.client("viewer") as viewer:
            assert viewer.get("/api/v2/dags").status_code == 200  # a real, logged-in user
            refused = viewer.get(path)
            assert refused.status_code == 403
            assert not [ns for ns in EXAMPLE_SPEC.namespaces if ns in refused.text]


def test_reader_sees_the_olympia_connections_and_their_catalog(airflow_ui: AirflowUI) -> None:
    with airflow_ui.client("reader") as reader:
        landing = reader.get(PREFIX)
        assert landing.status_code == 200
        assert f'href="{PREFIX}{CONN}/"' in landing.text and "not_olympia" not in landing.text
        assert "The example &lt;b&gt;catalog&lt;/b&gt;" in landing.text
        home = reader.get(f"{PREFIX}{CONN}/")
        assert home.status_code == 200
        for answer in (landing, home, reader.get(f"{PREFIX}{CONN}/namespace?name=%00")):
            # framed by Airflow's own pages only (its navigation entry is an iframe)
            assert "frame-ancestors 'self'" in answer.headers["content-security-policy"]
            assert answer.headers["x-frame-options"] == "SAMEORIGIN"
        assert all(ns in home.text for ns in EXAMPLE_SPEC.namespaces)
        # every page names its connection and links back to the list, error pages too
        for answer in (home, reader.get(f"{PREFIX}{CONN}/table?ns=sales&name=nope")):
            assert f"Connection <strong>{CONN}</strong>" in answer.text
            assert f'<a href="{PREFIX}">All connections</a>' in answer.text
        for ns in EXAMPLE_SPEC.namespaces:
            page = reader.get(f"{PREFIX}{CONN}/namespace", params={"name": ns})
            assert page.status_code == 200
            names = [name for (space, name) in [*EXAMPLE_SPEC.tables, *EXAMPLE_SPEC.views]
                     if space == ns]
            assert names and all(name in page.text for name in names)
        table = reader.get(f"{PREFIX}{CONN}/table",
                           params={"ns": "sales", "name": "ui_second_version"})
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in table.text
        assert "<script>alert(1)" not in table.text
        assert reader.get(f"{PREFIX}not_olympia/").status_code == 404
        assert reader.get(f"{PREFIX}no_such_conn/").status_code == 404


def test_no_page_renders_a_secret_of_the_connection(airflow_ui: AirflowUI) -> None:
    with airflow_ui.client("reader") as reader:
        pages = crawl(reader, PREFIX)
    assert {"history", "namespace", "table", "diff"} <= {
        urlsplit(url).path.rsplit("/", 1)[-1] for url in pages}, sorted(pages)
    failed = {url: r.status_code for url, r in pages.items() if r.status_code != 200}
    assert not failed
    for url, response in pages.items():
        for secret in (SECRET, KEY_ID, "max_concurrency", "storage_options"):
            assert secret not in response.text, f"{secret} in {url}"


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Debian's headless Chromium, driven by Playwright."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it)")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def reader_page(airflow_ui: AirflowUI, browser: Browser) -> Page:
    """A page logged in as the reader (Airflow's session cookie)."""
    context = browser.new_context()
    context.add_cookies([{"name": "_token", "value": airflow_ui.tokens["reader"],
                          "url": airflow_ui.base}])
    return context.new_page()


def test_browser_signs_in_through_airflow(airflow_ui: AirflowUI, browser: Browser) -> None:
    """An anonymous browser lands on Airflow's login page and, signed in, on the page it
    asked for; a viewer who signs in is refused."""
    for user, expected in (("reader", "History"), ("viewer", "Forbidden")):
        page = browser.new_context().new_page()
        page.goto(f"{airflow_ui.base}{PREFIX}{CONN}/history")
        page.wait_for_url("**/auth/login?next=**")
        page.get_by_label("Username").fill(user)
        page.get_by_label("Password").fill(PASSWORDS[user])
        page.screenshot(path=SCREENSHOTS / "airflow-login.png")
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"**{PREFIX}{CONN}/history")
        assert page.locator("h1").inner_text().startswith(expected)
        assert (page.locator("svg#timeline").count() == 1) == (user == "reader")
        page.context.close()


def test_navigation_entry_opens_the_plugin(airflow_ui: AirflowUI, reader_page: Page) -> None:
    page = reader_page
    page.goto(f"{airflow_ui.base}/", wait_until="networkidle")
    page.get_by_role("button", name="Browse").click()
    entry = page.get_by_role("menuitem", name="Olympia catalog")
    entry.wait_for()
    page.screenshot(path=SCREENSHOTS / "airflow-nav.png", animations="disabled")
    entry.click()
    page.wait_for_url("**/plugin/olympia-catalog**")
    landing = page.frame_locator("iframe").locator("#connections")
    assert CONN in landing.inner_text()
    page.screenshot(path=SCREENSHOTS / "airflow-plugin-landing.png")


def test_catalog_pages_in_chromium(airflow_ui: AirflowUI, reader_page: Page) -> None:
    page = reader_page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(f"{airflow_ui.base}{PREFIX}")
    page.get_by_role("link", name=CONN).click()
    page.wait_for_url(f"**{PREFIX}{CONN}/")
    main = page.locator("main")
    for ns in EXAMPLE_SPEC.namespaces:
        assert main.get_by_role("link", name=ns, exact=True).is_visible()
    page.screenshot(path=SCREENSHOTS / "catalog.png", full_page=True)

    main.get_by_role("link", name="sales", exact=True).click()
    for ns, name in EXAMPLE_SPEC.tables:
        if ns == "sales":
            assert main.get_by_role("link", name=name, exact=True).is_visible()
    page.screenshot(path=SCREENSHOTS / "namespace.png", full_page=True)

    main.get_by_role("link", name="ui_second_version", exact=True).click()
    assert "<script>alert(1)</script>" in main.inner_text()  # shown as text, never run
    page.screenshot(path=SCREENSHOTS / "table.png", full_page=True)

    page.get_by_role("navigation", name="Catalog").get_by_role(
        "link", name="History", exact=True).click()  # the header's (the table has its own)
    assert page.locator("svg#timeline rect.bar").count() >= 1
    for version in (0, 1, 2):  # create, the example, one more table
        assert main.get_by_role("link", name=f"Version {version}", exact=True).is_visible()
    page.screenshot(path=SCREENSHOTS / "history.png", full_page=True)

    page.locator("#v2 a.diff-link").click()
    page.wait_for_url("**/diff?to=2")
    assert "ui_second_version" in main.inner_text()
    page.screenshot(path=SCREENSHOTS / "diff.png", full_page=True)
    assert CONN in page.locator("header .place").inner_text()
    page.get_by_role("link", name="All connections").click()
    page.wait_for_url(f"**{PREFIX}")
    assert CONN in page.locator("#connections").inner_text()
    assert dialogs == []
