"""The ``olympia`` PySpark data source: see :func:`olympia.spark.register`."""

from __future__ import annotations

from typing import Any, ClassVar

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter

from olympia.exceptions import InvalidArgumentError
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

    def _parsed(self) -> SourceOptions:
        return SourceOptions.parse(self.options, self.defaults)

    def _resolved(self) -> ResolvedTable:
        # schema() runs first and its instance travels on to reader(): the table is loaded
        # once, so Spark's schema and the data read come from the same catalog version
        resolved: ResolvedTable | None = getattr(self, "_table", None)
        if resolved is None:
            resolved = ResolvedTable.load(self._parsed())
            self._table = resolved
        return resolved

    def schema(self) -> str:
        resolved = self._resolved()
        return spark_ddl(resolved.schema, resolved.name)

    def reader(self, schema: Any) -> DataSourceReader:
        resolved = self._resolved()
        names = [f.name for f in resolved.schema.fields]
        if list(schema.fieldNames()) != names:
            raise InvalidArgumentError(
                f"table {resolved.name} has the columns {', '.join(names)}; a schema given "
                "to the reader must name the same ones (or leave the schema out)")
        return OlympiaReader(resolved, self._parsed(), schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return OlympiaWriter.create(self._parsed(), schema, overwrite)
