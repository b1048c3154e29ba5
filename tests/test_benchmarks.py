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
