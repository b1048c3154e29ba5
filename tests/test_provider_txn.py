"""Write-audit-publish with Airflow: the begin, commit and abort operators of a distributed
transaction (units against real catalogs on local disk and S3), and the example DAG
`examples/dags/olympia_wap.py` under `airflow dags test` with a real `olympia serve` and
Spark SQL with Iceberg's Spark runtime."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from airflow.sdk import AssetAlias, TriggerRule
from airflow.sdk.exceptions import AirflowException, AirflowFailException
from airflow_context import task_context
from conftest import Location
from expire_fixtures import expire_dtxn
from iceberg_helpers import ICEBERG_SPARK_JARS, SCHEMA
from pyiceberg.exceptions import NoSuchTableError

from olympia import Catalog, versions
from olympia.catalog.distributed import TRANSACTION_ID, check_transaction_id
from olympia.catalog.keys import dtxn_path
from olympia.exceptions import LocationInUseError
from olympia.iceberg import OlympiaCatalog
from olympia.plan import apply_plan, make_plan
from olympia.spec import load_spec
from olympia.versions.dtxn import list_transactions
from olympia_provider import get_provider_info
from olympia_provider.assets import catalog_asset
from olympia_provider.hooks.olympia import OlympiaHook, run_transaction_id
from olympia_provider.operators.olympia import (
    OlympiaAbortTransactionOperator,
    OlympiaBeginTransactionOperator,
    OlympiaCommitTransactionOperator,
)

pytestmark = pytest.mark.airflow
ROOT = Path(__file__).resolve().parents[1]
AIRFLOW = str(Path(sys.executable).parent / "airflow")
COLS = [{"name": "id", "type": "int8"}]
RUN_ID = "manual__2026-11-28T18:00:00+00:00"


def _connect(monkeypatch: pytest.MonkeyPatch, catalog: Catalog, location: Location,
             **extra: Any) -> str:
    options = dict(location.storage_options)
    key, secret = options.pop("key", None), options.pop("secret", None)
    monkeypatch.setenv("AIRFLOW_CONN_OLYMPIA_TXN", json.dumps({
        "conn_type": "olympia", "host": location.uri, "login": key, "password": secret,
        "extra": {"storage_options": options, **extra}}))
    return "olympia_txn"


@pytest.fixture
def conn(shared_location: Location, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[str, Catalog, Location]:
    """An olympia connection to a fresh catalog (namespace ``s``) on local disk or S3."""
    catalog = Catalog.create(shared_location.uri, shared_location.storage_options)
    catalog.create_namespace("s")
    return _connect(monkeypatch, catalog, shared_location), catalog, shared_location


@pytest.fixture
def local_conn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Catalog]:
    """An olympia connection to a fresh local catalog whose Iceberg tables live under
    ``tmp_path/tables``, with the URL of an ``olympia serve`` over it."""
    location = Location(str(tmp_path / "catalog"), {}, "local")
    catalog = Catalog.create(location.uri, properties={"warehouse": f"file://{tmp_path}/tables"})
    catalog.create_namespace("s")
    return _connect(monkeypatch, catalog, location, rest_uri="http://127.0.0.1:8181"), catalog


def context(run_id: str = RUN_ID, started: datetime | None = None) -> dict[str, Any]:
    return task_context("wap", run_id, started=started)


def test_the_hook_commit_rechecks_the_places_the_transaction_takes(
        local_conn: tuple[str, Catalog], tmp_path: Path) -> None:
    """A table the transaction created inside one landed outside since it began: the
    hook's commit (a process that staged nothing of it) refuses, and aborts it."""
    conn_id, catalog = local_conn
    wh = f"file://{tmp_path}/tables"
    hook = OlympiaHook(conn_id)
    txn_id = hook.begin_transaction()
    job = OlympiaCatalog("job", uri=catalog.uri).in_transaction(txn_id)
    job.create_table("s.b", SCHEMA, location=f"{wh}/x/y")
    OlympiaCatalog("other", uri=catalog.uri).create_table("s.a", SCHEMA, location=f"{wh}/x")
    with pytest.raises(LocationInUseError, match=r"table s\.b: location .* overlaps the "
                       r"location .*/x of table s\.a, which took it in catalog version 2"):
        hook.commit_transaction(txn_id)
    assert not list_transactions(catalog)
    assert Catalog.open(catalog.uri).list_tables("s") == ["a"]


def add_table(location: Location, txn_id: str, name: str) -> None:
    """A statement from another writer (its own Catalog object): create table ``s.<name>``
    inside the transaction."""
    other = Catalog.open(location.uri, location.storage_options)
    with other.transaction(name=txn_id) as statement:
        statement.create_table("s", name, columns=COLS)


def test_the_runs_transaction_id_is_valid_stable_and_distinct() -> None:
    first = run_transaction_id("olympia_wap", RUN_ID)
    assert first == run_transaction_id("olympia_wap", RUN_ID)
    assert first.startswith("olympia_wap.manual__2026-11-28T18_00_00_00_00-")
    assert check_transaction_id(first) == first
    # runs whose readable forms are the same still get distinct ids
    assert run_transaction_id("d", "a:b") != run_transaction_id("d", "a_b")
    assert run_transaction_id("d", "r") != run_transaction_id("d.r", "")
    long = run_transaction_id("d" * 250, "scheduled__" + "9" * 200)
    assert check_transaction_id(long) == long and len(long) == 128


def test_begin_then_commit_lands_every_statement_as_one_version(
        conn: tuple[str, Catalog, Location]) -> None:
    conn_id, catalog, location = conn
    before = catalog.refresh()
    begin = OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id,
                                            ttl="2h", info={"team": "sales"})
    txn_id = begin.execute(context())
    assert txn_id == run_transaction_id("wap", RUN_ID)  # the run's own by default
    record = catalog.distributed_transaction(txn_id).record
    assert record.expire_at_millis - record.began_at_millis == 2 * 3600 * 1000
    add_table(location, txn_id, "orders")
    add_table(location, txn_id, "payments")
    assert catalog.refresh() == before  # nothing visible before the commit
    assert not catalog.table_exists("s.orders")

    alias = AssetAlias("olympia-changes")
    commit = OlympiaCommitTransactionOperator(
        task_id="commit", olympia_conn_id=conn_id, outlets=[alias],
        transaction_id="{{ ti.xcom_pull(task_ids='begin') }}")
    commit.transaction_id = txn_id  # as Airflow renders the template
    ctx = context()
    version = commit.execute(ctx)
    assert version == before + 1 == catalog.refresh()
    assert catalog.table_exists("s.orders") and catalog.table_exists("s.payments")
    (entry,) = versions.history(catalog, limit=1)
    assert {a.object.name for a in entry.changes()} == {"orders", "payments"}
    expected = {TRANSACTION_ID: txn_id, "team": "sales", "airflow_dag": "wap",
                "airflow_run": RUN_ID, "airflow_task": "begin", "user": "airflow:wap"}
    assert {key: entry.info.get(key) for key in expected} == expected
    (event,) = ctx["outlet_events"][alias].asset_alias_events
    assert event.dest_asset_key.uri == catalog_asset(location.uri).uri
    assert event.extra == {"version": version, "transaction": txn_id}
    assert not catalog.storage.exists(dtxn_path(txn_id))
    # the same id again is a new transaction (this one is gone): the run cleared and rerun
    assert begin.execute(context()) == txn_id
    abort = OlympiaAbortTransactionOperator(task_id="abort", olympia_conn_id=conn_id)
    assert abort.execute(context()) is True


def test_a_commit_with_nothing_added_makes_no_version_and_no_event(
        local_conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = local_conn
    before = catalog.refresh()
    txn_id = OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id,
                                             transaction_id="empty").execute(context())
    alias = AssetAlias("olympia-changes")
    ctx = context()
    commit = OlympiaCommitTransactionOperator(task_id="commit", olympia_conn_id=conn_id,
                                              transaction_id=txn_id, outlets=[alias])
    assert commit.execute(ctx) == before == catalog.refresh()
    assert ctx["outlet_events"][alias].asset_alias_events == []


def test_a_conflicting_commit_fails_without_retry_and_leaves_nothing(
        conn: tuple[str, Catalog, Location]) -> None:
    conn_id, catalog, location = conn
    txn_id = OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id
                                             ).execute(context())
    add_table(location, txn_id, "orders")
    catalog.create_table("s", "orders", columns=COLS, properties={"by": "direct"})
    landed = catalog.refresh()
    commit = OlympiaCommitTransactionOperator(task_id="commit", olympia_conn_id=conn_id)
    with pytest.raises(AirflowFailException, match="conflict"):
        commit.execute(context())
    assert catalog.refresh() == landed
    assert catalog.load_table("s.orders").properties == {"by": "direct"}
    assert not catalog.storage.exists(dtxn_path(txn_id))  # aborted by the failed commit
    # the abort that runs after it finds nothing to abort, and says so
    abort = OlympiaAbortTransactionOperator(task_id="abort", olympia_conn_id=conn_id)
    assert abort.execute(context()) is False
    # a second commit (a retry) fails too: the transaction is gone
    with pytest.raises(AirflowFailException, match="no distributed transaction"):
        commit.execute(context())


def test_an_expired_transaction_fails_its_commit_without_retry(
        local_conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = local_conn
    txn_id = OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id
                                             ).execute(context())
    before = catalog.refresh()
    expire_dtxn(catalog, txn_id)
    commit = OlympiaCommitTransactionOperator(task_id="commit", olympia_conn_id=conn_id)
    with pytest.raises(AirflowFailException, match="expired"):
        commit.execute(context())
    assert catalog.refresh() == before
    assert OlympiaAbortTransactionOperator(task_id="abort", olympia_conn_id=conn_id
                                           ).execute(context()) is True


def test_abort_discards_and_tolerates_only_what_is_not_there(
        conn: tuple[str, Catalog, Location]) -> None:
    conn_id, catalog, location = conn
    before = catalog.refresh()
    abort = OlympiaAbortTransactionOperator(task_id="abort", olympia_conn_id=conn_id)
    assert abort.trigger_rule == TriggerRule.ONE_FAILED  # runs when an upstream task failed
    assert abort.execute(context()) is False  # never begun: nothing to abort
    txn_id = OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id
                                             ).execute(context())
    add_table(location, txn_id, "orders")
    assert abort.execute(context()) is True
    assert catalog.refresh() == before and not catalog.table_exists("s.orders")
    assert not catalog.storage.exists(dtxn_path(txn_id))
    assert abort.execute(context()) is False  # aborted already
    # committed by this run: abort cannot undo it, and says so
    started = datetime.now(UTC)
    OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id).execute(
        context(started=started))
    add_table(location, txn_id, "orders")
    version = OlympiaCommitTransactionOperator(task_id="commit", olympia_conn_id=conn_id
                                               ).execute(context(started=started))
    with pytest.raises(AirflowException, match=f"committed as version {version}"):
        abort.execute(context(started=started))
    # a run that started long after that commit does not look that far back
    assert abort.execute(context(started=started + 2 * timedelta(hours=1))) is False


def test_abort_refuses_a_transaction_being_committed(local_conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = local_conn
    txn_id = OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id
                                             ).execute(context())
    assert catalog.distributed_transaction(txn_id).seal()  # a commit stopped half-way
    abort = OlympiaAbortTransactionOperator(task_id="abort", olympia_conn_id=conn_id)
    with pytest.raises(AirflowException, match="being committed"):
        abort.execute(context())
    # the commit operator's retry finishes it
    commit = OlympiaCommitTransactionOperator(task_id="commit", olympia_conn_id=conn_id)
    assert commit.execute(context()) == catalog.refresh()
    assert not catalog.storage.exists(dtxn_path(txn_id))


def test_begin_refuses_bad_settings_and_an_open_transaction_of_its_id(
        local_conn: tuple[str, Catalog]) -> None:
    conn_id, catalog = local_conn
    with pytest.raises(ValueError, match="airflow_run"):
        OlympiaBeginTransactionOperator(task_id="b", info={"airflow_run": "x"})
    begin = OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id,
                                            ttl="soon")
    with pytest.raises(AirflowException, match="invalid duration 'soon'"):
        begin.execute(context())
    begin = OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id,
                                            transaction_id="bad id")
    with pytest.raises(AirflowException, match="invalid transaction id 'bad id'"):
        begin.execute(context())
    begin = OlympiaBeginTransactionOperator(task_id="begin", olympia_conn_id=conn_id,
                                            ttl=timedelta(minutes=5))
    txn_id = begin.execute(context())
    record = catalog.distributed_transaction(txn_id).record
    assert record.expire_at_millis - record.began_at_millis == 5 * 60 * 1000
    with pytest.raises(AirflowException, match="exists"):  # an earlier try left it open
        begin.execute(context())


def test_hook_reads_inside_the_transaction_and_names_its_rest_warehouse(
        local_conn: tuple[str, Catalog], tmp_path: Path) -> None:
    conn_id, catalog = local_conn
    hook = OlympiaHook(conn_id)
    txn_id = hook.begin_transaction("audit-me", info={"who": "test"})
    schema = pa.schema([pa.field("id", pa.int64())])
    inside = hook.get_iceberg_catalog(txn_id)
    inside.create_table("s.orders", schema).append(pa.table({"id": [1, 2]}, schema=schema))
    read = hook.get_iceberg_catalog(txn_id).load_table("s.orders").scan().to_arrow()
    assert read.column("id").to_pylist() == [1, 2]
    with pytest.raises(NoSuchTableError):
        hook.get_iceberg_catalog().load_table("s.orders")  # outside: not visible yet
    assert hook.rest_catalog_properties() == {"uri": "http://127.0.0.1:8181",
                                              "warehouse": f"file://{tmp_path}/tables"}
    assert hook.rest_catalog_properties(txn_id)["warehouse"] == (
        f"file://{tmp_path}/tables@txn:audit-me")
    assert hook.commit_transaction(txn_id) == (catalog.refresh(), True)
    assert hook.get_iceberg_catalog().load_table("s.orders").scan().count() == 2


def test_hook_asks_for_the_rest_settings_it_lacks(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    location = Location(str(tmp_path / "catalog"), {}, "local")
    catalog = Catalog.create(location.uri)
    hook = OlympiaHook(_connect(monkeypatch, catalog, location))
    with pytest.raises(ValueError, match="no rest_uri"):
        hook.rest_catalog_properties()
    hook = OlympiaHook(_connect(monkeypatch, catalog, location, rest_uri="http://h:1"))
    with pytest.raises(ValueError, match="rest_warehouse"):
        hook.rest_catalog_properties("t")
    hook = OlympiaHook(_connect(monkeypatch, catalog, location, rest_uri="http://h:1",
                                rest_warehouse="s3://b/w"))
    assert hook.rest_catalog_properties("t") == {"uri": "http://h:1",
                                                 "warehouse": "s3://b/w@txn:t"}


def test_the_provider_lists_the_transaction_operators() -> None:
    (listed,) = get_provider_info()["operators"]
    module = __import__(listed["python-modules"][0], fromlist=["*"])
    assert {"OlympiaBeginTransactionOperator", "OlympiaCommitTransactionOperator",
            "OlympiaAbortTransactionOperator"} <= set(module.__all__)


# --- the example DAG under `airflow dags test` ---------------------------------------------

#: A payment of no order, with a negative amount: the audit must fail on it.
BAD_BATCH = {"payments": [{"payment_id": 9, "order_id": 999, "method": "card", "amount": -5}]}


def airflow(env: dict[str, str], *args: str, ok: bool = True) -> str:
    """Run the airflow CLI; its output. It must succeed, or with ``ok=False`` fail."""
    proc = subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True,
                          timeout=900)
    output = proc.stdout + proc.stderr
    assert (proc.returncode == 0) == ok, f"airflow {' '.join(args)}:\n{output[-6000:]}"
    return output


def task_states(db: sqlite3.Connection, run_id: str) -> dict[str, str | None]:
    return dict(db.execute("SELECT task_id, state FROM task_instance WHERE dag_id = "
                           "'olympia_wap' AND run_id = ?", (run_id,)))


def table_rows(catalog: Catalog, name: str) -> list[dict[str, Any]]:
    from olympia.iceberg.catalog import OlympiaCatalog

    table = OlympiaCatalog.over(catalog).load_table(name).scan().to_arrow()
    return sorted(table.drop_columns([c for c in table.column_names
                                      if c.endswith("_at")]).to_pylist(), key=str)


@pytest.mark.spark
def test_example_dag_publishes_both_tables_in_one_version_or_nothing(tmp_path: Path) -> None:
    """The happy path commits ONE version holding both tables' changes and the DAG run's
    annotations; a batch that fails the audit is aborted: the latest version stays, and
    nothing of the transaction is visible or left open."""
    from restserver import RestServer

    assert len(ICEBERG_SPARK_JARS) == 2, f"Iceberg's Spark runtime is not in {sys.prefix}/jars"
    tables = f"file://{tmp_path}/tables"
    catalog = Catalog.create(str(tmp_path / "catalog"), properties={"warehouse": tables})
    variables = yaml.safe_load((ROOT / "examples" / "vars.yaml").read_text())
    spec = load_spec(ROOT / "examples" / "catalog", variables)
    apply_plan(catalog, make_plan(catalog, spec, targets=["table.sales.orders",
                                                          "table.sales.payments"]))
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "olympia_wap.py").symlink_to(ROOT / "examples" / "dags" / "olympia_wap.py")
    with RestServer(catalog.uri, tables) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.update({
            "AIRFLOW_HOME": str(tmp_path / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}",
            "AIRFLOW_CONN_OLYMPIA_DEFAULT": json.dumps({
                "conn_type": "olympia", "host": catalog.uri,
                "extra": {"rest_uri": server.url, "spark_master": "local[2]"}}),
        })
        airflow(env, "db", "migrate")
        db = sqlite3.connect(tmp_path / "airflow.db", timeout=30)
        before = catalog.refresh()

        airflow(env, "dags", "test", "olympia_wap")
        (run_id,) = [row[0] for row in db.execute("SELECT run_id FROM dag_run")]
        assert task_states(db, run_id) == {
            "begin": "success", "write_orders": "success", "merge_payments": "success",
            "audit": "success", "commit": "success", "abort": "skipped"}
        published = catalog.refresh()
        assert published == before + 1  # ONE version
        (entry,) = versions.history(catalog, limit=1)
        assert {(a.object.namespace, a.object.name) for a in entry.changes()} == {
            ("sales", "orders"), ("sales", "payments")}
        expected = {"airflow_dag": "olympia_wap", "airflow_run": run_id,
                    "airflow_task": "begin",
                    TRANSACTION_ID: run_transaction_id("olympia_wap", run_id)}
        assert {key: entry.info.get(key) for key in expected} == expected
        (value,) = db.execute("SELECT CAST(value AS TEXT) FROM xcom WHERE run_id = ? AND "
                              "task_id = 'commit' AND key = 'return_value'", (run_id,)
                              ).fetchone()
        assert json.loads(value) == published
        orders, payments = table_rows(catalog, "sales.orders"), table_rows(catalog,
                                                                           "sales.payments")
        assert [(o["order_id"], o["status"], str(o["total"])) for o in orders] == [
            (1, "placed", "25.00"), (2, "placed", "40.50")]
        assert [(p["payment_id"], p["order_id"], str(p["amount"])) for p in payments] == [
            (1, 1, "25.00"), (2, 2, "40.50")]

        output = airflow(env, "dags", "test", "olympia_wap", "-c", json.dumps(BAD_BATCH),
                         ok=False)
        assert "DagRun failed" in output
        assert "payment 9 names no order (999)" in output
        assert "payment 9 has a negative amount (-5.00)" in output
        (failed,) = [row[0] for row in db.execute("SELECT run_id FROM dag_run WHERE "
                                                  "run_id != ?", (run_id,))]
        assert task_states(db, failed) == {
            "begin": "success", "write_orders": "success", "merge_payments": "success",
            "audit": "failed", "commit": "upstream_failed", "abort": "success"}
        assert catalog.refresh() == published  # the latest version is unchanged
        assert list_transactions(catalog) == []  # nothing left open
        # nothing of it is visible: not the bad payment, nor the orders written with it
        assert table_rows(catalog, "sales.orders") == orders
        assert table_rows(catalog, "sales.payments") == payments
