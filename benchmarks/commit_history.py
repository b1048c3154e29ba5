"""A long run of a commit-history state machine: the commit protocol's
(tests/test_commit_history.py) on local disk, with ``--machine commits-gs`` or
``--machine commits-abfs`` the same machine on ``gs://`` (fake-gcs-server) or ``abfs://``
(Azurite), or with ``--machine transactions`` distributed transactions'
(tests/test_dtxn_history.py). The number of examples reaches each machine through one
variable (OLYMPIA_COMMIT_HISTORY_EXAMPLES for the three commit machines); ``--machine``
picks which tests of the file run.

``python -m benchmarks.commit_history --examples 200000 [--workers 2]`` runs that many
examples with fresh random draws (hypothesis's ``explore`` profile, not the suite's
derandomized one), split evenly over ``--workers`` pytest processes (each draws its own
random examples), and prints one JSON line: examples asked for, whether they all passed,
and seconds; each worker also prints hypothesis's statistics, whose events count the
outcomes callers were told and the restores made while a commit paused. It is not a
``bench_*`` module, so ``python -m benchmarks`` does not run it: at 13-24 examples a
second per idle core (before issue 44's moves; 3-8 a second per core on two cores shared
with other work), 200 000 examples take between 75 minutes and several hours. On the
emulators an example costs more (every operation is a request): the suite's 8
derandomized examples took 12 s on ``gs://`` and 20 s on ``abfs://`` on two cores shared
with a long run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMITS = "OLYMPIA_COMMIT_HISTORY_EXAMPLES"
CLOUD_TEST = "test_commit_history.py::test_the_history_holds_on_a_cloud_scheme"
#: machine -> (its tests: a file or test, then pytest's other arguments; the variable
#: holding its number of examples)
MACHINES = {"commits": (("test_commit_history.py", "-k", "not cloud_scheme"), COMMITS),
            "commits-gs": ((f"{CLOUD_TEST}[gs]",), COMMITS),
            "commits-abfs": ((f"{CLOUD_TEST}[abfs]",), COMMITS),
            "transactions": (("test_dtxn_history.py",), "OLYMPIA_DTXN_HISTORY_EXAMPLES")}


def main(argv: list[str] | None = None) -> int:
    """Run the state machine; returns 0 when every example of every worker passed.

    Args:
        argv: ``--examples N`` (default 200000), ``--workers W`` (default 1),
            ``--machine commits|commits-gs|commits-abfs|transactions`` (default
            commits).

    Returns:
        The exit code (the first failing worker's pytest exit code, else 0).
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.commit_history")
    parser.add_argument("--examples", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--machine", choices=sorted(MACHINES), default="commits")
    args = parser.parse_args(argv)
    (tests, *selection), examples_variable = MACHINES[args.machine]
    if args.workers < 1 or args.examples % args.workers:
        parser.error("--workers must be at least 1 and divide --examples")
    env = {**os.environ, "HYPOTHESIS_PROFILE": "explore",
           examples_variable: str(args.examples // args.workers)}
    started = time.perf_counter()
    workers = [subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "timeout=0",
         "--hypothesis-show-statistics", str(ROOT / "tests" / tests), *selection],
        cwd=ROOT, env=env)
        for _ in range(args.workers)]
    codes = [worker.wait() for worker in workers]
    code = next((c for c in codes if c), 0)
    print(json.dumps({"machine": args.machine, "examples": args.examples,
                      "workers": args.workers,
                      "passed": code == 0,
                      "seconds": round(time.perf_counter() - started, 1)}))
    return code


if __name__ == "__main__":  # the writer process imports this module: run only as a script
    sys.exit(main())
