"""OlympiaHook: an Olympia catalog from an Airflow connection of type ``olympia``.

Connection fields: Host (the catalog URI); Login/Password (S3 access key id / secret); extra
``storage_options`` (JSON object passed to the storage, e.g. ``{"endpoint_url": ...,
"region": ...}``); extra ``spark_master`` (expiry, default local[2]); extras ``rest_uri``
and ``rest_warehouse`` (the ``olympia serve`` over this catalog, for Iceberg REST clients
such as Spark SQL: its URL, and its warehouse, default the catalog's ``warehouse``
property, as the server's). The extra
``catalog_uri`` of earlier versions is still read when Host is empty or equal to it, with a
deprecation warning; a connection whose Host and ``catalog_uri`` differ is refused.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.sdk import Asset, BaseHook

from olympia.catalog.catalog import Catalog
from olympia.catalog.distributed import MAX_ID_BYTES, TRANSACTION_ID
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.exceptions import CatalogError, NoSuchTransactionError, OlympiaError
from olympia.iceberg.live import Claims
from olympia.storage.schemes import scheme_of
from olympia.versions.history import version_info
from olympia.versions.policy import parse_duration
from olympia_provider.assets import catalog_asset

if TYPE_CHECKING:
    from olympia.iceberg.catalog import OlympiaCatalog

KINDS = {"namespace": ObjectType.NAMESPACE, "table": ObjectType.TABLE, "view": ObjectType.VIEW}
#: How much earlier than the DAG run's start a version may say it was created and still be
#: looked at as this run's commit (the clocks of workers and scheduler may disagree).
CLOCK_SKEW = timedelta(minutes=10)
_NOT_IN_ID = re.compile(r"[^A-Za-z0-9_.-]")


def run_transaction_id(dag_id: str, run_id: str) -> str:
    """The default distributed transaction id of a DAG run: ``<dag_id>.<run_id>`` with each
    character an id cannot hold as ``_`` (cut to fit), ``-`` and 8 hex digits of a hash of
    the pair, so distinct runs get distinct ids. A run always gets the same id: the begin,
    commit and abort tasks agree on it without XCom, also when begin failed."""
    digest = hashlib.sha256(f"{dag_id}\0{run_id}".encode()).hexdigest()[:8]
    readable = _NOT_IN_ID.sub("_", f"{dag_id}.{run_id}").lstrip(".")
    return f"{readable[:MAX_ID_BYTES - len(digest) - 1]}-{digest}"


class TransactionCommit(NamedTuple):
    """What committing a distributed transaction did: the version it landed as, and whether
    that is a new one (False when nothing was added: the beginning version)."""

    version: int
    new_version: bool


def committed_version(catalog: Catalog, transaction_id: str, since: datetime) -> int | None:
    """The version that committed transaction ``transaction_id`` (its ``transaction``
    annotation), among those created since ``since`` less :data:`CLOCK_SKEW`; newest first,
    one root read per version."""
    floor = int((since - CLOCK_SKEW).timestamp() * 1000)
    for version in range(catalog.refresh(), catalog.files.oldest_version() - 1, -1):
        found = version_info(catalog.at_version(version))
        if found.created_at_millis < floor:
            return None
        if found.info.get(TRANSACTION_ID) == transaction_id:
            return version
    return None


def settings_from_connection(conn: Any) -> tuple[str, dict[str, Any]]:
    """(catalog URI, storage options) from a connection; secrets stay in the options only.
    Login and Password become the storage options the scheme's profile names
    (``CONNECTION``: S3's key and secret, Azure's account name and key, Google Cloud
    Storage's project and OAuth2 token)."""
    extra = conn.extra_dejson or {}
    uri = conn.host
    legacy = extra.get("catalog_uri")
    if legacy:
        if uri and uri != legacy:
            raise ValueError(f"connection {conn.conn_id!r} names two catalogs: Host {uri!r} "
                             f"and the extra catalog_uri {legacy!r}; keep Host only")
        warnings.warn(f"connection {conn.conn_id!r}: the extra catalog_uri is deprecated, "
                      "put the catalog URI in Host", DeprecationWarning, stacklevel=2)
        uri = legacy
    if not uri:
        raise ValueError(f"connection {conn.conn_id!r} names no catalog: set Host to the "
                         "catalog URI")
    options = extra.get("storage_options") or {}
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except json.JSONDecodeError as exc:
            raise ValueError(f"connection {conn.conn_id!r}: storage_options is not JSON "
                             f"({exc.msg})") from None
    options = dict(options)
    scheme = scheme_of(str(uri))
    login, password = scheme.profile.CONNECTION if scheme else ("key", "secret")
    if conn.login:
        options.setdefault(login, conn.login)
    if conn.password:
        options.setdefault(password, conn.password)
    return str(uri), options


@dataclass(frozen=True)
class Condition:
    """What a sensor waits for: the latest version above ``after_version`` (or at least
    ``target_version``); with ``kind``/``namespace``/``name``, that object created or its
    definition changed since ``after_version``. ``before`` is the object's definition path
    at ``after_version`` ("" if it did not exist), filled in by :meth:`pinned` so later
    checks need not read that version (which expiry may remove meanwhile)."""

    after_version: int | None = None
    target_version: int | None = None
    kind: str | None = None
    namespace: str | None = None
    name: str = ""
    before: str | None = None

    def _ref(self) -> ObjectRef:
        assert self.kind is not None and self.namespace is not None
        return ObjectRef(KINDS[self.kind], self.namespace,
                         "" if self.kind == "namespace" else self.name)

    def pinned(self, catalog: Catalog) -> Condition:
        """This condition with ``before`` read from ``after_version`` (object conditions)."""
        if self.kind is None or self.before is not None:
            return self
        assert self.after_version is not None
        before = catalog.at_version(self.after_version).definition_path(self._ref())
        return replace(self, before=before or "")

    def check(self, uri: str, options: dict[str, Any]) -> int | None:
        """The latest version if the condition holds, else None."""
        catalog = Catalog.open(uri, options)
        latest = catalog.version
        if self.kind is not None:
            before = self.pinned(catalog).before
            now = catalog.definition_path(self._ref())
            return latest if now is not None and now != before else None
        if self.target_version is not None:
            return latest if latest >= self.target_version else None
        assert self.after_version is not None
        return latest if latest > self.after_version else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Condition:
        """The condition :meth:`to_dict` gave (from trigger kwargs or the task state store).

        Raises:
            ValueError: keys it does not know.
        """
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown keys in an Olympia sensor condition: {sorted(unknown)}")
        return cls(**data)


class OlympiaHook(BaseHook):
    """Opens the Olympia catalog an ``olympia`` connection points to."""

    conn_name_attr = "olympia_conn_id"
    default_conn_name = "olympia_default"
    conn_type = "olympia"
    hook_name = "Olympia catalog"

    def __init__(self, olympia_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.olympia_conn_id = olympia_conn_id

    def settings(self) -> tuple[str, dict[str, Any]]:
        return settings_from_connection(self.get_connection(self.olympia_conn_id))

    @property
    def spark_master(self) -> str:
        extra = self.get_connection(self.olympia_conn_id).extra_dejson or {}
        return str(extra.get("spark_master") or "local[2]")

    def catalog_asset(self) -> Asset:
        """The Asset of the catalog this connection names (:func:`~olympia_provider.assets.
        catalog_asset` of its Host): a DAG file may call this when it is parsed, to be
        scheduled on the catalog without naming its URI twice."""
        return catalog_asset(self.settings()[0])

    def get_conn(self) -> Catalog:
        return self.get_catalog()

    def get_catalog(self) -> Catalog:
        """The catalog at its latest version; a distributed transaction it lands is held
        to the rule that no two live tables share files (:class:`Claims`)."""
        uri, options = self.settings()
        catalog = Catalog.open(uri, options)
        catalog.require_on_landing(Claims.on)
        return catalog

    def test_connection(self) -> tuple[bool, str]:
        try:
            catalog = self.get_catalog()
        except (OlympiaError, ValueError) as exc:
            return False, str(exc)
        return True, f"Olympia catalog {catalog.uri} at version {catalog.version}"

    # --- distributed transactions (write-audit-publish) ---------------------------------

    def begin_transaction(self, transaction_id: str | None = None, *,
                          ttl: str | timedelta | None = None,
                          info: Mapping[str, str] | None = None) -> str:
        """Begin a distributed transaction on the latest version
        (:meth:`Catalog.begin_transaction`).

        Args:
            transaction_id: Its id (letters, digits, ``-``, ``_``, ``.``); default a UUID.
            ttl: How long it may stay open: a duration (``2h``, ``1d12h``) or a timedelta;
                default the catalog's transaction TTL.
            info: Annotations recorded with the version it commits.

        Returns:
            Its id.

        Raises:
            AlreadyExistsError: A transaction ``transaction_id`` exists.
            InvalidArgumentError: ``ttl`` is not a positive duration.
            InvalidNameError: ``transaction_id`` is not a valid id.
        """
        millis = (None if ttl is None else int(ttl / timedelta(milliseconds=1))
                  if isinstance(ttl, timedelta) else parse_duration(str(ttl)))
        return self.get_catalog().begin_transaction(transaction_id, ttl_millis=millis,
                                                    info=info).id

    def commit_transaction(self, transaction_id: str) -> TransactionCommit:
        """Land everything added to the transaction as ONE version (committing one that
        someone else is committing finishes it).

        Returns:
            The version, and whether it is new.

        Raises:
            NoSuchTransactionError: It was committed or aborted, or never began.
            CommitConflict: A version since it began conflicts; nothing of it landed and it
                is aborted.
            TransactionExpiredError: It expired.
            CatalogError: It is being aborted.
        """
        dtx = self.get_catalog().distributed_transaction(transaction_id)
        version = dtx.commit()
        return TransactionCommit(version, version != dtx.record.beginning_version)

    def abort_transaction(self, transaction_id: str, *,
                          began_after: datetime | None = None) -> bool:
        """Discard the transaction, for cleanup after a failure: one that is not there (it
        never began, or was aborted already, as a commit that meets a conflict does) is
        nothing to abort. One that was committed is not "nothing": with ``began_after``
        (when the transaction may have begun at the earliest), the versions created since
        are searched for its commit, and finding it is an error.

        Returns:
            True if it was aborted here, False if there was none.

        Raises:
            CatalogError: It is being committed (commit it again to finish), or a version
                since ``began_after`` committed it: abort cannot undo that.
        """
        catalog = self.get_catalog()
        try:
            catalog.distributed_transaction(transaction_id).abort()
        except NoSuchTransactionError:
            landed = (None if began_after is None
                      else committed_version(catalog, transaction_id, began_after))
            if landed is not None:
                raise CatalogError(f"distributed transaction {transaction_id!r} was committed "
                                   f"as version {landed}: abort cannot undo it (roll back "
                                   "to undo its changes)") from None
            return False
        return True

    def get_iceberg_catalog(self, transaction_id: str | None = None) -> OlympiaCatalog:
        """The catalog for pyiceberg (:class:`~olympia.iceberg.OlympiaCatalog`, its FileIO
        given the connection's storage options); with ``transaction_id``, inside that
        distributed transaction: reads see everything added to it, changes add to it.

        Raises:
            NoSuchTransactionError: There is no open transaction ``transaction_id``.
            TransactionExpiredError: It expired.
        """
        from olympia.iceberg.catalog import OlympiaCatalog

        catalog = OlympiaCatalog.over(self.get_catalog())
        return catalog if transaction_id is None else catalog.in_transaction(transaction_id)

    def rest_catalog_properties(self, transaction_id: str | None = None) -> dict[str, str]:
        """``uri`` and ``warehouse`` of the ``olympia serve`` over this connection's catalog,
        for an Iceberg REST client (Spark SQL with Iceberg's runtime, pyiceberg's
        RestCatalog): the extras ``rest_uri`` and ``rest_warehouse`` (default: the catalog's
        ``warehouse`` property, which the server serves unless started with another). With
        ``transaction_id`` the warehouse is ``<warehouse>@txn:<id>``: the client reads and
        writes inside that distributed transaction, every table under its usual name.

        Raises:
            ValueError: The connection has no ``rest_uri``, or no warehouse is known.
        """
        conn = self.get_connection(self.olympia_conn_id)
        extra = conn.extra_dejson or {}
        uri = extra.get("rest_uri")
        if not uri:
            raise ValueError(f"connection {conn.conn_id!r} has no rest_uri: set the extra "
                             "rest_uri to the URL of the olympia serve over its catalog")
        warehouse = extra.get("rest_warehouse") or self.get_catalog().properties.get(
            "warehouse")
        if not warehouse:
            raise ValueError(f"connection {conn.conn_id!r}: its catalog has no warehouse "
                             "property; set the extra rest_warehouse to the server's")
        if transaction_id is not None:
            warehouse = f"{warehouse}@txn:{transaction_id}"
        return {"uri": str(uri), "warehouse": str(warehouse)}

    async def asettings(self) -> tuple[str, dict[str, Any]]:
        conn = await BaseHook.aget_connection(self.olympia_conn_id)
        return settings_from_connection(conn)

    async def aget_latest_version(self) -> int:
        """The latest version, with storage I/O off the event loop (for triggers)."""
        uri, options = await self.asettings()
        return await asyncio.to_thread(lambda: Catalog.open(uri, options).version)

    async def acheck(self, condition: Condition) -> int | None:
        """:meth:`Condition.check` off the event loop."""
        uri, options = await self.asettings()
        return await asyncio.to_thread(condition.check, uri, options)

    def check(self, condition: Condition) -> int | None:
        uri, options = self.settings()
        return condition.check(uri, options)
