"""Helpers shared by the Iceberg catalog tests: catalogs on local disk and on the S3 server."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa

from olympia.iceberg import OlympiaCatalog

#: Apache Iceberg's Spark runtime and its S3 file IO, put in the venv by `make install`.
ICEBERG_SPARK_JARS = sorted((Path(sys.prefix) / "jars").glob("iceberg-*.jar"))

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


def rows(start: int, count: int = 3) -> pa.Table:
    """``count`` rows with ids from ``start``, in the table schema."""
    ids = list(range(start, start + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids]},
                    schema=SCHEMA)


def local_properties(tmp_path: Path, name: str = "catalog") -> dict[str, str]:
    return {"uri": str(tmp_path / name), "warehouse": f"file://{tmp_path}/warehouse",
            "olympia.create": "true"}


def s3_properties(server: Any, prefix: str) -> dict[str, str]:
    opts = server.storage_options
    return {"uri": f"s3://{server.bucket}/{prefix}/catalog",
            "warehouse": f"s3://{server.bucket}/{prefix}/warehouse",
            "s3.endpoint": server.endpoint_url, "s3.access-key-id": opts["key"],
            "s3.secret-access-key": opts["secret"], "s3.region": "us-east-1",
            # pyarrow's multipart uploads are refused by SeaweedFS with unknown keys; s3fs
            # puts small files whole
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO", "olympia.create": "true"}


def open_catalog(properties: dict[str, str], name: str = "test") -> OlympiaCatalog:
    return OlympiaCatalog(name, **properties)


def sorted_rows(table: pa.Table) -> pa.Table:
    """``table`` in id order with the test schema (for exact comparisons)."""
    return table.sort_by("id").cast(SCHEMA)


def sales_catalog(tmp_path: Path) -> OlympiaCatalog:
    """A new catalog on local disk with tables ``sales.a`` and ``sales.b`` of 3 rows each."""
    catalog = open_catalog(local_properties(tmp_path))
    catalog.create_namespace("sales")
    for name in ("a", "b"):
        catalog.create_table(("sales", name), SCHEMA).append(rows(0))
    return catalog
