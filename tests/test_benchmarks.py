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
    that may come from different rounds (the machine drifts between them)."""
    from benchmarks.bench_contention import _series

    rates = {1: iter([100, 400, 200]), 8: iter([90, 100, 150])}

    def run(writers: int, commits: int, shared: bool) -> dict[str, float]:
        if not shared:
            return {"commits_per_s": 500}
        return {"commits_per_s": next(rates[writers]) if writers in rates else 1}

    series = _series(run, 5, rounds=3)
    assert series["ratio_8_to_1_by_round"] == [0.9, 0.25, 0.75]
    assert series["ratio_8_to_1"] == 0.75 and series["ratio_of_medians"] == 0.5
