"""The ``olympia`` PySpark data source: see :func:`olympia.spark.register`."""

from __future__ import annotations

from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter

from olympia.spark.options import SourceOptions
from olympia.spark.reader import OlympiaReader, ResolvedTable
from olympia.spark.schema import spark_ddl
from olympia.spark.writer import OlympiaWriter


class OlympiaDataSource(DataSource):
    """Iceberg tables of an Olympia catalog, read and written by Spark.

    ``defaults`` holds the ``spark.olympia.*`` configuration captured by ``register``; options
    given to a read or write win over it.
    """

    defaults: ClassVar[dict[str, str]] = {}

    @classmethod
    def name(cls) -> str:
        return "olympia"

    def _parsed(self, *, write: bool) -> SourceOptions:
        return SourceOptions.parse(self.options, self.defaults, write=write)

    def _resolved(self) -> ResolvedTable:
        # schema() runs first and its instance travels on to reader(): the table is loaded
        # once, so Spark's schema and the data read come from the same catalog version
        resolved: ResolvedTable | None = getattr(self, "_table", None)
        if resolved is None:
            resolved = ResolvedTable.load(self._parsed(write=False))
            self._table = resolved
        return resolved

    def schema(self) -> str:
        """The table's columns, or those the ``columns`` option names (Spark calls this
        only when the read was given no schema)."""
        resolved = self._resolved()
        return spark_ddl(resolved.project(self._parsed(write=False).columns), resolved.name)

    def reader(self, schema: Any) -> DataSourceReader:
        """Spark passes the DataFrame's schema (``schema()``'s or one given to the read,
        never the query's projection): the reader reads only its columns."""
        return OlympiaReader(self._resolved(), self._parsed(write=False), schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return OlympiaWriter.create(self._parsed(write=True), schema, overwrite)
