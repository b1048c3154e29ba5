"""A long run of the commit-history state machine (tests/test_commit_history.py).

``python -m benchmarks.commit_history --examples 200000`` runs that many examples with
fresh random draws (hypothesis's ``explore`` profile, not the suite's derandomized one)
and prints one JSON line: examples asked for, whether they all passed, and seconds. It is
not a ``bench_*`` module, so ``python -m benchmarks`` does not run it: at 13-24 examples
a second on a 2-core machine, 200 000 examples take two to four hours.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    """Run the state machine; returns pytest's exit code (0: every example passed).

    Args:
        argv: ``--examples N`` (default 200000).

    Returns:
        The exit code.
    """
    import pytest

    parser = argparse.ArgumentParser(prog="python -m benchmarks.commit_history")
    parser.add_argument("--examples", type=int, default=200_000)
    args = parser.parse_args(argv)
    os.environ["OLYMPIA_COMMIT_HISTORY_EXAMPLES"] = str(args.examples)
    os.environ["HYPOTHESIS_PROFILE"] = "explore"
    started = time.perf_counter()
    code = int(pytest.main(["-q", "-p", "no:cacheprovider", "-o", "timeout=0",
                            str(ROOT / "tests" / "test_commit_history.py")]))
    print(json.dumps({"examples": args.examples, "passed": code == 0,
                      "seconds": round(time.perf_counter() - started, 1)}))
    return code


if __name__ == "__main__":  # the writer process imports this module: run only as a script
    sys.exit(main())
