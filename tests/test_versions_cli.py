"""``olympia txn begin|list|show|commit|abort`` through click's CliRunner, on every storage kind."""

from __future__ import annotations

import json

from click.testing import CliRunner, Result
from conftest import Location
from expire_fixtures import expire_dtxn

from olympia import Catalog, versions
from olympia.cli import main

COLS = [{"name": "id", "type": "int8"}]


def run(location: Location, *args: str) -> Result:
    env = {"OLYMPIA_CATALOG": location.uri, "NO_COLOR": "1",
           "OLYMPIA_STORAGE_OPTIONS": json.dumps(location.storage_options)}
    result = CliRunner().invoke(main, ["txn", *args], env=env)
    assert "Traceback" not in result.output, result.output
    return result


def saved(catalog: Catalog, table: str) -> str:
    txn = catalog.transaction()
    txn.annotate(git_commit="abc123")
    txn.create_table("s", table, columns=COLS)
    txn.drop_table("s.old")
    return versions.save_transaction(txn)


def test_txn_list_show_abort(location: Location) -> None:
    catalog = Catalog.create(location.uri, location.storage_options)
    catalog.create_namespace("s")
    catalog.create_table("s", "old", columns=COLS)
    out = run(location, "list")
    assert out.exit_code == 0 and out.output.strip() == "no distributed transactions"
    assert json.loads(run(location, "list", "--json").output) == []

    txn_id = saved(catalog, "x")
    out = run(location, "list", "--json")
    assert out.exit_code == 0, out.output
    (record,) = json.loads(out.output)
    assert (record["id"], record["isolation"], record["beginning_version"],
            record["expired"]) == (txn_id, "SNAPSHOT", 2, False)
    assert record["running_root"].startswith("node/")
    assert txn_id in run(location, "list").output

    out = run(location, "show", txn_id, "--json")
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    assert shown["id"] == txn_id and shown["info"] == {"git_commit": "abc123"}
    assert [a["description"] for a in shown["actions"]] == ["create table s.x",
                                                            "drop table s.old"]
    out = run(location, "show", txn_id)
    assert out.exit_code == 0, out.output
    assert f"transaction {txn_id}  open  SNAPSHOT" in out.output
    assert "git_commit: abc123" in out.output and "create table s.x" in out.output

    out = run(location, "abort", txn_id, "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {"id": txn_id, "aborted": True}
    assert json.loads(run(location, "list", "--json").output) == []
    for command in ("show", "abort"):
        out = run(location, command, txn_id)
        assert out.exit_code == 1
        assert f"Error: no distributed transaction {txn_id!r}" in out.output
    assert catalog.refresh() == 2  # nothing was committed


def test_txn_show_marks_an_expired_transaction(location: Location) -> None:
    catalog = Catalog.create(location.uri, location.storage_options)
    catalog.create_namespace("s")
    catalog.create_table("s", "old", columns=COLS)
    txn_id = saved(catalog, "late")
    expire_dtxn(catalog, txn_id)  # no wait on the wall clock: the record expired long ago
    assert json.loads(run(location, "show", txn_id, "--json").output)["expired"] is True
    out = run(location, "list")
    assert out.exit_code == 0 and f"{txn_id}  open  SNAPSHOT  from version 2" in out.output
    assert " expired " in out.output
    out = run(location, "abort", txn_id)
    assert out.exit_code == 0 and f"Aborted distributed transaction {txn_id}" in out.output


def test_txn_begin_and_commit(location: Location) -> None:
    catalog = Catalog.create(location.uri, location.storage_options)
    catalog.create_namespace("s")
    out = run(location, "begin", "wap-7", "--ttl", "2h", "--info", "dag_run=r1", "--json")
    assert out.exit_code == 0, out.output
    began = json.loads(out.output)
    assert (began["id"], began["state"], began["beginning_version"]) == ("wap-7", "open", 1)
    assert began["expire_at_millis"] - began["began_at_millis"] == 2 * 3600 * 1000
    with catalog.transaction(name="wap-7") as stmt:
        stmt.create_table("s", "t", columns=COLS)
    shown = json.loads(run(location, "show", "wap-7", "--json").output)
    assert shown["info"]["dag_run"] == "r1" and "user" in shown["info"]
    assert [a["description"] for a in shown["actions"]] == ["create table s.t"]
    out = run(location, "begin", "wap-7")
    assert out.exit_code == 1 and "exists" in out.output
    for bad in (("begin", "../x"), ("begin", "y", "--ttl", "soon"), ("commit", "nope")):
        out = run(location, *bad)
        assert out.exit_code == 1 and out.output.startswith("Error:"), out.output
    out = run(location, "commit", "wap-7")
    assert out.exit_code == 0, out.output
    assert "Committed distributed transaction wap-7 as version 2" in out.output
    assert catalog.refresh() == 2 and catalog.table_exists("s.t")
