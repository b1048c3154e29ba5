"""OlympiaHook: an Olympia catalog from an Airflow connection of type ``olympia``.

Connection fields: Host (the catalog URI); Login/Password (S3 access key id / secret); extra
``storage_options`` (JSON object passed to the storage, e.g. ``{"endpoint_url": ...,
"region": ...}``); extra ``spark_master`` (expiry, default local[2]). The extra
``catalog_uri`` of earlier versions is still read when Host is empty or equal to it, with a
deprecation warning; a connection whose Host and ``catalog_uri`` differ is refused.
"""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from airflow.sdk import Asset, BaseHook

from olympia.catalog.catalog import Catalog
from olympia.catalog.keys import ObjectRef, ObjectType
from olympia.exceptions import OlympiaError
from olympia_provider.assets import catalog_asset

KINDS = {"namespace": ObjectType.NAMESPACE, "table": ObjectType.TABLE, "view": ObjectType.VIEW}


def settings_from_connection(conn: Any) -> tuple[str, dict[str, Any]]:
    """(catalog URI, storage options) from a connection; secrets stay in the options only."""
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
    if conn.login:
        options.setdefault("key", conn.login)
    if conn.password:
        options.setdefault("secret", conn.password)
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
        """The catalog at its latest version."""
        uri, options = self.settings()
        return Catalog.open(uri, options)

    def test_connection(self) -> tuple[bool, str]:
        try:
            catalog = self.get_catalog()
        except (OlympiaError, ValueError) as exc:
            return False, str(exc)
        return True, f"Olympia catalog {catalog.uri} at version {catalog.version}"

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
