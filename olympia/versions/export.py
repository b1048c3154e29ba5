"""Snapshot export: copy a version (all of it, its root only, or some levels) elsewhere.

A full export copies the version's root (to the same ``vn/`` path), its catalog definition
and every node and definition file reachable from it, then writes ``vn/oldest`` and
``vn/latest``: the target opens on its own. Minimal and partial exports copy less and keep
referring to files of the source; the expiry job protects those through the export record.

Copies are concurrent and resumable: files are immutable and published atomically, so a
file present in the target is complete and is skipped when an interrupted export re-runs.
The root is copied after everything it references.
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
from olympia.catalog.files import LATEST, OLDEST, CatalogFiles
from olympia.catalog.reader import Snapshot
from olympia.catalog.transaction import now_millis
from olympia.exceptions import (
    AlreadyExistsError,
    CommitConflict,
    InvalidArgumentError,
    NotFoundError,
)
from olympia.storage import Storage

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
    last path concurrently, then the last one. Returns (copied, skipped, bytes)."""
    present = {f.path for f in target.list()}
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
) -> ExportResult:
    """Export ``version`` (default: the latest) as ``name`` to ``target_uri`` and record it.

    The record (``exported_snapshots[name]`` and ``exports[name]`` of the catalog
    definition) is committed as a new version after the copy succeeded.
    """
    started = time.monotonic()
    if mode not in MODES:
        raise InvalidArgumentError(f"unknown export mode {mode!r}; use full, minimal or partial")
    if not name or name.strip() != name or name.isdigit():
        raise InvalidArgumentError(
            f"invalid export name {name!r}: it must be non-empty, without surrounding spaces, "
            "and not a number (numbers name versions)")
    if depth is not None and (mode != "partial" or depth < 0):
        raise InvalidArgumentError("depth applies to partial exports and must be >= 0")
    catalog.refresh()
    _require_new_name(catalog.catalog_def, name)
    snapshot = catalog.at_version(catalog.version if version is None else version)
    target = Storage(target_uri, target_storage_options)
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
    committed = _record(catalog, record)
    return ExportResult(name, mode, snapshot.version, target.uri, copied, skipped, size,
                        committed, time.monotonic() - started)


def _require_new_name(catalog_def: pb.CatalogDef, name: str) -> None:
    if name in catalog_def.exported_snapshots:
        raise AlreadyExistsError(f"an export named {name!r} already exists")


def _record(catalog: Catalog, record: pb.SnapshotExportDef) -> int:
    """Commit the export record, retrying when another catalog-level change won the race."""
    for attempt in range(BOOKKEEPING_ATTEMPTS):
        txn = catalog.transaction()
        new_def = pb.CatalogDef()
        new_def.CopyFrom(txn.catalog_def)
        _require_new_name(new_def, record.name)
        new_def.exported_snapshots[record.name] = record.root_path
        new_def.exports[record.name].CopyFrom(record)
        if record.version < catalog.files.oldest_version():
            raise NotFoundError(f"version {record.version} expired while it was being exported")
        txn.set_catalog_def(new_def, actions.make(
            A.CATALOG_EXPORT, None, export=apb.ExportDef(
                name=record.name, mode=pb.ExportMode.Name(record.mode).lower(),
                target=record.target, version=record.version)))
        try:
            return txn.commit()
        except CommitConflict:
            if attempt + 1 == BOOKKEEPING_ATTEMPTS:
                raise
    raise AssertionError("unreachable")
