"""The UI's page of open distributed transactions: who opened each, when, on which version,
and what it touched; escaped, linked from every page's navigation, no script needed."""

from __future__ import annotations

import warnings
from pathlib import Path

from olympia.catalog.catalog import Catalog
from olympia.ui import create_ui

with warnings.catch_warnings():  # starlette's note about httpx, raised on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

EVIL = "<script>alert('x')</script>"
COLS = [{"name": "id", "type": "int8"}]


def client_of(catalog: Catalog) -> TestClient:
    return TestClient(create_ui(lambda request: catalog))


def test_the_transactions_page_lists_the_open_ones(tmp_path: Path) -> None:
    catalog = Catalog.create(str(tmp_path / "catalog"))
    catalog.create_namespace("sales")
    client = client_of(catalog)
    home = client.get("/")
    assert '<a href="/transactions">Transactions</a>' in home.text
    empty = client.get("/transactions")
    assert empty.status_code == 200 and "No distributed transactions are open." in empty.text

    catalog.begin_transaction("wap-1", info={"user": EVIL})
    with catalog.transaction(name="wap-1") as stmt:
        stmt.create_table("sales", "orders", columns=COLS)
        stmt.create_view("sales", "v", sql="SELECT 1", referenced_objects=["sales.orders"])
    catalog.begin_transaction("idle")
    page = client.get("/transactions")
    assert page.status_code == 200 and "<script>" not in page.text
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page.text
    rows = page.text.split("<tr>")[2:]
    assert [r.split("</th>")[0].removeprefix('<th scope="row">') for r in rows] == [
        "wap-1", "idle"]
    assert '<a href="/?version=1">version 1</a>' in rows[0]
    assert "<td>sales.orders, view sales.v</td>" in rows[0]
    assert "<td>open</td>" in rows[0]
    assert "<td>unknown</td>" in rows[1] and "nothing yet" in rows[1]

    catalog.distributed_transaction("wap-1").commit()
    catalog.distributed_transaction("idle").abort()
    assert "No distributed transactions are open." in client.get("/transactions").text


def test_the_page_stays_under_the_mount_point(tmp_path: Path) -> None:
    catalog = Catalog.create(str(tmp_path / "catalog"))
    catalog.begin_transaction("t")
    app = create_ui(lambda request: catalog)
    client = TestClient(app, root_path="/ui")
    page = client.get("/transactions")
    assert page.status_code == 200
    assert '<a href="/ui/?version=0">version 0</a>' in page.text
    assert '<a href="/ui/transactions">Transactions</a>' in page.text
