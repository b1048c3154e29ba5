"""Spark reads and writes Iceberg tables of an Olympia catalog through a PySpark data source.

::

    import olympia.spark
    olympia.spark.register(spark)
    df = spark.read.format("olympia").option("catalog", "s3://lake/catalog").load("sales.orders")
    df.write.format("olympia").option("catalog", "s3://lake/catalog").mode("append") \\
        .save("sales.orders")

Needs pyspark 4.1+ (Python data sources) and pyiceberg; executors need
this package installed. See docs/SPARK.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from olympia.spark.options import CONF_PREFIX, PARALLELISM, properties_from_storage_options

if TYPE_CHECKING:
    from olympia.spark.source import OlympiaDataSource

__all__ = ["properties_from_storage_options", "register", "write"]


def register(spark: Any) -> type[OlympiaDataSource]:
    """Register the ``olympia`` data source with a SparkSession.

    The Spark configuration ``spark.olympia.<option>`` (``spark.olympia.catalog``,
    ``spark.olympia.s3.endpoint``, ...) is captured now as the default of every option, with
    ``spark.default.parallelism`` as the planning target; set it before registering (or
    register again).

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
    """Write ``df`` to ``table`` through the ``olympia`` source with well-shaped files.

    The rows are distributed by the table's partition spec (each row's Iceberg partition
    value computed with pyiceberg's transforms; all rows of one value go to one task) and
    sorted within each task by partition value, then by the table's sort order. Each task
    writes one file per partition value (more only past ``target-file-size-bytes``), sorted
    as the table declares, and the data files record the sort order's id. Registers the
    source with the DataFrame's session (:func:`register`).

    Args:
        df: the rows; columns named as the table's (optional ones may be left out).
        table: ``namespace.table``.
        catalog: the catalog URI (else the ``catalog`` option or ``spark.olympia.catalog``).
        mode: ``append`` or ``overwrite`` (static, dynamic or ``replaceWhere``: see
            docs/SPARK.md, Overwriting safely; the session's partitionOverwriteMode is passed
            as the option when neither it nor ``replaceWhere`` is given).
        options: further write options and catalog properties (``partitionOverwriteMode``,
            ``replaceWhere``, ``target-file-size-bytes``, ``s3.endpoint``, ...).

    Returns:
        None, once the job's snapshot is committed (one catalog version).

    Raises:
        InvalidArgumentError: another mode, an option the source refuses, or a partition or
            sort field on a nested column; nothing is written.
        NoSuchTableError: the table does not exist.
        CommitConflict: a commit since the job started conflicts with it; its files are
            deleted.
    """
    from olympia.spark.distribute import write as distributed_write

    distributed_write(df, table, catalog=catalog, mode=mode, options=options)
