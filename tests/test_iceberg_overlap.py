"""Two live tables never share files, however writers race (issue: the location rule
re-checked on rebase).

A create, register or relocation is checked against the version it is staged on; a commit
that lost the race to newer versions re-checks the places it claims against the tables
those versions changed, and is refused with ``LocationInUseError`` (nothing of it lands) as
if the other writer had committed first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Cli
from iceberg_helpers import SCHEMA, local_properties, open_catalog, rows

from olympia.exceptions import LocationInUseError
from olympia.iceberg import OlympiaCatalog


def _two_writers(tmp_path: Path) -> tuple[OlympiaCatalog, OlympiaCatalog, str]:
    props = local_properties(tmp_path)
    first = open_catalog(props, "one")
    first.create_namespace("ns")
    return first, open_catalog(props, "two"), props["warehouse"]


def test_nested_creates_staged_on_one_base_do_not_both_land(tmp_path: Path) -> None:
    one, two, wh = _two_writers(tmp_path)
    with (pytest.raises(LocationInUseError, match=r"ns\.a.*ns\.b.*version 2") as refused,
          one.transaction() as outer):
        outer.create_table("ns.a", SCHEMA, location=f"{wh}/x")
        with two.transaction() as inner:  # staged on the same base, lands first
            inner.create_table("ns.b", SCHEMA, location=f"{wh}/x/y")
    assert refused.value.other == "ns.b"
    assert [t for _, t in one.list_tables("ns")] == ["b"]
    assert one.olympia.refresh() == 2  # the refused create left no version
    assert not list((tmp_path / "warehouse" / "x" / "metadata").glob("*"))  # nor its metadata
    two.load_table("ns.b").append(rows(0))
    assert one.load_table("ns.b").scan().to_arrow().num_rows == 3
    result = Cli({})("verify", "-c", local_properties(tmp_path)["uri"])
    assert result.exit_code == 0, result.output
