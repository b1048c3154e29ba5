"""Corruption is detected on read (ruling 13) and long names fit a file name (ruling 12).

The property test flips one bit in one file of a random catalog and runs ``ls``, ``plan`` and
``apply`` through the CLI: a change any reader can see is always reported as a
CorruptFileError naming the file, and never committed on.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from plan_helpers import write_spec

from olympia import Catalog
from olympia._proto import objects_pb2 as pb
from olympia.catalog.keys import (
    MAX_FILE_NAME_BYTES,
    ObjectRef,
    ObjectType,
    content_digest,
    def_digest,
    path_version,
)
from olympia.catalog.transaction import Transaction
from olympia.cli import main
from olympia.exceptions import CorruptFileError
from olympia.spec.yamlpos import dump
from olympia.storage import Storage
from olympia.tree import btree
from olympia.tree.node import CHECKSUM_KEY

# --- ruling 12: long names ----------------------------------------------------------------

# fixed part of a definition file name: {uuid4}.{32 hex}-...binpb
STEM = 36 + 1 + 32 + len(".binpb")
# ASCII letters cannot reach the boundary: a name has at most 100 bytes
FILLERS = {"percent": "%", "e-acute": "é", "emoji": "\U0001f600"}


def name_encoding_to(size: int, filler: str) -> str:
    """A valid name whose percent-encoding is exactly ``size`` bytes, mostly ``filler``."""
    step = len(filler.encode()) * 3
    count = min(size // step, 100 // len(filler.encode()) - 5)
    name = filler * count + "b" * (size - count * step)
    assert len(name.encode()) <= 100 and len(quote(name, safe="")) == size, name
    return name


def part(name: str, full: bool) -> str:
    """Ruling 12 restated: the percent-encoded name, or ~ and 32 hex of its SHA-256."""
    return quote(name, safe="") if full else "~" + hashlib.sha256(name.encode()).hexdigest()[:32]


def file_name(catalog: Catalog, ref: ObjectRef) -> str:
    path = catalog.definition_path(ref)
    assert path is not None
    return path.rsplit("/", 1)[-1]


@pytest.fixture(params=["memory", "local"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Memory, and a real local file system with its 255-byte file-name limit."""
    if request.param == "memory":
        return f"memory://integrity-{tmp_path.name}"
    return str(tmp_path / "wh")


@pytest.mark.parametrize("filler", list(FILLERS.values()), ids=list(FILLERS))
def test_namespace_file_names_at_the_length_boundary(where: str, filler: str) -> None:
    budget = MAX_FILE_NAME_BYTES - STEM - 1  # 179 bytes of encoded namespace
    full, over = name_encoding_to(budget, filler), name_encoding_to(budget + 1, filler)
    catalog = Catalog.create(where)
    for name in (full, over):
        catalog.create_namespace(name, {"k": "v"})
    fits = file_name(catalog, ObjectRef(ObjectType.NAMESPACE, full))
    assert len(fits.encode()) == MAX_FILE_NAME_BYTES
    assert fits.endswith(f"-{part(full, True)}.binpb")
    hashed = file_name(catalog, ObjectRef(ObjectType.NAMESPACE, over))
    assert hashed.endswith(f"-{part(over, False)}.binpb")
    again = Catalog.open(where)  # readers take names from keys, never from file names
    assert sorted(again.list_namespaces()) == sorted([full, over])
    assert again.load_namespace(over).properties == {"k": "v"}


@pytest.mark.parametrize("kind", [ObjectType.TABLE, ObjectType.VIEW])
@pytest.mark.parametrize("filler", list(FILLERS.values()), ids=list(FILLERS))
def test_table_and_view_file_names_at_the_length_boundary(where: str, kind: ObjectType,
                                                          filler: str) -> None:
    budget = MAX_FILE_NAME_BYTES - STEM - 2  # 178 bytes of encoded namespace + name
    catalog = Catalog.create(where)
    cases = {  # (namespace, name) -> parts expected in full
        ("s", name_encoding_to(budget - 1, filler)): (True, True),
        ("s", name_encoding_to(budget, filler)): (True, False),
        (name_encoding_to(budget - 1, filler), "t"): (True, True),
        (name_encoding_to(budget, filler), "t"): (False, True),
        (name_encoding_to(89, filler), name_encoding_to(89, filler)): (True, True),
        # over by one byte: the longer part goes, the namespace first on a tie
        (name_encoding_to(89, filler), name_encoding_to(90, filler)): (True, False),
        (name_encoding_to(90, filler), name_encoding_to(89, filler)): (False, True),
        (name_encoding_to(89, filler) + "b", name_encoding_to(89, filler) + "c"): (False, True),
    }
    with catalog.transaction() as txn:
        for namespace, name in cases:
            if not txn.namespace_exists(namespace):
                txn.create_namespace(namespace)
            if kind == ObjectType.TABLE:
                txn.create_table(namespace, name, columns=[{"name": "x", "type": "int4"}])
            else:
                txn.create_view(namespace, name, sql="SELECT 1")
    again = Catalog.open(where)
    for (namespace, name), (ns_full, name_full) in cases.items():
        got = file_name(again, ObjectRef(kind, namespace, name))
        assert got.endswith(f"-{part(namespace, ns_full)}-{part(name, name_full)}.binpb"), got
        assert len(got.encode()) <= MAX_FILE_NAME_BYTES
        if ns_full and name_full and namespace != "s" and name != "t":
            assert len(got.encode()) == MAX_FILE_NAME_BYTES
        listed = again.list_tables(namespace) if kind == ObjectType.TABLE else (
            again.list_views(namespace))
        assert name in listed
        loaded = again.load_table((namespace, name)) if kind == ObjectType.TABLE else (
            again.load_view((namespace, name)))
        assert loaded.name == name


def test_the_issue_names_apply_through_the_cli(tmp_path: Path) -> None:
    """36 x é, 25 x an emoji and 71 x % were valid names that failed in apply."""
    names = ["é" * 36, "\U0001f600" * 25, "%" * 71]
    spec = write_spec(tmp_path / "spec", {
        f"n{i}": {"namespace": n, "tables": {n: {}},
                  "views": {n[:-1] + "v": {"sql": "SELECT 1"}}}
        for i, n in enumerate(names)})
    run = cli_runner(str(tmp_path / "wh"))
    assert run("init").exit_code == 0
    assert run("apply", str(spec), "--auto-approve").exit_code == 0
    assert run("plan", str(spec), "--detailed-exitcode").exit_code == 0
    listed = run("ls", "--json")
    assert sorted(json.loads(listed.output)["namespaces"]) == sorted(names)
    assert run("verify").exit_code == 0


# --- ruling 13: checksums -----------------------------------------------------------------


def small_catalog(where: str, order: int = 3) -> Catalog:
    catalog = Catalog.create(where, order=order)
    with catalog.transaction() as txn:
        for ns in "abcd":
            txn.create_namespace(ns)
            for t in range(3):
                txn.create_table(ns, f"t{t}", columns=[{"name": "x", "type": "int4"}])
    return catalog


def leaves(catalog: Catalog) -> list[str]:
    snap = catalog.snapshot
    paths = list(btree.node_paths(snap.nodes, snap.root.node))
    return [p for p, n in zip(paths, snap.nodes.load_many(paths), strict=True) if n.is_leaf]


def test_definition_files_carry_a_checksum_of_their_content(tmp_path: Path) -> None:
    catalog = small_catalog(str(tmp_path / "wh"))
    paths = [catalog.snapshot.root.node.catalog_def, *(p for _, p in catalog.objects())]
    for path in paths:
        assert def_digest(path) == content_digest(catalog.storage.read(path))


def test_a_flipped_definition_fails_verify_naming_it(tmp_path: Path) -> None:
    where = str(tmp_path / "wh")
    catalog = small_catalog(where)
    path = catalog.definition_path(ObjectRef(ObjectType.TABLE, "b", "t1"))
    assert path is not None
    data = bytearray(catalog.storage.read(path))
    data[-1] ^= 0x01
    catalog.storage.write(path, bytes(data))
    run = cli_runner(where)
    result = run("verify")
    assert result.exit_code == 1 and path in result.output and "checksum mismatch" in result.output
    with pytest.raises(CorruptFileError, match=path):
        Catalog.open(where).load_table("b.t1")


def test_old_definition_files_without_a_checksum_still_read(tmp_path: Path) -> None:
    where = str(tmp_path / "wh")
    catalog = small_catalog(where)
    path = catalog.definition_path(ObjectRef(ObjectType.TABLE, "a", "t0"))
    assert path is not None
    old = path.replace(f".{def_digest(path)}-", "-")  # the name a pre-ruling writer gave it
    assert def_digest(old) is None
    catalog.storage.write(old, catalog.storage.read(path))
    assert Catalog.open(where).files.read_def(old, pb.TableDef).id == "a.t0"


def test_swapped_leaves_are_reported_with_their_parent(tmp_path: Path) -> None:
    """Both files keep valid checksums; the descent notices they are in the wrong place."""
    where = str(tmp_path / "wh")
    catalog = small_catalog(where)
    first, *_, last = leaves(catalog)
    a, b = catalog.storage.read(first), catalog.storage.read(last)
    catalog.storage.write(first, b)
    catalog.storage.write(last, a)
    result = cli_runner(where)("ls", "a")
    assert result.exit_code == 1, result.output
    assert "misplaced node" in result.output and (first in result.output or last in result.output)
    assert "its parent" in result.output
    namespaces = cli_runner(where)("ls")
    assert namespaces.exit_code == 1 and "misplaced node" in namespaces.output


def _leaf_of_t0(catalog: Catalog) -> tuple[str, bytes]:
    """The leaf node holding table a.t0's key, cut in half."""
    key = catalog.snapshot.codec.key(ObjectRef(ObjectType.TABLE, "a", "t0"))
    (leaf,) = [p for p in leaves(catalog) if key in catalog.snapshot.nodes.load(p).keys]
    data = catalog.storage.read(leaf)
    return leaf, data[: len(data) // 2]


def _definition_of_t0(catalog: Catalog) -> tuple[str, bytes]:
    """Table a.t0's definition file, its last bit flipped."""
    path = catalog.snapshot._get(ObjectRef(ObjectType.TABLE, "a", "t0"))
    assert path is not None
    data = catalog.storage.read(path)
    return path, data[:-1] + bytes([data[-1] ^ 1])


@pytest.mark.parametrize(("damaged", "read"), [
    (_leaf_of_t0, lambda txn: txn.table_exists("a", "t0")),
    (_definition_of_t0, lambda txn: txn.load_table("a", "t0")),
], ids=["node", "table-definition"])
def test_no_commit_after_a_read_failed_verification(
        tmp_path: Path, damaged: Callable[[Catalog], tuple[str, bytes]],
        read: Callable[[Transaction], object]) -> None:
    """Even a caller that catches the error (treating it as "not found") cannot commit."""
    where = str(tmp_path / "wh")
    catalog = small_catalog(where)
    path, data = damaged(catalog)
    catalog.storage.write(path, data)
    fresh = Catalog.open(where)
    before = sorted(f.path for f in fresh.storage.list("vn/"))
    txn = fresh.transaction()
    with pytest.raises(CorruptFileError, match=path):
        read(txn)
    txn.create_namespace("0")  # a key elsewhere stages fine
    with pytest.raises(CorruptFileError, match=f"{path}.*nothing committed"):
        txn.commit()
    assert txn.state == "aborted"
    assert sorted(f.path for f in fresh.storage.list("vn/")) == before


# --- property: one flipped bit, ls / plan / apply ---------------------------------------------


def cli_runner(warehouse: str) -> Any:
    runner = CliRunner()
    env = {"OLYMPIA_CATALOG": warehouse, "NO_COLOR": "1", "OLYMPIA_GIT_COMMIT": None}

    def run(*args: str) -> Result:
        result = runner.invoke(main, list(args), env=env)
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            "".join(traceback.format_exception(result.exception)))
        return result
    return run


names = st.sampled_from(["a", "b", "c"])
namespace_doc = st.fixed_dictionaries({
    "tables": st.dictionaries(st.sampled_from(["t0", "t1", "t2", "t3"]),
                              st.sampled_from([{}, {"columns": [{"name": "x",
                                                                  "type": "int4"}]}]),
                              max_size=4),
    "views": st.dictionaries(st.sampled_from(["v0", "v1"]),
                             st.sampled_from([{"sql": "SELECT 1"}, {"sql": "SELECT 2"}]),
                             max_size=2),
})
spec_versions = st.lists(st.dictionaries(names, namespace_doc, min_size=1, max_size=3),
                         min_size=1, max_size=3)


def spec_docs(spec: dict[str, Any]) -> dict[str, Any]:
    return {ns: {"namespace": ns, **doc} for ns, doc in spec.items()}


def version_files(where: str) -> tuple[list[str], set[str]]:
    """Every root, node and definition file of every version, in an order that does not
    depend on random file names (so a failing example replays), and the set of those the
    latest version refers to (what ls, plan and apply may read)."""
    catalog = Catalog.open(where)
    ordered: dict[str, None] = {}
    latest: list[str] = []
    for version in range(catalog.version + 1):
        snap = catalog.at_version(version)
        latest = [snap.root.path, snap.root.node.catalog_def,
                  *btree.node_paths(snap.nodes, snap.root.node),
                  *(p for _, p in snap.objects())]
        ordered.update(dict.fromkeys(latest))
    return list(ordered), set(latest)


def arrow_view(data: bytes) -> tuple[Any, Any] | None:
    """What Arrow itself reads from a node file: (rows, checksum); None if it cannot."""
    try:
        reader = ipc.open_file(pa.BufferReader(data))
        table = reader.read_all()
        table.validate(full=True)
        return table.to_pylist(), (reader.schema.metadata or {}).get(CHECKSUM_KEY)
    except (pa.ArrowException, OSError, ValueError):
        return None


def node_flip_is_visible(original: bytes, flipped: bytes) -> bool:
    """Whether Arrow, reading on its own, sees a change a reader must notice: rows that
    differ, a different checksum, or no file at all. Padding, the stream header's copy of
    the schema or the checksum's key name (the file then reads as unverified, with its
    rows intact) are bytes no reader uses."""
    before, after = arrow_view(original), arrow_view(flipped)
    if after is None or before is None:
        return True
    return after[0] != before[0] or (after[1] is not None and after[1] != before[1])


def flip_offset(data: bytes, aim: bool, bit: int) -> int:
    """The byte to flip: anywhere in the file, or (``aim``) inside one of the node's stored
    strings, which most bytes of a small node are not."""
    if aim:
        view = arrow_view(data)
        assert view is not None
        cells = [c.encode() for row in view[0] for c in row.values() if c]
        cell = cells[bit % len(cells)]
        return data.index(cell) + (bit // 8) % len(cell)
    return (bit // 8) % len(data)


def outcome(run: Any, spec: Path, extra: Path, warehouse: str) -> list[tuple[int, str]]:
    results = [run("ls", "--json"), run("plan", str(spec)),
               run("apply", str(extra), "--auto-approve")]
    return [(r.exit_code, r.output.replace(warehouse, "<wh>")) for r in results]


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(versions=spec_versions, kind=st.sampled_from(["node", "node", "definition", "any"]),
       aim=st.booleans(), pick=st.integers(0, 10**6), bit=st.integers(0, 10**9))
def test_one_flipped_bit_is_reported_and_never_committed_on(
        versions: list[dict[str, Any]], kind: str, aim: bool, pick: int, bit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        warehouse, intact = str(base / "wh"), str(base / "intact")
        run = cli_runner(warehouse)
        assert run("init", "--order", "3").exit_code == 0
        for i, version in enumerate(versions):
            step = write_spec(base / f"spec{i}", spec_docs(version))
            assert run("apply", str(step), "--auto-approve", "--allow-destructive",
                       ).exit_code == 0
        spec, extra = base / "spec", base / "extra"  # the catalog as it is, and one more table
        assert run("inspect", "--out", str(spec)).exit_code == 0
        shutil.copytree(spec, extra)
        (extra / "z.yaml").write_text(dump({"namespace": "z", "tables": {"new": {}}}), "utf-8")
        shutil.copytree(warehouse, intact)
        expected = outcome(cli_runner(intact), spec, extra, intact)
        assert [code for code, _ in expected] == [0, 0, 0]

        storage = Storage(warehouse)
        candidates, reachable = version_files(warehouse)
        assert set(candidates) == {f.path for f in storage.list("") if f.path.startswith(
            ("node/", "def/")) or path_version(f.path) is not None}
        if kind != "any":  # mostly a file of the latest version, sometimes any file
            candidates = [p for p in candidates if p in reachable
                          and p.startswith("def/") == (kind == "definition")]
        target = candidates[pick % len(candidates)]
        original = storage.read(target)
        flipped = bytearray(original)
        flipped[flip_offset(original, aim and not target.startswith("def/"), bit)] ^= (
            1 << (bit % 8))
        # a file of an older version only is read by none of the three commands
        used = target in reachable
        if used and not target.startswith("def/"):  # every byte of a definition counts
            used = node_flip_is_visible(original, bytes(flipped))
            event("node flip" if used else "node flip in bytes no reader uses")
        else:
            event("definition flip" if used else "flip in an older version's file")
        storage.write(target, bytes(flipped))
        versions_before = sorted(f.path for f in storage.list("vn/"))
        latest_before = storage.read("vn/latest")

        got = outcome(run, spec, extra, warehouse)
        if not used:
            assert got == expected, target
            return
        ls_result, plan_result, apply_result = got
        assert ls_result == expected[0] or (ls_result[0] == 1 and target in ls_result[1]), (
            target, ls_result)
        if target.startswith("def/") and plan_result == expected[1]:
            # a plan takes a definition whose name carries the digest of the bytes the spec
            # determines from the spec, unread (docs/FORMAT.md R13): its answer is right
            event("plan took a definition from its digest")
            rest = [apply_result]
        else:
            rest = [plan_result, apply_result]
        for code, output in rest:  # apply reads every managed definition and node
            assert code == 1, (target, output)
            lines = output.strip().splitlines()
            assert "corrupt file" in lines[-1] and target in lines[-1], (target, output)
            assert "Traceback" not in output
        assert sorted(f.path for f in storage.list("vn/")) == versions_before
        assert storage.read("vn/latest") == latest_before
