"""How the server commits a client's table changes: a commit that loses a race to a
concurrent commit of the same table is tried again against the new state, within the
library's own retry policy and time budget."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import CommitTableRequest, Namespace, TableIdentifier

from olympia import exceptions as oe
from olympia.catalog.commit import CommitOptions
from olympia.server.models import CommitTableBody

T = TypeVar("T")


def retry_lost_races(commit: Callable[[], T], options: CommitOptions) -> T:
    """Run ``commit``; when it loses a race to a concurrent commit of the same table, run it
    again: it re-reads the tables and re-checks the client's requirements against them.
    Every round lands at least one of the racing commits, so each makes progress. The
    retries follow the library's own policy for lost root races: the same jittered,
    doubling pause and the same time budget, counted from the first try.

    Args:
        commit: Stages and commits the changes (``OlympiaCatalog.commit_tables``).
        options: The catalog's commit options (``Catalog.commit_options``).

    Returns:
        What ``commit`` returned.

    Raises:
        CommitFailedException: a requirement does not hold (at once), or races were still
            being lost when the budget was spent.
    """
    deadline = options.clock() + options.timeout_s
    losses = 0
    while True:
        try:
            return commit()
        except CommitFailedException as exc:
            # OlympiaCatalog raises a lost race from the library's CommitConflict; a failed
            # requirement carries no cause and is final.
            if not isinstance(exc.__cause__, oe.CommitConflict) or options.clock() > deadline:
                raise
        losses += 1
        options.sleep(options.jitter(options.pause(losses)))


def change_of(namespace: str, name: str,
              body: CommitTableBody | CommitTableRequest) -> CommitTableRequest:
    """A table change naming its table by a one-level namespace and a name."""
    return CommitTableRequest(identifier=TableIdentifier(namespace=Namespace([namespace]),
                                                         name=name),
                              requirements=body.requirements, updates=body.updates)
