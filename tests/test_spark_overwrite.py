"""Overwrites through the olympia source on local[2] replace no more than was asked: dynamic
partition overwrite (option and session configuration), replaceWhere, INSERT OVERWRITE through
a temporary view, and commits that land while the job runs; local disk and the real S3
server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from iceberg_helpers import local_properties, s3_properties
from pyiceberg.exceptions import ValidationException
from pyiceberg.expressions import EqualTo
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType
from pyspark.sql.types import StructType as SparkStruct

import olympia.spark
from olympia.exceptions import InvalidArgumentError
from olympia.iceberg import OlympiaCatalog
from olympia.spark.options import SourceOptions
from olympia.spark.schema import arrow_schema
from olympia.spark.writer import DataFilesMessage, OlympiaWriter

pytestmark = pytest.mark.spark

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "part", IntegerType(), required=False),
)
SPEC = PartitionSpec(PartitionField(3, 1000, IdentityTransform(), "part"))
PARTS = 5
ROWS = 500
MODE_CONF = "spark.sql.sources.partitionOverwriteMode"


@pytest.fixture(scope="module")
def source(spark: Any) -> Iterator[Any]:
    olympia.spark.register(spark)
    yield spark
    spark.conf.unset(MODE_CONF)


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "local":
        return local_properties(tmp_path)
    return s3_properties(request.getfixturevalue("s3_server"), uuid.uuid4().hex[:12])


def options(properties: dict[str, str], **extra: str) -> dict[str, str]:
    out = {k: v for k, v in properties.items() if k != "uri"}
    out["catalog"] = properties["uri"]
    return {**out, **extra}


def rows(spark: Any, parts: list[int], tag: str, count: int = ROWS) -> Any:
    """``count`` rows in each of ``parts``, names ``<tag><id>``."""
    values = ", ".join(str(p) for p in parts)
    return spark.range(count * len(parts), numPartitions=2).selectExpr(
        "id", f"concat('{tag}', id) AS name",
        f"CAST(element_at(array({values}), CAST(id % {len(parts)} AS INT) + 1) AS INT) AS part")


def write(df: Any, properties: dict[str, str], table: str, mode: str = "append",
          **extra: str) -> None:
    df.write.format("olympia").options(**options(properties, **extra)).mode(mode).save(table)


def new_table(properties: dict[str, str]) -> tuple[str, OlympiaCatalog]:
    catalog = OlympiaCatalog("test", **properties)
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    catalog.create_table(f"{namespace}.t", SCHEMA, partition_spec=SPEC)
    return f"{namespace}.t", catalog


def files_by_part(catalog: OlympiaCatalog, table: str) -> dict[int, dict[str, bytes]]:
    """Each partition's live data files: path -> bytes."""
    iceberg = catalog.load_table(table)
    out: dict[int, dict[str, bytes]] = {}
    for task in iceberg.scan().plan_files():
        with iceberg.io.new_input(task.file.file_path).open() as stream:
            out.setdefault(task.file.partition[0], {})[task.file.file_path] = stream.read()
    return out


def contents(catalog: OlympiaCatalog, table: str) -> dict[int, set[str]]:
    """Each partition's names."""
    out: dict[int, set[str]] = {}
    for row in catalog.load_table(table).scan().to_arrow().to_pylist():
        out.setdefault(row["part"], set()).add(row["name"])
    return out


def stored(catalog: OlympiaCatalog, table: str) -> set[str]:
    """Every Parquet file under the table's location."""
    iceberg = catalog.load_table(table)
    location = iceberg.location()
    if location.startswith("file://"):
        return {str(p) for p in Path(location[len("file://"):]).rglob("*.parquet")}
    fs = iceberg.io.get_fs("s3")
    found = {p for p in fs.find(location[len("s3://"):]) if p.endswith(".parquet")}
    # s3fs keeps the listing and would then deny files written later, metadata included
    fs.invalidate_cache()
    return found


def names(tag: str, parts: list[int], count: int = ROWS) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for i in range(count * len(parts)):
        out.setdefault(parts[i % len(parts)], set()).add(f"{tag}{i}")
    return out


@pytest.fixture
def filled(source: Any, where: dict[str, str]) -> tuple[str, OlympiaCatalog]:
    """A table with ROWS rows (tag ``a``) in each of PARTS partitions."""
    table, catalog = new_table(where)
    write(rows(source, list(range(PARTS)), "a"), where, table)
    return table, catalog


# --- dynamic partition overwrite ------------------------------------------------------------


def test_dynamic_overwrite_replaces_only_the_written_partitions(
        source: Any, where: dict[str, str], filled: tuple[str, OlympiaCatalog]) -> None:
    table, catalog = filled
    before, version = files_by_part(catalog, table), catalog.olympia.refresh()
    write(rows(source, [1, 3], "b"), where, table, mode="overwrite",
          partitionOverwriteMode="dynamic")

    assert catalog.olympia.refresh() == version + 1  # one catalog version
    iceberg = catalog.load_table(table)
    assert len(iceberg.metadata.snapshots) == 2  # one snapshot
    assert iceberg.current_snapshot().summary.operation.value == "overwrite"
    after = files_by_part(catalog, table)
    for part in (0, 2, 4):  # the same files, byte for byte
        assert after[part] == before[part]
    for part in (1, 3):
        assert not set(after[part]) & set(before[part])
    expected = names("a", list(range(PARTS)))
    expected.update(names("b", [1, 3]))
    assert contents(catalog, table) == expected


def test_session_conf_dynamic_set_after_register(
        source: Any, where: dict[str, str], filled: tuple[str, OlympiaCatalog]) -> None:
    """spark.conf.set after olympia.spark.register: a plain mode('overwrite') replaces the
    written partitions only (the tasks see the session's configuration); the option wins."""
    spark = source
    table, catalog = filled
    before = files_by_part(catalog, table)
    spark.conf.set(MODE_CONF, "dynamic")
    try:
        write(rows(spark, [2], "c"), where, table, mode="overwrite")
        after = files_by_part(catalog, table)
        assert {p: after[p] for p in (0, 1, 3, 4)} == {p: before[p] for p in (0, 1, 3, 4)}
        expected = names("a", list(range(PARTS)))
        expected[2] = names("c", [2])[2]
        assert contents(catalog, table) == expected
        # the option wins over the session: static replaces the table
        write(rows(spark, [4], "d"), where, table, mode="overwrite",
              partitionOverwriteMode="static")
        assert contents(catalog, table) == names("d", [4])
    finally:
        spark.conf.unset(MODE_CONF)


def test_static_overwrite_replaces_the_table(source: Any, tmp_path: Path) -> None:
    where = local_properties(tmp_path)
    table, catalog = new_table(where)
    write(rows(source, [0, 1, 2], "a"), where, table)
    write(rows(source, [1], "e"), where, table, mode="overwrite")
    assert contents(catalog, table) == names("e", [1])


def test_dynamic_overwrite_with_no_rows_replaces_nothing(
        source: Any, tmp_path: Path) -> None:
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    write(rows(source, [0, 1], "a"), properties, table)
    version = catalog.olympia.refresh()
    write(rows(source, [1], "x").limit(0), properties, table, mode="overwrite",
          partitionOverwriteMode="dynamic")
    assert catalog.olympia.refresh() == version
    assert contents(catalog, table) == names("a", [0, 1])


# --- replaceWhere ---------------------------------------------------------------------------


def test_replace_where_refuses_rows_outside_the_predicate(
        source: Any, where: dict[str, str], filled: tuple[str, OlympiaCatalog]) -> None:
    table, catalog = filled
    version, files = catalog.olympia.refresh(), stored(catalog, table)
    with pytest.raises(Exception, match=rf"table {table}: \d+ written rows do not match "
                                        r"option replaceWhere \(part = 1\)"):
        write(rows(source, [1, 2], "f"), where, table, mode="overwrite", replaceWhere="part = 1")
    assert catalog.olympia.refresh() == version  # nothing committed
    assert stored(catalog, table) == files  # no file of the job left
    assert contents(catalog, table) == names("a", list(range(PARTS)))


def test_replace_where_replaces_exactly_the_matching_rows(
        source: Any, where: dict[str, str], filled: tuple[str, OlympiaCatalog]) -> None:
    """A predicate across partitions: files holding some matching rows are rewritten without
    them, files of other partitions stay; one catalog version, one snapshot."""
    table, catalog = filled
    before, version = files_by_part(catalog, table), catalog.olympia.refresh()
    new = rows(source, [0, 1], "g", count=50)  # ids 0..99, parts 0 and 1
    write(new, where, table, mode="overwrite", replaceWhere="part = 0 or (part = 1 and id < 100)")

    assert catalog.olympia.refresh() == version + 1
    assert len(catalog.load_table(table).metadata.snapshots) == 2
    expected = names("a", list(range(PARTS)))
    fresh = names("g", [0, 1], count=50)
    expected[0] = fresh[0]
    expected[1] = {n for n in expected[1] if int(n[1:]) >= 100} | fresh[1]
    assert contents(catalog, table) == expected
    after = files_by_part(catalog, table)
    for part in (2, 3, 4):
        assert after[part] == before[part]


def test_replace_where_refusals(source: Any, tmp_path: Path) -> None:
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    write(rows(source, [0], "a"), properties, table)
    version, files = catalog.olympia.refresh(), stored(catalog, table)
    df = rows(source, [0], "h")
    cases = [
        ({"replaceWhere": "part = = 1"}, "overwrite",
         "option replaceWhere is not a predicate pyiceberg's expression parser"),
        ({"replaceWhere": "nope = 1"}, "overwrite",
         "option replaceWhere does not fit the table's columns"),
        ({"replaceWhere": "part = 0"}, "append", "an append does not take it"),
        ({"replaceWhere": "part = 0", "partitionOverwriteMode": "dynamic"}, "overwrite",
         "options replaceWhere and partitionOverwriteMode both choose"),
    ]
    for extra, mode, message in cases:
        with pytest.raises(Exception, match=rf"table {table}: .*{message}"):
            write(df, properties, table, mode=mode, **extra)
    with pytest.raises(Exception, match=rf"table {table}: option replaceWhere names columns "
                                        r"the DataFrame does not have \(name\)"):
        write(df.drop("name"), properties, table, mode="overwrite", replaceWhere="name = 'x'")
    assert catalog.olympia.refresh() == version
    assert stored(catalog, table) == files


# --- SQL ----------------------------------------------------------------------------------


def test_insert_overwrite_through_a_temp_view(source: Any, tmp_path: Path) -> None:
    """INSERT OVERWRITE never replaces more than its partitions: with the session's dynamic
    mode Spark itself refuses it (a Python source cannot take a dynamic overwrite), a
    PARTITION clause is refused by Spark (the source declares no partition columns), and
    without either it is a static overwrite: the whole table."""
    spark = source
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    write(rows(spark, list(range(PARTS)), "a"), properties, table)
    quoted = ", ".join(f"`{k}` '{v}'" for k, v in options(properties, path=table).items())
    view = f"v_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TEMPORARY VIEW {view} USING olympia OPTIONS ({quoted})")
    version = catalog.olympia.refresh()
    try:
        spark.conf.set(MODE_CONF, "dynamic")
        with pytest.raises(Exception, match="does not support dynamic overwrite"):
            spark.sql(f"INSERT OVERWRITE TABLE {view} SELECT id, 'j', 3 FROM range(10)")
        spark.conf.unset(MODE_CONF)
        with pytest.raises(Exception, match="NON_PARTITION_COLUMN"):
            spark.sql(f"INSERT OVERWRITE TABLE {view} PARTITION (part = 3) "
                      "SELECT id, 'j' FROM range(10)")
        assert catalog.olympia.refresh() == version
        assert contents(catalog, table) == names("a", list(range(PARTS)))

        spark.sql(f"INSERT INTO {view} SELECT id, concat('i', id), 2 FROM range(10)")
        assert len(contents(catalog, table)[2]) == ROWS + 10
        spark.sql(f"INSERT OVERWRITE TABLE {view} SELECT id, concat('o', id), 2 "
                  "FROM range(10)")
        assert contents(catalog, table) == {2: {f"o{i}" for i in range(10)}}
    finally:
        spark.conf.unset(MODE_CONF)
        spark.catalog.dropTempView(view)


# --- commits while the job runs ---------------------------------------------------------------


@pytest.mark.parametrize("how", [{"partitionOverwriteMode": "dynamic"},
                                 {"replaceWhere": "part in (1, 3)"}], ids=["dynamic", "where"])
@pytest.mark.parametrize("other_part", [1, 4])
def test_commit_to_a_replaced_partition_fails_the_job_cleanly(
        source: Any, where: dict[str, str], other_part: int, how: dict[str, str]) -> None:
    """Another writer appends a row while an overwrite of partitions 1 and 3 runs (from
    inside the job, so it lands first): into partition 1 the job fails, deletes its files and
    commits nothing; into partition 4 the job commits on top of it."""
    from pyspark.sql.functions import udf

    table, catalog = new_table(where)
    write(rows(source, list(range(PARTS)), "a"), where, table)
    before = stored(catalog, table)

    @udf("string")
    def commit_meanwhile(name: str) -> str:
        if name == "k7":
            other = OlympiaCatalog("other", **where)
            one = other.load_table(table).scan(row_filter=EqualTo("part", 0)).to_arrow()
            one = one.slice(0, 1).set_column(2, "part", [[other_part]]).set_column(
                1, "name", [["other"]])
            other.load_table(table).append(one.cast(other.load_table(table).schema()
                                                    .as_arrow()))
        return name

    job = rows(source, [1, 3], "k").withColumn("name", commit_meanwhile("name"))
    if other_part == 4:
        write(job, where, table, mode="overwrite", **how)
        got = contents(catalog, table)
        assert "other" in got[4] and got[1] == names("k", [1, 3])[1]
        return
    with pytest.raises(Exception, match=rf"table {table}: the overwrite of \d+ data files was "
                                        r"not committed .*changed files in"):
        write(job, where, table, mode="overwrite", **how)
    got = contents(catalog, table)
    assert "other" in got[1] and not any(n.startswith("k") for p in got.values() for n in p)
    current = {task.file.file_path for task in catalog.load_table(table).scan().plan_files()}
    assert stored(catalog, table) == before | {p.split("://", 1)[-1] for p in current}


def test_an_overwrite_that_cannot_tell_its_mode_is_refused(tmp_path: Path) -> None:
    """The commit decides static or dynamic from the session mode the tasks report: with no
    task reporting, or tasks that disagree, a plain overwrite is refused (never taken as
    "replace the table") and its files are deleted."""
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    spark_schema = SparkStruct.fromJson({"type": "struct", "fields": [
        {"name": f.name, "type": t, "nullable": True, "metadata": {}}
        for f, t in zip(SCHEMA.fields, ["long", "string", "integer"], strict=True)]})
    parsed = SourceOptions.parse({"path": table, **options(properties)}, {}, write=True)
    batch = pa.RecordBatch.from_pylist([{"id": 1, "name": "a", "part": 1}],
                                       schema=arrow_schema(spark_schema))
    version = catalog.olympia.refresh()
    for modes in ([], ["dynamic", None]):
        writer = OlympiaWriter.create(parsed, spark_schema, overwrite=True)
        written = writer.write(iter([batch]))
        messages = [DataFilesMessage(written.data_files, mode) for mode in modes]
        with pytest.raises(InvalidArgumentError, match=rf"table {table}: cannot tell whether "
                                                       "this overwrite is static"):
            writer.commit(list(messages))
        assert catalog.olympia.refresh() == version
        for message in messages:
            assert all(not Path(f.file_path.removeprefix("file://")).exists()
                       for f in message.data_files)


@pytest.mark.parametrize("other_part", [1, 4])
def test_a_commit_pyiceberg_retries_is_checked_against_the_replaced_partitions(
        tmp_path: Path, other_part: int) -> None:
    """Another commit lands between the driver's check and its commit (the driver commits on
    the table as it loaded it): pyiceberg retries on the refreshed table, and the retry runs
    the writer's conflict rule on what landed: an append into a replaced partition fails the
    commit, one into another partition does not."""
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    catalog.load_table(table).append(pa.table(
        {"id": list(range(10)), "name": [f"a{i}" for i in range(10)],
         "part": [i % PARTS for i in range(10)]}, schema=SCHEMA.as_arrow()))
    spark_schema = SparkStruct.fromJson({"type": "struct", "fields": [
        {"name": f.name, "type": t, "nullable": True, "metadata": {}}
        for f, t in zip(SCHEMA.fields, ["long", "string", "integer"], strict=True)]})
    parsed = SourceOptions.parse(
        {"path": table, **options(properties, partitionOverwriteMode="dynamic")}, {},
        write=True)
    writer = OlympiaWriter.create(parsed, spark_schema, overwrite=True)
    batch = pa.RecordBatch.from_pylist(
        [{"id": 100 + p, "name": "new", "part": p} for p in (1, 3)],
        schema=arrow_schema(spark_schema))
    files = writer.write(iter([batch])).data_files
    stale = catalog.load_table(table)
    other = OlympiaCatalog("other", **properties)
    other.load_table(table).append(pa.table(
        {"id": [999], "name": ["other"], "part": [other_part]}, schema=SCHEMA.as_arrow()))
    replacement = writer._replacement([DataFilesMessage(files, None)], files)
    if other_part == 1:
        with pytest.raises(ValidationException, match="changed files in the partitions"):
            writer._replace(stale, files, replacement)
        assert "new" not in {n for p in contents(catalog, table).values() for n in p}
        return
    writer._replace(stale, files, replacement)
    got = contents(catalog, table)
    assert got[1] == got[3] == {"new"} and "other" in got[4]


def test_an_empty_dataframe_still_reports_the_session_mode(
        source: Any, tmp_path: Path) -> None:
    """A DataFrame of no partitions still runs one (empty) write task, so the session's mode
    reaches the commit: dynamic replaces nothing, static empties the table."""
    spark = source
    properties = local_properties(tmp_path)
    table, catalog = new_table(properties)
    write(rows(spark, [0, 1], "a"), properties, table)
    version = catalog.olympia.refresh()
    empty = spark.createDataFrame(spark.sparkContext.emptyRDD(), "id BIGINT, name STRING, "
                                                                 "part INT")
    assert empty.rdd.getNumPartitions() == 0
    spark.conf.set(MODE_CONF, "dynamic")
    try:
        write(empty, properties, table, mode="overwrite")
    finally:
        spark.conf.unset(MODE_CONF)
    assert catalog.olympia.refresh() == version
    write(empty, properties, table, mode="overwrite")
    assert contents(catalog, table) == {}
