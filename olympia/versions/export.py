"""Snapshot export: copy a version (all of it, its root only, or some levels) elsewhere.

A full export copies the version's root (to the same ``vn/`` path), its catalog definition
and every node and definition file reachable from it, then writes ``vn/oldest`` and
``vn/latest``: the target opens on its own. Minimal and partial exports copy less and keep
referring to files of the source; the expiry job protects those through the export record.

Copies are concurrent and resumable: files are immutable and published atomically, so a
file present in the target is complete; when an interrupted export re-runs it is skipped if
its bytes equal the source's, and refused otherwise. The root is copied after everything it
references. The target may not be the source itself, nor hold another catalog; a full export
also refuses a target holding other versions (it sets the target's ``vn/oldest``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from olympia._proto import actions_pb2 as apb
from olympia._proto import objects_pb2 as pb
from olympia.catalog import actions
from olympia.catalog.actions import A
from olympia.catalog.catalog import Catalog
from olympia.catalog.files import LATEST, OLDEST, CatalogFiles, parse_def
from olympia.catalog.keys import path_version
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import now_millis
from olympia.exceptions import (
    AlreadyExistsError,
    CommitConflict,
    CorruptFileError,
    FileAlreadyExists,
    FileNotFound,
    InvalidArgumentError,
    VersionExpiredError,
)
from olympia.storage import Storage
from olympia.tree.node import parse_node_file

MODES = {"full": pb.FULL, "minimal": pb.MINIMAL, "partial": pb.PARTIAL}
BOOKKEEPING_ATTEMPTS = 5

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ExportResult:
    name: str
    mode: str
    version: int
    target: str
    files_copied: int
    files_skipped: int
    bytes_copied: int
    committed_version: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# the export record keeps the depth as a uint32
MAX_DEPTH = 2**32 - 1


def files_to_copy(snapshot: Snapshot, mode: str, depth: int | None = None,
                  copy_defs: bool = False) -> list[str]:
    """Paths (relative) an export of ``snapshot`` copies, the root last."""
    root = snapshot.root
    if mode == "minimal":
        return [root.path]
    levels = None if mode == "full" else (depth if depth is not None else 1)
    with_defs = mode == "full" or copy_defs
    paths: list[str] = []
    if with_defs:
        assert root.node.catalog_def is not None
        paths.append(root.node.catalog_def)
    level = list(root.node.children or ())
    if with_defs:
        paths.extend(root.node.values)
    copied_levels = 0
    while level and (levels is None or copied_levels < levels):
        paths.extend(level)
        nodes = snapshot.nodes.load_many(level)
        if with_defs:
            paths.extend(v for n in nodes for v in n.values)
        level = [c for n in nodes for c in (n.children or ())]
        copied_levels += 1
    paths.append(root.path)
    return list(dict.fromkeys(paths))


def copy_files(source: Storage, target: Storage, paths: list[str],
               progress: Progress | None = None) -> tuple[int, int, int]:
    """Copy ``paths`` that the target lacks, in order-preserving batches: everything but the
    last path concurrently, then the last one. A path the target has already is skipped if
    its bytes equal the source's; if not, FileAlreadyExists names it before anything is
    copied. Returns (copied, skipped, bytes)."""
    present = {f.path: f.size for f in target.list()}
    source.map(lambda p: _require_same(source, target, p, present[p]),
               [p for p in paths if p in present])
    todo = [p for p in paths if p not in present]
    skipped = len(paths) - len(todo)
    done = [skipped]
    copied_bytes = [0]
    lock = threading.Lock()

    def copy(path: str) -> None:
        data = source.read(path)
        target.write(path, data)
        with lock:
            done[0] += 1
            copied_bytes[0] += len(data)
            count = done[0]
        if progress is not None:
            progress(count, len(paths))

    if todo:
        head, last = todo[:-1], todo[-1]
        source.map(copy, head)
        copy(last)
    return len(todo), skipped, copied_bytes[0]


def _require_same(source: Storage, target: Storage, path: str, target_size: int) -> None:
    data = source.read(path)
    if len(data) != target_size or target.read(path) != data:
        raise FileAlreadyExists("the export target already has a different file (it is "
                                f"not a copy of {source.display(path)})", target.display(path))


def _catalog_id(source: CatalogFiles, target: Storage, root_path: str) -> str | None:
    """The id of the catalog a target root belongs to; None if its definition is in neither
    the target nor the source (then it is not the source's)."""
    where = target.display(root_path)
    cdef_path = parse_node_file(target.read(root_path), where).system_rows().get("catalog_def")
    if cdef_path is None:
        raise CorruptFileError(where, "root node without a catalog_def row")
    try:
        return parse_def(target.read(cdef_path), target.display(cdef_path), pb.CatalogDef).id
    except FileNotFound:
        pass  # a minimal or partial export refers to the source's definitions
    try:
        return source.read_def(cdef_path, pb.CatalogDef).id
    except FileNotFound:
        return None


def _check_target(catalog: Catalog, snapshot: Snapshot, target: Storage, mode: str) -> None:
    """Refuse the source itself, a target holding another catalog, and, for a full export
    (which sets ``vn/oldest``), a target holding other versions of this one."""
    if catalog.storage.same_place(target):
        raise InvalidArgumentError(
            f"export target {target.uri} is the source catalog itself; export elsewhere")
    roots = [f.path for f in target.list("vn/") if path_version(f.path) is not None]
    if not roots:
        return
    probe = snapshot.root.path if snapshot.root.path in roots else roots[0]
    theirs = _catalog_id(catalog.files, target, probe)
    if theirs != snapshot.catalog_def.id:
        raise AlreadyExistsError(
            f"export target {target.uri} already holds another catalog (id {theirs or '?'}, "
            f"found at {target.display(probe)}); export to an empty location")
    others = [path_version(r) for r in roots if r != snapshot.root.path]
    if mode == "full" and others:
        listed = ", ".join(str(v) for v in others[:5]) + (", ..." if len(others) > 5 else "")
        raise AlreadyExistsError(
            f"export target {target.uri} already holds other versions of this catalog "
            f"({listed}); a full export sets vn/oldest there, so it needs a location "
            f"without them")


def export(
    catalog: Catalog,
    name: str,
    target_uri: str,
    mode: str = "full",
    *,
    target_storage_options: Mapping[str, Any] | None = None,
    version: int | None = None,
    depth: int | None = None,
    copy_defs: bool = False,
    progress: Progress | None = None,
    info: Mapping[str, str] | None = None,
) -> ExportResult:
    """Export ``version`` (default: the latest) as ``name`` to ``target_uri`` and record it.

    The record (``exported_snapshots[name]`` and ``exports[name]`` of the catalog
    definition) is committed as a new version after the copy succeeded, annotated with
    ``info`` (who exported, which job).
    """
    started = time.monotonic()
    if mode not in MODES:
        raise InvalidArgumentError(f"unknown export mode {mode!r}; use full, minimal or partial")
    if not name or name.strip() != name or name.isdigit():
        raise InvalidArgumentError(
            f"invalid export name {name!r}: it must be non-empty, without surrounding spaces, "
            "and not a number (numbers name versions)")
    if depth is not None and (mode != "partial" or not 0 <= depth <= MAX_DEPTH):
        raise InvalidArgumentError(
            f"depth applies to partial exports and must be from 0 to {MAX_DEPTH}")
    catalog.refresh()
    _require_new_name(catalog.catalog_def, name)
    snapshot = catalog.at_version(catalog.version if version is None else version)
    target = Storage(target_uri, target_storage_options)
    _check_target(catalog, snapshot, target, mode)
    paths = files_to_copy(snapshot, mode, depth, copy_defs)
    copied, skipped, size = copy_files(catalog.storage, target, paths, progress)
    if mode == "full":
        target_files = CatalogFiles(target)
        target_files.write_hint(OLDEST, snapshot.version)
        target_files.write_hint(LATEST, snapshot.version)
    record = pb.SnapshotExportDef(
        name=name, mode=MODES[mode], target=target.uri, version=snapshot.version,
        root_path=snapshot.root.path, depth=depth or 0,
        defs_copied=mode == "full" or copy_defs, created_at_millis=now_millis())
    committed = _record(catalog, record, info or {})
    return ExportResult(name, mode, snapshot.version, target.uri, copied, skipped, size,
                        committed, time.monotonic() - started)


def _require_new_name(catalog_def: pb.CatalogDef, name: str) -> None:
    if name in catalog_def.exported_snapshots:
        raise AlreadyExistsError(f"an export named {name!r} already exists")


def _record(catalog: Catalog, record: pb.SnapshotExportDef, info: Mapping[str, str]) -> int:
    """Commit the export record, retrying when another catalog-level change won the race."""
    for attempt in range(BOOKKEEPING_ATTEMPTS):
        txn = catalog.transaction()
        new_def = pb.CatalogDef()
        new_def.CopyFrom(txn.catalog_def)
        _require_new_name(new_def, record.name)
        new_def.exported_snapshots[record.name] = record.root_path
        new_def.exports[record.name].CopyFrom(record)
        if record.version < catalog.files.oldest_version():
            raise VersionExpiredError(
                f"version {record.version} expired while it was being exported")
        txn.set_catalog_def(new_def, actions.make(
            A.CATALOG_EXPORT, None, export=apb.ExportDef(
                name=record.name, mode=pb.ExportMode.Name(record.mode).lower(),
                target=record.target, version=record.version)))
        txn.annotate(**info)
        try:
            return txn.commit()
        except CommitConflict:
            if attempt + 1 == BOOKKEEPING_ATTEMPTS:
                raise
    raise AssertionError("unreachable")
