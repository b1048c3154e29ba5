"""Example DAG: write-audit-publish across two tables, published as ONE catalog version.

``begin`` starts a distributed transaction; two Spark SQL jobs (each its own Spark
application, Apache Iceberg's Spark runtime as a client of ``olympia serve``) write inside it,
one appending to ``sales.orders``, one merging into ``sales.payments``; ``audit`` reads both
tables inside it and fails on bad data; ``commit`` lands everything as one version. When any
of them fails, ``abort`` (trigger rule ``one_failed``) discards the transaction: readers of
the catalog see both tables change in one version, or neither change at all.

The Spark jobs run unchanged SQL against the catalog ``olympia``: only its warehouse,
``<warehouse>@txn:<id>``, puts them inside the transaction (docs/AIRFLOW.md,
"Write-audit-publish").

Copy this file alone into your dags folder; it needs pyspark and pyiceberg on the workers.

- Connection ``olympia_default`` (type ``olympia``; see olympia_catalog.py): Host is the
  catalog; the extra ``rest_uri`` is the URL of the ``olympia serve`` over it (and the extra
  ``rest_warehouse`` its warehouse, if the server was started with another ``--warehouse``
  than the catalog's ``warehouse`` property); ``spark_master`` (default ``local[2]``) is
  where the Spark jobs run, in the task's process.
- The tables ``sales.orders`` and ``sales.payments`` as ``examples/catalog`` defines them
  (the ``olympia_apply`` DAG of olympia_catalog.py creates them).
- Airflow Variable ``olympia_iceberg_spark_jars``: Iceberg's Spark runtime jars,
  comma-separated paths (default: the ``iceberg-*.jar`` files ``make install`` puts in the
  virtual environment's ``jars`` folder).

The params ``orders`` and ``payments`` are the batch to write (the defaults pass the audit).
Trigger it with ``{"payments": [{"payment_id": 9, "order_id": 999, "method": "card",
"amount": -5}]}`` to watch the audit fail and the abort discard the orders written with it.
"""

from __future__ import annotations

import sys
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Param, Variable, task
from airflow.sdk.exceptions import AirflowFailException

from olympia_provider.assets import changes_alias
from olympia_provider.hooks.olympia import OlympiaHook
from olympia_provider.operators.olympia import (
    OlympiaAbortTransactionOperator,
    OlympiaBeginTransactionOperator,
    OlympiaCommitTransactionOperator,
)

START = datetime(2026, 1, 1)
SPARK_CATALOG = "olympia"
ORDER_FIELDS = {"order_id": {"type": "integer"}, "customer_id": {"type": "integer"},
                "total": {"type": "number"}}
PAYMENT_FIELDS = {"payment_id": {"type": "integer"}, "order_id": {"type": "integer"},
                  "method": {"type": "string", "maxLength": 16}, "amount": {"type": "number"}}
PARAMS = {
    "orders": Param(
        [{"order_id": 1, "customer_id": 10, "total": 25.0},
         {"order_id": 2, "customer_id": 11, "total": 40.5}],
        type="array", description="Orders to append to sales.orders",
        items={"type": "object", "properties": ORDER_FIELDS, "required": list(ORDER_FIELDS),
               "additionalProperties": False}),
    "payments": Param(
        [{"payment_id": 1, "order_id": 1, "method": "card", "amount": 25.0},
         {"payment_id": 2, "order_id": 2, "method": "cash", "amount": 40.5}],
        type="array", description="Payments to merge into sales.payments (by payment_id)",
        items={"type": "object", "properties": PAYMENT_FIELDS,
               "required": list(PAYMENT_FIELDS), "additionalProperties": False}),
}


def _spark_session(transaction_id: str, app_name: str) -> Any:
    """A Spark session in this process whose catalog ``olympia`` is Iceberg's REST catalog
    over ``olympia serve``, inside the transaction (its warehouse ``<warehouse>@txn:<id>``)."""
    from olympia.expire import local_session

    hook = OlympiaHook()
    rest = hook.rest_catalog_properties(transaction_id)
    jars = Variable.get("olympia_iceberg_spark_jars", default="") or ",".join(
        str(jar) for jar in sorted((Path(sys.prefix) / "jars").glob("iceberg-*.jar")))
    if not jars:
        raise AirflowFailException("no Iceberg Spark runtime: set the Variable "
                                   "olympia_iceberg_spark_jars to its jars' paths")
    conf = {"spark.jars": jars, "spark.log.level": "WARN",
            "spark.sql.extensions":
                "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
            f"spark.sql.catalog.{SPARK_CATALOG}": "org.apache.iceberg.spark.SparkCatalog",
            f"spark.sql.catalog.{SPARK_CATALOG}.type": "rest",
            # other writers change these tables: no cached table metadata
            f"spark.sql.catalog.{SPARK_CATALOG}.cache-enabled": "false",
            **{f"spark.sql.catalog.{SPARK_CATALOG}.{k}": v for k, v in rest.items()}}
    return local_session(hook.spark_master, app_name=app_name, conf=conf)


with DAG("olympia_wap", schedule=None, start_date=START, catchup=False, params=PARAMS,
         tags=["olympia", "spark"],
         doc_md="Write sales.orders and sales.payments, audit them, publish both at once."):
    # The id defaults to one derived from the DAG run, which commit and abort default to.
    begin = OlympiaBeginTransactionOperator(task_id="begin", ttl="2h")

    @task
    def write_orders(transaction_id: str, *, params: Any = None, dag_run: Any = None) -> int:
        """Append the batch's orders (Spark SQL INSERT), placed at the run's time."""
        spark = _spark_session(transaction_id, "olympia-wap-orders")
        try:
            batch = spark.createDataFrame(
                [(int(o["order_id"]), int(o["customer_id"]), dag_run.run_after,
                  Decimal(str(o["total"]))) for o in params["orders"]],
                "order_id BIGINT, customer_id BIGINT, placed_at TIMESTAMP, total DECIMAL(12,2)")
            batch.createOrReplaceTempView("new_orders")
            spark.sql(f"INSERT INTO {SPARK_CATALOG}.sales.orders SELECT order_id, customer_id, "
                      "placed_at, 'placed', total, NULL, NULL FROM new_orders")
        finally:
            spark.stop()
        return len(params["orders"])

    @task
    def merge_payments(transaction_id: str, *, params: Any = None, dag_run: Any = None
                       ) -> int:
        """Insert or update the batch's payments (Spark SQL MERGE on payment_id)."""
        spark = _spark_session(transaction_id, "olympia-wap-payments")
        try:
            batch = spark.createDataFrame(
                [(int(p["payment_id"]), int(p["order_id"]), str(p["method"]),
                  Decimal(str(p["amount"])), dag_run.run_after) for p in params["payments"]],
                "payment_id BIGINT, order_id BIGINT, method STRING, amount DECIMAL(12,2), "
                "paid_at TIMESTAMP")
            batch.createOrReplaceTempView("new_payments")
            spark.sql(f"MERGE INTO {SPARK_CATALOG}.sales.payments AS t USING new_payments AS s "
                      "ON t.payment_id = s.payment_id "
                      "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
        finally:
            spark.stop()
        return len(params["payments"])

    @task
    def audit(transaction_id: str) -> dict[str, int]:
        """Read both tables inside the transaction (what the commit would publish): every
        payment names an order, and no amount is negative. Fails without retry otherwise."""
        catalog = OlympiaHook().get_iceberg_catalog(transaction_id)
        orders = catalog.load_table("sales.orders").scan(
            selected_fields=("order_id",)).to_arrow()
        payments = catalog.load_table("sales.payments").scan(
            selected_fields=("payment_id", "order_id", "amount")).to_arrow()
        known = set(orders.column("order_id").to_pylist())
        problems = [f"payment {p['payment_id']} names no order ({p['order_id']})"
                    for p in payments.to_pylist() if p["order_id"] not in known]
        problems += [f"payment {p['payment_id']} has a negative amount ({p['amount']})"
                     for p in payments.to_pylist() if p["amount"] < 0]
        if problems:
            raise AirflowFailException(f"audit failed, nothing is published: {len(problems)} "
                                       f"problems: {'; '.join(problems[:10])}")
        return {"orders": orders.num_rows, "payments": payments.num_rows}

    orders = write_orders(begin.output)
    payments = merge_payments(begin.output)
    audited = audit(begin.output)
    # the id through XCom and a template; the alias emits the catalog's Asset event
    commit = OlympiaCommitTransactionOperator(
        task_id="commit", transaction_id="{{ ti.xcom_pull(task_ids='begin') }}",
        outlets=[changes_alias()])
    # no transaction_id: the run's own, so it needs no XCom from a begin that failed
    abort = OlympiaAbortTransactionOperator(task_id="abort")
    [orders, payments] >> audited >> commit
    # Not downstream of commit: commit stays a leaf, so a failed audit fails the run (a run
    # fails when a leaf fails). A commit that meets a conflict aborts the transaction itself.
    [begin, orders, payments, audited] >> abort
