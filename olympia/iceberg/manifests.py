"""Manifest lists and manifests read with pyiceberg's Avro reader, resolved once per schema.

pyiceberg's ``AvroFile`` converts a file's Avro schema and resolves a reader for it on
every file it opens, and one for the file's header too: about 2 ms, most of the cost of
reading a small manifest. The header's reader is resolved once. (Each file
is read in one request: :func:`olympia.iceberg.fileio.read_file`.) A table's
files carry one of a few schemas (their writer's), so the resolved reader is kept per
(schema text, what is read), for at most :data:`READERS` of them. The schema text is the
file's own: a file with another schema gets its own reader, never a near one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from pyiceberg.avro.decoder import new_decoder
from pyiceberg.avro.file import _SCHEMA_KEY, META_SCHEMA, AvroFile, AvroFileHeader
from pyiceberg.avro.reader import Reader
from pyiceberg.avro.resolver import construct_reader, resolve_reader
from pyiceberg.io import FileIO
from pyiceberg.manifest import (
    DEFAULT_READ_VERSION,
    MANIFEST_ENTRY_SCHEMAS,
    MANIFEST_LIST_FILE_SCHEMAS,
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestEntry,
    ManifestEntryStatus,
    PartitionFieldSummary,
)
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record, StructProtocol

from olympia.iceberg.fileio import read_file
from olympia.lru import LruCache

#: Resolved readers kept (one per schema text and kind of file).
READERS = 64
MANIFEST_PATH, PARTITIONS = 500, 507  # field ids of a manifest list (the Iceberg spec's)

D = TypeVar("D", bound=StructProtocol)


@dataclass(frozen=True)
class _Kind:
    """What is read from a kind of file: pyiceberg's read schema, types and enums."""

    name: str
    schema: Schema
    types: dict[int, Callable[..., StructProtocol]]
    enums: dict[int, Callable[..., Enum]]


# of a manifest list only each manifest's path is read (and the partition summaries:
# pyiceberg's resolver cannot skip a list field that the read schema leaves out)
_PATHS = _Kind("manifest list", Schema(*(
    field for field in MANIFEST_LIST_FILE_SCHEMAS[DEFAULT_READ_VERSION].fields
    if field.field_id in (MANIFEST_PATH, PARTITIONS))), {508: PartitionFieldSummary}, {})
_ENTRIES = _Kind("manifest", MANIFEST_ENTRY_SCHEMAS[DEFAULT_READ_VERSION],
                 {-1: ManifestEntry, 2: DataFile},
                 {0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent})
_readers: LruCache[tuple[str, str], tuple[Schema, Reader]] = LruCache(READERS)
_HEADER = construct_reader(META_SCHEMA, {-1: AvroFileHeader})  # the same for every file


class _AvroFile(AvroFile[D]):
    """pyiceberg's ``AvroFile`` whose reader comes from :data:`_readers`."""

    def __init__(self, io: FileIO, path: str, kind: _Kind) -> None:
        super().__init__(io.new_input(path), kind.schema, kind.types, kind.enums)
        self._io, self._path, self._kind = io, path, kind

    def __enter__(self) -> _AvroFile[D]:
        self.decoder = new_decoder(read_file(self._io, self._path))
        self.header = _HEADER.read(self.decoder)
        text = self.header.meta.get(_SCHEMA_KEY)
        kept = _readers.get((self._kind.name, text)) if text is not None else None
        if kept is None:
            schema = self.header.get_schema()  # (raises for a file without a schema)
            kept = schema, resolve_reader(schema, self._kind.schema, self._kind.types,
                                          self._kind.enums)
            _readers.put((self._kind.name, str(text)), kept)
        self.schema, self.reader = kept
        return self


def manifest_paths(io: FileIO, path: str) -> list[str]:
    """The paths of the manifests the manifest list at ``path`` names, in its order."""
    with _AvroFile[Record](io, path, _PATHS) as reader:
        return [str(manifest[0]) for manifest in reader]


def entries(io: FileIO, path: str) -> list[ManifestEntry]:
    """Every entry of the manifest at ``path``, deleted ones too (their sequence numbers
    and snapshot ids as written, not inherited from the manifest list)."""
    with _AvroFile[ManifestEntry](io, path, _ENTRIES) as reader:
        return list(reader)
