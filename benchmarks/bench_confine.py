"""What the rule "every file a table references lies under its own location" costs a commit
(``OlympiaCatalog.confined()``, what ``olympia serve`` uses): the table files the check
reads per single-row append (manifest lists and manifests, counted at the FileIO), for
pyiceberg's fast append and for a merging append, and append rates with and without it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from pyiceberg.io import FileIO, InputFile, OutputFile

from benchmarks.common import per_second, workdir
from olympia.iceberg import OlympiaCatalog
from olympia.iceberg import catalog as iceberg_catalog

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])
MERGE = {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "4"}


class _Counting(FileIO):
    """A FileIO that notes every file opened for reading."""

    def __init__(self, io: FileIO, reads: list[str]) -> None:
        super().__init__(io.properties)
        self.io, self.reads = io, reads

    def new_input(self, location: str) -> InputFile:
        self.reads.append(location)
        return self.io.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        return self.io.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.io.delete(location)


@contextmanager
def _counted() -> Iterator[list[list[str]]]:
    """The files each confined commit's check reads, one list per commit."""
    per_commit: list[list[str]] = []
    check: Callable[..., int] = getattr(iceberg_catalog, "check_commit")  # noqa: B009

    def counting(*args: Any) -> int:
        per_commit.append([])
        before, after, updates, io, *rest = args
        return check(before, after, updates, _Counting(io, per_commit[-1]), *rest)

    setattr(iceberg_catalog, "check_commit", counting)  # noqa: B010
    try:
        yield per_commit
    finally:
        setattr(iceberg_catalog, "check_commit", check)  # noqa: B010


def _appends(catalog: OlympiaCatalog, name: str, count: int,
             properties: dict[str, str]) -> float:
    table = catalog.create_table(("bench", name), SCHEMA, properties=properties)
    started = time.perf_counter()
    for i in range(count):
        table.append(pa.table({"id": pa.array([i], pa.int64())}, schema=SCHEMA))
    return per_second(count, time.perf_counter() - started)


def _summary(reads: list[list[str]]) -> dict[str, Any]:
    counts = [len(r) for r in reads]
    kinds = [sum("/snap-" in f for f in r) for r in reads]
    return {"first_append": counts[0], "later_median": statistics.median(counts[1:]),
            "later_max": max(counts[1:]), "manifest_lists_median": statistics.median(kinds[1:])}


def run(quick: bool) -> dict[str, Any]:
    count = 12 if quick else 60
    with workdir() as root:
        library = OlympiaCatalog("bench", uri=str(root / "catalog"),
                                 warehouse=f"file://{root}/wh", **{"olympia.create": "true"})
        try:
            library.create_namespace("bench")
            confined = library.confined()
            with _counted() as reads:
                fast_rate = _appends(confined, "fast", count, {})
            fast = _summary(reads)
            with _counted() as reads:
                merged_rate = _appends(confined, "merged", count, MERGE)
            merged = _summary(reads)
            trusted_rate = _appends(library, "trusted", count, {})
        finally:
            library.close()
    return {"appends": count, "fast_append_reads": fast, "merge_append_reads": merged,
            "appends_per_s": {"confined_fast": fast_rate, "confined_merge": merged_rate,
                              "trusted_fast": trusted_rate}}
