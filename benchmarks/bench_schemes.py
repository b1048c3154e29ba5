"""The cloud storage schemes side by side (issue 48): Google Cloud Storage on
fake-gcs-server and Azure Blob Storage on Azurite, beside S3 on SeaweedFS, each server
started on this machine in the same run, never asserted in tests.

Per scheme, the series of :mod:`benchmarks.bench_contention` and :mod:`benchmarks.bench_rest`
on a cloud store, with S3's sizes in 2 rounds:

- ``contention``: 1, 2, 4 and 8 writer processes sharing one job of one-table creates, in
  paired rounds (commits/s, each writer's p50/p99, root creates per commit, lost commits,
  the 8:1 ratio by round), with 8 writers into catalogs of their own as the ceiling;
- ``threads``: 1 thread against 8 threads through one coalescing catalog object, and 8
  threads each into a catalog of its own;
- ``load_table``: a table of 50 snapshots loaded in process (warm, parsing, cold), through
  pyiceberg's ``SqlCatalog`` on the same store, through ``olympia serve`` (pyiceberg's
  ``RestCatalog``, warm and cold) and as a raw HTTP GET.

An emulator is not its cloud: the figures compare each scheme's client library and
protocol on this machine (the server shares the writers' two cores), not the services.
A scheme whose emulator is not installed reports an error and the others go on.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from benchmarks.bench_contention import (
    S3_COMMITS,
    SHARES,
    THREAD_SIDES,
    _paired,
    _run,
    _series,
    _threads,
)
from benchmarks.bench_rest import load_table
from benchmarks.common import cloud_location, guarded, workdir
from olympia.iceberg.options import iceberg_properties

SCHEMES = ("s3", "gs", "abfs")
ROUNDS = 2  # a table of each scheme's figures, not a comparison with a baseline


def _scheme(scheme: str, tmp: Path, commits: int, rounds: int, loads: int,
            snapshots: int) -> dict[str, Any]:
    with cloud_location(scheme, "schemes") as (uri, options):
        trial = itertools.count()
        out: dict[str, Any] = {"contention": _series(
            lambda w, n, shared, shares: _run(f"{uri}/w{w}-{shared}-{next(trial)}", options,
                                              w, n, shared, shares),
            commits, rounds=rounds)}
        out["threads"] = _paired(
            lambda side: _threads(f"{uri}/threads-{side}-{next(trial)}", options,
                                  *THREAD_SIDES[side], SHARES * commits),
            rounds=rounds, sides=tuple(THREAD_SIDES))
        out["load_table"] = load_table(
            f"{uri}/catalog", f"{uri}/warehouse", options, iceberg_properties(uri, options),
            f"sqlite:///{tmp}/sql-{scheme}.db", f"{uri}/sql-wh", loads, snapshots)
        return out


def run(quick: bool) -> dict[str, Any]:
    commits, rounds = (4, 1) if quick else (S3_COMMITS, ROUNDS)
    loads, snapshots = (50, 10) if quick else (500, 50)
    with workdir() as tmp:
        return {scheme: guarded(lambda scheme=scheme: _scheme(
            scheme, tmp, commits, rounds, loads, snapshots)) for scheme in SCHEMES}
