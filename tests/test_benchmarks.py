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


def test_coalesced_contention_pairs_rounds_and_counts_versions() -> None:
    """A paired series runs one writer and 8 in each round and reports the paired
    ratio and the versions made per commit."""
    from benchmarks.bench_contention import _paired

    rates = {1: iter([100, 200]), 8: iter([150, 100])}
    calls = []

    def run(writers: int) -> dict[str, float]:
        calls.append(writers)
        return {"commits_per_s": next(rates[writers]), "commits": 100,
                "versions": 101 if writers == 1 else 26}

    series = _paired(run, rounds=2)
    assert calls == [1, 8, 1, 8]
    assert series["ratio_8_to_1_by_round"] == [1.5, 0.5] and series["ratio_8_to_1"] == 1.0
    assert series["1"]["versions_per_commit"] == 1.0 and series["8"]["versions_per_commit"] == 0.25
    assert series["8"]["rounds"] == [150, 100]
