"""Time travel, history, diff, rollback, export and distributed transactions."""

from __future__ import annotations

import json
import multiprocessing as mp
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import Location
from expire_fixtures import expire_dtxn

from olympia import Catalog, versions
from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.keys import dtxn_path, path_version, version_path
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import now_millis
from olympia.cli import main
from olympia.exceptions import (
    AlreadyExistsError,
    CommitConflict,
    CorruptFileError,
    FileAlreadyExists,
    InvalidArgumentError,
    NotFoundError,
    ReadOnlyError,
    TransactionExpiredError,
)
from olympia.storage import Storage
from olympia.tree import btree
from olympia.versions.dtxn import load_transaction

COLS = [{"name": "id", "type": "int8"}]


def build(location: Location, tables: int = 12, order: int = 4) -> Catalog:
    catalog = Catalog.create(location.uri, location.storage_options, order=order)
    catalog.create_namespace("s")
    for i in range(tables):
        catalog.create_table("s", f"t{i:02d}", columns=COLS)
    return catalog


def listing(snapshot: Snapshot | Catalog) -> dict[str, Any]:
    namespaces, tables, views = snapshot.load_all()
    return {"ns": namespaces, "tables": tables, "views": views}


def walk_previous_root(catalog: Catalog, millis: int) -> int:
    """The spec's procedure: follow previous_root from the latest until created_at <= millis."""
    root = catalog.files.discover_latest()
    while root.created_at_millis > millis:
        assert root.node.previous_root is not None
        version = path_version(root.node.previous_root)
        assert version is not None
        root = catalog.files.read_root(version)
    return root.version


def test_timestamp_travel_matches_previous_root_walk(location: Location) -> None:
    catalog = build(location, tables=6)
    versions.rollback(catalog, 3)
    catalog.create_table("s", "after", columns=COLS)
    versions.rollback(catalog, "previous")
    stamps = [catalog.at_version(v).created_at_millis for v in range(catalog.version + 1)]
    probes = sorted({s + d for s in stamps for d in (-1, 0, 1)} - {stamps[0] - 1})
    for millis in probes:
        assert versions.at_timestamp(catalog, millis).version == walk_previous_root(catalog,
                                                                                    millis)
    with pytest.raises(NotFoundError, match="no version was latest"):
        versions.at_timestamp(catalog, stamps[0] - 1)


def test_timestamp_travel_reads_log_roots(location: Location) -> None:
    catalog = Catalog.create(location.uri, location.storage_options)
    for i in range(64):
        catalog.create_namespace(f"n{i}")
    target = catalog.at_version(40).created_at_millis
    cold = Catalog.open(location.uri, location.storage_options)
    cold.storage.stats.reset()
    assert versions.at_timestamp(cold, target).version == 40
    # discovery (hints + probe) plus ~log2(65) roots
    assert cold.storage.stats.reads + cold.storage.stats.exists <= 4 + 2 * 7


def test_version_views_are_read_only_and_bounded(location: Location) -> None:
    catalog = build(location, tables=3)
    view = versions.resolve(catalog, version=2)
    assert view.list_tables("s") == ["t00"]
    with pytest.raises(ReadOnlyError):
        view.transaction()
    with pytest.raises(NotFoundError, match="does not exist"):
        versions.at_version(catalog, 99)
    with pytest.raises(NotFoundError, match="unknown export 'nope'"):
        versions.resolve(catalog, version="nope")


def test_history_is_paginated_newest_first(location: Location) -> None:
    catalog = build(location, tables=5)
    with catalog.transaction() as txn:
        txn.annotate(spec_digest="abc123", git_commit="deadbeef")
        txn.drop_table("s.t00")
    page = versions.history(catalog, limit=3)
    assert [v.version for v in page] == [7, 6, 5]
    assert page[0].info == {"spec_digest": "abc123", "git_commit": "deadbeef"}
    assert [a.type for a in page[0].changes()] != []
    catalog.storage.stats.reset()
    older = versions.history(catalog, limit=3, before=page[-1].version)
    assert [v.version for v in older] == [4, 3, 2]
    assert catalog.storage.stats.reads <= 3 + 4  # three roots plus discovery
    assert versions.history(catalog, limit=10, before=2)[-1].version == 0


def test_diff_reports_objects(location: Location) -> None:
    catalog = build(location, tables=20, order=3)
    before = catalog.version
    with catalog.transaction() as txn:
        txn.drop_table("s.t05")
        txn.create_table("s", "new", columns=COLS)
        txn.alter_table("s.t10", set_properties={"k": "v"})
    result = versions.diff(catalog, before, catalog.version)
    assert [str(r) for r in result.added] == ["s.new"]
    assert [str(r) for r in result.removed] == ["s.t05"]
    assert [str(r) for r in result.changed] == ["s.t10"]
    assert versions.diff(catalog, catalog.version, catalog.version).empty


def test_rollback_restores_the_tree(location: Location) -> None:
    catalog = build(location, tables=10)
    target = 5
    expected = listing(catalog.at_version(target))
    latest = catalog.version
    new = versions.rollback(catalog, target)
    assert new == latest + 1
    assert listing(catalog) == expected
    root = catalog.snapshot.root.node
    old_root = catalog.at_version(target).root.node
    assert (root.keys, root.values, root.children) == (old_root.keys, old_root.values,
                                                       old_root.children)
    assert root.previous_root == root.rollback_from_root == version_path(latest)
    info = versions.history(catalog, limit=1)[0]
    assert info.is_rollback and info.rollback == (latest, target)
    with pytest.raises(InvalidArgumentError):
        versions.rollback(catalog, catalog.version)
    catalog.storage.write("vn/oldest", b"3")
    with pytest.raises(NotFoundError, match="oldest kept version is 3"):
        versions.rollback(catalog, 2)


def test_rollback_racing_a_commit(location: Location) -> None:
    catalog = build(location, tables=3)
    other = Catalog.open(location.uri, location.storage_options)
    txn = other.transaction()
    txn.create_table("s", "racer", columns=COLS)
    versions.rollback(catalog, 2)
    with pytest.raises(CommitConflict, match="rollback"):
        txn.commit()


def test_full_export_is_self_contained(location: Location, tmp_path: Any) -> None:
    catalog = build(location, tables=15, order=3)
    catalog.create_view("s", "v", sql="SELECT 1", referenced_objects=["s.t01"])
    source_version = catalog.version
    expected = listing(catalog)
    target = location.sub("exports/full1")
    result = versions.export(catalog, "full1", target.uri, "full",
                             target_storage_options=target.storage_options)
    assert result.version == source_version and result.files_copied > 10
    catalog.drop_namespace("s", cascade=True)  # modify the source afterwards
    exported = Catalog.open(target.uri, target.storage_options)
    assert exported.version == source_version
    assert listing(exported) == expected
    snap = exported.snapshot
    btree.validate(snap.nodes, snap.root.node, 3)
    assert listing(versions.at_export(catalog, "full1")) == expected
    record = catalog.catalog_def.exports["full1"]
    assert catalog.catalog_def.exported_snapshots["full1"] == version_path(source_version)
    assert record.version == source_version
    with pytest.raises(AlreadyExistsError):
        versions.export(catalog, "full1", target.uri)
    # a rollback keeps the export records
    versions.rollback(catalog, 2)
    assert "full1" in catalog.catalog_def.exported_snapshots


def interrupt_export(catalog: Catalog, target: Location) -> None:
    """Start exporting ``catalog`` as "r" to ``target`` and stop it after five copies."""
    calls = {"n": 0}

    def flaky(done: int, total: int) -> None:
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        versions.export(catalog, "r", target.uri, target_storage_options=target.storage_options,
                        progress=flaky)
    # each copy writes its file, then reports: every copy that started had finished when the
    # export raised, and none started after (the rest were cancelled)
    assert len(Storage(target.uri, target.storage_options).list()) == calls["n"]


def test_interrupted_export_resumes(location: Location) -> None:
    catalog = build(location, tables=30, order=3)
    target = location.sub("exports/resumed")
    interrupt_export(catalog, target)
    assert "r" not in catalog.catalog_def.exported_snapshots
    result = versions.export(catalog, "r", target.uri,
                             target_storage_options=target.storage_options)
    assert result.files_skipped >= 4
    assert listing(Catalog.open(target.uri, target.storage_options)) == listing(catalog.at_version(
        result.version))


@pytest.mark.parametrize("mode", ["minimal", "partial"])
def test_minimal_and_partial_exports(location: Location, mode: str) -> None:
    catalog = build(location, tables=20, order=3)
    target = location.sub(f"exports/{mode}")
    result = versions.export(catalog, mode, target.uri, mode,
                             target_storage_options=target.storage_options,
                             depth=1 if mode == "partial" else None)
    copied = {f.path for f in Catalog.open(catalog.uri, catalog.storage.options).storage.list()}
    assert copied  # source untouched
    files = {f.path for f in Storage(target.uri, target.storage_options).list()}
    assert version_path(result.version) in files
    if mode == "minimal":
        assert files == {version_path(result.version)}
    else:
        assert any(p.startswith("node/") for p in files)
        assert not any(p.startswith("def/") for p in files)
    assert catalog.catalog_def.exports[mode].mode == (1 if mode == "minimal" else 2)


def _resume_and_commit(uri: str, options: dict[str, Any], txn_id: str) -> int:
    catalog = Catalog.open(uri, options)
    txn = versions.resume_transaction(catalog, txn_id)
    assert txn.table_exists("s.from_first")
    txn.create_table("s", "from_second", columns=COLS)
    return txn.commit()


def test_distributed_transaction_across_processes(shared_location: Location) -> None:
    catalog = build(shared_location, tables=2)
    txn = catalog.transaction()
    txn.create_table("s", "from_first", columns=COLS)
    txn.drop_table("s.t00")
    txn_id = versions.save_transaction(txn)
    assert [r.id for r in versions.list_transactions(catalog)] == [txn_id]
    catalog.create_table("s", "meanwhile", columns=COLS)  # unrelated commit in between
    with mp.get_context("spawn").Pool(1) as pool:
        version = pool.apply(_resume_and_commit,
                             (shared_location.uri, shared_location.storage_options, txn_id))
    final = Catalog.open(shared_location.uri, shared_location.storage_options)
    assert final.version == version
    assert final.list_tables("s") == ["from_first", "from_second", "meanwhile", "t01"]
    assert versions.list_transactions(final) == []
    with pytest.raises(NotFoundError):
        versions.resume_transaction(final, txn_id)


def test_expired_distributed_transaction_is_refused(location: Location) -> None:
    catalog = Catalog.create(location.uri, location.storage_options, txn_ttl_millis=60_000)
    catalog.create_namespace("s")
    before = now_millis()
    txn = catalog.transaction()
    txn.create_table("s", "x", columns=COLS)
    txn_id = versions.save_transaction(txn)
    expires = load_transaction(catalog, txn_id).expire_at_millis
    assert before + 60_000 <= expires <= now_millis() + 60_000  # the catalog's TTL
    expire_dtxn(catalog, txn_id)  # no wait on the wall clock: the record expired long ago
    with pytest.raises(TransactionExpiredError):
        versions.resume_transaction(catalog, txn_id)
    versions.abort_transaction(catalog, txn_id)
    assert versions.list_transactions(catalog) == []


def test_cli_versions(location: Location, tmp_path: Any) -> None:
    if location.kind == "memory":
        pytest.skip("the CLI opens the catalog in a fresh process state; use disk or S3")
    catalog = build(location, tables=4)
    env = {"OLYMPIA_CATALOG": location.uri,
           "OLYMPIA_STORAGE_OPTIONS": json.dumps(location.storage_options)}
    runner = CliRunner()
    out = runner.invoke(main, ["log", "--json", "-n", "2"], env=env)
    assert out.exit_code == 0, out.output
    assert [v["version"] for v in json.loads(out.output)] == [5, 4]
    out = runner.invoke(main, ["diff", "1", "5", "--json"], env=env)
    assert len(json.loads(out.output)["added"]) == 4
    out = runner.invoke(main, ["rollback", "--to", "previous", "--json", "--auto-approve",
                               "--allow-destructive"], env=env)
    assert json.loads(out.output)["version"] == 6
    out = runner.invoke(main, ["show", "--version", "2", "--json"], env=env)
    assert [t["name"] for t in json.loads(out.output)["tables"]] == ["s.t00"]
    target = location.sub("cli-export")
    out = runner.invoke(main, ["export", "e1", "--target", target.uri, "--json"], env=env)
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["committed_version"] == 7
    out = runner.invoke(main, ["show", "--export", "e1"], env=env)
    assert "table t02" in out.output
    out = runner.invoke(main, ["rollback", "--to", "99"], env=env)
    assert out.exit_code == 1 and "Traceback" not in out.output
    assert catalog.refresh() == 7


def test_version_views_refuse_every_write(location: Location) -> None:
    catalog = build(location, tables=2)
    view = catalog.at_version(2)
    writes = {
        "create_namespace": ("n",), "alter_namespace": ("s",), "drop_namespace": ("s",),
        "rename_namespace": ("s", "n"), "create_table": ("s", "x"), "alter_table": ("s.t00",),
        "drop_table": ("s.t00",), "rename_table": ("s.t00", "x"),
        "create_view": ("s", "v"), "replace_view": ("s.v",), "drop_view": ("s.v",),
        "rename_view": ("s.v", "w"), "transaction": (),
    }
    for name, args in writes.items():
        with pytest.raises(ReadOnlyError, match=f"version 2 .*{name}"):
            getattr(view, name)(*args)
    assert catalog.version == 3 and catalog.list_tables("s") == ["t00", "t01"]


def _target_files(target: Location) -> dict[str, bytes]:
    storage = Storage(target.uri, target.storage_options)
    return {f.path: storage.read(f.path) for f in storage.list()}


def test_export_to_its_own_source_is_refused(location: Location) -> None:
    catalog = build(location, tables=3)
    before = _target_files(location)
    spellings = [location.uri, location.uri + "/"]
    if location.kind == "local":
        spellings.append("file://" + location.uri)
    if location.kind == "s3":
        spellings.append(location.uri.replace("s3://", "s3a://", 1))
    for uri in spellings:
        for mode in ("full", "minimal"):
            with pytest.raises(InvalidArgumentError, match="is the source catalog itself"):
                versions.export(catalog, "self", uri, mode,
                                target_storage_options=location.storage_options, version=1)
    assert _target_files(location) == before  # vn/oldest untouched, nothing copied
    assert catalog.files.oldest_version() == 0 and catalog.at_version(0).version == 0


@pytest.mark.parametrize("mode", ["full", "minimal", "partial"])
def test_export_into_another_catalog_is_refused(location: Location, mode: str) -> None:
    catalog = build(location, tables=3)
    target = location.sub("other")
    other = Catalog.create(target.uri, target.storage_options)
    other.create_namespace("theirs")
    before = _target_files(target)
    with pytest.raises(AlreadyExistsError, match="already holds another catalog"):
        versions.export(catalog, "e", target.uri, mode,
                        target_storage_options=target.storage_options)
    assert _target_files(target) == before
    assert "e" not in catalog.catalog_def.exported_snapshots
    assert Catalog.open(target.uri, target.storage_options).list_namespaces() == ["theirs"]


def test_full_export_over_other_versions_is_refused(location: Location) -> None:
    catalog = build(location, tables=3)
    target = location.sub("exports/e")
    versions.export(catalog, "e2", target.uri, target_storage_options=target.storage_options,
                    version=2)
    before = _target_files(target)
    with pytest.raises(AlreadyExistsError, match=r"other versions of this catalog \(2\)"):
        versions.export(catalog, "e4", target.uri,
                        target_storage_options=target.storage_options, version=4)
    assert _target_files(target) == before
    assert Catalog.open(target.uri, target.storage_options).version == 2
    # a minimal export sets no vn/ hints, so it may join them
    versions.export(catalog, "m4", target.uri, "minimal",
                    target_storage_options=target.storage_options, version=4)
    assert Catalog.open(target.uri, target.storage_options).files.oldest_version() == 2


def test_resumed_export_skips_only_identical_files(location: Location) -> None:
    catalog = build(location, tables=30, order=3)
    target = location.sub("exports/resumed")
    interrupt_export(catalog, target)
    storage = Storage(target.uri, target.storage_options)
    copied = sorted(f.path for f in storage.list() if f.path.startswith("node/"))
    assert copied
    storage.write(copied[0], storage.read(copied[0])[:-1] + b"!")  # same size, other bytes
    before = _target_files(target)
    with pytest.raises(FileAlreadyExists, match=rf"different file.*{copied[0]}"):
        versions.export(catalog, "r", target.uri, target_storage_options=target.storage_options)
    assert _target_files(target) == before  # refused before copying anything
    storage.delete(copied[0])
    result = versions.export(catalog, "r", target.uri,
                             target_storage_options=target.storage_options)
    assert result.files_skipped >= 3
    assert listing(Catalog.open(target.uri, target.storage_options)) == listing(catalog.at_version(
        result.version))


def test_serializable_transaction_is_saved_only_before_its_first_read(
        location: Location) -> None:
    catalog = build(location, tables=2)
    txn = catalog.transaction("SERIALIZABLE")
    txn.create_table("s", "x", columns=COLS)
    with pytest.raises(InvalidArgumentError, match="SERIALIZABLE .* cannot be saved"):
        versions.save_transaction(txn)
    assert versions.list_transactions(catalog) == [] and txn.state == "open"
    assert txn.commit() == 4  # still usable here
    # saved before any read, it resumes as SERIALIZABLE and checks the reads made since
    txn_id = versions.save_transaction(catalog.transaction("SERIALIZABLE"))
    resumed = versions.resume_transaction(catalog, txn_id)
    assert resumed.isolation == pb.SERIALIZABLE
    assert resumed.load_table("s.t00").name == "t00"
    resumed.create_table("s", "y", columns=COLS)
    catalog.alter_table("s.t00", set_properties={"k": "v"})
    with pytest.raises(CommitConflict, match="what it read"):
        resumed.commit()


def test_distributed_transaction_keeps_annotations(location: Location) -> None:
    catalog = build(location, tables=1)
    txn = catalog.transaction()
    txn.annotate(git_commit="abc123", tool="test")
    txn.create_table("s", "x", columns=COLS)
    txn_id = versions.save_transaction(txn)
    resumed = versions.resume_transaction(Catalog.open(location.uri, location.storage_options),
                                          txn_id)
    resumed.annotate(tool="resumer")
    resumed.create_table("s", "y", columns=COLS)
    version = resumed.commit()
    (entry,) = versions.history(catalog, limit=1)
    assert entry.version == version
    info = dict(entry.info)
    assert info.pop("transaction") == txn_id
    assert info.pop("transaction_instance")  # by which a second committer finds it
    assert info == {"git_commit": "abc123", "tool": "resumer"}
    assert [a.type for a in entry.actions].count(A.TRANSACTION_INFO) == 1
    assert [actions.describe(a) for a in entry.changes()] == ["create table s.x",
                                                              "create table s.y"]


def test_corrupt_or_empty_transaction_record_is_named(location: Location) -> None:
    catalog = build(location, tables=1)
    txn = catalog.transaction()
    txn.create_table("s", "x", columns=COLS)
    txn_id = versions.save_transaction(txn)
    path = dtxn_path(txn_id)
    record = pb.DistributedTransactionDef.FromString(catalog.storage.read(path))
    record.ClearField("running_root_node_file_path")
    catalog.storage.write(path, record.SerializeToString())
    with pytest.raises(CorruptFileError, match=rf"{path}.*without its required "
                                               "running_root_node_file_path"):
        versions.resume_transaction(catalog, txn_id)
    catalog.storage.write(path, b"")
    with pytest.raises(CorruptFileError, match=rf"{path}: empty file"):
        versions.list_transactions(catalog)


# --- hardening: version hints, export depth, names in JSON ---------------------------------


def _cli(location: Location, *args: str) -> Any:
    env = {"OLYMPIA_CATALOG": location.uri,
           "OLYMPIA_STORAGE_OPTIONS": json.dumps(location.storage_options)}
    out = CliRunner().invoke(main, list(args), env=env)
    assert "Traceback" not in out.output, out.output
    return out


@pytest.mark.parametrize("hint", [b"4294967296", b"99999999999999999999999999999999999999",
                                  b"garbage", b"-1", b"\x00", b"", b"9", b"4294967295"])
def test_a_bad_latest_hint_is_ignored(shared_location: Location, hint: bytes) -> None:
    """Out of range, not a number, or a version never committed: every command works."""
    catalog = build(shared_location, tables=3)
    catalog.storage.write("vn/latest", hint)
    assert Catalog.open(shared_location.uri, shared_location.storage_options).version == 4
    for args in (["ls"], ["log", "-n", "1"], ["show"], ["verify"]):
        out = _cli(shared_location, *args)
        assert out.exit_code == 0, (args, out.output)
    assert json.loads(_cli(shared_location, "log", "--json", "-n", "1").output)[0][
        "version"] == 4


@pytest.mark.parametrize("hint", [b"4294967296", b"garbage", b" \n"])
def test_an_unreadable_oldest_hint_reads_as_the_lowest_root(location: Location,
                                                            hint: bytes) -> None:
    """The safe reading of a vn/oldest that holds no version number: the lowest version
    whose root exists (never one below, whose files expiry may have deleted)."""
    catalog = build(location, tables=4)
    catalog.files.write_hint("vn/oldest", 2)
    for v in (0, 1):
        catalog.storage.delete(version_path(v))
    catalog.storage.write("vn/oldest", hint)
    catalog.storage.delete("vn/latest")
    fresh = Catalog.open(location.uri, location.storage_options)
    assert fresh.version == 5 and fresh.files.oldest_version() == 2
    with pytest.raises(NotFoundError, match="expired"):
        fresh.at_version(1)
    assert listing(fresh.at_version(2)) == listing(catalog.at_version(2))


def test_an_oldest_hint_naming_a_missing_version_is_named(location: Location) -> None:
    catalog = build(location, tables=1)
    catalog.storage.write("vn/oldest", b"7")
    with pytest.raises(CorruptFileError, match="vn/oldest: names version 7"):
        Catalog.open(location.uri, location.storage_options)


def test_an_oldest_hint_naming_a_missing_root_below_existing_ones_is_named(
        location: Location) -> None:
    """Discovery may skip reading a root it probes past, but never the one vn/oldest names."""
    catalog = build(location, tables=3)
    catalog.storage.write("vn/oldest", b"2")
    catalog.storage.delete("vn/latest")
    catalog.storage.delete(version_path(2))  # versions 3 and 4 still exist
    with pytest.raises(CorruptFileError, match="vn/oldest: names version 2"):
        Catalog.open(location.uri, location.storage_options)


def test_partial_export_depth_is_range_checked(shared_location: Location) -> None:
    catalog = build(shared_location, tables=2)
    target = shared_location.sub("exports/deep")
    with pytest.raises(InvalidArgumentError, match="depth .* from 0 to 4294967295"):
        versions.export(catalog, "deep", target.uri, "partial",
                        target_storage_options=target.storage_options, depth=2**32)
    out = _cli(shared_location, "export", "deep", "--target", target.uri, "--mode", "partial",
               "--depth", "99999999999")
    assert out.exit_code == 1 and "--depth" in out.output
    catalog.refresh()
    assert "deep" not in catalog.catalog_def.exports
    assert not Storage(target.uri, target.storage_options).list()


def test_json_output_tells_dotted_names_apart(shared_location: Location) -> None:
    """Table ``c`` of namespace ``a.b`` and table ``b.c`` of namespace ``a`` print the same
    combined name; ``namespace`` and ``object_name`` tell them apart."""
    catalog = Catalog.create(shared_location.uri, shared_location.storage_options)
    catalog.create_namespace("a")
    catalog.create_namespace("a.b")
    catalog.create_table("a.b", "c", columns=COLS)
    catalog.create_table("a", "b.c", columns=COLS)
    pairs = {("a.b", "c"), ("a", "b.c")}
    shown = json.loads(_cli(shared_location, "show", "--json").output)
    assert {(t["namespace"], t["object_name"]) for t in shown["tables"]} == pairs
    assert {t["name"] for t in shown["tables"]} == {"a.b.c"}  # the combined field stays
    diff = json.loads(_cli(shared_location, "diff", "0", "4", "--json").output)
    assert {(r["namespace"], r["object_name"]) for r in diff["added"]} == pairs | {
        ("a", None), ("a.b", None)}
    log = json.loads(_cli(shared_location, "log", "--json", "-n", "2").output)
    assert {(a["namespace"], a["object_name"]) for v in log for a in v["actions"]} == pairs
    assert {a["object"] for v in log for a in v["actions"]} == {"a.b.c"}
