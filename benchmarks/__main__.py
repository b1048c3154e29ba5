"""Run every benchmarks/bench_*.py module and print one JSON document (also saved under
benchmarks/results/)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    parser.add_argument("--quick", action="store_true", help="small sizes, seconds not minutes")
    parser.add_argument("--only", nargs="*", help="module names, e.g. core plan")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    names = sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))
    if args.only:
        names = [n for n in names if n in args.only]
    report: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "results": {},
    }
    for name in names:
        started = time.perf_counter()
        try:
            module = importlib.import_module(f"benchmarks.bench_{name}")
            result = module.run(args.quick)
        except Exception as exc:  # report and go on with the other benchmarks
            result = {"error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc(limit=5)}
        result["seconds"] = round(time.perf_counter() - started, 2)
        report["results"][name] = result
        print(f"benchmark {name}: {result['seconds']}s", file=sys.stderr)
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / f"{report['started'].replace(':', '')}.json").write_text(text)
    if args.out:
        Path(args.out).write_text(text)
    return 1 if any("error" in r for r in report["results"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
