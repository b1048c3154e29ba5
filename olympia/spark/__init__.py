"""Spark reads and writes Iceberg tables of an Olympia catalog through a PySpark data source.

::

    import olympia.spark
    olympia.spark.register(spark)
    df = spark.read.format("olympia").option("catalog", "s3://lake/catalog").load("sales.orders")
    df.write.format("olympia").option("catalog", "s3://lake/catalog").mode("append") \\
        .save("sales.orders")

Needs pyspark 4.1+ (Python data sources with filter pushdown) and pyiceberg; executors need
this package installed. See docs/SPARK.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from olympia.spark.options import CONF_PREFIX, PARALLELISM, properties_from_storage_options

if TYPE_CHECKING:
    from olympia.spark.source import OlympiaDataSource

__all__ = ["properties_from_storage_options", "register", "write"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> type[OlympiaDataSource]:
    """Register the ``olympia`` data source with a SparkSession.

    The Spark configuration ``spark.olympia.<option>`` (``spark.olympia.catalog``,
    ``spark.olympia.s3.endpoint``, ...) is captured now as the default of every option, with
    ``spark.default.parallelism`` as the planning target; set it before registering (or
    register again). Filter pushdown for Python data sources is switched on for the session.

    Returns:
        The registered DataSource class.
    """
    from olympia.spark.source import OlympiaDataSource

    conf = dict(spark.sparkContext.getConf().getAll())
    conf.update({k: v for k, v in _session_conf(spark).items() if k.startswith(CONF_PREFIX)})
    defaults = {k[len(CONF_PREFIX):].lower(): v for k, v in conf.items()
                if k.startswith(CONF_PREFIX)}
    defaults.setdefault(PARALLELISM, str(spark.sparkContext.defaultParallelism))
    # a class made here is pickled by value, so the defaults travel with it to the workers
    source: type[OlympiaDataSource] = type(
        "RegisteredOlympiaDataSource", (OlympiaDataSource,),
        {"defaults": defaults, "__doc__": OlympiaDataSource.__doc__})
    spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(source)
    return source


def _session_conf(spark: Any) -> dict[str, str]:
    """Runtime SQL configuration set on the session (``spark.conf.set``)."""
    try:
        return dict(spark.conf.getAll)
    except (AttributeError, TypeError):
        return {}


def write(df: Any, table: str, *, catalog: str | None = None, mode: str = "append",
          options: dict[str, str] | None = None) -> None:
    """Write ``df`` to ``table`` distributed by the table's partition spec and sorted by its
    sort order: see :func:`olympia.spark.distribute.write` (imported lazily, so importing
    this package needs no pyspark)."""
    from olympia.spark.distribute import write as distributed_write

    distributed_write(df, table, catalog=catalog, mode=mode, options=options)
