"""View ordering: a view's change comes after the changes of the views it reads."""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from olympia.plan.changes import Change
from olympia.spec.model import Key, Spec


def reading_order(changes: Mapping[Key, Change], spec: Spec) -> list[Change]:
    """View changes with each view after the views it reads; otherwise by name (a
    reference cycle, which the catalog cannot hold anyway, keeps name order)."""
    keys = sorted(changes)
    index = {k: i for i, k in enumerate(keys)}
    waits_for = {k: {r for r in spec.views[k].view.referenced_objects if r in changes and r != k}
                 for k in keys}
    readers: dict[Key, list[Key]] = {k: [] for k in keys}
    for k, reads in waits_for.items():
        for r in reads:
            readers[r].append(k)
    ready = [index[k] for k in keys if not waits_for[k]]
    heapq.heapify(ready)
    ordered: list[Key] = []
    while ready:
        k = keys[heapq.heappop(ready)]
        ordered.append(k)
        for reader in readers[k]:
            waits_for[reader].discard(k)
            if not waits_for[reader]:
                heapq.heappush(ready, index[reader])
    done = set(ordered)
    ordered += [k for k in keys if k not in done]
    return [changes[k] for k in ordered]
