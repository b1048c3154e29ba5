"""What the olympia source writes on local[2]: nullable columns filling required fields
(check-nullability=false), optional columns left out, the table's current schema, files
distributed and sorted by olympia.spark.write, files rolled at the target size, and Spark's
partitionBy."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from iceberg_helpers import local_properties
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

import olympia.spark
from olympia.iceberg import OlympiaCatalog

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def source(spark: Any) -> Iterator[Any]:
    olympia.spark.register(spark)
    yield spark


@pytest.fixture
def properties(tmp_path: Path) -> dict[str, str]:
    return local_properties(tmp_path)


def options(properties: dict[str, str], **extra: str) -> dict[str, str]:
    out = {k: v for k, v in properties.items() if k != "uri"}
    out["catalog"] = properties["uri"]
    return {**out, **extra}


def write(df: Any, properties: dict[str, str], table: str, mode: str = "append",
          **extra: str) -> None:
    df.write.format("olympia").options(**options(properties, **extra)).mode(mode).save(table)


UNPARTITIONED = PartitionSpec()


def new_table(where: dict[str, str], schema: Schema, spec: PartitionSpec = UNPARTITIONED,
              **kwargs: Any) -> tuple[str, OlympiaCatalog]:
    catalog = OlympiaCatalog("test", **where)
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    catalog.create_table(f"{namespace}.t", schema, partition_spec=spec, **kwargs)
    return f"{namespace}.t", catalog


def stored(catalog: OlympiaCatalog, table: str) -> set[str]:
    location = catalog.load_table(table).location().removeprefix("file://")
    return {str(p) for p in Path(location).rglob("*.parquet")}


# --- nullability and columns ----------------------------------------------------------------

REQUIRED = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "note", StringType(), required=False),
)


def test_check_nullability_false_lets_a_nullable_column_fill_a_required_one(
        source: Any, properties: dict[str, str]) -> None:
    spark = source
    table, catalog = new_table(properties, REQUIRED)
    nullable = spark.range(100, numPartitions=2).selectExpr(
        "IF(id < 0, NULL, id) AS id", "concat('n', id) AS name", "'x' AS note")
    assert nullable.schema["id"].nullable
    with pytest.raises(Exception, match=rf"table {table}: .*nullable DataFrame columns for "
                                        r"required table columns: id"):
        write(nullable, properties, table)
    write(nullable, properties, table, **{"check-nullability": "false"})
    assert catalog.load_table(table).scan().count() == 100

    version, files = catalog.olympia.refresh(), stored(catalog, table)
    # a null first in each task: no task gets to write a file that outlives the job's abort
    with_null = spark.range(100, numPartitions=2).selectExpr(
        "IF(id % 50 = 0, NULL, id) AS id", "concat('n', id) AS name", "'x' AS note")
    with pytest.raises(Exception, match=rf"table {table}: column id is required but a "
                                        r"written row holds a null"):
        write(with_null, properties, table, **{"check-nullability": "false"})
    assert catalog.olympia.refresh() == version
    assert stored(catalog, table) == files


def test_appends_may_leave_out_optional_columns_of_the_current_schema(
        source: Any, properties: dict[str, str]) -> None:
    spark = source
    table, catalog = new_table(properties, REQUIRED)
    write(spark.range(10).selectExpr("id", "concat('n', id) AS name"), properties, table)
    with catalog.load_table(table).update_schema() as update:  # what `olympia apply` does
        update.add_column("score", IntegerType())
    # the writer reads the table's current schema: the new column may be left out or given
    write(spark.range(10, 20).selectExpr("id", "'m' AS note"), properties, table)
    write(spark.range(20, 30).selectExpr("id", "CAST(id AS INT) AS score"), properties, table)
    got = {r["id"]: r for r in catalog.load_table(table).scan().to_arrow().to_pylist()}
    assert len(got) == 30
    assert got[1] == {"id": 1, "name": "n1", "note": None, "score": None}
    assert got[11] == {"id": 11, "name": None, "note": "m", "score": None}
    assert got[21] == {"id": 21, "name": None, "note": None, "score": 21}
    with pytest.raises(Exception, match=rf"table {table}: .*missing required columns id"):
        write(spark.range(5).selectExpr("'a' AS name"), properties, table)


# --- well-shaped files ----------------------------------------------------------------------

SHAPED = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "score", LongType(), required=False),
)
BUCKETS = 50
ORDER = SortOrder(SortField(source_id=3, transform=IdentityTransform(),
                            direction=SortDirection.ASC, null_order=NullOrder.NULLS_FIRST),
                  SortField(source_id=2, transform=IdentityTransform(),
                            direction=SortDirection.DESC, null_order=NullOrder.NULLS_LAST))


def shaped_rows(spark: Any, count: int) -> Any:
    return spark.range(count, numPartitions=4).selectExpr(
        "id", "concat('n', id % 997) AS name", "IF(id % 101 = 0, NULL, (id * 7919) % 1000) "
        "AS score")


def in_order(rows: list[dict[str, Any]]) -> bool:
    """Whether ``rows`` follow ORDER: score ascending nulls first, then name descending."""
    def key(row: dict[str, Any]) -> tuple[Any, ...]:
        score = row["score"]
        return (score is not None, score if score is not None else 0,
                [-ord(c) for c in row["name"]] + [1])  # descending names, prefixes last
    keys = [key(r) for r in rows]
    return keys == sorted(keys)


def test_write_helper_distributes_and_sorts_by_the_table(
        source: Any, properties: dict[str, str]) -> None:
    """100k rows into 50 bucket partitions through olympia.spark.write: at most 2 files per
    partition (1 here: a partition value goes to one task), each sorted by the table's sort
    order, which the data files record; the plain source writes one file per partition per
    task and records no sort order."""
    spark = source
    count = 100_000
    spec = PartitionSpec(PartitionField(1, 1000, BucketTransform(BUCKETS), "id_bucket"))
    table, catalog = new_table(properties, SHAPED, spec, sort_order=ORDER)
    order_id = catalog.load_table(table).metadata.default_sort_order_id
    assert order_id != 0
    olympia.spark.write(shaped_rows(spark, count), table, catalog=properties["uri"],
                        options=options(properties))

    iceberg = catalog.load_table(table)
    files = [task.file for task in iceberg.scan().plan_files()]
    per_partition: dict[int, int] = {}
    for data_file in files:
        per_partition[data_file.partition[0]] = per_partition.get(data_file.partition[0], 0) + 1
    assert len(per_partition) == BUCKETS
    assert max(per_partition.values()) <= 2
    assert sum(f.record_count for f in files) == count
    assert {f.sort_order_id for f in files} == {order_id}
    for data_file in files:
        rows = pq.read_table(data_file.file_path.removeprefix("file://")).to_pylist()
        assert in_order(rows), data_file.file_path
    assert iceberg.scan().to_arrow().num_rows == count

    plain, plain_catalog = new_table(properties, SHAPED, spec, sort_order=ORDER)
    write(shaped_rows(spark, 10_000), properties, plain)
    plain_files = [t.file for t in plain_catalog.load_table(plain).scan().plan_files()]
    assert {f.sort_order_id for f in plain_files} == {None}
    assert len(plain_files) > BUCKETS  # rows of a bucket in every input partition
    # the option is checked, never trusted: unsorted rows that claim the order are refused
    version = plain_catalog.olympia.refresh()
    with pytest.raises(Exception, match=rf"table {plain}: option sort-order-id says the rows "
                                        rf"follow sort order {order_id}, but"):
        write(shaped_rows(spark, 10_000), properties, plain, **{"sort-order-id": str(order_id)})
    assert plain_catalog.olympia.refresh() == version


def test_write_helper_overwrite_keeps_to_the_written_partitions(
        source: Any, properties: dict[str, str]) -> None:
    spark = source
    spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "id"))
    table, catalog = new_table(properties, SHAPED, spec)
    olympia.spark.write(shaped_rows(spark, 6), table, catalog=properties["uri"],
                        options=options(properties))
    olympia.spark.write(shaped_rows(spark, 2).selectExpr("id", "'new' AS name", "score"),
                        table, catalog=properties["uri"], mode="overwrite",
                        options=options(properties, partitionOverwriteMode="dynamic"))
    got = {r["id"]: r["name"] for r in catalog.load_table(table).scan().to_arrow().to_pylist()}
    assert got == {0: "new", 1: "new", 2: "n2", 3: "n3", 4: "n4", 5: "n5"}


def test_files_roll_at_the_target_size(source: Any, properties: dict[str, str]) -> None:
    """The target-file-size-bytes option, else the table's write.target-file-size-bytes:
    a task closes a file once it reaches the target and goes on in a new one."""
    spark = source
    target = 256 * 1024
    count = 200_000
    df = spark.range(count, numPartitions=1).selectExpr(
        "id", "sha2(CAST(id AS STRING), 256) AS name", "id * 3 AS score")
    by_option, catalog = new_table(properties, SHAPED)
    write(df, properties, by_option, **{"target-file-size-bytes": str(target)})
    by_property, _ = new_table(properties, SHAPED,
                               properties={"write.target-file-size-bytes": str(target)})
    write(df, properties, by_property)
    for table in (by_option, by_property):
        files = [t.file for t in catalog.load_table(table).scan().plan_files()]
        assert len(files) >= 4
        assert sum(f.record_count for f in files) == count
        sizes = sorted(f.file_size_in_bytes for f in files)
        assert all(size >= target for size in sizes[1:])  # all but the task's last one
        assert sizes[-1] < 4 * target


def test_partition_by_is_refused(source: Any, properties: dict[str, str]) -> None:
    """Spark checks partitionBy against the table's (empty, to Spark) partitioning before the
    source is asked: its own message; the table's partition spec partitions the data."""
    spark = source
    table, catalog = new_table(properties, SHAPED)
    with pytest.raises(Exception, match="partitioning"):
        spark.range(5).selectExpr("id", "'a' AS name", "id AS score").write \
            .format("olympia").options(**options(properties)).partitionBy("score") \
            .mode("append").save(table)
    assert catalog.load_table(table).current_snapshot() is None
