"""The benchmark modules import cleanly and expose ``run(quick)`` (running them is `make bench`)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

BENCHMARKS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "benchmarks").glob(
    "bench_*.py"))


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_module_imports(name: str) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    assert list(inspect.signature(module.run).parameters) == ["quick"]


def test_contention_ratio_pairs_each_rounds_runs() -> None:
    """The 8:1 ratio is the median of each round's own 8:1 ratio, not a ratio of medians
    that may come from different rounds (the machine drifts between them); one writer makes
    the whole job, and the one-share writer's ratio is reported beside it."""
    from benchmarks.bench_contention import SHARES, _series

    rates = {(1, SHARES): iter([100, 400, 200]), (8, SHARES): iter([90, 100, 150]),
             (1, 1): iter([120, 500, 300])}
    calls = []

    def run(writers: int, share: int, shared: bool, shares: int) -> dict[str, float]:
        calls.append((writers, share, shared, shares))
        if not shared:
            return {"commits_per_s": 500}
        return {"commits_per_s": next(rates[writers, shares]) if (writers, shares) in rates
                else 1}

    series = _series(run, 5, rounds=3)
    assert series["ratio_8_to_1_by_round"] == [0.9, 0.25, 0.75]
    assert series["ratio_8_to_1"] == 0.75 and series["ratio_of_medians"] == 0.5
    assert series["ratio_8_to_1_one_share_by_round"] == [0.75, 0.2, 0.5]
    assert series["ratio_8_to_1_one_share"] == 0.5
    assert {call[1] for call in calls} == {5}
    assert (8, 5, False, SHARES) in calls and (1, 5, True, 1) in calls


@pytest.mark.parametrize("writers", [1, 2, 4, 8])
def test_contention_writers_share_one_job(writers: int) -> None:
    """Every writer count creates the same tables, each once, and a writer of several
    shares interleaves them (one writer inserts across the tree as 8 writers do)."""
    from benchmarks.bench_contention import SHARES, _names

    names = [n for w in range(writers) for n in _names(w, writers, SHARES, 3)]
    assert sorted(names) == sorted(f"w{s:02d}_{i:05d}" for s in range(SHARES) for i in range(3))
    assert _names(0, writers, SHARES, 3)[:2] == (
        ["w00_00000", "w00_00001"] if writers == 8 else ["w00_00000", f"w{writers:02d}_00000"])


def test_paired_series_runs_every_side_each_round_and_ratios_each_pair() -> None:
    """A paired series runs every side in each round, in turn, and reports each round's
    ratio of every side to each side before it, with their median."""
    from benchmarks.bench_contention import _paired

    rates = {1: iter([100, 200]), "sep": iter([50, 100]), 8: iter([150, 100])}
    calls = []

    def run(side: object) -> dict[str, float]:
        calls.append(side)
        return {"commits_per_s": next(rates[side])}

    series = _paired(run, rounds=2, sides=(1, "sep", 8))
    assert calls == [1, "sep", 8, 1, "sep", 8]
    assert series["ratio_8_to_1_by_round"] == [1.5, 0.5] and series["ratio_8_to_1"] == 1.0
    assert series["ratio_sep_to_1_by_round"] == [0.5, 0.5]
    assert series["ratio_8_to_sep_by_round"] == [3.0, 1.0] and series["ratio_8_to_sep"] == 2.0
    assert series["8"]["rounds"] == [150, 100] and series["1"]["commits_per_s"] == 200


def test_threads_run_through_one_catalog_or_one_each(tmp_path: Path) -> None:
    """The threads series' sides: 8 threads through one coalescing catalog object make
    fewer versions than commits; 8 threads each through a catalog of its own make one per
    commit; nothing is lost either way."""
    from benchmarks.bench_contention import _threads

    shared = _threads(str(tmp_path / "shared"), {}, 8, True, 40)
    separate = _threads(str(tmp_path / "separate"), {}, 8, False, 40)
    assert shared["commits"] == separate["commits"] == 40
    assert shared["lost_commits"] == separate["lost_commits"] == 0
    assert shared["versions_per_commit"] <= 1.0 and separate["versions_per_commit"] == 1.0


def test_the_reference_row_is_written_each_time_and_left_as_it_was(tmp_path: Path) -> None:
    """bench_peers' measure of the reference's commit writes the row every time (SQLite
    skips an update that leaves a row the same: that would measure nothing) and leaves the
    catalog's row as it found it."""
    import sqlite3

    from benchmarks.bench_peers import sqlite_row

    path = str(tmp_path / "reference.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE iceberg_tables (catalog_name TEXT, table_namespace TEXT, "
               "table_name TEXT, metadata_location TEXT, previous_metadata_location TEXT)")
    db.execute("INSERT INTO iceberg_tables VALUES ('c', 'ns', 't', 'file:///w/m.json', NULL)")
    before = db.execute("SELECT * FROM iceberg_tables").fetchall()
    version = db.execute("PRAGMA data_version").fetchone()[0]
    assert sqlite_row(path, 3)["commits"] == 4
    assert db.execute("PRAGMA data_version").fetchone()[0] != version  # another writer's
    assert db.execute("SELECT * FROM iceberg_tables").fetchall() == before


def test_landing_makes_one_version_per_commit_and_ratios_the_rest(tmp_path: Path) -> None:
    """bench_peers' landing cost is measured over exactly one version per commit, and the
    CPU outside landing is each round's own difference."""
    from benchmarks.bench_peers import landing, outside_landing
    from olympia import Catalog

    uri = str(tmp_path / "catalog")
    Catalog.create(uri).close()
    measured = landing(uri, 5)
    assert measured["versions"] == 5 and measured["writes_per_version"] >= 3
    with Catalog.open(uri) as catalog:  # the namespace, the table, 10 unmeasured, 5
        assert catalog.version == 17
    rounds = {"per_round": [({"server_cpu_ms_per_append_in_turns": 8.0},
                             {"server_cpu_ms_per_append_in_turns": 7.0}),
                            ({"server_cpu_ms_per_append_in_turns": 6.0},
                             {"server_cpu_ms_per_append_in_turns": 9.0})]}
    assert outside_landing(rounds, 2.0, 1.0) == {
        "olympia": {"median": 5.0, "min": 4.0, "max": 6.0},
        "peer": {"median": 7.0, "min": 6.0, "max": 8.0},
        "ratio": {"median": 0.75, "min": 0.5, "max": 1.0}}  # not 5 / 7: by round
