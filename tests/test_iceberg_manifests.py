"""Manifest lists and manifests read with readers kept per schema
(:mod:`olympia.iceberg.manifests`): each file is read with its own schema, whatever was read
before it."""

from __future__ import annotations

from pathlib import Path

import pytest
from iceberg_helpers import SCHEMA, local_properties, open_catalog, rows
from pyiceberg.manifest import read_manifest_list

from olympia.iceberg import manifests as avro
from olympia.lru import LruCache


def test_files_of_each_format_version_read_as_pyiceberg_reads_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables of format versions 1 and 2 (two writer schemas of each kind of file), read
    in turns: every manifest list and manifest reads as pyiceberg reads it, and one reader
    per schema and kind is kept."""
    catalog = open_catalog(local_properties(tmp_path))
    catalog.create_namespace("ns")
    tables = []
    for version in (1, 2):
        table = catalog.create_table(f"ns.v{version}", SCHEMA,
                                     properties={"format-version": str(version)})
        for start in (0, 3):
            table.append(rows(start))
        tables.append(catalog.load_table(f"ns.v{version}"))
    monkeypatch.setattr(avro, "_readers", LruCache(avro.READERS))
    for _ in range(2):
        for table in tables:
            for snapshot in table.snapshots():
                listed = list(read_manifest_list(table.io.new_input(snapshot.manifest_list)))
                assert avro.manifest_paths(table.io, snapshot.manifest_list) == [
                    manifest.manifest_path for manifest in listed]
                for manifest in listed:
                    expected = manifest.fetch_manifest_entry(table.io, discard_deleted=False)
                    got = avro.entries(table.io, manifest.manifest_path)
                    assert [e.data_file for e in got] == [e.data_file for e in expected]
                    assert [e.status for e in got] == [e.status for e in expected]
    assert len(avro._readers) == 4
