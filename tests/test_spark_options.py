"""Options of the olympia Spark data source, parsed without Spark: nothing is taken silently
(unknown, misspelt and other-side options are refused naming the nearest valid one, values
never echoed), Iceberg's read option names, the Spark-configuration defaults, and the
docs/SPARK.md options table agreeing with the code; pushed-down filters of a read of an old
snapshot named as the table's current schema names them (what pyiceberg's planning binds)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from olympia.exceptions import InvalidArgumentError
from olympia.spark.options import (
    CONFIGURABLE,
    FILE_IO_PREFIXES,
    READ_OPTION_NAMES,
    WRITE_SIDE_NAMES,
    SourceOptions,
    is_catalog_property,
    properties_from_storage_options,
    spelled,
)
from olympia.spark.write_options import WRITE_OPTION_NAMES, WriteOptions

DOCS = Path(__file__).resolve().parent.parent / "docs" / "SPARK.md"
SECRET = "s3cr3t-value-never-shown"
BASE = {"path": "sales.orders", "catalog": "/lake/catalog"}


def parse(options: Mapping[str, str] | None = None, defaults: Mapping[str, str] | None = None,
          *, write: bool = False) -> SourceOptions:
    return SourceOptions.parse({**BASE, **(options or {})}, defaults or {}, write=write)


def refused(options: Mapping[str, str] | None = None,
            defaults: Mapping[str, str] | None = None, *, write: bool = False) -> str:
    with pytest.raises(InvalidArgumentError) as failure:
        parse(options, defaults, write=write)
    message = str(failure.value)
    assert SECRET not in message
    return message


@pytest.mark.parametrize(("option", "nearest"), [
    ("verison", "version"), ("versionAsOf", "version"), ("snapshotid", "snapshot-id"),
    ("snapshot", "snapshot-id"), ("timestampAsOf", "as-of-timestamp"),
    ("as_of_timestamp", "as-of-timestamp"), ("branches", "branch"), ("split-size", "split_size"),
    ("s3.endpiont", "s3.endpoint"), ("s3.secret-key", "s3.secret-access-key"),
    ("wharehouse", "warehouse"), ("olympia.metadata-cache", "olympia.metadata-cache-size")])
def test_unknown_read_options_are_refused_naming_the_nearest(option: str, nearest: str) -> None:
    message = refused({option: SECRET})
    assert f"table sales.orders: a read has no option {option.lower()} " in message
    assert f"(nearest: {nearest})" in message


def test_unknown_write_options_are_refused_naming_the_nearest() -> None:
    message = refused({"replacewhre": SECRET}, write=True)
    assert "a write has no option replacewhre (nearest: replaceWhere)" in message
    assert "(nearest: check-nullability)" in refused({"checknullability": SECRET}, write=True)
    assert "(nearest: partitionOverwriteMode)" in refused({"overwritemode": SECRET}, write=True)


@pytest.mark.parametrize("option", sorted(WRITE_OPTION_NAMES))
def test_write_options_on_a_read_are_refused(option: str) -> None:
    message = refused({option: SECRET})
    assert f"option {spelled(option)} is a write option; a read does not take it" in message


@pytest.mark.parametrize("option", sorted(READ_OPTION_NAMES - WRITE_SIDE_NAMES))
def test_read_options_on_a_write_are_refused(option: str) -> None:
    message = refused({option: "1"}, write=True)
    assert f"option {option} is a read option; a write does not take it" in message


def test_catalog_properties_pass_and_only_they() -> None:
    properties = {"s3.endpoint": "http://e", "s3.secret-access-key": SECRET,
                  "client.region": "eu", "gcs.project-id": "p", "olympia.storage.anon": "true",
                  "warehouse": "file:///w", "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
                  "olympia.create": "true", "olympia.metadata-cache-size": "0"}
    for write in (False, True):
        parsed = parse(properties, {"s3.region": "us", "split_size": "7"}, write=write)
        assert parsed.properties == {**properties, "s3.region": "us"}
        assert SECRET not in repr(parsed)
    assert not is_catalog_property("olympia.storage.")
    assert not is_catalog_property("uri")  # the catalog option names the catalog
    assert "(nearest: " in refused({"uri": "/x"})


def test_properties_made_from_storage_options_are_accepted() -> None:
    produced = properties_from_storage_options({
        "key": "k", "secret": SECRET, "token": "t", "profile": "p", "anon": True,
        "retry_attempts": 3, "client_kwargs": {"endpoint_url": "http://e", "region_name": "r"}})
    assert parse(produced).properties == produced


def test_keys_are_case_insensitive_like_sparks() -> None:
    parsed = parse({"Snapshot-ID": "5", "Split_Size": "9", "S3.Endpoint": "http://e"})
    assert (parsed.snapshot_id, parsed.split_size) == (5, 9)
    assert parsed.properties == {"s3.endpoint": "http://e"}
    written = parse({"replaceWhere": "day = 1", "CHECK-NULLABILITY": "false",
                     "partitionOverwriteMode": "dynamic"}, write=True)
    assert written.write == WriteOptions("dynamic", "day = 1", False, None)


def test_iceberg_snapshot_options() -> None:
    assert parse({"snapshot-id": "12"}).snapshot_id == 12
    assert parse({"snapshot_id": "12"}).snapshot_id == 12  # the earlier spelling
    assert parse({"as-of-timestamp": "1700000000000"}).as_of_timestamp == 1700000000000
    assert parse({"branch": "audit"}).branch == "audit"
    assert parse({"tag": "v1", "version": "3"}).tag == "v1"  # a snapshot at a catalog version
    chosen = {"snapshot-id": "1", "snapshot_id": "1", "as-of-timestamp": "1", "branch": "b",
              "tag": "t"}
    for first in chosen:
        for second in chosen:
            if first < second:
                message = refused({first: chosen[first], second: chosen[second]})
                assert "both choose a snapshot: give one" in message
                assert first in message and second in message
    assert "option snapshot-id must be a whole number" in refused({"snapshot-id": "x"})
    assert "option as-of-timestamp must be at least 0" in refused(
        {"as-of-timestamp": "-1"})


def test_write_options_are_parsed_for_writes_only() -> None:
    written = parse({"replacewhere": "part = 1"}, {"target-file-size-bytes": "1000"}, write=True)
    assert written.write == WriteOptions(None, "part = 1", True, 1000)
    assert parse({}, {"target-file-size-bytes": "1000"}).write == WriteOptions()
    message = refused({"check-nullability": "maybe"}, write=True)
    assert message.startswith("table sales.orders: option check-nullability must be")


def test_spark_configuration_defaults_are_checked() -> None:
    values = {"check-nullability": "false"}
    for key in CONFIGURABLE - {"catalog"}:
        for write in (False, True):  # a default for one side does not break the other
            parse({}, {key: values.get(key, "1")}, write=write)
    message = refused(defaults={"verison": SECRET})
    assert "Spark configuration spark.olympia.verison is not an option" in message
    assert "(nearest: spark.olympia." in message
    assert "spark.olympia.s3.endpoint" in refused({}, {"s3.endpiont": SECRET}, write=True)
    for key in ("version", "snapshot-id", "columns", "replacewhere", "partitionoverwritemode",
                "sort-order-id", "path"):
        message = refused(defaults={key: "1"})
        assert f"Spark configuration spark.olympia.{key} cannot be set once" in message
    assert parse(defaults={"catalog": "/other", "parallelism": "4"}).parallelism == 4


def test_docs_options_table_matches_the_code() -> None:
    text = DOCS.read_text("utf-8")
    section = text[text.index("#### Options\n"):text.index("\n### Reading")]
    rows = re.findall(r"^\| `([^`]+)` \| *(yes)? *\| *(yes)? *\| .+ \|$", section,
                      re.MULTILINE)
    names = [name for name, _, _ in rows]
    assert len(names) == len(set(names)), "an option documented twice"
    assert all(spelled(name.lower()) == name for name in names), "documented spelling"
    assert {n.lower() for n, read, _ in rows if read} == READ_OPTION_NAMES
    assert {n.lower() for n, _, write in rows if write} == WRITE_SIDE_NAMES
    assert len(rows) == section.count("\n| `"), "a row the check did not understand"
    rule = section[section.index("**Catalog properties**"):section.index("**Spark config")]
    named = re.findall(r"`([a-z0-9.<>*-]+)`", rule)
    assert {n[:-1] for n in named if n.endswith(".*")} == set(FILE_IO_PREFIXES)
    for name in named:
        if not name.endswith((".*", "pyiceberg.io")):
            accepted = is_catalog_property(name.replace("<option>", "any"))
            assert accepted == (name != "s3.endpiont"), name
    configured = section[section.index("**Spark config"):]
    listed = {n.lower() for n in re.findall(r"`([A-Za-z_-]+)`", configured)}
    assert listed >= CONFIGURABLE


