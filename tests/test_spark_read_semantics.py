"""What a Spark read of the olympia source returns, on local[2]: misspelt and foreign options
are refused (never a silent read of the latest data), Iceberg's snapshot-id,
as-of-timestamp, branch and tag read exactly the snapshot they name, and the schema follows
the table: a column `olympia apply` adds or renames shows at once, while snapshot time
travel keeps the snapshot's schema."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from iceberg_helpers import local_properties, s3_properties
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

import olympia.spark
from olympia import Catalog
from olympia.cli import main
from olympia.iceberg import OlympiaCatalog

pytestmark = pytest.mark.spark

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "name", StringType(), required=False))
SECRET = "value-never-echoed"


@pytest.fixture(scope="module")
def source(spark: Any) -> Iterator[Any]:
    olympia.spark.register(spark)
    yield spark


def options(properties: dict[str, str]) -> dict[str, str]:
    out = {k: v for k, v in properties.items() if k != "uri"}
    out["catalog"] = properties["uri"]
    return out


def read(spark: Any, properties: dict[str, str], table: str, **extra: str) -> Any:
    return spark.read.format("olympia").options(**options(properties), **extra).load(table)


def ids(df: Any) -> list[int]:
    return sorted(r["id"] for r in df.collect())


def batch(start: int, count: int = 3) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()),
                     "name": [f"n{i}" for i in range(start, start + count)]})


def new_table(properties: dict[str, str]) -> tuple[str, Any]:
    catalog = OlympiaCatalog("test", **properties)
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    return f"{namespace}.orders", catalog.create_table(f"{namespace}.orders", SCHEMA)


def refusal(action: Any) -> str:
    with pytest.raises(Exception) as failure:
        action()
    message = str(failure.value)
    assert SECRET not in message
    return message


def test_misspelt_and_foreign_options_are_refused(source: Any, tmp_path: Path) -> None:
    spark = source
    where = local_properties(tmp_path)
    table, ice = new_table(where)
    ice.append(batch(0))
    ice.append(batch(3))
    for option, nearest in (("verison", "version"), ("versionAsOf", "version"),
                            ("snapshotid", "snapshot-id")):
        message = refusal(lambda o=option: read(spark, where, table, **{o: SECRET}).collect())
        assert f"table {table}: a read has no option {option.lower()} " in message
        assert f"(nearest: {nearest})" in message
    message = refusal(lambda: read(spark, where, table, replaceWhere=SECRET).collect())
    assert "option replaceWhere is a write option; a read does not take it" in message
    df = read(spark, where, table)
    writer = df.write.format("olympia").options(**options(where)).mode("append")
    message = refusal(lambda: writer.option("snapshot-id", SECRET).save(table))
    assert "option snapshot-id is a read option; a write does not take it" in message
    spark.conf.set("spark.olympia.verison", SECRET)
    try:
        olympia.spark.register(spark)
        message = refusal(lambda: read(spark, where, table).collect())
        assert "Spark configuration spark.olympia.verison is not an option" in message
    finally:
        spark.conf.unset("spark.olympia.verison")
        olympia.spark.register(spark)
    catalog = OlympiaCatalog("test", **where)
    assert len(catalog.load_table(table).metadata.snapshots) == 2  # the write wrote nothing
    assert ids(read(spark, where, table, Version=str(catalog.version))) == [0, 1, 2, 3, 4, 5]


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if request.param == "local":
        return local_properties(tmp_path)
    return s3_properties(request.getfixturevalue("s3_server"), uuid.uuid4().hex[:12])


def test_snapshot_options_read_what_they_name(source: Any, where: dict[str, str]) -> None:
    spark = source
    table, ice = new_table(where)
    ice.append(batch(0))
    first = ice.metadata.current_snapshot_id
    ice.append(batch(3))
    second = ice.metadata.current_snapshot_id
    ice.manage_snapshots().create_tag(first, "v1").create_branch(first, "audit").commit()
    ice.append(batch(100), branch="audit")  # the branch moves on; main does not
    log = {e.snapshot_id: e.timestamp_ms for e in ice.metadata.snapshot_log}

    assert ids(read(spark, where, table)) == [0, 1, 2, 3, 4, 5]
    assert ids(read(spark, where, table, **{"snapshot-id": str(first)})) == [0, 1, 2]
    assert ids(read(spark, where, table, snapshot_id=str(first))) == [0, 1, 2]  # the alias
    assert ids(read(spark, where, table, tag="v1")) == [0, 1, 2]
    assert ids(read(spark, where, table, branch="audit")) == [0, 1, 2, 100, 101, 102]
    assert ids(read(spark, where, table, branch="main")) == [0, 1, 2, 3, 4, 5]
    at = {"as-of-timestamp": str(log[first])}
    assert ids(read(spark, where, table, **at)) == [0, 1, 2]
    at = {"as-of-timestamp": str(log[second] + 1)}
    assert ids(read(spark, where, table, **at)) == [0, 1, 2, 3, 4, 5]

    message = refusal(lambda: read(spark, where, table, **{"as-of-timestamp": str(
        log[first] - 1)}))
    assert f"table {table} (latest, catalog version" in message
    assert "has no snapshot at or before as-of-timestamp" in message
    message = refusal(lambda: read(spark, where, table, branch="nope"))
    assert "has no branch nope; its refs are audit (branch), main (branch), v1 (tag)" in message
    message = refusal(lambda: read(spark, where, table, tag="audit"))
    assert "audit is a branch, not a tag: read it with the option branch" in message
    message = refusal(lambda: read(spark, where, table, branch="v1"))
    assert "v1 is a tag, not a branch: read it with the option tag" in message
    message = refusal(lambda: read(spark, where, table, tag="v1", branch="audit"))
    assert "options branch and tag both choose a snapshot: give one" in message


SPEC = """\
namespace: sales
tables:
  orders:
    columns:
{columns}
"""


def apply(uri: str, spec: Path, columns: str) -> None:
    spec.mkdir(exist_ok=True)
    (spec / "sales.yaml").write_text(SPEC.format(columns=textwrap.indent(columns, " " * 6)))
    result = CliRunner().invoke(main, ["apply", "-c", uri, str(spec), "--auto-approve"])
    assert result.exit_code == 0, result.output


def test_columns_olympia_apply_adds_or_renames_show_at_once(source: Any,
                                                            tmp_path: Path) -> None:
    spark = source
    where = local_properties(tmp_path)
    Catalog.create(where["uri"], properties={"warehouse": where["warehouse"]}).close()
    spec = tmp_path / "spec"
    apply(where["uri"], spec, "- {name: id, type: bigint}\n- {name: name, type: string}\n")
    ice = OlympiaCatalog("test", **where)
    ice.load_table("sales.orders").append(batch(0))
    first = ice.load_table("sales.orders").metadata.current_snapshot_id
    assert first is not None
    assert read(spark, where, "sales.orders").columns == ["id", "name"]

    apply(where["uri"], spec, "- {name: id, type: bigint}\n- {name: name, type: string}\n"
                              "- {name: note, type: string}\n")
    rows = read(spark, where, "sales.orders").orderBy("id").collect()
    assert [tuple(r) for r in rows] == [(0, "n0", None), (1, "n1", None), (2, "n2", None)]
    # an append that leaves the new optional column out works at once
    spark.range(3, 5).selectExpr("id", "concat('n', id) AS name").write.format("olympia") \
        .options(**options(where)).mode("append").save("sales.orders")
    rows = read(spark, where, "sales.orders").where("id >= 3").orderBy("id").collect()
    assert [tuple(r) for r in rows] == [(3, "n3", None), (4, "n4", None)]

    apply(where["uri"], spec, "- {name: id, type: bigint}\n"
                              "- {name: label, type: string, renamed_from: name}\n"
                              "- {name: note, type: string}\n")
    current = read(spark, where, "sales.orders")
    assert current.columns == ["id", "label", "note"]
    assert [tuple(r) for r in current.where("label = 'n1'").collect()] == [(1, "n1", None)]
    assert current.count() == 5
    ice.load_table("sales.orders").manage_snapshots().create_tag(first, "t") \
        .create_branch(first, "b").commit()
    # the snapshot's schema for snapshot-id and tag, the table's for a branch (Iceberg's rule)
    old = read(spark, where, "sales.orders", **{"snapshot-id": str(first)})
    assert old.columns == ["id", "name"]
    assert [tuple(r) for r in old.where("name = 'n2'").collect()] == [(2, "n2")]
    assert read(spark, where, "sales.orders", tag="t").columns == ["id", "name"]
    assert read(spark, where, "sales.orders", branch="b").columns == ["id", "label", "note"]
    ice.close()
