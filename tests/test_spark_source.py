"""The olympia PySpark data source on local[2]: partitioned writes read back exactly, pushed
filters skip files (counted by the planner's log line in Spark's Python worker logs),
overwrite, failed jobs, concurrent appends, catalog-version time travel, local disk and the
real S3 server."""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from iceberg_helpers import local_properties, s3_properties
from pyiceberg.expressions import AlwaysTrue, EqualTo
from pyiceberg.io import InputFile
from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestWriterV2,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation
from pyiceberg.table.update.snapshot import _FastAppendFiles
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)
from pyspark import InheritableThread

import olympia.spark
from olympia import exceptions as oe
from olympia import versions
from olympia.iceberg import OlympiaCatalog
from olympia.spark.options import SourceOptions
from olympia.spark.reader import OlympiaReader, ResolvedTable, group
from olympia.spark.schema import arrow_schema
from olympia.spark.writer import OlympiaWriter

pytestmark = pytest.mark.spark

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "part", IntegerType(), required=False),
    NestedField(4, "ts", TimestamptzType(), required=False),
    NestedField(5, "amount", DecimalType(12, 2), required=False),
)
SPEC = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "part"))
PARTS = 4
PLANNED = re.compile(r"olympia scan of table (\S+) at catalog version (\d+), snapshot \S+: "
                     r"(\d+) of (\d+) data files planned")
COLUMNS_READ = re.compile(r"olympia scan of table (\S+) at .*; (\d+) of (\d+) columns read, "
                          r"(\d+) of (\d+) bytes of column chunks")


@pytest.fixture(scope="module")
def source(spark: Any) -> Iterator[Any]:
    """The olympia data source registered, with Python worker logs collected (the planner's
    log line is how the tests count the files a scan plans)."""
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    olympia.spark.register(spark)
    yield spark
    spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    """Catalog properties on local disk or on the S3 server."""
    if request.param == "local":
        return local_properties(tmp_path)
    return s3_properties(request.getfixturevalue("s3_server"), uuid.uuid4().hex[:12])


def open_catalog(properties: dict[str, str]) -> OlympiaCatalog:
    return OlympiaCatalog("test", **properties)


def options(properties: dict[str, str]) -> dict[str, str]:
    """Reader/writer options: the catalog URI and every other property as it is."""
    out = {k: v for k, v in properties.items() if k != "uri"}
    out["catalog"] = properties["uri"]
    return out


def rows(spark: Any, count: int, start: int = 0) -> Any:
    return spark.range(start, start + count, numPartitions=2).selectExpr(
        "id", "concat('n', id) AS name", f"CAST(id % {PARTS} AS INT) AS part",
        "timestamp_seconds(1700000000 + id) AS ts",
        "CAST(id / 100 AS DECIMAL(12, 2)) AS amount")


def checksum(df: Any) -> tuple[int, int]:
    """Row count and an order-independent hash of every value."""
    row = df.selectExpr("count(*) AS n", "sum(CAST(xxhash64(id, name, part, ts, amount) "
                        "AS DECIMAL(38, 0))) AS h").collect()[0]
    return int(row["n"]), int(row["h"] or 0)


def read(spark: Any, properties: dict[str, str], table: str, **extra: str) -> Any:
    return spark.read.format("olympia").options(**options(properties), **extra).load(table)


def write(df: Any, properties: dict[str, str], table: str, mode: str = "append") -> None:
    df.write.format("olympia").options(**options(properties)).mode(mode).save(table)


def planned(spark: Any, table: str) -> list[tuple[int, int]]:
    """(files planned, data files in the snapshot) of every scan of ``table`` so far (the
    log is not in time order)."""
    out = []
    for row in spark.tvf.python_worker_logs().select("msg").collect():
        match = PLANNED.search(row["msg"] or "")
        if match and match.group(1) == table:
            out.append((int(match.group(3)), int(match.group(4))))
    return out


def new_table(properties: dict[str, str], spec: PartitionSpec = SPEC) -> tuple[str, Any]:
    catalog = open_catalog(properties)
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    catalog.create_table(f"{namespace}.orders", SCHEMA, partition_spec=spec)
    return f"{namespace}.orders", catalog


def data_files(catalog: OlympiaCatalog, table: str) -> list[Any]:
    return [task.file for task in catalog.load_table(table).scan().plan_files()]


def stored_files(properties: dict[str, str], table: str) -> set[str]:
    """Every Parquet file under the table's location, as the storage lists it."""
    location = open_catalog(properties).load_table(table).location()
    io = open_catalog(properties).load_table(table).io
    if location.startswith("file://"):
        return {str(p) for p in Path(location[len("file://"):]).rglob("*.parquet")}
    fs = io.get_fs("s3")
    return {p for p in fs.find(location[len("s3://"):]) if p.endswith(".parquet")}


# --- reads and writes ---------------------------------------------------------------------


def test_partitioned_write_reads_back_exactly(source: Any, where: dict[str, str]) -> None:
    spark = source
    count = 1_000_000
    table, catalog = new_table(where)
    version = catalog.olympia.refresh()
    df = rows(spark, count)
    write(df, where, table)

    assert catalog.olympia.refresh() == version + 1  # one catalog version
    iceberg = catalog.load_table(table)
    assert len(iceberg.metadata.snapshots) == 1  # one snapshot, with the files' stats
    assert iceberg.current_snapshot().summary["added-records"] == str(count)
    files = data_files(catalog, table)
    # partitioned by the table's spec: one file per partition value per task
    assert sorted(f.partition[0] for f in files) == sorted(list(range(PARTS)) * 2)
    assert all(f.record_count > 0 and f.lower_bounds and f.value_counts for f in files)
    assert sum(f.record_count for f in files) == count
    # pyiceberg reads what Spark wrote, partition by partition
    for part in range(PARTS):
        assert iceberg.scan(row_filter=EqualTo("part", part)).count() == count // PARTS

    back = read(spark, where, table)
    assert back.schema.simpleString() == (
        "struct<id:bigint,name:string,part:int,ts:timestamp,amount:decimal(12,2)>")
    assert checksum(back) == checksum(df)
    assert checksum(back.where("part = 1")) == checksum(df.where("part = 1"))
    total = len(files)
    # planned once for the DataFrame (Spark keeps a source's planned partitions), every file
    assert planned(spark, table) == [(total, total)]


def test_transforms_partition_like_pyiceberg(source: Any, tmp_path: Path) -> None:
    """bucket and day (pyiceberg's per-value transforms when pyiceberg-core is absent)."""
    from pyspark.sql.functions import expr

    spark = source
    properties = local_properties(tmp_path)
    spec = PartitionSpec(PartitionField(1, 1000, BucketTransform(3), "id_bucket"),
                         PartitionField(4, 1001, DayTransform(), "ts_day"))
    table, catalog = new_table(properties, spec)
    df = rows(spark, 3_000).withColumn("ts", expr("timestamp_seconds(1700000000 + id * 60)"))
    write(df, properties, table)
    iceberg = catalog.load_table(table)
    bucket = BucketTransform(3).transform(LongType())
    day = DayTransform().transform(TimestamptzType())
    files = data_files(catalog, table)
    expected = {(bucket(i), day((1700000000 + i * 60) * 10**6)) for i in range(3_000)}
    assert {tuple(f.partition) for f in files} == expected
    for task in iceberg.scan().plan_files():
        got = ArrowScan(iceberg.metadata, iceberg.io, iceberg.schema(), AlwaysTrue()) \
            .to_table([task])
        micros = got.column("ts").cast("int64").to_pylist()
        assert {(bucket(i), day(t)) for i, t in zip(got.column("id").to_pylist(), micros,
                                                     strict=True)} == {tuple(task.file.partition)}
    assert checksum(read(spark, properties, table)) == checksum(df)


def test_types_round_trip(source: Any, tmp_path: Path) -> None:
    """Every type the source maps: pyiceberg writes, Spark reads; Spark writes back, pyiceberg
    reads the same values."""
    spark = source
    properties = local_properties(tmp_path)
    catalog = open_catalog(properties)
    catalog.create_namespace("types")
    fields = [
        NestedField(1, "b", BooleanType(), required=False),
        NestedField(2, "i", IntegerType(), required=True),
        NestedField(3, "f", FloatType(), required=False),
        NestedField(4, "d", DoubleType(), required=False),
        NestedField(5, "dec", DecimalType(9, 3), required=False),
        NestedField(6, "day", DateType(), required=False),
        NestedField(7, "ts", TimestampType(), required=False),
        NestedField(8, "tstz", TimestamptzType(), required=False),
        NestedField(9, "s", StringType(), required=False),
        NestedField(10, "bin", BinaryType(), required=False),
        NestedField(11, "st", StructType(NestedField(12, "x", LongType(), required=False),
                                         NestedField(13, "y", StringType(), required=False)),
                    required=False),
        NestedField(14, "l", ListType(15, LongType(), element_required=False), required=False),
        NestedField(16, "m", MapType(17, StringType(), 18, DoubleType(), value_required=False),
                    required=False),
    ]
    source_table = catalog.create_table("types.all", Schema(*fields))
    data = pa.Table.from_pylist([
        {"b": True, "i": 1, "f": 1.5, "d": 2.5, "dec": Decimal("12.345"),
         "day": date(2026, 1, 2), "ts": datetime(2026, 1, 2, 3, 4, 5, 6),
         "tstz": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "s": "héllo", "bin": b"\x00\x01",
         "st": {"x": 7, "y": "z"}, "l": [1, None, 3], "m": [("k", 1.0), ("v", None)]},
        {"b": None, "i": 2, "f": None, "d": -0.0, "dec": None, "day": None, "ts": None,
         "tstz": None, "s": None, "bin": None, "st": None, "l": None, "m": None},
    ], schema=source_table.schema().as_arrow())
    source_table.append(data)
    df = read(spark, properties, "types.all")
    assert df.schema.simpleString() == (
        "struct<b:boolean,i:int,f:float,d:double,dec:decimal(9,3),day:date,ts:timestamp_ntz,"
        "tstz:timestamp,s:string,bin:binary,st:struct<x:bigint,y:string>,l:array<bigint>,"
        "m:map<string,double>>")
    assert not df.schema["i"].nullable and df.schema["b"].nullable
    got = {r["i"]: r for r in df.collect()}
    assert got[1]["dec"] == Decimal("12.345") and got[1]["ts"] == datetime(2026, 1, 2, 3, 4, 5, 6)
    assert got[1]["st"].asDict() == {"x": 7, "y": "z"} and got[1]["l"] == [1, None, 3]
    assert got[1]["m"] == {"k": 1.0, "v": None} and got[1]["bin"] == bytearray(b"\x00\x01")
    assert got[2]["s"] is None and got[2]["l"] is None

    catalog.create_table("types.copy", Schema(*fields))
    write(df, properties, "types.copy")
    expected = source_table.scan().to_arrow().sort_by("i")
    copied = catalog.load_table("types.copy").scan().to_arrow().sort_by("i")
    assert copied.to_pylist() == expected.to_pylist()


def test_a_filtered_query_never_narrows_a_later_query_of_the_dataframe(
        source: Any, where: dict[str, str]) -> None:
    """Spark 4.3 reuses the partitions a filter pushdown planned for a later query of the same
    DataFrame that pushes nothing: the source plans every file, whatever the query."""
    spark = source
    table, _ = new_table(where)
    df = rows(spark, 20_000)
    write(df, where, table)
    full = read(spark, where, table)
    assert full.where("id = 12345").collect()[0].asDict() == \
        df.where("id = 12345").collect()[0].asDict()
    assert checksum(full.where("part = 1")) == checksum(df.where("part = 1"))
    assert full.count() == 20_000
    assert checksum(full.where("id < 500 OR name LIKE '%7'")) == \
        checksum(df.where("id < 500 OR name LIKE '%7'"))
    assert full.where("part = 2").count() == df.where("part = 2").count()
    assert checksum(full) == checksum(df)


class _CountedReads:
    """A data file opened for reading, counting the bytes read from it."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.closed = raw, False

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        CountingFileIO.bytes_read += len(data)
        return bytes(data)

    def seek(self, position: int, whence: int = 0) -> int:
        return int(self.raw.seek(position, whence))

    def tell(self) -> int:
        return int(self.raw.tell())

    def close(self) -> None:
        self.raw.close()
        self.closed = True


class _CountedInput(InputFile):
    def __init__(self, inner: InputFile) -> None:
        super().__init__(inner.location)
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def exists(self) -> bool:
        return self.inner.exists()

    def open(self, seekable: bool = True) -> Any:
        return pa.PythonFile(_CountedReads(self.inner.open(seekable)), mode="r")


class CountingFileIO(PyArrowFileIO):
    """pyiceberg's own FileIO, counting the bytes read through it (py-io-impl of a read
    made in this process)."""

    bytes_read: ClassVar[int] = 0

    def new_input(self, location: str) -> InputFile:
        return _CountedInput(super().new_input(location))


def test_a_read_of_some_columns_reads_only_theirs(source: Any, tmp_path: Path) -> None:
    """Spark does not pass a query's projection to a Python data source: a schema given to
    the read, or the columns option, chooses the columns, and only theirs are read."""
    spark = source
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties, PartitionSpec())  # two files (a task's each)
    df = rows(spark, 200_000)
    write(df, properties, table)
    # the writer dictionary-encodes only the columns with few distinct values
    for data_file in data_files(catalog, table):
        chunks = pq.ParquetFile(data_file.file_path[len("file://"):]).metadata.row_group(0)
        assert {chunks.column(i).path_in_schema: chunks.column(i).has_dictionary_page
                for i in range(chunks.num_columns)} == {
            "id": False, "name": False, "part": True, "ts": False, "amount": False}

    by_option = read(spark, properties, table, columns="amount, id")
    assert by_option.columns == ["amount", "id"]
    assert sorted(by_option.collect()) == sorted(df.select("amount", "id").collect())
    by_schema = spark.read.format("olympia").options(**options(properties)) \
        .schema("part INT").load(table)
    assert by_schema.where("part = 1").count() == 200_000 // PARTS
    counters = {}
    for row in spark.tvf.python_worker_logs().select("msg").collect():
        match = COLUMNS_READ.search(row["msg"] or "")
        if match and match.group(1) == table:
            columns, chunks, all_chunks = (int(match.group(i)) for i in (2, 4, 5))
            counters[columns] = (chunks, all_chunks, int(match.group(3)))
    assert sorted(counters) == [1, 2]
    assert all(0 < chunks < all_chunks and total == 5
               for chunks, all_chunks, total in counters.values())
    with pytest.raises(Exception, match="has no columns nope"):
        read(spark, properties, table, columns="id,nope").schema  # noqa: B018

    # the bytes pyarrow reads from the files, counted below pyiceberg's FileIO
    parsed = SourceOptions.parse({**options(properties), "path": table}, {})
    resolved = ResolvedTable.load(parsed)
    resolved = dataclasses.replace(resolved, io_properties={
        **resolved.io_properties, "py-io-impl": f"{__name__}.CountingFileIO"})

    def bytes_read(schema: Any) -> tuple[int, int]:
        reader = OlympiaReader(resolved, parsed, schema)
        CountingFileIO.bytes_read = 0
        count = sum(batch.num_rows for partition in reader.partitions()
                    for batch in reader.read(partition))
        return count, CountingFileIO.bytes_read

    everything, everything_bytes = bytes_read(read(spark, properties, table).schema)
    part_only, part_bytes = bytes_read(by_schema.schema)
    assert everything == part_only == 200_000
    # the part column's chunks and the footers (a Parquet reader reads a file's last 64 KiB)
    assert 0 < part_bytes < everything_bytes / 3


def test_overwrite_replaces_exactly_the_data(source: Any, where: dict[str, str]) -> None:
    spark = source
    table, catalog = new_table(where)
    write(rows(spark, 3_000), where, table)
    before = {f.file_path for f in data_files(catalog, table)}
    replacement = rows(spark, 1_000, start=50_000)
    write(replacement, where, table, mode="overwrite")

    assert checksum(read(spark, where, table)) == checksum(replacement)
    iceberg = catalog.load_table(table)
    assert len(iceberg.metadata.snapshots) == 2
    assert iceberg.current_snapshot().summary.operation.value == "overwrite"
    assert not before & {f.file_path for f in data_files(catalog, table)}


def test_failed_job_leaves_table_catalog_and_storage_unchanged(
        source: Any, where: dict[str, str]) -> None:
    from pyspark.sql.functions import udf

    spark = source
    table, catalog = new_table(where)
    write(rows(spark, 2_000), where, table)
    version, files = catalog.olympia.refresh(), stored_files(where, table)
    snapshot = catalog.load_table(table).metadata.current_snapshot_id

    @udf("string")
    def explode_on_one_row(name: str) -> str:
        if name == "n3900":
            raise ValueError("bad row n3900")
        return name

    failing = rows(spark, 2_000, start=2_000).withColumn("name", explode_on_one_row("name"))
    with pytest.raises(Exception, match="bad row n3900"):
        write(failing, where, table)
    no_task_running(spark)

    assert catalog.olympia.refresh() == version
    assert catalog.load_table(table).metadata.current_snapshot_id == snapshot
    # Spark calls the abort while tasks of the failed job may still be writing: the abort
    # deletes every file of the job already there, a task that runs on writes on, and what
    # it writes is left, referenced by no snapshot (Spark's abort is best effort:
    # docs/SPARK.md, Failures). Nothing of the table was deleted; anything left is the
    # failed job's own (its write id in every name).
    after = stored_files(where, table)
    left = {_write_id(path) for path in after - files}
    assert files <= after
    assert None not in left and len(left) <= 1 and not left & {_write_id(p) for p in files}
    assert read(spark, where, table).count() == 2_000


def _write_id(path: str) -> str | None:
    """The write id in a data file's name (``<task>-<attempt>-<write id>-<n>.parquet``)."""
    found = re.search(r"/\d{5}-\d+-([0-9a-f]{32})-\d{5}\.parquet$", path)
    return found.group(1) if found else None


def no_task_running(spark: Any, timeout_s: float = 60.0) -> None:
    """Wait until a failed job's other tasks have ended: Spark fails the job (and calls the
    source's abort) first and kills them after; a job started meanwhile on pyspark 4.1 may
    get a Python worker whose task is being killed, and fail (CancelledKeyException)."""
    tracker = spark.sparkContext._jsc.sc().statusTracker()
    deadline = time.monotonic() + timeout_s
    while any(e.numRunningTasks() for e in tracker.getExecutorInfos()):
        assert time.monotonic() < deadline, "the failed job's tasks kept running"
        time.sleep(0.05)


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_commit_during_the_job(source: Any, tmp_path: Path, mode: str) -> None:
    """Another writer commits to the table while the job runs (from inside the job, so it
    always lands first): an append still lands on top of it, an overwrite fails clearly,
    deletes its files and commits nothing."""
    from pyspark.sql.functions import udf

    spark = source
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    write(rows(spark, 100), properties, table)
    before = stored_files(properties, table)

    @udf("string")
    def commit_meanwhile(name: str) -> str:
        if name == "n150":  # one row of one task: another writer appends a row
            other = OlympiaCatalog("other", **properties)
            other.load_table(table).append(
                other.load_table(table).scan(row_filter=EqualTo("id", 1)).to_arrow())
        return name

    job = rows(spark, 100, start=100).withColumn("name", commit_meanwhile("name"))
    if mode == "append":
        write(job, properties, table)
        assert read(spark, properties, table).count() == 100 + 1 + 100
        assert len(catalog.load_table(table).metadata.snapshots) == 3
        return
    with pytest.raises(Exception, match=rf"table {table}: the overwrite of \d+ data files "
                                        r"was not committed .*since the overwrite started"):
        write(job, properties, table, mode="overwrite")
    assert read(spark, properties, table).count() == 100 + 1  # the other writer's commit
    assert len(catalog.load_table(table).metadata.snapshots) == 2
    current = {f.file_path.removeprefix("file://") for f in data_files(catalog, table)}
    assert stored_files(properties, table) == before | current  # the job's files are gone


def test_abort_deletes_files_of_killed_tasks_unless_committed(tmp_path: Path) -> None:
    """A task killed before it could report leaves files only its name ties to the job: the
    driver's abort finds them by the job's write id; after a commit it deletes nothing."""
    from pyspark.sql.types import StructType as SparkStruct

    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    spark_schema = SparkStruct.fromJson({"type": "struct", "fields": [
        {"name": f.name, "type": t, "nullable": True, "metadata": {}} for f, t in zip(
            SCHEMA.fields, ["long", "string", "integer", "timestamp", "decimal(12,2)"],
            strict=True)]})
    parsed = SourceOptions.parse({"path": table, **options(properties)}, {})
    data = Path(catalog.load_table(table).location().removeprefix("file://")) / "data"

    def stray_file(writer: OlympiaWriter, name: str) -> Path:
        path = data / "part=1" / f"00001-0-{writer._write_id}-{name}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half a file")
        return path

    killed = OlympiaWriter.create(parsed, spark_schema, overwrite=False)
    other = OlympiaWriter.create(parsed, spark_schema, overwrite=False)
    lost, kept = stray_file(killed, "00000"), stray_file(other, "00000")
    killed.abort([None])
    assert not lost.exists() and kept.exists()

    batch = pa.RecordBatch.from_pylist(
        [{"id": 1, "name": "a", "part": 1, "ts": None, "amount": None}],
        schema=arrow_schema(spark_schema))
    committed = OlympiaWriter.create(parsed, spark_schema, overwrite=False)
    message = committed.write(iter([batch]))
    committed.commit([message])
    committed.abort([message])  # e.g. Spark failing after the commit: nothing is deleted
    (written,) = message.data_files
    assert Path(written.file_path.removeprefix("file://")).exists()
    assert catalog.load_table(table).scan().count() == 1


def test_mismatched_schema_is_refused_before_writing(source: Any, tmp_path: Path) -> None:
    spark = source
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    version = catalog.olympia.refresh()
    extra = rows(spark, 10).selectExpr("*", "id AS extra")
    with pytest.raises(Exception, match="columns not in the table: extra"):
        write(extra, properties, table)
    with pytest.raises(Exception, match="column types do not match"):
        write(rows(spark, 10).selectExpr("id", "name", "name AS part", "ts", "amount"),
              properties, table)
    assert catalog.olympia.refresh() == version
    assert stored_files(properties, table) == set()


def test_a_data_folder_in_a_refused_form_is_refused_before_writing(source: Any,
                                                                    tmp_path: Path) -> None:
    """A table whose ``write.data.path`` pyiceberg would read as another place (a query
    hiding ``..`` steps; set before the REST server refused it): the job writes nothing."""
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    hostile = f"file://{tmp_path}/wh/../escaped?/../wh/data"
    catalog.load_table(table).transaction().set_properties(
        {"write.data.path": hostile}).commit_transaction()
    version = catalog.olympia.refresh()
    with pytest.raises(Exception, match=r"data folder of table .* is refused: it has a '..'"):
        write(rows(source, 10), properties, table)
    assert catalog.olympia.refresh() == version
    assert not (tmp_path / "escaped").exists()


def test_concurrent_appends_both_land(source: Any, where: dict[str, str]) -> None:
    spark = source
    table, catalog = new_table(where)
    version = catalog.olympia.refresh()
    errors: list[BaseException] = []

    def job(start: int) -> None:
        try:
            # Spark looks Python data sources up in the thread's active session
            spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
            write(rows(spark, 5_000, start=start), where, table)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [InheritableThread(target=job, args=(start,)) for start in (0, 5_000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, [str(e)[:3000] for e in errors]
    assert checksum(read(spark, where, table)) == checksum(rows(spark, 10_000))
    assert len(catalog.load_table(table).metadata.snapshots) == 2
    assert catalog.olympia.refresh() == version + 2


def test_catalog_version_time_travel_across_tables(source: Any, tmp_path: Path) -> None:
    spark = source
    where = local_properties(tmp_path)
    orders, catalog = new_table(where)
    namespace = orders.split(".")[0]
    catalog.create_table(f"{namespace}.items", SCHEMA)
    items = f"{namespace}.items"
    write(rows(spark, 1_000), where, orders)
    write(rows(spark, 500), where, items)
    version = catalog.olympia.refresh()
    first_snapshot = catalog.load_table(orders).metadata.current_snapshot_id
    target = f"{where['uri']}-export"
    versions.export(catalog.olympia, "before-more", target, "minimal",
                    target_storage_options=catalog.olympia.storage.options)
    write(rows(spark, 700, start=1_000), where, orders)
    write(rows(spark, 300, start=500), where, items)

    at = {"version": str(version)}
    assert read(spark, where, orders, **at).count() == 1_000
    assert read(spark, where, items, **at).count() == 500
    assert read(spark, where, orders).count() == 1_700
    assert read(spark, where, items).count() == 800
    (created,) = versions.history(catalog.olympia, limit=1, before=version + 1)
    assert created.version == version
    as_of = {"as_of": str(created.created_at_millis)}  # the instant version N was committed
    assert read(spark, where, orders, **as_of).count() == 1_000
    assert read(spark, where, items, **as_of).count() == 500
    exported = {"export": "before-more"}
    assert read(spark, where, orders, **exported).count() == 1_000
    assert read(spark, where, items, **exported).count() == 500
    assert read(spark, where, orders, snapshot_id=str(first_snapshot)).count() == 1_000
    with pytest.raises(Exception, match="no snapshot 42"):
        read(spark, where, orders, snapshot_id="42")
    with pytest.raises(Exception, match="version and export"):
        read(spark, where, orders, version="1", export="x")


def test_spark_conf_sets_the_catalog_once(source: Any, tmp_path: Path) -> None:
    spark = source
    properties = local_properties(tmp_path)
    table, _ = new_table(properties)
    write(rows(spark, 100), properties, table)
    spark.conf.set("spark.olympia.catalog", properties["uri"])
    try:
        olympia.spark.register(spark)
        assert spark.read.format("olympia").load(table).count() == 100
    finally:
        spark.conf.unset("spark.olympia.catalog")
        olympia.spark.register(spark)
    with pytest.raises(Exception, match="needs the catalog"):
        spark.read.format("olympia").load(table)


@pytest.mark.s3
def test_storage_secrets_stay_out_of_plans_and_errors(source: Any, s3_server: Any) -> None:
    spark = source
    properties = s3_properties(s3_server, uuid.uuid4().hex[:12])
    table, _ = new_table(properties)
    secret = properties["s3.secret-access-key"]
    df = read(spark, properties, table).where("part = 1")
    plan = df._jdf.queryExecution().toString()
    explained = df._sc._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "extended")
    assert secret not in plan and secret not in explained
    assert df.count() == 0
    with pytest.raises(Exception) as failure:
        read(spark, properties, table, version="nope")
    assert secret not in str(failure.value)


def add_delete_file(table: Any, content: DataFileContent, rows: pa.Table,
                    equality_ids: list[int] | None = None) -> None:
    """Commit one delete file to ``table`` (pyiceberg 0.12 writes no delete files of its own:
    its manifest writer and fast append are reused with the manifest content changed)."""
    path = f"{table.location()}/data/deletes-{uuid.uuid4().hex}.parquet"
    with table.io.new_output(path).create() as out:
        pq.write_table(rows, out)

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    class AddDeleteFiles(_FastAppendFiles):
        def new_manifest_writer(self, spec: PartitionSpec) -> Any:
            return DeleteManifestWriter(spec, self.schema(), self.new_manifest_output(),
                                        self._snapshot_id, self._compression)

    delete_file = DataFile.from_args(
        content=content, file_path=path, file_format=FileFormat.PARQUET, partition=Record(),
        record_count=rows.num_rows, file_size_in_bytes=len(table.io.new_input(path)),
        spec_id=table.metadata.default_spec_id, equality_ids=equality_ids)
    with table.transaction() as tx, AddDeleteFiles(Operation.DELETE, tx, table.io) as add:
        add.append_data_file(delete_file)


def test_positional_deletes_are_applied_and_equality_deletes_refused(
        source: Any, tmp_path: Path) -> None:
    spark = source
    properties = local_properties(tmp_path)
    table_name, catalog = new_table(properties, PartitionSpec())
    write(rows(spark, 10).coalesce(1), properties, table_name)
    table = catalog.load_table(table_name)
    (data_file,) = data_files(catalog, table_name)
    positions = pa.schema([
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"})])
    add_delete_file(table, DataFileContent.POSITION_DELETES, pa.table(
        {"file_path": [data_file.file_path] * 2, "pos": [2, 5]}, schema=positions))

    ids = [r["id"] for r in read(spark, properties, table_name).collect()]
    assert sorted(ids) == [0, 1, 3, 4, 6, 7, 8, 9]

    equality = pa.schema([pa.field("id", pa.int64(), True, {b"PARQUET:field_id": b"1"})])
    table = catalog.load_table(table_name)
    add_delete_file(table, DataFileContent.EQUALITY_DELETES,
                    pa.table({"id": [7]}, schema=equality), equality_ids=[1])
    snapshot = catalog.load_table(table_name).metadata.current_snapshot_id
    with pytest.raises(Exception, match=rf"table {table_name} at catalog version \d+, "
                                        rf"snapshot {snapshot} has equality delete files"):
        read(spark, properties, table_name).collect()


# --- planning without Spark ---------------------------------------------------------------


def test_partitions_are_sized_groups_of_files() -> None:
    class File:
        def __init__(self, size: int) -> None:
            self.file_size_in_bytes = size

    class Task:
        def __init__(self, size: int) -> None:
            self.file, self.delete_files = File(size), set()

    tasks: list[Any] = [Task(s) for s in (100, 90, 50, 40, 10, 10)]
    assert [len(p.tasks) for p in group(tasks, split_size=1000, parallelism=1)] == [6]
    halves = group(tasks, split_size=1000, parallelism=2)
    assert sorted(sum(t.file.file_size_in_bytes for t in p.tasks) for p in halves) == [150, 150]
    assert len(group(tasks, split_size=100, parallelism=1)) == 3
    assert len(group(tasks, split_size=1, parallelism=8)) == 6  # never more than files
    assert group([], split_size=1, parallelism=8) == []


def test_options_are_checked_without_echoing_values() -> None:
    with pytest.raises(oe.InvalidArgumentError, match="needs the catalog"):
        SourceOptions.parse({"path": "a.b"}, {})
    with pytest.raises(oe.InvalidArgumentError, match="needs a table"):
        SourceOptions.parse({"catalog": "/x"}, {})
    parsed = SourceOptions.parse({"path": "a.b", "s3.secret-access-key": "hush"},
                                 {"catalog": "/x", "s3.endpoint": "http://e", "parallelism": "3"})
    assert parsed.catalog_uri == "/x" and parsed.parallelism == 3
    assert parsed.properties == {"s3.secret-access-key": "hush", "s3.endpoint": "http://e"}
    assert "hush" not in repr(parsed)
    with pytest.raises(oe.InvalidArgumentError, match="option version must be at least 0"):
        SourceOptions.parse({"path": "a.b", "catalog": "/x", "version": "-1"}, {})


def test_storage_options_become_catalog_properties() -> None:
    properties = olympia.spark.properties_from_storage_options({
        "key": "AK", "secret": "SK", "anon": False, "max_concurrency": 4,
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}})
    assert properties == {
        "s3.access-key-id": "AK", "s3.secret-access-key": "SK", "s3.anonymous": "false",
        "olympia.storage.max_concurrency": "4", "s3.endpoint": "http://127.0.0.1:9000",
        "s3.region": "eu-west-1"}
    with pytest.raises(oe.InvalidArgumentError, match="config_kwargs.retries"):
        olympia.spark.properties_from_storage_options({"config_kwargs": {"retries": 3}})


def test_writes_and_reads_inside_a_distributed_transaction(source: Any, tmp_path: Path) -> None:
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    write(rows(source, 10), properties, table)
    store = catalog.olympia
    began = store.refresh()
    store.begin_transaction("spark-job")
    inside = {**options(properties), "transaction": "spark-job"}
    rows(source, 5, start=100).write.format("olympia").options(**inside).mode("append").save(
        table)
    assert source.read.format("olympia").options(**inside).load(table).count() == 15
    assert read(source, properties, table).count() == 10  # nothing outside yet
    assert store.refresh() == began
    with pytest.raises(Exception, match="both choose a catalog version or transaction"):
        source.read.format("olympia").options(**inside, version=str(began)).load(table).count()
    assert store.distributed_transaction("spark-job").commit() == began + 1
    assert read(source, properties, table).count() == 15
