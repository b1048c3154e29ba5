"""Example DAGs: a PySpark job writes an Iceberg table of the Olympia catalog, and a DAG
scheduled on that table's Asset reads it at the catalog version the write committed.

Copy this file alone into your dags folder. It uses the connection ``olympia_default`` (type
``olympia``; see olympia_catalog.py): its Host is the catalog, its storage options (and login
and password) reach the data source as pyiceberg ``s3.*`` properties, and the extra
``iceberg_properties`` (a JSON object) adds any other catalog property, e.g. ``warehouse``
or ``py-io-impl``. Spark runs in the task's process on ``spark_master`` of the connection
(default ``local[2]``), as the expiry operator does; the tasks need pyspark and pyiceberg.

``olympia_spark_write`` appends a day of orders to ``sales.daily_orders`` (creating the
namespace and table the first time) and emits that table's Asset event with the catalog
version it committed; ``olympia_spark_report`` runs on that event and reads the table at
that version, so later commits do not change what it reports.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task
from airflow.sdk.exceptions import AirflowNotFoundException

from olympia_provider.assets import object_asset
from olympia_provider.hooks.olympia import OlympiaHook

TABLE = "sales.daily_orders"
ROWS = 1000
try:
    CATALOG_URI = OlympiaHook().settings()[0]
except AirflowNotFoundException:  # no connection yet: the DAGs still load
    CATALOG_URI = "file:///opt/olympia/warehouse"
ORDERS = object_asset(CATALOG_URI, TABLE)
START = datetime(2026, 1, 1)


def _spark_and_options() -> tuple[Any, dict[str, str]]:
    """An in-process SparkSession with the olympia data source, and the source's options."""
    import olympia.spark
    from olympia.expire import local_session

    hook = OlympiaHook()
    uri, storage = hook.settings()
    extra = hook.get_connection(hook.olympia_conn_id).extra_dejson or {}
    options = {**olympia.spark.properties_from_storage_options(storage, uri),
               **{k: str(v) for k, v in (extra.get("iceberg_properties") or {}).items()},
               "catalog": uri}
    spark = local_session(hook.spark_master, app_name="olympia-spark-example")
    olympia.spark.register(spark)
    return spark, options


with DAG("olympia_spark_write", schedule=None, start_date=START, catchup=False,
         tags=["olympia", "spark"], doc_md="Append a day of orders with PySpark."):

    @task(outlets=[ORDERS])
    def write_orders(*, outlet_events: Any = None, ds: str | None = None) -> dict[str, Any]:
        """Append ROWS orders for the run's date; the Asset event carries the version."""
        from pyiceberg.schema import Schema
        from pyiceberg.types import DateType, DoubleType, LongType, NestedField

        from olympia.spark.options import SourceOptions

        spark, options = _spark_and_options()
        try:
            catalog = SourceOptions.parse({**options, "path": TABLE}, {}).open_catalog()
            catalog.create_namespace_if_not_exists("sales")
            catalog.create_table_if_not_exists(TABLE, Schema(
                NestedField(1, "order_id", LongType(), required=False),
                NestedField(2, "day", DateType(), required=False),
                NestedField(3, "amount", DoubleType(), required=False)))
            orders = spark.range(ROWS).selectExpr(
                "id AS order_id", f"DATE'{ds or '2026-01-01'}' AS day",
                "CAST(id % 97 AS DOUBLE) AS amount")
            orders.write.format("olympia").options(**options).mode("append").save(TABLE)
            table = catalog.load_table(TABLE)
            version = catalog.olympia.refresh()
        finally:
            spark.stop()
        result = {"version": version, "snapshot_id": table.metadata.current_snapshot_id}
        outlet_events[ORDERS].extra = result
        return result

    write_orders()

with DAG("olympia_spark_report", schedule=[ORDERS], start_date=START, catchup=False,
         tags=["olympia", "spark"], doc_md="Read the orders at the version that changed them."):

    @task(inlets=[ORDERS])
    def report(*, triggering_asset_events: Any = None, inlet_events: Any = None
               ) -> dict[str, Any]:
        """Rows and total amount of the table at the version of the triggering event (the
        latest event of the Asset when started by hand)."""
        triggered = list(triggering_asset_events[ORDERS]) if triggering_asset_events else []
        event = triggered[-1] if triggered else inlet_events[ORDERS][-1]
        version = int(event.extra["version"])
        spark, options = _spark_and_options()
        try:
            orders = spark.read.format("olympia").options(**options) \
                .option("version", str(version)).load(TABLE)
            row = orders.selectExpr("count(*) AS n", "sum(amount) AS total").collect()[0]
        finally:
            spark.stop()
        return {"version": version, "rows": int(row["n"]), "total": float(row["total"] or 0)}

    report()
