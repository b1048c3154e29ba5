"""Iceberg table metadata as Olympia sees it: the definition a metadata file gives a table,
what a commit did to it, and pyiceberg's identifier and property conventions."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import zlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import pydantic
from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.io import FileIO
from pyiceberg.serializers import Compressor, FromByteStream, GzipCompressor
from pyiceberg.table import CommitTableResponse
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.typedef import Identifier

from olympia import exceptions as oe
from olympia.catalog.objects import Table as TableDef
from olympia.iceberg.fileio import create_file, read_file
from olympia.iceberg.typemap import columns_from_schema
from olympia.lru import LruCache
from olympia.storage.retry import classify

ICEBERG = "iceberg"
#: The catalog property bounding the size of a metadata file the catalog reads (bytes).
MAX_METADATA_PROPERTY = "olympia.max-metadata-size"
#: Its default, 32 MiB: eight times the metadata of a table committing every minute through
#: Iceberg's default snapshot retention (five days, about 4 MiB), while one file parsed
#: stays a small part of a server's memory.
DEFAULT_MAX_METADATA_BYTES = 32 * 1024 * 1024
#: The format property recording the SHA-256 (hex) of the bytes of the metadata file the
#: definition's location names, written with it: what lets a process trust a metadata file
#: it read (or wrote) once without reading it again.
DIGEST_PROPERTY = "metadata-sha256"
#: How many snapshots' JSON a process keeps (a few KiB each, with the snapshot itself): a
#: table's next metadata file repeats every snapshot object the last one held.
SNAPSHOT_JSON_KEPT = 10_000
#: (id of a snapshot, whether ``None`` fields are left out) -> (the snapshot, kept so that
#: no other object takes its id while the entry lasts; its JSON)
_snapshot_json: LruCache[tuple[int, bool], tuple[Snapshot, bytes]] = LruCache(SNAPSHOT_JSON_KEPT)


class IcebergMetadataError(oe.TableMetadataError, NoSuchTableError):
    """A table's Iceberg metadata file is missing or is no Iceberg table metadata (truncated,
    not JSON, another schema, binary data). Both Olympia's :class:`TableMetadataError` and
    pyiceberg's ``NoSuchTableError``: the table cannot be loaded as an Iceberg table, and code
    written for another catalog catches it where it catches a missing table."""


class MetadataTooLargeError(IcebergMetadataError):
    """A table's metadata file is larger than the catalog reads (``limit`` bytes, the
    catalog property :data:`MAX_METADATA_PROPERTY`)."""

    def __init__(self, path: str, table: str, limit: int) -> None:
        oe.OlympiaError.__init__(
            self, f"the Iceberg metadata file {path} of table {table} is larger than "
                  f"{limit} bytes, the most this catalog reads (catalog property "
                  f"{MAX_METADATA_PROPERTY}, olympia serve --max-metadata-bytes)")
        self.path, self.reason, self.limit = path, "larger than the catalog reads", limit


def read_table_metadata(io: FileIO, location: str, table: str,
                        limit: int = DEFAULT_MAX_METADATA_BYTES) -> TableMetadata:
    """Parse the metadata file at ``location`` of ``table`` (``ns.name``).

    Raises:
        IcebergMetadataError: the file is missing, a folder, larger than ``limit`` bytes or
            unreadable as Iceberg table metadata.
        StorageError: the storage failed otherwise.
    """
    data = read_metadata_file(io, location, table, limit)
    return parse_table_metadata(data, location, table, limit)


def read_metadata_file(file_io: FileIO, location: str, table: str,
                       limit: int = DEFAULT_MAX_METADATA_BYTES) -> bytes:
    """The bytes of the metadata file at ``location`` of ``table``, as stored; at most
    ``limit`` + 1 bytes are read.

    Raises:
        IcebergMetadataError: the file does not exist, is a folder, or holds more than
            ``limit`` bytes.
        StorageError: the storage failed otherwise (its kind as :func:`classify` tells).
    """
    unreadable = f"the Iceberg metadata of table {table} is unreadable"
    try:
        data = read_file(file_io, location, limit + 1)
    except FileNotFoundError:
        raise IcebergMetadataError(location, f"{unreadable}: the file does not exist") from None
    except OSError as exc:
        if _local_folder(location):
            raise IcebergMetadataError(location, f"{unreadable}: it is a folder, not a file"
                                       ) from None
        raise classify(exc)(f"table {table}: cannot read its Iceberg metadata ({exc})",
                            location) from exc
    if len(data) > limit:
        raise MetadataTooLargeError(location, table, limit)
    return data


def metadata_json(metadata: TableMetadata, exclude_none: bool) -> bytes:
    """The JSON of ``metadata`` as pyiceberg writes it to a metadata file; from format
    version 2 its snapshots come last, each snapshot object encoded once while kept.
    ``exclude_none``: unless pyiceberg's ``legacy-current-snapshot-id`` is set."""
    if metadata.format_version == 1:  # (pyiceberg drops v1 snapshots' sequence numbers)
        return metadata.model_dump_json(exclude_none=exclude_none).encode()
    head = metadata.model_dump_json(exclude_none=exclude_none, exclude={"snapshots"})
    keys = [(id(snapshot), exclude_none) for snapshot in metadata.snapshots]
    parts = []
    for snapshot, key, kept in zip(metadata.snapshots, keys, _snapshot_json.get_many(keys),
                                   strict=True):
        if kept is None:
            kept = snapshot, snapshot.model_dump_json(exclude_none=exclude_none).encode()
            _snapshot_json.put(key, kept)
        parts.append(kept[1])
    return b"".join((head[:-1].encode(), b',"snapshots":[', b",".join(parts), b"]}"))


def encode_table_metadata(text: bytes, location: str) -> bytes:
    """The bytes of the metadata file at ``location`` holding the JSON ``text``
    (:func:`metadata_json`): gzip if the name says so."""
    return Compressor.get_compressor(location=location).bytes_compressor()(text)


def create_metadata_file(file_io: FileIO, location: str, data: bytes, what: str) -> None:
    """Create the new metadata file of ``what`` (``table ns.t``) at ``location`` with
    ``data``, never over another file. Run by a commit's batch, which may run it again
    (:meth:`~olympia.catalog.transaction.Transaction.write_with_commit`): a file already
    holding ``data`` is the one an earlier run made.

    Raises:
        StorageError: the write failed (its kind as :func:`write_error` tells, except that
            a missing file or folder is a plain StorageError), or the file exists holding
            other content.
    """
    try:
        create_file(file_io, location, data)
        return
    except FileExistsError:
        with contextlib.suppress(OSError):  # (never more than one byte past ours)
            if read_file(file_io, location, len(data) + 1) == data:
                return
        raise oe.StorageError(f"{what}: its new Iceberg metadata file exists already, holding "
                              "other content", location) from None
    except OSError as exc:
        error = write_error(file_io, location, what, exc)
        if isinstance(error, oe.FileNotFound):  # (that tells of the catalog's own files)
            raise oe.StorageError(str(error)) from exc
        raise error from exc


def _local_folder(location: str) -> bool:
    """Whether ``location`` names a folder on local disk."""
    parts = urlsplit(location)
    return parts.scheme in ("", "file") and os.path.isdir(parts.path)


def write_error(file_io: FileIO, location: str, what: str, exc: OSError) -> oe.StorageError:
    """The error to raise for a failed write of the metadata file at ``location`` of
    ``what`` (``table ns.t``): its kind as :func:`classify` tells (a store without room
    is :class:`~olympia.exceptions.InsufficientStorageError`). What the write left of a
    file it was creating is deleted (a file that existed already is not touched)."""
    kind = classify(exc)
    if kind is not oe.FileAlreadyExists:
        with contextlib.suppress(OSError):
            file_io.delete(location)
    return kind(f"{what}: cannot write its Iceberg metadata ({exc})", location)


def parse_table_metadata(data: bytes, location: str, table: str,
                         limit: int = DEFAULT_MAX_METADATA_BYTES) -> TableMetadata:
    """The table metadata in ``data``, the bytes of the file at ``location`` (gzip if its
    name says so: at most ``limit`` + 1 bytes are decompressed).

    Raises:
        IcebergMetadataError: ``data`` is no Iceberg table metadata, or decompresses to more
            than ``limit`` bytes.
    """
    try:
        if isinstance(Compressor.get_compressor(location=location), GzipCompressor):
            with gzip.open(io.BytesIO(data)) as stream:
                data = stream.read(limit + 1)
            if len(data) > limit:
                raise MetadataTooLargeError(location, table, limit)
        return FromByteStream.table_metadata(io.BytesIO(data))
    except (gzip.BadGzipFile, zlib.error) as exc:
        reason = f"not gzip data, as its name says ({exc})"
    except (ValueError, IcebergValidationError, EOFError) as exc:
        reason = _unreadable(exc)
    raise IcebergMetadataError(location, f"the Iceberg metadata of table {table} is "
                                         f"unreadable: {reason}")


def _unreadable(exc: BaseException) -> str:
    """Why a metadata file did not parse, in one line and without its contents."""
    cause = exc.__cause__ if isinstance(exc, IcebergValidationError) else exc
    if isinstance(cause, UnicodeDecodeError):
        return "not UTF-8 text (binary data?)"
    if isinstance(cause, json.JSONDecodeError):
        return f"not JSON ({cause.msg} at line {cause.lineno} column {cause.colno})"
    if isinstance(cause, pydantic.ValidationError):
        errors = cause.errors(include_input=False, include_url=False)
        if not errors:
            return "not Iceberg table metadata"
        first = errors[0]
        if first["type"] == "json_invalid":
            return f"not JSON ({first['msg'].removeprefix('Invalid JSON: ')})"
        loc = list(first["loc"])
        if loc and str(loc[0]).isdigit():  # the format version pydantic chose the model by
            loc = loc[1:]
        where = ".".join(str(p) for p in loc)
        at = f"{where}: " if where else ""
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        return f"not Iceberg table metadata: {at}{first['msg']}{more}"
    return str(cause).splitlines()[0] if str(cause) else type(cause).__name__


def identifier_parts(identifier: str | Identifier) -> tuple[str, ...]:
    """pyiceberg's identifier split (a string splits on dots)."""
    return MetastoreCatalog.identifier_to_tuple(identifier)


def response(metadata: TableMetadata, location: str) -> CommitTableResponse:
    """pyiceberg's answer to a commit."""
    return CommitTableResponse(metadata=metadata, metadata_location=location)  # type: ignore[call-arg]


def describe(before: TableMetadata | None, after: TableMetadata) -> str:
    """What an Iceberg commit did, as ``olympia log`` and the UI show it: ``create``; a write
    (``append snapshot <id>``, with the snapshot's operation); ``cherry-pick snapshot <src>
    as <id>``; ``rollback to snapshot <id>`` (the current snapshot set back to an older
    one); a write to, creation or removal of a branch or tag; ``expire <n> snapshots``; or
    ``update`` (schema, properties, ...). Several are joined with ``; ``."""
    if before is None:
        return "create"
    known = {s.snapshot_id for s in before.snapshots}
    parts = []
    snapshot = after.current_snapshot()
    if snapshot is not None and snapshot.snapshot_id != before.current_snapshot_id:
        parts.append(_moved_to(before, snapshot, snapshot.snapshot_id in known))
    for name in sorted((set(before.refs) | set(after.refs)) - {MAIN_BRANCH}):
        old, new = before.refs.get(name), after.refs.get(name)
        if old == new:
            continue
        kind = (new or old).snapshot_ref_type.value  # type: ignore[union-attr]
        if new is None:
            parts.append(f"drop {kind} {name}")
        elif old is None:
            parts.append(f"create {kind} {name} at snapshot {new.snapshot_id}")
        elif new.snapshot_id not in known:
            written = after.snapshot_by_id(new.snapshot_id)
            operation = _operation(written) if written is not None else "write"
            parts.append(f"{operation} snapshot {new.snapshot_id} to {kind} {name}")
        else:
            parts.append(f"move {kind} {name} to snapshot {new.snapshot_id}")
    gone = len(known - {s.snapshot_id for s in after.snapshots})
    if gone:
        parts.append(f"expire {gone} snapshot{'s' if gone > 1 else ''}")
    return "; ".join(parts) or "update"


def _operation(snapshot: Snapshot) -> str:
    return snapshot.summary.operation.value if snapshot.summary else "write"


def _moved_to(before: TableMetadata, snapshot: Snapshot, existed: bool) -> str:
    """What setting the main branch to ``snapshot`` was: a new snapshot's write (or a
    cherry-pick of another), a rollback to an ancestor of the current one, or a move to
    another snapshot the table had."""
    if existed:
        ancestor, seen = before.current_snapshot(), 0
        while ancestor is not None and seen < len(before.snapshots):  # bounded: no cycle
            if ancestor.snapshot_id == snapshot.snapshot_id:
                return f"rollback to snapshot {snapshot.snapshot_id}"
            parent = ancestor.parent_snapshot_id
            ancestor, seen = (None if parent is None else before.snapshot_by_id(parent)), seen + 1
        return f"set current snapshot {snapshot.snapshot_id}"
    source = snapshot.summary.additional_properties.get("source-snapshot-id") if (
        snapshot.summary) else None
    if source:
        return f"cherry-pick snapshot {source} as {snapshot.snapshot_id}"
    return f"{_operation(snapshot)} snapshot {snapshot.snapshot_id}"


def is_iceberg(definition: TableDef) -> bool:
    """Whether ``definition`` is an Iceberg table with metadata (not one declared without)."""
    return definition.format == ICEBERG and bool(definition.location)


def string_properties(properties: Mapping[str, Any]) -> dict[str, str]:
    """Property values as strings; None as a key or value is an InvalidArgumentError."""
    for key, value in properties.items():
        if key is None or value is None:
            raise oe.InvalidArgumentError(
                f"property {key!r} has no value: None is not a property key or value")
    return {str(k): str(v) for k, v in properties.items()}


def table_definition(ns: str, name: str, metadata: TableMetadata, location: str,
                     previous: TableDef | None, digest: str = "") -> TableDef:
    """The Olympia definition of an Iceberg table whose current metadata file is
    ``location``: columns with field ids, table properties, partitioning, sort order and
    the file's ``digest`` (:data:`DIGEST_PROPERTY`; ``""``: not known) in the format
    properties; comment, table type and protection kept from ``previous``."""
    sort_order = metadata.sort_order_by_id(metadata.default_sort_order_id)
    format_properties = {
        "format-version": str(metadata.format_version),
        "table-uuid": str(metadata.table_uuid),
        "table-location": metadata.location,
        "partition-spec": metadata.spec().model_dump_json(),
        "sort-order": sort_order.model_dump_json() if sort_order else "",
    }
    if digest:
        format_properties[DIGEST_PROPERTY] = digest
    base = previous or TableDef(ns, name, comment=metadata.properties.get("comment", ""))
    return replace(base, namespace=ns, name=name, columns=columns_from_schema(metadata.schema()),
                   properties=dict(metadata.properties), format=ICEBERG, location=location,
                   format_properties=format_properties)

