"""Distributed transactions over the REST protocol, by name, for unmodified Iceberg clients.

Two spellings reach the same transaction (:mod:`olympia.catalog.distributed`):

- the transaction warehouse ``<warehouse>@txn:<id>``: ``GET /v1/config`` answers the prefix
  ``txn-<id>``, under which every table keeps its usual name (a job does not change its
  SQL);
- the system namespace of the format's reference implementation: creating namespace
  ``sys.dtxns.<id>`` begins transaction ``<id>`` (properties ``isolation-level``,
  ``ttl-millis``; any other property is an annotation recorded with the version it
  commits), ``sys.dtxns.<id>.<ns>.<table>`` is table ``<ns>.<table>`` inside it, setting the
  property ``commit=true`` on ``sys.dtxns.<id>`` commits it, and dropping that namespace
  aborts it. Listing ``sys.dtxns`` lists the open transactions.

These are names this server resolves: nothing named ``sys`` is stored, and a stored
namespace called ``sys`` (one level) is served as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from olympia import exceptions as oe
from olympia._proto import objects_pb2 as pb
from olympia.catalog.actions import A
from olympia.catalog.distributed import STATES, DistributedTransaction
from olympia.iceberg.txnfiles import abort_transaction
from olympia.server.errors import RestError, bad_request
from olympia.server.models import UpdateNamespacePropertiesBody
from olympia.server.paging import Page, paginate
from olympia.server.service import CatalogService
from olympia.versions.dtxn import list_transactions

SYSTEM = ("sys", "dtxns")
#: Properties of ``sys.dtxns.<id>`` that steer the transaction (the rest are annotations).
ISOLATION, TTL, COMMIT = "isolation-level", "ttl-millis", "commit"


def inside(levels: Sequence[str]) -> tuple[str, list[str]] | None:
    """``(id, levels inside it)`` for a name under ``sys.dtxns.<id>``; else None."""
    if len(levels) >= 3 and tuple(levels[:2]) == SYSTEM:
        return levels[2], list(levels[3:])
    return None


def is_system(levels: Sequence[str]) -> bool:
    """Whether ``levels`` name ``sys``, ``sys.dtxns`` or something under it (a
    one-level ``sys`` is a stored namespace)."""
    return tuple(levels[:2]) == SYSTEM


def in_transaction(service: CatalogService, txn_id: str, shown_as: Sequence[str] = (),
                   ) -> CatalogService:
    """``service`` inside transaction ``txn_id``; its answers name namespaces under
    ``shown_as`` (``sys.dtxns.<id>``) when the client named them so.

    Raises:
        NoSuchTransactionError: There is no open transaction ``txn_id``.
        TransactionExpiredError: It expired.
    """
    return CatalogService(service.catalog.in_transaction(txn_id), service.client_properties,
                          shown_as=tuple(shown_as))


def target(service: CatalogService, namespaces: Sequence[Sequence[str]]) -> CatalogService:
    """The service that handles identifiers (a body's): ``service``, or the transaction
    they all name under ``sys.dtxns``.

    Raises:
        RestError: They name several transactions, or mix names inside one with others.
    """
    found = {txn[0] if (txn := inside(levels)) else None for levels in namespaces}
    if found == {None}:
        return service
    txn_id = found.pop()
    if found or txn_id is None:
        raise bad_request("the identifiers name different transactions (or names outside "
                          "one): one request changes one transaction")
    return in_transaction(service, txn_id, (*SYSTEM, txn_id))


class SystemNamespaces:
    """The namespace operations on ``sys``, ``sys.dtxns`` and ``sys.dtxns.<id>``."""

    def __init__(self, service: CatalogService) -> None:
        self.service = service
        self.store = service.catalog.olympia

    def _transaction(self, levels: Sequence[str]) -> DistributedTransaction:
        found = inside(levels)
        if found is None or found[1]:
            raise RestError(404, "NoSuchNamespaceException",
                            f"Namespace does not exist: {'.'.join(levels)}")
        return self.store.distributed_transaction(found[0])

    def list_namespaces(self, parent: Sequence[str], page: Page) -> dict[str, Any]:
        """The children of ``sys`` (``sys.dtxns``), of ``sys.dtxns`` (the open
        transactions, and those being committed) or of ``sys.dtxns.<id>`` (the namespaces
        inside it)."""
        if tuple(parent) == SYSTEM[:1]:
            return {"namespaces": [list(SYSTEM)], "next-page-token": None}
        if tuple(parent) == SYSTEM:
            ids = sorted(r.id for r in list_transactions(self.store) if r.state != pb.ABORTING)
            shown, token = paginate(ids, page, ".".join(SYSTEM))
            return {"namespaces": [[*SYSTEM, i] for i in shown], "next-page-token": token}
        found = inside(parent)
        if found is None or found[1]:
            raise RestError(404, "NoSuchNamespaceException",
                            f"Namespace does not exist: {'.'.join(parent)}")
        return in_transaction(self.service, found[0], parent).list_namespaces(None, page)

    def load(self, levels: Sequence[str]) -> dict[str, Any]:
        """The properties of ``sys``, ``sys.dtxns`` (none) or ``sys.dtxns.<id>`` (its
        record and annotations)."""
        if tuple(levels) in (SYSTEM[:1], SYSTEM):
            return {"namespace": list(levels), "properties": {}}
        dtx = self._transaction(levels)
        record = dtx.record
        info = next((dict(a.info) for a in dtx.staged_actions()
                     if a.type == A.TRANSACTION_INFO), {})
        return {"namespace": list(levels), "properties": {
            **info, "state": STATES.get(record.state, "unknown"),
            ISOLATION: pb.IsolationLevel.Name(record.isolation_level),
            "beginning-version": str(record.beginning_version),
            "began-at-millis": str(record.began_at_millis),
            "expire-at-millis": str(record.expire_at_millis)}}

    def exists(self, levels: Sequence[str]) -> bool:
        try:
            self.load(levels)
        except (RestError, oe.NoSuchTransactionError):
            return False
        return True

    def begin(self, levels: Sequence[str], properties: dict[str, str]) -> dict[str, Any]:
        """Create ``sys.dtxns.<id>``: begin transaction ``<id>``.

        Raises:
            RestError: Not a ``sys.dtxns.<id>`` name, or a bad property.
            AlreadyExistsError: Transaction ``<id>`` exists.
        """
        found = inside(levels)
        if found is None or found[1]:
            raise bad_request(f"namespace {'.'.join(levels)!r} cannot be created: under sys, "
                              "only sys.dtxns.<id> (a transaction) can")
        info = dict(properties)
        isolation = info.pop(ISOLATION, None)
        ttl = info.pop(TTL, None)
        if ttl is not None and not ttl.isdigit():
            raise bad_request(f"property {TTL} must be a whole number of milliseconds")
        self.store.begin_transaction(found[0], isolation=isolation, info=info,
                                     ttl_millis=None if ttl is None else int(ttl))
        return {"namespace": list(levels), "properties": properties}

    def update(self, levels: Sequence[str],
               body: UpdateNamespacePropertiesBody) -> dict[str, Any]:
        """``commit=true`` on ``sys.dtxns.<id>``: commit it (nothing else may change).

        Raises:
            RestError: Any other change.
            CommitConflict: A version since it began conflicts (it is aborted).
        """
        dtx = self._transaction(levels)
        if body.removals or set(body.updates) != {COMMIT} or (
                body.updates[COMMIT].strip().lower() != "true"):
            raise bad_request(f"the properties of transaction {dtx.id} do not change: set "
                              f"only {COMMIT}=true to commit it, or drop the namespace to "
                              "abort it")
        dtx.commit()
        return {"updated": [COMMIT], "removed": [], "missing": []}

    def drop(self, levels: Sequence[str]) -> None:
        """Drop ``sys.dtxns.<id>``: abort it, then delete the Iceberg files its statements
        wrote that no kept version names (:func:`olympia.iceberg.txnfiles.abort_transaction`:
        the record goes first, so a racing commit never lands without its files).

        Raises:
            RestError: ``sys`` or ``sys.dtxns`` (403).
        """
        if tuple(levels) in (SYSTEM[:1], SYSTEM):
            raise RestError(403, "ForbiddenException",
                            f"namespace {'.'.join(levels)} is the server's own")
        dtx = self._transaction(levels)
        abort_transaction(self.service.catalog, dtx.id)
