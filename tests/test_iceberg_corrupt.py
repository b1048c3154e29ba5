"""A missing or corrupt Iceberg metadata file is ONE clear error naming the table and the
file: ``IcebergMetadataError``, both Olympia's ``TableMetadataError`` (a ``CorruptFileError``)
and pyiceberg's ``NoSuchTableError``; ``olympia plan``/``apply`` print one line and exit 1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from iceberg_helpers import SCHEMA, local_properties, open_catalog
from plan_helpers import write_spec
from pyiceberg.exceptions import NoSuchTableError

from olympia.cli import main
from olympia.exceptions import CorruptFileError, TableMetadataError
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg.metadata import IcebergMetadataError

# how each kind of damage is reported (after "is unreadable: ")
DAMAGE: dict[str, tuple[bytes | None, str]] = {
    "truncated": (b'{"format-version": 2, "table-uuid": "9c12d441-03fe-4693-9a96-a0705dd',
                  "not JSON"),
    "not json": (b"metadata, honestly\n", "not JSON"),
    "wrong schema": (b'{"format-version": 2, "hello": ["world"]}',
                     "not Iceberg table metadata"),
    "binary": (bytes(range(256)) * 8, "not"),
    "missing": (None, "the file does not exist"),
}


def damage(location: str, kind: str) -> None:
    path = Path(location.removeprefix("file://"))
    content = DAMAGE[kind][0]
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)


def check(error: BaseException, table: str, location: str, kind: str) -> None:
    assert isinstance(error, IcebergMetadataError)
    assert isinstance(error, NoSuchTableError) and isinstance(error, TableMetadataError)
    assert isinstance(error, CorruptFileError) and error.path == location
    text = str(error)
    assert f"table {table} " in text and location in text and DAMAGE[kind][1] in text
    assert "\n" not in text and "pydantic" not in text and len(text) < 400


@pytest.fixture
def ice(tmp_path: Path) -> OlympiaCatalog:
    catalog = open_catalog(local_properties(tmp_path))
    catalog.create_namespace("sales")
    return catalog


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_load_table(ice: OlympiaCatalog, tmp_path: Path, kind: str) -> None:
    location = ice.create_table("sales.t", SCHEMA).metadata_location
    damage(location, kind)
    fresh = open_catalog(local_properties(tmp_path))  # parsed files are cached: a new one
    with pytest.raises(NoSuchTableError) as err:  # what pyiceberg callers catch
        fresh.load_table("sales.t")
    check(err.value, "sales.t", location, kind)
    assert fresh.table_exists("sales.t")  # the table is there; its metadata is not readable
    fresh.drop_table("sales.t")  # and can still be dropped


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_register_table(ice: OlympiaCatalog, tmp_path: Path, kind: str) -> None:
    location = f"file://{tmp_path}/elsewhere/00000-x.metadata.json"
    Path(location.removeprefix("file://")).parent.mkdir()
    Path(location.removeprefix("file://")).write_bytes(b"{}")
    damage(location, kind)
    version = ice.olympia.refresh()
    with pytest.raises(IcebergMetadataError) as err:
        ice.register_table("sales.copy", location)
    check(err.value, "sales.copy", location, kind)
    assert ice.olympia.refresh() == version and not ice.table_exists("sales.copy")


@pytest.mark.parametrize(("name", "content", "reason"), [
    ("00000-a.gz.metadata.json", b"plain text", "not gzip data"),
    ("00000-b.metadata.json", b"[1, 2]", "not Iceberg table metadata: Input should be an object"),
    ("00000-c.metadata.json", b'{"format-version": 7}', "not Iceberg table metadata: "),
])
def test_register_table_more_shapes(ice: OlympiaCatalog, tmp_path: Path, name: str,
                                    content: bytes, reason: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(IcebergMetadataError, match=f"table sales.t is unreadable: {reason}"):
        ice.register_table("sales.t", f"file://{tmp_path}/{name}")


def run(tmp_path: Path, *args: str) -> Result:
    env = {"OLYMPIA_CATALOG": str(tmp_path / "catalog"), "NO_COLOR": "1"}
    return CliRunner().invoke(main, list(args), env=env)


def spec(tmp_path: Path, *extra: dict[str, Any]) -> str:
    columns = [{"name": "id", "type": "int8"}, *extra]
    return str(write_spec(tmp_path / "spec", {"sales": {"namespace": "sales", "tables": {
        "t": {"columns": columns}}}}))


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_plan_and_apply(tmp_path: Path, kind: str) -> None:
    assert run(tmp_path, "init", "--property",
               f"warehouse=file://{tmp_path}/wh").exit_code == 0
    assert run(tmp_path, "apply", spec(tmp_path), "--auto-approve").exit_code == 0
    ice = OlympiaCatalog("c", uri=str(tmp_path / "catalog"))
    location = ice.load_table("sales.t").metadata_location
    damage(location, kind)
    changed = spec(tmp_path, {"name": "x", "type": "int4"})
    for args in (("plan", changed), ("apply", changed, "--auto-approve")):
        result = run(tmp_path, *args)
        assert result.exit_code == 1, result.output
        (line,) = result.output.splitlines()  # one line, no traceback
        assert line.startswith(f"Error: corrupt file {location}: ")
        assert "table sales.t " in line and DAMAGE[kind][1] in line
    assert ice.olympia.refresh() == 1  # nothing applied
