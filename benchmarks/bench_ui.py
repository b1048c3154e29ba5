"""The catalog UI: server time of its pages on a big catalog, and the files each page reads
(a page reads the definitions and roots it shows, never the whole catalog); then issue 47's
daily-use catalog: 5,000 tables and 500 versions, one of them of 3,000 actions, with find,
filtered namespaces, object and user history, big diffs and "used by"."""

from __future__ import annotations

import statistics
import time
import warnings
from typing import Any

from benchmarks.common import COLUMNS, build_catalog, recording, workdir
from olympia import Catalog
from olympia.iceberg import metadata  # noqa: F401  (loaded in a server before any page)
from olympia.ui import create_ui

with warnings.catch_warnings():  # starlette's note about httpx, raised on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

PAGES = {
    "browse_namespaces": "/",
    "browse_namespace": "/namespace?name=ns03",
    "browse_namespace_late_page": "/namespace?name=ns03&after=table:t0009003",
    "table": "/table?ns=ns03&name=t0000013",
    "history": "/history",
    "history_older_page": "/history?before={middle}",
    "diff_previous": "/diff?to={latest}",
}


#: Issue 47's pages; {big} is the 3,000-action version, {latest} the last one.
DAILY_PAGES = {
    "find": "/find?q=t00012",
    "namespace_filtered": "/namespace?name=ns03&q=t00001",
    "namespace_late_page": "/namespace?name=ns03&after=table:t0004003",
    "table": "/table?ns=ns03&name=t0000013",
    "history_of_table": "/history?object=table&ns=ns03&name=t0000013",
    "history_of_user": "/history?user=bob",
    "history_of_untouched_table": "/history?object=table&ns=ns04&name=t0000024",
    "diff_3000_actions": "/diff?to={big}",
    "diff_3000_actions_one_namespace": "/diff?to={big}&ns=ns07",
    "diff_0_to_latest": "/diff?from=0&to={latest}",
    "used_by": "/used-by?ns=ns03&name=t0000013",
}


def daily(quick: bool) -> dict[str, Any]:
    """Issue 47's catalog: ten namespaces, 2,000 tables in version 2, 3,000 more in version 3
    (one version of 3,000 actions), then property changes by alternating users up to 500
    versions (scaled down by ten when ``quick``)."""
    first, big, versions = (200, 300, 50) if quick else (2000, 3000, 500)
    with workdir() as tmp:
        uri = str(tmp / "daily")
        with build_catalog(uri, {}, first + 10, batch=first) as catalog:
            with catalog.transaction() as txn:
                for i in range(first + 10, first + big + 10):
                    txn.create_table(f"ns{i % 10:02d}", f"t{i:07d}", columns=COLUMNS)
            big_version = catalog.version
            while catalog.version < versions - 1:
                with catalog.transaction() as txn:
                    txn.annotate(user=("ann", "bob")[catalog.version % 2])
                    txn.alter_table("ns03", "t0000013",
                                    set_properties={"run": str(catalog.version)})
            latest = catalog.version
        pages = {name: measure(uri, url.format(big=big_version, latest=latest),
                               3 if quick else 5)
                 for name, url in DAILY_PAGES.items()}
    slowest = max(max(p["cold_ms"], p["warm_median_ms"]) for p in pages.values())
    return {"tables": first + big, "versions": latest + 1, "big_version": big_version,
            "big_version_actions": big, "pages": pages, "goal_ms": 1000,
            "slowest_ms": slowest, "within_goal": slowest < 1000}


def measure(uri: str, url: str, warm_repeat: int) -> dict[str, Any]:
    """One page: the first request on a freshly opened catalog (cold: every file read from
    storage, counted by kind) and the median of later requests (warm caches)."""
    cold = Catalog.open(uri)
    client = TestClient(create_ui(lambda request: cold))
    with recording(cold.storage) as log:
        started = time.perf_counter()
        answer = client.get(url)
        cold_s = time.perf_counter() - started
    assert answer.status_code == 200, (url, answer.status_code, answer.text[-500:])
    warm = []
    for _ in range(warm_repeat):
        started = time.perf_counter()
        client.get(url)
        warm.append(time.perf_counter() - started)
    cold.close()
    return {"cold_ms": round(cold_s * 1000, 1),
            "warm_median_ms": round(statistics.median(warm) * 1000, 1),
            "reads": {kind: log.count("read", kind) for kind in
                      ("def", "root", "node", "hint", "other")},
            "bytes": len(answer.content)}


def run(quick: bool) -> dict[str, Any]:
    objects, commits = (500, 40) if quick else (10_000, 1000)
    with workdir() as tmp:
        uri = str(tmp / "ui")
        with build_catalog(uri, {}, objects) as catalog:
            started = time.perf_counter()
            for i in range(commits):  # one property change per version
                catalog.alter_table("ns03", "t0000013", set_properties={"run": str(i)})
            build_s = time.perf_counter() - started
            latest = catalog.version
        pages = {name: measure(uri, url.format(latest=latest, middle=latest // 2),
                               3 if quick else 10)
                 for name, url in PAGES.items()}
    slowest = max(max(p["cold_ms"], p["warm_median_ms"]) for p in pages.values())
    return {"objects": objects, "versions": latest + 1,
            "commit_s": round(build_s, 2), "page_size": 50, "pages": pages,
            "goal_ms": 1000, "slowest_ms": slowest, "within_goal": slowest < 1000,
            "daily_use": daily(quick)}
